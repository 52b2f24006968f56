package kasmina

import (
	"math"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina/blueprint"
	"github.com/esper-go/esper/tensor"
)

// f64 is a uniform random F64 host tensor in [−1, 1).
func f64(seed uint64, shape ...int) *tensor.Tensor {
	return tensor.Uniform(tensor.NewRNG(seed), tensor.F64, -1, 1, shape...)
}

func TestBlendIdentities(t *testing.T) {
	h, s := onDevice(t, f64(1, 2, 3, 4, 4)), onDevice(t, f64(2, 2, 3, 4, 4))
	x := onDevice(t, f64(3, 2, 3, 4, 4))
	check(t, bitwiseEqual(t, BlendAdd(h, s, ScalarAlpha(0)).Value, h.Value), "ADD at α=0 is not the host")
	check(t, maxAbsDiff(t, BlendAdd(h, s, ScalarAlpha(1)).Value, s.Value) < 1e-15, "ADD at α=1 is not the seed")
	mean := autograd.MulScalar(autograd.Add(h, s), 0.5)
	check(t, maxAbsDiff(t, BlendAdd(h, s, ScalarAlpha(0.5)).Value, mean.Value) < 1e-15, "ADD at α=½ is not the mean")
	// Alpha is clamped.
	check(t, bitwiseEqual(t, BlendAdd(h, s, ScalarAlpha(-0.1)).Value, h.Value), "α=−0.1 not clamped to 0")
	check(t, maxAbsDiff(t, BlendAdd(h, s, ScalarAlpha(1.5)).Value, s.Value) < 1e-15, "α=1.5 not clamped to 1")

	check(t, bitwiseEqual(t, BlendMultiply(h, s, x, ScalarAlpha(0)).Value, h.Value), "MULTIPLY at α=0 is not the host")
	check(t, bitwiseEqual(t, BlendMultiply(h, x, x, ScalarAlpha(0.8)).Value, h.Value), "MULTIPLY with an identity seed is not the host")
	// Affine in α and multiplier within [1−α, 1+α].
	m0 := testdevice.F64(t, BlendMultiply(h, s, x, ScalarAlpha(0)).Value)
	m3 := testdevice.F64(t, BlendMultiply(h, s, x, ScalarAlpha(0.3)).Value)
	m6 := testdevice.F64(t, BlendMultiply(h, s, x, ScalarAlpha(0.6)).Value)
	hv := testdevice.F64(t, h.Value)
	for i := range m0 {
		check(t, math.Abs((m6[i]-m3[i])-(m3[i]-m0[i])) < 1e-12, "MULTIPLY not affine in α at %d", i)
		if hv[i] != 0 {
			r := m6[i] / hv[i]
			check(t, r >= 0.4-1e-12 && r <= 1.6+1e-12, "multiplier %g outside [0.4, 1.6]", r)
		}
	}

	// GATE is a convex mix: between h and s elementwise.
	gate := onDevice(t, tensor.FromFloat64s(tensor.F64, []float64{0.3, 1.7}, 2, 1, 1, 1))
	g := testdevice.F64(t, BlendGate(h, s, gate, ScalarAlpha(0.9)).Value)
	sv := testdevice.F64(t, s.Value)
	for i := range g {
		lo, hi := math.Min(hv[i], sv[i]), math.Max(hv[i], sv[i])
		check(t, g[i] >= lo-1e-15 && g[i] <= hi+1e-15, "GATE not convex at %d", i)
	}
	// Sample 1's gate is clamped to 1: α_eff = 0.9.
	want := testdevice.F64(t, BlendAdd(h, s, ScalarAlpha(0.9)).Value)
	per := len(g) / 2
	check(t, math.Abs(g[per]-want[per]) < 1e-15, "GATE with gate 1.7 not clamped")
	check(t, bitwiseEqual(t, BlendGate(h, s, gate, ScalarAlpha(0)).Value, h.Value), "GATE at α=0 is not the host")

	// Straight-through: value exactly h.
	check(t, bitwiseEqual(t, StraightThrough(h, s).Value, h.Value), "STE value is not the host")
}

func TestBlendPerSampleAlpha(t *testing.T) {
	h, s := onDevice(t, f64(1, 3, 2)), onDevice(t, f64(2, 3, 2))
	a := onDevice(t, tensor.FromFloat64s(tensor.F64, []float64{0, 1, 2}, 3, 1))
	out := BlendAdd(h, s, SampleAlpha(a)).Value
	hv, sv, o := testdevice.F64(t, h.Value), testdevice.F64(t, s.Value), testdevice.F64(t, out)
	check(t, o[0] == hv[0] && o[1] == hv[1], "sample 0 (α=0) is not the host")
	check(t, math.Abs(o[2]-sv[2]) < 1e-15 && math.Abs(o[5]-sv[5]) < 1e-15, "samples 1, 2 (α=1, 2→1) are not the seed")
}

func TestBlendPropagatesNonFinite(t *testing.T) {
	h := onDevice(t, f64(1, 2, 2))
	sh := f64(2, 2, 2)
	sh.Set(math.NaN(), 0, 0)
	sh.Set(math.Inf(1), 1, 1)
	s := onDevice(t, sh)
	x := onDevice(t, f64(3, 2, 2))
	gate := onDevice(t, tensor.Full(tensor.F64, 0.5, 2, 1))
	for name, out := range map[string]*autograd.Var{
		"ADD":      BlendAdd(h, s, ScalarAlpha(0)),
		"MULTIPLY": BlendMultiply(h, s, x, ScalarAlpha(0)),
		"GATE":     BlendGate(h, s, gate, ScalarAlpha(0)),
		"STE":      StraightThrough(h, s),
	} {
		v := testdevice.Host(t, out.Value)
		check(t, math.IsNaN(v.At(0, 0)), "%s: NaN in the seed masked at α=0: %g", name, v.At(0, 0))
		if name != "MULTIPLY" { // tanh(+Inf) = 1 is finite: the valve saturates.
			check(t, math.IsNaN(v.At(1, 1)) || math.IsInf(v.At(1, 1), 0), "%s: Inf in the seed masked at α=0: %g", name, v.At(1, 1))
		}
	}
	hh := f64(1, 2, 2)
	hh.Set(math.NaN(), 0, 1)
	hn := onDevice(t, hh)
	check(t, math.IsNaN(testdevice.Host(t, BlendAdd(hn, s, ScalarAlpha(0.5)).Value).At(0, 1)), "NaN in the host masked")
	// Finite inputs never give NaN.
	for _, a := range []float64{0, 0.5, 1} {
		for _, v := range testdevice.F64(t, BlendMultiply(h, x, onDevice(t, f64(4, 2, 2)), ScalarAlpha(a)).Value) {
			check(t, !math.IsNaN(v), "NaN from finite inputs")
		}
	}
}

// TestBlendGradients checks the blends' gradients against central
// differences. It runs on the CPU on purpose: autograd.GradCheck perturbs
// its F64 inputs element by element on the host.
func TestBlendGradients(t *testing.T) {
	opt := autograd.GradCheckOptions{Tol: 1e-7}
	shape := []int{2, 3, 2, 2}
	for _, a := range []Alpha{ScalarAlpha(0.3), SampleAlpha(autograd.Const(tensor.FromFloat64s(tensor.F64, []float64{0.2, 0.7}, 2, 1, 1, 1)))} {
		noErr(t, autograd.GradCheck(func(in []*autograd.Var) *autograd.Var {
			return BlendAdd(in[0], in[1], a)
		}, []*tensor.Tensor{f64(1, shape...), f64(2, shape...)}, opt))
		noErr(t, autograd.GradCheck(func(in []*autograd.Var) *autograd.Var {
			return BlendMultiply(in[0], in[1], in[2], a)
		}, []*tensor.Tensor{f64(1, shape...), f64(2, shape...), f64(3, shape...)}, opt))
	}
	// A per-sample alpha that itself requires grad gets the right one.
	noErr(t, autograd.GradCheck(func(in []*autograd.Var) *autograd.Var {
		return BlendAdd(in[0], in[1], SampleAlpha(in[2]))
	}, []*tensor.Tensor{f64(1, shape...), f64(2, shape...), tensor.FromFloat64s(tensor.F64, []float64{0.2, 0.7}, 2, 1, 1, 1)}, opt))

	// GATE through a real GatedBlend: gradients of h, s, the gate's input
	// and every gate parameter.
	g, err := NewGatedBlend(GatedBlendOptions{Channels: 3, Topology: TopologyCNN, RNG: tensor.NewRNG(5), DType: tensor.F64})
	noErr(t, err)
	h, s, x := autograd.Param(f64(1, shape...)), autograd.Param(f64(2, shape...)), autograd.Param(f64(3, shape...))
	vars := append([]*autograd.Var{h, s, x}, g.Parameters()...)
	noErr(t, autograd.GradCheckVars(func() *autograd.Var {
		return BlendGate(h, s, g.Forward(x), ScalarAlpha(0.8))
	}, vars, opt))
	for _, v := range vars {
		check(t, v.Grad != nil && !allZero(t, v.Grad), "no gradient reached %q", v.Name)
	}

	// MLP gate.
	gm, err := NewGatedBlend(GatedBlendOptions{Channels: 4, Topology: TopologyMLP, RNG: tensor.NewRNG(6), DType: tensor.F64})
	noErr(t, err)
	hm, sm, xm := autograd.Param(f64(4, 3, 4)), autograd.Param(f64(5, 3, 4)), autograd.Param(f64(6, 3, 4))
	noErr(t, autograd.GradCheckVars(func() *autograd.Var {
		return BlendGate(hm, sm, gm.Forward(xm), ScalarAlpha(0.5))
	}, append([]*autograd.Var{hm, sm, xm}, gm.Parameters()...), opt))
}

// TestStraightThroughGradient checks the STE path: its gradients are those
// of the surrogate h + seed(x) − c (c the seed's output held constant),
// which GradCheck verifies numerically, while its value is exactly h.
// Like every gradient check it runs on the CPU on purpose.
func TestStraightThroughGradient(t *testing.T) {
	seed, err := blueprint.Build(TopologyCNN, "conv_light", blueprint.Options{Channels: 3, RNG: tensor.NewRNG(3), DType: tensor.F64})
	noErr(t, err)
	shape := []int{2, 3, 3, 3}
	h, x := autograd.Param(f64(1, shape...)), autograd.Const(f64(2, shape...))
	var c *tensor.Tensor
	autograd.NoGrad(func() { c = seed.Forward(x).Value.Clone() })
	vars := append([]*autograd.Var{h}, seed.Parameters()...)
	surrogate := func() *autograd.Var {
		return autograd.Add(h, autograd.Sub(seed.Forward(x), autograd.Const(c)))
	}
	noErr(t, autograd.GradCheckVars(surrogate, vars, autograd.GradCheckOptions{Tol: 1e-6}))
	for _, v := range vars {
		v.Grad = nil
	}
	r := f64(9, shape...) // GradCheck's seed differs; compare under one r.
	out := StraightThrough(h, seed.Forward(x))
	check(t, bitwiseEqual(t, out.Value, h.Value), "STE value is not h")
	autograd.Backward(out, r)
	got := make([]*tensor.Tensor, len(vars))
	for i, v := range vars {
		got[i] = v.Grad.Clone()
		v.Grad = nil
	}
	sur := surrogate()
	autograd.Backward(sur, r)
	for i, v := range vars {
		check(t, maxAbsDiff(t, got[i], v.Grad) < 1e-12, "STE gradient of %q differs from the surrogate's", v.Name)
		check(t, !allZero(t, got[i]), "no STE gradient for %q", v.Name)
	}
}

// TestBlendGatePerSampleAlphaGradients checks the GATE blend with a
// per-sample alpha (the fused-forward path) through a real GatedBlend,
// for cnn ([B, 1, 1, 1]) and mlp ([B, 1]) shapes: the value is
// h + (s − h)·clamp(α_i)·g_i sample by sample, and the gradients of h,
// s, the gate's input, the gate's parameters and α itself match central
// differences. A sample with α > 1 is clamped, so its α gets exactly no
// gradient. It runs on the CPU on purpose: its Vars are GradCheck's,
// which perturbs them on the host.
func TestBlendGatePerSampleAlphaGradients(t *testing.T) {
	opt := autograd.GradCheckOptions{Tol: 1e-7}
	for _, c := range []struct {
		topology string
		shape    []int
		alphas   []float64
	}{
		{TopologyCNN, []int{2, 3, 2, 2}, []float64{0.35, 0.8}},
		{TopologyMLP, []int{3, 4}, []float64{0.25, 0.6, 1.3}},
	} {
		t.Run(c.topology, func(t *testing.T) {
			g, err := NewGatedBlend(GatedBlendOptions{Channels: c.shape[1], Topology: c.topology, RNG: tensor.NewRNG(11), DType: tensor.F64})
			noErr(t, err)
			ashape := []int{c.shape[0], 1}
			if c.topology == TopologyCNN {
				ashape = []int{c.shape[0], 1, 1, 1}
			}
			h, s, x := autograd.Param(f64(21, c.shape...)), autograd.Param(f64(22, c.shape...)), autograd.Param(f64(23, c.shape...))
			a := autograd.Param(tensor.FromFloat64s(tensor.F64, c.alphas, ashape...))

			// Value, sample by sample, against the formula.
			gate := g.Forward(x).Value.Float64s()
			out := BlendGate(h, s, g.Forward(x), SampleAlpha(a)).Value.Float64s()
			hv, sv := h.Value.Float64s(), s.Value.Float64s()
			per := len(hv) / c.shape[0]
			for i := range hv {
				b := i / per
				check(t, gate[b] > 0 && gate[b] < 1, "gate %g of sample %d outside (0, 1)", gate[b], b)
				want := hv[i] + (sv[i]-hv[i])*math.Min(1, c.alphas[b])*gate[b]
				check(t, math.Abs(out[i]-want) < 1e-14, "sample %d element %d: %g, want %g", b, i, out[i], want)
			}

			// Gradients, α included.
			vars := append([]*autograd.Var{h, s, x, a}, g.Parameters()...)
			noErr(t, autograd.GradCheckVars(func() *autograd.Var {
				return BlendGate(h, s, g.Forward(x), SampleAlpha(a))
			}, vars, opt))
			for _, v := range vars {
				check(t, v.Grad != nil && !allZero(t, v.Grad), "no gradient reached %q", v.Name)
			}
			ag := a.Grad.Float64s()
			for b, av := range c.alphas {
				if av > 1 {
					check(t, ag[b] == 0, "clamped α of sample %d got gradient %g", b, ag[b])
				} else {
					check(t, ag[b] != 0, "α of sample %d got no gradient", b)
				}
			}

			// α as a constant (as FusedForward passes it).
			ac := autograd.Const(tensor.FromFloat64s(tensor.F64, c.alphas, ashape...))
			noErr(t, autograd.GradCheckVars(func() *autograd.Var {
				return BlendGate(h, s, g.Forward(x), SampleAlpha(ac))
			}, append([]*autograd.Var{h, s, x}, g.Parameters()...), opt))
		})
	}
}
