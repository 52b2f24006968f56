package cpu

import (
	"math"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

func refSoftmax(x []float64, shape []int, axis int, log bool) []float64 {
	outer, A, inner := kernels.Split3(shape, axis)
	y := make([]float64, len(x))
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			m := math.Inf(-1)
			for k := 0; k < A; k++ {
				m = math.Max(m, x[(o*A+k)*inner+i])
			}
			var s float64
			for k := 0; k < A; k++ {
				s += math.Exp(x[(o*A+k)*inner+i] - m)
			}
			for k := 0; k < A; k++ {
				j := (o*A+k)*inner + i
				if log {
					y[j] = x[j] - m - math.Log(s)
				} else {
					y[j] = math.Exp(x[j]-m) / s
				}
			}
		}
	}
	return y
}

// TestSoftmaxHalfIntoF32: a BF16 input normalised into an F32 output (the
// conformance suite checks one dtype at a time).
func TestSoftmaxHalfIntoF32(t *testing.T) {
	x := randT(3, tensor.BF16, 6, 10)
	y := tensor.Empty(tensor.F32, 6, 10)
	be.Softmax(y, x, 1)
	closeTo(t, "bf16→f32", vals(y), refSoftmax(vals(x), []int{6, 10}, 1, false), 1e-6)
}

// TestCrossEntropyNonFiniteRows: rows holding NaN or ±Inf take the exact
// path; float32 results match the float64 kernel's (NaN where it is NaN).
func TestCrossEntropyNonFiniteRows(t *testing.T) {
	const n, c = 6, 4
	inf := math.Inf(1)
	xv := []float64{
		0.5, -1, 2, 0.1,
		math.NaN(), 1, 2, 3,
		-inf, 1, 2, 3, // −Inf off the target: finite
		inf, 1, 2, 3, // +Inf: NaN, as PyTorch
		1, 2, -inf, 0,
		3, 3, 3, 3,
	}
	tg := tensor.FromSlice([]int64{2, 0, 1, 3, 1, 0}, n)
	p := kernels.CrossEntropyParams{Reduction: kernels.ReduceNone}
	run := func(d tensor.DType) (loss, grad []float64) {
		x := tensor.FromFloat64s(d, xv, n, c)
		l := tensor.Empty(d, n)
		be.CrossEntropy(l, x, tg, p)
		dx := tensor.Empty(d, n, c)
		be.CrossEntropyBackward(dx, x, tg, tensor.FromFloat64s(d, []float64{1, 1, 1, 1, 1, 1}, n), p)
		return vals(l), vals(dx)
	}
	l32, g32 := run(tensor.F32)
	l64, g64 := run(tensor.F64)
	same := func(what string, a, b []float64) {
		for i := range a {
			if math.IsNaN(b[i]) {
				require.True(t, math.IsNaN(a[i]), "%s[%d] = %v, want NaN", what, i, a[i])
				continue
			}
			require.InDelta(t, b[i], a[i], 1e-6, "%s[%d]", what, i)
		}
	}
	same("loss", l32, l64)
	same("grad", g32, g64)
	require.True(t, math.IsNaN(l64[1]) && math.IsNaN(l64[3]))
	require.False(t, math.IsNaN(l64[2]) || math.IsInf(l64[2], 0))
}
