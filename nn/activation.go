package nn

import "github.com/esper-go/esper/autograd"

// The activations are modules without parameters so they can sit in a
// Sequential. Their zero values are ready to use: &nn.ReLU{}.

// ReLU computes max(x, 0).
type ReLU struct{ leaf }

// Forward applies the activation elementwise.
func (*ReLU) Forward(x *autograd.Var) *autograd.Var { return autograd.Relu(x) }

// GELU computes x·Φ(x) with the exact normal CDF (erf), or with PyTorch's
// approximate="tanh" form 0.5x(1+tanh(√(2/π)(x+0.044715x³))) when
// Approximate is set.
type GELU struct {
	leaf
	Approximate bool
}

// Forward applies the activation elementwise.
func (g *GELU) Forward(x *autograd.Var) *autograd.Var {
	if g.Approximate {
		return autograd.GeluTanh(x)
	}
	return autograd.Gelu(x)
}

// SiLU computes x·sigmoid(x) (also called swish).
type SiLU struct{ leaf }

// Forward applies the activation elementwise.
func (*SiLU) Forward(x *autograd.Var) *autograd.Var { return autograd.Silu(x) }

// Sigmoid computes 1/(1+e⁻ˣ).
type Sigmoid struct{ leaf }

// Forward applies the activation elementwise.
func (*Sigmoid) Forward(x *autograd.Var) *autograd.Var { return autograd.Sigmoid(x) }

// Tanh computes the hyperbolic tangent.
type Tanh struct{ leaf }

// Forward applies the activation elementwise.
func (*Tanh) Forward(x *autograd.Var) *autograd.Var { return autograd.Tanh(x) }
