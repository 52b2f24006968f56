package kasmina

import (
	"slices"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

func newModel(t *testing.T, hostSeed uint64, slots ...string) *MorphogeneticModel {
	t.Helper()
	m, err := NewMorphogeneticModel(smallCNN(t, hostSeed, tensor.F32), ModelOptions{Slots: slots})
	noErr(t, err)
	return m
}

// lossOf is Σ out·r, a loss whose gradient is r (on out's device).
func lossOf(t *testing.T, out *autograd.Var, seed uint64) *autograd.Var {
	t.Helper()
	r := tensor.Uniform(tensor.NewRNG(seed), out.DType(), -1, 1, out.Shape()...)
	return autograd.SumAll(autograd.Mul(out, onDevice(t, r)))
}

func TestModelSlotsValidation(t *testing.T) {
	host := smallCNN(t, 1, tensor.F32)
	_, err := NewMorphogeneticModel(host, ModelOptions{})
	check(t, err != nil, "no slots accepted")
	_, err = NewMorphogeneticModel(host, ModelOptions{Slots: []string{"r0c9"}})
	check(t, err != nil, "unknown slot accepted")
	_, err = NewMorphogeneticModel(host, ModelOptions{Slots: []string{"r0c0", "r0c0"}})
	check(t, err != nil, "duplicate slot accepted")
	m, err := NewMorphogeneticModel(host, ModelOptions{Slots: []string{"r0c1", "r1c0", "r0c0"}})
	noErr(t, err)
	check(t, slices.Equal(m.SlotIDs(), []string{"r0c0", "r1c0", "r0c1"}), "not in timeline order: %v", m.SlotIDs())
	_, err = m.Slot("r1c1")
	check(t, err != nil, "slot without a seed slot returned")
	check(t, m.GerminateSeed("r1c1", GerminateOptions{Blueprint: "norm"}) != nil, "germinate in an unknown slot")
	_, err = m.PruneSeed("r9c9", "x", "")
	check(t, err != nil, "prune in an unknown slot")
}

func TestModelNoActiveSeedsIsHost(t *testing.T) {
	m := newModel(t, 1, "r0c0", "r1c0", "r0c1", "r1c1")
	bare := smallCNN(t, 1, tensor.F32)
	x := input(t, 2, tensor.F32, 2, 1, 8, 8)
	check(t, bitwiseEqual(t, m.Forward(x).Value, bare.Forward(x).Value), "empty model differs from the host")
	noErr(t, m.GerminateSeed("r0c1", GerminateOptions{Blueprint: "conv_light"}))
	check(t, bitwiseEqual(t, m.Forward(x).Value, bare.Forward(x).Value), "GERMINATED seed changed the output")
	check(t, m.ActiveSeedCount() == 0, "GERMINATED counted active")
}

// TestIsolationHostGradientsBitwise is the isolation guarantee: with a
// TRAINING conv_light seed in every slot, the host's output and
// gradients are bitwise those of the bare host, while the seeds learn.
func TestIsolationHostGradientsBitwise(t *testing.T) {
	m := newModel(t, 7, "r0c0", "r1c0", "r0c1", "r1c1")
	bare := smallCNN(t, 7, tensor.F32)
	for _, s := range m.Slots() {
		noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light"}))
		advanceTo(t, s, leyline.StageTraining)
	}
	check(t, m.ActiveSeedCount() == 4, "active %d", m.ActiveSeedCount())
	x := input(t, 3, tensor.F32, 4, 1, 8, 8)
	out, want := m.Forward(x), bare.Forward(x)
	check(t, bitwiseEqual(t, out.Value, want.Value), "STE forward differs from the host")
	autograd.Backward(lossOf(t, out, 11))
	autograd.Backward(lossOf(t, want, 11))
	hp, bp := m.HostParameters(), bare.Parameters()
	check(t, len(hp) == len(bp), "host parameter count")
	for i := range hp {
		check(t, hp[i].Grad != nil && bitwiseEqual(t, hp[i].Grad, bp[i].Grad), "host gradient of %q differs from the bare host's", bp[i].Name)
	}
	for _, s := range m.Slots() {
		some := false
		for _, p := range s.Parameters() {
			some = some || (p.Grad != nil && !allZero(t, p.Grad))
		}
		check(t, some, "seed in %s received no gradient", s.ID())
	}
	// BatchNorm running statistics moved identically too.
	hb, bb := m.Host().NamedBuffers(), bare.NamedBuffers()
	for i := range hb {
		check(t, bitwiseEqual(t, hb[i].Tensor, bb[i].Tensor), "buffer %s differs", hb[i].Name)
	}
}

// TestSTEOffInBlending: once BLENDING starts at α=0 the ordinary blend
// runs, so the seed gets no gradient through the α-weighted path.
func TestSTEOffInBlending(t *testing.T) {
	m := newModel(t, 3, "r0c1")
	s, _ := m.Slot("r0c1")
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light"}))
	advanceTo(t, s, leyline.StageBlending)
	check(t, s.State().Alpha == 0, "alpha %g", s.State().Alpha)
	out := m.Forward(input(t, 4, tensor.F32, 2, 1, 8, 8))
	autograd.Backward(lossOf(t, out, 5))
	for _, p := range s.Parameters() {
		check(t, p.Grad == nil || allZero(t, p.Grad), "seed parameter %q got gradient at α=0 in BLENDING", p.Name)
	}
}

func TestMultiSeedIndependence(t *testing.T) {
	m := newModel(t, 1, "r0c0", "r0c1")
	a, _ := m.Slot("r0c0")
	b, _ := m.Slot("r0c1")
	noErr(t, m.GerminateSeed("r0c0", GerminateOptions{Blueprint: "conv_light", Tempo: 2}))
	noErr(t, m.GerminateSeed("r0c1", GerminateOptions{Blueprint: "conv_small", Tempo: 4}))
	advanceTo(t, a, leyline.StageBlending)
	advanceTo(t, b, leyline.StageTraining)
	m.StepEpoch()
	check(t, a.State().Alpha == 0.5 && b.State().Alpha == 0 && b.Stage() == leyline.StageTraining, "alphas %g %g", a.State().Alpha, b.State().Alpha)
	a.RecordAccuracy(60)
	check(t, b.State().Metrics.EpochsTotal == 0, "metrics shared")
	check(t, m.AttributeBatch(nil, nil)["r0c0-conv_light"] == 0.5, "attribution %v", m.AttributeBatch(nil, nil))
	// Pruning one leaves the other untouched, and the forward without
	// it equals the forward with it forced off.
	x := input(t, 2, tensor.F32, 2, 1, 8, 8)
	var forcedOff *autograd.Var
	a.ForceAlpha(0, func() { forcedOff = m.Forward(x) })
	ok, err := m.PruneSeed("r0c0", "test", "")
	noErr(t, err)
	check(t, ok && b.Stage() == leyline.StageTraining && b.IsActive(), "pruning a affected b")
	check(t, bitwiseEqual(t, m.Forward(x).Value, forcedOff.Value), "forward after pruning a differs from a forced off")
	out := m.Forward(x)
	autograd.Backward(lossOf(t, out, 3))
	for _, p := range b.Parameters() {
		check(t, p.Grad != nil, "b's parameter %q got no gradient", p.Name)
	}
}

func TestFossilizedSeedsStayInForward(t *testing.T) {
	m := newModel(t, 2, "r1c0")
	s, _ := m.Slot("r1c0")
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light", Tempo: 1}))
	advanceTo(t, s, leyline.StageFossilized)
	check(t, m.FossilizedSeedCount() == 1 && m.ActiveSeedCount() == 1, "counts %d %d", m.FossilizedSeedCount(), m.ActiveSeedCount())
	x := input(t, 2, tensor.F32, 2, 1, 8, 8)
	bare := smallCNN(t, 2, tensor.F32)
	check(t, !bitwiseEqual(t, m.Forward(x).Value, bare.Forward(x).Value), "fossilized seed not in forward")
	for i := 0; i < 20; i++ {
		m.StepEpoch()
	}
	check(t, s.Stage() == leyline.StageFossilized && s.IsActive(), "fossilized seed left")
}

func TestFusedForwardOverrides(t *testing.T) {
	m := newModel(t, 4, "r0c0", "r0c1")
	for _, id := range []string{"r0c0", "r0c1"} {
		s, _ := m.Slot(id)
		noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light", Tempo: 1}))
		advanceTo(t, s, leyline.StageHolding)
	}
	x := input(t, 5, tensor.F32, 2, 1, 8, 8)
	// K = 2 configurations stacked: all on, then r0c0 off.
	xx := autograd.Concat([]*autograd.Var{x, x}, 0)
	ones := testdevice.To(t, tensor.Ones(tensor.F32, 4, 1, 1, 1))
	off := testdevice.To(t, tensor.FromFloat64s(tensor.F32, []float64{1, 1, 0, 0}, 4, 1, 1, 1))
	s0, _ := m.Slot("r0c0")
	var main, solo *autograd.Var
	m.SetTraining(false) // batch statistics would differ between batch sizes
	out, err := m.FusedForward(xx, map[string]*autograd.Var{"r0c0": autograd.Const(off), "r0c1": autograd.Const(ones)})
	noErr(t, err)
	main = m.Forward(x)
	s0.ForceAlpha(0, func() { solo = m.Forward(x) })
	fused := testdevice.Host(t, out.Value)
	check(t, maxAbsDiff(t, fused.Narrow(0, 0, 2).Contiguous(), main.Value) < 1e-6, "fused main config differs")
	check(t, maxAbsDiff(t, fused.Narrow(0, 2, 2).Contiguous(), solo.Value) < 1e-6, "fused solo-off config differs")

	_, err = m.FusedForward(x, nil)
	noErr(t, err)
	_, err = m.FusedForward(x, map[string]*autograd.Var{})
	noErr(t, err)
	_, err = m.FusedForward(x, map[string]*autograd.Var{"r1c1": onDevice(t, tensor.Ones(tensor.F32, 2, 1, 1, 1))})
	check(t, err != nil, "unknown override key accepted")
	for _, bad := range [][]int{{2, 1}, {2, 1, 1}, {3, 1, 1, 1}, {2, 2, 1, 1}} {
		_, err = m.FusedForward(x, map[string]*autograd.Var{"r0c0": onDevice(t, tensor.Ones(tensor.F32, bad...))})
		check(t, err != nil, "override of shape %v accepted", bad)
	}

	// mlp overrides are [B, 1].
	mh, err := NewMLPHost(MLPHostOptions{InFeatures: 6, Hidden: 4, Blocks: 2})
	noErr(t, err)
	toDevice(t, mh)
	mm, err := NewMorphogeneticModel(mh, ModelOptions{Slots: []string{"r0c1"}})
	noErr(t, err)
	noErr(t, mm.GerminateSeed("r0c1", GerminateOptions{Blueprint: "lora"}))
	xm := input(t, 1, tensor.F32, 3, 6)
	_, err = mm.FusedForward(xm, map[string]*autograd.Var{"r0c1": onDevice(t, tensor.Ones(tensor.F32, 3, 1))})
	noErr(t, err)
	_, err = mm.FusedForward(xm, map[string]*autograd.Var{"r0c1": onDevice(t, tensor.Ones(tensor.F32, 3, 1, 1, 1))})
	check(t, err != nil, "cnn-shaped override accepted by an mlp model")
}

func TestMLPBlendingCoAdapts(t *testing.T) {
	mh, err := NewMLPHost(MLPHostOptions{InFeatures: 6, Hidden: 4, Blocks: 2})
	noErr(t, err)
	toDevice(t, mh)
	m, err := NewMorphogeneticModel(mh, ModelOptions{Slots: []string{"r0c0"}})
	noErr(t, err)
	s, _ := m.Slot("r0c0")
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "lora"}))
	advanceTo(t, s, leyline.StageTraining)
	check(t, s.IsolateGradients(), "TRAINING not isolated")
	advanceTo(t, s, leyline.StageBlending)
	check(t, !s.IsolateGradients(), "mlp seed still isolated in BLENDING")
}

func TestParameterPartitionsOwnershipVersion(t *testing.T) {
	m := newModel(t, 1, "r0c0", "r0c1")
	nHost := len(m.HostParameters())
	v0 := m.Version()
	check(t, len(m.Parameters()) == nHost && len(m.SeedMasks()) == 0, "empty model parameters")
	noErr(t, m.GerminateSeed("r0c1", GerminateOptions{Blueprint: "conv_light", SeedID: "b"}))
	v1 := m.Version()
	check(t, v1 > v0, "version did not grow on germinate")
	noErr(t, m.GerminateSeed("r0c0", GerminateOptions{Blueprint: "conv_small", SeedID: "a", BlendAlgorithmID: BlendGated}))
	check(t, m.Version() > v1, "version did not grow")
	params, named, owners := m.Parameters(), m.NamedParameters(), m.Ownership()
	pa, _ := m.SeedParameters("r0c0")
	pb, _ := m.SeedParameters("r0c1")
	check(t, len(params) == nHost+len(pa)+len(pb) && len(owners) == len(params), "partition sizes")
	masks := m.SeedMasks()
	check(t, len(masks) == 2, "masks %v", len(masks))
	for i, p := range params {
		inA, inB := slices.Contains(pa, p), slices.Contains(pb, p)
		switch {
		case i < nHost:
			check(t, owners[i] == HostOwner && !inA && !inB && named[i].Name[:5] == "host.", "param %d %s", i, named[i].Name)
		case inA:
			check(t, owners[i] == "a" && masks["a"][i] && !masks["b"][i], "param %s", named[i].Name)
		case inB:
			check(t, owners[i] == "b" && masks["b"][i] && !masks["a"][i], "param %s", named[i].Name)
		default:
			t.Fatalf("parameter %s owned by nobody", named[i].Name)
		}
	}
	check(t, slices.ContainsFunc(named, func(n nn.Named) bool { return n.Name == "seed_slots.r0c0.alpha_schedule.fc1.weight" }), "gate parameter names")
	v2 := m.Version()
	_, _ = m.PruneSeed("r0c1", "x", "")
	check(t, m.Version() > v2 && len(m.Parameters()) == nHost+len(pa), "prune did not shrink the parameter set")
	_, err := m.SeedParameters("r5c5")
	check(t, err != nil, "unknown slot")
}

func TestAttributionAndExport(t *testing.T) {
	m := newModel(t, 1, "r0c0", "r1c0", "r0c1")
	check(t, len(m.AttributeBatch(nil, nil)) == 0 && len(m.ExportSeedStates()) == 0, "empty model")
	noErr(t, m.GerminateSeed("r0c0", GerminateOptions{Blueprint: "norm", SeedID: "g"}))
	noErr(t, m.GerminateSeed("r1c0", GerminateOptions{Blueprint: "norm", SeedID: "h", Tempo: 1}))
	w := m.AttributeBatch(nil, nil)
	check(t, len(w) == 2 && w["g"] == 0.5 && w["h"] == 0.5, "no learners: uniform over all: %v", w)
	s, _ := m.Slot("r1c0")
	advanceTo(t, s, leyline.StageTraining)
	w = m.AttributeBatch(nil, nil)
	check(t, len(w) == 1 && w["h"] == 1, "one TRAINING seed: %v", w)
	advanceTo(t, s, leyline.StageHolding)
	s.RecordAccuracy(50)
	ex := m.ExportSeedStates()
	check(t, len(ex) == 2 && ex[0].SeedID == "g" && ex[1].SeedID == "h", "export %+v", ex)
	check(t, ex[0].Metrics["blend_allowed"] == 0 && ex[1].Metrics["blend_allowed"] == 1, "blend_allowed")
	check(t, ex[1].Metrics["alpha"] == 1 && ex[1].Metrics["alpha_total_steps"] == 1 && ex[1].Metrics["alpha_steps"] == 1 && ex[1].AgeEpochs == 1, "export metrics %+v", ex[1])
	check(t, ex[1].Stage == leyline.StageHolding && ex[1].SlotID == "r1c0", "export stage")
}

// TestModelForwardInjectionOrder: Forward applies the slots in the
// host's timeline order (r0c0, r1c0, r0c1 for the 2-block CNN), whatever
// order they were requested in. With three randomised, non-commuting
// seeds the output is bitwise the hand-written walk in that order, and
// walks in a wrong order give a different output.
func TestModelForwardInjectionOrder(t *testing.T) {
	host := smallCNN(t, 4, tensor.F32)
	m, err := NewMorphogeneticModel(host, ModelOptions{Slots: []string{"r0c1", "r0c0", "r1c0"}})
	noErr(t, err)
	check(t, slices.Equal(m.SlotIDs(), []string{"r0c0", "r1c0", "r0c1"}), "slots %v", m.SlotIDs())
	rng := tensor.NewRNG(99)
	alphas := map[string]float64{"r0c0": 0.7, "r1c0": 0.6, "r0c1": 0.8}
	for id, bp := range map[string]string{"r0c0": "conv_light", "r1c0": "conv_small", "r0c1": "conv_light"} {
		noErr(t, m.GerminateSeed(id, GerminateOptions{Blueprint: bp, Tempo: 1}))
		s, _ := m.Slot(id)
		advanceTo(t, s, leyline.StageHolding)
		// Fresh seeds start as the identity; randomise them so that each
		// has an effect and the effects do not commute.
		for _, p := range s.Seed().Parameters() {
			p.Value = testdevice.To(t, tensor.Uniform(rng, p.DType(), -0.8, 0.8, p.Shape()...))
		}
		s.SetAlpha(alphas[id])
	}
	m.SetTraining(false)
	s00, _ := m.Slot("r0c0")
	s10, _ := m.Slot("r1c0")
	s01, _ := m.Slot("r0c1")
	x := input(t, 8, tensor.F32, 3, 1, 8, 8)

	// walk runs the host cut by cut, applying at each cut the slots
	// listed for it, in that order.
	walk := func(cuts []string, at map[string][]*Slot) *autograd.Var {
		t.Helper()
		h, prev := x, ""
		for _, c := range cuts {
			h, err = host.ForwardToSegment(c, h, prev)
			noErr(t, err)
			for _, s := range at[c] {
				h, err = s.Forward(h, nil)
				noErr(t, err)
			}
			prev = c
		}
		out, err := host.ForwardFromSegment(prev, h)
		noErr(t, err)
		return out
	}
	cuts := []string{"r0c0", "r1c0", "r0c1"}
	got := m.Forward(x)
	want := walk(cuts, map[string][]*Slot{"r0c0": {s00}, "r1c0": {s10}, "r0c1": {s01}})
	check(t, bitwiseEqual(t, got.Value, want.Value), "Forward differs from the timeline-order walk by %g", maxAbsDiff(t, got.Value, want.Value))

	// The seeds matter, and their order matters.
	check(t, maxAbsDiff(t, got.Value, host.Forward(x).Value) > 1e-3, "seeds have no effect")
	for name, at := range map[string]map[string][]*Slot{
		"r0c0 and r1c0 seeds swapped":    {"r0c0": {s10}, "r1c0": {s00}, "r0c1": {s01}},
		"r1c0 before r0c0 after pooling": {"r1c0": {s10, s00}, "r0c1": {s01}},
		"r0c0 after pooling":             {"r1c0": {s00, s10}, "r0c1": {s01}},
	} {
		wrong := walk(cuts, at)
		check(t, maxAbsDiff(t, got.Value, wrong.Value) > 1e-3, "%s: output unchanged (diff %g)", name, maxAbsDiff(t, got.Value, wrong.Value))
	}
}
