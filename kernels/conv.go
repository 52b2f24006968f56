package kernels

// ConvFamily is the 2-D convolution op family (NCHW): the forward pass
// and the gradients of the input and of the weight.
type ConvFamily interface {
	// Conv2d computes dst[N,Cout,Ho,Wo] from x[N,Cin,H,W] and
	// w[Cout,Cin/groups,KH,KW], adding bias[Cout] when non-nil.
	Conv2d(dst, x, w, bias *T, p Conv2dParams)
	// Conv2dBackwardInput computes dx (overwritten) from dy and w.
	Conv2dBackwardInput(dx, dy, w *T, p Conv2dParams)
	// Conv2dBackwardWeight computes dw (overwritten) from x and dy.
	Conv2dBackwardWeight(dw, x, dy *T, p Conv2dParams)
}

// Conv2dParams configures a 2-D convolution. Zero values mean stride 1,
// padding 0, dilation 1, groups 1.
type Conv2dParams struct {
	StrideH, StrideW     int
	PadH, PadW           int
	DilationH, DilationW int
	Groups               int
}

// Norm fills defaults.
func (p Conv2dParams) Norm() Conv2dParams {
	if p.StrideH == 0 {
		p.StrideH = 1
	}
	if p.StrideW == 0 {
		p.StrideW = 1
	}
	if p.DilationH == 0 {
		p.DilationH = 1
	}
	if p.DilationW == 0 {
		p.DilationW = 1
	}
	if p.Groups == 0 {
		p.Groups = 1
	}
	return p
}

// ConvOut returns the output size of one spatial axis.
func ConvOut(in, k, stride, pad, dil int) int { return (in+2*pad-dil*(k-1)-1)/stride + 1 }

// ConvAffineActer is implemented by backends that fold a per-channel
// affine map and an activation into Conv2d's epilogue: Conv2dAffineAct
// computes Conv2d (no bias) followed by dst[n,o,...] =
// act(dst[n,o,...]·scale[o] + shift[o]), with scale and shift [Cout]. It
// is an optional capability (check with a type assertion); without it the
// same result takes separate passes. autograd.Conv2dAffineAct uses it for
// an eval-mode BatchNorm and ReLU after a convolution.
type ConvAffineActer interface {
	Conv2dAffineAct(dst, x, w, scale, shift *T, act UnaryOp, p Conv2dParams)
}

// ConvAffineActPooler is implemented by backends that fold a 2×2,
// stride-2 max pool (without indices) into Conv2dAffineAct: dst ([N,
// Cout, Ho/2, Wo/2]) is MaxPool2d of Conv2dAffineAct's output, which is
// never written — an eval-mode CNN block and its pool. It is an optional
// capability (check with a type assertion); there is no backward.
type ConvAffineActPooler interface {
	Conv2dAffineActMaxPool2x2(dst, x, w, scale, shift *T, act UnaryOp, p Conv2dParams)
}
