package cpu

import (
	"math"
	"strings"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

func TestBinaryStridedAndInt(t *testing.T) {
	// A transposed (non-contiguous) operand.
	a := randT(1, tensor.F32, 5, 7)
	b := randT(2, tensor.F32, 7, 5)
	dst := tensor.Empty(tensor.F32, 7, 5)
	be.Binary(kernels.Sub, dst, a.T(), b)
	av, bv := a.T().Float64s(), vals(b)
	want := make([]float64, len(av))
	for i := range av {
		want[i] = av[i] - bv[i]
	}
	closeTo(t, "transposed", vals(dst), want, 1e-6)

	// Integers.
	x := tensor.FromSlice([]int64{1, 2, 3, -4}, 2, 2)
	y := tensor.FromSlice([]int64{10, 20}, 2)
	z := tensor.Empty(tensor.I64, 2, 2)
	be.Binary(kernels.Add, z, x, y)
	require.Equal(t, []int64{11, 22, 13, 16}, z.I64())
	c := tensor.Empty(tensor.Bool, 2, 2)
	be.Binary(kernels.Gt, c, x, y.Expand(2, 2))
	require.Equal(t, []bool{false, false, false, false}, c.Bools())
	be.BinaryScalar(kernels.Mul, z, x, 3, false)
	require.Equal(t, []int64{3, 6, 9, -12}, z.I64())
}

func TestBinaryShapePanic(t *testing.T) {
	defer func() {
		r := recover()
		require.NotNil(t, r)
		msg := r.(string)
		for _, s := range []string{"Binary add", "[2 3]", "[4]"} {
			require.True(t, strings.Contains(msg, s), "message %q lacks %q", msg, s)
		}
	}()
	be.Binary(kernels.Add, tensor.Empty(tensor.F32, 2, 3), tensor.Empty(tensor.F32, 2, 3), tensor.Empty(tensor.F32, 4))
}

func TestMatMulShapePanic(t *testing.T) {
	defer func() {
		msg := recover().(string)
		for _, s := range []string{"MatMul", "[2 3]", "[4 5]", "[2 5]"} {
			require.Contains(t, msg, s)
		}
	}()
	be.MatMul(tensor.Empty(tensor.F32, 2, 5), tensor.Empty(tensor.F32, 2, 3), tensor.Empty(tensor.F32, 4, 5), false, false)
}

func TestCopyFill(t *testing.T) {
	dts := []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.F16, tensor.I32, tensor.I64, tensor.Bool}
	src := randT(1, tensor.F64, 3, 4, 5)
	for i, v := range src.F64() {
		src.F64()[i] = math.Round(v * 4) // small integers survive every dtype
	}
	for _, sd := range dts {
		s := src.Cast(sd)
		for _, dd := range dts {
			// Permuted source into a narrowed destination.
			big := tensor.Zeros(dd, 5, 6, 3)
			dst := big.Narrow(1, 1, 4)
			be.Copy(dst, s.Permute(2, 1, 0))
			want := s.Permute(2, 1, 0).Cast(dd).Float64s()
			closeTo(t, name("copy ", sd, "→", dd), dst.Float64s(), want, 0)
			// Untouched columns stay zero.
			for _, v := range big.Narrow(1, 0, 1).Float64s() {
				require.Zero(t, v)
			}
		}
	}
	// Different shapes, equal counts.
	a := randT(2, tensor.F32, 6, 4)
	b := tensor.Empty(tensor.F32, 3, 8)
	be.Copy(b, a)
	require.Equal(t, a.F32(), b.F32())
	for _, d := range dts {
		x := tensor.Empty(d, 7, 9)
		be.Fill(x.Narrow(1, 2, 3), 1)
		got := x.Float64s()
		for i, v := range got {
			c := i % 9
			want := 0.0
			if c >= 2 && c < 5 {
				want = 1
			}
			require.Equal(t, want, v, "fill %v at %d", d, i)
		}
	}
}
