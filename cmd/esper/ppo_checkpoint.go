package main

// The checkpoint of `esper ppo`: what a resumed run needs to continue bit
// for bit, and how it is written so that kill -9 never leaves a torn one.

import (
	"context"
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
	"github.com/esper-go/esper/nissa"
	"github.com/esper-go/esper/simic"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor/safetensors"
)

// Checkpoint files inside --checkpoint.
const (
	ppoPolicyFile    = "policy.safetensors"
	ppoOptimizerFile = "optimizer.safetensors"
	ppoStateFile     = "state.json"
	// ppoStagingDir is where a checkpoint is written before it is moved
	// into place (see savePPO).
	ppoStagingDir = ".next"
)

// ppoCheckpointFiles are a checkpoint's files in the order they are moved
// into place: the state file, which commits them, last.
var ppoCheckpointFiles = []string{ppoPolicyFile, ppoOptimizerFile, ppoStateFile}

// ppoStateVersion is the version of the state file. Version 2 added the
// trainer's generator and skip count and the environments' episodes;
// a version-1 state (no version field) cannot be continued exactly.
const ppoStateVersion = 2

// ppoState is the checkpoint's JSON part: with the policy's parameters and
// the optimizer's state it is everything a run carries from one round to
// the next. The environments stand at the start of an episode between
// rounds (simic.TrainerOptions.EpisodicRollouts), so each needs only its
// episode's number (simic.EsperEnvOptions.FirstEpisode); the data's
// order is a function of the epoch.
type ppoState struct {
	Version int `json:"version"`
	Round   int `json:"round"` // rounds completed
	simic.TrainerState
	// Episodes are the environments' episodes, the ones the next round
	// starts with.
	Episodes []int      `json:"episodes"`
	History  []ppoRound `json:"history"`
	// RunDir is the run's telemetry directory and EventsBytes the length
	// of its events.jsonl when the checkpoint was written (flushed just
	// before): a resume continues that directory, its log cut back to
	// this length. Absent in checkpoints written before.
	RunDir      string `json:"run_dir,omitempty"`
	EventsBytes int64  `json:"events_bytes,omitempty"`
}

// ppoSaveHook, when set by a test, runs after each step of savePPO; an
// error stops the save there, as kill -9 would.
var ppoSaveHook func(step string) error

func ppoSaveStep(step string) error {
	if ppoSaveHook == nil {
		return nil
	}
	return ppoSaveHook(step)
}

// savePPO writes the checkpoint of the rounds in st. Its three files are
// written (each atomically) into dir/.next, where the state file, written
// last, commits them; then they are renamed into dir, the state file
// last. Whenever the process dies, dir holds a whole checkpoint, either
// the previous one or, once .next/state.json exists, the new one after
// recoverPPOCheckpoint has finished the move.
func savePPO(dir string, net *tamiyo.Policy, slots leyline.SlotConfig, st *ppoState, tr *simic.Trainer[simic.TamiyoObs], envs []*simic.EsperEnv) error {
	if err := recoverPPOCheckpoint(dir); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	ts, err := tr.State()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	st.Version, st.TrainerState, st.Episodes = ppoStateVersion, ts, make([]int, len(envs))
	for i, e := range envs {
		st.Episodes[i] = e.Episode()
	}
	js, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return fmt.Errorf("checkpoint state: %w", err)
	}
	next := filepath.Join(dir, ppoStagingDir)
	if err := os.MkdirAll(next, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := tamiyo.SavePolicy(filepath.Join(next, ppoPolicyFile), net, slots); err != nil {
		return err
	}
	if err := ppoSaveStep("staged " + ppoPolicyFile); err != nil {
		return err
	}
	sd := tr.PPO().Optimizer().StateDict()
	err = atomicfile.Write(filepath.Join(next, ppoOptimizerFile), func(w io.Writer) error {
		return safetensors.Encode(w, sd, nil)
	}, atomicfile.Options{})
	if err != nil {
		return fmt.Errorf("checkpoint optimizer: %w", err)
	}
	if err := ppoSaveStep("staged " + ppoOptimizerFile); err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(filepath.Join(next, ppoStateFile), js); err != nil {
		return fmt.Errorf("checkpoint state: %w", err)
	}
	if err := ppoSaveStep("staged " + ppoStateFile); err != nil {
		return err
	}
	if err := movePPOCheckpoint(dir); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// movePPOCheckpoint moves the committed checkpoint in dir/.next into dir,
// the files still there, in order, and removes .next.
func movePPOCheckpoint(dir string) error {
	next := filepath.Join(dir, ppoStagingDir)
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

// recoverPPOCheckpoint leaves dir holding one whole checkpoint after an
// interrupted savePPO: it finishes moving a committed one (.next with its
// state file) and drops an uncommitted one.
func recoverPPOCheckpoint(dir string) error {
	next := filepath.Join(dir, ppoStagingDir)
	_, err := os.Stat(filepath.Join(next, ppoStateFile))
	switch {
	case err == nil:
		return movePPOCheckpoint(dir)
	case errors.Is(err, fs.ErrNotExist):
		return os.RemoveAll(next)
	}
	return err
}

// loadPPOState reads the checkpoint's state, first finishing or dropping
// an interrupted save.
func loadPPOState(dir string) (ppoState, error) {
	var st ppoState
	if err := recoverPPOCheckpoint(dir); err != nil {
		return st, fmt.Errorf("--resume: %w", err)
	}
	js, err := os.ReadFile(filepath.Join(dir, ppoStateFile))
	if err != nil {
		return st, fmt.Errorf("--resume: %w", err)
	}
	if err := strictjson.NoDuplicateKeys(js); err != nil {
		return st, fmt.Errorf("--resume: %s: %w", ppoStateFile, err)
	}
	if err := json.Unmarshal(js, &st); err != nil {
		return st, fmt.Errorf("--resume: %s: %w", ppoStateFile, err)
	}
	if st.Version != ppoStateVersion {
		return st, fmt.Errorf("--resume: %s is of version %d, not %d: it was written by an esper ppo that did not save the sampler's and the environments' state, so its run cannot be continued exactly (start it again without --resume)",
			filepath.Join(dir, ppoStateFile), st.Version, ppoStateVersion)
	}
	if err := st.check(); err != nil {
		return st, fmt.Errorf("--resume: %s: %w", filepath.Join(dir, ppoStateFile), err)
	}
	return st, nil
}

// maxPPORounds bounds a checkpoint's round counter: far beyond any run,
// small enough that no count derived from it overflows.
const maxPPORounds = 1 << 30

// check validates a state read from disk beyond its syntax: the round
// counter, the history (one entry per completed round, in order, each
// figure finite or NaN and its counts non-negative) and the episode
// numbers. The trainer's own part is checked by simic's LoadState.
func (st *ppoState) check() error {
	switch {
	case st.Round < 0 || st.Round > maxPPORounds:
		return fmt.Errorf("round %d outside [0, %d]", st.Round, maxPPORounds)
	case len(st.History) != st.Round:
		return fmt.Errorf("history of %d rounds for %d completed rounds", len(st.History), st.Round)
	}
	for i, r := range st.History {
		if r.Round != i+1 {
			return fmt.Errorf("history entry %d is round %d, want %d", i, r.Round, i+1)
		}
		if r.Episodes < 0 || r.Rollbacks < 0 {
			return fmt.Errorf("round %d: negative episodes %d or rollbacks %d", r.Round, r.Episodes, r.Rollbacks)
		}
		if len(r.Entropy) > leyline.NumActionHeads {
			return fmt.Errorf("round %d: %d head entropies, the policy has %d heads", r.Round, len(r.Entropy), leyline.NumActionHeads)
		}
		for _, v := range r.figures() {
			if math.IsInf(v, 0) {
				return fmt.Errorf("round %d: an infinite figure", r.Round)
			}
		}
	}
	if st.EventsBytes < 0 {
		return fmt.Errorf("events_bytes %d is negative", st.EventsBytes)
	}
	for i, e := range st.Episodes {
		if e < 0 || e > maxPPORounds {
			return fmt.Errorf("environment %d at episode %d", i, e)
		}
	}
	return nil
}

// restorePPO loads the checkpoint's optimizer state and st's trainer
// state into tr.
func restorePPO(dir string, st ppoState, tr *simic.Trainer[simic.TamiyoObs]) error {
	f, err := safetensors.ReadFile(filepath.Join(dir, ppoOptimizerFile))
	if err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	if err := tr.PPO().Optimizer().LoadStateDict(f.Tensors); err != nil {
		return fmt.Errorf("--resume: optimizer: %w", err)
	}
	if err := tr.LoadState(st.TrainerState); err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	return nil
}

// figures returns the round's floating-point figures.
func (r ppoRound) figures() []float64 {
	return append([]float64{r.Return, r.KL, r.ExplainedVariance, r.PolicyLoss, r.ValueLoss, r.EnvEpochsPerSec}, r.Entropy...)
}

// openPPORunDir returns the run's telemetry directory: on a resume whose
// checkpoint names one, that directory continued (continueRunDir);
// otherwise a new one under root.
func openPPORunDir(root string, st ppoState, resume bool, stdout io.Writer) (*nissa.DirBackend, string, error) {
	if !resume || st.RunDir == "" {
		d, err := nissa.NewDirBackend(root, nissa.DirOptions{})
		return d, "", err
	}
	return continueRunDir(root, st.RunDir, st.EventsBytes, stdout)
}

// recordRunDir flushes the telemetry and records the run directory and
// its log's length in st, before a checkpoint is written.
func recordRunDir(hub *nissa.Hub, d *nissa.DirBackend, st *ppoState, stdout io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hub.Flush(ctx); err != nil {
		fmt.Fprintf(stdout, "warning: telemetry flush before the checkpoint of round %d: %v\n", st.Round, err)
	}
	if abs, err := filepath.Abs(d.Dir()); err == nil {
		st.RunDir = abs
	}
	if fi, err := os.Stat(d.Path()); err == nil {
		st.EventsBytes = fi.Size()
	}
}
