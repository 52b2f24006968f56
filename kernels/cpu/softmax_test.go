package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
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

func TestSoftmax(t *testing.T) {
	shapes := [][]int{{1, 1}, {7, 5}, {3, 4, 6}, {2, 1, 9}}
	for _, log := range []bool{false, true} {
		for _, d := range floatTypes {
			for si, sh := range shapes {
				for axis := 0; axis < len(sh); axis++ {
					x := randT(uint64(si), d, sh...)
					x.Set(x.At(make([]int, len(sh))...)+100, make([]int, len(sh))...) // needs the max shift
					y := tensor.Empty(d, sh...)
					if log {
						be.LogSoftmax(y, x, axis)
					} else {
						be.Softmax(y, x, axis)
					}
					closeTo(t, name("softmax ", log, d, sh, axis), vals(y), refSoftmax(vals(x), sh, axis, log), tol(d))

					// Backward against finite differences of the reference.
					dy := randT(77, d, sh...)
					dx := tensor.Empty(d, sh...)
					if log {
						be.LogSoftmaxBackward(dx, y, dy, axis)
					} else {
						be.SoftmaxBackward(dx, y, dy, axis)
					}
					x64 := asF64(x)
					want := numGrad(x64, vals(dy), func() []float64 { return refSoftmax(x64.F64(), sh, axis, log) })
					closeTo(t, name("softmax bwd ", log, d, sh, axis), vals(dx), want, max(tol(d), 1e-7))
				}
			}
		}
	}
	// BF16 input, F32 output.
	x := randT(3, tensor.BF16, 6, 10)
	y := tensor.Empty(tensor.F32, 6, 10)
	be.Softmax(y, x, 1)
	closeTo(t, "bf16→f32", vals(y), refSoftmax(vals(x), []int{6, 10}, 1, false), 1e-6)
}

func refCE(x []float64, tg []int64, n, c int, p kernels.CrossEntropyParams) ([]float64, float64) {
	lp := refSoftmax(x, []int{n, c}, 1, true)
	per := make([]float64, n)
	var sum float64
	cnt := 0
	for i := 0; i < n; i++ {
		if p.HasIgnore && tg[i] == p.IgnoreIndex {
			continue
		}
		var smooth float64
		for j := 0; j < c; j++ {
			smooth -= lp[i*c+j]
		}
		per[i] = (1-p.LabelSmoothing)*(-lp[i*c+int(tg[i])]) + p.LabelSmoothing*smooth/float64(c)
		sum += per[i]
		cnt++
	}
	if p.Reduction == kernels.ReduceMean {
		sum /= float64(cnt)
	}
	return per, sum
}

// TestCrossEntropy covers 5 classes, 70, and 300 (rows longer than
// expRowBuf, exponentiated in chunks; fewer rows keep the finite
// differences quick).
func TestCrossEntropy(t *testing.T) {
	for _, c := range []int{5, 70, 300} {
		testCrossEntropy(t, c)
	}
}

func testCrossEntropy(t *testing.T, c int) {
	n := 9
	if c > 100 {
		n = 4
	}
	params := []kernels.CrossEntropyParams{
		{},
		{LabelSmoothing: 0.1},
		{Reduction: kernels.ReduceSum, LabelSmoothing: 0.2, HasIgnore: true, IgnoreIndex: -100},
		{Reduction: kernels.ReduceNone, LabelSmoothing: 0.1, HasIgnore: true, IgnoreIndex: 2},
		{Reduction: kernels.ReduceMean, HasIgnore: true, IgnoreIndex: -100},
	}
	for pi, p := range params {
		for _, d := range floatTypes {
			for _, idt := range []tensor.DType{tensor.I64, tensor.I32} {
				x := randT(uint64(pi), d, n, c)
				tg := tensor.RandInt(tensor.NewRNG(uint64(pi)), c, n)
				tg.I64()[3] = -100
				if !p.HasIgnore || p.IgnoreIndex != -100 {
					tg.I64()[3] = 1
				}
				per, total := refCE(vals(x), tg.I64(), n, c, p)
				target := tg.Cast(idt)
				var loss, dloss *T
				var want []float64
				if p.Reduction == kernels.ReduceNone {
					loss, want = tensor.Empty(tensor.F32, n), per
					dloss = randT(5, tensor.F32, n)
				} else {
					loss, want = tensor.Empty(tensor.F32), []float64{total}
					dloss = tensor.Scalar(tensor.F32, 0.7)
				}
				if d == tensor.F64 {
					loss, dloss = loss.Cast(tensor.F64), dloss.Cast(tensor.F64)
				}
				be.CrossEntropy(loss, x, target, p)
				closeTo(t, name("ce ", c, pi, d), vals(loss), want, max(tol(d), 1e-6))

				dx := tensor.Empty(d, n, c)
				be.CrossEntropyBackward(dx, x, target, dloss, p)
				x64 := asF64(x)
				wantG := numGrad(x64, vals(dloss), func() []float64 {
					per, total := refCE(x64.F64(), tg.I64(), n, c, p)
					if p.Reduction == kernels.ReduceNone {
						return per
					}
					return []float64{total}
				})
				closeTo(t, name("ce bwd ", c, pi, d), vals(dx), wantG, max(tol(d), 1e-7))
			}
		}
	}
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
