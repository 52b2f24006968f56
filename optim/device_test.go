package optim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// trainSteps builds an MLP on dev, takes three SGD-momentum and three
// AdamW steps on a fixed batch and returns the final weights (host
// copies) and the arena's device.
func trainSteps(t *testing.T, dev tensor.Device) ([][]float32, tensor.Device) {
	m, err := nn.NewMLP(tensor.NewRNG(3), nn.MLPOptions{Sizes: []int{6, 8, 4}})
	require.NoError(t, err)
	require.NoError(t, nn.To(m, dev))
	x := tensor.Empty(tensor.F32, 5, 6)
	rng := tensor.NewRNG(9)
	for i := range x.F32() {
		x.F32()[i] = float32(rng.NormFloat64())
	}
	xd, err := x.ToDevice(dev)
	require.NoError(t, err)
	sgd, err := optim.NewSGD(m.Parameters(), optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	require.NoError(t, err)
	for range 3 {
		sgd.ZeroGrad()
		autograd.Backward(autograd.Sum(m.Forward(autograd.Const(xd)), nil, false))
		sgd.Step()
	}
	adam, err := optim.NewAdamW(m.Parameters(), optim.AdamWOptions{LR: 0.01})
	require.NoError(t, err)
	for range 3 {
		adam.ZeroGrad()
		autograd.Backward(autograd.Sum(m.Forward(autograd.Const(xd)), nil, false))
		adam.Step()
	}
	var out [][]float32
	for _, p := range m.Parameters() {
		h, err := p.Value.ToDevice(tensor.CPU)
		require.NoError(t, err)
		out = append(out, append([]float32(nil), h.F32()...))
	}
	return out, sgd.Arena().Device()
}

// TestOptimizersOnSim: SGD with momentum and AdamW over an arena on the
// sim device take bitwise the CPU's steps, with the arena on the device.
func TestOptimizersOnSim(t *testing.T) {
	want, _ := trainSteps(t, tensor.CPU)
	got, dev := trainSteps(t, tensor.Sim(1))
	assert.Equal(t, tensor.Sim(1), dev)
	assert.Equal(t, want, got)
}
