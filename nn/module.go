package nn

import (
	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// Module is a differentiable function with named state.
type Module interface {
	// Forward computes the module's output for input x.
	Forward(x *autograd.Var) *autograd.Var
	// Parameters returns the trainable parameters in the order of
	// NamedParameters.
	Parameters() []*autograd.Var
	// NamedParameters returns the parameters with their state-dict
	// names, in a fixed order (a module's own parameters first, then
	// each child's, in registration order, as PyTorch does).
	NamedParameters() []Named
	// NamedBuffers returns the non-trainable state (such as BatchNorm's
	// running statistics) with its state-dict names, in a fixed order.
	NamedBuffers() []NamedBuffer
	// SetTraining switches between training (true) and evaluation
	// (false) behaviour, for the module and all its children.
	SetTraining(training bool)
	// Training reports whether the module is in training mode.
	Training() bool
}

// Named is a parameter with its state-dict name.
type Named struct {
	Name string
	Var  *autograd.Var
}

// NamedBuffer is a buffer with its state-dict name. The tensor is the
// module's own: writing to it changes the module.
type NamedBuffer struct {
	Name   string
	Tensor *tensor.Tensor
}

// Train puts m and its children in training mode and returns m.
func Train[M Module](m M) M {
	m.SetTraining(true)
	return m
}

// Eval puts m and its children in evaluation mode and returns m.
func Eval[M Module](m M) M {
	m.SetTraining(false)
	return m
}

// varsOf returns the Vars of named parameters, in order.
func varsOf(ns []Named) []*autograd.Var {
	out := make([]*autograd.Var, len(ns))
	for i, n := range ns {
		out[i] = n.Var
	}
	return out
}

// leaf is the state every layer without children shares: its own
// parameters and buffers and the train/eval flag. eval rather than
// training so that the zero value is in training mode, as a fresh PyTorch
// module is.
type leaf struct {
	params  []Named
	buffers []NamedBuffer
	eval    bool
}

// Parameters returns the layer's parameters in the order of
// NamedParameters.
func (l *leaf) Parameters() []*autograd.Var { return varsOf(l.params) }

// NamedParameters returns the layer's parameters ("weight", "bias", ...).
func (l *leaf) NamedParameters() []Named { return append([]Named(nil), l.params...) }

// NamedBuffers returns the layer's buffers (none for most layers).
func (l *leaf) NamedBuffers() []NamedBuffer { return append([]NamedBuffer(nil), l.buffers...) }

// SetTraining switches between training and evaluation behaviour.
func (l *leaf) SetTraining(training bool) { l.eval = !training }

// Training reports whether the layer is in training mode (the default).
func (l *leaf) Training() bool { return !l.eval }

// addParam wraps t as a parameter named name and records it.
func (l *leaf) addParam(name string, t *tensor.Tensor) *autograd.Var {
	v := autograd.Param(t)
	v.Name = name
	l.params = append(l.params, Named{Name: name, Var: v})
	return v
}

// addBuffer records t as a buffer named name.
func (l *leaf) addBuffer(name string, t *tensor.Tensor) *tensor.Tensor {
	l.buffers = append(l.buffers, NamedBuffer{Name: name, Tensor: t})
	return t
}
