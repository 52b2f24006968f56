package bench

// W2 as esper bench runs it on the CPU: policy inference at batch 1 and
// a large batch, eager and captured, beside the PyTorch peer.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/esper-go/esper/tensor"
)

// PERF.md W2 CPU targets: batch-1 p95 ≤ 1 ms, batch-64 p95 ≤ 40 ms,
// captured ≤ 0.8× eager, ≥ 2× faster than the PyTorch peer.
const (
	w2TargetP95usBatch1  = 1000
	w2TargetP95usBatch64 = 40000
	w2TargetCapturedFrac = 0.8
	w2TargetPeerSpeedup  = 2.0
)

// benchW2 runs W2 on the CPU.
func benchW2(stdout, stderr io.Writer, c Config) error { return BenchW2(stdout, stderr, c, tensor.CPU) }

// BenchW2 runs W2 with the policy on dev, prints its table and verdicts
// and writes its report; on a device other than the CPU the table gives
// the host syncs per forward (esper bench --workload W2 --device sim).
// On a CUDA device the verdicts are PERF.md's GPU ones, and the PyTorch
// peer is read from c.PeerResults (DIR/pytorch_w2.json, written by
// bench/pytorch/w2_gnn.py --device cuda before esper runs: gpu/run.sh)
// or, with c.Compare alone, run on the device after our measurements; a
// peer that cannot be had there is no error (the report's peer_error
// says why).
func BenchW2(stdout, stderr io.Writer, c Config, dev tensor.Device) error {
	cuda := dev.Kind == tensor.KindCUDA
	if !dev.IsCPU() && !cuda && c.Compare {
		return fmt.Errorf("W2 on %v: --compare pytorch compares the CPU's or a GPU's speed; run W2 on cpu or cuda to compare", dev)
	}
	m := ThisMachine()
	header(stdout, fmt.Sprintf("W2 tamiyo-gnn (policy inference, %v)", dev), m)
	batches := []int{1, c.Graphs}
	if c.Graphs == 1 {
		batches = []int{1}
	}
	fmt.Fprintf(stdout, "  hetero-GNN policy on the 3-slot CNN host graph (2 live seeds), batches %v, eager and captured ...\n", batches)
	// On CUDA the captured forward is timed with TF32 products too, beside
	// the peer's TF32 modes (TF32 changes nothing on the CPU or sim).
	r, graphs, err := RunW2(W2Options{Batches: batches, Reps: c.Reps, Warmup: c.Warmup, Device: dev, Progress: progressEvery(stdout), TF32: cuda})
	if err != nil {
		return err
	}
	results := map[string]any{}
	for _, x := range r.Results {
		results[fmt.Sprintf("batch%d_%s", x.Batch, x.Mode)] = x
		if x.Fallback != "" {
			fmt.Fprintf(stderr, "W2 batch %d: capture fell back to eager forwards: %s\n", x.Batch, x.Fallback)
		}
	}
	rep := Report{
		Workload: "W2",
		Parameters: map[string]any{
			"model":   "tamiyo.Policy: per-type encoders Linear→GELU→LayerNorm, GraphSAGE ×2, GAT ×2 (heads averaged, edge-aware attention), 8 action heads (slot as a pointer) + value; evaluation mode, inference mode",
			"options": r.Options, "params": r.Params, "graph": "3-slot CNN host (3 blocks, 32/64/128 channels), seeds in r0c0 (TRAINING) and r0c1 (BLENDING), r0c2 empty",
			"nodes": r.Nodes, "edges_per_graph": r.Edges, "flop_per_graph": r.FLOPPerGraph,
			"batches": r.Batches, "reps": r.Reps, "warmup": r.Warmup,
			"timed": "tamiyo.Inference.Forward: graph check, conversion to tensors, forward (replayed when captured), logits and value copied to the host",
		},
		Machine: m, Device: dev.String(), Results: results,
		Ratios: map[string]any{},
	}
	var peer map[string]any
	if cuda && c.PeerResults != "" {
		if peer, err = w2DevicePeer(stdout, c.PeerResults, r.Params); err != nil {
			peerFailed(stderr, &rep, "W2", err)
		}
		rep.Peer = peer
	} else if c.Compare {
		tmp, err := os.MkdirTemp("", "esper-w2-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		gf := filepath.Join(tmp, "w2_graphs.json")
		if err := W2PeerGraphs(gf, r.Policy, graphs); err != nil {
			return err
		}
		var bs, reps []string
		for i, b := range r.Batches {
			bs = append(bs, fmt.Sprint(b))
			reps = append(reps, fmt.Sprint(r.Reps[i]))
		}
		warm := c.Warmup
		if warm == 0 {
			warm = r.Warmup
		}
		args := []string{"--graphs-file", gf,
			"--batches", strings.Join(bs, ","), "--reps", strings.Join(reps, ","), "--warmup", fmt.Sprint(warm)}
		if peer, err = runWorkloadPeer(c, stdout, stderr, &rep, "W2", cuda, dev, "w2_gnn.py", args...); err != nil {
			return err
		}
		if peer != nil {
			if got := Figure(peer, "params"); got != float64(r.Params) {
				return fmt.Errorf("W2 peer network has %v parameters, ours %d: the architectures differ", got, r.Params)
			}
		}
	}
	tw := NewTable(stdout, AlignRight)
	fmt.Fprintln(tw, "\tp50 ms\tp95 ms\tgraphs/s\teff. GFLOP/s\tallocs/fwd\tvs pytorch p95\t")
	for _, b := range r.Batches {
		pp95 := Figure(peer, "batches", fmt.Sprint(b), "latency", "p95_us")
		for _, mode := range []string{W2ModeEager, W2ModeCaptured, W2ModeCapturedTF32} {
			x := r.Result(b, mode)
			if x == nil {
				continue
			}
			// The column "vs pytorch": its eager p95 on the CPU, its best
			// mode's of the same precision on a GPU.
			vs := pp95
			if best, ok := w2PeerBest(w2PeerFigures(peer, b), mode == W2ModeCapturedTF32); cuda && ok {
				vs = best.P95us
			}
			fmt.Fprintf(tw, "batch %d esper %s\t%.2f\t%.2f\t%.0f\t%.1f\t%.0f\t%s\t\n", b, mode, x.Latency.P50us/1e3, x.Latency.P95us/1e3,
				x.GraphsPerSec, x.GFLOPS, x.AllocsPerForward, Ratio(vs, x.Latency.P95us))
			if peer != nil && pp95 > 0 { // against the peer's eager mode
				rep.Ratios[fmt.Sprintf("batch%d_%s_speedup_p95", b, mode)] = pp95 / x.Latency.P95us
				rep.Ratios[fmt.Sprintf("batch%d_%s_speedup_p50", b, mode)] = Figure(peer, "batches", fmt.Sprint(b), "latency", "p50_us") / x.Latency.P50us
			}
		}
		if peer != nil && cuda {
			for _, f := range w2PeerFigures(peer, b) {
				if f.Err != "" {
					fmt.Fprintf(tw, "batch %d pytorch %v %s\tfailed\t\t\t\t\t\t\n", b, peer["torch_version"], f.Mode)
					continue
				}
				fmt.Fprintf(tw, "batch %d pytorch %v %s\t%.2f\t%.2f\t%.0f\t%.1f\t-\t\t\n", b, peer["torch_version"], f.Mode,
					f.P50us/1e3, f.P95us/1e3, f.GraphsPerSec, r.FLOPPerGraph*f.GraphsPerSec/1e9)
			}
		} else if peer != nil {
			fmt.Fprintf(tw, "batch %d pytorch %v\t%.2f\t%.2f\t%.0f\t%.1f\t-\t\t\n", b, peer["torch_version"],
				Figure(peer, "batches", fmt.Sprint(b), "latency", "p50_us")/1e3, pp95/1e3, Figure(peer, "batches", fmt.Sprint(b), "graphs_per_second"),
				r.FLOPPerGraph*Figure(peer, "batches", fmt.Sprint(b), "graphs_per_second")/1e9)
		}
		e, cpt := r.Result(b, "eager"), r.Result(b, "captured")
		rep.Ratios[fmt.Sprintf("batch%d_captured_over_eager_p95", b)] = cpt.Latency.P95us / e.Latency.P95us
	}
	tw.Flush()
	if !dev.IsCPU() {
		for _, x := range r.Results {
			fmt.Fprintf(stdout, "host syncs per forward, batch %d %s: %.2f\n", x.Batch, x.Mode, x.HostSyncsPerForward)
		}
	}
	for _, x := range r.Results {
		if x.GraphNodes > 0 {
			fmt.Fprintf(stdout, "batch %d %s: %d graph nodes per forward\n", x.Batch, x.Mode, x.GraphNodes)
		}
		if !dev.IsCPU() {
			fmt.Fprintf(stdout, "batch %d %s: features mapped %v, logits read from mapped memory %v\n", x.Batch, x.Mode, x.MappedInputs, x.MappedOutputs)
		}
		if x.Phases != nil {
			fmt.Fprintf(stdout, "batch %d %s host phases (p50 µs): upload %.1f, run %.1f, read %.1f\n",
				x.Batch, x.Mode, x.Phases.Upload, x.Phases.Run, x.Phases.Read)
		}
		if len(x.Slowest) > 0 && x.Mode != W2ModeEager {
			fmt.Fprintf(stdout, "batch %d %s slowest forwards (µs):", x.Batch, x.Mode)
			for i, f := range x.Slowest {
				sep := ","
				if i == 0 {
					sep = ""
				}
				fmt.Fprintf(stdout, "%s %.1f (upload %.1f, run %.1f, read %.1f)", sep, f.Us, f.Upload, f.Run, f.Read)
			}
			fmt.Fprintf(stdout, "; %d GC cycles during its forwards, %.1f µs of pauses\n", x.GCCycles, x.GCPauseUs)
		}
		if x.DeviceUsPerForward > 0 {
			fmt.Fprintf(stdout, "batch %d %s: %.1f µs of device time per forward (its graph replayed %d times back to back, nothing read), %.1f µs for one replay alone (p50 of %d; p95 %.1f), of %.1f µs p50\n",
				x.Batch, x.Mode, x.DeviceUsPerForward, w2DeviceReplays, x.DeviceUsOneForward, w2LoneReplays, x.DeviceUsOneForwardP95, x.Latency.P50us)
		}
		if x.Mode == W2ModeCapturedTF32 {
			fmt.Fprintf(stdout, "batch %d %s: logits and values within %.2g of the eager fp32 forward's\n", x.Batch, x.Mode, x.MaxAbsDiffVsEager)
		}
	}
	fmt.Fprintf(stdout, "%.1f MFLOP per graph (matrix products); captured logits %s eager\n", r.FLOPPerGraph/1e6,
		map[bool]string{true: "equal", false: "DIFFER from"}[r.CapturedMatchesEager])
	if cuda {
		w2GPUVerdicts(stdout, &r, peer, rep.Ratios)
	} else {
		w2CPUVerdicts(stdout, &r, peer)
	}
	if !r.CapturedMatchesEager {
		return fmt.Errorf("W2: captured logits differ from eager ones")
	}
	return SaveReport(stdout, c.JSONDir, rep)
}

// w2CPUVerdicts prints W2's verdicts against PERF.md's CPU targets (also
// on sim, whose kernels are the CPU's).
func w2CPUVerdicts(stdout io.Writer, r *W2Result, peer map[string]any) {
	for _, b := range r.Batches {
		cpt, e := r.Result(b, "captured"), r.Result(b, "eager")
		best := min(cpt.Latency.P95us, e.Latency.P95us)
		switch b {
		case 1:
			fmt.Fprintf(stdout, "batch 1 p95 %.2f ms %s the PERF.md target of ≤ 1 ms\n", best/1e3, Verdict(best <= w2TargetP95usBatch1))
		case 64:
			fmt.Fprintf(stdout, "batch 64 p95 %.2f ms %s the PERF.md target of ≤ 40 ms\n", best/1e3, Verdict(best <= w2TargetP95usBatch64))
		}
		q := cpt.Latency.P95us / e.Latency.P95us
		fmt.Fprintf(stdout, "batch %d captured/eager p95 %.2f %s the PERF.md target of ≤ %.1f\n", b, q, Verdict(q <= w2TargetCapturedFrac), w2TargetCapturedFrac)
		if peer != nil {
			s := Figure(peer, "batches", fmt.Sprint(b), "latency", "p95_us") / best
			fmt.Fprintf(stdout, "batch %d speedup over pytorch (p95) %.2f× %s the PERF.md target of ≥ %.0f×\n", b, s, Verdict(s >= w2TargetPeerSpeedup), w2TargetPeerSpeedup)
		}
	}
}
