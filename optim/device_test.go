package optim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// trainSteps builds an MLP on dev, takes three SGD-momentum and three
// AdamW steps on a fixed batch and returns the final weights (host
// copies) and the arena's device.
func trainSteps(t *testing.T, dev tensor.Device) ([][]float32, tensor.Device) {
	m, sgd, step := sgdSteps(t, dev)
	adam, err := optim.NewAdamW(m.Parameters(), optim.AdamWOptions{LR: 0.01})
	require.NoError(t, err)
	for range 3 {
		step(adam)
	}
	return weights(t, m), sgd.Arena().Device()
}

// sgdSteps builds an MLP on dev and takes three SGD-momentum steps on a
// fixed batch; step takes one more with any optimizer of its weights.
func sgdSteps(t *testing.T, dev tensor.Device) (m *nn.Sequential, sgd *optim.SGD, step func(optim.Optimizer)) {
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
	step = func(o optim.Optimizer) {
		o.ZeroGrad()
		autograd.Backward(autograd.Sum(m.Forward(autograd.Const(xd)), nil, false))
		o.Step()
	}
	sgd, err = optim.NewSGD(m.Parameters(), optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	require.NoError(t, err)
	for range 3 {
		step(sgd)
	}
	return m, sgd, step
}

// weights are host copies of m's parameters.
func weights(t *testing.T, m *nn.Sequential) [][]float32 {
	var out [][]float32
	for _, p := range m.Parameters() {
		h, err := p.Value.ToDevice(tensor.CPU)
		require.NoError(t, err)
		out = append(out, append([]float32(nil), h.F32()...))
	}
	return out
}

// TestOptimizersOnSim: SGD with momentum and AdamW over an arena on the
// sim device take bitwise the CPU's steps, with the arena on the device.
func TestOptimizersOnSim(t *testing.T) {
	want, _ := trainSteps(t, tensor.CPU)
	got, dev := trainSteps(t, tensor.Sim(1))
	assert.Equal(t, tensor.Sim(1), dev)
	assert.Equal(t, want, got)
}

// TestLoadHostStateDictOnSim: an optimizer on the sim device loads a
// state dict whose tensors are on the host (a checkpoint read from disk)
// by copying them over explicitly, and resumes bitwise where the saved
// optimizer goes on; a sim state dict loads into a CPU optimizer too.
func TestLoadHostStateDictOnSim(t *testing.T) {
	dev := tensor.Sim(4)
	mk := map[string]func(ps []*autograd.Var) (optim.Optimizer, error){
		"sgd": func(ps []*autograd.Var) (optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 1e-3})
		},
		"adamw": func(ps []*autograd.Var) (optim.Optimizer, error) {
			return optim.NewAdamW(ps, optim.AdamWOptions{LR: 0.01})
		},
	}
	for name, newOpt := range mk {
		t.Run(name, func(t *testing.T) {
			rng := tensor.NewRNG(17)
			init := []*tensor.Tensor{tensor.Normal(rng, tensor.F32, 0, 1, 5, 3), tensor.Normal(rng, tensor.F32, 0, 1, 3)}
			grads := [][]*tensor.Tensor{}
			for range 4 {
				grads = append(grads, []*tensor.Tensor{tensor.Normal(rng, tensor.F32, 0, 1, 5, 3), tensor.Normal(rng, tensor.F32, 0, 1, 3)})
			}
			params := func(d tensor.Device, vals []*tensor.Tensor) []*autograd.Var {
				ps := make([]*autograd.Var, len(vals))
				for i, v := range vals {
					x, err := v.ToDevice(d)
					require.NoError(t, err)
					ps[i] = autograd.Param(x)
				}
				return ps
			}
			step := func(opt optim.Optimizer, ps []*autograd.Var, g []*tensor.Tensor) {
				for i, p := range ps {
					x, err := g[i].ToDevice(p.Grad.Device())
					require.NoError(t, err)
					kernels.For(p.Grad.Device()).Copy(p.Grad, x)
				}
				opt.Step()
			}
			host := func(ps []*autograd.Var) [][]float32 {
				var out [][]float32
				for _, p := range ps {
					h, err := p.Value.ToDevice(tensor.CPU)
					require.NoError(t, err)
					out = append(out, append([]float32(nil), h.F32()...))
				}
				return out
			}

			ps := params(dev, init)
			opt, err := newOpt(ps)
			require.NoError(t, err)
			step(opt, ps, grads[0])
			step(opt, ps, grads[1])
			saved := host(ps)
			sd := map[string]*tensor.Tensor{}
			for k, v := range opt.StateDict() {
				h, err := v.ToDevice(tensor.CPU)
				require.NoError(t, err)
				sd[k] = h
			}
			step(opt, ps, grads[2])
			step(opt, ps, grads[3])

			for _, d := range []tensor.Device{dev, tensor.CPU} {
				vals := make([]*tensor.Tensor, len(saved))
				for i, s := range saved {
					vals[i] = tensor.FromSlice(s, init[i].Shape()...)
				}
				qs := params(d, vals)
				resumed, err := newOpt(qs)
				require.NoError(t, err)
				from := sd
				if d.IsCPU() { // the other way: a device state dict into a CPU optimizer
					from = map[string]*tensor.Tensor{}
					for k, v := range sd {
						x, err := v.ToDevice(dev)
						require.NoError(t, err)
						from[k] = x
					}
				}
				require.NoError(t, resumed.LoadStateDict(from), "load into an optimizer on %v", d)
				step(resumed, qs, grads[2])
				step(resumed, qs, grads[3])
				assert.Equal(t, host(ps), host(qs), "resumed on %v", d)
			}
		})
	}
}

// incrementCounter wraps a backend that has kernels.SGDIncrementer and
// counts the calls of Increment, SGDStep and IncrementSGDStep.
type incrementCounter struct {
	kernels.Backend
	n map[string]int
}

func (b *incrementCounter) Increment(counter, skip *tensor.Tensor) {
	b.n["Increment"]++
	b.Backend.Increment(counter, skip)
}

func (b *incrementCounter) SGDStep(param, grad, mom, hyper, foundInf *tensor.Tensor, o kernels.SGDOptions) {
	b.n["SGDStep"]++
	b.Backend.SGDStep(param, grad, mom, hyper, foundInf, o)
}

func (b *incrementCounter) IncrementSGDStep(param, grad, mom, hyper, foundInf *tensor.Tensor, o kernels.SGDOptions) {
	b.n["IncrementSGDStep"]++
	b.Backend.(kernels.SGDIncrementer).IncrementSGDStep(param, grad, mom, hyper, foundInf, o)
}

// TestSGDCountsInItsStep: on a backend with kernels.SGDIncrementer, an
// SGD step over a one-bucket arena is one IncrementSGDStep (no Increment
// of its own), and the weights and the step count are the CPU's.
func TestSGDCountsInItsStep(t *testing.T) {
	dev := tensor.Sim(5)
	orig := kernels.For(dev)
	cb := &incrementCounter{Backend: orig, n: map[string]int{}}
	kernels.Register(cb)
	t.Cleanup(func() { kernels.Register(orig) })
	run := func(dev tensor.Device) ([][]float32, int) {
		m, sgd, _ := sgdSteps(t, dev)
		return weights(t, m), sgd.StepCount()
	}
	got, steps := run(dev)
	require.Equal(t, map[string]int{"IncrementSGDStep": 3}, cb.n)
	want, wantSteps := run(tensor.CPU)
	require.Equal(t, want, got)
	require.Equal(t, 3, steps)
	require.Equal(t, wantSteps, steps)
}

// TestSGDStepZeroGrad: StepZeroGrad leaves every gradient zero and the
// weights, momentum and step count those of Step, so that steps that
// skip ZeroGrad after it train bit for bit as ZeroGrad, backward, Step
// does; with foundInf set it updates nothing and still zeroes the
// gradients. On the CPU and on sim.
func TestSGDStepZeroGrad(t *testing.T) {
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(5)} {
		m, err := nn.NewMLP(tensor.NewRNG(3), nn.MLPOptions{Sizes: []int{6, 8, 4}})
		require.NoError(t, err)
		require.NoError(t, nn.To(m, dev))
		m2, err := nn.NewMLP(tensor.NewRNG(3), nn.MLPOptions{Sizes: []int{6, 8, 4}})
		require.NoError(t, err)
		require.NoError(t, nn.To(m2, dev))
		x, err := tensor.Normal(tensor.NewRNG(9), tensor.F32, 0, 1, 5, 6).ToDevice(dev)
		require.NoError(t, err)
		backward := func(m *nn.Sequential) {
			autograd.Backward(autograd.Sum(m.Forward(autograd.Const(x)), nil, false))
		}
		plain, err := optim.NewSGD(m.Parameters(), optim.SGDOptions{LR: 0.1, Momentum: 0.9})
		require.NoError(t, err)
		zeroing, err := optim.NewSGD(m2.Parameters(), optim.SGDOptions{LR: 0.1, Momentum: 0.9})
		require.NoError(t, err)
		zeroing.ZeroGrad() // once, before the first step
		for range 4 {
			plain.ZeroGrad()
			backward(m)
			plain.Step()
			backward(m2)
			zeroing.StepZeroGrad(nil)
			for _, p := range m2.Parameters() {
				h, err := p.Grad.ToDevice(tensor.CPU)
				require.NoError(t, err)
				require.Equal(t, make([]float32, h.Numel()), h.F32(), "%v: gradients zeroed", dev)
			}
		}
		require.Equal(t, weights(t, m), weights(t, m2), "%v", dev)
		require.Equal(t, plain.StepCount(), zeroing.StepCount())
		require.Equal(t, hostState(t, plain), hostState(t, zeroing), "%v: momentum", dev)

		// A skipped step: nothing moves, the gradients are zeroed.
		inf, err := tensor.FromSlice([]float32{1}, 1).ToDevice(dev)
		require.NoError(t, err)
		before := weights(t, m2)
		backward(m2)
		zeroing.StepZeroGrad(inf)
		require.Equal(t, before, weights(t, m2), "%v: skipped", dev)
		for _, p := range m2.Parameters() {
			h, err := p.Grad.ToDevice(tensor.CPU)
			require.NoError(t, err)
			require.Equal(t, make([]float32, h.Numel()), h.F32(), "%v: gradients zeroed on a skipped step", dev)
		}
	}
}

// hostState is an optimizer's state dict copied to the host.
func hostState(t *testing.T, o optim.Optimizer) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for k, v := range o.StateDict() {
		if v.DType() != tensor.F32 {
			continue
		}
		h, err := v.ToDevice(tensor.CPU)
		require.NoError(t, err)
		out[k] = append([]float32(nil), h.F32()...)
	}
	return out
}

// clipCounter offers kernels.GradClipper over a backend (sim), counted.
type clipCounter struct {
	kernels.Backend
	clips int
}

func (b *clipCounter) ClipByNorm(norm *tensor.Tensor, xs []*tensor.Tensor, maxNorm, eps float64) {
	b.clips++
	b.Backend.(kernels.GradClipper).ClipByNorm(norm, xs, maxNorm, eps)
}

// TestClipGradNormOneCall: on a backend with kernels.GradClipper,
// ClipGradNorm is one ClipByNorm call, and the norm and the clipped
// gradients are bit for bit those of a backend without it (ForeachNorm,
// three BinaryScalar, ForeachScale) and of the CPU, clipped or not.
func TestClipGradNormOneCall(t *testing.T) {
	dev := tensor.Sim(5)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	run := func(d tensor.Device, maxNorm float64) ([]float32, [][]float32) {
		m, err := nn.NewMLP(tensor.NewRNG(3), nn.MLPOptions{Sizes: []int{6, 8, 4}})
		require.NoError(t, err)
		require.NoError(t, nn.To(m, d))
		sgd, err := optim.NewSGD(m.Parameters(), optim.SGDOptions{LR: 0.1})
		require.NoError(t, err)
		x, err := tensor.Normal(tensor.NewRNG(9), tensor.F32, 0, 1, 5, 6).ToDevice(d)
		require.NoError(t, err)
		sgd.ZeroGrad()
		autograd.Backward(autograd.Sum(m.Forward(autograd.Const(x)), nil, false))
		norm, err := optim.ClipGradNorm(sgd.Arena(), maxNorm).ToDevice(tensor.CPU)
		require.NoError(t, err)
		var grads [][]float32
		for _, p := range m.Parameters() {
			h, err := p.Grad.ToDevice(tensor.CPU)
			require.NoError(t, err)
			grads = append(grads, append([]float32(nil), h.F32()...))
		}
		return append([]float32(nil), norm.F32()...), grads
	}
	for _, maxNorm := range []float64{0.1, 1e6} {
		plain := struct{ kernels.Backend }{orig} // no GradClipper
		kernels.Register(plain)
		wantN, wantG := run(dev, maxNorm)
		cc := &clipCounter{Backend: orig}
		kernels.Register(cc)
		gotN, gotG := run(dev, maxNorm)
		kernels.Register(orig)
		require.Equal(t, 1, cc.clips, "maxNorm %v", maxNorm)
		require.Equal(t, wantN, gotN, "maxNorm %v: norm", maxNorm)
		require.Equal(t, wantG, gotG, "maxNorm %v: gradients", maxNorm)
		cpuN, cpuG := run(tensor.CPU, maxNorm)
		require.Equal(t, cpuN, gotN)
		require.Equal(t, cpuG, gotG)
	}
}
