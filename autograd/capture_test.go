package autograd_test

import (
	"math"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// smallCNN is conv-BN-ReLU-maxpool-linear built from autograd ops, with
// its SGD optimizer: the step the capture acceptance test replays.
type smallCNN struct {
	conv, gamma, beta, fc, fcb *autograd.Var
	runMean, runVar            *tensor.Tensor
	opt                        *optim.SGD
}

func newSmallCNN(t testing.TB, seed uint64) *smallCNN {
	rng := tensor.NewRNG(seed)
	m := &smallCNN{
		conv:    autograd.Param(tensor.Uniform(rng, tensor.F32, -0.3, 0.3, 8, 1, 3, 3)),
		gamma:   autograd.Param(tensor.Ones(tensor.F32, 8)),
		beta:    autograd.Param(tensor.Zeros(tensor.F32, 8)),
		fc:      autograd.Param(tensor.Uniform(rng, tensor.F32, -0.1, 0.1, 10, 8*6*6)),
		fcb:     autograd.Param(tensor.Uniform(rng, tensor.F32, -0.1, 0.1, 10)),
		runMean: tensor.Zeros(tensor.F32, 8),
		runVar:  tensor.Ones(tensor.F32, 8),
	}
	opt, err := optim.NewSGD([]*autograd.Var{m.conv, m.gamma, m.beta, m.fc, m.fcb},
		optim.SGDOptions{LR: 0.05, Momentum: 0.9, WeightDecay: 5e-4})
	require.NoError(t, err)
	m.opt = opt
	return m
}

// step is one training step: forward, loss, backward, SGD.
func (m *smallCNN) step(in []*tensor.Tensor) []*tensor.Tensor { return m.train(in, false) }

// fusedStep is step with the batch norm, ReLU and pool as one op
// (BatchNormReluMaxPool).
func (m *smallCNN) fusedStep(in []*tensor.Tensor) []*tensor.Tensor { return m.train(in, true) }

func (m *smallCNN) train(in []*tensor.Tensor, fused bool) []*tensor.Tensor {
	x, y := autograd.Const(in[0]), in[1]
	m.opt.ZeroGrad()
	h := autograd.Conv2d(x, m.conv, nil, kernels.Conv2dParams{PadH: 1, PadW: 1})
	if fused {
		h = autograd.BatchNormReluMaxPool(h, m.gamma, m.beta, m.runMean, m.runVar, true, 0.1, 1e-5)
	} else {
		h = autograd.BatchNorm(h, m.gamma, m.beta, m.runMean, m.runVar, true, 0.1, 1e-5)
		h = autograd.Relu(h)
		h = autograd.MaxPool2d(h, kernels.Pool2dParams{KernelH: 2, KernelW: 2})
	}
	h = autograd.Flatten(h, 1)
	logits := autograd.Linear(h, m.fc, m.fcb)
	loss := autograd.CrossEntropy(logits, y, kernels.CrossEntropyParams{})
	autograd.Backward(loss)
	m.opt.Step()
	return []*tensor.Tensor{loss.Value}
}

func (m *smallCNN) state() [][]float32 {
	var out [][]float32
	for _, p := range []*autograd.Var{m.conv, m.gamma, m.beta, m.fc, m.fcb} {
		out = append(out, append([]float32(nil), p.Value.Contiguous().F32()...))
	}
	out = append(out, append([]float32(nil), m.runMean.F32()...), append([]float32(nil), m.runVar.F32()...))
	return out
}

func cnnBatches(n int) [][2]*tensor.Tensor {
	rng := tensor.NewRNG(99)
	out := make([][2]*tensor.Tensor, n)
	for i := range out {
		out[i] = [2]*tensor.Tensor{tensor.Normal(rng, tensor.F32, 0, 1, 16, 1, 12, 12), tensor.RandInt(rng, 10, 16)}
	}
	return out
}

// TestCaptureCNNBitwise: replaying the captured CNN train step gives
// bitwise the same parameters and losses as running it eagerly, and a
// replay allocates nothing.
func TestCaptureCNNBitwise(t *testing.T) {
	batches := cnnBatches(6)
	eager := newSmallCNN(t, 7)
	capt := newSmallCNN(t, 7)
	c := autograd.Capture(capt.step, autograd.CaptureOptions{Version: capt.opt.Arena().Version})
	for i, b := range batches {
		le := eager.step(b[:])[0].Item()
		out, err := c.Run(b[0], b[1])
		require.NoError(t, err)
		lc := out[0].Item()
		require.Equal(t, math.Float64bits(le), math.Float64bits(lc), "loss differs at step %d: eager %v captured %v", i, le, lc)
		require.Equal(t, eager.state(), capt.state(), "parameters differ after step %d", i)
	}
	st := c.Stats()
	require.Equal(t, 1, st.Captures)
	require.Equal(t, len(batches)-1, st.Replays, "one warm-up call, then capture + replays")
	require.Greater(t, c.Launches(), 10)

	in := batches[0][:]
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := c.Run(in...); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs, "a replay must not allocate")
}

// TestCaptureParallelReplayAllocs runs the zero-allocation check with the
// worker pool in use.
func TestCaptureParallelReplayAllocs(t *testing.T) {
	prev := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(prev)
	m := newSmallCNN(t, 3)
	rng := tensor.NewRNG(5)
	x, y := tensor.Normal(rng, tensor.F32, 0, 1, 128, 1, 12, 12), tensor.RandInt(rng, 10, 128)
	c := autograd.Capture(m.step, autograd.CaptureOptions{})
	for i := 0; i < 3; i++ {
		_, err := c.Run(x, y)
		require.NoError(t, err)
	}
	in := []*tensor.Tensor{x, y}
	allocs := testing.AllocsPerRun(20, func() { _, _ = c.Run(in...) })
	require.Zero(t, allocs)

	// The same with the fused batch norm, ReLU and pool, whose workers
	// borrow plane scratch from their launch.
	f := newSmallCNN(t, 3)
	cf := autograd.Capture(f.fusedStep, autograd.CaptureOptions{})
	for i := 0; i < 3; i++ {
		_, err := cf.Run(x, y)
		require.NoError(t, err)
	}
	allocs = testing.AllocsPerRun(20, func() { _, _ = cf.Run(in...) })
	require.Zero(t, allocs, "fused batch norm and pool")
}

// TestReplayLast: before any graph has run ReplayLast is an error (also
// after the eager warm-up alone); after a replay it runs the graph once
// more on its inputs as they stand — nothing copied in — and counts a
// replay; once the parameter version has changed it is an error.
func TestReplayLast(t *testing.T) {
	w := autograd.Param(tensor.FromSlice([]float32{2}, 1))
	c := autograd.Capture(func(in []*tensor.Tensor) []*tensor.Tensor {
		var y *autograd.Var
		autograd.InferenceMode(func() { y = autograd.MulScalar(autograd.Mul(autograd.Const(in[0]), w), 1) })
		return []*tensor.Tensor{y.Value}
	}, autograd.CaptureOptions{})
	require.Error(t, c.ReplayLast(), "nothing has run")
	x := tensor.FromSlice([]float32{3}, 1)
	_, err := c.Run(x) // the warm-up, eager
	require.NoError(t, err)
	require.Error(t, c.ReplayLast(), "the warm-up ran no graph")
	out, err := c.Run(x) // captured, then replayed
	require.NoError(t, err)
	require.Equal(t, []float32{6}, out[0].F32())
	before := c.Stats().Replays
	// The graph reads its static input buffer: what the caller's x holds
	// now is not copied in.
	x.F32()[0] = 5
	w.Value.F32()[0] = 4
	require.NoError(t, c.ReplayLast())
	require.Equal(t, []float32{12}, out[0].F32(), "the replay read its own input (3) and the new weight (4)")
	require.Equal(t, before+1, c.Stats().Replays)

	// A parameter version that moved since the graph ran: no replay.
	version := uint64(1)
	v := autograd.Capture(func(in []*tensor.Tensor) []*tensor.Tensor {
		var y *autograd.Var
		autograd.InferenceMode(func() { y = autograd.Mul(autograd.Const(in[0]), w) })
		return []*tensor.Tensor{y.Value}
	}, autograd.CaptureOptions{Version: func() uint64 { return version }})
	for range 2 {
		_, err := v.Run(x)
		require.NoError(t, err)
	}
	require.NoError(t, v.ReplayLast())
	version = 2
	require.ErrorContains(t, v.ReplayLast(), "parameter version")
}
