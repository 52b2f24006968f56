package autograd_test

// Captured.Inputs: the explicit way to replay without copying the inputs
// into the graph's static buffers (the caller writes into the buffers
// itself and passes them back to Run).

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// Inputs is nil until a graph exists, then the static buffers, holding
// the capture call's inputs; the slice returned is the caller's own.
func TestCaptureInputsBeforeAndAfterCapture(t *testing.T) {
	c := autograd.Capture(doubleStep, autograd.CaptureOptions{})
	require.Nil(t, c.Inputs(), "no graph before any call")
	x := tensor.FromSlice([]float32{1, 2})
	_, err := c.Run(x) // warm-up: eager
	require.NoError(t, err)
	require.Nil(t, c.Inputs(), "no graph after the eager warm-up")
	_, err = c.Run(tensor.FromSlice([]float32{3, 4})) // capture + first replay
	require.NoError(t, err)
	in := c.Inputs()
	require.Len(t, in, 1)
	require.NotSame(t, x, in[0], "the static buffer is the graph's, not the caller's tensor")
	require.Equal(t, []float32{3, 4}, in[0].F32(), "it holds the capture call's input")
	in[0] = nil
	require.NotNil(t, c.Inputs()[0], "Inputs returns a copy of the slice")
}

// Data written straight into the static buffers is what the replay
// reads: passing them to Run copies nothing, so the caller's other
// tensors play no part.
func TestCaptureInputsFilledDirectly(t *testing.T) {
	c := autograd.Capture(doubleStep, autograd.CaptureOptions{})
	x := tensor.FromSlice([]float32{1, 2})
	for i := 0; i < 2; i++ {
		_, err := c.Run(x)
		require.NoError(t, err)
	}
	in := c.Inputs()
	for _, v := range [][]float32{{5, 6}, {-1, 0.5}} {
		tensor.CopyInto(in[0], tensor.FromSlice(v))
		x.F32()[0] = 100 // not an input any more
		out, err := c.Run(in...)
		require.NoError(t, err)
		require.Equal(t, []float32{2 * v[0], 2 * v[1]}, out[0].F32())
	}
	require.Equal(t, 1, c.Stats().Captures)
	require.Equal(t, 3, c.Stats().Replays)

	// Passing a tensor of the caller's again copies it, every time, even
	// when it is the same tensor as in the previous call: its contents may
	// have changed, and Run never assumes they have not.
	out, err := c.Run(x)
	require.NoError(t, err)
	require.Equal(t, []float32{200, 4}, out[0].F32())
	x.F32()[0] = 7
	out, err = c.Run(x)
	require.NoError(t, err)
	require.Equal(t, []float32{14, 4}, out[0].F32())
	require.Equal(t, []float32{7, 2}, in[0].F32(), "the copy went into the static buffer")
}

// A step that writes into its input writes into the static buffer when
// it is passed directly, and Run no longer refreshes it: the update
// accumulates from replay to replay (the caller owns the buffer now).
func TestCaptureInputsNotRefreshed(t *testing.T) {
	step := func(in []*tensor.Tensor) []*tensor.Tensor {
		copyInto(in[0], autograd.AddScalar(autograd.Const(in[0]), 1).Value)
		return []*tensor.Tensor{in[0]}
	}
	c := autograd.Capture(step, autograd.CaptureOptions{})
	x := tensor.FromSlice([]float32{0})
	_, _ = c.Run(x) // eager: x becomes 1
	_, _ = c.Run(x) // capture copies x (1) and replays: the buffer is 2
	in := c.Inputs()
	require.Equal(t, float32(2), in[0].F32()[0])
	for want := float32(3); want <= 5; want++ {
		out, err := c.Run(in...)
		require.NoError(t, err)
		require.Equal(t, want, out[0].F32()[0])
	}
	require.Equal(t, float32(1), x.F32()[0], "the caller's tensor is untouched after the capture")
}

// The captured CNN train step fed through its static buffers computes
// bitwise what the eager step computes on the same batches, and a replay
// of it allocates nothing.
func TestCaptureInputsCNNBitwise(t *testing.T) {
	batches := cnnBatches(6)
	eager := newSmallCNN(t, 11)
	capt := newSmallCNN(t, 11)
	c := autograd.Capture(capt.step, autograd.CaptureOptions{Version: capt.opt.Arena().Version, Policy: autograd.FailOnMismatch})
	var in []*tensor.Tensor
	for i, b := range batches {
		le := eager.step(b[:])[0].Item()
		var out []*tensor.Tensor
		var err error
		if in == nil { // warm-up and capture take the caller's tensors
			out, err = c.Run(b[0], b[1])
			in = c.Inputs()
		} else {
			tensor.CopyInto(in[0], b[0])
			tensor.CopyInto(in[1], b[1])
			out, err = c.Run(in...)
		}
		require.NoError(t, err)
		require.Equal(t, math.Float64bits(le), math.Float64bits(out[0].Item()), "loss differs at step %d", i)
		require.Equal(t, eager.state(), capt.state(), "parameters differ after step %d", i)
	}
	require.Equal(t, 1, c.Stats().Captures)
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := c.Run(in...); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

// After the guard changes (a new parameter version) the old static
// buffers are ordinary inputs of the new graph: copied, and correct.
func TestCaptureInputsAcrossRecapture(t *testing.T) {
	version := uint64(1)
	c := autograd.Capture(doubleStep, autograd.CaptureOptions{Version: func() uint64 { return version }})
	x := tensor.FromSlice([]float32{1, 2})
	_, _ = c.Run(x)
	_, _ = c.Run(x)
	old := c.Inputs()
	tensor.CopyInto(old[0], tensor.FromSlice([]float32{3, 4}))
	version = 2
	for i := 0; i < 3; i++ { // eager warm-up, capture, replay of the new graph
		out, err := c.Run(old...)
		require.NoError(t, err)
		require.Equal(t, []float32{6, 8}, out[0].F32(), "call %d", i)
	}
	require.Equal(t, 2, c.Stats().Captures)
	require.NotSame(t, old[0], c.Inputs()[0], "the new graph has buffers of its own")
}

// BoundInputs: fixed batch views passed again by identity get graphs of
// their own that read them in place (Inputs gives the caller's tensors
// back), see whatever the tensors hold when they replay, and replay
// without allocating; tensors that are new every call never bind.
func TestCaptureBoundInputs(t *testing.T) {
	data := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6})
	batches := []*tensor.Tensor{data.Narrow(0, 0, 2), data.Narrow(0, 2, 2), data.Narrow(0, 4, 2)}
	c := autograd.Capture(doubleStep, autograd.CaptureOptions{BoundInputs: 3})
	for epoch := 0; epoch < 4; epoch++ {
		for _, b := range batches {
			out, err := c.Run(b)
			require.NoError(t, err)
			require.Equal(t, []float32{2 * b.F32()[0], 2 * b.F32()[1]}, out[0].F32(), "epoch %d", epoch)
		}
	}
	st := c.Stats()
	require.Equal(t, 3, st.BoundGraphs, "one graph per batch view")
	// A view made anew over the same elements is the same input.
	again := data.Narrow(0, 2, 2)
	_, err := c.Run(again)
	require.NoError(t, err)
	require.Same(t, batches[1], c.Inputs()[0], "the bound graph reads the caller's tensor")
	require.Equal(t, st.Captures, c.Stats().Captures, "no capture for a fresh view of a bound input")

	// The replay reads the tensor as it is now.
	data.F32()[4] = -7
	out, err := c.Run(batches[2])
	require.NoError(t, err)
	require.Equal(t, []float32{-14, 12}, out[0].F32())
	in0 := []*tensor.Tensor{batches[0]} // a kept slice: a literal argument list allocates
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := c.Run(in0...); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs, "a bound replay allocates nothing")

	// New tensors every call: the copying path, never bound.
	fresh := autograd.Capture(doubleStep, autograd.CaptureOptions{BoundInputs: 3})
	for i := 0; i < 10; i++ {
		x := tensor.FromSlice([]float32{float32(i), 1})
		out, err := fresh.Run(x)
		require.NoError(t, err)
		require.Equal(t, []float32{float32(2 * i), 2}, out[0].F32())
	}
	require.Zero(t, fresh.Stats().BoundGraphs)
	require.Equal(t, 1, fresh.Stats().Captures)

	// More batch views than BoundInputs: the first ones bind, the rest
	// copy into the shared graph, and nothing is captured again.
	few := autograd.Capture(doubleStep, autograd.CaptureOptions{BoundInputs: 2})
	for epoch := 0; epoch < 4; epoch++ {
		for _, b := range batches {
			out, err := few.Run(b)
			require.NoError(t, err)
			require.Equal(t, []float32{2 * b.F32()[0], 2 * b.F32()[1]}, out[0].F32())
		}
	}
	require.Equal(t, 2, few.Stats().BoundGraphs)
	require.Equal(t, 3, few.Stats().Captures, "the copying graph and two bound ones, once each")
}
