package autograd_test

// This file documents, by test, how a captured step differs from running
// the same Go function eagerly (after tinygrad's test_jit_footguns). Each
// test states the behaviour a user must expect.

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

func doubleStep(in []*tensor.Tensor) []*tensor.Tensor {
	return []*tensor.Tensor{autograd.MulScalar(autograd.Const(in[0]), 2).Value}
}

// Outputs are static buffers: every replay returns the same tensor and
// overwrites it. Keep a result by cloning it before the next Run.
func TestFootgunOutputsReusedAcrossReplays(t *testing.T) {
	c := autograd.Capture(doubleStep, autograd.CaptureOptions{})
	_, _ = c.Run(tensor.FromSlice([]float32{1, 2})) // warm-up (eager)
	a, err := c.Run(tensor.FromSlice([]float32{3, 4}))
	require.NoError(t, err)
	kept := a[0].Clone()
	b, err := c.Run(tensor.FromSlice([]float32{5, 6}))
	require.NoError(t, err)
	require.Same(t, a[0], b[0], "replays hand back the same output tensor")
	require.Equal(t, []float32{10, 12}, a[0].F32(), "the earlier result was overwritten")
	require.Equal(t, []float32{6, 8}, kept.F32(), "a clone survives")
}

// Go values read by the step are frozen at capture: changing a Go
// variable afterwards changes nothing. Hold changing scalars in tensors
// (as the optimizers do with the learning rate).
func TestFootgunGoValuesFrozenAtCapture(t *testing.T) {
	factor := 2.0
	c := autograd.Capture(func(in []*tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{autograd.MulScalar(autograd.Const(in[0]), factor).Value}
	}, autograd.CaptureOptions{})
	x := tensor.FromSlice([]float32{1})
	_, _ = c.Run(x)
	out, _ := c.Run(x) // captured with factor 2
	require.Equal(t, float32(2), out[0].F32()[0])
	factor = 10
	out, _ = c.Run(x)
	require.Equal(t, float32(2), out[0].F32()[0], "the replay still multiplies by 2")

	// A tensor-held factor is read at replay time.
	f := tensor.FromSlice([]float32{2})
	c2 := autograd.Capture(func(in []*tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{autograd.Mul(autograd.Const(in[0]), autograd.Const(f)).Value}
	}, autograd.CaptureOptions{})
	_, _ = c2.Run(x)
	_, _ = c2.Run(x)
	f.F32()[0] = 10
	out, _ = c2.Run(x)
	require.Equal(t, float32(10), out[0].F32()[0])
}

// A step that mutates its input in place mutates the caller's tensor only
// while it runs eagerly; after capture it mutates the static copy, which
// is refreshed from the caller's tensor on every Run.
func TestFootgunInputsMutatedInPlace(t *testing.T) {
	step := func(in []*tensor.Tensor) []*tensor.Tensor {
		x := autograd.Const(in[0])
		y := autograd.AddScalar(x, 1)
		// write y back into the input: an in-place update
		copyInto(in[0], y.Value)
		return []*tensor.Tensor{in[0]}
	}
	c := autograd.Capture(step, autograd.CaptureOptions{})
	x := tensor.FromSlice([]float32{0})
	_, _ = c.Run(x)
	require.Equal(t, float32(1), x.F32()[0], "eager warm-up mutated the caller's tensor")
	out, _ := c.Run(x) // capture + first replay
	require.Equal(t, float32(1), x.F32()[0], "after capture the caller's tensor is left alone")
	require.Equal(t, float32(2), out[0].F32()[0], "the static copy was updated")
	out, _ = c.Run(x)
	require.Equal(t, float32(2), out[0].F32()[0], "each Run starts again from the caller's value")
}

// Reading a value during capture sees stale data: nothing executes while
// the step is being recorded.
func TestFootgunReadsDuringCaptureAreStale(t *testing.T) {
	var seen []float64
	c := autograd.Capture(func(in []*tensor.Tensor) []*tensor.Tensor {
		y := autograd.MulScalar(autograd.Const(in[0]), 3)
		seen = append(seen, y.Value.Item()) // a host read inside the step
		return []*tensor.Tensor{y.Value}
	}, autograd.CaptureOptions{})
	x := tensor.FromSlice([]float32{2})
	out, _ := c.Run(x)
	require.Equal(t, 6.0, out[0].Item())
	out, _ = c.Run(x) // capture: the read inside sees an unwritten buffer
	require.Equal(t, 6.0, out[0].Item(), "the replay after capture computes the right value")
	require.Equal(t, []float64{6, 0}, seen, "the read during capture saw zeros")
	_, _ = c.Run(x)
	require.Len(t, seen, 2, "replays do not run the Go code at all")
}

// A new input shape re-captures into a bounded cache by default, or fails
// with a typed error under FailOnMismatch; a changed parameter-set version
// invalidates the guard too.
func TestFootgunGuards(t *testing.T) {
	c := autograd.Capture(doubleStep, autograd.CaptureOptions{CacheSize: 1})
	for i := 0; i < 3; i++ {
		_, _ = c.Run(tensor.FromSlice([]float32{1, 2}))
	}
	out, err := c.Run(tensor.FromSlice([]float32{1, 2, 3}))
	require.NoError(t, err)
	require.Equal(t, []float32{2, 4, 6}, out[0].F32(), "new shape: eager warm-up again")
	require.Equal(t, 1, c.Stats().CachedGraphs, "cache bounded to one graph")

	strict := autograd.Capture(doubleStep, autograd.CaptureOptions{Policy: autograd.FailOnMismatch})
	_, _ = strict.Run(tensor.FromSlice([]float32{1, 2}))
	_, _ = strict.Run(tensor.FromSlice([]float32{1, 2}))
	_, err = strict.Run(tensor.FromSlice([]float64{1, 2}))
	var ge *autograd.GuardError
	require.True(t, errors.As(err, &ge), "want a GuardError, got %v", err)
	require.Contains(t, err.Error(), "f32[2]")
	require.Contains(t, err.Error(), "f64[2]")

	version := uint64(1)
	vc := autograd.Capture(doubleStep, autograd.CaptureOptions{Version: func() uint64 { return version }})
	x := tensor.FromSlice([]float32{1})
	_, _ = vc.Run(x)
	_, _ = vc.Run(x)
	require.Equal(t, 1, vc.Stats().Captures)
	version = 2 // e.g. a seed's parameters joined the optimizer
	_, _ = vc.Run(x)
	_, _ = vc.Run(x)
	require.Equal(t, 2, vc.Stats().Captures, "a new parameter set is captured afresh")
}

// A step that panics during capture falls back to eager execution and
// reports the failure once.
func TestFootgunCaptureFailureFallsBack(t *testing.T) {
	calls := 0
	var reported []error
	c := autograd.Capture(func(in []*tensor.Tensor) []*tensor.Tensor {
		calls++
		if calls == 2 {
			panic("boom")
		}
		return doubleStep(in)
	}, autograd.CaptureOptions{OnFallback: func(err error) { reported = append(reported, err) }})
	x := tensor.FromSlice([]float32{4})
	for i := 0; i < 4; i++ {
		out, err := c.Run(x)
		require.NoError(t, err)
		require.Equal(t, float32(8), out[0].F32()[0])
	}
	require.Len(t, reported, 1)
	require.ErrorIs(t, reported[0], autograd.ErrCaptureFailed)
	require.Zero(t, c.Stats().Captures)
}

// copyInto copies src into dst through the backend (so it is captured).
func copyInto(dst, src *tensor.Tensor) { kernels.For(dst.Device()).Copy(dst, src) }
