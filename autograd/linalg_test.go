package autograd

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tensor"
)

// TestLinearReluMatchesRelu: the fused LinearRelu gives bitwise the value
// and the gradients of Relu(Linear(...)), on a tiny product (the eager
// path) and on one large enough to be packed and split by panels, with
// and without a bias; some outputs are clamped, so the mask matters.
func TestLinearReluMatchesRelu(t *testing.T) {
	for _, sh := range [][3]int{{4, 16, 4}, {300, 70, 45}} {
		for _, withBias := range []bool{true, false} {
			m, in, out := sh[0], sh[1], sh[2]
			rng := tensor.NewRNG(uint64(m + in))
			xv := tensor.Uniform(rng, tensor.F32, -1, 1, m, in)
			wv := tensor.Uniform(rng, tensor.F32, -1, 1, out, in)
			bv := tensor.Uniform(rng, tensor.F32, -1, 1, out)
			run := func(fused bool) (y []float32, grads [][]float32) {
				x, w := Param(xv.Clone()), Param(wv.Clone())
				var b *Var
				ps := []*Var{x, w}
				if withBias {
					b = Param(bv.Clone())
					ps = append(ps, b)
				}
				var h *Var
				if fused {
					h = LinearRelu(x, w, b)
				} else {
					h = Relu(Linear(x, w, b))
				}
				// A weighted sum, so that each output gets its own
				// upstream gradient.
				Backward(SumAll(Mul(h, Const(tensor.Uniform(tensor.NewRNG(7), tensor.F32, -1, 1, m, out)))))
				for _, p := range ps {
					grads = append(grads, append([]float32(nil), p.Grad.F32()...))
				}
				return append([]float32(nil), h.Value.F32()...), grads
			}
			y, g := run(true)
			yRef, gRef := run(false)
			zeros := 0
			for _, v := range yRef {
				if v == 0 {
					zeros++
				}
			}
			require.True(t, zeros > 0 && zeros < len(yRef), "relu clamps some outputs and not others")
			require.Equal(t, yRef, y, "value %v bias %v", sh, withBias)
			require.Equal(t, gRef, g, "gradients %v bias %v", sh, withBias)
		}
	}
}

// TestLinearGradSinks: when a linear layer's weight and bias already have
// a Grad, Backward lets the layer add their gradients into it
// (kernels.GradAccumulator) instead of returning new tensors. Against the
// gradients computed into fresh Grads (no sinks: a first Backward), the
// accumulated Grad is the old one plus the same gradient, within
// rounding: on a tiny product and a packed one, with the weight used by
// two layers (two additions into one sink), with and without ReLU, in
// F32 and F64. A weight with a hook and one used through a cast take the
// ordinary path.
func TestLinearGradSinks(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
		for _, sh := range [][3]int{{4, 16, 4}, {300, 70, 45}} {
			for _, relu := range []bool{false, true} {
				m, in, out := sh[0], sh[1], sh[2]
				rng := tensor.NewRNG(uint64(m + in))
				xv := tensor.Uniform(rng, dt, -1, 1, m, in)
				x2v := tensor.Uniform(rng, dt, -1, 1, m, in)
				wv := tensor.Uniform(rng, dt, -1, 1, out, in)
				bv := tensor.Uniform(rng, dt, -1, 1, out)
				up := tensor.Uniform(rng, dt, -1, 1, m, out)
				lin := func(x, w, b *Var) *Var {
					if relu {
						return LinearRelu(x, w, b)
					}
					return Linear(x, w, b)
				}
				pass := func(w, b *Var) {
					h := Add(lin(Const(xv), w, b), lin(Const(x2v), w, b))
					Backward(SumAll(Mul(h, Const(up))))
				}
				fresh := func() (*Var, *Var) { return Param(wv.Clone()), Param(bv.Clone()) }
				w, b := fresh()
				pass(w, b) // Grad allocated: no sinks
				gw, gb := w.Grad.Float64s(), b.Grad.Float64s()

				w2, b2 := fresh()
				w2.Grad = tensor.Uniform(rng, dt, -1, 1, out, in)
				b2.Grad = tensor.Uniform(rng, dt, -1, 1, out)
				w0, b0 := w2.Grad.Float64s(), b2.Grad.Float64s()
				gradW, gradB := w2.Grad, b2.Grad
				pass(w2, b2)
				require.Same(t, gradW, w2.Grad, "accumulated in place")
				require.Same(t, gradB, b2.Grad)
				tol := 1e-5
				if dt == tensor.F64 {
					tol = 1e-12
				}
				for i, v := range w2.Grad.Float64s() {
					require.InDelta(t, w0[i]+gw[i], v, tol*(1+abs(gw[i])), "%v %v relu=%v dW[%d]", dt, sh, relu, i)
				}
				for i, v := range b2.Grad.Float64s() {
					require.InDelta(t, b0[i]+gb[i], v, tol*float64(m)*(1+abs(gb[i])), "%v %v relu=%v db[%d]", dt, sh, relu, i)
				}
			}
		}
	}
	// A hooked weight sees its hook after the gradient is in Grad.
	w, b := Param(tensor.Ones(tensor.F32, 2, 3)), Param(tensor.Zeros(tensor.F32, 2))
	w.Grad, b.Grad = tensor.Zeros(tensor.F32, 2, 3), tensor.Zeros(tensor.F32, 2)
	var seen []float32
	w.RegisterPostAccumulateHook(func(v *Var) { seen = append([]float32(nil), v.Grad.F32()...) })
	Backward(SumAll(Linear(Const(tensor.Ones(tensor.F32, 1, 3)), w, b)))
	require.Equal(t, []float32{1, 1, 1, 1, 1, 1}, seen)
	require.Equal(t, []float32{1, 1}, b.Grad.F32())
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
