package bench

// W2 and W4 beside their PyTorch peers on a CUDA device: the peers'
// figures read from a GPU run's --peer-results directory (gpu/run.sh runs
// the peers first), and the GPU targets of PERF.md.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// PERF.md W2 GPU target: the large batch's (64 graphs) captured p95 ≤
// 200 µs. PERF.md sets no GPU target against the peer; the ratio to the
// peer's best mode is reported.
const (
	w2GPUTargetBatch     = 64
	w2GPUTargetP95usCapt = 200
)

// w2PeerModes are the GPU peer's modes (bench/pytorch/w2_gnn.py --device
// cuda), in the order they are printed; those ending in w2TF32Suffix ran
// their float32 products as TF32 (torch.set_float32_matmul_precision
// "high").
var w2PeerModes = []string{"eager", "cuda-graph", "reduce-overhead", "cuda-graph-tf32", "reduce-overhead-tf32"}

// w2TF32Suffix marks the peer's TF32 modes.
const w2TF32Suffix = "-tf32"

// readDevicePeer reads the PyTorch peer's report of workload w ("w2",
// "w4") from a GPU run's --peer-results directory: dir/pytorch_<w>.json
// (ParsePeerReport).
func readDevicePeer(dir, w string) (map[string]any, string, error) {
	path := filepath.Join(dir, "pytorch_"+w+".json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, path, err
	}
	peer, err := ParsePeerReport(data, w)
	if err != nil {
		return nil, path, fmt.Errorf("%s: %w", path, err)
	}
	return peer, path, nil
}

// ParsePeerReport parses a PyTorch peer's JSON report of workload w (a
// GPU peer's, bench/pytorch/gpu_peers.py and the others with --json):
// a JSON object whose "workload" is w, in any case.
func ParsePeerReport(data []byte, w string) (map[string]any, error) {
	var peer map[string]any
	if err := json.Unmarshal(data, &peer); err != nil {
		return nil, fmt.Errorf("the peer wrote invalid JSON: %w", err)
	}
	if got, _ := peer["workload"].(string); !strings.EqualFold(got, w) {
		return nil, fmt.Errorf("the peer's report is for workload %q, not %s", got, strings.ToUpper(w))
	}
	return peer, nil
}

// w2PeerFigure is one mode's figures at one batch size in the GPU peer's
// report; Err is the mode's failure (its figures are then 0).
type w2PeerFigure struct {
	Mode                       string
	P50us, P95us, GraphsPerSec float64
	Err                        string
}

// w2PeerFigures returns the peer's figures at batch, one per mode it
// ran, in w2PeerModes' order (a report without "modes", a CPU peer's,
// gives its eager figures).
func w2PeerFigures(peer map[string]any, batch int) []w2PeerFigure {
	b := fmt.Sprint(batch)
	modes, _ := peer["modes"].(map[string]any)
	if modes == nil {
		modes = map[string]any{"eager": peer["batches"]}
	}
	var out []w2PeerFigure
	for _, m := range w2PeerModes {
		byBatch, _ := modes[m].(map[string]any)
		row, ok := byBatch[b].(map[string]any)
		if !ok {
			continue
		}
		f := w2PeerFigure{Mode: m, P50us: Figure(row, "latency", "p50_us"), P95us: Figure(row, "latency", "p95_us"),
			GraphsPerSec: Figure(row, "graphs_per_second")}
		if e, ok := row["error"].(string); ok {
			f.Err = e
		} else if f.P95us <= 0 {
			f.Err = "no latency in the report"
		}
		out = append(out, f)
	}
	return out
}

// w2PeerBest returns the mode of figs with the lowest p95 among those
// that ran, of the TF32 modes when tf32 is set and of the fp32 ones when
// not (false when none did).
func w2PeerBest(figs []w2PeerFigure, tf32 bool) (w2PeerFigure, bool) {
	best, ok := w2PeerFigure{P95us: math.Inf(1)}, false
	for _, f := range figs {
		if strings.HasSuffix(f.Mode, w2TF32Suffix) != tf32 {
			continue
		}
		if f.Err == "" && f.P95us < best.P95us {
			best, ok = f, true
		}
	}
	return best, ok
}

// w2DevicePeer reads W2's peer from dir (--peer-results) and checks that
// it built our network (params parameters).
func w2DevicePeer(stdout io.Writer, dir string, params int) (map[string]any, error) {
	peer, path, err := readDevicePeer(dir, "w2")
	if err != nil {
		return nil, err
	}
	if got := Figure(peer, "params"); got != float64(params) {
		return nil, fmt.Errorf("%s: the peer's network has %v parameters, ours %d: the architectures differ", path, got, params)
	}
	fmt.Fprintf(stdout, "  PyTorch peer figures from %s\n", path)
	return peer, nil
}

// w2GPUVerdicts prints W2's GPU verdicts: the captured p95 at batch 64
// against PERF.md's target and, with a peer, our captured p95 against
// each of the peer's modes and its best, recorded in ratios.
// The fp32 captured mode is held to the fp32 peer modes, the TF32 one to
// the TF32 modes.
func w2GPUVerdicts(w io.Writer, r *W2Result, peer map[string]any, ratios map[string]any) {
	for _, b := range r.Batches {
		for _, mode := range []string{W2ModeCaptured, W2ModeCapturedTF32} {
			cpt := r.Result(b, mode)
			if cpt == nil {
				continue
			}
			tf32 := mode == W2ModeCapturedTF32
			if b == w2GPUTargetBatch {
				fmt.Fprintf(w, "batch %d %s p95 %.0f µs %s the PERF.md GPU target of ≤ %d µs\n", b, mode, cpt.Latency.P95us,
					Verdict(cpt.Latency.P95us <= w2GPUTargetP95usCapt), w2GPUTargetP95usCapt)
			}
			if peer == nil || cpt.Latency.P95us <= 0 {
				continue
			}
			figs := w2PeerFigures(peer, b)
			for _, f := range figs {
				if strings.HasSuffix(f.Mode, w2TF32Suffix) != tf32 {
					continue
				}
				if f.Err != "" {
					fmt.Fprintf(w, "batch %d pytorch %s failed: %s\n", b, f.Mode, firstLine(f.Err))
					continue
				}
				ratios[fmt.Sprintf("batch%d_%s_speedup_p95_vs_pytorch_%s", b, mode, f.Mode)] = f.P95us / cpt.Latency.P95us
			}
			best, ok := w2PeerBest(figs, tf32)
			if !ok {
				fmt.Fprintf(w, "batch %d: no %s mode of the PyTorch peer ran\n", b, map[bool]string{false: "fp32", true: "TF32"}[tf32])
				continue
			}
			s := best.P95us / cpt.Latency.P95us
			ratios[fmt.Sprintf("batch%d_%s_speedup_p95_vs_pytorch_best", b, mode)] = s
			ratios[fmt.Sprintf("batch%d_%s_pytorch_best_mode", b, mode)] = best.Mode
			fmt.Fprintf(w, "batch %d %s p95 %.0f µs vs pytorch's best of its precision (%s) %.0f µs: %.2f× (no PERF.md target)\n",
				b, mode, cpt.Latency.P95us, best.Mode, best.P95us, s)
		}
	}
}

// firstLine is s up to its first line break, at most 200 bytes.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
