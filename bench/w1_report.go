package bench

// W1 as esper bench runs it on the CPU: the bare loop and the trainer,
// eager and captured, beside the PyTorch peer; and on the sim device
// (BenchW1), where what it measures is the host syncs of each epoch.

import (
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/esper-go/esper/tensor"
)

// w1TargetCapturedSyncs is PERF.md's and ARCHITECTURE.md's bound on the
// host syncs of a captured trainer epoch: the one read of the epoch's
// metrics.
const w1TargetCapturedSyncs = 1

// w1Runs are W1's four modes: the bare loop (the engine alone), then the
// same epoch run by tolaria.Trainer with its telemetry on, each eager
// and captured.
var w1Runs = []struct{ trainer, captured bool }{{false, false}, {false, true}, {true, false}, {true, true}}

// BenchW1 is esper bench --workload W1 on dev: the CPU's run (benchW1)
// for the CPU, and on a sim device the four modes with the host syncs of
// each epoch beside its latency, and the verdict on the captured trainer
// epoch's syncs (at most one). The sim device's speed is the CPU's plus
// its copies, so its run compares with no peer (c.Compare is refused)
// and its latencies are only context. A CUDA device runs in bench/gpu.
func BenchW1(dev tensor.Device, c Config, stdout, stderr io.Writer) error {
	warmup := c.Warmup
	if warmup == 0 {
		warmup = 50
	}
	switch {
	case dev.IsCPU():
		return benchW1(stdout, stderr, c.Epochs, warmup, c.Compare, c.PeerDir, c.JSONDir)
	case dev.Kind != tensor.KindSim:
		return fmt.Errorf("W1 on %v: bench.BenchW1 runs on cpu and sim (bench/gpu runs CUDA devices)", dev)
	case c.Compare:
		return fmt.Errorf("W1 on %v: --compare pytorch compares speed, and the sim device's is the CPU's plus copies; run W1 on cpu to compare", dev)
	}
	return benchW1Sim(stdout, dev, c.Epochs, warmup, c.JSONDir)
}

// benchW1Sim runs W1's four modes on dev, a sim device, and prints and
// writes their latencies and host syncs per epoch.
func benchW1Sim(stdout io.Writer, dev tensor.Device, epochs, warmup int, jsonDir string) error {
	m := ThisMachine()
	fmt.Fprintf(stdout, "W1 tolaria-ref on %v (the CPU kernels behind device tensors; %s, %s, commit %s)\n", dev, m.CPU, m.GoVersion, m.Commit)
	results := map[string]any{}
	byMode := map[string]W1Result{}
	var order []string
	for _, rc := range w1Runs {
		run := RunW1
		if rc.trainer {
			run = RunW1Trainer
		}
		r, err := run(W1Options{Epochs: epochs, Warmup: warmup, Captured: rc.captured, Device: dev})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "  ran %s: %d warm-up + %d epochs\n", r.Mode, warmup, epochs)
		results[r.Mode], byMode[r.Mode] = r, r
		order = append(order, r.Mode)
	}
	tw := NewTable(stdout, AlignRight)
	fmt.Fprintln(tw, "\tp50 µs\tp95 µs\tallocs/epoch\thost syncs/epoch\t")
	for _, mode := range order {
		r := byMode[mode]
		fmt.Fprintf(tw, "esper %s\t%.1f\t%.1f\t%.1f\t%.2f\t\n", mode, r.Latency.P50us, r.Latency.P95us, r.AllocsPerEpoch, r.HostSyncsPerEpoch)
	}
	tw.Flush()
	captured, eager := byMode["trainer-captured"].HostSyncsPerEpoch, byMode["trainer-eager"].HostSyncsPerEpoch
	fmt.Fprintf(stdout, "host syncs per trainer epoch: captured %.2f, eager %.2f; captured %s the target of ≤ %d\n",
		captured, eager, Verdict(captured <= w1TargetCapturedSyncs), w1TargetCapturedSyncs)
	rep := Report{
		Workload: "W1",
		Parameters: map[string]any{
			"model": "Linear(16->4)+bias", "loss": "cross-entropy", "batch": 4, "samples_per_epoch": 16,
			"optimizer": "SGD lr=0.01 momentum=0.9", "validation": "inference mode, 4 batches of 4",
			"modes":      "eager/captured: the bare engine loop; trainer-eager/trainer-captured: tolaria.Trainer.RunEpoch with telemetry into a nissa hub",
			"device":     "sim: the CPU kernels behind device tensors; every device-to-host read is an explicit copy, counted as a host sync",
			"host_syncs": "tensor.HostSyncs over the measured epochs (the bare loop) or the sum of EpochReport.HostSyncs (the trainer), per epoch",
			"epochs":     epochs, "warmup": warmup,
		},
		Machine: m, Device: dev.String(), Results: results,
	}
	return SaveReport(stdout, jsonDir, rep)
}

// benchW1 runs W1, prints its table and verdicts and writes its report.
func benchW1(stdout, stderr io.Writer, epochs, warmup int, compare bool, peerDir, jsonDir string) error {
	m := ThisMachine()
	fmt.Fprintf(stdout, "W1 tolaria-ref on %s (%s, GOMAXPROCS %d, commit %s)\n", m.CPU, m.GoVersion, m.GOMAXPROCS, m.Commit)
	results := map[string]any{}
	var rows []latencyRow
	for _, rc := range w1Runs {
		run := RunW1
		if rc.trainer {
			run = RunW1Trainer
		}
		r, err := run(W1Options{Epochs: epochs, Warmup: warmup, Captured: rc.captured})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "  ran %s: %d warm-up + %d epochs\n", r.Mode, warmup, epochs)
		results[r.Mode] = r
		rows = append(rows, latencyRow{"esper " + r.Mode, r.Latency.P50us, r.Latency.P95us, r.Latency.P99us, fmt.Sprintf("%.1f", r.AllocsPerEpoch)})
	}
	rep := Report{
		Workload: "W1",
		Parameters: map[string]any{
			"model": "Linear(16->4)+bias", "loss": "cross-entropy", "batch": 4, "samples_per_epoch": 16,
			"optimizer": "SGD lr=0.01 momentum=0.9", "validation": "inference mode, 4 batches of 4",
			"modes":  "eager/captured: the bare engine loop; trainer-eager/trainer-captured: tolaria.Trainer.RunEpoch with telemetry into a nissa hub",
			"epochs": epochs, "warmup": warmup,
		},
		Machine: m, Device: "cpu", Results: results,
	}
	if compare {
		fmt.Fprintf(stdout, "  running the PyTorch peer (%s/w1_tolaria_ref.py) ...\n", peerDir)
		peer, err := RunPeer(peerDir, "w1_tolaria_ref.py", runtime.GOMAXPROCS(0), "--epochs", fmt.Sprint(epochs), "--warmup", fmt.Sprint(warmup))
		switch {
		case peerMissing(stderr, &rep, err):
		case err != nil:
			return err
		default:
			rep.Peer = peer
			p50, _ := peer["p50_us"].(float64)
			p95, _ := peer["p95_us"].(float64)
			p99, _ := peer["p99_us"].(float64)
			rows = append(rows, latencyRow{fmt.Sprintf("pytorch %v", peer["torch_version"]), p50, p95, p99, "-"})
			rep.Ratios = map[string]any{}
			for _, r := range rows[:len(rows)-1] {
				if r.p50 > 0 {
					rep.Ratios[strings.TrimPrefix(r.name, "esper ")+"_speedup_p50"] = p50 / r.p50
					rep.Ratios[strings.TrimPrefix(r.name, "esper ")+"_speedup_p95"] = p95 / r.p95
				}
			}
		}
	}
	printLatencyTable(stdout, rows, rep.Peer != nil)
	return SaveReport(stdout, jsonDir, rep)
}
