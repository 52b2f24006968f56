package optim_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// linearCase is a linear classifier on dev with its SGD (momentum, or
// none), a fixed batch and the trainer's running metrics.
type linearCase struct {
	lin                *nn.Linear
	sgd                *optim.SGD
	x, y, lossSum, acc *tensor.Tensor
	bias               bool
}

func newLinearCase(t *testing.T, dev tensor.Device, bias bool, o optim.SGDOptions) *linearCase {
	t.Helper()
	rng := tensor.NewRNG(21)
	lin, err := nn.NewLinear(rng, nn.LinearOptions{In: 16, Out: 4, NoBias: !bias})
	require.NoError(t, err)
	x, y := tensor.Normal(rng, tensor.F32, 0, 1, 8, 16), tensor.RandInt(rng, 4, 8)
	c := &linearCase{lin: lin, bias: bias}
	require.NoError(t, nn.To(lin, dev))
	c.x, err = x.ToDevice(dev)
	require.NoError(t, err)
	c.y, err = y.ToDevice(dev)
	require.NoError(t, err)
	c.lossSum, err = tensor.Zeros(tensor.F32, 1).ToDevice(dev)
	require.NoError(t, err)
	c.acc, err = tensor.Zeros(tensor.F32, 8).ToDevice(dev)
	require.NoError(t, err)
	c.sgd, err = optim.NewSGD(lin.Parameters(), o)
	require.NoError(t, err)
	return c
}

// unfused is the step LinearCEStep stands for: the counted loss through
// autograd, Backward, and the step.
func (c *linearCase) unfused(p kernels.CrossEntropyParams, zero bool) {
	loss := autograd.LinearCrossEntropyCount(autograd.Const(c.x), c.lin.Weight, c.lin.Bias, c.y, p, c.lossSum, c.acc)
	autograd.Backward(loss)
	if zero {
		c.sgd.StepZeroGrad(nil)
	} else {
		c.sgd.Step()
	}
}

// state is everything a step writes, on the host.
func (c *linearCase) state(t *testing.T) [][]float64 {
	t.Helper()
	var out [][]float64
	for _, x := range []*tensor.Tensor{c.sgd.Arena().Flat(), c.sgd.Arena().FlatGrad(), c.lossSum, c.acc} {
		out = append(out, f64(t, x))
	}
	sd := c.sgd.StateDict()
	for _, k := range slices.Sorted(maps.Keys(sd)) {
		out = append(out, f64(t, sd[k]))
	}
	return out
}

// TestLinearCEStep: a linear classifier's whole SGD step in one call is
// bitwise the counted loss, Backward and Step it stands for, step after
// step — with and without a bias, momentum (its first step and later
// ones), zeroed gradients, label smoothing — on the CPU and on sim; and
// it declines, doing nothing, where it does not apply.
func TestLinearCEStep(t *testing.T) {
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		for _, bias := range []bool{true, false} {
			for _, o := range []optim.SGDOptions{{LR: 0.1, Momentum: 0.9}, {LR: 0.05, WeightDecay: 0.01}} {
				for _, zero := range []bool{true, false} {
					p := kernels.CrossEntropyParams{LabelSmoothing: 0.1}
					fused, ref := newLinearCase(t, dev, bias, o), newLinearCase(t, dev, bias, o)
					for step := 0; step < 3; step++ {
						require.True(t, fused.sgd.LinearCEStep(fused.x, fused.lin.Weight, fused.lin.Bias, fused.y, p, fused.lossSum, fused.acc, zero))
						ref.unfused(p, zero)
						require.Equal(t, ref.state(t), fused.state(t), "%v bias %v %+v zero %v step %d", dev, bias, o, zero, step)
					}
				}
			}
		}
	}

	c := newLinearCase(t, tensor.CPU, true, optim.SGDOptions{LR: 0.1})
	before := c.state(t)
	p := kernels.CrossEntropyParams{}
	require.False(t, c.sgd.LinearCEStep(c.x, c.lin.Weight, c.lin.Bias, c.y, kernels.CrossEntropyParams{Reduction: kernels.ReduceNone}, c.lossSum, c.acc, false), "a loss per row")
	require.False(t, c.sgd.LinearCEStep(c.x, c.lin.Weight, nil, c.y, p, c.lossSum, c.acc, false), "the arena holds the bias too")
	require.False(t, c.sgd.LinearCEStep(c.x, c.lin.Bias, c.lin.Weight, c.y, p, c.lossSum, c.acc, false), "the parameters in another order")
	autograd.Autocast(tensor.BF16, func() {
		require.False(t, c.sgd.LinearCEStep(c.x, c.lin.Weight, c.lin.Bias, c.y, p, c.lossSum, c.acc, false), "under autocast")
	})
	other, err := nn.NewLinear(tensor.NewRNG(3), nn.LinearOptions{In: 2, Out: 2})
	require.NoError(t, err)
	two, err := optim.NewSGD(append(c.lin.Parameters(), other.Parameters()...), optim.SGDOptions{LR: 0.1})
	require.NoError(t, err)
	require.False(t, two.LinearCEStep(c.x, c.lin.Weight, c.lin.Bias, c.y, p, c.lossSum, c.acc, false), "an arena of more parameters")
	c.lin.Weight.SetRequiresGrad(false)
	require.False(t, c.sgd.LinearCEStep(c.x, c.lin.Weight, c.lin.Bias, c.y, p, c.lossSum, c.acc, false), "a weight that takes no gradient")
	c.lin.Weight.SetRequiresGrad(true)
	c.lin.Bias.RegisterPostAccumulateHook(func(*autograd.Var) {})
	require.False(t, c.sgd.LinearCEStep(c.x, c.lin.Weight, c.lin.Bias, c.y, p, c.lossSum, c.acc, false), "a hook on the bias")
	require.Equal(t, before, c.state(t), "declining changes nothing")
}
