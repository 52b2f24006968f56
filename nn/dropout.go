package nn

import (
	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// DropoutOptions configure a Dropout layer.
type DropoutOptions struct {
	// P is the probability of zeroing an element, in [0, 1]; zero makes
	// the layer the identity and 1 zeroes everything.
	P float64
	// Seed fixes the sequence of masks.
	Seed uint64
}

// Dropout zeroes each element with probability P in training mode and
// scales the survivors by 1/(1−P) (P = 1 zeroes everything), like PyTorch's nn.Dropout; in
// evaluation mode it is the identity. Masks are a pure function of
// (Seed, call counter, element index), so a seed reproduces a run
// whatever GOMAXPROCS is, and a captured step draws a fresh mask on every
// replay.
type Dropout struct {
	leaf
	opts  DropoutOptions
	state *tensor.Tensor
}

// NewDropout returns a Dropout layer.
func NewDropout(o DropoutOptions) (*Dropout, error) {
	if !(o.P >= 0 && o.P <= 1) {
		return nil, optionsErr("Dropout", "P must be in [0, 1], got %v", o.P)
	}
	return &Dropout{opts: o, state: tensor.FromSlice([]int64{int64(o.Seed), 0})}, nil
}

// MustDropout is NewDropout that panics on invalid options.
func MustDropout(o DropoutOptions) *Dropout { return must(NewDropout(o)) }

// Options returns the options the layer was built with.
func (d *Dropout) Options() DropoutOptions { return d.opts }

// DeviceState implements DeviceStater: the random state moves with the
// module (To).
func (d *Dropout) DeviceState() []*tensor.Tensor { return []*tensor.Tensor{d.state} }

// State returns the layer's random state, an I64 [2] tensor {seed,
// counter} that the kernel advances on every training-mode call. It is
// not part of the state dict (PyTorch keeps none for dropout); save and
// restore it yourself to resume a run mask for mask.
func (d *Dropout) State() *tensor.Tensor { return d.state }

// Forward applies dropout in training mode and returns x unchanged in
// evaluation mode or when P is 0.
func (d *Dropout) Forward(x *autograd.Var) *autograd.Var {
	if !d.Training() || d.opts.P == 0 {
		return x
	}
	return autograd.Dropout(x, d.opts.P, d.state, true)
}
