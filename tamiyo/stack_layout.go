package tamiyo

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The message-passing layers' weights, laid out for their joined
// products. In inference on a GPU each SAGE and GAT layer multiplies a
// node type's features by every weight that reads them at once, with the
// weights stacked by rows (autograd.LinearStacks, autograd.SumsStacks).
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
// stack when every relation has edges, in each group's stacking order.
func (p *Policy) stackGroups() [][]*autograd.Var {
	var gs [][]*autograd.Var
	for _, l := range p.sage {
		gs = append(gs, l.stacks()...)
	}
	for _, l := range p.gat {
		gs = append(gs, l.stacks()...)
	}
	return gs
}

// layOutStacks puts every group of two or more weights into one new
// tensor on the policy's device, one after another in the group's order
// (a device copy of each), and points each weight's Value at its part.
// The weights must own their storage (not an optimizer's arena).
func (p *Policy) layOutStacks() error {
	dev := p.Device()
	be, err := kernels.Lookup(dev)
	if err != nil {
		return err
	}
	p.stacks = nil
	for _, g := range p.stackGroups() {
		if len(g) < 2 {
			continue
		}
		dt, n := g[0].Value.DType(), 0
		for _, w := range g {
			if !w.Value.OwnsStorage() || w.Value.DType() != dt {
				return fmt.Errorf("laying out the stacked weights: a weight %v %v is a view (an optimizer's arena?) or of another dtype", w.Value.DType(), w.Shape())
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
		p.stacks = append(p.stacks, buf.Storage())
	}
	return nil
}

// unstack gives every weight still in layOutStacks' storages storage of
// its own again (a device copy), so that nn.To can move it. A weight an
// optimizer's arena has taken over is left where it is (nn.To then
// refuses to move it, as for any policy under an optimizer).
func (p *Policy) unstack() error {
	if len(p.stacks) == 0 {
		return nil
	}
	dev := p.Device()
	be, err := kernels.Lookup(dev)
	if err != nil {
		return err
	}
	ours := map[*tensor.Storage]bool{}
	for _, st := range p.stacks {
		ours[st] = true
	}
	for _, g := range p.stackGroups() {
		for _, w := range g {
			if !ours[w.Value.Storage()] {
				continue
			}
			own, err := tensor.EmptyOn(dev, w.Value.DType(), w.Shape()...)
			if err != nil {
				return fmt.Errorf("giving a stacked weight its own storage: %w", err)
			}
			be.Copy(own, w.Value)
			w.Value = own
		}
	}
	p.stacks = nil
	return nil
}
