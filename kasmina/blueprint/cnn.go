package blueprint

import (
	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/nn"
)

// seGateBias is the SE gate's initial logit: σ(3) ≈ 0.95, so the
// attention seed starts close to the identity (G2 attention blueprint).
const seGateBias = 3.0

// cnnCatalog is the G2 cnn blueprint table (esper-reference §2.2) for
// activations [N, C, H, W]. Estimates hold at CNNReferenceChannels; every
// convolution is bias-free (see layers.conv) and every GroupNorm has
// NumGroups(C) groups.
func cnnCatalog() []Spec {
	return []Spec{
		{TopologyCNN, "noop", 0,
			"identity, no parameters", newNoop(TopologyCNN)},
		{TopologyCNN, "norm", 130,
			"y = x + tanh(s)·(GN(x) − x), scalar s = 0 at init (starts as identity); no final affine layer",
			newCNNNorm},
		{TopologyCNN, "attention", 2000,
			"SE channel gate y = x·σ(fc2(ReLU(fc1(GAP x)))), hidden max(1, C/4); fc2 weight zero, bias 3 (gate ≈ 0.95); not residual; ZeroFinal keeps the bias",
			newAttention},
		{TopologyCNN, "depthwise", 4800,
			"y = x + g⊙ReLU(GN(pw1×1(dw3×3 x))), dw a depthwise (grouped) convolution, per-channel output scale g = 1 (0 with ZeroFinal)",
			newDepthwise},
		{TopologyCNN, "bottleneck", 4500,
			"y = x + GN(up1×1(ReLU(conv3×3(ReLU(down1×1 x))))), width max(8, C/4); up zero-initialised (starts as identity)",
			newBottleneck},
		{TopologyCNN, "conv_small", 4200,
			"y = x + g⊙ReLU(GN(conv1×1 x)); output scale g zero-initialised (starts as identity and learns; the reference zeroes the conv, which blocks all gradient)",
			newConvSmall},
		{TopologyCNN, "conv_light", 37000,
			"y = x + g⊙ReLU(GN(conv3×3 x)), per-channel output scale g = 1 (0 with ZeroFinal: identity that still learns)",
			newConvLight},
		{TopologyCNN, "conv_heavy", 74000,
			"y = x + g⊙ReLU(GN2(conv2(ReLU(GN1(conv1 x))))), 3×3 convolutions, per-channel output scale g = 1 (0 with ZeroFinal)",
			newConvHeavy},
	}
}

// newNoop returns the factory of the identity seed of topology.
func newNoop(topology string) Factory {
	return func(o Options) (nn.Module, error) {
		s := newSeed(topology, "noop", o.Channels)
		s.forward = func(x *autograd.Var) *autograd.Var { return x }
		return s, nil
	}
}

// newCNNNorm: y = x + tanh(s)·(GN(x) − x). tanh keeps the mix in (−1, 1)
// and s = 0 makes the seed the identity at germination.
func newCNNNorm(o Options) (nn.Module, error) {
	l := &layers{opts: o}
	gn := l.groupNorm(o.Channels)
	if l.err != nil {
		return nil, l.err
	}
	s := newSeed(TopologyCNN, "norm", o.Channels)
	mix := autograd.Param(l.scalar(0))
	s.RegisterParameter("scale", mix)
	s.Register("gn", gn)
	s.forward = func(x *autograd.Var) *autograd.Var {
		return autograd.ChannelAxpy(x, autograd.Tanh(mix), autograd.Sub(gn.Forward(x), x))
	}
	return s, nil
}

// newAttention is a squeeze-and-excitation gate. fc2's zero weight makes
// the gate σ(3) ≈ 0.95 for every channel at germination whatever the
// input; ZeroFinal leaves the bias at 3 because zeroing it would move the
// gate to 0.5, further from the identity a sigmoid gate cannot reach.
func newAttention(o Options) (nn.Module, error) {
	c := o.Channels
	hidden := max(1, c/4)
	l := &layers{opts: o}
	fc1 := l.linear(c, hidden, false)
	fc2 := l.linear(hidden, c, false)
	if l.err != nil {
		return nil, l.err
	}
	fc2.Weight.Value.Fill(0)
	fc2.Bias.Value.Fill(seGateBias)
	s := newSeed(TopologyCNN, "attention", c)
	s.Register("fc1", fc1)
	s.Register("fc2", fc2)
	s.forward = func(x *autograd.Var) *autograd.Var {
		gate := autograd.Sigmoid(fc2.Forward(autograd.Relu(fc1.Forward(autograd.GlobalAvgPool(x)))))
		return autograd.Mul(x, autograd.Reshape(gate, x.Shape()[0], c, 1, 1))
	}
	s.zeroFinal = func() { fc2.Weight.Value.Fill(0) }
	return s, nil
}

// newDepthwise: a depthwise 3×3 (Groups = C) then a pointwise 1×1 mix.
func newDepthwise(o Options) (nn.Module, error) {
	c := o.Channels
	l := &layers{opts: o}
	dw := l.conv(c, c, 3, c)
	pw := l.conv(c, c, 1, 1)
	gn := l.groupNorm(c)
	if l.err != nil {
		return nil, l.err
	}
	s := newSeed(TopologyCNN, "depthwise", c)
	s.Register("dw", dw)
	s.Register("pw", pw)
	s.Register("gn", gn)
	gain := l.outScale(s, 1)
	s.forward = func(x *autograd.Var) *autograd.Var {
		return autograd.ChannelAxpy(x, gain, gn.ForwardRelu(pw.Forward(dw.Forward(x))))
	}
	s.zeroFinal = zeroAffine(gain, nil)
	return s, nil
}

// newBottleneck squeezes to max(8, C/4) channels, convolves 3×3 there and
// expands back; up starts at zero so GN(0) = 0 and the seed is the
// identity, while GN still passes gradient to up.
func newBottleneck(o Options) (nn.Module, error) {
	c := o.Channels
	w := max(8, c/4)
	l := &layers{opts: o}
	down := l.conv(c, w, 1, 1)
	mid := l.conv(w, w, 3, 1)
	up := l.conv(w, c, 1, 1)
	gn := l.groupNorm(c)
	if l.err != nil {
		return nil, l.err
	}
	up.Weight.Value.Fill(0)
	s := newSeed(TopologyCNN, "bottleneck", c)
	s.Register("down", down)
	s.Register("conv", mid)
	s.Register("up", up)
	s.Register("gn", gn)
	s.forward = func(x *autograd.Var) *autograd.Var {
		h := autograd.Relu(mid.Forward(autograd.Relu(down.Forward(x))))
		return autograd.Add(x, gn.Forward(up.Forward(h)))
	}
	s.zeroFinal = zeroAffine(up.Weight, nil)
	return s, nil
}

// newConvSmall: a 1×1 convolution branch that starts switched off (its
// output scale is zero), so the seed is the identity at germination.
//
// The reference zero-initialises the convolution instead. Then GN sees an
// all-zero input, returns its shift 0, and ReLU'(0) = 0 blocks every
// gradient of the branch: the seed would stay the identity for ever. A
// zero output scale after the ReLU starts at the same identity and gets
// the gradient ReLU(GN(conv x)) ≠ 0 from the first step.
func newConvSmall(o Options) (nn.Module, error) {
	return convBranch(o, "conv_small", 1, 0)
}

// newConvLight: one 3×3 convolution branch, randomly initialised.
func newConvLight(o Options) (nn.Module, error) {
	return convBranch(o, "conv_light", 3, 1)
}

// convBranch builds y = x + g⊙ReLU(GN(conv_k×k x)) named name, with the
// per-channel output scale g initialised to gain.
func convBranch(o Options, name string, k int, gain float64) (*Seed, error) {
	c := o.Channels
	l := &layers{opts: o}
	conv := l.conv(c, c, k, 1)
	gn := l.groupNorm(c)
	if l.err != nil {
		return nil, l.err
	}
	s := newSeed(TopologyCNN, name, c)
	s.Register("conv", conv)
	s.Register("gn", gn)
	g := l.outScale(s, gain)
	s.forward = func(x *autograd.Var) *autograd.Var {
		return autograd.ChannelAxpy(x, g, gn.ForwardRelu(conv.Forward(x)))
	}
	s.zeroFinal = zeroAffine(g, nil)
	return s, nil
}

// newConvHeavy: two Conv3×3-GN-ReLU stages on the residual branch.
func newConvHeavy(o Options) (nn.Module, error) {
	c := o.Channels
	l := &layers{opts: o}
	conv1 := l.conv(c, c, 3, 1)
	gn1 := l.groupNorm(c)
	conv2 := l.conv(c, c, 3, 1)
	gn2 := l.groupNorm(c)
	if l.err != nil {
		return nil, l.err
	}
	s := newSeed(TopologyCNN, "conv_heavy", c)
	s.Register("conv1", conv1)
	s.Register("gn1", gn1)
	s.Register("conv2", conv2)
	s.Register("gn2", gn2)
	g := l.outScale(s, 1)
	s.forward = func(x *autograd.Var) *autograd.Var {
		h := gn1.ForwardRelu(conv1.Forward(x))
		return autograd.ChannelAxpy(x, g, gn2.ForwardRelu(conv2.Forward(h)))
	}
	s.zeroFinal = zeroAffine(g, nil)
	return s, nil
}
