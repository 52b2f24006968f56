package kasmina

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
)

// LinearHostSlot is the id of a LinearHost's one slot, at its input.
const LinearHostSlot = "r0c0"

// LinearHost is a host that is one linear layer — a linear classifier
// over its input, such as a probe or the tolaria reference workload W1 —
// with one slot (LinearHostSlot) at its input, so that it trains through
// a MorphogeneticModel and tolaria.Trainer like any host. Its layer is
// its head (LinearHead): the trainer computes it with its loss
// (autograd.LinearCrossEntropyCount), and takes a whole training step
// over it in one call where that applies (optim.SGD.LinearCEStep: one
// launch on a GPU).
type LinearHost struct {
	*nn.Linear
}

var (
	_ Host       = LinearHost{}
	_ LinearHead = LinearHost{}
)

// NewLinearHost returns lin as a host; lin must not be nil.
func NewLinearHost(lin *nn.Linear) (LinearHost, error) {
	if lin == nil {
		return LinearHost{}, fmt.Errorf("kasmina: NewLinearHost: nil layer")
	}
	return LinearHost{lin}, nil
}

// Topology implements Host: activations are [N, C].
func (h LinearHost) Topology() string { return TopologyMLP }

// InjectionSpecs implements Host: the one slot, at the input.
func (h LinearHost) InjectionSpecs() []leyline.InjectionSpec {
	return []leyline.InjectionSpec{{SlotID: LinearHostSlot, Channels: h.in(), Surface: leyline.SurfaceBlockEnd}}
}

// SegmentChannels implements Host.
func (h LinearHost) SegmentChannels() map[string]int { return map[string]int{LinearHostSlot: h.in()} }

// TimelineOrder implements Host.
func (h LinearHost) TimelineOrder() []string { return []string{LinearHostSlot} }

// ForwardToSegment implements Host: the slot sees the input itself.
func (h LinearHost) ForwardToSegment(slot string, x *autograd.Var, from string) (*autograd.Var, error) {
	if slot != LinearHostSlot || from != "" {
		return nil, fmt.Errorf("kasmina: LinearHost routes only from the input to %s (got %q → %q)", LinearHostSlot, from, slot)
	}
	return x, nil
}

// ForwardFromSegment implements Host: the layer.
func (h LinearHost) ForwardFromSegment(slot string, x *autograd.Var) (*autograd.Var, error) {
	if slot != LinearHostSlot {
		return nil, fmt.Errorf("kasmina: LinearHost has no slot %q", slot)
	}
	return h.Linear.Forward(x), nil
}

// Head implements LinearHead: the layer.
func (h LinearHost) Head() *nn.Linear { return h.Linear }

// FeaturesFromSegment implements LinearHead: the head's input is the
// activation at the slot itself.
func (h LinearHost) FeaturesFromSegment(slot string, x *autograd.Var) (*autograd.Var, error) {
	if slot != LinearHostSlot {
		return nil, fmt.Errorf("kasmina: LinearHost has no slot %q", slot)
	}
	return x, nil
}

// Blocks implements Host: one block, the layer.
func (h LinearHost) Blocks() []leyline.BlockInfo {
	return []leyline.BlockInfo{{Depth: 0, Channels: h.Linear.Weight.Shape()[0], Slots: []string{LinearHostSlot}}}
}

// in is the layer's input width.
func (h LinearHost) in() int { return h.Linear.Weight.Shape()[1] }
