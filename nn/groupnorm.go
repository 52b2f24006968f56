package nn

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// GroupNormOptions configure a GroupNorm layer.
type GroupNormOptions struct {
	// Groups and Channels are required (> 0); Channels must be divisible
	// by Groups.
	Groups, Channels int
	// Eps is added to the variance; zero means 1e-5.
	Eps float64
	// NoAffine leaves out the learned per-channel scale and shift.
	NoAffine bool
	// DType of the parameters; zero means F32.
	DType tensor.DType
}

// GroupNorm normalises [N, C, *] input over groups of C/Groups channels
// (statistics per sample and group, biased variance), then applies a
// per-channel affine map, like PyTorch's nn.GroupNorm. Weight (init 1)
// and Bias (init 0) are [Channels], nil with NoAffine. It behaves the same
// in training and evaluation.
type GroupNorm struct {
	leaf
	Weight *autograd.Var
	Bias   *autograd.Var
	opts   GroupNormOptions
}

// NewGroupNorm returns a GroupNorm.
func NewGroupNorm(o GroupNormOptions) (*GroupNorm, error) {
	const name = "GroupNorm"
	dt, err := paramDType(name, o.DType)
	if err != nil {
		return nil, err
	}
	o.DType = dt
	if o.Eps == 0 {
		o.Eps = 1e-5
	}
	switch {
	case o.Groups <= 0 || o.Channels <= 0:
		return nil, optionsErr(name, "Groups and Channels must be positive, got %d and %d", o.Groups, o.Channels)
	case o.Channels%o.Groups != 0:
		return nil, optionsErr(name, "Channels %d must be divisible by Groups %d", o.Channels, o.Groups)
	case !(o.Eps > 0):
		return nil, optionsErr(name, "Eps must be positive, got %v", o.Eps)
	}
	if err := checkSizes(name, dt, []int{2, o.Channels}); err != nil {
		return nil, err
	}
	g := &GroupNorm{opts: o}
	if !o.NoAffine {
		g.Weight = g.addParam("weight", tensor.Ones(dt, o.Channels))
		g.Bias = g.addParam("bias", tensor.Zeros(dt, o.Channels))
	}
	return g, nil
}

// MustGroupNorm is NewGroupNorm that panics on invalid options.
func MustGroupNorm(o GroupNormOptions) *GroupNorm { return must(NewGroupNorm(o)) }

// Options returns the options the layer was built with (defaults filled).
func (g *GroupNorm) Options() GroupNormOptions { return g.opts }

// Forward normalises x [N, Channels, ...].
func (g *GroupNorm) Forward(x *autograd.Var) *autograd.Var {
	g.checkInput(x)
	return autograd.GroupNorm(x, g.Weight, g.Bias, g.opts.Groups, g.opts.Eps)
}

// ForwardRelu is Relu(Forward(x)) with the ReLU folded into the group
// norm's passes where the backend supports it (autograd.GroupNormRelu).
func (g *GroupNorm) ForwardRelu(x *autograd.Var) *autograd.Var {
	g.checkInput(x)
	return autograd.GroupNormRelu(x, g.Weight, g.Bias, g.opts.Groups, g.opts.Eps)
}

func (g *GroupNorm) checkInput(x *autograd.Var) {
	if x.Value.Rank() < 2 || x.Value.Dim(1) != g.opts.Channels {
		panic(fmt.Sprintf("nn: GroupNorm(%d groups, %d channels) got input of shape %v", g.opts.Groups, g.opts.Channels, x.Shape()))
	}
}
