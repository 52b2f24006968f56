package autograd

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	_ "github.com/esper-go/esper/kernels/cpu" // the CPU backend is always available
	_ "github.com/esper-go/esper/kernels/sim" // and the strict simulated device (tensor.KindSim)
	"github.com/esper-go/esper/tensor"
)

// Var is a tensor in the autograd graph.
type Var struct {
	// Value is the forward value.
	Value *tensor.Tensor
	// Grad accumulates the gradient of Backward's root with respect to
	// this variable (leaves, and non-leaves with RetainGrad). An optimizer
	// may point it at a view of its gradient arena before the first
	// backward; Backward then accumulates into that memory in place.
	Grad *tensor.Tensor
	// Name labels parameters (nn sets it to the parameter path).
	Name string

	requiresGrad bool
	retainGrad   bool
	node         *node
	// hooks are the post-accumulate hooks (a pointer: few Vars have
	// any, and every op result is a Var).
	hooks *[]func(*Var)
}

// NewVar wraps a tensor as a leaf that does not require a gradient.
func NewVar(t *tensor.Tensor) *Var { return &Var{Value: t} }

// Param wraps a tensor as a leaf that requires a gradient.
func Param(t *tensor.Tensor) *Var { return &Var{Value: t, requiresGrad: true} }

// Const is NewVar under a name that reads well for inputs and targets.
func Const(t *tensor.Tensor) *Var { return NewVar(t) }

// RequiresGrad reports whether gradients flow to v.
func (v *Var) RequiresGrad() bool { return v.requiresGrad }

// SetRequiresGrad marks a leaf as requiring a gradient (or not). It
// panics on a non-leaf, whose requirement follows from its inputs.
func (v *Var) SetRequiresGrad(b bool) *Var {
	if v.node != nil {
		panic(fmt.Sprintf("autograd: SetRequiresGrad on the non-leaf output of %s", v.node.op))
	}
	v.requiresGrad = b
	return v
}

// IsLeaf reports whether v was created by the user rather than by an op.
func (v *Var) IsLeaf() bool { return v.node == nil }

// RetainGrad asks Backward to store the gradient of a non-leaf in Grad.
func (v *Var) RetainGrad() *Var { v.retainGrad = true; return v }

// Shape is Value.Shape().
func (v *Var) Shape() []int { return v.Value.Shape() }

// DType is Value.DType().
func (v *Var) DType() tensor.DType { return v.Value.DType() }

// Item is Value.Item() (it synchronises on a device).
func (v *Var) Item() float64 { return v.Value.Item() }

// Op names the op that produced v ("" for a leaf).
func (v *Var) Op() string {
	if v.node == nil {
		return ""
	}
	return v.node.op
}

// ZeroGrad fills Grad with zeros in place (through the backend, so it is
// captured), or does nothing when Grad is nil.
func (v *Var) ZeroGrad() {
	if v.Grad != nil {
		backendOf(v.Grad).Fill(v.Grad, 0)
	}
}

// RegisterPostAccumulateHook registers f to run after Backward has
// accumulated into v.Grad (leaves only), like PyTorch's
// register_post_accumulate_grad_hook. Hooks run in registration order.
// When f runs, v.Grad holds v's whole gradient of the pass, and so do
// the Grads of the leaves Backward visited before v; a leaf visited
// after v may hold part of its gradient already (an op adds into a
// leaf's Grad as it runs where the leaf takes it: a linear layer's
// weight, say), so f should not read or replace other leaves' Grads.
func (v *Var) RegisterPostAccumulateHook(f func(*Var)) {
	if v.node != nil {
		panic("autograd: post-accumulate hooks are for leaves; this Var is the output of " + v.node.op)
	}
	if v.hooks == nil {
		v.hooks = new([]func(*Var))
	}
	*v.hooks = append(*v.hooks, f)
}

// HasPostAccumulateHooks reports whether any post-accumulate hook is
// registered on v: a caller that would add to v's gradient outside
// Backward (optim.SGD.LinearCEStep) must leave such a Var to Backward,
// which runs them.
func (v *Var) HasPostAccumulateHooks() bool { return v.hooks != nil && len(*v.hooks) > 0 }

// Detach returns a leaf sharing v's value with no gradient history.
func Detach(v *Var) *Var { return &Var{Value: v.Value, Name: v.Name} }

func (v *Var) String() string {
	return fmt.Sprintf("Var(%s %v %v grad=%v op=%q)", v.Name, v.Value.DType(), v.Value.Shape(), v.requiresGrad, v.Op())
}

// backendOf returns the backend that computes on t's device.
func backendOf(t *tensor.Tensor) kernels.Backend { return kernels.For(t.Device()) }
