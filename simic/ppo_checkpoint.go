package simic

// The checkpoint of a PPO run over Esper environments (what `esper ppo
// --checkpoint` writes): what a resumed run needs to continue bit for
// bit, and how it is written so that kill -9 never leaves a torn one.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/esper-go/esper/internal/atomicfile"
	"github.com/esper-go/esper/internal/strictjson"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

// The files of a PPO checkpoint directory.
const (
	// PPOPolicyFile is the policy (tamiyo.SavePolicy's format: esper
	// train --controller gnn --policy loads it as it is).
	PPOPolicyFile = "policy.safetensors"
	// PPOOptimizerFile is the policy optimizer's state dict.
	PPOOptimizerFile = "optimizer.safetensors"
	// PPOStateFile is the PPOCheckpoint as JSON; it commits the others.
	PPOStateFile = "state.json"
	// PPOStagingDir is where a checkpoint is written before it is moved
	// into place (see SavePPOCheckpoint).
	PPOStagingDir = ".next"
)

// ppoCheckpointFiles are a checkpoint's files in the order they are moved
// into place: the state file, which commits them, last.
var ppoCheckpointFiles = []string{PPOPolicyFile, PPOOptimizerFile, PPOStateFile}

// PPOCheckpointVersion is the version of the state file. Version 2 added
// the trainer's generator and skip count and the environments' episodes;
// a version-1 state (no version field) cannot be continued exactly.
const PPOCheckpointVersion = 2

// MaxPPORounds bounds a checkpoint's round counter and episode numbers:
// far beyond any run, small enough that no count derived from them
// overflows.
const MaxPPORounds = 1 << 30

// ErrPPOCheckpoint is wrapped by the errors of a PPO checkpoint that
// cannot be continued: of another version, out of range, or of another
// run's shape.
var ErrPPOCheckpoint = errors.New("invalid PPO checkpoint")

// PPOCheckpoint is a PPO checkpoint's JSON part (PPOStateFile): with the
// policy's parameters and the optimizer's state it is everything a run
// over Esper environments carries from one round to the next. The
// environments stand at the start of an episode between rounds
// (TrainerOptions.EpisodicRollouts), so each needs only its episode's
// number (EsperEnvOptions.FirstEpisode); the data's order is a function
// of the epoch.
type PPOCheckpoint struct {
	// Version is PPOCheckpointVersion (SavePPOCheckpoint sets it).
	Version int `json:"version"`
	// Round is the number of rounds completed.
	Round int `json:"round"`
	// TrainerState is the trainer's counters, generator and normalisers
	// (SavePPOCheckpoint sets it).
	TrainerState
	// Episodes are the environments' episodes, the ones the next round
	// starts with (SavePPOCheckpoint sets them).
	Episodes []int `json:"episodes"`
	// History has one entry per completed round, in order.
	History []PPORound `json:"history"`
	// RunDir is the run's telemetry directory and EventsBytes the length
	// of its event log when the checkpoint was written: a resume
	// continues that directory, its log cut back to this length. Both
	// are the caller's to fill in (empty and 0 when it keeps none).
	RunDir      string `json:"run_dir,omitempty"`
	EventsBytes int64  `json:"events_bytes,omitempty"`
}

// PPORound is one PPO round's figures, as a progress line prints them
// and a checkpoint keeps them. NaN (a head with nothing to learn, a round
// without finished episodes) is written as null in JSON.
type PPORound struct {
	// Round is the round's number, from 1.
	Round int
	// Return is the mean return of the episodes that ended in the round
	// (NaN when none did), Episodes their number.
	Return   float64
	Episodes int
	// Entropy, KL, ExplainedVariance, PolicyLoss and ValueLoss are the
	// update's (UpdateStats: Entropy per head, KL its ApproxKL).
	Entropy           []float64
	KL                float64
	ExplainedVariance float64
	PolicyLoss        float64
	ValueLoss         float64
	// EnvEpochsPerSec is the round's environment steps over its wall
	// time.
	EnvEpochsPerSec float64
	// Rollbacks counts the governor rollbacks of the round's rollout.
	Rollbacks int
	// HostSyncsPerEnvEpoch is the round's host syncs (the waits for its
	// devices: tensor.HostSyncs, summed over them; the rollout and the
	// update) over its environment steps: 0 on the CPU, which never
	// waits.
	HostSyncsPerEnvEpoch float64
}

// NewPPORound summarises round number round: its iteration, its envSteps
// environment steps (env-epochs) taken in took, and its rollbacks.
func NewPPORound(round int, it *Iteration, envSteps int, took time.Duration, rollbacks int) PPORound {
	r := PPORound{Round: round, Episodes: len(it.Episodes), Rollbacks: rollbacks, Return: math.NaN()}
	if len(it.Episodes) > 0 {
		r.Return = 0
		for _, e := range it.Episodes {
			r.Return += e.Return
		}
		r.Return /= float64(len(it.Episodes))
	}
	if u := it.Update; u != nil {
		r.Entropy, r.KL, r.ExplainedVariance = u.Entropy, u.ApproxKL, u.ExplainedVariance
		r.PolicyLoss, r.ValueLoss = u.PolicyLoss, u.ValueLoss
	}
	r.EnvEpochsPerSec = float64(envSteps) / took.Seconds()
	return r
}

// ppoRoundJSON is PPORound as JSON.
type ppoRoundJSON struct {
	Round             int        `json:"round"`
	Return            *float64   `json:"return"`
	Episodes          int        `json:"episodes"`
	Entropy           []*float64 `json:"entropy"`
	KL                *float64   `json:"kl"`
	ExplainedVariance *float64   `json:"explained_variance"`
	PolicyLoss        *float64   `json:"policy_loss"`
	ValueLoss         *float64   `json:"value_loss"`
	EnvEpochsPerSec   *float64   `json:"eps"`
	Rollbacks         int        `json:"rollbacks"`
	HostSyncs         float64    `json:"host_syncs_per_env_epoch,omitempty"`
}

func nullable(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func fromNullable(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}

// MarshalJSON writes non-finite figures as null.
func (r PPORound) MarshalJSON() ([]byte, error) {
	j := ppoRoundJSON{Round: r.Round, Return: nullable(r.Return), Episodes: r.Episodes, KL: nullable(r.KL),
		ExplainedVariance: nullable(r.ExplainedVariance), PolicyLoss: nullable(r.PolicyLoss), ValueLoss: nullable(r.ValueLoss),
		EnvEpochsPerSec: nullable(r.EnvEpochsPerSec), Rollbacks: r.Rollbacks, HostSyncs: r.HostSyncsPerEnvEpoch}
	for _, v := range r.Entropy {
		j.Entropy = append(j.Entropy, nullable(v))
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON wrote (null as NaN).
func (r *PPORound) UnmarshalJSON(b []byte) error {
	var j ppoRoundJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = PPORound{Round: j.Round, Return: fromNullable(j.Return), Episodes: j.Episodes, KL: fromNullable(j.KL),
		ExplainedVariance: fromNullable(j.ExplainedVariance), PolicyLoss: fromNullable(j.PolicyLoss), ValueLoss: fromNullable(j.ValueLoss),
		EnvEpochsPerSec: fromNullable(j.EnvEpochsPerSec), Rollbacks: j.Rollbacks, HostSyncsPerEnvEpoch: j.HostSyncs}
	for _, v := range j.Entropy {
		r.Entropy = append(r.Entropy, fromNullable(v))
	}
	return nil
}

// figures returns the round's floating-point figures.
func (r PPORound) figures() []float64 {
	return append([]float64{r.Return, r.KL, r.ExplainedVariance, r.PolicyLoss, r.ValueLoss, r.EnvEpochsPerSec}, r.Entropy...)
}

// Check validates a checkpoint read from disk beyond its syntax: the
// version, the round counter, the history (one entry per completed round,
// in order, each figure finite or NaN and its counts non-negative), the
// event-log length and the episode numbers. Its errors wrap
// ErrPPOCheckpoint. The trainer's own part is checked by
// Trainer.LoadState.
func (c *PPOCheckpoint) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrPPOCheckpoint, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Version != PPOCheckpointVersion:
		return bad("version %d, not %d: it was written by a PPO that did not save the sampler's and the environments' state, so its run cannot be continued exactly (start it again)",
			c.Version, PPOCheckpointVersion)
	case c.Round < 0 || c.Round > MaxPPORounds:
		return bad("round %d outside [0, %d]", c.Round, MaxPPORounds)
	case len(c.History) != c.Round:
		return bad("history of %d rounds for %d completed rounds", len(c.History), c.Round)
	}
	for i, r := range c.History {
		if r.Round != i+1 {
			return bad("history entry %d is round %d, want %d", i, r.Round, i+1)
		}
		if r.Episodes < 0 || r.Rollbacks < 0 {
			return bad("round %d: negative episodes %d or rollbacks %d", r.Round, r.Episodes, r.Rollbacks)
		}
		if !(r.HostSyncsPerEnvEpoch >= 0) || math.IsInf(r.HostSyncsPerEnvEpoch, 0) {
			return bad("round %d: host syncs per env-epoch %v", r.Round, r.HostSyncsPerEnvEpoch)
		}
		if len(r.Entropy) > leyline.NumActionHeads {
			return bad("round %d: %d head entropies, the policy has %d heads", r.Round, len(r.Entropy), leyline.NumActionHeads)
		}
		for _, v := range r.figures() {
			if math.IsInf(v, 0) {
				return bad("round %d: an infinite figure", r.Round)
			}
		}
	}
	if c.EventsBytes < 0 {
		return bad("events_bytes %d is negative", c.EventsBytes)
	}
	for i, e := range c.Episodes {
		if e < 0 || e > MaxPPORounds {
			return bad("environment %d at episode %d", i, e)
		}
	}
	return nil
}

// ppoSaveHook, when set by a test, runs after each step of
// SavePPOCheckpoint; an error stops the save there, as kill -9 would.
var ppoSaveHook func(step string) error

func ppoSaveStep(step string) error {
	if ppoSaveHook == nil {
		return nil
	}
	return ppoSaveHook(step)
}

// SavePPOCheckpoint writes the checkpoint of c's rounds into dir: the
// policy net (for slots), the optimizer of tr's PPO and c, with c's
// Version, TrainerState (tr.State) and Episodes (each environment's
// Episode) set first. The policy and the optimizer may be on any device:
// they are read back in one copy per device and dtype.
//
// Its three files are written (each atomically) into dir/PPOStagingDir,
// where the state file, written last, commits them; then they are
// renamed into dir, the state file last. Whenever the process dies, dir
// holds a whole checkpoint, either the previous one or, once the staged
// state file exists, the new one after RecoverPPOCheckpoint has finished
// the move (LoadPPOCheckpoint and the next save call it).
func SavePPOCheckpoint(dir string, net *tamiyo.Policy, slots leyline.SlotConfig, c *PPOCheckpoint, tr *Trainer[TamiyoObs], envs []*EsperEnv) error {
	if err := RecoverPPOCheckpoint(dir); err != nil {
		return fmt.Errorf("simic: checkpoint: %w", err)
	}
	ts, err := tr.State()
	if err != nil {
		return fmt.Errorf("simic: checkpoint: %w", err)
	}
	c.Version, c.TrainerState, c.Episodes = PPOCheckpointVersion, ts, make([]int, len(envs))
	for i, e := range envs {
		c.Episodes[i] = e.Episode()
	}
	js, err := json.MarshalIndent(c, "", " ")
	if err != nil {
		return fmt.Errorf("simic: checkpoint state: %w", err)
	}
	sd, err := hostStateDict(tr.PPO().Optimizer().StateDict())
	if err != nil {
		return fmt.Errorf("simic: checkpoint optimizer: %w", err)
	}
	next := filepath.Join(dir, PPOStagingDir)
	if err := os.MkdirAll(next, 0o755); err != nil {
		return fmt.Errorf("simic: checkpoint: %w", err)
	}
	if err := tamiyo.SavePolicy(filepath.Join(next, PPOPolicyFile), net, slots); err != nil {
		return err
	}
	if err := ppoSaveStep("staged " + PPOPolicyFile); err != nil {
		return err
	}
	err = atomicfile.Write(filepath.Join(next, PPOOptimizerFile), func(w io.Writer) error {
		return safetensors.Encode(w, sd, nil)
	}, atomicfile.Options{})
	if err != nil {
		return fmt.Errorf("simic: checkpoint optimizer: %w", err)
	}
	if err := ppoSaveStep("staged " + PPOOptimizerFile); err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(filepath.Join(next, PPOStateFile), js); err != nil {
		return fmt.Errorf("simic: checkpoint state: %w", err)
	}
	if err := ppoSaveStep("staged " + PPOStateFile); err != nil {
		return err
	}
	if err := movePPOCheckpoint(dir); err != nil {
		return fmt.Errorf("simic: checkpoint: %w", err)
	}
	return nil
}

// hostStateDict returns sd with its device tensors copied to the host
// (nn.HostCopies: one copy per device and dtype).
func hostStateDict(sd map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	keys := make([]string, 0, len(sd))
	ts := make([]*tensor.Tensor, 0, len(sd))
	for k, t := range sd {
		keys = append(keys, k)
		ts = append(ts, t)
	}
	hs, err := nn.HostCopies(ts)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*tensor.Tensor, len(sd))
	for i, k := range keys {
		out[k] = hs[i]
	}
	return out, nil
}

// stateDictTo returns sd with every tensor on dev (copies towards the
// device: a module's or an optimizer's LoadStateDict takes its state on
// its own device).
func stateDictTo(sd map[string]*tensor.Tensor, dev tensor.Device) (map[string]*tensor.Tensor, error) {
	out := make(map[string]*tensor.Tensor, len(sd))
	for k, t := range sd {
		var err error
		if out[k], err = toDevice(t, dev); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// movePPOCheckpoint moves the committed checkpoint in dir/.next into dir,
// the files still there, in order, and removes .next.
func movePPOCheckpoint(dir string) error {
	next := filepath.Join(dir, PPOStagingDir)
	for _, f := range ppoCheckpointFiles {
		err := os.Rename(filepath.Join(next, f), filepath.Join(dir, f))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // moved before an interruption
		case err != nil:
			return err
		}
		if err := atomicfile.SyncDir(dir); err != nil {
			return err
		}
		if err := ppoSaveStep("moved " + f); err != nil {
			return err
		}
	}
	return os.RemoveAll(next)
}

// RecoverPPOCheckpoint leaves dir holding one whole checkpoint after an
// interrupted SavePPOCheckpoint: it finishes moving a committed one (the
// staging directory with its state file) and drops an uncommitted one.
func RecoverPPOCheckpoint(dir string) error {
	next := filepath.Join(dir, PPOStagingDir)
	_, err := os.Stat(filepath.Join(next, PPOStateFile))
	switch {
	case err == nil:
		return movePPOCheckpoint(dir)
	case errors.Is(err, fs.ErrNotExist):
		return os.RemoveAll(next)
	}
	return err
}

// LoadPPOCheckpoint reads the checkpoint state in dir, first finishing or
// dropping an interrupted save (RecoverPPOCheckpoint): a file with a key
// given twice, of another version or out of range (Check) is refused.
func LoadPPOCheckpoint(dir string) (PPOCheckpoint, error) {
	var c PPOCheckpoint
	if err := RecoverPPOCheckpoint(dir); err != nil {
		return c, fmt.Errorf("simic: checkpoint %s: %w", dir, err)
	}
	path := filepath.Join(dir, PPOStateFile)
	js, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("simic: checkpoint: %w", err)
	}
	if err := strictjson.NoDuplicateKeys(js); err != nil {
		return c, fmt.Errorf("simic: checkpoint %s: %w", path, err)
	}
	if err := json.Unmarshal(js, &c); err != nil {
		return c, fmt.Errorf("simic: checkpoint %s: %w", path, err)
	}
	if err := c.Check(); err != nil {
		return c, fmt.Errorf("simic: checkpoint %s: %w", path, err)
	}
	return c, nil
}

// LoadPPOCheckpointPolicy loads the checkpoint's policy in dir with
// tamiyo.LoadPolicy: options o (on o.Device) and slots must be those it
// was written with, or the error, wrapping tamiyo.ErrCheckpointMismatch,
// names both.
func LoadPPOCheckpointPolicy(dir string, o tamiyo.PolicyOptions, slots leyline.SlotConfig) (*tamiyo.Policy, error) {
	return tamiyo.LoadPolicy(filepath.Join(dir, PPOPolicyFile), o, slots)
}

// RestorePPOCheckpoint loads the checkpoint's optimizer state in dir and
// c's trainer state into tr, whose policy holds the checkpoint's
// parameters (LoadPPOCheckpointPolicy) on any device.
func RestorePPOCheckpoint(dir string, c PPOCheckpoint, tr *Trainer[TamiyoObs]) error {
	f, err := safetensors.ReadFile(filepath.Join(dir, PPOOptimizerFile))
	if err != nil {
		return fmt.Errorf("simic: checkpoint: %w", err)
	}
	opt := tr.PPO().Optimizer()
	sd, err := stateDictTo(f.Tensors, opt.Arena().Device())
	if err != nil {
		return fmt.Errorf("simic: checkpoint optimizer: %w", err)
	}
	if err := opt.LoadStateDict(sd); err != nil {
		return fmt.Errorf("simic: checkpoint optimizer: %w", err)
	}
	if err := tr.LoadState(c.TrainerState); err != nil {
		return fmt.Errorf("simic: checkpoint: %w", err)
	}
	return nil
}
