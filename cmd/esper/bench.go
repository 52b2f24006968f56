package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/esper-go/esper/bench"
)

func benchCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	workload := fs.String("workload", "W1", "workload id: W1 (tolaria-ref epoch), W3 (kasmina germination)")
	compare := fs.String("compare", "", "peer to run in the same process run: pytorch")
	jsonDir := fs.String("json", "", "directory to write <workload>.json into")
	epochs := fs.Int("epochs", 2000, "measured epochs (W1)")
	warmup := fs.Int("warmup", 50, "warm-up epochs (W1)")
	requests := fs.Int("requests", 256, "germination requests (W3)")
	concurrency := fs.Int("concurrency", 4, "germinations in flight at once (W3)")
	device := fs.String("device", "cpu", "device: cpu (cuda arrives with the CUDA issue)")
	peerDir := fs.String("peer-dir", "bench/pytorch", "directory of the PyTorch peer scripts")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *device != "cpu" {
		return fmt.Errorf("device %q is not available yet (only cpu)", *device)
	}
	if *compare != "" && *compare != "pytorch" {
		return fmt.Errorf("unknown peer %q (want pytorch)", *compare)
	}
	if *epochs <= 0 || *warmup < 0 {
		return fmt.Errorf("--epochs must be > 0 and --warmup >= 0")
	}
	if *requests <= 0 || *concurrency <= 0 {
		return fmt.Errorf("--requests and --concurrency must be > 0")
	}
	switch strings.ToUpper(*workload) {
	case "W1":
		return benchW1(stdout, stderr, *epochs, *warmup, *compare == "pytorch", *peerDir, *jsonDir)
	case "W3":
		if *compare != "" {
			fmt.Fprintln(stderr, "W3 has no PyTorch peer (PERF.md); running our side only")
		}
		return benchW3(stdout, *requests, *concurrency, *jsonDir)
	}
	return fmt.Errorf("unknown workload %q (available: W1, W3)", *workload)
}

func benchW1(stdout, stderr io.Writer, epochs, warmup int, compare bool, peerDir, jsonDir string) error {
	m := bench.ThisMachine()
	fmt.Fprintf(stdout, "W1 tolaria-ref on %s (%s, GOMAXPROCS %d, commit %s)\n", m.CPU, m.GoVersion, m.GOMAXPROCS, m.Commit)
	results := map[string]any{}
	var rows []row
	// The bare loop (the engine alone), then the same epoch run by
	// tolaria.Trainer with its telemetry on.
	runs := []struct {
		trainer, captured bool
	}{{false, false}, {false, true}, {true, false}, {true, true}}
	for _, rc := range runs {
		run := bench.RunW1
		if rc.trainer {
			run = bench.RunW1Trainer
		}
		r, err := run(bench.W1Options{Epochs: epochs, Warmup: warmup, Captured: rc.captured})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "  ran %s: %d warm-up + %d epochs\n", r.Mode, warmup, epochs)
		results[r.Mode] = r
		rows = append(rows, row{"esper " + r.Mode, r.Latency.P50us, r.Latency.P95us, r.Latency.P99us, fmt.Sprintf("%.1f", r.AllocsPerEpoch)})
	}
	rep := bench.Report{
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
		peer, err := bench.RunPeer(peerDir, "w1_tolaria_ref.py", runtime.GOMAXPROCS(0), "--epochs", fmt.Sprint(epochs), "--warmup", fmt.Sprint(warmup))
		switch {
		case errors.Is(err, bench.ErrNoPeer):
			fmt.Fprintf(stderr, "%v\n(running our side only)\n", err)
			rep.PeerError = err.Error()
		case err != nil:
			return err
		default:
			rep.Peer = peer
			p50, _ := peer["p50_us"].(float64)
			p95, _ := peer["p95_us"].(float64)
			p99, _ := peer["p99_us"].(float64)
			rows = append(rows, row{fmt.Sprintf("pytorch %v", peer["torch_version"]), p50, p95, p99, "-"})
			rep.Ratios = map[string]any{}
			for _, r := range rows[:len(rows)-1] {
				if r.p50 > 0 {
					rep.Ratios[strings.TrimPrefix(r.name, "esper ")+"_speedup_p50"] = p50 / r.p50
					rep.Ratios[strings.TrimPrefix(r.name, "esper ")+"_speedup_p95"] = p95 / r.p95
				}
			}
		}
	}
	printTable(stdout, rows, rep.Peer != nil)
	return writeReport(stdout, jsonDir, rep)
}

// w3TargetP95us is PERF.md's W3 target on the CPU: p95 ≤ 1 ms.
const w3TargetP95us = 1000

func benchW3(stdout io.Writer, requests, concurrency int, jsonDir string) error {
	m := bench.ThisMachine()
	fmt.Fprintf(stdout, "W3 kasmina-germinate on %s (%s, GOMAXPROCS %d, commit %s)\n", m.CPU, m.GoVersion, m.GOMAXPROCS, m.Commit)
	fmt.Fprintf(stdout, "  %d germinations of conv_light at 32 channels, %d in flight ...\n", requests, concurrency)
	last := -1
	r, err := bench.RunW3(bench.W3Options{
		Requests: requests, Concurrency: concurrency,
		Progress: func(done, total int) {
			if pct := 100 * done / total; pct/25 != last/25 {
				last = pct
				fmt.Fprintf(stdout, "  %3d%% (%d/%d)\n", pct, done, total)
			}
		},
	})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tp50 µs\tp95 µs\tp99 µs\tmax µs\tgerminations/s\tallocs/req\ttarget p95 µs\t")
	fmt.Fprintf(tw, "esper\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t%d\t\n", r.Latency.P50us, r.Latency.P95us, r.Latency.P99us, r.Latency.MaxUs, r.PerSecond, r.AllocsPerReq, w3TargetP95us)
	tw.Flush()
	verdict := "meets"
	if r.Latency.P95us > w3TargetP95us {
		verdict = "misses"
	}
	fmt.Fprintf(stdout, "p95 %.0f µs %s the PERF.md target of %d µs\n", r.Latency.P95us, verdict, w3TargetP95us)
	rep := bench.Report{
		Workload: "W3",
		Parameters: map[string]any{
			"blueprint": r.Blueprint, "channels": r.Channels, "requests": r.Requests, "concurrency": r.Concurrency,
			"timed": r.LifecycleNote, "target_p95_us": w3TargetP95us,
		},
		Machine: m, Device: "cpu", Results: map[string]any{"germinate": r},
	}
	return writeReport(stdout, jsonDir, rep)
}

// writeReport writes rep under jsonDir when one was given and says where.
func writeReport(stdout io.Writer, jsonDir string, rep bench.Report) error {
	if jsonDir == "" {
		return nil
	}
	path, err := bench.WriteReport(jsonDir, rep)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", path)
	return nil
}

type row struct {
	name          string
	p50, p95, p99 float64
	allocs        string
}

func printTable(w io.Writer, rows []row, peer bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tp50 µs\tp95 µs\tp99 µs\tallocs/epoch\tvs peer p50\t")
	ref := 0.0
	if peer {
		ref = rows[len(rows)-1].p50
	}
	for _, r := range rows {
		ratio := "-"
		if ref > 0 && r.p50 > 0 {
			ratio = fmt.Sprintf("%.1f×", ref/r.p50)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n", r.name, r.p50, r.p95, r.p99, r.allocs, ratio)
	}
	tw.Flush()
}
