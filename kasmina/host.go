package kasmina

import (
	"errors"
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
)

// Topologies of the hosts, matching the blueprint catalog's.
const (
	TopologyCNN = "cnn"
	TopologyMLP = "mlp"
)

// ErrRouting is wrapped by the errors of ForwardToSegment and
// ForwardFromSegment for an unknown slot or a route that does not move
// forward along the host's timeline.
var ErrRouting = errors.New("invalid segment routing")

// Host is a network with seed slots: named cut points along its forward
// pass where a seed can be spliced in. A host's full Forward equals
// ForwardToSegment to any slot followed by ForwardFromSegment from it,
// bit for bit.
type Host interface {
	nn.Module
	// Topology is "cnn" (activations [N, C, H, W]) or "mlp" ([N, C]).
	Topology() string
	// InjectionSpecs describes every slot, in action order (row-major
	// slot ids: r0c0, r0c1, …, r1c0, …).
	InjectionSpecs() []leyline.InjectionSpec
	// SegmentChannels maps each slot id to the width C of the activation
	// passing through it.
	SegmentChannels() map[string]int
	// TimelineOrder lists the slot ids in execution order, the order the
	// forward pass reaches them.
	TimelineOrder() []string
	// ForwardToSegment runs x from the slot from ("" = the host's input)
	// up to and including slot, returning the activation at slot. slot
	// must come strictly after from on the timeline.
	ForwardToSegment(slot string, x *autograd.Var, from string) (*autograd.Var, error)
	// ForwardFromSegment runs the activation x at slot through the rest
	// of the host to its output.
	ForwardFromSegment(slot string, x *autograd.Var) (*autograd.Var, error)
	// Blocks describes the host's blocks in depth order (for policies
	// that read the host as a graph of layers).
	Blocks() []leyline.BlockInfo
}

// step maps the activation at one cut point to the next.
type step func(x *autograd.Var) *autograd.Var

// segments is a host's forward pass cut at its slots: steps[k] leads from
// cut k−1 (the input for k = 0) to cut k, and features then head from the
// last cut to the output (tail). Every route runs the same step functions
// in the same order, which is what makes the split forward bitwise equal
// to the full one.
type segments struct {
	cuts     []string
	steps    []step
	features step
	head     *nn.Linear
	// fused, when non-nil, holds for step k (nil elsewhere) one step that
	// computes steps k and k+1 together, for a run that crosses the cut
	// between them without stopping there (a CNN block and its pool).
	fused []step
}

// run applies steps lo..hi−1 to x, a fused pair where one is defined.
func (s *segments) run(x *autograd.Var, lo, hi int) *autograd.Var {
	for k := lo; k < hi; {
		if k+1 < hi && k < len(s.fused) && s.fused[k] != nil {
			x = s.fused[k](x)
			k += 2
			continue
		}
		x = s.steps[k](x)
		k++
	}
	return x
}

func (s *segments) index(slot string) (int, error) {
	for i, c := range s.cuts {
		if c == slot {
			return i, nil
		}
	}
	return -1, fmt.Errorf("kasmina: %w: unknown slot %q (host slots: %v)", ErrRouting, slot, s.cuts)
}

// tail runs the activation at the last cut to the output: the features
// and the head.
func (s *segments) tail(x *autograd.Var) *autograd.Var { return s.head.Forward(s.features(x)) }

func (s *segments) forward(x *autograd.Var) *autograd.Var {
	return s.tail(s.run(x, 0, len(s.steps)))
}

func (s *segments) to(slot string, x *autograd.Var, from string) (out *autograd.Var, err error) {
	end, err := s.index(slot)
	if err != nil {
		return nil, err
	}
	start := -1
	if from != "" {
		if start, err = s.index(from); err != nil {
			return nil, err
		}
	}
	if end <= start {
		return nil, fmt.Errorf("kasmina: %w: cannot route from %q to %q (the target must come after the source on the timeline %v)", ErrRouting, from, slot, s.cuts)
	}
	if x == nil {
		return nil, errors.New("kasmina: ForwardToSegment of a nil input")
	}
	err = guard("ForwardToSegment", func() { x = s.run(x, start+1, end+1) })
	return x, err
}

func (s *segments) from(slot string, x *autograd.Var) (*autograd.Var, error) {
	return s.fromThrough(slot, x, "ForwardFromSegment", s.tail)
}

// fromThrough runs the activation x at slot through the remaining steps
// and then last (tail, or features alone); op names the call.
func (s *segments) fromThrough(slot string, x *autograd.Var, op string, last step) (*autograd.Var, error) {
	i, err := s.index(slot)
	if err != nil {
		return nil, err
	}
	if x == nil {
		return nil, errors.New("kasmina: " + op + " of a nil input")
	}
	err = guard(op, func() { x = last(s.run(x, i+1, len(s.steps))) })
	return x, err
}

// guard runs f and turns a panic (a layer rejecting the shape of user
// input) into an error, at this user-input boundary.
func guard(op string, f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("kasmina: %s: %v", op, r)
		}
	}()
	f()
	return nil
}

// copyChannels returns a copy of a slot → channels map.
func copyChannels(specs []leyline.InjectionSpec) map[string]int {
	out := make(map[string]int, len(specs))
	for _, s := range specs {
		out[s.SlotID] = s.Channels
	}
	return out
}

// copyBlocks returns a deep copy of block descriptions.
func copyBlocks(bs []leyline.BlockInfo) []leyline.BlockInfo {
	out := make([]leyline.BlockInfo, len(bs))
	for i, b := range bs {
		out[i] = leyline.BlockInfo{Depth: b.Depth, Channels: b.Channels, Slots: append([]string(nil), b.Slots...)}
	}
	return out
}

// hostBase is what CNNHost and MLPHost share: the module tree, the slots
// in action order (specs), the block descriptions, and the routing
// between slots, with the Host methods over them.
type hostBase struct {
	nn.Composite
	specs    []leyline.InjectionSpec
	blocks   []leyline.BlockInfo
	segments segments
}

// Forward maps the host's input to logits [N, Classes].
func (h *hostBase) Forward(x *autograd.Var) *autograd.Var { return h.segments.forward(x) }

// InjectionSpecs returns the slots in action order (row-major: r0c0 …,
// then r1c0 … where the host has a second row).
func (h *hostBase) InjectionSpecs() []leyline.InjectionSpec {
	return append([]leyline.InjectionSpec(nil), h.specs...)
}

// SegmentChannels maps each slot to its channel count.
func (h *hostBase) SegmentChannels() map[string]int { return copyChannels(h.specs) }

// TimelineOrder returns the slots in execution order (for a CNNHost
// interleaved by block: r0c0, r1c0, r0c1, r1c1, …).
func (h *hostBase) TimelineOrder() []string { return append([]string(nil), h.segments.cuts...) }

// ForwardToSegment runs x from slot from ("" = the input) to slot.
func (h *hostBase) ForwardToSegment(slot string, x *autograd.Var, from string) (*autograd.Var, error) {
	return h.segments.to(slot, x, from)
}

// ForwardFromSegment runs the activation at slot to the logits.
func (h *hostBase) ForwardFromSegment(slot string, x *autograd.Var) (*autograd.Var, error) {
	return h.segments.from(slot, x)
}

// ForwardWhole runs x through the whole host, as ForwardToSegment to
// any slot and ForwardFromSegment from it would, but without stopping at
// a cut (so that steps on either side of every cut may fuse).
func (h *hostBase) ForwardWhole(x *autograd.Var) (out *autograd.Var, err error) {
	if x == nil {
		return nil, errors.New("kasmina: ForwardWhole of a nil input")
	}
	err = guard("ForwardWhole", func() { out = h.segments.forward(x) })
	return out, err
}

// wholeForwarder is implemented by hosts that run their whole forward in
// one call (hostBase); MorphogeneticModel uses it when no slot is in the
// way.
type wholeForwarder interface {
	ForwardWhole(x *autograd.Var) (*autograd.Var, error)
}

// LinearHead is implemented by hosts whose output layer is a linear
// classifier (nn.Linear) over the features before it — a CNNHost's
// global average pool, an MLPHost's last hidden layer — so that a
// trainer can compute the head together with its loss
// (MorphogeneticModel.ForwardFeatures, autograd.LinearCrossEntropyCount)
// instead of the logits and then the loss.
type LinearHead interface {
	// Head returns the output layer.
	Head() *nn.Linear
	// FeaturesFromSegment is ForwardFromSegment stopping before the
	// head: Head().Forward of its result is ForwardFromSegment's.
	FeaturesFromSegment(slot string, x *autograd.Var) (*autograd.Var, error)
}

// Head implements LinearHead.
func (h *hostBase) Head() *nn.Linear { return h.segments.head }

// FeaturesFromSegment implements LinearHead.
func (h *hostBase) FeaturesFromSegment(slot string, x *autograd.Var) (*autograd.Var, error) {
	return h.segments.fromThrough(slot, x, "FeaturesFromSegment", h.segments.features)
}

// wholeFeaturer is implemented by hosts that run their whole forward up
// to the head in one call (hostBase), as wholeForwarder for the logits.
type wholeFeaturer interface {
	featuresWhole(x *autograd.Var) (*autograd.Var, error)
}

// featuresWhole is ForwardWhole stopping before the head.
func (h *hostBase) featuresWhole(x *autograd.Var) (out *autograd.Var, err error) {
	if x == nil {
		return nil, errors.New("kasmina: ForwardWhole of a nil input")
	}
	s := &h.segments
	err = guard("ForwardWhole", func() { out = s.features(s.run(x, 0, len(s.steps))) })
	return out, err
}

// Blocks describes the host's blocks (depth, channels, attached slots).
func (h *hostBase) Blocks() []leyline.BlockInfo { return copyBlocks(h.blocks) }

// PrePoolSlots returns the ids of h's slots on the pre-pool surface (one
// per CNN block, before its pool), in action order: the slots the
// standard runs grow seeds in.
func PrePoolSlots(h Host) []string {
	var slots []string
	for _, s := range h.InjectionSpecs() {
		if s.Surface == leyline.SurfacePrePool {
			slots = append(slots, s.SlotID)
		}
	}
	return slots
}
