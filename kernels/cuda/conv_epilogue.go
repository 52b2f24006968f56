//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// kernels.ConvAffineActer and ConvAffineActPooler on the device: a small
// fp32 layer is one direct kernel with the epilogue in it
// (conv_direct_f32 and conv_direct_pool_f32, conv_direct.go); otherwise
// Conv2d (no bias; im2col and cuBLAS, conv.go) followed by one epilogue kernel
// (src/conv.cu) applying act(v·scale[o] + shift[o]) per output channel o
// in fp32: in place on dst (affine_act_nchw), or, pooled, from the
// convolution's output in a scratch buffer to the 2×2, stride-2 max of
// the epilogue's values in dst (affine_act_pool2), the full-size
// epilogue output never written. x, w and dst share one dtype (F32, BF16
// or F16, as Conv2d); scale and shift are F32, BF16 or F16 each
// (sideOperand). A ReLU keeps NaN (max(v, +0), as kernels.Relu is
// defined).

var (
	_ kernels.ConvAffineActer     = (*Backend)(nil)
	_ kernels.ConvAffineActPooler = (*Backend)(nil)
)

// Conv2dAffineAct implements kernels.ConvAffineActer.
func (b *Backend) Conv2dAffineAct(dst, x, w, scale, shift *T, act kernels.UnaryOp, p kernels.Conv2dParams) {
	must(b.d.Conv2dAffineAct(dst, x, w, scale, shift, act, p, b.precision()))
}

// Conv2dAffineActMaxPool2x2 implements kernels.ConvAffineActPooler.
func (b *Backend) Conv2dAffineActMaxPool2x2(dst, x, w, scale, shift *T, act kernels.UnaryOp, p kernels.Conv2dParams) {
	must(b.d.Conv2dAffineActMaxPool2x2(dst, x, w, scale, shift, act, p, b.precision()))
}

// affineOperands checks the epilogue's scale and shift (kernels
// .CheckConvAffineAct: [cout] each, and act) and returns their addresses
// and the codes the epilogue kernel of dtype kdt reads them by
// (sideOperand); call free when the launch is queued (never nil).
func (d *Device) affineOperands(op string, cout int, scale, shift *tensor.Tensor, act kernels.UnaryOp, kdt tensor.DType) (ps, ph cu.DevicePtr, sc, hc int32, free func(), err error) {
	free = func() {}
	if err := checked(kernels.CheckConvAffineAct(op, cout, scale, shift, act)); err != nil {
		return 0, 0, 0, 0, free, err
	}
	ps, sc, freeS, err := d.sideOperand(op, "scale", scale, kdt)
	if err != nil {
		return 0, 0, 0, 0, free, err
	}
	ph, hc, freeH, err := d.sideOperand(op, "shift", shift, kdt)
	if err != nil {
		freeS()
		return 0, 0, 0, 0, free, err
	}
	return ps, ph, sc, hc, func() { freeS(); freeH() }, nil
}

// Conv2dAffineAct computes Conv2d(x, w) (no bias) into dst [N, Cout, Ho,
// Wo], then dst = act(dst·scale[o] + shift[o]) per output channel o in
// one epilogue launch.
func (d *Device) Conv2dAffineAct(dst, x, w, scale, shift *tensor.Tensor, act kernels.UnaryOp, p kernels.Conv2dParams, prec Precision) error {
	const op = "Conv2dAffineAct"
	c, err := planConv(op, x, w, dst, p)
	if err != nil {
		return err
	}
	ptrs, err := d.convOperands(op, [3]string{"x", "w", "dst"}, [3]*tensor.Tensor{x, w, dst})
	if err != nil {
		return err
	}
	dt := x.DType()
	name, err := floatKernel(op, "affine_act_nchw", dt)
	if err != nil {
		return err
	}
	ps, ph, sc, hc, free, err := d.affineOperands(op, c.cout, scale, shift, act, dt)
	if err != nil {
		return err
	}
	defer free()
	if c.direct(dt) {
		// One launch: the direct convolution with the epilogue applied.
		return d.convDirect(op, "conv_direct_f32", &c, int64(c.g.n)*int64(c.groups*c.tiles(c.og))*int64(c.pixels),
			new(args).ptr(ptrs[2]).ptr(ptrs[0]).ptr(ptrs[1]).ptr(0).push(c.g.words()...).i32(int32(c.groups)).
				i32(int32(c.cout)).ptr(ps).i32(sc).ptr(ph).i32(hc).i32(int32(act)))
	}
	if err := d.Conv2d(dst, x, w, nil, p, prec); err != nil {
		return fmt.Errorf("%w (in %s)", err, op)
	}
	total := int64(dst.Numel())
	release := d.enter()
	defer release()
	var a args
	a.ptr(ptrs[2]).ptr(ps).i32(sc).ptr(ph).i32(hc).i32(int32(act)).i64(int64(c.cout)).i64(int64(c.pixels)).i64(total)
	return d.launch1D(name, total, &a)
}

// Conv2dAffineActMaxPool2x2 is Conv2dAffineAct followed by a 2×2,
// stride-2 max pool (no indices) into dst [N, Cout, Ho/2, Wo/2]: the
// convolution's output goes to a scratch buffer, and the epilogue writes
// only the pool of its values (as MaxPool2d compares them: the first NaN
// wins).
func (d *Device) Conv2dAffineActMaxPool2x2(dst, x, w, scale, shift *tensor.Tensor, act kernels.UnaryOp, p kernels.Conv2dParams, prec Precision) error {
	const op = "Conv2dAffineActMaxPool2x2"
	xs, ws := x.Shape(), w.Shape()
	if len(xs) != 4 || len(ws) != 4 {
		return fmt.Errorf("cuda: %s: x shape %v and w shape %v, want rank 4", op, xs, ws)
	}
	pn := p.Norm()
	ho := kernels.ConvOut(xs[2], ws[2], pn.StrideH, pn.PadH, pn.DilationH)
	wo := kernels.ConvOut(xs[3], ws[3], pn.StrideW, pn.PadW, pn.DilationW)
	// The convolution's output, checked by its shape (it is scratch).
	full := []int{xs[0], ws[0], max(ho, 0), max(wo, 0)}
	g, err := kernels.CheckConv2d(op, xs, ws, full, p)
	if err := checked(err); err != nil {
		return err
	}
	if err := checked(kernels.CheckSameShape(op, "dst", dst, []int{xs[0], ws[0], ho / 2, wo / 2})); err != nil {
		return err
	}
	dt := x.DType()
	name, err := floatKernel(op, "affine_act_pool2", dt)
	if err != nil {
		return err
	}
	ptrs, err := d.convOperands(op, [3]string{"x", "w", "dst"}, [3]*tensor.Tensor{x, w, dst})
	if err != nil {
		return err
	}
	ps, ph, sc, hc, free, err := d.affineOperands(op, g.Cout, scale, shift, act, dt)
	if err != nil {
		return err
	}
	defer free()
	total := int64(dst.Numel())
	if total == 0 {
		return nil
	}
	if c, err := planConvShapes(op, xs, ws, full, dt, p); err == nil && c.direct(dt) {
		// One launch, the convolution's output never written.
		return d.convDirect(op, "conv_direct_pool_f32", &c, int64(c.g.n)*int64(c.groups*c.tiles(c.og))*int64((ho/2)*(wo/2)),
			new(args).ptr(ptrs[2]).ptr(ptrs[0]).ptr(ptrs[1]).push(c.g.words()...).i32(int32(c.groups)).
				i32(int32(c.cout)).ptr(ps).i32(sc).ptr(ph).i32(hc).i32(int32(act)))
	}
	y, err := tensor.EmptyOn(tensor.CUDA(d.ordinal), dt, full...)
	if err != nil {
		return err
	}
	defer y.Storage().Free() // stream order keeps it until the launches have run
	if err := d.Conv2d(y, x, w, nil, p, prec); err != nil {
		return fmt.Errorf("%w (in %s)", err, op)
	}
	py, _ := d.ptrOf(op, "scratch", y, dt)
	release := d.enter()
	defer release()
	var a args
	a.ptr(ptrs[2]).ptr(py).ptr(ps).i32(sc).ptr(ph).i32(hc).i32(int32(act)).i64(int64(g.Cout))
	a.i64(int64(ho)).i64(int64(wo)).i64(int64(ho / 2)).i64(int64(wo / 2)).i64(total)
	return d.launch1D(name, total, &a)
}
