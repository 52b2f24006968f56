package cpu

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"

	"github.com/stretchr/testify/require"
)

func refConv(x, w, b []float64, n, cin, h, wd, cout, kh, kw int, p kernels.Conv2dParams) ([]float64, int, int) {
	p = p.Norm()
	ho := kernels.ConvOut(h, kh, p.StrideH, p.PadH, p.DilationH)
	wo := kernels.ConvOut(wd, kw, p.StrideW, p.PadW, p.DilationW)
	cg, og := cin/p.Groups, cout/p.Groups
	y := make([]float64, n*cout*ho*wo)
	for i := 0; i < n; i++ {
		for o := 0; o < cout; o++ {
			g := o / og
			for oh := 0; oh < ho; oh++ {
				for ow := 0; ow < wo; ow++ {
					s := 0.0
					if b != nil {
						s = b[o]
					}
					for c := 0; c < cg; c++ {
						for a := 0; a < kh; a++ {
							for e := 0; e < kw; e++ {
								ih := oh*p.StrideH - p.PadH + a*p.DilationH
								iw := ow*p.StrideW - p.PadW + e*p.DilationW
								if ih < 0 || ih >= h || iw < 0 || iw >= wd {
									continue
								}
								s += x[((i*cin+g*cg+c)*h+ih)*wd+iw] * w[((o*cg+c)*kh+a)*kw+e]
							}
						}
					}
					y[((i*cout+o)*ho+oh)*wo+ow] = s
				}
			}
		}
	}
	return y, ho, wo
}

type convCase struct {
	n, cin, h, w, cout, kh, kw int
	p                          kernels.Conv2dParams
}

var convCases = []convCase{
	{2, 3, 7, 6, 4, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},
	{2, 2, 7, 6, 3, 3, 3, kernels.Conv2dParams{StrideH: 2, StrideW: 2}},
	{2, 2, 7, 6, 2, 3, 3, kernels.Conv2dParams{PadH: 2, PadW: 2, DilationH: 2, DilationW: 2}},
	{2, 4, 7, 6, 6, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1, Groups: 2}},
	{2, 4, 7, 6, 4, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1, Groups: 4}},
	{2, 2, 7, 6, 3, 2, 3, kernels.Conv2dParams{StrideH: 2, PadH: 1}},
	{3, 5, 4, 3, 2, 1, 1, kernels.Conv2dParams{}},
	{1, 1, 1, 1, 1, 1, 1, kernels.Conv2dParams{}},
	// Fewer patch rows than output channels: transposed weight partials.
	{2, 1, 7, 6, 16, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},
	{2, 2, 6, 5, 32, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1, Groups: 2}},
	// Same-width planes (shifted whole-plane im2col/col2im): padding on
	// the width only, and a kernel wider than the plane.
	{2, 2, 5, 4, 3, 3, 3, kernels.Conv2dParams{PadW: 1}},
	{2, 3, 4, 2, 2, 3, 5, kernels.Conv2dParams{PadH: 1, PadW: 2}},
}

func TestConv2d(t *testing.T) {
	for ci, c := range convCases {
		for _, d := range floatTypes {
			g := max(c.p.Groups, 1)
			x := randT(uint64(ci), d, c.n, c.cin, c.h, c.w)
			w := randT(uint64(ci+10), d, c.cout, c.cin/g, c.kh, c.kw)
			b := randT(uint64(ci+20), d, c.cout)
			want, ho, wo := refConv(vals(x), vals(w), vals(b), c.n, c.cin, c.h, c.w, c.cout, c.kh, c.kw, c.p)
			y := tensor.Empty(d, c.n, c.cout, ho, wo)
			be.Conv2d(y, x, w, b, c.p)
			closeTo(t, name("conv ", ci, d), vals(y), want, tol(d))

			dy := randT(uint64(ci+30), d, c.n, c.cout, ho, wo)
			dx := tensor.Empty(d, c.n, c.cin, c.h, c.w)
			dw := tensor.Empty(d, c.cout, c.cin/g, c.kh, c.kw)
			be.Conv2dBackwardInput(dx, dy, w, c.p)
			be.Conv2dBackwardWeight(dw, x, dy, c.p)
			x64, w64 := asF64(x), asF64(w)
			f := func() []float64 {
				y, _, _ := refConv(x64.F64(), w64.F64(), nil, c.n, c.cin, c.h, c.w, c.cout, c.kh, c.kw, c.p)
				return y
			}
			rt := max(tol(d), 1e-7)
			closeTo(t, name("conv dx ", ci, d), vals(dx), numGrad(x64, vals(dy), f), rt)
			closeTo(t, name("conv dw ", ci, d), vals(dw), numGrad(w64, vals(dy), f), rt)
		}
	}
	// BF16 operands into an F32 output.
	x := randT(1, tensor.BF16, 2, 3, 5, 5)
	w := randT(2, tensor.BF16, 4, 3, 3, 3)
	y := tensor.Empty(tensor.F32, 2, 4, 3, 3)
	be.Conv2d(y, x, w, nil, kernels.Conv2dParams{})
	want, _, _ := refConv(vals(x), vals(w), nil, 2, 3, 5, 5, 4, 3, 3, kernels.Conv2dParams{})
	closeTo(t, "conv bf16→f32", vals(y), want, 1e-6)
}

func TestConv2dBackwardWeightDeterministic(t *testing.T) {
	p := kernels.Conv2dParams{PadH: 1, PadW: 1}
	x := randT(1, tensor.F32, 37, 3, 20, 20)
	dy := randT(2, tensor.F32, 37, 8, 20, 20)
	run := func(procs int) []float64 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		dw := tensor.Empty(tensor.F32, 8, 3, 3, 3)
		be.Conv2dBackwardWeight(dw, x, dy, p)
		return vals(dw)
	}
	same(t, "conv dw", run(1), run(2))
}

// BenchmarkConv2d is the W-class first layer: batch 128 of 1×28×28 into
// 32 channels, 3×3, padding 1.
// BenchmarkConv2d times the three passes on the convolutions of PERF.md's
// W5 host (batch 128, 3×3, padding 1): l1 1→32 at 28×28 (the benchmark
// of earlier baselines), l2 32→64 at 14×14 and l3 64→128 at 7×7, with
// the default sample blocks and with one sample per block (the layout
// before blocking).
func BenchmarkConv2d(b *testing.B) {
	defer func(c int) { convCols = c }(convCols)
	p := kernels.Conv2dParams{PadH: 1, PadW: 1}
	for _, l := range []struct {
		name          string
		cin, cout, hw int
	}{{"l1", 1, 32, 28}, {"l2", 32, 64, 14}, {"l3", 64, 128, 7}} {
		x := randT(1, tensor.F32, 128, l.cin, l.hw, l.hw)
		w := randT(2, tensor.F32, l.cout, l.cin, 3, 3)
		bias := randT(3, tensor.F32, l.cout)
		y := tensor.Empty(tensor.F32, 128, l.cout, l.hw, l.hw)
		dx := tensor.Empty(tensor.F32, 128, l.cin, l.hw, l.hw)
		dw := tensor.Empty(tensor.F32, l.cout, l.cin, 3, 3)
		flops := 2.0 * 128 * float64(l.cout*l.hw*l.hw*l.cin*9)
		for _, blocks := range []struct {
			name string
			cols int
		}{{"blocked", convCols}, {"per-sample", 1}} {
			run := func(pass string, f func()) {
				b.Run(l.name+"/"+blocks.name+"/"+pass, func(b *testing.B) {
					convCols = blocks.cols
					b.ReportAllocs()
					for i := 0; i < b.N; i++ {
						f()
					}
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
			run("forward", func() { be.Conv2d(y, x, w, bias, p) })
			run("backward_input", func() { be.Conv2dBackwardInput(dx, y, w, p) })
			run("backward_weight", func() { be.Conv2dBackwardWeight(dw, x, y, p) })
		}
	}
}

// TestConvSampleBlocks: every convCases geometry gives the same results,
// within float32 rounding, with one sample per block, two (a ragged last
// block for odd batches), and the default blocks. (Not bitwise: the width
// of a block's GEMM decides between the unpacked small-product loops and
// the FMA micro-kernels, and the weight gradient's reduction order.)
func TestConvSampleBlocks(t *testing.T) {
	defer func(c int) { convCols = c }(convCols)
	for ci, c := range convCases {
		g := max(c.p.Groups, 1)
		n := c.n + 3 // at least 4 samples: several blocks
		x := randT(uint64(ci), tensor.F32, n, c.cin, c.h, c.w)
		w := randT(uint64(ci+10), tensor.F32, c.cout, c.cin/g, c.kh, c.kw)
		b := randT(uint64(ci+20), tensor.F32, c.cout)
		pn := c.p.Norm()
		ho := kernels.ConvOut(c.h, c.kh, pn.StrideH, pn.PadH, pn.DilationH)
		wo := kernels.ConvOut(c.w, c.kw, pn.StrideW, pn.PadW, pn.DilationW)
		dy := randT(uint64(ci+30), tensor.F32, n, c.cout, ho, wo)
		run := func(cols int) [3][]float64 {
			convCols = cols
			y := tensor.Empty(tensor.F32, n, c.cout, ho, wo)
			dx := tensor.Empty(tensor.F32, n, c.cin, c.h, c.w)
			dw := tensor.Empty(tensor.F32, c.cout, c.cin/g, c.kh, c.kw)
			be.Conv2d(y, x, w, b, c.p)
			be.Conv2dBackwardInput(dx, dy, w, c.p)
			be.Conv2dBackwardWeight(dw, x, dy, c.p)
			return [3][]float64{vals(y), vals(dx), vals(dw)}
		}
		one := run(1)
		for _, cols := range []int{2*ho*wo + 1, 2048} {
			got := run(cols)
			closeTo(t, name("conv blocks y ", ci, cols), got[0], one[0], 1e-5)
			closeTo(t, name("conv blocks dx ", ci, cols), got[1], one[1], 1e-5)
			closeTo(t, name("conv blocks dw ", ci, cols), got[2], one[2], 1e-5)
		}
	}
}

// TestMaxPool2x2TiesAndNaN: the 2×2/2 fast path keeps the general rule:
// the first maximum in scan order wins ties, and the first NaN wins.
func TestMaxPool2x2TiesAndNaN(t *testing.T) {
	nan := float32(math.NaN())
	// One plane of 2×6: windows [1 1; 0 1], [2 nan; nan 5], [3 0; 3 3].
	x := tensor.FromSlice([]float32{
		1, 1, 2, nan, 3, 0,
		0, 1, nan, 5, 3, 3,
	}, 1, 1, 2, 6)
	y := tensor.Empty(tensor.F32, 1, 1, 1, 3)
	idx := tensor.Empty(tensor.I64, 1, 1, 1, 3)
	be.MaxPool2d(y, idx, x, kernels.Pool2dParams{KernelH: 2, KernelW: 2})
	got := y.F32()
	if got[0] != 1 || !math.IsNaN(float64(got[1])) || got[2] != 3 {
		t.Fatalf("pooled %v", got)
	}
	if want := []int64{0, 3, 4}; !slices.Equal(idx.I64(), want) {
		t.Fatalf("argmax %v, want %v", idx.I64(), want)
	}
}

// TestConv2dAffineAct: the folded per-channel affine map and activation
// equal Conv2d followed by a broadcast multiply, add and the activation,
// for single-sample and blocked batches, groups, both widths; bad scale
// shapes and unknown activations panic.
func TestConv2dAffineAct(t *testing.T) {
	for _, d := range []tensor.DType{tensor.F32, tensor.F64} {
		for _, c := range []struct {
			x, w []int
			p    kernels.Conv2dParams
		}{
			{[]int{1, 3, 9, 9}, []int{8, 3, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1}},
			{[]int{40, 4, 7, 7}, []int{6, 2, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1, Groups: 2}},
			{[]int{5, 2, 6, 6}, []int{4, 2, 1, 1}, kernels.Conv2dParams{}},
		} {
			x, w := randT(1, d, c.x...), randT(2, d, c.w...)
			cout := c.w[0]
			scale, shift := randT(3, d, cout), randT(4, d, cout)
			ho := kernels.ConvOut(c.x[2], c.w[2], 1, c.p.PadH, 1)
			wo := kernels.ConvOut(c.x[3], c.w[3], 1, c.p.PadW, 1)
			for _, act := range []kernels.UnaryOp{kernels.Relu, kernels.Tanh} {
				want := tensor.Empty(d, c.x[0], cout, ho, wo)
				be.Conv2d(want, x, w, nil, c.p)
				be.Binary(kernels.Mul, want, want, scale.Reshape(1, cout, 1, 1))
				be.Binary(kernels.Add, want, want, shift.Reshape(1, cout, 1, 1))
				be.Unary(act, want, want)
				got := tensor.Empty(d, c.x[0], cout, ho, wo)
				be.Conv2dAffineAct(got, x, w, scale, shift, act, c.p)
				closeTo(t, name("conv affine act ", d, c.x), vals(got), vals(want), 1e-6)
			}
		}
	}
	x, w := randT(1, tensor.F32, 1, 1, 4, 4), randT(2, tensor.F32, 2, 1, 3, 3)
	dst := tensor.Empty(tensor.F32, 1, 2, 2, 2)
	require.Panics(t, func() {
		be.Conv2dAffineAct(dst, x, w, randT(3, tensor.F32, 3), randT(4, tensor.F32, 2), kernels.Relu, kernels.Conv2dParams{})
	})
	require.Panics(t, func() {
		be.Conv2dAffineAct(dst, x, w, randT(3, tensor.F32, 2), randT(4, tensor.F32, 2), kernels.UnaryOp(99), kernels.Conv2dParams{})
	})
}

// TestMaxPool2x2Rows checks the 2×2/2 max pool (the AVX-512 row kernel
// on amd64, the Go loop under purego) on planes from 1 to 37 outputs
// wide (full 16-output blocks and every tail), odd input sizes, values
// drawn from a small set (ties) with NaN and ±0 mixed in: the maximum
// with its own sign of zero, the first in scan order among ties, the
// first NaN of a window, and the argmax, into int32, int64 and no index.
func TestMaxPool2x2Rows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	nan := float32(math.NaN())
	pool := []float32{-2, -1, float32(math.Copysign(0, -1)), 0, 1, 2, nan}
	p := kernels.Pool2dParams{KernelH: 2, KernelW: 2}
	for wo := 1; wo <= 37; wo++ {
		h, w := 5, 2*wo+wo%2 // an odd width drops the last column
		x := make([]float32, 2*h*w)
		for i := range x {
			x[i] = pool[rng.IntN(len(pool))]
		}
		ho := h / 2
		want := make([]float32, 2*ho*wo)
		wantIdx := make([]int64, len(want))
		for pl := 0; pl < 2; pl++ {
			for oh := 0; oh < ho; oh++ {
				for ow := 0; ow < wo; ow++ {
					best, bi := float32(0), -1
					for _, off := range []int{0, 1, w, w + 1} {
						i := 2*oh*w + 2*ow + off
						v := x[pl*h*w+i]
						if bi < 0 || v > best || (v != v && best == best) {
							best, bi = v, i
						}
					}
					o := (pl*ho+oh)*wo + ow
					want[o], wantIdx[o] = best, int64(bi)
				}
			}
		}
		xt := tensor.FromSlice(x, 1, 2, h, w)
		for _, id := range []tensor.DType{tensor.I32, tensor.I64, tensor.Bool} {
			y := tensor.Empty(tensor.F32, 1, 2, ho, wo)
			var idx *tensor.Tensor
			if id != tensor.Bool {
				idx = tensor.Empty(id, 1, 2, ho, wo)
			}
			be.MaxPool2d(y, idx, xt, p)
			for o, v := range y.F32() {
				if want[o] != want[o] {
					require.True(t, v != v, "wo=%d %v: output %d is %v, want NaN", wo, id, o, v)
				} else {
					require.Equal(t, math.Float32bits(want[o]), math.Float32bits(v), "wo=%d %v: output %d", wo, id, o)
				}
				switch id {
				case tensor.I32:
					require.Equal(t, wantIdx[o], int64(idx.I32()[o]), "wo=%d: argmax %d", wo, o)
				case tensor.I64:
					require.Equal(t, wantIdx[o], idx.I64()[o], "wo=%d: argmax %d", wo, o)
				}
			}
		}
	}
}

// TestConvDirect: the direct stride-1 kernel (zero-padded planes read in
// place, no patch matrix) agrees with the im2col route on geometries
// that take it — padding on one or both sides, dilation, groups, a 5×3
// kernel, more than one kc block (kdim > 512), ragged 12-row and
// 32-column tiles — for the plain forward with bias and for the folded
// affine map with ReLU. It also checks that the direct route was taken.
func TestConvDirect(t *testing.T) {
	if !dconvAsm {
		t.Skip("this build has no direct-convolution kernel (AVX-512 assembly)")
	}
	defer func(v bool) { convDirect = v }(convDirect)
	cases := []convCase{
		{3, 8, 9, 7, 20, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},
		{2, 6, 8, 9, 12, 3, 3, kernels.Conv2dParams{PadH: 2, PadW: 2, DilationH: 2, DilationW: 2}},
		{2, 16, 16, 12, 16, 3, 3, kernels.Conv2dParams{PadW: 1, Groups: 2}},
		{2, 5, 11, 9, 13, 5, 3, kernels.Conv2dParams{PadH: 2}},
		{2, 64, 7, 7, 24, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},  // kdim 576: two kc blocks
		{4, 1, 28, 28, 8, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},  // 8 channels: 8-row tiles
		{3, 8, 14, 14, 16, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}}, // 16 channels: two 8-row tiles
		{2, 16, 7, 7, 32, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},  // 32 channels: 12-row tiles
		{3, 8, 28, 28, 8, 1, 1, kernels.Conv2dParams{}},                  // 1×1 (a seed's bottleneck)
		{2, 12, 14, 13, 16, 1, 1, kernels.Conv2dParams{PadH: 1}},         // 1×1, padded
	}
	bwdDirect := 0
	for ci, c := range cases {
		g := max(c.p.Groups, 1)
		x := randT(uint64(ci), tensor.F32, c.n, c.cin, c.h, c.w)
		w := randT(uint64(ci+10), tensor.F32, c.cout, c.cin/g, c.kh, c.kw)
		b := randT(uint64(ci+20), tensor.F32, c.cout)
		sc := randT(uint64(ci+30), tensor.F32, c.cout)
		xs, ws := x.Shape(), w.Shape()
		geom := checkConv("test", x, w, tensor.Empty(tensor.F32, c.n, c.cout,
			kernels.ConvOut(xs[2], ws[2], 1, c.p.Norm().PadH, c.p.Norm().DilationH),
			kernels.ConvOut(xs[3], ws[3], 1, c.p.Norm().PadW, c.p.Norm().DilationW)), c.p)
		convDirect = true
		require.True(t, useDconv[float32](&geom), "case %d should take the direct kernel", ci)
		run := func(direct bool) (y, z []float64) {
			convDirect = direct
			yt := tensor.Empty(tensor.F32, c.n, c.cout, geom.ho, geom.wo)
			zt := tensor.Empty(tensor.F32, c.n, c.cout, geom.ho, geom.wo)
			be.Conv2d(yt, x, w, b, c.p)
			be.Conv2dAffineAct(zt, x, w, sc, b, kernels.Relu, c.p)
			return vals(yt), vals(zt)
		}
		wantY, wantZ := run(false)
		gotY, gotZ := run(true)
		closeTo(t, name("direct conv ", ci, tensor.F32), gotY, wantY, 1e-5)
		closeTo(t, name("direct conv affine relu ", ci, tensor.F32), gotZ, wantZ, 1e-5)
		ref, _, _ := refConv(vals(x), vals(w), vals(b), c.n, c.cin, c.h, c.w, c.cout, c.kh, c.kw, c.p)
		closeTo(t, name("direct conv vs reference ", ci, tensor.F32), gotY, ref, 1e-4)

		// The input gradient, as the forward of the transposed geometry,
		// where that geometry qualifies (enough input channels per group).
		tg, ok := transposedGeom(&geom)
		if !ok || !useDconv[float32](&tg) {
			continue
		}
		dy := randT(uint64(ci+40), tensor.F32, c.n, c.cout, geom.ho, geom.wo)
		grad := func(direct bool) []float64 {
			convDirect = direct
			dx := tensor.Empty(tensor.F32, c.n, c.cin, c.h, c.w)
			be.Conv2dBackwardInput(dx, dy, w, c.p)
			return vals(dx)
		}
		closeTo(t, name("direct conv dx ", ci, tensor.F32), grad(true), grad(false), 1e-5)
		bwdDirect++
	}
	require.GreaterOrEqual(t, bwdDirect, 3, "input gradients through the direct kernel")
}

// TestConvWeightGradDots: the weight gradient as dot products (small
// [og, kdim], the default for every convCases geometry) agrees with the
// packed-GEMM route (forced by convDotMax = 0), both orientations of it
// included, in float32.
func TestConvWeightGradDots(t *testing.T) {
	defer func(v int) { convDotMax = v }(convDotMax)
	defer func(v bool) { convDirect = v }(convDirect)
	convDirect = false // the im2col route (stride 1 takes dwgrad otherwise)
	cases := append([]convCase{
		// Planes of 256 pixels or more: dot products sample by sample.
		{3, 2, 17, 16, 8, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},
		{2, 4, 20, 14, 6, 3, 3, kernels.Conv2dParams{PadW: 1, Groups: 2}},
	}, convCases...)
	for ci, c := range cases {
		g := max(c.p.Groups, 1)
		n := c.n + 5
		x := randT(uint64(ci), tensor.F32, n, c.cin, c.h, c.w)
		pn := c.p.Norm()
		ho := kernels.ConvOut(c.h, c.kh, pn.StrideH, pn.PadH, pn.DilationH)
		wo := kernels.ConvOut(c.w, c.kw, pn.StrideW, pn.PadW, pn.DilationW)
		dy := randT(uint64(ci+30), tensor.F32, n, c.cout, ho, wo)
		run := func(max int) []float64 {
			convDotMax = max
			dw := tensor.Empty(tensor.F32, c.cout, c.cin/g, c.kh, c.kw)
			be.Conv2dBackwardWeight(dw, x, dy, c.p)
			return vals(dw)
		}
		closeTo(t, name("conv dw dots vs gemm ", ci, tensor.F32), run(1<<30), run(0), 1e-5)
	}
}

// TestConvWeightGradDirect: the direct weight gradient (conv_dwgrad.go, every
// stride-1 float32 convolution with a kernel larger than 1×1) agrees with
// the im2col route and with the float64 gradient, on the stride-1
// convCases, W4's layers (1→8 at 28×28, 8→16 at 14×14, 16→32 at 7×7),
// channel and patch counts that are not multiples of 4, groups, dilation
// and a batch that does not divide into the kernel's sample blocks.
func TestConvWeightGradDirect(t *testing.T) {
	if !tinyAsm {
		t.Skip("this build has no direct weight-gradient kernel (AVX-512 assembly)")
	}
	defer func(v bool) { convDirect = v }(convDirect)
	cases := append([]convCase{
		{37, 1, 28, 28, 8, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},
		{19, 8, 14, 14, 16, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},
		{11, 16, 7, 7, 32, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},
		{5, 3, 9, 11, 5, 3, 3, kernels.Conv2dParams{PadH: 1}},
		{3, 6, 8, 9, 6, 5, 3, kernels.Conv2dParams{PadH: 2, PadW: 2, DilationH: 2, Groups: 3}},
	}, convCases...)
	direct := 0
	for ci, c := range cases {
		g := max(c.p.Groups, 1)
		x := randT(uint64(ci+50), tensor.F32, c.n, c.cin, c.h, c.w)
		w := tensor.Empty(tensor.F32, c.cout, c.cin/g, c.kh, c.kw)
		pn := c.p.Norm()
		ho := kernels.ConvOut(c.h, c.kh, pn.StrideH, pn.PadH, pn.DilationH)
		wo := kernels.ConvOut(c.w, c.kw, pn.StrideW, pn.PadW, pn.DilationW)
		dy := randT(uint64(ci+60), tensor.F32, c.n, c.cout, ho, wo)
		geom := checkConv("test", x, w, dy, c.p)
		convDirect = true
		if !useDwgrad[float32](&geom) {
			continue
		}
		direct++
		run := func(on bool) []float64 {
			convDirect = on
			dw := tensor.Empty(tensor.F32, c.cout, c.cin/g, c.kh, c.kw)
			be.Conv2dBackwardWeight(dw, x, dy, c.p)
			return vals(dw)
		}
		got := run(true)
		closeTo(t, name("direct dw vs im2col ", ci, tensor.F32), got, run(false), 1e-5)
		dw64 := tensor.Empty(tensor.F64, c.cout, c.cin/g, c.kh, c.kw)
		be.Conv2dBackwardWeight(dw64, x.Cast(tensor.F64), dy.Cast(tensor.F64), c.p)
		closeTo(t, name("direct dw vs float64 ", ci, tensor.F32), got, vals(dw64), 1e-4)
	}
	require.GreaterOrEqual(t, direct, 10, "weight gradients through the direct kernel")
}

// TestMaxPool2x2Backward: the 2×2/2 backward with int32 indices (the
// AVX-512 kernel writing each input-gradient plane once) equals a plain
// scatter into a zeroed gradient, for widths and heights odd and even
// (the column and row the windows leave out stay zero) and stale values
// in dx beforehand; indices that leave their windows (not this pool's
// forward) take the scatter path and still come out right.
func TestMaxPool2x2Backward(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	p := kernels.Pool2dParams{KernelH: 2, KernelW: 2}
	for _, h := range []int{2, 5, 8} {
		for w := 2; w <= 40; w++ {
			x := randT(uint64(h*100+w), tensor.F32, 2, 3, h, w)
			ho, wo := h/2, w/2
			y := tensor.Empty(tensor.F32, 2, 3, ho, wo)
			idx := tensor.Empty(tensor.I32, 2, 3, ho, wo)
			be.MaxPool2d(y, idx, x, p)
			dy := randT(uint64(w), tensor.F32, 2, 3, ho, wo)
			for _, scramble := range []bool{false, true} {
				if scramble { // an index outside its window
					idx.I32()[rng.IntN(idx.Numel())] = int32(h*w - 1)
				}
				want := make([]float32, 2*3*h*w)
				for o, g := range dy.F32() {
					pl := o / (ho * wo)
					want[pl*h*w+int(idx.I32()[o])] += g
				}
				dx := tensor.Full(tensor.F32, 7, 2, 3, h, w) // stale values
				be.MaxPool2dBackward(dx, dy, idx, p)
				require.Equal(t, want, dx.F32(), "h=%d w=%d scrambled=%v", h, w, scramble)
			}
		}
	}
}

// TestConvAffineActMaxPool: the convolution with its affine map,
// activation and 2×2 pool in the direct kernel's epilogue gives bitwise
// Conv2dAffineAct followed by MaxPool2d, on even and odd output planes,
// with ReLU and with another activation; a convolution off the direct
// kernel takes the two ops.
func TestConvAffineActMaxPool(t *testing.T) {
	pp := kernels.Pool2dParams{KernelH: 2, KernelW: 2}
	for ci, c := range []convCase{
		{3, 8, 14, 14, 16, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},
		{2, 1, 28, 28, 8, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},
		{2, 16, 7, 7, 32, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}},
		{2, 3, 9, 11, 4, 3, 3, kernels.Conv2dParams{PadH: 1, PadW: 1}}, // 4 channels: im2col
	} {
		x := randT(uint64(ci), tensor.F32, c.n, c.cin, c.h, c.w)
		w := randT(uint64(ci+1), tensor.F32, c.cout, c.cin, c.kh, c.kw)
		sc, sh := randT(uint64(ci+2), tensor.F32, c.cout), randT(uint64(ci+3), tensor.F32, c.cout)
		pn := c.p.Norm()
		ho := kernels.ConvOut(c.h, c.kh, 1, pn.PadH, 1)
		wo := kernels.ConvOut(c.w, c.kw, 1, pn.PadW, 1)
		for _, act := range []kernels.UnaryOp{kernels.Relu, kernels.Tanh} {
			full := tensor.Empty(tensor.F32, c.n, c.cout, ho, wo)
			be.Conv2dAffineAct(full, x, w, sc, sh, act, c.p)
			want := tensor.Empty(tensor.F32, c.n, c.cout, ho/2, wo/2)
			be.MaxPool2d(want, nil, full, pp)
			got := tensor.Empty(tensor.F32, c.n, c.cout, ho/2, wo/2)
			be.Conv2dAffineActMaxPool2x2(got, x, w, sc, sh, act, c.p)
			require.Equal(t, vals(want), vals(got), "case %d act %v", ci, act)
		}
	}
}
