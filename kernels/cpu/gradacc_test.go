package cpu

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// TestMatMulAdd: MatMulAdd adds op(a)·op(b) to what dst holds, against a
// float64 reference, for the tiny kernels (W1's weight gradient, 4×4ᵀ by
// 4×16), the serial GEMM, the shared GEMM over several k blocks, and
// every transpose, eagerly and replayed from a capture (twice: it adds
// each time). The tiny float32 case is bitwise MatMul then Add.
func TestMatMulAdd(t *testing.T) {
	shapes := [][3]int{{4, 16, 4}, {3, 5, 7}, {40, 70, 30}, {300, 90, gemmKC + 40}}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
		for _, s := range shapes {
			for tr := 0; tr < 4; tr++ {
				m, n, k := s[0], s[1], s[2]
				ta, tb := tr&1 != 0, tr&2 != 0
				t.Run(fmt.Sprintf("%v/%dx%dx%d/ta=%v/tb=%v", dt, m, n, k, ta, tb), func(t *testing.T) {
					ash, bsh := []int{m, k}, []int{k, n}
					if ta {
						ash = []int{k, m}
					}
					if tb {
						bsh = []int{n, k}
					}
					a, b := randT(1, dt, ash...), randT(2, dt, bsh...)
					d0 := randT(3, dt, m, n)
					prod := refMatMul(vals(a), vals(b), 1, false, false, m, n, k, ta, tb)
					want := func(times float64) []float64 {
						w := vals(d0)
						for i := range w {
							w[i] += times * prod[i]
						}
						return w
					}
					rtol := 1e-5
					if dt == tensor.F64 {
						rtol = 1e-12
					}
					dst := d0.Clone()
					be.MatMulAdd(dst, a, b, ta, tb)
					closeTo(t, "eager", vals(dst), want(1), rtol)
					if dt == tensor.F32 && m*n*k < gemmSmall {
						p := tensor.Empty(dt, m, n)
						be.MatMul(p, a, b, ta, tb)
						sum := d0.Clone()
						be.Binary(kernels.Add, sum, sum, p)
						require.Equal(t, sum.F32(), dst.F32(), "tiny products add bitwise as MatMul then Add")
					}

					dst = d0.Clone()
					require.NoError(t, be.BeginCapture())
					be.MatMulAdd(dst, a, b, ta, tb)
					g, err := be.EndCapture()
					require.NoError(t, err)
					require.Equal(t, vals(d0), vals(dst), "nothing runs during capture")
					g.Replay()
					g.Replay()
					closeTo(t, "replayed twice", vals(dst), want(2), 2*rtol)
				})
			}
		}
	}
	require.PanicsWithValue(t, "cpu: MatMulAdd: dst has shape [2 2 2], want 2-D", func() {
		be.MatMulAdd(tensor.Empty(tensor.F32, 2, 2, 2), tensor.Empty(tensor.F32, 2, 2), tensor.Empty(tensor.F32, 2, 2), false, false)
	})
	require.Panics(t, func() {
		be.MatMulAdd(tensor.Empty(tensor.BF16, 2, 2), tensor.Empty(tensor.BF16, 2, 2), tensor.Empty(tensor.BF16, 2, 2), false, false)
	})
	require.Panics(t, func() {
		be.MatMulAdd(tensor.Empty(tensor.F32, 2, 3), tensor.Empty(tensor.F32, 2, 2), tensor.Empty(tensor.F32, 2, 2), false, false)
	})
}

// TestSumRowsAdd: SumRowsAdd is bitwise Reduce (Sum over axis 0)
// followed by Binary Add, for widths below, at and above its 64-column
// block, eagerly and replayed.
func TestSumRowsAdd(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
		for _, s := range [][2]int{{4, 4}, {1, 1}, {37, 64}, {9, 150}} {
			m, n := s[0], s[1]
			x, d0 := randT(4, dt, m, n), randT(5, dt, n)
			sum := tensor.Empty(dt, 1, n)
			be.Reduce(kernels.Sum, sum, x, []int{0})
			want := d0.Clone()
			be.Binary(kernels.Add, want, want, sum.Reshape(n))

			dst := d0.Clone()
			be.SumRowsAdd(dst, x)
			require.Equal(t, vals(want), vals(dst), "%v %dx%d", dt, m, n)

			dst = d0.Clone()
			require.NoError(t, be.BeginCapture())
			be.SumRowsAdd(dst, x)
			g, err := be.EndCapture()
			require.NoError(t, err)
			require.Equal(t, vals(d0), vals(dst))
			g.Replay()
			require.Equal(t, vals(want), vals(dst), "replayed %v %dx%d", dt, m, n)
		}
	}
	require.PanicsWithValue(t, "cpu: SumRowsAdd: dst has shape [3], want [4]", func() {
		be.SumRowsAdd(tensor.Empty(tensor.F32, 3), tensor.Empty(tensor.F32, 2, 4))
	})
	require.Panics(t, func() { be.SumRowsAdd(tensor.Empty(tensor.F64, 4), tensor.Empty(tensor.F32, 2, 4)) })
	require.Panics(t, func() { be.SumRowsAdd(tensor.Empty(tensor.F32, 4), tensor.Empty(tensor.F32, 8)) })
}

// TestGroupRecordsOneLaunch: launches made inside Group are one launch
// of a captured graph (Len), which runs them all, in order, at each
// replay; eagerly Group just runs them.
func TestGroupRecordsOneLaunch(t *testing.T) {
	b := new(Backend)
	x := tensor.Zeros(tensor.F32, 3)
	steps := func() {
		b.Fill(x, 2)
		b.BinaryScalar(kernels.Mul, x, x, 3, false)
		b.BinaryScalar(kernels.Add, x, x, 1, false)
	}
	b.Group(steps)
	require.Equal(t, []float32{7, 7, 7}, x.F32())
	require.NoError(t, b.BeginCapture())
	b.Fill(x, 0)
	b.Group(steps)
	b.Group(func() { b.BinaryScalar(kernels.Mul, x, x, 2, false) }) // one launch stays one
	g, err := b.EndCapture()
	require.NoError(t, err)
	require.Equal(t, 3, g.Len(), "the fill, the group of three, the lone launch")
	b.Fill(x, 5)
	g.Replay()
	require.Equal(t, []float32{14, 14, 14}, x.F32(), "(2·3 + 1)·2, in order")
}
