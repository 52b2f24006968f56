package blueprint

import (
	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/nn"
)

// LoRA ranks of the mlp catalog (G2 transformer lora / lora_large).
const (
	loraRank      = 8
	loraLargeRank = 32
)

// mlpCatalog is the seed catalog for MLPHost activations [N, C] (any
// leading axes work: every layer acts on the last one). It follows the G2
// transformer table minus the attention blueprints; its estimates are that
// table's, which hold at MLPReferenceChannels = 384.
func mlpCatalog() []Spec {
	return []Spec{
		{TopologyMLP, "noop", 0,
			"identity, no parameters", newNoop(TopologyMLP)},
		{TopologyMLP, "norm", 800,
			"y = x + tanh(s)·(LN(x) − x), scalar s = 0 at init (starts as identity); no final affine layer",
			newMLPNorm},
		{TopologyMLP, "lora", 6000,
			"y = x + up(down x), rank 8, no biases; up zero-initialised (starts as identity)",
			newLoRA("lora", loraRank)},
		{TopologyMLP, "lora_large", 25000,
			"y = x + up(down x), rank 32, no biases; up zero-initialised (starts as identity)",
			newLoRA("lora_large", loraLargeRank)},
		{TopologyMLP, "mlp_small", 591000,
			"y = x + fc2(GELU(fc1 x)), hidden 2C; fc2 zero-initialised (starts as identity)",
			newMLP("mlp_small", 2)},
		{TopologyMLP, "mlp", 1200000,
			"y = x + fc2(GELU(fc1 x)), hidden 4C; fc2 zero-initialised (starts as identity)",
			newMLP("mlp", 4)},
	}
}

// newMLPNorm: y = x + tanh(s)·(LN(x) − x) with LayerNorm over the last
// axis; s = 0 makes the seed the identity at germination.
func newMLPNorm(o Options) (nn.Module, error) {
	l := &layers{opts: o}
	ln := l.layerNorm(o.Channels)
	if l.err != nil {
		return nil, l.err
	}
	s := newSeed(TopologyMLP, "norm", o.Channels)
	mix := autograd.Param(l.scalar(0))
	s.RegisterParameter("scale", mix)
	s.Register("ln", ln)
	s.forward = func(x *autograd.Var) *autograd.Var {
		return autograd.ChannelAxpy(x, autograd.Tanh(mix), autograd.Sub(ln.Forward(x), x))
	}
	return s, nil
}

// newLoRA returns the factory of a low-rank residual adapter of the given
// rank; up starts at zero so the seed is the identity and down still gets
// no gradient until up moves (as in LoRA).
func newLoRA(name string, rank int) Factory {
	return func(o Options) (nn.Module, error) {
		l := &layers{opts: o}
		down := l.linear(o.Channels, rank, true)
		up := l.linear(rank, o.Channels, true)
		if l.err != nil {
			return nil, l.err
		}
		up.Weight.Value.Fill(0)
		s := newSeed(TopologyMLP, name, o.Channels)
		s.Register("down", down)
		s.Register("up", up)
		s.forward = func(x *autograd.Var) *autograd.Var {
			return autograd.Add(x, up.Forward(down.Forward(x)))
		}
		s.zeroFinal = zeroAffine(up.Weight, nil)
		return s, nil
	}
}

// newMLP returns the factory of a residual two-layer perceptron with
// hidden width expansion·C and exact (erf) GELU, PyTorch's nn.GELU
// default; fc2 (weight and bias) starts at zero.
func newMLP(name string, expansion int) Factory {
	return func(o Options) (nn.Module, error) {
		c := o.Channels
		l := &layers{opts: o}
		fc1 := l.linear(c, expansion*c, false)
		fc2 := l.linear(expansion*c, c, false)
		if l.err != nil {
			return nil, l.err
		}
		zero := zeroAffine(fc2.Weight, fc2.Bias)
		zero()
		s := newSeed(TopologyMLP, name, c)
		s.Register("fc1", fc1)
		s.Register("fc2", fc2)
		s.forward = func(x *autograd.Var) *autograd.Var {
			return autograd.Add(x, fc2.Forward(autograd.Gelu(fc1.Forward(x))))
		}
		s.zeroFinal = zero
		return s, nil
	}
}
