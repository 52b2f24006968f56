package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/esper-go/esper/internal/runplot"
	kdevice "github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nissa"
	"github.com/esper-go/esper/simic"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
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
	device, devices                               string
	resume, quiet, capture                        bool
	ui                                            string // --ui (ppo_ui.go)
	// devs are the parsed and opened --device or --devices.
	devs []tensor.Device
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
	fs.StringVar(&c.device, "device", "cpu", "where the policy and every environment's host compute: cpu, sim or sim:N (the strict simulated accelerator: the CPU's kernels, every host read explicit and counted, the same policy bit for bit), or cuda[:N] (a -tags cuda build)")
	fs.StringVar(&c.ui, "ui", "", uiFlagUsage)
	fs.StringVar(&c.devices, "devices", "", "comma-separated distinct devices (e.g. sim:0,sim:1) in place of --device: the environments spread over them round-robin, the policy on the first")
	if err := parseFlags(fs, args); err != nil {
		return c, err
	}
	var err error
	if c.devs, err = ppoDevices(fs, c.device, c.devices); err != nil {
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
	mode, _ := simic.ParseRewardMode(c.reward)
	o := simic.EsperPPOOptions{Devices: c.devs, Rounds: c.rounds, Envs: c.envs, MaxEpochs: c.maxEpochs, Blocks: c.blocks, BaseChannels: c.baseChannels,
		Train: c.trainSize, Val: c.valSize, Batch: c.batch, MinibatchSize: c.minibatch, LR: c.lr, Reward: mode, Seed: c.seed, Capture: c.capture,
		Policy: tamiyo.PolicyOptions{Hidden: c.hidden, GATHidden: c.gatHidden, GATHeads: c.gatHeads, HeadHidden: c.headHidden}}
	if c.resume {
		o.Resume = c.checkpoint
	}
	r, err := simic.NewEsperPPO(o)
	if err != nil {
		if c.resume {
			return fmt.Errorf("--resume: %w", err)
		}
		return err
	}
	defer r.Close()
	st := &r.State
	if c.resume {
		fmt.Fprintf(stdout, "resumed from %s after round %d\n", c.checkpoint, st.Round)
	}

	hub := nissa.NewHub(nissa.HubOptions{})
	defer hub.Close(10 * time.Second)
	dirb, logNote, err := openPPORunDir(c.runRoot, *st, c.resume, stdout)
	if err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	if err := hub.AddBackend(dirb); err != nil {
		return err
	}
	stopUI, err := startPPOUI(c, hub, dirb, stdout)
	if err != nil {
		return err
	}
	defer stopUI()
	if c.resume {
		ev := leyline.NewEvent(leyline.EventCheckpointLoaded, &leyline.CheckpointLoadedPayload{Path: c.checkpoint, Source: "esper ppo --resume"})
		ev.Message = fmt.Sprintf("resumed after round %d from %s", st.Round, c.checkpoint)
		if logNote != "" {
			ev.Message += "; " + logNote
		}
		hub.Emit(ev)
	}
	var params int
	for _, p := range r.Net.Parameters() {
		params += p.Value.Numel()
	}
	if !c.quiet {
		fmt.Fprintf(stdout, "esper ppo: %d rounds × %d envs × %d epochs, CNN host %d blocks (%d slots %v), policy %d parameters, reward %s\n",
			c.rounds, c.envs, c.maxEpochs, c.blocks, r.Slots.Len(), r.Slots.IDs(), params, mode)
		var per []string
		for i, n := range r.EnvsPerDevice() {
			role, envs := "", "envs"
			if i == 0 {
				role = "policy, "
			}
			if n == 1 {
				envs = "env"
			}
			per = append(per, fmt.Sprintf("%v (%s%d %s)", c.devs[i], role, n, envs))
		}
		fmt.Fprintf(stdout, "devices: %s\n", strings.Join(per, ", "))
	}

	left := newETA()
	for round := st.Round + 1; round <= c.rounds; round++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		rr, err := r.Round()
		if err != nil {
			return err
		}
		eta := left.step(c.rounds - round)
		if !c.quiet {
			fmt.Fprintln(stdout, formatRound(rr, c.rounds)+"  "+eta)
		}
		emitRound(hub, rr)
		if c.checkpoint != "" && (round%c.checkpointEvery == 0 || round == c.rounds) {
			recordRunDir(hub, dirb, st, stdout)
			if err := r.SaveCheckpoint(c.checkpoint); err != nil {
				return err
			}
		}
	}
	out := c.out
	if out == "" {
		out = filepath.Join(dirb.Dir(), "policy.safetensors")
	}
	if err := r.SavePolicy(out); err != nil {
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

// ppoDevices parses and opens --device, or --devices when given (then
// --device must not be), refusing a malformed or unknown device, one
// this build cannot open and a device given twice, each in one line.
func ppoDevices(fs *flag.FlagSet, device, devices string) ([]tensor.Device, error) {
	flagName, names := "--device", []string{device}
	if devices != "" {
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "device" })
		if explicit {
			return nil, errors.New("give --device or --devices, not both")
		}
		flagName, names = "--devices", strings.Split(devices, ",")
	}
	var devs []tensor.Device
	for _, name := range names {
		d, err := kdevice.Parse(name)
		if err == nil {
			_, err = kdevice.OpenDevice(d)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flagName, err)
		}
		if slices.Contains(devs, d) {
			return nil, fmt.Errorf("%s %s: %v is given twice", flagName, devices, d)
		}
		devs = append(devs, d)
	}
	return devs, nil
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

// headAbbrev shortens the head names for the progress line.
var headAbbrev = [leyline.NumActionHeads]string{"slot", "bp", "style", "tempo", "αtgt", "αspd", "αcrv", "op"}

func formatRound(r simic.PPORound, rounds int) string {
	var ent []string
	for h, v := range r.Entropy {
		ent = append(ent, fmt.Sprintf("%s %.2f", headAbbrev[h], v))
	}
	return fmt.Sprintf("round %3d/%d  return %+8.3f (%d eps)  entropy [%s]  KL %.2e  EV %+.3f  %.1f env-epochs/s  rollbacks %d",
		r.Round, rounds, r.Return, r.Episodes, strings.Join(ent, " "), r.KL, r.ExplainedVariance, r.EnvEpochsPerSec, r.Rollbacks)
}

func emitRound(hub *nissa.Hub, r simic.PPORound) {
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
func writePPOPlot(path string, h []simic.PPORound) error {
	rounds := make([]runplot.Round, len(h))
	for i, r := range h {
		rounds[i] = runplot.Round{Round: r.Round, Return: r.Return, Entropy: r.Entropy, KL: r.KL, ExplainedVariance: r.ExplainedVariance,
			PolicyLoss: r.PolicyLoss, ValueLoss: r.ValueLoss, EnvEpochsPerSec: r.EnvEpochsPerSec}
	}
	return runplot.WritePPO(path, rounds)
}

// openPPORunDir returns the run's telemetry directory: on a resume whose
// checkpoint names one, that directory continued (continueRunDir);
// otherwise a new one under root.
func openPPORunDir(root string, st simic.PPOCheckpoint, resume bool, stdout io.Writer) (*nissa.DirBackend, string, error) {
	if !resume || st.RunDir == "" {
		d, err := nissa.NewDirBackend(root, nissa.DirOptions{})
		return d, "", err
	}
	return continueRunDir(root, st.RunDir, st.EventsBytes, stdout)
}

// recordRunDir flushes the telemetry and records the run directory and
// its log's length in st, before a checkpoint is written.
func recordRunDir(hub *nissa.Hub, d *nissa.DirBackend, st *simic.PPOCheckpoint, stdout io.Writer) {
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
