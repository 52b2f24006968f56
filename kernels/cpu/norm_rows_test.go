package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// TestNormRows checks the batch-norm and ReLU row kernels (the AVX2
// assembly on amd64, the Go loops under purego) against float64
// references on every length from 0 to 41 (multiple-of-8 bodies and all
// tails), with ±0, NaN and ±Inf mixed into the data.
func TestNormRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	row := func(n int, specials bool) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64()*2 + 0.5)
			if specials && rng.IntN(6) == 0 {
				v[i] = special[rng.IntN(len(special))]
			}
		}
		return v
	}
	near := func(what string, n int, got, want float64) {
		t.Helper()
		require.InDelta(t, want, got, 1e-5*(1+math.Abs(want)), "%s, n=%d", what, n)
	}
	same := func(what string, n, i int, got, want float32) {
		t.Helper()
		if math.IsNaN(float64(want)) {
			require.True(t, math.IsNaN(float64(got)), "%s, n=%d, i=%d: got %v, want NaN", what, n, i, got)
			return
		}
		require.Equal(t, math.Float32bits(want), math.Float32bits(got), "%s, n=%d, i=%d: got %v, want %v", what, n, i, got, want)
	}
	for n := 0; n <= 41; n++ {
		x, g := row(n, false), row(n, false)
		mu := 0.3
		// The ReLU of the forward (x − mu)·1.3 − 0.4, which the backward
		// kernels recompute from x; the data keep away from its edge.
		relu := reluMask{on: true, a: 1.3, b: -0.4}
		y := make([]float32, n)
		rowAffineAct(y, x, mu, relu.a, relu.b, true)
		var s, sq, sg, sgd, sgm, sgdm float64
		for i := range x {
			s += float64(x[i])
			d := float64(x[i]) - mu
			sq += d * d
			sg += float64(g[i])
			sgd += float64(g[i]) * d
			if y[i] > 0 {
				sgm += float64(g[i])
				sgdm += float64(g[i]) * d
			}
		}
		near("sum", n, rowSum(x), s)
		near("sqdev", n, rowSqDev(x, mu), sq)
		a, b := rowGradSums(g, x, reluMask{}, mu)
		near("Σg", n, a, sg)
		near("Σg(x−mu)", n, b, sgd)
		a, b = rowGradSums(g, x, relu, mu)
		near("Σg masked", n, a, sgm)
		near("Σg(x−mu) masked", n, b, sgdm)

		// Affine (+ ReLU) and the batch-norm input gradient, within
		// float32 rounding of the float64 formula.
		out := make([]float32, n)
		for _, relu := range []bool{false, true} {
			rowAffineAct(out, x, mu, 1.7, -0.2, relu)
			for i, v := range x {
				want := (float64(v)-mu)*1.7 - 0.2
				if relu {
					want = math.Max(want, 0)
				}
				near("affine", n, float64(out[i]), want)
			}
		}
		for _, masked := range []bool{false, true} {
			m := reluMask{}
			if masked {
				m = relu
			}
			rowBnDx(out, g, x, m, mu, 0.9, -0.4, 0.05)
			for i := range g {
				gv := float64(g[i])
				if masked && !(y[i] > 0) {
					gv = 0
				}
				near("bn dx", n, float64(out[i]), 0.05+0.9*gv-0.4*(float64(x[i])-mu))
			}
		}

		// ReLU forward and backward exactly, special values included:
		// max(v, +0) keeps NaN and gives +0 for −0; the gradient passes
		// where x > 0 only, +0 elsewhere.
		xs, gs := row(n, true), row(n, true)
		rowAffineAct(out, xs, 0, 1, 0, true)
		for i, v := range xs {
			want := v
			if !(v > 0) && !math.IsNaN(float64(v)) {
				want = 0
			}
			same("relu", n, i, out[i], want)
		}
		rowReluBwd(out, gs, xs)
		for i := range gs {
			want := float32(0)
			if xs[i] > 0 {
				want = gs[i]
			}
			same("relu backward", n, i, out[i], want)
		}
	}
}

// TestBinaryRowsF32: float32 add, subtract, multiply and divide over rows
// of every length from 0 to 41, row by row and with either operand a
// scalar (the AVX2 kernel on amd64 and its Go tail), equal bit for bit to
// one IEEE operation per element, special values included.
func TestBinaryRowsF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), 1e-40}
	val := func() float32 {
		if rng.IntN(8) == 0 {
			return special[rng.IntN(len(special))]
		}
		return float32(rng.NormFloat64() * 3)
	}
	ref := func(op kernels.BinaryOp, x, y float32) float32 {
		switch op {
		case kernels.Add:
			return x + y
		case kernels.Sub:
			return x - y
		case kernels.Mul:
			return x * y
		}
		return x / y
	}
	for n := 0; n <= 41; n++ {
		a, b := make([]float32, n+3), make([]float32, n+3)
		for i := range a {
			a[i], b[i] = val(), val()
		}
		for _, op := range []kernels.BinaryOp{kernels.Add, kernels.Sub, kernels.Mul, kernels.Div} {
			for _, st := range [][2]int{{1, 1}, {1, 0}, {0, 1}} {
				d := make([]float32, n)
				binaryRow(op, d, a, 2, st[0], b, 1, st[1])
				for i := range d {
					want := ref(op, a[2+i*st[0]], b[1+i*st[1]])
					if want != want {
						require.True(t, d[i] != d[i], "op %v n=%d strides %v i=%d: got %v, want NaN", op, n, st, i, d[i])
						continue
					}
					require.Equal(t, math.Float32bits(want), math.Float32bits(d[i]), "op %v n=%d strides %v i=%d", op, n, st, i)
				}
			}
		}
	}
}

// TestBatchNormReluMaxPool: the fused batch norm, ReLU and 2×2 pool gives
// bitwise the pooled values, indices, statistics and running statistics
// of BatchNormRelu followed by MaxPool2d, in training and evaluation, on
// even and odd planes, in float32 (the fused kernel) and float64 (the
// two ops through a temporary).
func TestBatchNormReluMaxPool(t *testing.T) {
	pp := kernels.Pool2dParams{KernelH: 2, KernelW: 2}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
		for _, sh := range [][]int{{3, 4, 6, 8}, {2, 3, 7, 9}, {4, 8, 28, 28}} {
			for _, training := range []bool{true, false} {
				x := randT(1, dt, sh...)
				w, b := randT(2, dt, sh[1]), randT(3, dt, sh[1])
				ps := []int{sh[0], sh[1], sh[2] / 2, sh[3] / 2}
				run := func(fused bool) (pooled, idx, mean, rstd, rm, rv *tensor.Tensor) {
					rm, rv = randT(4, dt, sh[1]), tensor.Full(dt, 1.5, sh[1])
					mean, rstd = tensor.Empty(dt, sh[1]), tensor.Empty(dt, sh[1])
					pooled, idx = tensor.Empty(dt, ps...), tensor.Empty(tensor.I32, ps...)
					if fused {
						be.BatchNormReluMaxPool2x2(pooled, idx, mean, rstd, x, w, b, rm, rv, training, 0.1, 1e-5)
						return
					}
					y := tensor.Empty(dt, sh...)
					be.BatchNormRelu(y, mean, rstd, x, w, b, rm, rv, training, 0.1, 1e-5)
					be.MaxPool2d(pooled, idx, y, pp)
					return
				}
				gp, gi, gm, gr, grm, grv := run(true)
				wp, wi, wm, wr, wrm, wrv := run(false)
				for i, pair := range [][2]*tensor.Tensor{{gp, wp}, {gi, wi}, {gm, wm}, {gr, wr}, {grm, wrm}, {grv, wrv}} {
					require.Equal(t, vals(pair[1]), vals(pair[0]), "%v %v training=%v output %d", dt, sh, training, i)
				}
				// The backward from the pool's gradient, against the
				// pool's backward into a full-size dy and the batch norm's.
				g := randT(6, dt, ps...)
				back := func(fused bool) [3]*tensor.Tensor {
					dx, dw, db := tensor.Empty(dt, sh...), tensor.Empty(dt, sh[1]), tensor.Empty(dt, sh[1])
					if fused {
						be.BatchNormReluMaxPool2x2Backward(dx, dw, db, g, gi, x, b, gm, gr, w, training)
					} else {
						dy := tensor.Empty(dt, sh...)
						be.MaxPool2dBackward(dy, g, wi, pp)
						be.BatchNormReluBackward(dx, dw, db, dy, x, b, wm, wr, w, training)
					}
					return [3]*tensor.Tensor{dx, dw, db}
				}
				fb, wb := back(true), back(false)
				for i := range fb {
					require.Equal(t, vals(wb[i]), vals(fb[i]), "%v %v training=%v gradient %d", dt, sh, training, i)
				}
			}
		}
	}
}

// TestGroupNormRelu: the fused GroupNormRelu is GroupNorm followed by a
// ReLU within rounding (it normalises with the statistics rounded as they
// are saved), its statistics are GroupNorm's, every output it clamped is
// +0, and GroupNormReluBackward is bitwise GroupNormBackward of dy masked
// by the fused output (y > 0): the mask it rebuilds from x is the
// forward's. Float32 (the vector rows, with tails) and float64, with and
// without an affine map, on W4's seed shape and ragged ones.
func TestGroupNormRelu(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
		for _, c := range []struct{ n, ch, h, w, g int }{{8, 16, 14, 14, 4}, {3, 6, 5, 3, 2}, {2, 4, 9, 1, 4}} {
			for _, affine := range []bool{true, false} {
				sh := []int{c.n, c.ch, c.h, c.w}
				x := randT(1, dt, sh...)
				var w, b *tensor.Tensor
				if affine {
					w, b = randT(2, dt, c.ch), randT(3, dt, c.ch)
				}
				what := fmt.Sprintf("%v %v affine=%v", dt, sh, affine)
				y, mean, rstd := tensor.Empty(dt, sh...), tensor.Empty(dt, c.n*c.g), tensor.Empty(dt, c.n*c.g)
				be.GroupNormRelu(y, mean, rstd, x, w, b, c.g, 1e-5)
				yu, mu, ru := tensor.Empty(dt, sh...), tensor.Empty(dt, c.n*c.g), tensor.Empty(dt, c.n*c.g)
				be.GroupNorm(yu, mu, ru, x, w, b, c.g, 1e-5)
				be.Unary(kernels.Relu, yu, yu)
				require.Equal(t, vals(mu), vals(mean), "%s: statistics", what)
				require.Equal(t, vals(ru), vals(rstd), "%s: statistics", what)
				closeTo(t, what+": y", vals(y), vals(yu), 1e-6)
				clamped := 0
				for _, v := range vals(y) {
					if v <= 0 {
						require.True(t, v == 0 && !math.Signbit(v), "%s: a clamped output is +0, got %v", what, v)
						clamped++
					}
				}
				require.Greater(t, clamped, y.Numel()/4, "%s: the test needs clamped outputs", what)

				dy := randT(4, dt, sh...)
				dx, dw, db := tensor.Empty(dt, sh...), tensor.Empty(dt, c.ch), tensor.Empty(dt, c.ch)
				be.GroupNormReluBackward(dx, dw, db, dy, x, b, mean, rstd, w, c.g)
				masked := dy.Clone()
				mv := vals(y)
				for i, v := range mv {
					if !(v > 0) {
						masked.Set(0, tensorIndex(sh, i)...)
					}
				}
				wx, ww, wb := tensor.Empty(dt, sh...), tensor.Empty(dt, c.ch), tensor.Empty(dt, c.ch)
				be.GroupNormBackward(wx, ww, wb, masked, x, mean, rstd, w, c.g)
				require.Equal(t, vals(wx), vals(dx), "%s: dx", what)
				require.Equal(t, vals(ww), vals(dw), "%s: dw", what)
				require.Equal(t, vals(wb), vals(db), "%s: db", what)
			}
		}
	}
}

// tensorIndex is the multi-index of flat element i of a row-major shape.
func tensorIndex(shape []int, i int) []int {
	idx := make([]int, len(shape))
	for a := len(shape) - 1; a >= 0; a-- {
		idx[a] = i % shape[a]
		i /= shape[a]
	}
	return idx
}
