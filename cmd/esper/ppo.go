package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/esper-go/esper/internal/runplot"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nissa"
	"github.com/esper-go/esper/simic"
	"github.com/esper-go/esper/tamiyo"
)

// ppoConfig is what the ppo command's flags set.
type ppoConfig struct {
	rounds, envs, maxEpochs, blocks, baseChannels int
	trainSize, valSize, batch                     int
	hidden, gatHidden, gatHeads, headHidden       int
	checkpointEvery, minibatch                    int
	seed                                          uint64
	lr                                            float64
	out, checkpoint, runRoot, reward              string
	resume, quiet, capture                        bool
}

// ppoRound is one round's figures: the progress line, the plots and the
// checkpoint's history (see MarshalJSON).
type ppoRound struct {
	Round             int
	Return            float64
	Episodes          int
	Entropy           []float64
	KL                float64
	ExplainedVariance float64
	PolicyLoss        float64
	ValueLoss         float64
	EnvEpochsPerSec   float64
	Rollbacks         int
}

// ppoRoundJSON is ppoRound as JSON: NaN (a head with nothing to learn,
// a round without finished episodes) is null.
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
func (r ppoRound) MarshalJSON() ([]byte, error) {
	j := ppoRoundJSON{Round: r.Round, Return: nullable(r.Return), Episodes: r.Episodes, KL: nullable(r.KL),
		ExplainedVariance: nullable(r.ExplainedVariance), PolicyLoss: nullable(r.PolicyLoss), ValueLoss: nullable(r.ValueLoss),
		EnvEpochsPerSec: nullable(r.EnvEpochsPerSec), Rollbacks: r.Rollbacks}
	for _, v := range r.Entropy {
		j.Entropy = append(j.Entropy, nullable(v))
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (r *ppoRound) UnmarshalJSON(b []byte) error {
	var j ppoRoundJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = ppoRound{Round: j.Round, Return: fromNullable(j.Return), Episodes: j.Episodes, KL: fromNullable(j.KL),
		ExplainedVariance: fromNullable(j.ExplainedVariance), PolicyLoss: fromNullable(j.PolicyLoss), ValueLoss: fromNullable(j.ValueLoss),
		EnvEpochsPerSec: fromNullable(j.EnvEpochsPerSec), Rollbacks: j.Rollbacks}
	for _, v := range j.Entropy {
		r.Entropy = append(r.Entropy, fromNullable(v))
	}
	return nil
}

func ppoCmd(args []string, stdout, stderr io.Writer) error {
	c, err := parsePPO(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return runPPO(ctx, c, stdout)
}

func parsePPO(args []string, stderr io.Writer) (ppoConfig, error) {
	var c ppoConfig
	fs := flag.NewFlagSet("ppo", flag.ContinueOnError)
	fs.IntVar(&c.rounds, "rounds", 10, "PPO rounds; each round every environment runs --max-epochs epochs, then one update")
	fs.IntVar(&c.envs, "envs", 4, "lock-step environments")
	fs.IntVar(&c.maxEpochs, "max-epochs", simic.DefaultEsperMaxEpochs, "episode length in host epochs (the rollout length)")
	fs.IntVar(&c.blocks, "blocks", simic.DefaultEsperBlocks, "CNN host blocks, one slot per block (esper train --controller gnn needs the same --blocks)")
	fs.IntVar(&c.baseChannels, "base-channels", simic.DefaultEsperBaseChannels, "CNN host channels of the first block")
	fs.IntVar(&c.trainSize, "train-size", simic.DefaultEsperTrain, "synthetic training samples (shared by all environments)")
	fs.IntVar(&c.valSize, "val-size", simic.DefaultEsperVal, "synthetic validation samples")
	fs.IntVar(&c.batch, "batch", simic.DefaultEsperBatch, "host batch size")
	fs.IntVar(&c.hidden, "hidden", 64, "policy encoder and GraphSAGE width")
	fs.IntVar(&c.gatHidden, "gat-hidden", 32, "policy GAT width")
	fs.IntVar(&c.gatHeads, "gat-heads", 2, "policy attention heads")
	fs.IntVar(&c.headHidden, "head-hidden", 64, "policy head width")
	fs.IntVar(&c.minibatch, "minibatch", 0, "PPO minibatch size (0 = a quarter of the round's transitions, so the update takes several steps and KL is measured after the first)")
	fs.Float64Var(&c.lr, "lr", simic.DefaultLR, "policy Adam learning rate")
	fs.StringVar(&c.reward, "reward", "shaped", "reward mode: shaped, simplified or sparse")
	fs.Uint64Var(&c.seed, "seed", 42, "seed of the policy, the sampling, the hosts and the synthetic task")
	fs.StringVar(&c.out, "out", "", "policy file written at the end (default RUN_DIR/policy.safetensors), for esper train --controller gnn --policy FILE")
	fs.StringVar(&c.checkpoint, "checkpoint", "", "checkpoint directory (policy, optimizer, sampler and normaliser state, the environments' episodes: --resume continues the run exactly)")
	fs.IntVar(&c.checkpointEvery, "checkpoint-every", 5, "rounds between checkpoints (the last round is always checkpointed)")
	fs.BoolVar(&c.resume, "resume", false, "continue from the checkpoint in --checkpoint")
	fs.StringVar(&c.runRoot, "run-dir", "runs", "where the run directory (telemetry JSONL, ppo.png, the policy) is created")
	fs.BoolVar(&c.capture, "capture", false, "capture and replay the hosts' train steps")
	fs.BoolVar(&c.quiet, "quiet", false, "print only errors, warnings and the final result (no per-round progress lines)")
	if err := parseFlags(fs, args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.rounds <= 0 || c.envs <= 0 || c.maxEpochs <= 0:
		return c, errors.New("--rounds, --envs and --max-epochs must be > 0")
	case c.blocks < 2 || c.baseChannels <= 0 || c.trainSize <= 0 || c.valSize <= 0 || c.batch <= 0:
		return c, errors.New("--blocks must be ≥ 2; --base-channels, --train-size, --val-size and --batch > 0")
	case c.hidden <= 0 || c.gatHidden <= 0 || c.gatHeads <= 0 || c.headHidden <= 0:
		return c, errors.New("policy widths must be > 0")
	case c.minibatch < 0:
		return c, errors.New("--minibatch must be ≥ 0")
	case c.checkpointEvery <= 0:
		return c, errors.New("--checkpoint-every must be > 0")
	case c.resume && c.checkpoint == "":
		return c, errors.New("--resume needs --checkpoint DIR")
	case !(c.lr > 0) || math.IsInf(c.lr, 0):
		return c, fmt.Errorf("--lr %v must be finite and > 0", c.lr)
	}
	if _, err := simic.ParseRewardMode(c.reward); err != nil {
		return c, fmt.Errorf("--reward: %w", err)
	}
	return c, nil
}

func runPPO(ctx context.Context, c ppoConfig, stdout io.Writer) error {
	if err := checkPPOOutputs(c); err != nil {
		return err
	}
	var st ppoState
	if c.resume {
		var err error
		if st, err = loadPPOState(c.checkpoint); err != nil {
			return err
		}
		if len(st.Episodes) != c.envs {
			return fmt.Errorf("--resume: the checkpoint in %s has %d environments, --envs is %d", c.checkpoint, len(st.Episodes), c.envs)
		}
	}
	mode, _ := simic.ParseRewardMode(c.reward)
	rewarder, err := simic.NewRewarder(simic.RewardOptions{Mode: mode})
	if err != nil {
		return err
	}
	d, err := simic.NewSyntheticData(simic.SyntheticDataOptions{Train: c.trainSize, Val: c.valSize, Batch: c.batch, Seed: c.seed})
	if err != nil {
		return err
	}
	defer d.Close()
	envs := make([]*simic.EsperEnv, c.envs)
	defer func() {
		for _, e := range envs {
			if e != nil {
				e.Close()
			}
		}
	}()
	vec, err := simic.NewVecEnv(c.envs, func(i int) (simic.Env[simic.TamiyoObs], error) {
		o := simic.EsperEnvOptions{Data: d, Index: i, Seed: c.seed, MaxEpochs: c.maxEpochs,
			Blocks: c.blocks, BaseChannels: c.baseChannels, Rewarder: rewarder, Capture: c.capture}
		if c.resume {
			o.FirstEpisode = st.Episodes[i]
		}
		e, err := simic.NewEsperEnv(o)
		envs[i] = e
		return e, err
	})
	if err != nil {
		return err
	}
	ids := envs[0].Model().SlotIDs()
	leyline.SortSlotIDs(ids)
	slots, err := leyline.NewSlotConfig(ids...)
	if err != nil {
		return err
	}

	popts := tamiyo.PolicyOptions{Hidden: c.hidden, GATHidden: c.gatHidden, GATHeads: c.gatHeads, HeadHidden: c.headHidden, NoDropout: true, Seed: c.seed}
	var net *tamiyo.Policy
	if c.resume {
		if net, err = tamiyo.LoadPolicy(filepath.Join(c.checkpoint, ppoPolicyFile), popts, slots); err != nil {
			return fmt.Errorf("--resume: %w", err)
		}
	} else if net, err = tamiyo.NewPolicy(popts); err != nil {
		return err
	}
	pol, err := simic.NewTamiyoPolicy(net, simic.TamiyoPolicyOptions{})
	if err != nil {
		return err
	}
	mb := c.minibatch
	if mb == 0 {
		mb = max(1, c.envs*c.maxEpochs/4)
	}
	ppo, err := simic.NewPPO[simic.TamiyoObs](pol, vec.Spec(), simic.PPOOptions{LR: c.lr, Relevance: simic.TamiyoRelevance, Seed: c.seed, TotalUpdates: c.rounds, MinibatchSize: mb})
	if err != nil {
		return err
	}
	// Episodic rollouts: every round starts each environment at an
	// episode's start, which is what the checkpoint can rebuild.
	tr, err := simic.NewTrainer(ppo, vec, simic.TrainerOptions[simic.TamiyoObs]{Steps: c.maxEpochs, NormalizeRewards: true, EpisodicRollouts: true})
	if err != nil {
		return err
	}
	if c.resume {
		if err := restorePPO(c.checkpoint, st, tr); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "resumed from %s after round %d\n", c.checkpoint, st.Round)
	}

	hub := nissa.NewHub(nissa.HubOptions{})
	defer hub.Close(10 * time.Second)
	dirb, logNote, err := openPPORunDir(c.runRoot, st, c.resume, stdout)
	if err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	if err := hub.AddBackend(dirb); err != nil {
		return err
	}
	if c.resume {
		ev := leyline.NewEvent(leyline.EventCheckpointLoaded, &leyline.CheckpointLoadedPayload{Path: c.checkpoint, Source: "esper ppo --resume"})
		ev.Message = fmt.Sprintf("resumed after round %d from %s", st.Round, c.checkpoint)
		if logNote != "" {
			ev.Message += "; " + logNote
		}
		hub.Emit(ev)
	}
	var params int
	for _, p := range net.Parameters() {
		params += p.Value.Numel()
	}
	if !c.quiet {
		fmt.Fprintf(stdout, "esper ppo: %d rounds × %d envs × %d epochs, CNN host %d blocks (%d slots %v), policy %d parameters, reward %s\n",
			c.rounds, c.envs, c.maxEpochs, c.blocks, slots.Len(), slots.IDs(), params, mode)
	}

	left := newETA()
	for round := st.Round + 1; round <= c.rounds; round++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		start := time.Now()
		it, err := tr.Iterate()
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		r := summariseRound(round, it, c, time.Since(start), tr.Buffer().RollbackCount())
		st.History = append(st.History, r)
		eta := left.step(c.rounds - round)
		if !c.quiet {
			fmt.Fprintln(stdout, formatRound(r, c.rounds)+"  "+eta)
		}
		emitRound(hub, r)
		st.Round = round
		if c.checkpoint != "" && (round%c.checkpointEvery == 0 || round == c.rounds) {
			recordRunDir(hub, dirb, &st, stdout)
			if err := savePPO(c.checkpoint, net, slots, &st, tr, envs); err != nil {
				return err
			}
		}
	}
	out := c.out
	if out == "" {
		out = filepath.Join(dirb.Dir(), "policy.safetensors")
	}
	if err := tamiyo.SavePolicy(out, net, slots); err != nil {
		return err
	}
	if err := hub.Flush(ctx); err != nil {
		fmt.Fprintf(stdout, "warning: telemetry flush: %v\n", err)
	}
	if len(st.History) > 0 {
		if err := writePPOPlot(filepath.Join(dirb.Dir(), "ppo.png"), st.History); err != nil {
			return err
		}
	}
	// The environments train a 3×3 host at the host learning rate, held
	// constant: esper train needs those flags to give the policy the
	// host it learned on (its own defaults are the impaired demo host).
	fmt.Fprintf(stdout, "policy: %s (load with: esper train --controller gnn --blocks %d --base-channels %d --kernel 3 --lr %g --schedule constant --policy %s)\nrun directory: %s (events.jsonl, ppo.png)\n",
		out, c.blocks, c.baseChannels, leyline.DefaultHostLR, out, dirb.Dir())
	return nil
}

// checkPPOOutputs checks, before any work, that the run can write its
// run directory, checkpoints and policy (the directories first: --out
// may name a file in one of them).
func checkPPOOutputs(c ppoConfig) error {
	if err := checkOutputDir("--run-dir", c.runRoot, true); err != nil {
		return err
	}
	if c.checkpoint != "" {
		// A resumed run reads the directory: it must be there already.
		if err := checkOutputDir("--checkpoint", c.checkpoint, !c.resume); err != nil {
			return err
		}
	}
	if c.out != "" {
		return checkOutputFile("--out", c.out)
	}
	return nil
}

func summariseRound(round int, it *simic.Iteration, c ppoConfig, took time.Duration, rollbacks int) ppoRound {
	r := ppoRound{Round: round, Episodes: len(it.Episodes), Rollbacks: rollbacks, Return: math.NaN()}
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
	r.EnvEpochsPerSec = float64(c.envs*c.maxEpochs) / took.Seconds()
	return r
}

// headAbbrev shortens the head names for the progress line.
var headAbbrev = [leyline.NumActionHeads]string{"slot", "bp", "style", "tempo", "αtgt", "αspd", "αcrv", "op"}

func formatRound(r ppoRound, rounds int) string {
	var ent []string
	for h, v := range r.Entropy {
		ent = append(ent, fmt.Sprintf("%s %.2f", headAbbrev[h], v))
	}
	return fmt.Sprintf("round %3d/%d  return %+8.3f (%d eps)  entropy [%s]  KL %.2e  EV %+.3f  %.1f env-epochs/s  rollbacks %d",
		r.Round, rounds, r.Return, r.Episodes, strings.Join(ent, " "), r.KL, r.ExplainedVariance, r.EnvEpochsPerSec, r.Rollbacks)
}

func emitRound(hub *nissa.Hub, r ppoRound) {
	m := []leyline.Metric{
		{Name: "simic.ppo.return_mean", Value: r.Return},
		{Name: "simic.ppo.approx_kl", Value: r.KL},
		{Name: "simic.ppo.explained_variance", Value: r.ExplainedVariance},
		{Name: "simic.ppo.policy_loss", Value: r.PolicyLoss},
		{Name: "simic.ppo.value_loss", Value: r.ValueLoss},
		{Name: "simic.env_epochs_per_second", Value: r.EnvEpochsPerSec},
		{Name: "simic.rollbacks", Value: float64(r.Rollbacks), Unit: "count"},
	}
	for h, v := range r.Entropy {
		m = append(m, leyline.Metric{Name: "simic.ppo.entropy." + leyline.HeadNames[h], Value: v})
	}
	ev := leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: "simic", Metrics: m})
	ev.Message = fmt.Sprintf("simic.ppo.round %d", r.Round)
	hub.Emit(ev)
}

// writePPOPlot writes the rounds' figures as ppo.png (runplot.WritePPO).
func writePPOPlot(path string, h []ppoRound) error {
	rounds := make([]runplot.Round, len(h))
	for i, r := range h {
		rounds[i] = runplot.Round{Round: r.Round, Return: r.Return, Entropy: r.Entropy, KL: r.KL, ExplainedVariance: r.ExplainedVariance,
			PolicyLoss: r.PolicyLoss, ValueLoss: r.ValueLoss, EnvEpochsPerSec: r.EnvEpochsPerSec}
	}
	return runplot.WritePPO(path, rounds)
}
