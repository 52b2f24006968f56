package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Conv2dOptions configure a Conv2d layer. The kernel may be rectangular;
// Stride, Padding and Dilation apply to both spatial axes.
type Conv2dOptions struct {
	// InChannels and OutChannels are required (> 0) and divisible by
	// Groups.
	InChannels, OutChannels int
	// KernelH is required; KernelW zero means KernelH (square kernel).
	KernelH, KernelW int
	// Stride (zero means 1), Padding (zero-padding on each side) and
	// Dilation (zero means 1) of both spatial axes.
	Stride, Padding, Dilation int
	// Groups splits channels into independent groups (zero means 1;
	// Groups = InChannels is a depthwise convolution).
	Groups int
	// NoBias leaves out the bias; by default the layer has one.
	NoBias bool
	// DType of the parameters; zero means F32.
	DType tensor.DType
}

// Conv2d is a 2-D cross-correlation over NCHW input like PyTorch's
// nn.Conv2d: Weight is [OutChannels, InChannels/Groups, KernelH, KernelW]
// and Bias [OutChannels] (nil with NoBias).
type Conv2d struct {
	leaf
	Weight *autograd.Var
	Bias   *autograd.Var
	opts   Conv2dOptions
	params kernels.Conv2dParams
}

// NewConv2d returns a Conv2d initialised as PyTorch does: Weight from
// kaiming_uniform with a = √5, Bias from U(±1/√fan_in), fan_in =
// InChannels/Groups·KernelH·KernelW, drawn from rng (weight first).
func NewConv2d(rng *rand.Rand, o Conv2dOptions) (*Conv2d, error) {
	const name = "Conv2d"
	dt, err := paramDType(name, o.DType)
	if err != nil {
		return nil, err
	}
	o.DType = dt
	if o.KernelW == 0 {
		o.KernelW = o.KernelH
	}
	if o.Stride == 0 {
		o.Stride = 1
	}
	if o.Dilation == 0 {
		o.Dilation = 1
	}
	if o.Groups == 0 {
		o.Groups = 1
	}
	switch {
	case o.InChannels <= 0 || o.OutChannels <= 0:
		return nil, optionsErr(name, "InChannels and OutChannels must be positive, got %d and %d", o.InChannels, o.OutChannels)
	case o.KernelH <= 0 || o.KernelW <= 0:
		return nil, optionsErr(name, "kernel must be positive, got %d×%d", o.KernelH, o.KernelW)
	case o.Stride < 0 || o.Dilation < 0 || o.Padding < 0 || o.Groups < 0:
		return nil, optionsErr(name, "negative stride %d, padding %d, dilation %d or groups %d", o.Stride, o.Padding, o.Dilation, o.Groups)
	case o.InChannels%o.Groups != 0 || o.OutChannels%o.Groups != 0:
		return nil, optionsErr(name, "InChannels %d and OutChannels %d must be divisible by Groups %d", o.InChannels, o.OutChannels, o.Groups)
	case rng == nil:
		return nil, optionsErr(name, "nil *rand.Rand (pass tensor.NewRNG(seed))")
	}
	if err := checkSizes(name, dt, []int{o.OutChannels, o.InChannels / o.Groups, o.KernelH, o.KernelW}, []int{o.OutChannels}); err != nil {
		return nil, err
	}
	c := &Conv2d{opts: o, params: kernels.Conv2dParams{
		StrideH: o.Stride, StrideW: o.Stride,
		PadH: o.Padding, PadW: o.Padding,
		DilationH: o.Dilation, DilationW: o.Dilation,
		Groups: o.Groups,
	}}
	w := tensor.Empty(dt, o.OutChannels, o.InChannels/o.Groups, o.KernelH, o.KernelW)
	KaimingUniform(rng, w, KaimingOptions{A: math.Sqrt(5)})
	c.Weight = c.addParam("weight", w)
	if !o.NoBias {
		b := tensor.Empty(dt, o.OutChannels)
		fanInBound(rng, b, w)
		c.Bias = c.addParam("bias", b)
	}
	return c, nil
}

// MustConv2d is NewConv2d that panics on invalid options.
func MustConv2d(rng *rand.Rand, o Conv2dOptions) *Conv2d { return must(NewConv2d(rng, o)) }

// Options returns the options the layer was built with (defaults filled).
func (c *Conv2d) Options() Conv2dOptions { return c.opts }

// Params returns the kernel parameters the layer convolves with.
func (c *Conv2d) Params() kernels.Conv2dParams { return c.params }

// Forward maps x [N, InChannels, H, W] to [N, OutChannels, Ho, Wo].
func (c *Conv2d) Forward(x *autograd.Var) *autograd.Var {
	if x.Value.Rank() != 4 || x.Value.Dim(1) != c.opts.InChannels {
		panic(fmt.Sprintf("nn: Conv2d(%d→%d) got input of shape %v (want [N %d H W])", c.opts.InChannels, c.opts.OutChannels, x.Shape(), c.opts.InChannels))
	}
	return autograd.Conv2d(x, c.Weight, c.Bias, c.params)
}
