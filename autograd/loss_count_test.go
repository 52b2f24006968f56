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
