package kernels

import "fmt"

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

// ParamGradAccumulator is implemented by backends that add a
// convolution's weight gradient, or a batch or group norm's weight and
// bias gradients, into existing tensors in the launches that compute them, as
// GradAccumulator does for a linear layer: autograd accumulates them
// straight into the parameters' Grad instead of computing them into new
// tensors and adding those (one Binary launch fewer per parameter and
// training step). It is an optional capability (check with a type
// assertion). Each method is its overwriting op with dw and db (either
// may be nil) added to instead of overwritten, dx overwritten as before;
// the results are bit for bit those of the overwriting op into new
// tensors followed by Binary Add.
type ParamGradAccumulator interface {
	// Conv2dBackwardWeightAdd is Conv2dBackwardWeight adding into dw.
	Conv2dBackwardWeightAdd(dw, x, dy *T, p Conv2dParams)
	// BatchNormBackwardAdd is BatchNormBackward adding into dw and db.
	BatchNormBackwardAdd(dx, dw, db, dy, x, saveMean, saveRstd, w *T, training bool)
	// BatchNormReluBackwardAdd is BatchNormReluer's backward adding into
	// dw and db.
	BatchNormReluBackwardAdd(dx, dw, db, dy, x, b, saveMean, saveRstd, w *T, training bool)
	// BatchNormReluMaxPool2x2BackwardAdd is BatchNormReluPooler's
	// backward adding into dw and db.
	BatchNormReluMaxPool2x2BackwardAdd(dx, dw, db, g, argmax, x, b, saveMean, saveRstd, w *T, training bool)
	// GroupNormBackwardAdd is GroupNormBackward adding into dw and db.
	GroupNormBackwardAdd(dx, dw, db, dy, x, mean, rstd, w *T, groups int)
	// GroupNormReluBackwardAdd is GroupNormReluer's backward adding into
	// dw and db.
	GroupNormReluBackwardAdd(dx, dw, db, dy, x, b, mean, rstd, w *T, groups int)
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

// Conv2dGeom is the geometry of a checked convolution: input [N, Cin, H,
// W], weight [Cout, Cin/Groups, KH, KW], output [N, Cout, Ho, Wo].
type Conv2dGeom struct {
	// P is the parameters with their defaults filled (Norm).
	P                    Conv2dParams
	N, Cin, H, W         int
	Cout, KH, KW, Ho, Wo int
	// Cg and Og are the input and output channels of one group, KDim
	// the rows of a group's patch matrix (Cg·KH·KW), Pixels Ho·Wo.
	Cg, Og, KDim, Pixels int
}

// convParamLimit bounds a convolution's strides, padding and dilation
// (CheckConv2d): 2^30, far past any real layer.
const convParamLimit = 1 << 30

// CheckConv2d checks the shapes of a convolution's input x, weight w
// and output y (for the backward passes: dx, and dy) against p and
// returns the geometry: rank-4 shapes, channels that split into the
// groups, valid parameters and y of the size they give.
func CheckConv2d(name string, x, w, y []int, p Conv2dParams) (Conv2dGeom, error) {
	p = p.Norm()
	bad := func(why string) (Conv2dGeom, error) {
		return Conv2dGeom{}, fmt.Errorf("%s: %s: input %v, weight %v, output %v (stride %d,%d pad %d,%d dilation %d,%d groups %d)",
			name, why, x, w, y, p.StrideH, p.StrideW, p.PadH, p.PadW, p.DilationH, p.DilationW, p.Groups)
	}
	if len(x) != 4 || len(w) != 4 || len(y) != 4 {
		return bad("want rank-4 tensors")
	}
	g := Conv2dGeom{P: p, N: x[0], Cin: x[1], H: x[2], W: x[3], Cout: w[0], KH: w[2], KW: w[3]}
	if p.Groups <= 0 || g.Cin%p.Groups != 0 || g.Cout%p.Groups != 0 || w[1] != g.Cin/p.Groups {
		return bad("channels do not match groups")
	}
	if p.StrideH <= 0 || p.StrideW <= 0 || p.PadH < 0 || p.PadW < 0 || p.DilationH <= 0 || p.DilationW <= 0 {
		return bad("invalid parameters")
	}
	// A device's kernels index in 32-bit ints where the element counts
	// allow it; strides, padding and dilation must then fit too.
	if max(p.StrideH, p.StrideW, p.PadH, p.PadW, p.DilationH, p.DilationW) >= convParamLimit {
		return bad(fmt.Sprintf("stride, padding or dilation of %d or more", convParamLimit))
	}
	g.Ho = ConvOut(g.H, g.KH, p.StrideH, p.PadH, p.DilationH)
	g.Wo = ConvOut(g.W, g.KW, p.StrideW, p.PadW, p.DilationW)
	if g.Ho <= 0 || g.Wo <= 0 || y[0] != g.N || y[1] != g.Cout || y[2] != g.Ho || y[3] != g.Wo {
		return bad("output shape mismatch")
	}
	g.Cg, g.Og = g.Cin/p.Groups, g.Cout/p.Groups
	g.KDim = g.Cg * g.KH * g.KW
	g.Pixels = g.Ho * g.Wo
	return g, nil
}

// CheckConvBias checks a convolution's optional bias: cout elements.
func CheckConvBias(name string, bias *T, cout int) error {
	if bias != nil && bias.Numel() != cout {
		return fmt.Errorf("%s: bias has shape %v, want [%d]", name, bias.Shape(), cout)
	}
	return nil
}

// CheckConvAffineAct checks the epilogue of Conv2dAffineAct: float scale
// and shift of cout elements each and an activation that exists.
func CheckConvAffineAct(name string, cout int, scale, shift *T, act UnaryOp) error {
	for _, p := range [...]struct {
		what string
		t    *T
	}{{"scale", scale}, {"shift", shift}} {
		if !p.t.DType().IsFloat() {
			return floatError(name, p.what, p.t)
		}
		if s := p.t.Shape(); len(s) != 1 || s[0] != cout {
			return fmt.Errorf("%s: %s has shape %v, want [%d]", name, p.what, s, cout)
		}
	}
	return CheckActivation(name, act)
}
