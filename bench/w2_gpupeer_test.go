package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// w2FakeGPUPeer is a report of w2_gnn.py --device cuda: at batch 64 eager
// 900 µs, cuda-graph 300 µs, reduce-overhead failed, cuda-graph-tf32 120
// µs; at batch 1 eager 800 µs, cuda-graph 400 µs, reduce-overhead 250
// µs, cuda-graph-tf32 390 µs, reduce-overhead-tf32 240 µs.
const w2FakeGPUPeer = `{"workload": "W2", "peer": "pytorch", "torch_version": "2.11.0", "device": "cuda:0", "params": 1234,
 "batches": {"1": {"batch": 1, "latency": {"p50_us": 700, "p95_us": 800}, "graphs_per_second": 1400},
             "64": {"batch": 64, "latency": {"p50_us": 850, "p95_us": 900}, "graphs_per_second": 75000}},
 "modes": {
  "eager": {"1": {"batch": 1, "latency": {"p50_us": 700, "p95_us": 800}, "graphs_per_second": 1400},
            "64": {"batch": 64, "latency": {"p50_us": 850, "p95_us": 900}, "graphs_per_second": 75000}},
  "cuda-graph": {"1": {"batch": 1, "latency": {"p50_us": 380, "p95_us": 400}, "graphs_per_second": 2600},
                 "64": {"batch": 64, "latency": {"p50_us": 290, "p95_us": 300}, "graphs_per_second": 220000}},
  "reduce-overhead": {"1": {"batch": 1, "latency": {"p50_us": 240, "p95_us": 250}, "graphs_per_second": 4100},
                      "64": {"batch": 64, "error": "BackendCompilerFailed: inductor\nline 2"}},
  "cuda-graph-tf32": {"1": {"batch": 1, "latency": {"p50_us": 370, "p95_us": 390}, "graphs_per_second": 2700},
                      "64": {"batch": 64, "latency": {"p50_us": 110, "p95_us": 120}, "graphs_per_second": 580000}},
  "reduce-overhead-tf32": {"1": {"batch": 1, "latency": {"p50_us": 230, "p95_us": 240}, "graphs_per_second": 4300}}}}`

// writeFakePeer writes data as dir/pytorch_<w>.json.
func writeFakePeer(t *testing.T, dir, w, data string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pytorch_"+w+".json"), []byte(data), 0o644))
}

// w2FakeResult is our side: captured p95 150 µs at batch 64 (or capt64),
// 500 µs at batch 1; with TF32 100 µs at batch 64.
func w2FakeResult(capt64 float64) *W2Result {
	return &W2Result{Batches: []int{1, 64}, Params: 1234, Results: []W2ModeResult{
		{Batch: 1, Mode: "eager", Latency: Latency{P95us: 1900}},
		{Batch: 1, Mode: "captured", Latency: Latency{P95us: 500}},
		{Batch: 64, Mode: "eager", Latency: Latency{P95us: 2900}},
		{Batch: 64, Mode: "captured", Latency: Latency{P95us: capt64}},
		{Batch: 64, Mode: W2ModeCapturedTF32, Latency: Latency{P95us: 100}},
	}}
}

// TestReadDevicePeer: a GPU run's peer report is read from
// DIR/pytorch_<w>.json, and a missing, malformed or other workload's
// report is an error naming the file.
func TestReadDevicePeer(t *testing.T) {
	dir := t.TempDir()
	_, _, err := readDevicePeer(dir, "w2")
	require.ErrorIs(t, err, os.ErrNotExist)
	writeFakePeer(t, dir, "w2", `{"workload": "W4"}`)
	_, _, err = readDevicePeer(dir, "w2")
	require.ErrorContains(t, err, `workload "W4", not W2`)
	writeFakePeer(t, dir, "w2", `[1, 2]`)
	_, _, err = readDevicePeer(dir, "w2")
	require.ErrorContains(t, err, "pytorch_w2.json: the peer wrote invalid JSON")
	writeFakePeer(t, dir, "w2", w2FakeGPUPeer)
	peer, path, err := readDevicePeer(dir, "w2")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "pytorch_w2.json"), path)
	require.Equal(t, "2.11.0", peer["torch_version"])
}

// TestW2DevicePeerChecksTheNetwork: a peer that built another network
// (another parameter count) is refused.
func TestW2DevicePeerChecksTheNetwork(t *testing.T) {
	dir := t.TempDir()
	writeFakePeer(t, dir, "w2", w2FakeGPUPeer)
	var out bytes.Buffer
	_, err := w2DevicePeer(&out, dir, 999)
	require.ErrorContains(t, err, "1234 parameters, ours 999")
	peer, err := w2DevicePeer(&out, dir, 1234)
	require.NoError(t, err)
	require.NotNil(t, peer)
	require.Contains(t, out.String(), "PyTorch peer figures from "+filepath.Join(dir, "pytorch_w2.json"))
}

// TestW2PeerFigures: the GPU peer's modes in order, a failed one with
// its error, and the best mode the fastest that ran; a CPU peer's report
// gives its eager figures.
func TestW2PeerFigures(t *testing.T) {
	dir := t.TempDir()
	writeFakePeer(t, dir, "w2", w2FakeGPUPeer)
	peer, _, err := readDevicePeer(dir, "w2")
	require.NoError(t, err)
	figs := w2PeerFigures(peer, 64)
	require.Len(t, figs, 4)
	require.Equal(t, []string{"eager", "cuda-graph", "reduce-overhead", "cuda-graph-tf32"}, []string{figs[0].Mode, figs[1].Mode, figs[2].Mode, figs[3].Mode})
	require.Equal(t, 300.0, figs[1].P95us)
	require.Equal(t, 290.0, figs[1].P50us)
	require.Contains(t, figs[2].Err, "BackendCompilerFailed")
	best, ok := w2PeerBest(figs, false)
	require.True(t, ok)
	require.Equal(t, "cuda-graph", best.Mode, "the failed mode is never the best, nor a TF32 one among fp32")
	best, ok = w2PeerBest(figs, true)
	require.True(t, ok)
	require.Equal(t, "cuda-graph-tf32", best.Mode)
	best, ok = w2PeerBest(w2PeerFigures(peer, 1), false)
	require.True(t, ok)
	require.Equal(t, "reduce-overhead", best.Mode)
	best, ok = w2PeerBest(w2PeerFigures(peer, 1), true)
	require.True(t, ok)
	require.Equal(t, "reduce-overhead-tf32", best.Mode)
	require.Empty(t, w2PeerFigures(peer, 8), "no figures at a batch the peer did not run")
	_, ok = w2PeerBest([]w2PeerFigure{{Mode: "eager", Err: "boom"}}, false)
	require.False(t, ok)

	cpu := map[string]any{"batches": map[string]any{"1": map[string]any{"latency": map[string]any{"p50_us": 10.0, "p95_us": 12.0}}}}
	figs = w2PeerFigures(cpu, 1)
	require.Len(t, figs, 1)
	require.Equal(t, w2PeerFigure{Mode: "eager", P50us: 10, P95us: 12}, figs[0])
	require.Empty(t, w2PeerFigures(map[string]any{}, 1))
}

// TestW2GPUVerdicts: the batch-64 captured p95 against 200 µs, and our
// captured p95 against each of the peer's modes that ran and its best.
func TestW2GPUVerdicts(t *testing.T) {
	dir := t.TempDir()
	writeFakePeer(t, dir, "w2", w2FakeGPUPeer)
	peer, _, err := readDevicePeer(dir, "w2")
	require.NoError(t, err)

	var out bytes.Buffer
	ratios := map[string]any{}
	w2GPUVerdicts(&out, w2FakeResult(150), peer, ratios)
	s := out.String()
	require.Contains(t, s, "batch 64 captured p95 150 µs meets the PERF.md GPU target of ≤ 200 µs")
	require.Contains(t, s, "batch 64 captured p95 150 µs vs pytorch's best of its precision (cuda-graph) 300 µs: 2.00×")
	require.Contains(t, s, "batch 64 pytorch reduce-overhead failed: BackendCompilerFailed: inductor\n")
	require.Contains(t, s, "batch 1 captured p95 500 µs vs pytorch's best of its precision (reduce-overhead) 250 µs: 0.50×")
	require.NotContains(t, s, "batch 1 captured p95 500 µs meets", "the target is batch 64's")
	require.InDelta(t, 2.0, ratios["batch64_captured_speedup_p95_vs_pytorch_best"], 1e-12)
	require.Equal(t, "cuda-graph", ratios["batch64_captured_pytorch_best_mode"])
	require.InDelta(t, 6.0, ratios["batch64_captured_speedup_p95_vs_pytorch_eager"], 1e-12)
	require.NotContains(t, ratios, "batch64_captured_speedup_p95_vs_pytorch_reduce-overhead")
	require.InDelta(t, 0.5, ratios["batch1_captured_speedup_p95_vs_pytorch_best"], 1e-12)
	require.Equal(t, "reduce-overhead", ratios["batch1_captured_pytorch_best_mode"])
	// TF32 against the peer's TF32 modes alone.
	require.Contains(t, s, "batch 64 captured-tf32 p95 100 µs meets the PERF.md GPU target of ≤ 200 µs")
	require.Contains(t, s, "batch 64 captured-tf32 p95 100 µs vs pytorch's best of its precision (cuda-graph-tf32) 120 µs: 1.20×")
	require.InDelta(t, 1.2, ratios["batch64_captured-tf32_speedup_p95_vs_pytorch_best"], 1e-12)
	require.NotContains(t, ratios, "batch64_captured-tf32_speedup_p95_vs_pytorch_cuda-graph")
	require.NotContains(t, ratios, "batch64_captured_speedup_p95_vs_pytorch_cuda-graph-tf32")

	out.Reset()
	ratios = map[string]any{}
	w2GPUVerdicts(&out, w2FakeResult(250), nil, ratios)
	require.Contains(t, out.String(), "batch 64 captured p95 250 µs misses the PERF.md GPU target of ≤ 200 µs")
	require.NotContains(t, out.String(), "pytorch")
	require.Empty(t, ratios, "no peer, no ratios")
}
