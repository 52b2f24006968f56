package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/tensor"
)

// benchConfig holds the parsed `esper bench` flags. Zero warm-up, reps
// and steps mean each workload's own default.
type benchConfig struct {
	compare               bool
	peerDir, jsonDir      string
	epochs, warmup        int // W1 (warm-up: every workload)
	requests, concurrency int // W3
	batch, evalBatches    int // W5
	steps                 int // W5 training steps, W7 optimizer steps
	dataDir               string
	randomData, capture   bool
	size, reps, rounds    int // W6 (reps also W2)
	graphs                int // W2
	params, tensors       int // W7
	envs, baseChannels    int // W4
	trainSize, valSize    int // W4
	maxEpochs, ppoRounds  int // W4

	// peerResults is --peer-results (--device cuda): a directory of
	// gpu_peers.py results to compare with.
	peerResults string
}

// allWorkloads is what --workload all runs, in order.
var allWorkloads = []string{"W1", "W2", "W3", "W4", "W5", "W6", "W7"}

func benchCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var c benchConfig
	workload := fs.String("workload", "W1", "workload id: W1 (tolaria-ref epoch), W2 (tamiyo GNN policy inference), W3 (kasmina germination), W4 (vectorised Esper environments, env-epochs/s), W5 (CNN host training), W6 (fp32 GEMM), W7 (SGD/AdamW step), or all (W1 to W7 in turn)")
	compare := fs.String("compare", "", "peer to run in the same process run: pytorch")
	fs.StringVar(&c.jsonDir, "json", "", "directory to write <workload>.json into")
	fs.IntVar(&c.epochs, "epochs", 2000, "measured epochs (W1)")
	fs.IntVar(&c.warmup, "warmup", 0, "unmeasured warm-up iterations; 0 = the workload's default (W1 50 epochs, W2 5 forwards, W4 2 lock-step steps, W5 5 steps, W6 3 GEMMs, W7 5 steps; --device cuda: W5 20 steps, W6 10 GEMMs, W8 20 copies)")
	fs.IntVar(&c.requests, "requests", 256, "germination requests (W3)")
	fs.IntVar(&c.concurrency, "concurrency", 4, "germinations in flight at once (W3)")
	fs.IntVar(&c.batch, "batch", 128, "batch size (W5; W4's host batch)")
	fs.IntVar(&c.steps, "steps", 0, "measured steps; 0 = the workload's default (W4 12 lock-step steps of the bare loop, W5 20 training steps, W7 50 steps per optimizer; --device cuda: W5 200)")
	fs.IntVar(&c.envs, "envs", bench.W4DefaultEnvs, "lock-step environments (W4)")
	fs.IntVar(&c.baseChannels, "base-channels", bench.W4DefaultBaseChannels, "CNN host base width (W4)")
	fs.IntVar(&c.trainSize, "train-size", bench.W4DefaultTrain, "synthetic training samples per env-epoch (W4)")
	fs.IntVar(&c.valSize, "val-size", bench.W4DefaultVal, "synthetic validation samples (W4)")
	fs.IntVar(&c.maxEpochs, "max-epochs", bench.W4DefaultMaxEpochs, "episode length in epochs, also the PPO rollout length (W4)")
	fs.IntVar(&c.ppoRounds, "ppo-rounds", bench.W4DefaultPPORounds, "measured rounds of the loop with the PPO update; -1 skips it (W4)")
	fs.IntVar(&c.evalBatches, "eval-batches", 20, "measured evaluation batches (W5; --device cuda: 200 unless given)")
	fs.StringVar(&c.dataDir, "data-dir", "", "Fashion-MNIST directory (W5; default "+data.DefaultFashionMNISTDir+", random data when missing)")
	fs.BoolVar(&c.randomData, "random-data", false, "train on random N(0,1) images instead of Fashion-MNIST (W5)")
	fs.BoolVar(&c.capture, "capture", true, "replay captured graphs: W5 also times captured training steps and evaluation forwards; W4 runs its environments captured (false: eager)")
	fs.IntVar(&c.size, "size", 1024, "n of the n×n·n×n fp32 GEMM (W6; --device cuda: TF32 and BF16, 8192 unless given)")
	fs.IntVar(&c.rounds, "rounds", 10, "W6 (CPU): rounds of --reps engine GEMMs, each followed by a block of --reps peer GEMMs, so that both sides see the same phases of a shared machine; gonum runs once")
	fs.IntVar(&c.reps, "reps", 0, "measured repetitions: W6 GEMMs per implementation and round (0 = 20); W2 forwards per batch size and mode (0 = 200 for batch 1, 50 for the large batch); --device cuda: W6 GEMMs (0 = 50), W8 copies per path (0 = 200)")
	fs.IntVar(&c.graphs, "graphs", 64, "the large batch of W2, in graphs (W2 times batch 1 and this)")
	fs.IntVar(&c.params, "params", 10_000_000, "total fp32 parameters (W7)")
	fs.IntVar(&c.tensors, "tensors", 200, "parameter tensors (W7)")
	device := fs.String("device", "cpu", "device: cpu, or cuda[:N] for the GPU workloads W1, W5, W6, W7, W8 (a binary built with -tags cuda; GPU.md)")
	fs.StringVar(&c.peerDir, "peer-dir", "bench/pytorch", "directory of the PyTorch peer scripts")
	fs.StringVar(&c.peerResults, "peer-results", "", "with --device cuda: a directory holding this run's gpu_peers.py results (pytorch_w1.json, ...) to compare with, read instead of running the peers (implies --compare pytorch)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	dev, err := tensor.ParseDevice(*device)
	if err != nil {
		return fmt.Errorf("device %q is not available (want cpu, or cuda[:N] in a binary built with -tags cuda)", *device)
	}
	if *compare != "" && *compare != "pytorch" {
		return fmt.Errorf("unknown peer %q (want pytorch)", *compare)
	}
	c.compare = *compare == "pytorch"
	if c.epochs <= 0 || c.warmup < 0 {
		return fmt.Errorf("--epochs must be > 0 and --warmup >= 0")
	}
	if c.requests <= 0 || c.concurrency <= 0 {
		return fmt.Errorf("--requests and --concurrency must be > 0")
	}
	if c.batch <= 0 || c.evalBatches <= 0 || c.steps < 0 {
		return fmt.Errorf("--batch and --eval-batches must be > 0 and --steps >= 0")
	}
	if c.size <= 0 || c.reps < 0 {
		return fmt.Errorf("--size must be > 0 and --reps >= 0")
	}
	if c.graphs <= 0 {
		return fmt.Errorf("--graphs must be > 0")
	}
	if c.params <= 0 || c.tensors <= 0 {
		return fmt.Errorf("--params and --tensors must be > 0")
	}
	if c.envs <= 0 || c.baseChannels <= 0 || c.trainSize <= 0 || c.valSize <= 0 || c.maxEpochs <= 0 || c.ppoRounds < -1 || c.ppoRounds == 0 {
		return fmt.Errorf("--envs, --base-channels, --train-size, --val-size, --max-epochs must be > 0 and --ppo-rounds > 0 or -1")
	}
	if c.jsonDir != "" {
		if err := checkOutputDir("--json", c.jsonDir, true); err != nil {
			return err
		}
	}
	if !dev.IsCPU() {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		return benchDevice(dev, strings.ToUpper(*workload), c, set, stdout, stderr)
	}
	w := strings.ToUpper(*workload)
	if c.compare {
		ids := []string{w}
		if w == "ALL" {
			ids = allWorkloads
		}
		if err := checkPeerScripts(c.peerDir, ids...); err != nil {
			return err
		}
	}
	if w == "ALL" {
		var errs []error
		for i, id := range allWorkloads {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			if err := runWorkload(id, c, stdout, stderr); err != nil {
				fmt.Fprintf(stderr, "%s failed: %v\n", id, err)
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
			}
		}
		return errors.Join(errs...)
	}
	return runWorkload(w, c, stdout, stderr)
}

// runWorkload runs one workload by its (upper-case) id.
func runWorkload(id string, c benchConfig, stdout, stderr io.Writer) error {
	switch id {
	case "W1":
		warmup := c.warmup
		if warmup == 0 {
			warmup = 50
		}
		return benchW1(stdout, stderr, c.epochs, warmup, c.compare, c.peerDir, c.jsonDir)
	case "W2":
		return benchW2(stdout, stderr, c)
	case "W3":
		if c.compare {
			fmt.Fprintln(stderr, "W3 has no PyTorch peer (PERF.md); running our side only")
		}
		return benchW3(stdout, c.requests, c.concurrency, c.jsonDir)
	case "W4":
		return benchW4(stdout, stderr, c)
	case "W5":
		return benchW5(stdout, stderr, c)
	case "W6":
		return benchW6(stdout, stderr, c)
	case "W7":
		return benchW7(stdout, stderr, c)
	}
	return fmt.Errorf("unknown workload %q (available: W1, W2, W3, W4, W5, W6, W7, all)", id)
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
		case peerMissing(stderr, &rep, err):
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
	fmt.Fprintf(stdout, "p95 %.0f µs %s the PERF.md target of %d µs\n", r.Latency.P95us, verdict(r.Latency.P95us <= w3TargetP95us), w3TargetP95us)
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
// verdict words a check against a PERF.md target.
func verdict(met bool) string {
	if met {
		return "meets"
	}
	return "misses"
}

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

// header prints the first line of a workload's output.
func header(w io.Writer, title string, m bench.Machine) {
	fmt.Fprintf(w, "%s on %s (%s, GOMAXPROCS %d, commit %s)\n", title, m.CPU, m.GoVersion, m.GOMAXPROCS, m.Commit)
}

// runPeer runs a peer script when c.compare is set and records its result
// (or, when PyTorch is missing, why there is none) in rep. It returns nil
// and no error when there is no peer to compare with.
func runPeer(c benchConfig, stdout, stderr io.Writer, rep *bench.Report, script string, args ...string) (map[string]any, error) {
	if !c.compare {
		return nil, nil
	}
	fmt.Fprintf(stdout, "  running the PyTorch peer (%s/%s) ...\n", c.peerDir, script)
	peer, err := bench.RunPeer(c.peerDir, script, runtime.GOMAXPROCS(0), args...)
	switch {
	case peerMissing(stderr, rep, err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	rep.Peer = peer
	return peer, nil
}

// peerMissing reports whether err says that the PyTorch peer cannot run
// here; it then says so on stderr (with how to install it) and records
// it in rep, and the workload runs our side only.
func peerMissing(stderr io.Writer, rep *bench.Report, err error) bool {
	if !errors.Is(err, bench.ErrNoPeer) {
		return false
	}
	fmt.Fprintf(stderr, "%v\n(running our side only)\n", err)
	rep.PeerError = err.Error()
	return true
}

// num reads a number at a path of keys in a decoded JSON object (0 when
// absent).
func num(m map[string]any, path ...string) float64 {
	var v any = m
	for _, k := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return 0
		}
		v = obj[k]
	}
	f, _ := v.(float64)
	return f
}

// ratio formats a/b as "1.23×", or "-" when either is not positive.
func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// progressEvery returns a progress callback printing a line whenever a
// phase crosses a multiple of 25%.
func progressEvery(w io.Writer) func(phase string, done, total int) {
	last := map[string]int{}
	return func(phase string, done, total int) {
		pct := 100 * done / total
		if prev, ok := last[phase]; ok && pct/25 == prev/25 {
			return
		}
		last[phase] = pct
		fmt.Fprintf(w, "  %s: %3d%% (%d/%d)\n", phase, pct, done, total)
	}
}

// w6TargetRatio is PERF.md's W6 CPU target: ≥ 1.0× OpenBLAS (PyTorch).
const w6TargetRatio = 1.0

func benchW6(stdout, stderr io.Writer, c benchConfig) error {
	m := bench.ThisMachine()
	header(stdout, "W6 gemm (fp32, CPU)", m)
	if c.rounds <= 0 {
		return fmt.Errorf("--rounds must be positive, got %d", c.rounds)
	}
	o, err := bench.W6Options{Size: c.size, Reps: c.reps, Warmup: c.warmup, Rounds: c.rounds}.Resolve()
	if err != nil {
		return err
	}
	rep := bench.Report{Workload: "W6", Machine: m, Device: "cpu"}
	// The peer stays up (its --serve mode) and runs a block of products
	// after each round of ours; its blocks are pooled like our rounds.
	var peers []map[string]any
	var sess *bench.PeerSession
	if c.compare {
		fmt.Fprintf(stdout, "  starting the PyTorch peer (%s/w6_gemm.py) ...\n", c.peerDir)
		sess, err = bench.StartPeer(c.peerDir, "w6_gemm.py", runtime.GOMAXPROCS(0), "--size", fmt.Sprint(o.Size), "--seed", fmt.Sprint(o.Seed))
		switch {
		case peerMissing(stderr, &rep, err):
		case err != nil:
			return err
		default:
			defer sess.Close()
		}
	}
	afterRound := func(round int) error {
		if sess == nil {
			return nil
		}
		fmt.Fprintf(stdout, "  pytorch: %d³ GEMMs, round %d of %d ...\n", o.Size, round, o.Rounds)
		p, err := sess.Call(fmt.Sprintf("%d %d", o.Warmup, o.Reps))
		if err != nil {
			return err
		}
		peers = append(peers, p)
		return nil
	}
	o.AfterRound = afterRound
	o.Progress = func(impl string, round int) {
		if round > 0 {
			fmt.Fprintf(stdout, "  %s: %d³ GEMMs, round %d of %d ...\n", impl, o.Size, round, o.Rounds)
		} else {
			fmt.Fprintf(stdout, "  %s: %d³ GEMMs ...\n", impl, o.Size)
		}
	}
	r, err := bench.RunW6(o)
	if err != nil {
		return err
	}
	if sess != nil {
		if err := sess.Close(); err != nil {
			return err
		}
	}
	rep.Parameters = map[string]any{
		"op": "C = A·B, fp32, contiguous row-major n×n", "size": r.Size, "reps": r.Reps, "warmup": r.Warmup, "rounds": r.Rounds,
		"flop_per_gemm": r.FLOPPerGEMM, "esper": "kernels.For(tensor.CPU).MatMul", "gonum": "gonum.org/v1/gonum/blas/gonum Implementation.Sgemm (pure Go)",
		"checked_entries": r.CheckedEntry,
		"method":          "rounds of warmup+reps engine GEMMs, each followed by a block of warmup+reps peer GEMMs in one long-running peer process (w6_gemm.py --serve); medians pool every round; gonum once at the end",
	}
	rep.Results = map[string]any{"esper": r.Esper, "esper_rounds": r.EsperRounds, "gonum": r.Gonum}
	rep.Ratios = map[string]any{
		"esper_vs_gonum_median": r.Esper.MedianGFLOPS / r.Gonum.MedianGFLOPS,
		"esper_vs_gonum_best":   r.Esper.BestGFLOPS / r.Gonum.BestGFLOPS,
	}
	var peer map[string]any
	if len(peers) > 0 {
		peer, err = poolW6Peers(peers, r.FLOPPerGEMM)
		if err != nil {
			return err
		}
		rep.Peer = peer
	}
	type w6row struct {
		name                string
		best, median, p50us float64
	}
	rows := []w6row{
		{"esper", r.Esper.BestGFLOPS, r.Esper.MedianGFLOPS, r.Esper.Latency.P50us},
		{"gonum", r.Gonum.BestGFLOPS, r.Gonum.MedianGFLOPS, r.Gonum.Latency.P50us},
	}
	if peer != nil {
		rows = append(rows, w6row{fmt.Sprintf("pytorch %v", peer["torch_version"]), num(peer, "best_gflops"), num(peer, "median_gflops"), num(peer, "p50_us")})
		rep.Ratios["esper_vs_pytorch_median"] = r.Esper.MedianGFLOPS / num(peer, "median_gflops")
		rep.Ratios["esper_vs_pytorch_best"] = r.Esper.BestGFLOPS / num(peer, "best_gflops")
		fmt.Fprintln(stdout, "  median GFLOP/s by round (esper, then the peer's block after it):")
		for i, p := range peers {
			e := r.EsperRounds[i].MedianGFLOPS
			fmt.Fprintf(stdout, "    round %d: esper %.1f, pytorch %.1f (%s)\n", i+1, e, num(p, "median_gflops"), ratio(e, num(p, "median_gflops")))
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tbest GFLOP/s\tmedian GFLOP/s\tp50 ms\tesper ÷ it (median)\tesper ÷ it (best)\t")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t%s\t%s\t\n", row.name, row.best, row.median, row.p50us/1e3,
			ratio(r.Esper.MedianGFLOPS, row.median), ratio(r.Esper.BestGFLOPS, row.best))
	}
	tw.Flush()
	if peer != nil {
		q := r.Esper.MedianGFLOPS / num(peer, "median_gflops")
		fmt.Fprintf(stdout, "esper/pytorch median (%d rounds pooled) %.2f× %s the PERF.md target of ≥ %.1f×\n", r.Rounds, q, verdict(q >= w6TargetRatio), w6TargetRatio)
	}
	return writeReport(stdout, c.jsonDir, rep)
}

// poolW6Peers combines the peer's runs, one per round, into one result:
// the fields of the first run, with best, median and p50 recomputed
// over the products of every run (each run's lat_us) and the runs'
// own figures under "runs".
func poolW6Peers(runs []map[string]any, flop float64) (map[string]any, error) {
	var lat []time.Duration
	summaries := make([]map[string]any, len(runs))
	for i, p := range runs {
		us, ok := p["lat_us"].([]any)
		if !ok || len(us) == 0 {
			return nil, fmt.Errorf("W6 peer run %d wrote no lat_us list", i+1)
		}
		for _, v := range us {
			f, ok := v.(float64)
			if !ok || f <= 0 {
				return nil, fmt.Errorf("W6 peer run %d: bad latency %v", i+1, v)
			}
			lat = append(lat, time.Duration(f*1e3))
		}
		summaries[i] = map[string]any{}
		for k, v := range p {
			if k != "lat_us" {
				summaries[i][k] = v
			}
		}
	}
	l := bench.Summarise(lat)
	best := lat[0]
	for _, d := range lat {
		best = min(best, d)
	}
	pooled := map[string]any{}
	for k, v := range summaries[0] {
		pooled[k] = v
	}
	pooled["reps"] = len(lat)
	pooled["p50_us"] = l.P50us
	pooled["p95_us"] = l.P95us
	pooled["best_gflops"] = flop / best.Seconds() / 1e9
	pooled["median_gflops"] = flop / (l.P50us * 1e-6) / 1e9
	pooled["runs"] = summaries
	return pooled, nil
}

// w7TargetFraction is PERF.md's W7 CPU target: ≥ 60% of the measured
// copy bandwidth.
const w7TargetFraction = 0.60

func benchW7(stdout, stderr io.Writer, c benchConfig) error {
	m := bench.ThisMachine()
	header(stdout, "W7 foreach-optim (fp32, CPU)", m)
	r, err := bench.RunW7(bench.W7Options{
		Params: c.params, Tensors: c.tensors, Steps: c.steps, Warmup: c.warmup,
		Progress: func(phase string) {
			switch phase {
			case "copy":
				fmt.Fprintf(stdout, "  copy bandwidth (40 MB buffer) ...\n")
			default:
				fmt.Fprintf(stdout, "  %s steps over %d parameters in %d tensors ...\n", phase, c.params, c.tensors)
			}
		},
	})
	if err != nil {
		return err
	}
	rep := bench.Report{
		Workload: "W7",
		Parameters: map[string]any{
			"params": r.Params, "tensors": r.Tensors, "shapes": r.Shapes, "steps": r.Steps, "warmup": r.Warmup,
			"sgd":             "optim.SGD lr=0.01 momentum=0.9 (flat arena, one fused kernel per step)",
			"adamw":           "optim.AdamW lr=1e-3 betas=(0.9,0.999) eps=1e-8 weight_decay=0.01 (flat arena, fused)",
			"bytes_per_param": map[string]any{"sgd_momentum": bench.W7SGDBytesPerParam, "adamw": bench.W7AdamWBytesPerParam},
			"copy":            "Go copy of a float32 buffer, read+write bytes over the median time; also split over GOMAXPROCS goroutines",
			"copy_bytes":      r.CopyBytes,
		},
		Machine: m, Device: "cpu",
		Results: map[string]any{
			"sgd_momentum": r.SGD, "adamw": r.AdamW,
			"copy_gbps": r.CopyGBps, "parallel_copy_gbps": r.ParallelCopyGBps, "copy_latency": r.CopyLatency,
		},
		Ratios: map[string]any{
			"sgd_fraction_of_copy": r.SGD.FractionOfCopy, "adamw_fraction_of_copy": r.AdamW.FractionOfCopy,
			"sgd_fraction_of_parallel_copy": r.SGD.FractionOfParallelCopy, "adamw_fraction_of_parallel_copy": r.AdamW.FractionOfParallelCopy,
		},
	}
	peer, err := runPeer(c, stdout, stderr, &rep, "w7_foreach_optim.py",
		"--shapes", bench.W7ShapesArg(r.Shapes), "--steps", fmt.Sprint(r.Steps), "--warmup", fmt.Sprint(r.Warmup),
		"--copy-bytes", fmt.Sprint(r.CopyBytes))
	if err != nil {
		return err
	}
	if peer != nil {
		if got := num(peer, "params"); got != float64(r.Params) {
			return fmt.Errorf("W7 peer ran %v parameters, we ran %d", got, r.Params)
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tp50 ms\tp95 ms\tMB/step\tGB/s\t% of copy\tallocs/step\tesper speedup p50\t")
	for _, o := range []struct {
		ours bench.W7OptimResult
		key  string
	}{{r.SGD, "sgd_momentum"}, {r.AdamW, "adamw"}} {
		fmt.Fprintf(tw, "esper %s\t%.2f\t%.2f\t%.0f\t%.1f\t%.0f%%\t%.1f\t\t\n", o.ours.Optimizer, o.ours.Latency.P50us/1e3, o.ours.Latency.P95us/1e3,
			float64(o.ours.BytesPerStep)/1e6, o.ours.GBps, 100*o.ours.FractionOfCopy, o.ours.AllocsPerStep)
		if peer == nil {
			continue
		}
		pp50 := num(peer, o.key, "step_latency", "p50_us")
		variant := "default"
		if f, _ := peer[o.key].(map[string]any)["foreach"].(bool); f {
			variant = "foreach"
		}
		fmt.Fprintf(tw, "pytorch %s (%s)\t%.2f\t%.2f\t%.0f\t%.1f\t%.0f%%\t-\t%s\t\n", o.ours.Optimizer, variant, pp50/1e3,
			num(peer, o.key, "step_latency", "p95_us")/1e3, num(peer, o.key, "bytes_per_step")/1e6, num(peer, o.key, "gbps"),
			100*num(peer, o.key, "fraction_of_copy"), ratio(pp50, o.ours.Latency.P50us))
		rep.Ratios[o.key+"_speedup_p50"] = pp50 / o.ours.Latency.P50us
		rep.Ratios[o.key+"_speedup_p95"] = num(peer, o.key, "step_latency", "p95_us") / o.ours.Latency.P95us
	}
	tw.Flush()
	fmt.Fprintf(stdout, "copy bandwidth (read+write, %d MB): Go copy %.1f GB/s, Go copy on %d goroutines %.1f GB/s",
		r.CopyBytes/1_000_000, r.CopyGBps, m.GOMAXPROCS, r.ParallelCopyGBps)
	if peer != nil {
		fmt.Fprintf(stdout, ", torch copy_ %.1f GB/s", num(peer, "copy_gbps"))
	}
	fmt.Fprintln(stdout)
	for _, o := range []bench.W7OptimResult{r.SGD, r.AdamW} {
		fmt.Fprintf(stdout, "%s at %.0f%% of Go copy bandwidth (%.0f%% of the parallel copy) %s the PERF.md target of ≥ %.0f%%\n",
			o.Optimizer, 100*o.FractionOfCopy, 100*o.FractionOfParallelCopy, verdict(o.FractionOfCopy >= w7TargetFraction), 100*w7TargetFraction)
	}
	if r.SGD.FractionOfCopy > 1 || r.AdamW.FractionOfCopy > 1 {
		fmt.Fprintln(stdout, "(above 100%: on this machine Go's copy moves fewer bytes per second than the optimizer's in-place update, so it is no bandwidth ceiling here; read the fraction as a relative figure)")
	}
	return writeReport(stdout, c.jsonDir, rep)
}

// w5TargetRatio is PERF.md's W5 CPU target: ≥ 1.0× PyTorch CPU.
const w5TargetRatio = 1.0

func benchW5(stdout, stderr io.Writer, c benchConfig) error {
	m := bench.ThisMachine()
	header(stdout, "W5 host-train (CNN host, CPU)", m)
	r, err := bench.RunW5(bench.W5Options{
		Batch: c.batch, Steps: c.steps, Warmup: c.warmup, EvalBatches: c.evalBatches,
		Captured: c.capture, DataDir: c.dataDir, RandomData: c.randomData,
		Progress: progressEvery(stdout),
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  data: %s\n", r.DataNote)
	results := map[string]any{"eval": r.Eval}
	if r.EvalCaptured != nil {
		results["eval_captured"] = *r.EvalCaptured
	}
	for _, t := range r.Train {
		results["train_"+t.Mode] = t
		if t.Fallback != "" {
			fmt.Fprintf(stderr, "W5 captured training fell back to eager steps: %s\n", t.Fallback)
		}
	}
	rep := bench.Report{
		Workload: "W5",
		Parameters: map[string]any{
			"model": "kasmina CNNHost: 3 × [Conv2d k3 pad 1 no bias → BatchNorm2d → ReLU → MaxPool2d 2] (32/64/128 channels), global average pool, Linear(128→10)",
			"input": "1×28×28, 10 classes", "batch": r.Batch, "steps": r.Steps, "warmup": r.Warmup,
			"eval_batches": r.EvalBatches, "eval_warmup": r.EvalWarmup, "data": r.Data, "data_note": r.DataNote,
			"loss": "cross-entropy (mean)", "optimizer": "SGD lr=0.01 momentum=0.9", "eval": "evaluation mode, inference mode, forward only (eager, and replayed from a captured graph with --capture)",
			"params": r.Params, "fwd_flop_per_sample": r.FwdFLOPPerSample, "train_flop_per_sample": r.TrainFLOPPerSample,
			"samples_per_second": "batch / mean step (batch) time",
		},
		Machine: m, Device: "cpu", Results: results,
	}
	peerArgs := []string{"--batch", fmt.Sprint(r.Batch), "--steps", fmt.Sprint(r.Steps), "--warmup", fmt.Sprint(r.Warmup),
		"--eval-batches", fmt.Sprint(r.EvalBatches), "--eval-warmup", fmt.Sprint(r.EvalWarmup)}
	if r.Data == "fashion-mnist" {
		dir := c.dataDir
		if dir == "" {
			dir = data.DefaultFashionMNISTDir
		}
		peerArgs = append(peerArgs, "--data-dir", dir)
	} else {
		peerArgs = append(peerArgs, "--random")
	}
	peer, err := runPeer(c, stdout, stderr, &rep, "w5_host_train.py", peerArgs...)
	if err != nil {
		return err
	}
	if peer != nil {
		if got := num(peer, "params"); got != float64(r.Params) {
			return fmt.Errorf("W5 peer model has %v parameters, ours %d: the architectures differ", got, r.Params)
		}
		rep.Ratios = map[string]any{}
	}
	peerTrain, peerEval := num(peer, "train_samples_per_second"), num(peer, "eval_samples_per_second")
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tsamples/s\tp50 ms\tp95 ms\teff. GFLOP/s\tallocs/step\tvs pytorch\t")
	for _, t := range r.Train {
		fmt.Fprintf(tw, "train esper %s\t%.0f\t%.1f\t%.1f\t%.1f\t%.0f\t%s\t\n", t.Mode, t.SamplesPerSec, t.Latency.P50us/1e3, t.Latency.P95us/1e3,
			t.GFLOPS, t.AllocsPerStep, ratio(t.SamplesPerSec, peerTrain))
		if peer != nil {
			rep.Ratios["train_"+t.Mode+"_vs_pytorch"] = t.SamplesPerSec / peerTrain
		}
	}
	if peer != nil {
		fmt.Fprintf(tw, "train pytorch %v\t%.0f\t%.1f\t%.1f\t%.1f\t-\t\t\n", peer["torch_version"], peerTrain,
			num(peer, "train_step_latency", "p50_us")/1e3, num(peer, "train_step_latency", "p95_us")/1e3, peerTrain*r.TrainFLOPPerSample/1e9)
	}
	evals := []bench.W5EvalResult{r.Eval}
	if r.EvalCaptured != nil {
		evals = append(evals, *r.EvalCaptured)
	}
	for _, e := range evals {
		fmt.Fprintf(tw, "eval esper %s\t%.0f\t%.1f\t%.1f\t%.1f\t-\t%s\t\n", e.Mode, e.SamplesPerSec, e.Latency.P50us/1e3, e.Latency.P95us/1e3,
			e.GFLOPS, ratio(e.SamplesPerSec, peerEval))
		if peer != nil {
			key := "eval_vs_pytorch"
			if e.Mode != "eager" {
				key = "eval_" + e.Mode + "_vs_pytorch"
			}
			rep.Ratios[key] = e.SamplesPerSec / peerEval
		}
	}
	if peer != nil {
		fmt.Fprintf(tw, "eval pytorch %v\t%.0f\t%.1f\t%.1f\t%.1f\t-\t\t\n", peer["torch_version"], peerEval,
			num(peer, "eval_batch_latency", "p50_us")/1e3, num(peer, "eval_batch_latency", "p95_us")/1e3, peerEval*r.FwdFLOPPerSample/1e9)
	}
	tw.Flush()
	if peer != nil {
		best := 0.0
		for _, t := range r.Train {
			best = max(best, t.SamplesPerSec)
		}
		fmt.Fprintf(stdout, "best esper training at %.2f× PyTorch %s the PERF.md target of ≥ %.1f×\n", best/peerTrain, verdict(best/peerTrain >= w5TargetRatio), w5TargetRatio)
		bestEval := 0.0
		for _, e := range evals {
			bestEval = max(bestEval, e.SamplesPerSec)
		}
		fmt.Fprintf(stdout, "best esper evaluation at %.2f× PyTorch %s the PERF.md target of ≥ %.1f×\n", bestEval/peerEval, verdict(bestEval/peerEval >= w5TargetRatio), w5TargetRatio)
	}
	return writeReport(stdout, c.jsonDir, rep)
}
