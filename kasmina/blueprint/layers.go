package blueprint

import (
	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// NumGroups returns the GroupNorm group count the cnn blueprints use for
// a width of channels: the first of 32, 16, 8, 4, 2, 1 that divides
// channels with at least 16 channels per group, else the first that
// divides it at all (G2 get_num_groups). A prime width gets 1 group.
func NumGroups(channels int) int {
	candidates := [...]int{32, 16, 8, 4, 2, 1}
	for _, g := range candidates {
		if channels%g == 0 && channels/g >= 16 {
			return g
		}
	}
	for _, g := range candidates {
		if channels%g == 0 {
			return g
		}
	}
	return 1
}

// layers builds the nn layers of one seed from validated Options and keeps
// the first constructor error, so a factory checks once at the end
// instead of after every layer.
type layers struct {
	opts Options
	err  error
}

// conv returns a bias-free k×k convolution with "same" padding. Every
// cnn seed's convolution is followed by a GroupNorm (whose shift makes a
// bias redundant) or, for bottleneck's inner ones, sits between
// convolutions whose estimate in the G2 table counts no biases.
func (l *layers) conv(in, out, k, groups int) *nn.Conv2d {
	if l.err != nil {
		return nil
	}
	c, err := nn.NewConv2d(l.opts.RNG, nn.Conv2dOptions{
		InChannels: in, OutChannels: out, KernelH: k, Padding: k / 2,
		Groups: groups, NoBias: true, DType: l.opts.DType,
	})
	l.err = err
	return c
}

// groupNorm returns an affine GroupNorm over channels with NumGroups
// groups.
func (l *layers) groupNorm(channels int) *nn.GroupNorm {
	if l.err != nil {
		return nil
	}
	g, err := nn.NewGroupNorm(nn.GroupNormOptions{Groups: NumGroups(channels), Channels: channels, DType: l.opts.DType})
	l.err = err
	return g
}

// layerNorm returns an affine LayerNorm over the last axis.
func (l *layers) layerNorm(channels int) *nn.LayerNorm {
	if l.err != nil {
		return nil
	}
	n, err := nn.NewLayerNorm(nn.LayerNormOptions{Shape: []int{channels}, DType: l.opts.DType})
	l.err = err
	return n
}

// linear returns a Linear in→out, with a bias unless noBias.
func (l *layers) linear(in, out int, noBias bool) *nn.Linear {
	if l.err != nil {
		return nil
	}
	f, err := nn.NewLinear(l.opts.RNG, nn.LinearOptions{In: in, Out: out, NoBias: noBias, DType: l.opts.DType})
	l.err = err
	return f
}

// scalar returns a one-element tensor holding v, the shape of the norm
// blueprints' mixing parameter.
func (l *layers) scalar(v float64) *tensor.Tensor {
	return tensor.Full(l.opts.DType, v, 1)
}

// outScale registers "out_scale", a per-channel [1, C, 1, 1] gain on a
// residual branch that ends in ReLU, initialised to v. It is the layer
// ZeroFinal zeroes in those seeds: zeroing the convolution before GN and
// ReLU instead would leave ReLU'(0) = 0 blocking every gradient of the
// branch, so the seed could never leave the identity.
func (l *layers) outScale(s *Seed, v float64) *autograd.Var {
	g := autograd.Param(tensor.Full(l.opts.DType, v, 1, s.Channels(), 1, 1))
	s.RegisterParameter("out_scale", g)
	return g
}
