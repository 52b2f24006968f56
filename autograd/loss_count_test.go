package autograd

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// TestCrossEntropyCountMatchesUnfused: CrossEntropyCount's loss, its
// gradient and the metrics it keeps equal CrossEntropy followed by
// Binary Add and CountCorrect bit for bit, on the CPU and on sim (whose
// backend takes the fused interface), for the mean and the sum, with a
// tie, a row whose argmax is its target and an ignored target.
func TestCrossEntropyCountMatchesUnfused(t *testing.T) {
	const n, c = 6, 5
	rng := rand.New(rand.NewPCG(3, 4))
	xs := make([]float32, n*c)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	xs[c+1] = xs[c] // a tie in row 1
	ys := []int64{1, 0, 2, 2, 4, 3}
	for i := 0; i < n; i += 2 { // even rows: the target is the argmax
		best := 0
		for j := 1; j < c; j++ {
			if xs[i*c+j] > xs[i*c+best] {
				best = j
			}
		}
		ys[i] = int64(best)
	}
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		for _, p := range []kernels.CrossEntropyParams{{}, {Reduction: kernels.ReduceSum, LabelSmoothing: 0.1, HasIgnore: true, IgnoreIndex: -100}} {
			ys := append([]int64(nil), ys...)
			if p.HasIgnore {
				ys[3] = p.IgnoreIndex
			}
			on := func(h *tensor.Tensor) *tensor.Tensor {
				d, err := h.ToDevice(dev)
				require.NoError(t, err)
				return d
			}
			type result struct{ loss, grad, sum, acc []float32 }
			run := func(fused bool) result {
				x := Param(on(tensor.FromSlice(append([]float32(nil), xs...), n, c)))
				y := on(tensor.FromSlice(ys, n))
				sum := on(tensor.FromSlice([]float32{1.5}, 1))
				acc := on(tensor.FromSlice([]float32{0, 1, 2, 0, 1, 0}, n))
				var loss *Var
				if fused {
					loss = CrossEntropyCount(x, y, p, sum, acc)
				} else {
					loss = CrossEntropy(x, y, p)
					be := kernels.For(dev)
					be.Binary(kernels.Add, sum, sum, loss.Value.Reshape(1))
					be.CountCorrect(acc, x.Value, y)
				}
				Backward(loss)
				host := func(d *tensor.Tensor) []float32 {
					h, err := d.ToDevice(tensor.CPU)
					require.NoError(t, err)
					return h.F32()
				}
				return result{host(loss.Value), host(x.Grad), host(sum), host(acc)}
			}
			want, got := run(false), run(true)
			require.Equal(t, want, got, "%v %+v", dev, p)
			require.NotEqual(t, []float32{0, 1, 2, 0, 1, 0}, got.acc, "some rows count")
			require.NotEqual(t, float32(1.5), got.sum[0], "the loss is added")
		}
	}
	x := Param(tensor.FromSlice(xs, n, c))
	require.PanicsWithValue(t, "autograd: cross_entropy_count: reduction none (logits shape [6 5]): the running loss adds one reduced loss", func() {
		CrossEntropyCount(x, tensor.FromSlice(ys, n), kernels.CrossEntropyParams{Reduction: kernels.ReduceNone}, tensor.Zeros(tensor.F32, 1), tensor.Zeros(tensor.F32, n))
	})
}

// TestCrossEntropyCountF64Logits: F64 logits (an F64 loss) add into the
// F32 running sum as Binary Add adds them, the count as CountCorrect
// counts: bitwise the unfused ops.
func TestCrossEntropyCountF64Logits(t *testing.T) {
	xs := []float64{2, 0, 0, 1, 3, 0}
	y := tensor.FromSlice([]int64{0, 2}, 2)
	run := func(fused bool) (float32, []float32, []float64) {
		x := Param(tensor.FromSlice(append([]float64(nil), xs...), 2, 3))
		sum, acc := tensor.FromSlice([]float32{0.25}, 1), tensor.FromSlice([]float32{0, 0}, 2)
		var l *Var
		if fused {
			l = CrossEntropyCount(x, y, kernels.CrossEntropyParams{}, sum, acc)
		} else {
			l = CrossEntropy(x, y, kernels.CrossEntropyParams{})
			kernels.CrossEntropyCountOps(kernels.For(tensor.CPU), tensor.Empty(tensor.F64), x.Value, y, kernels.CrossEntropyParams{}, sum, acc)
		}
		Backward(l)
		return sum.F32()[0], acc.F32(), x.Grad.F64()
	}
	ws, wa, wg := run(false)
	gs, ga, gg := run(true)
	require.Equal(t, ws, gs)
	require.Equal(t, []float32{1, 0}, ga)
	require.Equal(t, wa, ga)
	require.Equal(t, wg, gg)
	require.InDelta(t, 0.25+1.7047, float64(gs), 1e-4)
}
