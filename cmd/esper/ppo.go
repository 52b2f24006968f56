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
	kernel                                        int
	trainSize, valSize, batch                     int
	hostLR                                        float64
	schedule                                      string
	taskPerEpisode, diagnose                      bool
	updateEpochs, entropyAnneal                   int
	entropyCoef, entropyCoefEnd, opFloor          float64
	paramCost, prunePrior, germinatePrior         float64
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
	// The task defaults are esper train's and esper eval's synthetic
	// task (make demo's impaired host), where growth pays.
	fs.IntVar(&c.maxEpochs, "max-epochs", ppoDefaultEpochs, "episode length in host epochs (the rollout length); esper eval --epochs should match")
	fs.IntVar(&c.blocks, "blocks", ppoDefaultBlocks, "CNN host blocks, one slot per block (esper train --controller gnn needs the same --blocks)")
	fs.IntVar(&c.baseChannels, "base-channels", ppoDefaultBaseChannels, "CNN host channels of the first block")
	fs.IntVar(&c.kernel, "kernel", ppoDefaultKernel, "CNN host convolution kernel size (1: the impaired host of make demo)")
	fs.IntVar(&c.trainSize, "train-size", ppoDefaultTrain, "synthetic training samples per task instance")
	fs.IntVar(&c.valSize, "val-size", ppoDefaultVal, "synthetic validation samples per task instance")
	fs.IntVar(&c.batch, "batch", ppoDefaultBatch, "host batch size")
	fs.Float64Var(&c.hostLR, "host-lr", ppoDefaultHostLR, "hosts' SGD learning rate")
	fs.StringVar(&c.schedule, "schedule", "cosine", "hosts' learning-rate schedule over --max-epochs: cosine or constant")
	fs.BoolVar(&c.taskPerEpisode, "task-per-episode", true, "every episode trains on its own instance of the synthetic task (false: all on the instance of --seed)")
	fs.BoolVar(&c.diagnose, "diagnose", false, "print a second line per round: the episodes' final accuracy, added parameters and lifecycle counts, each op's share, advantage and return, and the reward terms")
	fs.IntVar(&c.hidden, "hidden", 64, "policy encoder and GraphSAGE width")
	fs.IntVar(&c.gatHidden, "gat-hidden", 32, "policy GAT width")
	fs.IntVar(&c.gatHeads, "gat-heads", 2, "policy attention heads")
	fs.IntVar(&c.headHidden, "head-hidden", 64, "policy head width")
	fs.IntVar(&c.minibatch, "minibatch", 0, "PPO minibatch size (0 = a quarter of the round's transitions, so the update takes several steps and KL is measured after the first)")
	fs.Float64Var(&c.lr, "lr", simic.DefaultLR, "policy Adam learning rate")
	fs.StringVar(&c.reward, "reward", "shaped", "reward mode: shaped, simplified, sparse or accuracy")
	fs.Float64Var(&c.paramCost, "param-cost", simic.DefaultParamCost, "--reward accuracy: cost per thousand parameters the seeds added by the end of the run (0: none), against 0.1 per point of final accuracy")
	fs.Float64Var(&c.prunePrior, "prune-prior", 0, "added to a new policy's PRUNE logit (0 at initialisation): an exploration prior, not a mask (a policy that prunes a TRAINING seed with probability 1/3 every epoch from age 5 almost never sees a seed blend)")
	fs.Float64Var(&c.germinatePrior, "germinate-prior", 0, "added to a new policy's logits of the heuristic's germination arguments (SIGMOID_ADD, STANDARD tempo, FULL alpha target, conv_light and conv_heavy): an exploration prior, not a mask (a seed germinated with a half alpha target never passes G3)")
	fs.IntVar(&c.updateEpochs, "update-epochs", 1, "passes over a round's transitions per PPO update")
	fs.Float64Var(&c.entropyCoef, "entropy-coef", simic.DefaultEntropyCoef, "entropy bonus weight")
	fs.Float64Var(&c.entropyCoefEnd, "entropy-coef-end", simic.DefaultEntropyCoefMin, "entropy bonus weight at the end of --entropy-anneal")
	fs.IntVar(&c.entropyAnneal, "entropy-anneal", 0, "rounds over which the entropy weight falls linearly from --entropy-coef to --entropy-coef-end (0: constant)")
	fs.Float64Var(&c.opFloor, "op-floor", float64(tamiyo.ProbabilityFloorPerHead[leyline.HeadOp]), "probability floor of each valid op while sampling and in the update (G2: 0.15, which makes a seed in TRAINING pruned with at least that probability every epoch)")
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
	case c.kernel <= 0 || c.kernel%2 == 0:
		return c, fmt.Errorf("--kernel %d must be odd and > 0", c.kernel)
	case !(c.hostLR > 0) || math.IsInf(c.hostLR, 0):
		return c, fmt.Errorf("--host-lr %v must be finite and > 0", c.hostLR)
	case c.schedule != "cosine" && c.schedule != "constant":
		return c, fmt.Errorf("--schedule %q: want cosine or constant", c.schedule)
	case c.hidden <= 0 || c.gatHidden <= 0 || c.gatHeads <= 0 || c.headHidden <= 0:
		return c, errors.New("policy widths must be > 0")
	case c.minibatch < 0:
		return c, errors.New("--minibatch must be ≥ 0")
	case c.updateEpochs <= 0 || c.entropyAnneal < 0:
		return c, errors.New("--update-epochs must be > 0 and --entropy-anneal ≥ 0")
	case !(c.entropyCoef > 0) || !(c.entropyCoefEnd > 0) || math.IsInf(c.entropyCoef, 0) || math.IsInf(c.entropyCoefEnd, 0):
		return c, errors.New("--entropy-coef and --entropy-coef-end must be finite and > 0")
	case !(c.opFloor >= 0 && c.opFloor < 1):
		return c, fmt.Errorf("--op-floor %v must lie in [0, 1)", c.opFloor)
	case math.IsNaN(c.prunePrior) || math.IsInf(c.prunePrior, 0):
		return c, fmt.Errorf("--prune-prior %v must be finite", c.prunePrior)
	case math.IsNaN(c.germinatePrior) || math.IsInf(c.germinatePrior, 0):
		return c, fmt.Errorf("--germinate-prior %v must be finite", c.germinatePrior)
	case !(c.paramCost >= 0) || math.IsInf(c.paramCost, 0):
		return c, fmt.Errorf("--param-cost %v must be finite and ≥ 0", c.paramCost)
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
		Kernel: c.kernel, HostLR: c.hostLR, Cosine: c.schedule == "cosine", TaskPerEpisode: c.taskPerEpisode,
		Epochs: c.updateEpochs, EntropyCoef: c.entropyCoef, EntropyCoefEnd: c.entropyCoefEnd, EntropyAnnealRounds: c.entropyAnneal,
		RewardOptions: simic.RewardOptions{ParamCost: paramCostOption(c.paramCost)},
		Train:         c.trainSize, Val: c.valSize, Batch: c.batch, MinibatchSize: c.minibatch, LR: c.lr, Reward: mode, Seed: c.seed, Capture: c.capture,
		Policy: tamiyo.PolicyOptions{Hidden: c.hidden, GATHidden: c.gatHidden, GATHeads: c.gatHeads, HeadHidden: c.headHidden}}
	floors := tamiyo.ProbabilityFloorPerHead
	floors[leyline.HeadOp] = float32(c.opFloor)
	o.Floors = &floors
	o.Priors = simic.OpPriors(c.prunePrior, c.germinatePrior)
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
			fmt.Fprintln(stdout, rr.Line(c.rounds)+"  "+eta)
			if c.diagnose {
				fmt.Fprintln(stdout, r.LastStats.Diagnosis(r.LastUpdate))
			}
		}
		rr.Emit(hub)
		r.LastStats.EmitDiagnosis(hub, rr.Round, r.LastUpdate)
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
		if err := runplot.WritePPORounds(filepath.Join(dirb.Dir(), "ppo.png"), st.History); err != nil {
			return err
		}
	}
	// esper train and esper eval need these flags to give the policy the
	// host and the schedule it learned on.
	host := fmt.Sprintf("--epochs %d --blocks %d --base-channels %d --kernel %d --lr %g --schedule %s --train-size %d --batch %d",
		c.maxEpochs, c.blocks, c.baseChannels, c.kernel, c.hostLR, c.schedule, c.trainSize, c.batch)
	fmt.Fprintf(stdout, "policy: %s (load with: esper train --controller gnn %s --policy %s; compare with: esper eval --controllers heuristic,gnn:%s,none %s)\nrun directory: %s (events.jsonl, ppo.png)\n",
		out, host, out, out, host, dirb.Dir())
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
	devs, err := kdevice.OpenList(names)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagName, err)
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

// esper ppo's task defaults: esper train's and esper eval's synthetic
// task, the impaired host of make demo (2 blocks of 1×1 convolutions, 4
// base channels, 3000 samples, 45 epochs at a cosine-annealed 0.05),
// where growth pays (bench/baselines/eval/2026-11-26: the heuristic
// +6.8 points over the host alone). The validation split is the
// synthetic task's default test split.
const (
	ppoDefaultEpochs       = 45
	ppoDefaultBlocks       = 2
	ppoDefaultBaseChannels = 4
	ppoDefaultKernel       = 1
	ppoDefaultTrain        = 3000
	ppoDefaultVal          = 1000
	ppoDefaultBatch        = 128
	ppoDefaultHostLR       = 0.05
)

// paramCostOption maps --param-cost to RewardOptions.ParamCost, whose
// zero value means the default: a flag of 0 asks for no cost.
func paramCostOption(v float64) float64 {
	if v == 0 {
		return -1
	}
	return v
}
