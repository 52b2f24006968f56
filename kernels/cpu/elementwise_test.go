package cpu

import (
	"math"
	"strings"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

func refUnary(op kernels.UnaryOp, v float64) float64 {
	switch op {
	case kernels.Neg:
		return -v
	case kernels.Abs:
		return math.Abs(v)
	case kernels.Exp:
		return math.Exp(v)
	case kernels.Log:
		return math.Log(v)
	case kernels.Sqrt:
		return math.Sqrt(v)
	case kernels.Rsqrt:
		return 1 / math.Sqrt(v)
	case kernels.Square:
		return v * v
	case kernels.Recip:
		return 1 / v
	case kernels.Sign:
		if v > 0 {
			return 1
		} else if v < 0 {
			return -1
		}
		return 0
	case kernels.Relu:
		return math.Max(v, 0)
	case kernels.GeluTanh:
		return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
	case kernels.GeluErf:
		return 0.5 * v * (1 + math.Erf(v/math.Sqrt2))
	case kernels.Silu:
		return v / (1 + math.Exp(-v))
	case kernels.Sigmoid:
		return 1 / (1 + math.Exp(-v))
	case kernels.Tanh:
		return math.Tanh(v)
	case kernels.Softplus:
		if v > 20 {
			return v
		}
		return math.Log(1 + math.Exp(v))
	}
	panic("op")
}

// positiveOnly ops get inputs in [0.2, ...).
func positiveOnly(op kernels.UnaryOp) bool {
	return op == kernels.Log || op == kernels.Sqrt || op == kernels.Rsqrt || op == kernels.Recip
}

func unaryInput(op kernels.UnaryOp, d tensor.DType, seed uint64, shape ...int) *T {
	x := randT(seed, tensor.F64, shape...)
	v := x.F64()
	for i := range v {
		if positiveOnly(op) {
			v[i] = math.Abs(v[i]) + 0.2
		}
		v[i] *= 2
	}
	v[0] = 25 // softplus threshold and saturation
	if positiveOnly(op) {
		v[0] = 3
	}
	return x.Cast(d)
}

func TestUnary(t *testing.T) {
	for _, op := range kernels.UnaryOps() {
		for _, d := range floatTypes {
			for _, shape := range [][]int{{1}, {7, 3}, {70001}} {
				x := unaryInput(op, d, uint64(op), shape...)
				y := tensor.Empty(d, shape...)
				be.Unary(op, y, x)
				xv := vals(x)
				want := make([]float64, len(xv))
				for i, v := range xv {
					want[i] = refUnary(op, v)
				}
				closeTo(t, name(op, d, shape), vals(y), want, tol(d))
			}
		}
	}
	// In place.
	x := randT(3, tensor.F32, 10)
	want := vals(x)
	for i := range want {
		want[i] = math.Tanh(want[i])
	}
	be.Unary(kernels.Tanh, x, x)
	closeTo(t, "in place", vals(x), want, 1e-6)
}

func TestUnaryBackward(t *testing.T) {
	const h = 1e-5
	for _, op := range kernels.UnaryOps() {
		for _, d := range floatTypes {
			x := unaryInput(op, d, 10+uint64(op), 5, 33)
			dy := randT(99, d, 5, 33)
			y := tensor.Empty(d, 5, 33)
			be.Unary(op, y, x)
			xv, gv := vals(x), vals(dy)
			want := make([]float64, len(xv))
			for i, v := range xv {
				if op != kernels.Sign {
					want[i] = gv[i] * (refUnary(op, v+h) - refUnary(op, v-h)) / (2 * h)
				}
			}
			rt := max(tol(d), 1e-6)
			for _, withY := range []*T{nil, y} {
				dx := tensor.Empty(d, 5, 33)
				be.UnaryBackward(op, dx, x, withY, dy)
				closeTo(t, name(op, d, withY != nil), vals(dx), want, rt)
			}
		}
	}
}

var binaryShapes = []struct{ dst, a, b []int }{
	{[]int{2, 3}, []int{2, 3}, []int{2, 3}},
	{[]int{2, 3}, []int{2, 3}, []int{3}},
	{[]int{4, 3, 5}, []int{4, 1, 5}, []int{3, 1}},
	{[]int{2, 3}, []int{1}, []int{2, 3}},
	{[]int{1, 1}, []int{1, 1}, []int{1}},
	{[]int{7, 1, 9}, []int{7, 1, 9}, []int{9}},
	{[]int{300, 257}, []int{300, 257}, []int{300, 1}},
	{[]int{3, 40000}, []int{40000}, []int{3, 40000}},
}

func refBinary(op kernels.BinaryOp, x, y float64) float64 {
	b := func(c bool) float64 {
		if c {
			return 1
		}
		return 0
	}
	switch op {
	case kernels.Add:
		return x + y
	case kernels.Sub:
		return x - y
	case kernels.Mul:
		return x * y
	case kernels.Div:
		return x / y
	case kernels.Pow:
		return math.Pow(x, y)
	case kernels.Maximum:
		return math.Max(x, y)
	case kernels.Minimum:
		return math.Min(x, y)
	case kernels.Eq:
		return b(x == y)
	case kernels.Ne:
		return b(x != y)
	case kernels.Lt:
		return b(x < y)
	case kernels.Le:
		return b(x <= y)
	case kernels.Gt:
		return b(x > y)
	case kernels.Ge:
		return b(x >= y)
	}
	panic("op")
}

func binaryInputs(op kernels.BinaryOp, d tensor.DType, seed uint64, as, bs []int) (*T, *T) {
	a := randT(seed, tensor.F64, as...)
	b := randT(seed+1, tensor.F64, bs...)
	if op == kernels.Pow {
		for i, v := range a.F64() {
			a.F64()[i] = math.Abs(v) + 0.1
		}
	}
	if op.IsComparison() && len(bs) == len(as) {
		copy(b.F64()[:1], a.F64()[:1]) // make some equal
	}
	return a.Cast(d), b.Cast(d)
}

func TestBinary(t *testing.T) {
	for _, op := range kernels.BinaryOps() {
		for _, d := range floatTypes {
			for si, sh := range binaryShapes {
				a, b := binaryInputs(op, d, uint64(si), sh.a, sh.b)
				dd := d
				if op.IsComparison() {
					dd = tensor.Bool
				}
				dst := tensor.Empty(dd, sh.dst...)
				be.Binary(op, dst, a, b)
				av, bv := a.Expand(sh.dst...).Float64s(), b.Expand(sh.dst...).Float64s()
				want := make([]float64, len(av))
				for i := range av {
					want[i] = refBinary(op, av[i], bv[i])
				}
				closeTo(t, name(op, d, sh), vals(dst), want, tol(d))

				// Scalar forms.
				for _, swap := range []bool{false, true} {
					be.BinaryScalar(op, dst.Narrow(0, 0, dst.Shape()[0]), a.Expand(sh.dst...).Contiguous(), 1.5, swap)
					for i := range av {
						if swap {
							want[i] = refBinary(op, 1.5, av[i])
						} else {
							want[i] = refBinary(op, av[i], 1.5)
						}
					}
					closeTo(t, name(op, d, sh, "scalar", swap), vals(dst), want, tol(d))
				}
			}
		}
	}
}

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

func TestWhereClamp(t *testing.T) {
	for _, d := range floatTypes {
		cond := tensor.Empty(tensor.Bool, 4, 1, 6)
		for i := range cond.Bools() {
			cond.Bools()[i] = i%3 == 0
		}
		a := randT(1, d, 5, 6)
		b := randT(2, d, 1)
		dst := tensor.Empty(d, 4, 5, 6)
		be.Where(dst, cond, a, b)
		cv, av, bv := cond.Expand(4, 5, 6).Float64s(), a.Expand(4, 5, 6).Float64s(), b.Expand(4, 5, 6).Float64s()
		want := make([]float64, len(cv))
		for i := range cv {
			want[i] = bv[i]
			if cv[i] != 0 {
				want[i] = av[i]
			}
		}
		closeTo(t, name("where ", d), vals(dst), want, 0)

		x := randT(3, d, 3, 11)
		y := tensor.Empty(d, 3, 11)
		be.Clamp(y, x, -0.5, 0.7)
		xv := vals(x)
		for i := range xv {
			xv[i] = math.Min(math.Max(xv[i], -0.5), 0.7)
		}
		closeTo(t, name("clamp ", d), vals(y), xv, tol(d))
	}
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
