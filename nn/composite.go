package nn

import (
	"fmt"
	"strings"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// Child is a sub-module with the name its parameters are prefixed with.
type Child struct {
	Name   string
	Module Module
}

// Composite holds the named children (and optionally own parameters and
// buffers) of a module built from other modules. Embed it in a struct
// that supplies Forward to get the rest of Module:
//
//	type Net struct {
//		nn.Composite
//		fc1, fc2 *nn.Linear
//	}
//
//	func (n *Net) Forward(x *autograd.Var) *autograd.Var {
//		return n.fc2.Forward(autograd.Relu(n.fc1.Forward(x)))
//	}
//
// and register the children by name in the constructor
// (n.Register("fc1", n.fc1)); their parameters are then named
// "fc1.weight", "fc1.bias", ... The zero value is an empty composite in
// training mode.
type Composite struct {
	params   []Named
	buffers  []NamedBuffer
	children []Child
	eval     bool
}

// Register adds m as the child called name and renames the Vars of its
// parameters to their full path below this composite. It panics on an
// empty name, a name containing '.', or a name already used (programming
// errors, as in PyTorch's add_module).
func (c *Composite) Register(name string, m Module) {
	c.checkName(name)
	if m == nil {
		panic(fmt.Sprintf("nn: Register(%q) of a nil module", name))
	}
	c.children = append(c.children, Child{Name: name, Module: m})
	for _, p := range m.NamedParameters() {
		p.Var.Name = name + "." + p.Name
	}
}

// RegisterParameter adds a parameter owned by the composite itself.
func (c *Composite) RegisterParameter(name string, v *autograd.Var) {
	c.checkName(name)
	if v == nil {
		panic(fmt.Sprintf("nn: RegisterParameter(%q) of a nil Var", name))
	}
	v.Name = name
	c.params = append(c.params, Named{Name: name, Var: v})
}

// RegisterBuffer adds a buffer owned by the composite itself.
func (c *Composite) RegisterBuffer(name string, t *tensor.Tensor) {
	c.checkName(name)
	if t == nil {
		panic(fmt.Sprintf("nn: RegisterBuffer(%q) of a nil tensor", name))
	}
	c.buffers = append(c.buffers, NamedBuffer{Name: name, Tensor: t})
}

func (c *Composite) checkName(name string) {
	if name == "" || strings.Contains(name, ".") {
		panic(fmt.Sprintf("nn: invalid module or parameter name %q (want non-empty, without '.')", name))
	}
	for _, p := range c.params {
		if p.Name == name {
			panic(fmt.Sprintf("nn: name %q registered twice", name))
		}
	}
	for _, b := range c.buffers {
		if b.Name == name {
			panic(fmt.Sprintf("nn: name %q registered twice", name))
		}
	}
	for _, ch := range c.children {
		if ch.Name == name {
			panic(fmt.Sprintf("nn: name %q registered twice", name))
		}
	}
}

// Children returns the registered children in registration order.
func (c *Composite) Children() []Child { return append([]Child(nil), c.children...) }

// Parameters returns every parameter in the order of NamedParameters.
func (c *Composite) Parameters() []*autograd.Var { return varsOf(c.NamedParameters()) }

// NamedParameters returns the composite's own parameters, then each
// child's prefixed with "<child>.", in registration order.
func (c *Composite) NamedParameters() []Named {
	out := append([]Named(nil), c.params...)
	for _, ch := range c.children {
		for _, p := range ch.Module.NamedParameters() {
			out = append(out, Named{Name: ch.Name + "." + p.Name, Var: p.Var})
		}
	}
	return out
}

// NamedBuffers returns the composite's own buffers, then each child's
// prefixed with "<child>.", in registration order.
func (c *Composite) NamedBuffers() []NamedBuffer {
	out := append([]NamedBuffer(nil), c.buffers...)
	for _, ch := range c.children {
		for _, b := range ch.Module.NamedBuffers() {
			out = append(out, NamedBuffer{Name: ch.Name + "." + b.Name, Tensor: b.Tensor})
		}
	}
	return out
}

// SetTraining switches the composite and every child.
func (c *Composite) SetTraining(training bool) {
	c.eval = !training
	for _, ch := range c.children {
		ch.Module.SetTraining(training)
	}
}

// Training reports whether the composite is in training mode (the
// default).
func (c *Composite) Training() bool { return !c.eval }
