package main

import (
	"flag"
	"fmt"
	"io"

	"strings"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/bench/gpu"
	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/tensor"
)

// benchCmd is `esper bench`: its flags make a bench.Config, checked
// here; bench.Run runs the CPU workloads, bench.BenchW1 W1 on a sim
// device and gpu.Run the GPU ones (each opening its device through
// kernels/device).
func benchCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	c := bench.DefaultConfig()
	workload := fs.String("workload", "W1", "workload id: W1 (tolaria-ref epoch), W2 (tamiyo GNN policy inference), W3 (kasmina germination), W4 (vectorised Esper environments, env-epochs/s), W5 (CNN host training), W6 (fp32 GEMM), W7 (SGD/AdamW step), or all (W1 to W7 in turn)")
	compare := fs.String("compare", "", "peer to run in the same process run: pytorch")
	fs.StringVar(&c.JSONDir, "json", c.JSONDir, "directory to write <workload>.json into")
	fs.IntVar(&c.Epochs, "epochs", c.Epochs, "measured epochs (W1)")
	fs.IntVar(&c.Warmup, "warmup", c.Warmup, "unmeasured warm-up iterations; 0 = the workload's default (W1 50 epochs, W2 5 forwards, W4 2 lock-step steps, W5 5 steps, W6 3 GEMMs, W7 5 steps; --device cuda: W5 20 steps, W6 10 GEMMs, W8 20 copies)")
	fs.IntVar(&c.Requests, "requests", c.Requests, "germination requests (W3)")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "germinations in flight at once (W3)")
	fs.IntVar(&c.Batch, "batch", c.Batch, "batch size (W5; W4's host batch)")
	fs.IntVar(&c.Steps, "steps", c.Steps, "measured steps; 0 = the workload's default (W4 12 lock-step steps of the bare loop, W5 20 training steps, W7 50 steps per optimizer; --device cuda: W5 200)")
	fs.IntVar(&c.Envs, "envs", c.Envs, "lock-step environments (W4)")
	fs.IntVar(&c.BaseChannels, "base-channels", c.BaseChannels, "CNN host base width (W4)")
	fs.IntVar(&c.TrainSize, "train-size", c.TrainSize, "synthetic training samples per env-epoch (W4)")
	fs.IntVar(&c.ValSize, "val-size", c.ValSize, "synthetic validation samples (W4)")
	fs.IntVar(&c.MaxEpochs, "max-epochs", c.MaxEpochs, "episode length in epochs, also the PPO rollout length (W4)")
	fs.IntVar(&c.PPORounds, "ppo-rounds", c.PPORounds, "measured rounds of the loop with the PPO update; -1 skips it (W4)")
	fs.IntVar(&c.EvalBatches, "eval-batches", c.EvalBatches, "measured evaluation batches (W5; --device cuda: 200 unless given)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "Fashion-MNIST directory (W5; default "+data.DefaultFashionMNISTDir+", random data when missing)")
	fs.BoolVar(&c.RandomData, "random-data", c.RandomData, "train on random N(0,1) images instead of Fashion-MNIST (W5)")
	fs.BoolVar(&c.Capture, "capture", c.Capture, "replay captured graphs: W5 also times captured training steps and evaluation forwards; W4 runs its environments captured (false: eager)")
	fs.IntVar(&c.Size, "size", c.Size, "n of the n×n·n×n fp32 GEMM (W6; --device cuda: TF32 and BF16, 8192 unless given)")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "W6 (CPU): rounds of --reps engine GEMMs, each followed by a block of --reps peer GEMMs, so that both sides see the same phases of a shared machine; gonum runs once")
	fs.IntVar(&c.Reps, "reps", c.Reps, "measured repetitions: W6 GEMMs per implementation and round (0 = 20); W2 forwards per batch size and mode (0 = 200 for batch 1, 50 for the large batch); --device cuda: W6 GEMMs (0 = 50), W8 copies per path (0 = 200)")
	fs.IntVar(&c.Graphs, "graphs", c.Graphs, "the large batch of W2, in graphs (W2 times batch 1 and this)")
	fs.IntVar(&c.Params, "params", c.Params, "total fp32 parameters (W7)")
	fs.IntVar(&c.Tensors, "tensors", c.Tensors, "parameter tensors (W7)")
	devName := fs.String("device", "cpu", "device: cpu; cuda[:N] for the GPU workloads W1, W2, W4, W5, W6, W7, W8 (a binary built with -tags cuda; GPU.md); or sim[:N] for W1, W2 and W4, to count their host syncs")
	fs.StringVar(&c.PeerDir, "peer-dir", c.PeerDir, "directory of the PyTorch peer scripts")
	fs.StringVar(&c.PeerResults, "peer-results", c.PeerResults, "with --device cuda: a directory holding this run's gpu_peers.py results (pytorch_w1.json, ...) to compare with, read instead of running the peers (implies --compare pytorch)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	dev, err := device.Parse(*devName)
	if err != nil {
		return err
	}
	if w := strings.ToUpper(*workload); dev.Kind == tensor.KindSim && w != "W1" && w != "W2" && w != "W4" {
		// The simulated device proves the code device-clean; its speed is
		// the CPU's plus copies, which no workload's target is about, but
		// W1's, W2's and W4's host syncs are.
		return fmt.Errorf("--device %v runs W1, W2 and W4 only (their host syncs); run %s on cpu or cuda[:N]", dev, *workload)
	}
	if *compare != "" && *compare != "pytorch" {
		return fmt.Errorf("unknown peer %q (want pytorch)", *compare)
	}
	c.Compare = *compare == "pytorch"
	if c.Epochs <= 0 || c.Warmup < 0 {
		return fmt.Errorf("--epochs must be > 0 and --warmup >= 0")
	}
	if c.Requests <= 0 || c.Concurrency <= 0 {
		return fmt.Errorf("--requests and --concurrency must be > 0")
	}
	if c.Batch <= 0 || c.EvalBatches <= 0 || c.Steps < 0 {
		return fmt.Errorf("--batch and --eval-batches must be > 0 and --steps >= 0")
	}
	if c.Size <= 0 || c.Reps < 0 {
		return fmt.Errorf("--size must be > 0 and --reps >= 0")
	}
	if c.Graphs <= 0 {
		return fmt.Errorf("--graphs must be > 0")
	}
	if c.Params <= 0 || c.Tensors <= 0 {
		return fmt.Errorf("--params and --tensors must be > 0")
	}
	if c.Envs <= 0 || c.BaseChannels <= 0 || c.TrainSize <= 0 || c.ValSize <= 0 || c.MaxEpochs <= 0 || c.PPORounds < -1 || c.PPORounds == 0 {
		return fmt.Errorf("--envs, --base-channels, --train-size, --val-size, --max-epochs must be > 0 and --ppo-rounds > 0 or -1")
	}
	if c.JSONDir != "" {
		if err := checkOutputDir("--json", c.JSONDir, true); err != nil {
			return err
		}
	}
	switch dev.Kind {
	case tensor.KindCPU:
		return bench.Run(*workload, c, stdout, stderr)
	case tensor.KindSim:
		if _, err := device.OpenDevice(dev); err != nil {
			return err
		}
		switch strings.ToUpper(*workload) {
		case "W2":
			return bench.BenchW2(stdout, stderr, c, dev)
		case "W4":
			return bench.BenchW4(stdout, stderr, c, dev)
		}
		return bench.BenchW1(dev, c, stdout, stderr)
	}
	c.Set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.Set[f.Name] = true })
	return gpu.Run(dev, *workload, c, stdout, stderr)
}
