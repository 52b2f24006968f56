package bench

// W6 as esper bench runs it on the CPU: our GEMM, gonum's and, with
// --compare pytorch, the peer's in rounds that alternate with ours.

import (
	"fmt"
	"io"
	"runtime"
	"time"
)

// w6TargetRatio is PERF.md's W6 CPU target: ≥ 1.0× OpenBLAS (PyTorch).
const w6TargetRatio = 1.0

// benchW6 runs W6, prints its table and verdicts and writes its report.
func benchW6(stdout, stderr io.Writer, c Config) error {
	m := ThisMachine()
	header(stdout, "W6 gemm (fp32, CPU)", m)
	if c.Rounds <= 0 {
		return fmt.Errorf("--rounds must be positive, got %d", c.Rounds)
	}
	o, err := W6Options{Size: c.Size, Reps: c.Reps, Warmup: c.Warmup, Rounds: c.Rounds}.Resolve()
	if err != nil {
		return err
	}
	rep := Report{Workload: "W6", Machine: m, Device: "cpu"}
	// The peer stays up (its --serve mode) and runs a block of products
	// after each round of ours; its blocks are pooled like our rounds.
	var peers []map[string]any
	var sess *PeerSession
	if c.Compare {
		fmt.Fprintf(stdout, "  starting the PyTorch peer (%s/w6_gemm.py) ...\n", c.PeerDir)
		sess, err = StartPeer(c.PeerDir, "w6_gemm.py", runtime.GOMAXPROCS(0), "--size", fmt.Sprint(o.Size), "--seed", fmt.Sprint(o.Seed))
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
	r, err := RunW6(o)
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
		rows = append(rows, w6row{fmt.Sprintf("pytorch %v", peer["torch_version"]), Figure(peer, "best_gflops"), Figure(peer, "median_gflops"), Figure(peer, "p50_us")})
		rep.Ratios["esper_vs_pytorch_median"] = r.Esper.MedianGFLOPS / Figure(peer, "median_gflops")
		rep.Ratios["esper_vs_pytorch_best"] = r.Esper.BestGFLOPS / Figure(peer, "best_gflops")
		fmt.Fprintln(stdout, "  median GFLOP/s by round (esper, then the peer's block after it):")
		for i, p := range peers {
			e := r.EsperRounds[i].MedianGFLOPS
			fmt.Fprintf(stdout, "    round %d: esper %.1f, pytorch %.1f (%s)\n", i+1, e, Figure(p, "median_gflops"), Ratio(e, Figure(p, "median_gflops")))
		}
	}
	tw := NewTable(stdout, AlignRight)
	fmt.Fprintln(tw, "\tbest GFLOP/s\tmedian GFLOP/s\tp50 ms\tesper ÷ it (median)\tesper ÷ it (best)\t")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t%s\t%s\t\n", row.name, row.best, row.median, row.p50us/1e3,
			Ratio(r.Esper.MedianGFLOPS, row.median), Ratio(r.Esper.BestGFLOPS, row.best))
	}
	tw.Flush()
	if peer != nil {
		q := r.Esper.MedianGFLOPS / Figure(peer, "median_gflops")
		fmt.Fprintf(stdout, "esper/pytorch median (%d rounds pooled) %.2f× %s the PERF.md target of ≥ %.1f×\n", r.Rounds, q, Verdict(q >= w6TargetRatio), w6TargetRatio)
	}
	return SaveReport(stdout, c.JSONDir, rep)
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
	l := Summarise(lat)
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
