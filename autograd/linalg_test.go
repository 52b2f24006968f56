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
