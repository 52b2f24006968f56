package kasmina

import (
	"fmt"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// Alpha is a blend weight: one scalar for the whole batch, or a
// per-sample Var broadcastable against the activation ([B, 1, 1, 1] for
// cnn, [B, 1] for mlp) for fused validation of several alpha
// configurations in one batched pass. Either is clamped to [0, 1] by the
// blends.
type Alpha struct {
	// Scalar is used when PerSample is nil.
	Scalar float64
	// PerSample, when set, overrides Scalar.
	PerSample *autograd.Var
}

// ScalarAlpha returns the scalar blend weight a.
func ScalarAlpha(a float64) Alpha { return Alpha{Scalar: a} }

// SampleAlpha returns a per-sample blend weight.
func SampleAlpha(v *autograd.Var) Alpha { return Alpha{PerSample: v} }

// scale returns x·clamp(a, 0, 1).
func (a Alpha) scale(x *autograd.Var) *autograd.Var {
	if a.PerSample != nil {
		return autograd.Mul(x, autograd.Clamp(a.PerSample, 0, 1))
	}
	return autograd.MulScalar(x, clamp01(a.Scalar))
}

// BlendAdd is the ADD blend, the convex cross-fade
// out = h + α(s − h) = lerp(h, s, α): d/dh = 1 − α, d/ds = α. It is the
// host exactly at α = 0 and the seed at α = 1; a NaN or Inf in either
// input propagates (0·NaN is NaN), even at α = 0.
func BlendAdd(h, s *autograd.Var, a Alpha) *autograd.Var {
	return autograd.Add(h, a.scale(autograd.Sub(s, h)))
}

// BlendMultiply is the MULTIPLY blend, a valve on the host:
// out = h·(1 + α·tanh(s − x)) where x is the seed's input. It is the host
// exactly at α = 0 or when the seed is the identity (s = x), affine in α,
// and the multiplier stays in [1 − α, 1 + α].
func BlendMultiply(h, s, seedInput *autograd.Var, a Alpha) *autograd.Var {
	m := autograd.Tanh(autograd.Sub(s, seedInput))
	return autograd.Mul(h, autograd.AddScalar(a.scale(m), 1))
}

// BlendGate is the GATE blend: ADD with the effective weight
// α_eff = clamp(clamp(α)·clamp(gate, 0, 1), 0, 1) per sample, where gate
// is a GatedBlend's output ([B, 1, 1, 1] or [B, 1]).
func BlendGate(h, s, gate *autograd.Var, a Alpha) *autograd.Var {
	eff := autograd.Clamp(a.scale(autograd.Clamp(gate, 0, 1)), 0, 1)
	return autograd.Add(h, autograd.Mul(autograd.Sub(s, h), eff))
}

// StraightThrough is the TRAINING-stage blend at α = 0:
// out = h + (s − detach(s)). Its value is h exactly (for finite s) while
// the seed still receives the full output gradient, and the host's
// gradient through out is the identity, the same as without the seed.
func StraightThrough(h, s *autograd.Var) *autograd.Var {
	return autograd.StraightThrough(h, s)
}

// GatedBlendOptions configure a GatedBlend.
type GatedBlendOptions struct {
	// Channels is C of the activation; required, > 0.
	Channels int
	// Topology is "cnn" (input [B, C, H, W]) or "mlp" ([B, C]);
	// required.
	Topology string
	// RNG initialises the weights; nil means tensor.NewRNG(0).
	RNG *rand.Rand
	// DType of the parameters; zero means F32.
	DType tensor.DType
}

// GatedBlend is the GATE algorithm's learned per-sample gate: pool the
// activation to [B, C] (mean over H and W for cnn), Linear(C, max(8, C/4))
// → ReLU → Linear(·, 1) → Sigmoid, reshaped to [B, 1, 1, 1] (cnn) or
// [B, 1] (mlp) so that it broadcasts over the activation.
type GatedBlend struct {
	nn.Composite
	fc1, fc2 *nn.Linear
	opts     GatedBlendOptions
}

// NewGatedBlend builds a gate; invalid options are an error.
func NewGatedBlend(o GatedBlendOptions) (*GatedBlend, error) {
	if o.Channels <= 0 {
		return nil, fmt.Errorf("kasmina: GatedBlend: Channels must be > 0, got %d", o.Channels)
	}
	if o.Topology != TopologyCNN && o.Topology != TopologyMLP {
		return nil, fmt.Errorf("kasmina: GatedBlend: unknown topology %q (cnn, mlp)", o.Topology)
	}
	if o.RNG == nil {
		o.RNG = tensor.NewRNG(0)
	}
	hidden := max(8, o.Channels/4)
	fc1, err := nn.NewLinear(o.RNG, nn.LinearOptions{In: o.Channels, Out: hidden, DType: o.DType})
	if err != nil {
		return nil, fmt.Errorf("kasmina: GatedBlend: %w", err)
	}
	fc2, err := nn.NewLinear(o.RNG, nn.LinearOptions{In: hidden, Out: 1, DType: o.DType})
	if err != nil {
		return nil, fmt.Errorf("kasmina: GatedBlend: %w", err)
	}
	g := &GatedBlend{fc1: fc1, fc2: fc2, opts: o}
	g.Register("fc1", fc1)
	g.Register("fc2", fc2)
	return g, nil
}

// Options returns the options the gate was built with.
func (g *GatedBlend) Options() GatedBlendOptions { return g.opts }

// checkInput reports an input whose rank or width does not fit the gate.
func (g *GatedBlend) checkInput(x *autograd.Var) error {
	want := 2
	if g.opts.Topology == TopologyCNN {
		want = 4
	}
	if s := x.Shape(); len(s) != want || s[1] != g.opts.Channels {
		return fmt.Errorf("kasmina: GatedBlend(%s, %d channels) got input of shape %v (want rank %d with %d channels)", g.opts.Topology, g.opts.Channels, s, want, g.opts.Channels)
	}
	return nil
}

// Forward returns the gate in (0, 1) per sample. It panics on an input of
// the wrong rank or width for its topology (a programming error; Slot
// checks shapes before calling it).
func (g *GatedBlend) Forward(x *autograd.Var) *autograd.Var {
	if err := g.checkInput(x); err != nil {
		panic(err.Error())
	}
	pooled := x
	if g.opts.Topology == TopologyCNN {
		pooled = autograd.Mean(x, []int{2, 3}, false)
	}
	out := autograd.Sigmoid(g.fc2.Forward(g.fc1.ForwardRelu(pooled)))
	b := x.Shape()[0]
	if g.opts.Topology == TopologyCNN {
		return autograd.Reshape(out, b, 1, 1, 1)
	}
	return autograd.Reshape(out, b, 1)
}
