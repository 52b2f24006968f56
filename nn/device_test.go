package nn_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// deviceNet is a small convolutional module with parameters and buffers
// (batch norm's running statistics).
func deviceNet() *nn.Sequential {
	rng := tensor.NewRNG(11)
	return nn.NewSequential(
		nn.MustConv2d(rng, nn.Conv2dOptions{InChannels: 1, OutChannels: 3, KernelH: 3, Padding: 1}),
		nn.MustBatchNorm2d(nn.BatchNorm2dOptions{Channels: 3}),
	)
}

func hostOf(t *testing.T, x *tensor.Tensor) []float32 {
	t.Helper()
	h, err := x.ToDevice(tensor.CPU)
	require.NoError(t, err)
	return append([]float32(nil), h.F32()...)
}

// forwardBackward runs the module on a fixed input on dev and returns
// the output, the weight's gradient and the running mean.
func forwardBackward(t *testing.T, m *nn.Sequential, dev tensor.Device) (out, grad, mean []float32) {
	x := tensor.Empty(tensor.F32, 2, 1, 4, 4)
	rng := tensor.NewRNG(5)
	for i := range x.F32() {
		x.F32()[i] = float32(rng.NormFloat64())
	}
	xd, err := x.ToDevice(dev)
	require.NoError(t, err)
	y := m.Forward(autograd.Const(xd))
	autograd.Backward(autograd.Sum(y, nil, false))
	ps := m.NamedParameters()
	bs := m.NamedBuffers()
	return hostOf(t, y.Value), hostOf(t, ps[0].Var.Grad), hostOf(t, bs[0].Tensor)
}

// TestModuleOnSim: a module moved to the sim device keeps its objects,
// computes bitwise what the CPU computes (forward, backward, buffer
// updates), saves from the device and loads back into a device module
// with explicit copies.
func TestModuleOnSim(t *testing.T) {
	cpuNet, simNet := deviceNet(), deviceNet()
	w := simNet.NamedParameters()[0].Var
	dev := tensor.Sim(2)
	require.NoError(t, nn.To(simNet, dev))
	assert.Same(t, w, simNet.NamedParameters()[0].Var, "the same variable, moved")
	d, err := nn.Device(simNet)
	require.NoError(t, err)
	assert.Equal(t, dev, d)
	assert.Panics(t, func() { w.Value.F32() }, "a moved parameter is a device tensor")

	wo, wg, wm := forwardBackward(t, cpuNet, tensor.CPU)
	go_, gg, gm := forwardBackward(t, simNet, dev)
	assert.Equal(t, wo, go_)
	assert.Equal(t, wg, gg)
	assert.Equal(t, wm, gm)

	path := filepath.Join(t.TempDir(), "m.safetensors")
	require.NoError(t, nn.Save(path, simNet, nil))
	back := deviceNet()
	require.NoError(t, nn.To(back, dev))
	require.NoError(t, nn.Load(path, back))
	for i, p := range back.NamedParameters() {
		assert.Equal(t, hostOf(t, simNet.NamedParameters()[i].Var.Value), hostOf(t, p.Var.Value), p.Name)
	}
	onCPU := deviceNet()
	require.NoError(t, nn.Load(path, onCPU), "a file saved from a device loads on the CPU")
	assert.Equal(t, hostOf(t, simNet.NamedBuffers()[0].Tensor), onCPU.NamedBuffers()[0].Tensor.F32())
	require.NoError(t, nn.To(onCPU, tensor.CPU), "moving to the device it is on is a no-op")
}

// TestToRefusesViews: a module whose parameters became views (of an
// optimizer's arena, say) is refused whole, and left as it was.
func TestToRefusesViews(t *testing.T) {
	m := nn.MustLinear(tensor.NewRNG(1), nn.LinearOptions{In: 4, Out: 3})
	flat := tensor.Empty(tensor.F32, 12+3+5)
	m.Bias.Value = flat.Narrow(0, 12, 3)
	err := nn.To(m, tensor.Sim(0))
	require.ErrorContains(t, err, "view")
	assert.Equal(t, tensor.CPU, m.Weight.Value.Device(), "nothing moved")
	require.ErrorContains(t, nn.To(nil, tensor.Sim(0)), "nil module")
}

// TestDropoutOnSim: To moves a dropout layer's random state with the
// module, so an MLP with dropout trains on sim in training mode, bitwise
// as on the CPU (masks included).
func TestDropoutOnSim(t *testing.T) {
	run := func(dev tensor.Device) []float32 {
		m, err := nn.NewMLP(tensor.NewRNG(4), nn.MLPOptions{Sizes: []int{6, 16, 3}, Dropout: 0.5})
		require.NoError(t, err)
		require.NoError(t, nn.To(m, dev))
		x := tensor.Empty(tensor.F32, 4, 6)
		for i := range x.F32() {
			x.F32()[i] = float32(i%7) - 3
		}
		xd, err := x.ToDevice(dev)
		require.NoError(t, err)
		var out []float32
		for range 2 { // the state advances between calls
			out = append(out, hostOf(t, m.Forward(autograd.Const(xd)).Value)...)
		}
		return out
	}
	assert.Equal(t, run(tensor.CPU), run(tensor.Sim(0)))
}
