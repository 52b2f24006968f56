package nn

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
)

// Pool2dOptions configure MaxPool2d and AvgPool2d over square windows.
type Pool2dOptions struct {
	// Kernel is the window size (required, > 0).
	Kernel int
	// Stride zero means Kernel (non-overlapping windows, PyTorch's
	// default).
	Stride int
	// Padding on each side, at most Kernel/2. Max pooling pads with −∞
	// (padding never wins); average pooling pads with zeros.
	Padding int
	// ExcludePad (AvgPool2d only) divides by the number of real elements
	// in the window instead of the full window (PyTorch's
	// count_include_pad=False; the default counts the padding).
	ExcludePad bool
}

// params validates o and converts it to kernel parameters.
func (o Pool2dOptions) params(layer string) (Pool2dOptions, kernels.Pool2dParams, error) {
	if o.Stride == 0 {
		o.Stride = o.Kernel
	}
	switch {
	case o.Kernel <= 0:
		return o, kernels.Pool2dParams{}, optionsErr(layer, "Kernel must be positive, got %d", o.Kernel)
	case o.Stride < 0:
		return o, kernels.Pool2dParams{}, optionsErr(layer, "Stride must be positive, got %d", o.Stride)
	case o.Padding < 0 || o.Padding > o.Kernel/2:
		return o, kernels.Pool2dParams{}, optionsErr(layer, "Padding %d must be in [0, Kernel/2 = %d]", o.Padding, o.Kernel/2)
	}
	return o, kernels.Pool2dParams{
		KernelH: o.Kernel, KernelW: o.Kernel,
		StrideH: o.Stride, StrideW: o.Stride,
		PadH: o.Padding, PadW: o.Padding,
		CountIncludePad: !o.ExcludePad,
	}, nil
}

// MaxPool2d takes the maximum of each window of NCHW input, like
// PyTorch's nn.MaxPool2d (floor output size, dilation 1).
type MaxPool2d struct {
	leaf
	opts   Pool2dOptions
	params kernels.Pool2dParams
}

// NewMaxPool2d returns a MaxPool2d layer.
func NewMaxPool2d(o Pool2dOptions) (*MaxPool2d, error) {
	o, p, err := o.params("MaxPool2d")
	if err != nil {
		return nil, err
	}
	return &MaxPool2d{opts: o, params: p}, nil
}

// MustMaxPool2d is NewMaxPool2d that panics on invalid options.
func MustMaxPool2d(o Pool2dOptions) *MaxPool2d { return must(NewMaxPool2d(o)) }

// Options returns the options the layer was built with (defaults filled).
func (m *MaxPool2d) Options() Pool2dOptions { return m.opts }

// Forward pools x [N, C, H, W].
func (m *MaxPool2d) Forward(x *autograd.Var) *autograd.Var {
	checkNCHW("MaxPool2d", x)
	return autograd.MaxPool2d(x, m.params)
}

// AvgPool2d averages each window of NCHW input, like PyTorch's
// nn.AvgPool2d (floor output size).
type AvgPool2d struct {
	leaf
	opts   Pool2dOptions
	params kernels.Pool2dParams
}

// NewAvgPool2d returns an AvgPool2d layer.
func NewAvgPool2d(o Pool2dOptions) (*AvgPool2d, error) {
	o, p, err := o.params("AvgPool2d")
	if err != nil {
		return nil, err
	}
	return &AvgPool2d{opts: o, params: p}, nil
}

// MustAvgPool2d is NewAvgPool2d that panics on invalid options.
func MustAvgPool2d(o Pool2dOptions) *AvgPool2d { return must(NewAvgPool2d(o)) }

// Options returns the options the layer was built with (defaults filled).
func (a *AvgPool2d) Options() Pool2dOptions { return a.opts }

// Forward pools x [N, C, H, W].
func (a *AvgPool2d) Forward(x *autograd.Var) *autograd.Var {
	checkNCHW("AvgPool2d", x)
	return autograd.AvgPool2d(x, a.params)
}

// GlobalAvgPool averages each channel of NCHW input over its whole plane:
// [N, C, H, W] → [N, C] (PyTorch's AdaptiveAvgPool2d(1) followed by
// flatten(1)). The zero value is ready to use.
type GlobalAvgPool struct{ leaf }

// Forward pools x [N, C, H, W] to [N, C].
func (g *GlobalAvgPool) Forward(x *autograd.Var) *autograd.Var {
	checkNCHW("GlobalAvgPool", x)
	return autograd.GlobalAvgPool(x)
}

func checkNCHW(layer string, x *autograd.Var) {
	if x.Value.Rank() != 4 {
		panic(fmt.Sprintf("nn: %s got input of shape %v (want [N C H W])", layer, x.Shape()))
	}
}
