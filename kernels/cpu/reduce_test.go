package cpu

import (
	"math"
	"runtime"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

// refReduce reduces x over axes with float64 loops over multi-indices.
func refReduce(op kernels.ReduceOp, x []float64, shape []int, axes []int) ([]float64, []int) {
	red := make([]bool, len(shape))
	for _, a := range axes {
		if a < 0 {
			a += len(shape)
		}
		red[a] = true
	}
	oshape := make([]int, len(shape))
	for i, s := range shape {
		oshape[i] = s
		if red[i] {
			oshape[i] = 1
		}
	}
	n := tensor.Numel(oshape)
	groups := make([][]float64, n)
	ost := contigStrides(oshape)
	idx := make([]int, len(shape))
	for _, v := range x {
		o := 0
		for d := range shape {
			if !red[d] {
				o += idx[d] * ost[d]
			}
		}
		groups[o] = append(groups[o], v)
		for d := len(shape) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	out := make([]float64, n)
	for o, g := range groups {
		switch op {
		case kernels.Sum, kernels.Mean:
			for _, v := range g {
				out[o] += v
			}
			if op == kernels.Mean {
				out[o] /= float64(len(g))
			}
		case kernels.Max:
			out[o] = math.Inf(-1)
			for _, v := range g {
				out[o] = math.Max(out[o], v)
			}
		case kernels.Min:
			out[o] = math.Inf(1)
			for _, v := range g {
				out[o] = math.Min(out[o], v)
			}
		case kernels.LogSumExp:
			m := math.Inf(-1)
			for _, v := range g {
				m = math.Max(m, v)
			}
			var s float64
			for _, v := range g {
				s += math.Exp(v - m)
			}
			out[o] = m + math.Log(s)
		}
	}
	return out, oshape
}

// TestReduceHalfIntoF32: a BF16 input reduced into an F32 output (the
// conformance suite checks one dtype at a time; autocast keeps
// reductions in fp32).
func TestReduceHalfIntoF32(t *testing.T) {
	x := randT(5, tensor.BF16, 40, 50)
	dst := tensor.Empty(tensor.F32, 40, 1)
	be.Reduce(kernels.Sum, dst, x, []int{1})
	want, _ := refReduce(kernels.Sum, vals(x), []int{40, 50}, []int{1})
	closeTo(t, "bf16→f32", vals(dst), want, 1e-6)
}

func TestReduceDeterministic(t *testing.T) {
	x := randT(1, tensor.F32, 64, 16, 33, 33)
	for _, axes := range [][]int{{0, 2, 3}, {0, 1, 2, 3}, {3}} {
		_, os := refReduce(kernels.Sum, []float64{0}, []int{1, 1, 1, 1}, nil)
		_ = os
		shape := []int{64, 16, 33, 33}
		for _, a := range axes {
			shape[a] = 1
		}
		run := func(p int) []float64 {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
			d := tensor.Empty(tensor.F32, shape...)
			be.Reduce(kernels.Sum, d, x, axes)
			return vals(d)
		}
		same(t, name("reduce ", axes), run(1), run(2))
	}
}

// TestCountCorrect: CountCorrect adds exactly what ArgMax followed by a
// comparison gives, ties (first index) and NaN (the maximum) included,
// for both float widths and index types, accumulating across calls; bad
// shapes panic with the op's name.
func TestCountCorrect(t *testing.T) {
	const n, c = 37, 6
	for _, d := range floatTypes {
		for _, idt := range []tensor.DType{tensor.I64, tensor.I32} {
			x := randT(3, d, n, c)
			xv := x.Cast(tensor.F64).F64()
			xv[2*c+1], xv[2*c+4] = 9, 9 // a tie: the first wins
			xv[5*c+3] = math.NaN()      // NaN is the maximum
			x = tensor.FromFloat64s(d, xv, n, c)
			pred := tensor.Empty(tensor.I64, n, 1)
			be.ArgMax(pred, x, 1)
			target := tensor.RandInt(tensor.NewRNG(4), c, n)
			for i := 0; i < n; i += 3 { // a third right by construction
				target.I64()[i] = pred.I64()[i]
			}
			target.I64()[2], target.I64()[5] = 1, 3
			acc := tensor.Empty(tensor.F32, n)
			be.Fill(acc, 0.5)
			tg := target.Cast(idt)
			be.CountCorrect(acc, x, tg)
			be.CountCorrect(acc, x, tg)
			right := 0
			for i := 0; i < n; i++ {
				want := float32(0.5)
				if pred.I64()[i] == target.I64()[i] {
					want += 2
					right++
				}
				require.Equal(t, want, acc.F32()[i], "%v %v row %d", d, idt, i)
			}
			require.Equal(t, float32(2.5), acc.F32()[2], "tie at index 1 counted")
			require.Equal(t, float32(2.5), acc.F32()[5], "NaN at index 3 counted")
			require.Greater(t, right, n/3)
		}
	}
	x := tensor.Empty(tensor.F32, 4, 3)
	require.PanicsWithValue(t, "cpu: CountCorrect: acc has shape [5], want [4]", func() {
		be.CountCorrect(tensor.Empty(tensor.F32, 5), x, tensor.Empty(tensor.I64, 4))
	})
	require.Panics(t, func() { be.CountCorrect(tensor.Empty(tensor.F64, 4), x, tensor.Empty(tensor.I64, 4)) })
	require.Panics(t, func() { be.CountCorrect(tensor.Empty(tensor.F32, 4), x, tensor.Empty(tensor.F32, 4)) })
}

// TestColumnSumsMatchGeneralPath: the direct column-sum path of small
// 2-D matrices gives bitwise what the general reduction gives for the
// same data seen as [m, n, 1], for sums and means, both widths.
func TestColumnSumsMatchGeneralPath(t *testing.T) {
	for _, d := range floatTypes {
		for _, op := range []kernels.ReduceOp{kernels.Sum, kernels.Mean} {
			for _, sh := range [][2]int{{1, 1}, {4, 4}, {7, 64}, {130, 3}} {
				m, n := sh[0], sh[1]
				x := randT(uint64(m*n), d, m, n)
				fast := tensor.Empty(d, 1, n)
				be.Reduce(op, fast, x, []int{0})
				general := tensor.Empty(d, 1, n, 1)
				be.Reduce(op, general, x.Reshape(m, n, 1), []int{0})
				require.Equal(t, vals(general), vals(fast), "%v %v %v", d, op, sh)
			}
		}
	}
}

// TestInnerReduceAndRepeat: reductions over a trailing run of axes (the
// path without per-output offsets) give the float64 sums and means, with
// size-1 axes reduced anywhere; copies of tensors broadcast along
// trailing dims (repeatEach) match an element-wise expansion, and other
// broadcasts still take the strided copy.
func TestInnerReduceAndRepeat(t *testing.T) {
	for _, c := range []struct {
		shape []int
		axes  []int
	}{
		{[]int{5, 3, 3, 3}, []int{2, 3}},
		{[]int{4, 1, 7}, []int{1, 2}},
		{[]int{6, 10}, []int{1}},
		{[]int{2, 3, 4}, []int{1, 2}},
	} {
		x := randT(9, tensor.F32, c.shape...)
		keep := append([]int(nil), c.shape...)
		for _, a := range c.axes {
			keep[a] = 1
		}
		r := 1
		for _, a := range c.axes {
			r *= c.shape[a]
		}
		xs := vals(x)
		for _, op := range []kernels.ReduceOp{kernels.Sum, kernels.Mean} {
			out := tensor.Empty(tensor.F32, keep...)
			be.Reduce(op, out, x, c.axes)
			for o, v := range vals(out) {
				var want float64
				for _, e := range xs[o*r : (o+1)*r] {
					want += e
				}
				if op == kernels.Mean {
					want /= float64(r)
				}
				require.InDelta(t, want, v, 1e-5, "%v over %v, output %d", c.shape, c.axes, o)
			}
		}
	}
	src := randT(4, tensor.F32, 3, 4, 1, 1)
	for _, shape := range [][]int{{3, 4, 5, 2}, {3, 4, 1, 6}} {
		got := tensor.Empty(tensor.F32, shape...)
		be.Copy(got, src.Expand(shape...))
		for i, v := range got.F32() {
			require.Equal(t, src.F32()[i/(shape[2]*shape[3])], v, "expand to %v, element %d", shape, i)
		}
	}
	mid := randT(5, tensor.F32, 3, 1, 4)
	got := tensor.Empty(tensor.F32, 3, 5, 4)
	be.Copy(got, mid.Expand(3, 5, 4)) // broadcast in the middle: the strided copy
	for i, v := range got.F32() {
		require.Equal(t, mid.F32()[(i/20)*4+i%4], v, "middle broadcast, element %d", i)
	}
}

// TestMiddleReduce: reductions over one run of axes with kept axes after
// it (the [a, r, b] path, a GAT layer's mean over heads) give exactly the
// float64 fold in element order, rounded to the dtype (bf16 through
// float32), for every op but LogSumExp, with size-1 axes anywhere, more than 64 kept
// columns (the accumulator's tiles) and a NaN that wins its column.
func TestMiddleReduce(t *testing.T) {
	cases := []struct {
		shape []int
		axes  []int
	}{
		{[]int{3, 4, 5}, []int{1}},
		{[]int{2, 1, 6, 1, 70}, []int{2}},
		{[]int{192, 4, 128}, []int{1}},
		{[]int{5, 2, 3, 4}, []int{1, 2}},
		{[]int{1, 4, 3}, []int{1}},
		{[]int{4, 3}, []int{0}},
	}
	for _, op := range []kernels.ReduceOp{kernels.Sum, kernels.Mean, kernels.Max, kernels.Min} {
		for _, d := range floatTypes {
			for ci, c := range cases {
				x := randT(uint64(ci+7), d, c.shape...)
				if ci == 0 {
					x.Set(math.NaN(), 1, 2, 3) // column (1, 3) of output row 1
				}
				red := make([]bool, len(c.shape))
				for _, a := range c.axes {
					red[a] = true
				}
				_, _, _, ok := middleReduce(x, red)
				require.True(t, ok, "%v over %v should take the middle path", c.shape, c.axes)
				want, os := refReduce(op, vals(x), c.shape, c.axes)
				dst := tensor.Empty(d, os...)
				be.Reduce(op, dst, x, c.axes)
				got := vals(dst)
				for i, w := range want {
					switch d { // rounded as the kernel rounds: to float32, then to bf16
					case tensor.F32:
						w = float64(float32(w))
					case tensor.BF16:
						w = float64(tensor.BF16ToF32(tensor.F32ToBF16(float32(w))))
					}
					if math.IsNaN(w) {
						require.True(t, math.IsNaN(got[i]), "%s: output %d", name(op, d, c.shape, c.axes), i)
						continue
					}
					require.Equal(t, w, got[i], "%s: output %d", name(op, d, c.shape, c.axes), i)
				}
			}
		}
	}
	_, _, _, ok := middleReduce(randT(1, tensor.F32, 3, 4, 5), []bool{true, false, true})
	require.False(t, ok, "two reduced runs")
	_, _, _, ok = middleReduce(randT(1, tensor.F32, 3, 4), []bool{false, true})
	require.False(t, ok, "a trailing reduced run (innerReduce's)")
}
