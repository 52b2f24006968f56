package cpu

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

func refMatMul(a, b []float64, batch int, bcA, bcB bool, m, n, k int, ta, tb bool) []float64 {
	c := make([]float64, batch*m*n)
	for bi := 0; bi < batch; bi++ {
		ao, bo := batchOffsets(bi, m, n, k, bcA, bcB)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s float64
				for p := 0; p < k; p++ {
					var x, y float64
					if ta {
						x = a[ao+p*m+i]
					} else {
						x = a[ao+i*k+p]
					}
					if tb {
						y = b[bo+j*k+p]
					} else {
						y = b[bo+p*n+j]
					}
					s += x * y
				}
				c[bi*m*n+i*n+j] = s
			}
		}
	}
	return c
}

func TestMatMul(t *testing.T) {
	cases := []struct {
		batchA, batchB, m, n, k int
	}{
		{0, 0, 1, 1, 1}, {0, 0, 3, 5, 7}, {0, 0, 67, 33, 300}, {2, 2, 5, 9, 4}, {3, 0, 70, 13, 17}, {0, 2, 6, 530, 5}, {0, 0, 130, 6, 600}, {0, 0, 200, 530, 300},
	}
	for ci, c := range cases {
		for _, d := range floatTypes {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					ash := []int{c.m, c.k}
					if ta {
						ash = []int{c.k, c.m}
					}
					bsh := []int{c.k, c.n}
					if tb {
						bsh = []int{c.n, c.k}
					}
					if c.batchA > 0 {
						ash = append([]int{c.batchA}, ash...)
					}
					if c.batchB > 0 {
						bsh = append([]int{c.batchB}, bsh...)
					}
					batch := max(c.batchA, c.batchB, 1)
					dsh := []int{c.m, c.n}
					if c.batchA > 0 || c.batchB > 0 {
						dsh = []int{batch, c.m, c.n}
					}
					a := randT(uint64(ci), d, ash...)
					b := randT(uint64(ci+100), d, bsh...)
					dst := tensor.Empty(d, dsh...)
					be.MatMul(dst, a, b, ta, tb)
					want := refMatMul(vals(a), vals(b), batch, c.batchA > 0, c.batchB > 0, c.m, c.n, c.k, ta, tb)
					closeTo(t, name("matmul ", ci, d, ta, tb), vals(dst), want, tol(d))
				}
			}
		}
	}
	// BF16 inputs into an F32 destination (autocast).
	a := randT(1, tensor.BF16, 20, 30)
	b := randT(2, tensor.BF16, 30, 10)
	dst := tensor.Empty(tensor.F32, 20, 10)
	be.MatMul(dst, a, b, false, false)
	closeTo(t, "bf16→f32", vals(dst), refMatMul(vals(a), vals(b), 1, false, false, 20, 10, 30, false, false), 1e-5)
}

func TestMatMulDeterministic(t *testing.T) {
	a := randT(1, tensor.F32, 300, 500)
	b := randT(2, tensor.F32, 500, 200)
	run := func(p int) []float32 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
		d := tensor.Empty(tensor.F32, 300, 200)
		be.MatMul(d, a, b, false, false)
		return d.F32()
	}
	x, y := run(1), run(2)
	for i := range x {
		if x[i] != y[i] {
			t.Fatalf("element %d differs: %v vs %v", i, x[i], y[i])
		}
	}
}

func benchMatMul(b *testing.B, n int) {
	a := randT(1, tensor.F32, n, n)
	w := randT(2, tensor.F32, n, n)
	d := tensor.Empty(tensor.F32, n, n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		be.MatMul(d, a, w, false, false)
	}
	b.ReportMetric(2*float64(n)*float64(n)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkMatMul64(b *testing.B)   { benchMatMul(b, 64) }
func BenchmarkMatMul256(b *testing.B)  { benchMatMul(b, 256) }
func BenchmarkMatMul1024(b *testing.B) { benchMatMul(b, 1024) }

// TestMatMulBias: the fused bias gives bitwise MatMul followed by the
// broadcast add (half outputs: within their rounding), on the unpacked small path and the packed one, batched
// and not, for both widths and a bf16 bias; a nil bias is MatMul; a bias
// of the wrong length panics.
func TestMatMulBias(t *testing.T) {
	for _, d := range floatTypes {
		for _, c := range []struct {
			a, b         []int
			trA, trB     bool
			biasDT       tensor.DType
			m, n, outRnk int
		}{
			{[]int{4, 16}, []int{4, 16}, false, true, d, 4, 4, 2},
			{[]int{70, 90}, []int{90, 50}, false, false, d, 70, 50, 2},
			{[]int{3, 20, 30}, []int{30, 40}, false, false, d, 20, 40, 3},
			{[]int{16, 4}, []int{16, 8}, true, false, tensor.BF16, 4, 8, 2},
		} {
			a, b := randT(1, d, c.a...), randT(2, d, c.b...)
			bias := randT(3, c.biasDT, c.n)
			shape := []int{c.m, c.n}
			if c.outRnk == 3 {
				shape = []int{c.a[0], c.m, c.n}
			}
			want := tensor.Empty(d, shape...)
			be.MatMul(want, a, b, c.trA, c.trB)
			be.Binary(kernels.Add, want, want, bias.Cast(d))
			got := tensor.Empty(d, shape...)
			be.MatMulBias(got, a, b, bias, c.trA, c.trB)
			if d.IsHalf() {
				// A half dst is rounded once after the fused add, not
				// twice: within a rounding of the two-step result.
				closeTo(t, name("matmul bias ", d, c.a), vals(got), vals(want), tol(d))
			} else {
				require.Equal(t, vals(want), vals(got), "%v %v×%v", d, c.a, c.b)
			}
			plain := tensor.Empty(d, shape...)
			be.MatMul(plain, a, b, c.trA, c.trB)
			be.MatMulBias(got, a, b, nil, c.trA, c.trB)
			require.Equal(t, vals(plain), vals(got))
		}
	}
	require.Panics(t, func() {
		be.MatMulBias(tensor.Empty(tensor.F32, 2, 3), randT(1, tensor.F32, 2, 4), randT(2, tensor.F32, 4, 3), tensor.Empty(tensor.F32, 2), false, false)
	})
}

// TestMatMulBiasAct: the fused activation gives bitwise MatMulBias
// followed by Unary, on the eager tiny path, the packed per-block path,
// a batch, and one large product split by panels (gemmShared), for both
// widths, with and without a bias; an unknown activation panics.
func TestMatMulBiasAct(t *testing.T) {
	for _, d := range []tensor.DType{tensor.F32, tensor.F64} {
		for _, op := range []kernels.UnaryOp{kernels.Relu, kernels.Tanh} {
			for _, c := range []struct{ a, b, out []int }{
				{[]int{4, 16}, []int{16, 4}, []int{4, 4}},
				{[]int{70, 90}, []int{90, 50}, []int{70, 50}},
				{[]int{3, 20, 30}, []int{30, 40}, []int{3, 20, 40}},
				{[]int{300, 70}, []int{70, 45}, []int{300, 45}},
			} {
				a, b := randT(1, d, c.a...), randT(2, d, c.b...)
				n := c.out[len(c.out)-1]
				for _, bias := range []*tensor.Tensor{randT(3, d, n), nil} {
					want := tensor.Empty(d, c.out...)
					be.MatMulBias(want, a, b, bias, false, false)
					be.Unary(op, want, want)
					got := tensor.Empty(d, c.out...)
					be.MatMulBiasAct(got, a, b, bias, op, false, false)
					require.Equal(t, vals(want), vals(got), "%v %v %v×%v bias %v", d, op, c.a, c.b, bias != nil)
				}
			}
		}
	}
	require.Panics(t, func() {
		be.MatMulBiasAct(tensor.Empty(tensor.F32, 2, 3), randT(1, tensor.F32, 2, 4), randT(2, tensor.F32, 4, 3), nil, kernels.UnaryOp(200), false, false)
	})
}

// TestFewRowsSplit: a product of a few rows by a large B (split by
// column blocks among the workers), and one of a single block of rows
// large enough to share out (gemmShared with m ≤ gemmMC: 40 and 64
// rows), matches the float64 reference and is bitwise the same with one
// worker and with two, for B stored either way, a width that is not a
// multiple of the block, with bias and activation, and accumulating
// (MatMulAdd).
func TestFewRowsSplit(t *testing.T) {
	for _, m := range []int{1, 3, 4, 7, 40, 64} {
		for _, n := range []int{fewRowsCols*4 + 9, fewRowsCols * 5} {
			for _, tb := range []bool{false, true} {
				k := 300
				require.GreaterOrEqual(t, m*n*k, min(fewRowsSplit, sharedSplit))
				if m >= gemmSmallRows {
					require.GreaterOrEqual(t, m*n*k, sharedSplit)
					require.LessOrEqual(t, m, gemmMC)
				}
				a := randT(uint64(m), tensor.F32, m, k)
				bsh := []int{k, n}
				if tb {
					bsh = []int{n, k}
				}
				b := randT(uint64(n), tensor.F32, bsh...)
				bias := randT(5, tensor.F32, n)
				d0 := randT(6, tensor.F32, m, n)
				run := func(p int) (plain, act, acc *tensor.Tensor) {
					defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
					plain = tensor.Empty(tensor.F32, m, n)
					be.MatMul(plain, a, b, false, tb)
					act = tensor.Empty(tensor.F32, m, n)
					be.MatMulBiasAct(act, a, b, bias, kernels.GeluErf, false, tb)
					acc = d0.Clone()
					be.MatMulAdd(acc, a, b, false, tb)
					return plain, act, acc
				}
				x1, y1, z1 := run(1)
				x2, y2, z2 := run(2)
				what := fmt.Sprintf("m %d n %d transB %v", m, n, tb)
				require.Equal(t, x1.F32(), x2.F32(), what)
				require.Equal(t, y1.F32(), y2.F32(), what+" with bias and GELU")
				require.Equal(t, z1.F32(), z2.F32(), what+" accumulated")
				want := refMatMul(vals(a), vals(b), 1, false, false, m, n, k, false, tb)
				closeTo(t, what, vals(x2), want, tol(tensor.F32))
				ref := x2.Clone()
				be.Binary(kernels.Add, ref, ref, bias)
				be.Unary(kernels.GeluErf, ref, ref)
				require.Equal(t, ref.F32(), y2.F32(), what+" with bias and GELU, against MatMul then Add then GELU")
				for i := range want {
					want[i] += float64(d0.F32()[i])
				}
				closeTo(t, what+" accumulated", vals(z2), want, tol(tensor.F32))
			}
		}
	}
}
