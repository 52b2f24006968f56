//go:build cuda

package cuda

// The Backend under autograd and optim: a small training step (two
// linear layers, ReLU fused into the first, softmax cross-entropy, SGD
// with momentum) runs on the CUDA backend and on the CPU backend from the
// same initial weights and inputs, and captured with autograd.Capture its
// replays equal the eager steps. These run on the GPU machine only.

import (
	"fmt"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// mlp is the step's model and optimizer on one device.
type mlp struct {
	w1, b1, w2, b2 *autograd.Var
	opt            *optim.SGD
}

// Sizes of the training step: batch, inputs, hidden units, classes.
const (
	stepN, stepIn, stepHidden, stepClasses = 32, 20, 24, 7
)

// newMLP builds the model on dev from initial host weights.
func newMLP(t *testing.T, dev tensor.Device, init []*tensor.Tensor) *mlp {
	t.Helper()
	vs := make([]*autograd.Var, len(init))
	for i, w := range init {
		v, err := w.ToDevice(dev)
		if err != nil {
			t.Fatal(err)
		}
		vs[i] = autograd.Param(v)
	}
	opt, err := optim.NewSGD(vs, optim.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 1e-3})
	if err != nil {
		t.Fatal(err)
	}
	return &mlp{w1: vs[0], b1: vs[1], w2: vs[2], b2: vs[3], opt: opt}
}

// initWeights draws the initial weights on the host.
func initWeights(seed uint64) []*tensor.Tensor {
	rng := tensor.NewRNG(seed)
	return []*tensor.Tensor{
		tensor.Normal(rng, tensor.F32, 0, 0.3, stepHidden, stepIn),
		tensor.Normal(rng, tensor.F32, 0, 0.1, stepHidden),
		tensor.Normal(rng, tensor.F32, 0, 0.3, stepClasses, stepHidden),
		tensor.Normal(rng, tensor.F32, 0, 0.1, stepClasses),
	}
}

// step is one training step on inputs {x [N, In], target [N] I64}; it
// returns the loss (before the update).
func (m *mlp) step(in []*tensor.Tensor) []*tensor.Tensor {
	m.opt.ZeroGrad()
	h := autograd.LinearRelu(autograd.Const(in[0]), m.w1, m.b1)
	out := autograd.Linear(h, m.w2, m.b2)
	loss := autograd.CrossEntropy(out, in[1], kernels.CrossEntropyParams{})
	autograd.Backward(loss)
	m.opt.Step()
	return []*tensor.Tensor{loss.Value}
}

// weights returns the model's weights on the host.
func (m *mlp) weights(t *testing.T) []*tensor.Tensor {
	t.Helper()
	var out []*tensor.Tensor
	for _, v := range []*autograd.Var{m.w1, m.b1, m.w2, m.b2} {
		if !v.Value.Device().IsCPU() {
			out = append(out, fromDev(t, v.Value))
		} else {
			out = append(out, v.Value.Clone())
		}
	}
	return out
}

// batch draws step i's inputs on the host.
func batch(i int) (x, target *tensor.Tensor) {
	rng := tensor.NewRNG(uint64(1000 + i))
	return tensor.Normal(rng, tensor.F32, 0, 1, stepN, stepIn), tensor.RandInt(rng, stepClasses, stepN)
}

// TestBackendTrainStepMatchesCPU: five steps on each backend from the
// same weights and inputs give the same losses and weights within fp32
// tolerance (the order of accumulation differs).
func TestBackendTrainStepMatchesCPU(t *testing.T) {
	if kernels.For(tensor.CUDA(0)) != kernels.Backend(be) {
		t.Fatal("the CUDA backend is not registered")
	}
	init := initWeights(90)
	onCPU, onGPU := newMLP(t, tensor.CPU, init), newMLP(t, tensor.CUDA(0), init)
	for i := 0; i < 5; i++ {
		x, target := batch(i)
		want := onCPU.step([]*tensor.Tensor{x, target})[0]
		got := onGPU.step([]*tensor.Tensor{toDev(t, x), toDev(t, target)})[0]
		closeRel(t, fmt.Sprintf("loss at step %d", i), fromDev(t, got), want, 1e-5)
	}
	gw, cw := onGPU.weights(t), onCPU.weights(t)
	for i := range gw {
		closeRel(t, fmt.Sprintf("weight %d after 5 steps", i), gw[i], cw[i], 1e-4)
	}
}

// TestBackendCapturedStepEqualsEager: the same step captured with
// autograd.Capture (a CUDA graph: warm-up, capture, replays) and run
// eagerly from the same weights gives the same losses over 100 steps of
// fresh inputs, and the same weights after them.
func TestBackendCapturedStepEqualsEager(t *testing.T) {
	init := initWeights(91)
	eager, captured := newMLP(t, tensor.CUDA(0), init), newMLP(t, tensor.CUDA(0), init)
	var fallback error
	c := autograd.Capture(captured.step, autograd.CaptureOptions{
		Policy:     autograd.FailOnMismatch,
		Version:    captured.opt.Arena().Version,
		OnFallback: func(err error) { fallback = err },
	})
	in := make([]*tensor.Tensor, 2)
	for i := 0; i < 100; i++ {
		x, target := batch(i)
		in[0], in[1] = toDev(t, x), toDev(t, target)
		want := eager.step(in)[0]
		outs, err := c.Run(in...)
		if err != nil {
			t.Fatal(err)
		}
		if fallback != nil {
			t.Fatalf("capture fell back to eager at step %d: %v", i, fallback)
		}
		closeRel(t, fmt.Sprintf("captured loss at step %d", i), fromDev(t, outs[0]), fromDev(t, want), 1e-6)
	}
	st := c.Stats()
	if st.Captures != 1 || st.Replays != 99 || st.EagerCalls != 1 {
		t.Fatalf("capture stats %+v, want 1 eager warm-up, 1 capture, 99 replays", st)
	}
	if c.Launches() == 0 {
		t.Fatal("the captured graph has no nodes")
	}
	gw, ew := captured.weights(t), eager.weights(t)
	for i := range gw {
		closeRel(t, fmt.Sprintf("weight %d after 100 steps", i), gw[i], ew[i], 1e-5)
	}
	if err := be.Synchronize(); err != nil {
		t.Fatal(err)
	}
}
