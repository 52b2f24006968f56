//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// w4Convs are W4's CNN layers at its batch of 128 (kernels 3×3, padding
// 1), then a stride-2 and a grouped layer: every one takes the direct
// path.
var w4Convs = []struct {
	x, w []int
	p    kernels.Conv2dParams
}{
	{[]int{128, 1, 28, 28}, []int{8, 1, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1}},
	{[]int{128, 8, 14, 14}, []int{16, 8, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1}},
	{[]int{128, 16, 7, 7}, []int{32, 16, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1}},
	{[]int{16, 8, 15, 15}, []int{12, 8, 3, 3}, kernels.Conv2dParams{StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}},
	{[]int{16, 12, 9, 9}, []int{18, 4, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1, Groups: 3}},
}

// convAll runs the forward (with bias), the input gradient, the weight
// gradient and the accumulating weight gradient (into a copy of acc) of
// one layer on the device, by the path directConvOff selects.
func convAll(t *testing.T, x, w, b, dy, acc *tensor.Tensor, p kernels.Conv2dParams) [6]*tensor.Tensor {
	t.Helper()
	xs, ws := x.Shape(), w.Shape()
	pn := p.Norm()
	ys := []int{xs[0], ws[0], kernels.ConvOut(xs[2], ws[2], pn.StrideH, pn.PadH, pn.DilationH),
		kernels.ConvOut(xs[3], ws[3], pn.StrideW, pn.PadW, pn.DilationW)}
	y, dx, dw := poisoned(t, tensor.F32, ys...), poisoned(t, tensor.F32, xs...), poisoned(t, tensor.F32, ws...)
	dwAcc := toDev(t, fromDev(t, acc))
	be.Conv2d(y, x, w, b, p)
	be.Conv2dBackwardInput(dx, dy, w, p)
	be.Conv2dBackwardWeight(dw, x, dy, p)
	be.Conv2dBackwardWeightAdd(dwAcc, x, dy, p)
	// The epilogues, the bias as the scale and its negation's half as
	// the shift.
	shift := poisoned(t, tensor.F32, ws[0])
	be.BinaryScalar(kernels.Mul, shift, b, -0.5, false)
	act := poisoned(t, tensor.F32, ys...)
	be.Conv2dAffineAct(act, x, w, b, shift, kernels.Relu, p)
	pooled := poisoned(t, tensor.F32, ys[0], ys[1], ys[2]/2, ys[3]/2)
	be.Conv2dAffineActMaxPool2x2(pooled, x, w, b, shift, kernels.Relu, p)
	return [6]*tensor.Tensor{fromDev(t, y), fromDev(t, dx), fromDev(t, dw), fromDev(t, dwAcc), fromDev(t, act), fromDev(t, pooled)}
}

// TestDirectConvMatchesColumns: on W4's layers (and a strided and a
// grouped one) the direct kernels (the epilogues of ConvAffineActer and
// ConvAffineActPooler included) give what im2col and cuBLAS give
// (fp32, within 1e-5 of the largest value), bitwise the same on a second
// run, and the accumulating weight gradient is bitwise the weight
// gradient added to the accumulator (as the conformance suite holds the
// im2col path to).
func TestDirectConvMatchesColumns(t *testing.T) {
	defer func(was bool) { directConvOff = was }(directConvOff)
	for i, c := range w4Convs {
		rng := tensor.NewRNG(uint64(40 + i))
		x := toDev(t, tensor.Normal(rng, tensor.F32, 0, 1, c.x...))
		w := toDev(t, tensor.Normal(rng, tensor.F32, 0, 0.3, c.w...))
		b := toDev(t, tensor.Normal(rng, tensor.F32, 0, 1, c.w[0]))
		pn := c.p.Norm()
		ys := []int{c.x[0], c.w[0], kernels.ConvOut(c.x[2], c.w[2], pn.StrideH, pn.PadH, pn.DilationH),
			kernels.ConvOut(c.x[3], c.w[3], pn.StrideW, pn.PadW, pn.DilationW)}
		dy := toDev(t, tensor.Normal(rng, tensor.F32, 0, 1, ys...))
		acc := toDev(t, tensor.Normal(rng, tensor.F32, 0, 1, c.w...))

		directConvOff = true
		cols := convAll(t, x, w, b, dy, acc, c.p)
		directConvOff = false
		direct := convAll(t, x, w, b, dy, acc, c.p)
		again := convAll(t, x, w, b, dy, acc, c.p)
		name := fmt.Sprintf("x %v w %v %+v", c.x, c.w, c.p)
		for k, what := range []string{"forward", "input gradient", "weight gradient", "accumulated weight gradient",
			"affine ReLU epilogue", "pooled affine ReLU epilogue"} {
			closeRel(t, name+" "+what+" (direct against im2col)", direct[k], cols[k], 1e-5)
			if !bitwiseEqual(direct[k], again[k]) {
				t.Errorf("%s %s: two direct runs differ", name, what)
			}
		}
		sum := tensor.Empty(tensor.F32, c.w...)
		cpuBE.Binary(kernels.Add, sum, fromDev(t, acc), direct[2])
		if !bitwiseEqual(direct[3], sum) {
			t.Errorf("%s: the accumulated weight gradient is not the weight gradient added to the accumulator", name)
		}
	}
}

// bitwiseEqual reports whether two CPU tensors hold the same bits.
func bitwiseEqual(a, b *tensor.Tensor) bool {
	x, y := a.F32(), b.F32()
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] && !(x[i] != x[i] && y[i] != y[i]) {
			return false
		}
	}
	return true
}

// BenchmarkConvW4 times W4's three layers' forward, input gradient (not
// the first layer's, which W4 never asks for) and weight gradient at
// batch 128 by the direct kernels and by im2col and cuBLAS: the figures
// the direct path was written for.
func BenchmarkConvW4(b *testing.B) {
	defer func(was bool) { directConvOff = was }(directConvOff)
	for _, path := range []string{"direct", "im2col"} {
		b.Run(path, func(b *testing.B) {
			directConvOff = path == "im2col"
			type layer struct{ x, w, y, dx, dy, dw *tensor.Tensor }
			var ls []layer
			for i, c := range w4Convs[:3] {
				rng := tensor.NewRNG(uint64(70 + i))
				mk := func(shape ...int) *tensor.Tensor {
					d, err := tensor.Normal(rng, tensor.F32, 0, 1, shape...).ToDevice(tensor.CUDA(0))
					if err != nil {
						b.Fatal(err)
					}
					return d
				}
				ys := []int{c.x[0], c.w[0], c.x[2], c.x[3]}
				ls = append(ls, layer{x: mk(c.x...), w: mk(c.w...), y: mk(ys...), dx: mk(c.x...), dy: mk(ys...), dw: mk(c.w...)})
			}
			p := w4Convs[0].p
			run := func() {
				for i, l := range ls {
					be.Conv2d(l.y, l.x, l.w, nil, p)
					if i > 0 {
						be.Conv2dBackwardInput(l.dx, l.dy, l.w, p)
					}
					be.Conv2dBackwardWeight(l.dw, l.x, l.dy, p)
				}
			}
			run()
			if err := dev.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				run()
			}
			if err := dev.Synchronize(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
