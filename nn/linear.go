package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// LinearOptions configure a Linear layer.
type LinearOptions struct {
	// In and Out are the input and output features (required, > 0).
	In, Out int
	// NoBias leaves out the bias (PyTorch's bias=False); by default the
	// layer has one.
	NoBias bool
	// DType of the parameters; zero means F32.
	DType tensor.DType
}

// Linear computes y = x·Wᵀ + b over the last axis of x, like PyTorch's
// nn.Linear: Weight is [Out, In], Bias is [Out] (nil with NoBias).
//
// Weight and Bias are the layer's parameters. Change their values in
// place (or let an optimizer repoint Value); do not replace the Vars.
type Linear struct {
	leaf
	Weight *autograd.Var
	Bias   *autograd.Var
	opts   LinearOptions
}

// NewLinear returns a Linear initialised as PyTorch does: Weight from
// kaiming_uniform with a = √5, that is U(±1/√In), and Bias from U(±1/√In),
// both drawn from rng (weight first).
func NewLinear(rng *rand.Rand, o LinearOptions) (*Linear, error) {
	dt, err := paramDType("Linear", o.DType)
	if err != nil {
		return nil, err
	}
	if o.In <= 0 || o.Out <= 0 {
		return nil, optionsErr("Linear", "In and Out must be positive, got In=%d Out=%d", o.In, o.Out)
	}
	if rng == nil {
		return nil, optionsErr("Linear", "nil *rand.Rand (pass tensor.NewRNG(seed))")
	}
	if err := checkSizes("Linear", dt, []int{o.Out, o.In}, []int{o.Out}); err != nil {
		return nil, err
	}
	o.DType = dt
	l := &Linear{opts: o}
	w := tensor.Empty(dt, o.Out, o.In)
	KaimingUniform(rng, w, KaimingOptions{A: math.Sqrt(5)})
	l.Weight = l.addParam("weight", w)
	if !o.NoBias {
		b := tensor.Empty(dt, o.Out)
		fanInBound(rng, b, w)
		l.Bias = l.addParam("bias", b)
	}
	return l, nil
}

// MustLinear is NewLinear that panics on invalid options.
func MustLinear(rng *rand.Rand, o LinearOptions) *Linear { return must(NewLinear(rng, o)) }

// Options returns the options the layer was built with (defaults filled).
func (l *Linear) Options() LinearOptions { return l.opts }

// Forward maps x [..., In] to [..., Out].
func (l *Linear) Forward(x *autograd.Var) *autograd.Var {
	l.checkInput(x)
	return autograd.Linear(x, l.Weight, l.Bias)
}

// ForwardRelu is relu(Forward(x)) with the ReLU applied in the product's
// epilogue (autograd.LinearRelu): bitwise the same values and gradients
// as a Linear followed by a ReLU module, with one pass and one tensor
// fewer.
func (l *Linear) ForwardRelu(x *autograd.Var) *autograd.Var {
	l.checkInput(x)
	return autograd.LinearRelu(x, l.Weight, l.Bias)
}

// checkInput panics unless x is [..., In].
func (l *Linear) checkInput(x *autograd.Var) {
	if x.Value.Rank() == 0 || x.Value.Dim(-1) != l.opts.In {
		panic(fmt.Sprintf("nn: Linear(%d→%d) got input of shape %v", l.opts.In, l.opts.Out, x.Shape()))
	}
}

// fanInBound fills bias b from U(±1/√fan_in) of weight w, PyTorch's bias
// init for Linear and Conv2d.
func fanInBound(rng *rand.Rand, b, w *tensor.Tensor) {
	fanIn, _ := Fans(w.Shape())
	bound := 0.0
	if fanIn > 0 {
		bound = 1 / math.Sqrt(float64(fanIn))
	}
	Uniform(rng, b, -bound, bound)
}
