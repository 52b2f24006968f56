package bench

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
)

// w2Small is a narrow network that keeps the test fast.
var w2Small = tamiyo.PolicyOptions{Hidden: 16, GATHidden: 8, GATHeads: 2, HeadHidden: 8}

// TestW2Runs: a tiny W2 times every batch size in both modes, with
// captured logits equal to eager ones and one latency per forward.
func TestW2Runs(t *testing.T) {
	calls := 0
	r, graphs, err := RunW2(W2Options{Batches: []int{1, 3}, Reps: 3, Warmup: 1, Policy: w2Small,
		Progress: func(string, int, int) { calls++ }})
	require.NoError(t, err)
	require.Len(t, r.Results, 4)
	require.Equal(t, 12, calls)
	require.True(t, r.CapturedMatchesEager)
	for _, b := range []int{1, 3} {
		require.Equal(t, b, graphs[b].NumGraphs)
		for _, mode := range []string{"eager", "captured"} {
			x := r.Result(b, mode)
			require.NotNil(t, x, "batch %d %s", b, mode)
			require.Equal(t, 3, x.Latency.N)
			require.Greater(t, x.Latency.P50us, 0.0)
			require.Empty(t, x.Fallback)
			// The host phases are parts of each forward: each median
			// positive and within the slowest forward.
			require.NotNil(t, x.Phases, "batch %d %s", b, mode)
			for _, p := range []float64{x.Phases.Upload, x.Phases.Run, x.Phases.Read} {
				require.Positive(t, p)
				require.LessOrEqual(t, p, x.Latency.MaxUs)
			}
			// The slowest forwards, slowest first: the first the maximum,
			// each one's phases within it.
			require.Len(t, x.Slowest, 3)
			require.Equal(t, x.Latency.MaxUs, x.Slowest[0].Us)
			for i, f := range x.Slowest {
				if i > 0 {
					require.LessOrEqual(t, f.Us, x.Slowest[i-1].Us)
				}
				require.LessOrEqual(t, f.Upload+f.Run+f.Read, f.Us*1.0001+0.01)
			}
		}
	}
	require.Equal(t, map[string]int{"global": 1, "slot": 3, "layer": 3}, r.Nodes)
	require.Greater(t, r.Params, 0)
	require.Greater(t, r.FLOPPerGraph, 0.0)
}

// TestW2FLOPs: the PERF.md network is tens of MFLOP per graph ("≈ 50
// MFLOP" in PERF.md), and the count is per graph whatever the batch.
func TestW2FLOPs(t *testing.T) {
	p, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{})
	require.NoError(t, err)
	one, err := W2Graph(1)
	require.NoError(t, err)
	four, err := W2Graph(4)
	require.NoError(t, err)
	f := W2FLOPs(one, p.Options())
	require.InDelta(t, f, W2FLOPs(four, p.Options()), 1e-6*f)
	require.True(t, f > 20e6 && f < 80e6, "%.1f MFLOP", f/1e6)
}

func TestW2RejectsBadOptions(t *testing.T) {
	_, _, err := RunW2(W2Options{Batches: []int{0}})
	require.Error(t, err)
	_, _, err = RunW2(W2Options{Reps: -1})
	require.Error(t, err)
}

// TestW2PeerSameNetwork runs the PyTorch peer on the tiny network's
// graphs (when PyTorch is installed) and checks that it built a network
// with our parameter count and the same output shapes.
func TestW2PeerSameNetwork(t *testing.T) {
	if err := PeerAvailable(); errors.Is(err, ErrNoPeer) {
		t.Skip(err)
	}
	r, graphs, err := RunW2(W2Options{Batches: []int{1, 3}, Reps: 1, Warmup: 1, Policy: w2Small})
	require.NoError(t, err)
	gf := filepath.Join(t.TempDir(), "graphs.json")
	require.NoError(t, W2PeerGraphs(gf, r.Policy, graphs))
	peer, err := RunPeer("pytorch", "w2_gnn.py", 1, "--graphs-file", gf, "--batches", "1,3", "--reps", "2,2", "--warmup", "1")
	require.NoError(t, err)
	require.Equal(t, float64(r.Params), peer["params"])
	b3 := peer["batches"].(map[string]any)["3"].(map[string]any)
	shapes := b3["logit_shapes"].([]any)
	require.Len(t, shapes, 9)
	require.Equal(t, []any{3.0, 3.0}, shapes[0], "slot logits [B, max slots]")
	require.Equal(t, []any{3.0}, shapes[8], "value [B]")
}

// TestW2OnSimOneSyncPerForward: the policy on the sim device reads its
// logits and values back once per forward, eager or captured (TF32
// too, which changes nothing there), at any batch size; the CPU reads
// nothing. BenchW2 on sim prints the counts
// and refuses --compare.
func TestW2OnSimOneSyncPerForward(t *testing.T) {
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		r, _, err := RunW2(W2Options{Batches: []int{1, 3}, Reps: 3, Warmup: 1, Policy: w2Small, Device: dev, TF32: true})
		require.NoError(t, err)
		require.True(t, r.CapturedMatchesEager)
		require.Len(t, r.Results, 6, "eager, captured and captured-tf32 per batch size")
		for _, b := range r.Batches {
			x := r.Result(b, W2ModeCapturedTF32)
			require.NotNil(t, x)
			require.Positive(t, x.GraphNodes)
			// The CPU's kernels compute fp32 whatever the precision.
			require.Zero(t, x.MaxAbsDiffVsEager, "%v batch %d", dev, b)
		}
		for _, x := range r.Results {
			want := 1.0
			if dev.IsCPU() {
				want = 0
			}
			require.Equal(t, want, x.HostSyncsPerForward, "%v batch %d %s", dev, x.Batch, x.Mode)
		}
	}
	c := DefaultConfig()
	c.Graphs, c.Reps, c.Warmup, c.JSONDir = 2, 2, 1, t.TempDir()
	var out, errb bytes.Buffer
	require.NoError(t, BenchW2(&out, &errb, c, tensor.Sim(0)))
	require.Contains(t, out.String(), "host syncs per forward, batch 2 captured: 1.00")
	require.Equal(t, "sim:0", readReport(t, c.JSONDir, "W2")["device"])
	c.Compare = true
	require.ErrorContains(t, BenchW2(&out, &errb, c, tensor.Sim(0)), "--compare pytorch")
}

// fakeTimers times each call with the next of its durations.
type fakeTimers struct {
	ds    []time.Duration
	calls int
}

func (f *fakeTimers) NewEventTimer() (kernels.EventTimer, error) { return f, nil }
func (f *fakeTimers) Close() error                               { return nil }
func (f *fakeTimers) Time(fn func() error) (time.Duration, error) {
	if err := fn(); err != nil {
		return 0, err
	}
	d := f.ds[f.calls%len(f.ds)]
	f.calls++
	return d, nil
}

// TestDeviceUsLoneReplay: each replay is timed on its own (one timed
// call each, every one a replay of the captured forward) and their
// distribution is returned; an Inference with nothing to replay is an
// error.
func TestDeviceUsLoneReplay(t *testing.T) {
	g, err := W2Graph(2)
	require.NoError(t, err)
	p, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Seed: 4, NoDropout: true, Device: tensor.Sim(0)})
	require.NoError(t, err)
	in, err := tamiyo.NewInference(p, tamiyo.InferenceOptions{})
	require.NoError(t, err)
	ft := &fakeTimers{ds: []time.Duration{5 * time.Microsecond, time.Microsecond, 3 * time.Microsecond, 2 * time.Microsecond, 4 * time.Microsecond}}
	_, err = deviceUsLoneReplay(ft, in, 5)
	require.Error(t, err, "no captured forward yet")
	for range 3 {
		_, err := in.Forward(g)
		require.NoError(t, err)
	}
	ft.calls = 0
	l, err := deviceUsLoneReplay(ft, in, 5)
	require.NoError(t, err)
	require.Equal(t, 5, ft.calls)
	require.InDelta(t, 3.0, l.P50us, 1e-9)
	require.InDelta(t, 5.0, l.MaxUs, 1e-9)
}
