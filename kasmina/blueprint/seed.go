package blueprint

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/nn"
)

// FinalZeroer is implemented by seeds that can zero their final affine
// (Linear or Conv) layer in place; Build calls it when Options.ZeroFinal
// is set. A custom blueprint implements it to take part in MULTIPLY
// germination.
type FinalZeroer interface {
	ZeroFinal()
}

// Seed is the module every built-in blueprint builds: its layers are
// named children of an nn.Composite (so parameters carry state-dict names
// such as "conv.weight" and "gn.bias") and its forward rule is the
// blueprint's formula. Forward panics, as nn layers do, on an input whose
// layout does not match the slot: [N, Channels, H, W] for cnn seeds and
// [..., Channels] for mlp seeds.
type Seed struct {
	nn.Composite
	spec     string // "topology:name"
	channels int
	spatial  bool // cnn: channels on axis 1 of a rank-4 input
	forward  func(x *autograd.Var) *autograd.Var
	// zeroFinal zeroes the final affine layer; nil when there is none.
	zeroFinal func()
}

// newSeed returns an empty seed for the blueprint key at width channels;
// the factory registers layers and sets forward.
func newSeed(topology, name string, channels int) *Seed {
	return &Seed{spec: topology + ":" + name, channels: channels, spatial: topology == TopologyCNN}
}

// Blueprint returns the seed's catalog key, "topology:name".
func (s *Seed) Blueprint() string { return s.spec }

// Channels returns the activation width the seed was built for.
func (s *Seed) Channels() int { return s.channels }

// Forward applies the blueprint to x; the result has x's shape.
func (s *Seed) Forward(x *autograd.Var) *autograd.Var {
	shape := x.Shape()
	if s.spatial {
		if len(shape) != 4 || shape[1] != s.channels {
			panic(fmt.Sprintf("blueprint: %s seed (%d channels) got input of shape %v, want [N %d H W]", s.spec, s.channels, shape, s.channels))
		}
	} else if len(shape) == 0 || shape[len(shape)-1] != s.channels {
		panic(fmt.Sprintf("blueprint: %s seed (%d channels) got input of shape %v, want [... %d]", s.spec, s.channels, shape, s.channels))
	}
	return s.forward(x)
}

// ZeroFinal zeroes the final affine layer in place (see each blueprint's
// description for which layer that is); seeds without one are unchanged.
func (s *Seed) ZeroFinal() {
	if s.zeroFinal != nil {
		s.zeroFinal()
	}
}

// ParamCount returns the number of trainable scalars of m.
func ParamCount(m nn.Module) int {
	n := 0
	for _, p := range m.Parameters() {
		n += p.Value.Numel()
	}
	return n
}

// zeroAffine returns a function that zeroes weight and, when present,
// bias of a final Linear or Conv layer.
func zeroAffine(weight, bias *autograd.Var) func() {
	return func() {
		weight.Value.Fill(0)
		if bias != nil {
			bias.Value.Fill(0)
		}
	}
}
