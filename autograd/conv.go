package autograd

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Conv2d convolves x [N,Cin,H,W] with w [Cout,Cin/groups,KH,KW] and adds
// b [Cout] when non-nil. Under Autocast the inputs are cast to the
// autocast dtype and so is the result.
func Conv2d(x, w, b *Var, p kernels.Conv2dParams) *Var {
	checkFloat("conv2d", x, w, b)
	p = p.Norm()
	xs, ws := x.Shape(), w.Shape()
	if len(xs) != 4 || len(ws) != 4 || p.Groups < 1 || xs[1] != ws[1]*p.Groups || ws[0]%p.Groups != 0 {
		panic(fmt.Sprintf("autograd: conv2d: input shape %v does not match weight shape %v with %d groups", xs, ws, p.Groups))
	}
	if b != nil && (len(b.Shape()) != 1 || b.Shape()[0] != ws[0]) {
		panic(fmt.Sprintf("autograd: conv2d: bias shape %v does not match weight shape %v", b.Shape(), ws))
	}
	ho := kernels.ConvOut(xs[2], ws[2], p.StrideH, p.PadH, p.DilationH)
	wo := kernels.ConvOut(xs[3], ws[3], p.StrideW, p.PadW, p.DilationW)
	if ho <= 0 || wo <= 0 {
		panic(fmt.Sprintf("autograd: conv2d: input shape %v too small for weight shape %v with %+v", xs, ws, p))
	}
	in := lowPrecisionInputs(x, w, b)
	x, w, b = in[0], in[1], in[2]
	xv, wv := contig(x.Value), contig(w.Value)
	var bv *tensor.Tensor
	if b != nil {
		bv = contig(b.Value)
	}
	out := alloc(xv, xv.DType(), xs[0], ws[0], ho, wo)
	backendOf(out).Conv2d(out, xv, wv, bv, p)
	inputs := []*Var{x, w}
	if b != nil {
		inputs = append(inputs, b)
	}
	return resultWith("conv2d", out, inputs, 2, true, func(bufs *opBufs) backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			g = contig(g)
			be := backendOf(g)
			grads := bufs.grads[:len(inputs)]
			if needs(x) {
				grads[0] = alloc(xv, xv.DType(), xs...)
				be.Conv2dBackwardInput(grads[0], g, wv, p)
			}
			if needs(w) {
				// Straight into w's Grad where Backward offers it and the
				// backend adds there (kernels.ParamGradAccumulator).
				if pa, ok := be.(kernels.ParamGradAccumulator); ok && bufs.sink[1] != nil && bufs.sink[1].DType() == wv.DType() {
					pa.Conv2dBackwardWeightAdd(bufs.sink[1], xv, g, p)
				} else {
					grads[1] = alloc(wv, wv.DType(), ws...)
					be.Conv2dBackwardWeight(grads[1], xv, g, p)
				}
			}
			if b != nil && needs(b) {
				grads[2] = reduceKeep(kernels.Sum, g, []int{0, 2, 3}).Reshape(ws[0])
			}
			return grads
		}
	})
}

// poolShape validates pooling of x and returns the output shape.
func poolShape(op string, xs []int, p kernels.Pool2dParams) []int {
	if len(xs) != 4 || p.KernelH <= 0 || p.KernelW <= 0 || p.StrideH <= 0 || p.StrideW <= 0 || p.PadH < 0 || p.PadW < 0 {
		panic(fmt.Sprintf("autograd: %s: input shape %v (want [N,C,H,W]) with %+v", op, xs, p))
	}
	ho := kernels.ConvOut(xs[2], p.KernelH, p.StrideH, p.PadH, 1)
	wo := kernels.ConvOut(xs[3], p.KernelW, p.StrideW, p.PadW, 1)
	if ho <= 0 || wo <= 0 {
		panic(fmt.Sprintf("autograd: %s: input shape %v too small for %+v", op, xs, p))
	}
	return []int{xs[0], xs[1], ho, wo}
}

// MaxPool2d takes window maxima of x [N,C,H,W]. The gradient goes to the
// (first) maximum of each window.
func MaxPool2d(x *Var, p kernels.Pool2dParams) *Var {
	checkFloat("max_pool2d", x)
	p = p.Norm()
	os := poolShape("max_pool2d", x.Shape(), p)
	xv := contig(x.Value)
	out := alloc(xv, xv.DType(), os...)
	argmax := alloc(xv, tensor.I32, os...)
	backendOf(out).MaxPool2d(out, argmax, xv, p)
	xs := x.Shape()
	return result("max_pool2d", out, []*Var{x}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			dx := alloc(g, g.DType(), xs...)
			backendOf(dx).MaxPool2dBackward(dx, contig(g), argmax, p)
			return []*tensor.Tensor{dx}
		}
	})
}

// AvgPool2d averages windows of x [N,C,H,W].
func AvgPool2d(x *Var, p kernels.Pool2dParams) *Var {
	checkFloat("avg_pool2d", x)
	p = p.Norm()
	os := poolShape("avg_pool2d", x.Shape(), p)
	xv := contig(x.Value)
	out := alloc(xv, xv.DType(), os...)
	backendOf(out).AvgPool2d(out, xv, p)
	xs := x.Shape()
	return result("avg_pool2d", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			dx := alloc(g, g.DType(), xs...)
			backendOf(dx).AvgPool2dBackward(dx, contig(g), p)
			return []*tensor.Tensor{dx}
		}
	})
}

// GlobalAvgPool averages each plane of x [N,C,H,W] into [N,C]. It keeps
// x's dtype.
func GlobalAvgPool(x *Var) *Var {
	checkFloat("global_avg_pool", x)
	xs := x.Shape()
	if len(xs) != 4 {
		panic(fmt.Sprintf("autograd: global_avg_pool: input shape %v, want [N,C,H,W]", xs))
	}
	out := reduceKeep(kernels.Mean, x.Value, []int{2, 3}).Reshape(xs[0], xs[1])
	inv := 1 / float64(max(xs[2]*xs[3], 1))
	return result("global_avg_pool", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			// g/(H·W) broadcast over every pixel, in one launch.
			dx := alloc(g, g.DType(), xs...)
			backendOf(g).BinaryScalar(kernels.Mul, dx, reshapeT(g, xs[0], xs[1], 1, 1), inv, false)
			return []*tensor.Tensor{dx}
		}
	})
}

// Conv2dAffineAct returns act(conv2d(x, w)·scale[c] + shift[c]) per output
// channel c, with no gradient: an eval-mode BatchNorm (and the activation
// after it) folded into the convolution, computed in the convolution's
// epilogue where the backend supports it (kernels.ConvAffineActer) and in
// separate passes otherwise. scale and shift are [Cout]. It records
// nothing, so it panics when a gradient would be needed (call it under
// NoGrad or InferenceMode, or with inputs that need none); Autocast does
// not apply (the inputs' own dtype is used).
func Conv2dAffineAct(x, w, scale, shift *Var, act kernels.UnaryOp, p kernels.Conv2dParams) *Var {
	xs, ws, ho, wo := checkConvAffineAct("conv2d_affine_act", x, w, scale, shift, p)
	p = p.Norm()
	xv, wv := contig(x.Value), contig(w.Value)
	out := alloc(xv, xv.DType(), xs[0], ws[0], ho, wo)
	be := backendOf(out)
	if f, ok := be.(kernels.ConvAffineActer); ok {
		f.Conv2dAffineAct(out, xv, wv, contig(scale.Value), contig(shift.Value), act, p)
		return Const(out)
	}
	be.Conv2d(out, xv, wv, nil, p)
	c := ws[0]
	sc := scale.Value.Cast(out.DType()).Reshape(1, c, 1, 1)
	sh := shift.Value.Cast(out.DType()).Reshape(1, c, 1, 1)
	be.Binary(kernels.Mul, out, out, sc)
	be.Binary(kernels.Add, out, out, sh)
	be.Unary(act, out, out)
	return Const(out)
}

// Conv2dAffineActMaxPool is MaxPool2d(Conv2dAffineAct(x, w, scale, shift,
// act, p)) with a 2×2, stride-2 pool (an eval-mode CNN block and its
// pool), for inference like Conv2dAffineAct: where the backend supports
// it (kernels.ConvAffineActPooler) the pool is taken in the
// convolution's epilogue and the full-size output is never written;
// otherwise it is the two ops. The convolution's output planes must be
// at least 2×2.
func Conv2dAffineActMaxPool(x, w, scale, shift *Var, act kernels.UnaryOp, p kernels.Conv2dParams) *Var {
	f, ok := backendOf(x.Value).(kernels.ConvAffineActPooler)
	if !ok || x.Value.DType() != w.Value.DType() {
		return MaxPool2d(Conv2dAffineAct(x, w, scale, shift, act, p), kernels.Pool2dParams{KernelH: 2, KernelW: 2})
	}
	xs, ws, ho, wo := checkConvAffineAct("conv2d_affine_act_max_pool", x, w, scale, shift, p)
	if ho < 2 || wo < 2 {
		panic(fmt.Sprintf("autograd: conv2d_affine_act_max_pool: input shape %v gives %d×%d output planes for weight shape %v (want at least 2×2)", xs, ho, wo, ws))
	}
	xv := contig(x.Value)
	out := alloc(xv, xv.DType(), xs[0], ws[0], ho/2, wo/2)
	f.Conv2dAffineActMaxPool2x2(out, xv, contig(w.Value), contig(scale.Value), contig(shift.Value), act, p)
	return Const(out)
}

// checkConvAffineAct checks the inputs of an inference-only convolution
// with an affine epilogue (op names it): float inputs needing no gradient,
// x [N, C, H, W] matching w for the groups, scale and shift [Cout], a
// non-empty output. It returns the shapes and the output's planes.
func checkConvAffineAct(op string, x, w, scale, shift *Var, p kernels.Conv2dParams) (xs, ws []int, ho, wo int) {
	checkFloat(op, x, w, scale, shift)
	if GradEnabled() && (x.RequiresGrad() || w.RequiresGrad() || scale.RequiresGrad() || shift.RequiresGrad()) {
		panic(fmt.Sprintf("autograd: %s has no gradient: call it under NoGrad or InferenceMode", op))
	}
	p = p.Norm()
	xs, ws = x.Shape(), w.Shape()
	if len(xs) != 4 || len(ws) != 4 || p.Groups < 1 || xs[1] != ws[1]*p.Groups || ws[0]%p.Groups != 0 {
		panic(fmt.Sprintf("autograd: %s: input shape %v does not match weight shape %v with %d groups", op, xs, ws, p.Groups))
	}
	for _, v := range []*Var{scale, shift} {
		if s := v.Shape(); len(s) != 1 || s[0] != ws[0] {
			panic(fmt.Sprintf("autograd: %s: scale and shift must be [%d], got %v", op, ws[0], s))
		}
	}
	ho = kernels.ConvOut(xs[2], ws[2], p.StrideH, p.PadH, p.DilationH)
	wo = kernels.ConvOut(xs[3], ws[3], p.StrideW, p.PadW, p.DilationW)
	if ho <= 0 || wo <= 0 {
		panic(fmt.Sprintf("autograd: %s: input shape %v too small for weight shape %v with %+v", op, xs, ws, p))
	}
	return xs, ws, ho, wo
}
