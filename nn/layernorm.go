package nn

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// LayerNormOptions configure a LayerNorm layer.
type LayerNormOptions struct {
	// Shape is the normalised trailing shape (PyTorch's
	// normalized_shape), required, every dimension > 0.
	Shape []int
	// Eps is added to the variance; zero means 1e-5.
	Eps float64
	// NoAffine leaves out the learned elementwise scale and shift.
	NoAffine bool
	// DType of the parameters; zero means F32.
	DType tensor.DType
}

// LayerNorm normalises each sample over its trailing Shape (mean and
// biased variance over those elements), then applies an elementwise
// affine map, like PyTorch's nn.LayerNorm. Weight (init 1) and Bias
// (init 0) have shape Shape, nil with NoAffine.
type LayerNorm struct {
	leaf
	Weight *autograd.Var
	Bias   *autograd.Var
	opts   LayerNormOptions
}

// NewLayerNorm returns a LayerNorm.
func NewLayerNorm(o LayerNormOptions) (*LayerNorm, error) {
	const name = "LayerNorm"
	dt, err := paramDType(name, o.DType)
	if err != nil {
		return nil, err
	}
	o.DType = dt
	o.Shape = append([]int(nil), o.Shape...)
	if o.Eps == 0 {
		o.Eps = 1e-5
	}
	if len(o.Shape) == 0 {
		return nil, optionsErr(name, "Shape is required")
	}
	for _, d := range o.Shape {
		if d <= 0 {
			return nil, optionsErr(name, "Shape %v has a non-positive dimension", o.Shape)
		}
	}
	if !(o.Eps > 0) {
		return nil, optionsErr(name, "Eps must be positive, got %v", o.Eps)
	}
	if err := checkSizes(name, dt, append([]int{2}, o.Shape...)); err != nil {
		return nil, err
	}
	l := &LayerNorm{opts: o}
	if !o.NoAffine {
		l.Weight = l.addParam("weight", tensor.Ones(dt, o.Shape...))
		l.Bias = l.addParam("bias", tensor.Zeros(dt, o.Shape...))
	}
	return l, nil
}

// MustLayerNorm is NewLayerNorm that panics on invalid options.
func MustLayerNorm(o LayerNormOptions) *LayerNorm { return must(NewLayerNorm(o)) }

// Options returns the options the layer was built with (defaults filled).
func (l *LayerNorm) Options() LayerNormOptions {
	o := l.opts
	o.Shape = append([]int(nil), o.Shape...)
	return o
}

// Forward normalises x, whose trailing axes must equal Shape.
func (l *LayerNorm) Forward(x *autograd.Var) *autograd.Var {
	s, k := x.Shape(), len(l.opts.Shape)
	if len(s) < k || !tensor.SameShape(s[len(s)-k:], l.opts.Shape) {
		panic(fmt.Sprintf("nn: LayerNorm%v got input of shape %v", l.opts.Shape, s))
	}
	return autograd.LayerNorm(x, l.Weight, l.Bias, k, l.opts.Eps)
}
