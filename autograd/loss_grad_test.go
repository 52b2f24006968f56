package autograd

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// ceCounter counts the cross-entropy launches over a backend (sim) and
// offers kernels.CrossEntropyCounter, handing it through.
type ceCounter struct {
	kernels.Backend
	backward, count int
}

func (b *ceCounter) CrossEntropyBackward(dl, x, t, g *tensor.Tensor, p kernels.CrossEntropyParams) {
	b.backward++
	b.Backend.CrossEntropyBackward(dl, x, t, g, p)
}

func (b *ceCounter) CrossEntropyCount(loss, x, t *tensor.Tensor, p kernels.CrossEntropyParams, sum, acc *tensor.Tensor) {
	b.count++
	b.Backend.(kernels.CrossEntropyCounter).CrossEntropyCount(loss, x, t, p, sum, acc)
}

// ceGradCounter adds kernels.CrossEntropyGradCounter, counted.
type ceGradCounter struct {
	*ceCounter
	grad int
}

func (b *ceGradCounter) CrossEntropyCountGrad(loss, x, t *tensor.Tensor, p kernels.CrossEntropyParams, sum, acc, dl *tensor.Tensor) bool {
	b.grad++
	return b.Backend.(kernels.CrossEntropyGradCounter).CrossEntropyCountGrad(loss, x, t, p, sum, acc, dl)
}

// TestCrossEntropyGradInTheForward: on a backend with
// kernels.CrossEntropyGradCounter, CrossEntropyCount over logits that
// take a gradient computes that gradient with the loss, and a Backward
// of the loss itself (seeded with its one) runs no CrossEntropyBackward;
// a loss that is not the root (scaled, as a GradScaler scales it) runs
// it as before, and so does a second backward. Logits that take no
// gradient (InferenceMode) never ask for it. The loss, the metrics and
// the gradients are bit for bit those of a backend without the
// interface and of the CPU.
func TestCrossEntropyGradInTheForward(t *testing.T) {
	const n, c = 4, 5
	xs := randVals(rand.New(rand.NewPCG(9, 10)), n*c)
	ys := []int64{1, 0, 4, 2}
	dev := tensor.Sim(7)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	type result struct{ loss, grad, sum, acc []float32 }
	run := func(d tensor.Device, scaled, twice, inference bool) result {
		on := func(h *tensor.Tensor) *tensor.Tensor {
			o, err := h.ToDevice(d)
			require.NoError(t, err)
			return o
		}
		x := Param(on(tensor.FromSlice(append([]float32(nil), xs...), n, c)))
		y := on(tensor.FromSlice(ys, n))
		sum := on(tensor.FromSlice([]float32{0.5}, 1))
		acc := on(tensor.Zeros(tensor.F32, n))
		var loss *Var
		if inference {
			InferenceMode(func() { loss = CrossEntropyCount(x, y, kernels.CrossEntropyParams{}, sum, acc) })
		} else {
			loss = CrossEntropyCount(x, y, kernels.CrossEntropyParams{}, sum, acc)
			root := loss
			if scaled {
				root = MulScalar(loss, 8)
			}
			Backward(root)
			if twice {
				Backward(root)
			}
		}
		host := func(v *tensor.Tensor) []float32 {
			if v == nil {
				return nil
			}
			h, err := v.ToDevice(tensor.CPU)
			require.NoError(t, err)
			return h.F32()
		}
		return result{host(loss.Value), host(x.Grad), host(sum), host(acc)}
	}
	for _, c := range []struct {
		name                     string
		scaled, twice, inference bool
		wantBackward, wantGrad   int
	}{
		{"the loss as the root", false, false, false, 0, 1},
		{"a scaled loss", true, false, false, 1, 1},
		{"two backwards", false, true, false, 1, 1},
		{"inference", false, false, true, 0, 0},
	} {
		plain := &ceCounter{Backend: orig}
		kernels.Register(plain)
		want := run(dev, c.scaled, c.twice, c.inference)
		fused := &ceGradCounter{ceCounter: &ceCounter{Backend: orig}}
		kernels.Register(fused)
		got := run(dev, c.scaled, c.twice, c.inference)
		kernels.Register(orig)
		require.Equal(t, want, got, c.name)
		require.Equal(t, run(tensor.CPU, c.scaled, c.twice, c.inference), got, "%s: the CPU's", c.name)
		require.Equal(t, c.wantGrad, fused.grad, "%s: CrossEntropyCountGrad calls", c.name)
		require.Equal(t, c.wantBackward, fused.backward, "%s: CrossEntropyBackward launches", c.name)
		require.Equal(t, 1-c.wantGrad, fused.count, "%s: CrossEntropyCount where the gradient is not asked for", c.name)
		if !c.inference {
			require.Equal(t, 1+btoi(c.twice), plain.backward, "%s: without the interface", c.name)
			require.NotNil(t, got.grad)
		}
	}
}

// lceCounter counts LinearCrossEntropyCount calls and MatMulBias
// launches over a backend (sim), offering the interface.
type lceCounter struct {
	kernels.Backend
	fused, matmul int
}

func (b *lceCounter) MatMulBias(dst, x, w, bias *tensor.Tensor, ta, tb bool) {
	b.matmul++
	b.Backend.MatMulBias(dst, x, w, bias, ta, tb)
}

func (b *lceCounter) LinearCrossEntropyCount(logits, loss, x, w, bias, t *tensor.Tensor, p kernels.CrossEntropyParams, sum, acc, dl *tensor.Tensor) bool {
	b.fused++
	return b.Backend.(kernels.LinearCrossEntropyCounter).LinearCrossEntropyCount(logits, loss, x, w, bias, t, p, sum, acc, dl)
}

// TestLinearCrossEntropyCountMatchesUnfused: LinearCrossEntropyCount is
// CrossEntropyCount(Linear(x, w, b), …) bit for bit — the loss, the
// metrics and the gradients of x, w and b accumulating over
// two training steps, and in InferenceMode — on the CPU and on sim, where
// a backend with kernels.LinearCrossEntropyCounter gets one call and no
// MatMulBias of its own.
func TestLinearCrossEntropyCountMatchesUnfused(t *testing.T) {
	const n, k, c = 4, 6, 3
	rng := rand.New(rand.NewPCG(11, 12))
	vals := func(n int) []float32 { return randVals(rng, n) }
	xs, ws, bs := vals(n*k), vals(c*k), vals(c)
	ys := []int64{2, 0, 1, 1}
	type result struct{ loss, gx, gw, gb, sum, acc []float32 }
	run := func(d tensor.Device, fused, inference bool) result {
		on := func(v any, shape ...int) *tensor.Tensor {
			var h *tensor.Tensor
			switch v := v.(type) {
			case []float32:
				h = tensor.FromSlice(append([]float32(nil), v...), shape...)
			case []int64:
				h = tensor.FromSlice(v, shape...)
			}
			o, err := h.ToDevice(d)
			require.NoError(t, err)
			return o
		}
		x, w, b := Param(on(xs, n, k)), Param(on(ws, c, k)), Param(on(bs, c))
		w.Grad, b.Grad = on(make([]float32, c*k), c, k), on(make([]float32, c), c)
		y := on(ys, n)
		sum, acc := on([]float32{0.25}, 1), on(make([]float32, n), n)
		var r result
		host := func(v *tensor.Tensor) []float32 {
			if v == nil {
				return nil
			}
			h, err := v.ToDevice(tensor.CPU)
			require.NoError(t, err)
			return append([]float32(nil), h.F32()...)
		}
		for range 2 {
			var loss *Var
			step := func() {
				if fused {
					loss = LinearCrossEntropyCount(x, w, b, y, kernels.CrossEntropyParams{}, sum, acc)
				} else {
					loss = CrossEntropyCount(Linear(x, w, b), y, kernels.CrossEntropyParams{}, sum, acc)
				}
			}
			if inference {
				InferenceMode(step)
			} else {
				step()
				Backward(loss)
			}
			r.loss = append(r.loss, host(loss.Value)...)
		}
		r.gx, r.gw, r.gb, r.sum, r.acc = host(x.Grad), host(w.Grad), host(b.Grad), host(sum), host(acc)
		return r
	}
	dev := tensor.Sim(7)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	for _, inference := range []bool{false, true} {
		want := run(tensor.CPU, false, inference)
		require.Equal(t, want, run(tensor.CPU, true, inference), "cpu, inference %v", inference)
		cnt := &lceCounter{Backend: orig}
		kernels.Register(cnt)
		got := run(dev, true, inference)
		kernels.Register(orig)
		require.Equal(t, want, got, "sim, inference %v", inference)
		require.Equal(t, 2, cnt.fused, "one call a step")
		require.Zero(t, cnt.matmul, "no MatMulBias of its own")
		if !inference {
			require.NotNil(t, got.gw)
			require.NotEqual(t, make([]float32, c*k), got.gw, "the weight's gradient accumulated")
		}
	}
}
