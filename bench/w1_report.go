package bench

// W1 as esper bench runs it on the CPU: the bare loop and the trainer,
// eager and captured, beside the PyTorch peer.

import (
	"fmt"
	"io"
	"runtime"
	"strings"
)

// benchW1 runs W1, prints its table and verdicts and writes its report.
func benchW1(stdout, stderr io.Writer, epochs, warmup int, compare bool, peerDir, jsonDir string) error {
	m := ThisMachine()
	fmt.Fprintf(stdout, "W1 tolaria-ref on %s (%s, GOMAXPROCS %d, commit %s)\n", m.CPU, m.GoVersion, m.GOMAXPROCS, m.Commit)
	results := map[string]any{}
	var rows []latencyRow
	// The bare loop (the engine alone), then the same epoch run by
	// tolaria.Trainer with its telemetry on.
	runs := []struct {
		trainer, captured bool
	}{{false, false}, {false, true}, {true, false}, {true, true}}
	for _, rc := range runs {
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
