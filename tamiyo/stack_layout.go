package tamiyo

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The message-passing layers' and the context heads' weights, laid out
// for their joined products. In inference on a GPU each SAGE and GAT
// layer multiplies a node type's features by every weight that reads them
// at once, with the weights stacked by rows (autograd.LinearStacks,
// autograd.SumsStacks), and the heads on the context run as one product
// per layer (autograd.ReluHeads).
// Stacking copies the weights at every forward — most of the policy's
// 27 MB at its default widths — unless they already lie one after
// another in one tensor, in the stack's order: then the stack is a view
// of them (autograd.StackRows). Policy.To lays them out so on a
// launch-bound device. Everything else is as before: each weight keeps
// its Var, its name and its shape, and checkpoints, state dicts and
// optimizers see the same parameters. An optimizer's arena copies the
// weights into its own buffers in parameter order, which is not the
// stacks' order, so a policy under an optimizer copies its stacks again
// (as every policy did before); a policy loaded for inference does not.

// stackAnywhere lays the weights out on any device but the CPU (tests:
// sim is not launch-bound).
var stackAnywhere bool

// stackOn reports whether Policy.To lays the weights out on dev: never
// on the CPU, which keeps its products separate.
func stackOn(dev tensor.Device) bool {
	if dev.IsCPU() {
		return false
	}
	if stackAnywhere {
		return true
	}
	be, err := kernels.Lookup(dev)
	if err != nil {
		return false
	}
	lb, ok := be.(kernels.LaunchBounder)
	return ok && lb.LaunchBound()
}

// stackGroups returns the groups of weights the message-passing layers
// stack when every relation has edges, in each group's stacking order,
// then the context heads' first layers' weights and biases, which
// autograd.ReluHeads stacks in head order (their second layers, padded
// to the widest head with zero rows, are stacked by a copy: about 4 % of
// the heads' weights at the default widths).
func (p *Policy) stackGroups() [][]*autograd.Var {
	var gs [][]*autograd.Var
	for _, l := range p.sage {
		gs = append(gs, l.stacks()...)
	}
	for _, l := range p.gat {
		gs = append(gs, l.stacks()...)
	}
	var w1s, b1s []*autograd.Var
	for _, h := range p.contextHeads() {
		w1s, b1s = append(w1s, h.W1), append(b1s, h.B1)
	}
	return append(gs, w1s, b1s)
}

// laidOut reports whether g's weights are layOutStacks' views: each a
// view, one after another in one storage that holds exactly them.
func laidOut(g []*autograd.Var) bool {
	if len(g) < 2 {
		return false
	}
	st, off, n := g[0].Value.Storage(), g[0].Value.Offset(), 0
	for _, w := range g {
		v := w.Value
		if v.OwnsStorage() || v.Storage() != st || v.Offset() != off+n || !v.IsContiguous() {
			return false
		}
		n += v.Numel()
	}
	return off == 0 && st.Len() == n
}

// layOutStacks puts every group of two or more weights that own their
// storage into one new tensor on the policy's device, one after another
// in the group's order (a device copy of each), and points each weight's
// Value at its part. A group already laid out, or whose weights an
// optimizer's arena holds, stays as it is.
func (p *Policy) layOutStacks() error {
	dev := p.Device()
	be, err := kernels.Lookup(dev)
	if err != nil {
		return err
	}
groups:
	for _, g := range p.stackGroups() {
		if len(g) < 2 || laidOut(g) {
			continue
		}
		dt, n := g[0].Value.DType(), 0
		for _, w := range g {
			if !w.Value.OwnsStorage() || w.Value.DType() != dt {
				continue groups // an optimizer's arena, or mixed dtypes: copied per forward
			}
			n += w.Value.Numel()
		}
		buf, err := tensor.EmptyOn(dev, dt, n)
		if err != nil {
			return fmt.Errorf("laying out the stacked weights: %w", err)
		}
		off := 0
		for _, w := range g {
			v := buf.Narrow(0, off, w.Value.Numel()).Reshape(w.Shape()...)
			be.Copy(v, w.Value)
			w.Value = v
			off += v.Numel()
		}
	}
	return nil
}

// unstack gives every weight that layOutStacks laid out storage of its
// own again (a device copy), so that nn.To can move it. A weight an
// optimizer's arena has taken over is left where it is (nn.To then
// refuses to move it, as for any policy under an optimizer).
func (p *Policy) unstack() error {
	dev := p.Device()
	var be kernels.Backend
	for _, g := range p.stackGroups() {
		if !laidOut(g) {
			continue
		}
		if be == nil {
			var err error
			if be, err = kernels.Lookup(dev); err != nil {
				return err
			}
		}
		for _, w := range g {
			own, err := tensor.EmptyOn(dev, w.Value.DType(), w.Shape()...)
			if err != nil {
				return fmt.Errorf("giving a stacked weight its own storage: %w", err)
			}
			be.Copy(own, w.Value)
			w.Value = own
		}
	}
	return nil
}
