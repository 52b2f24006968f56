package kasmina

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// These tests put a model on the strict simulated device explicitly
// (whatever ESPER_TEST_DEVICE says) beside a CPU twin: seeds and gates
// must be created where the host is, and the device must compute
// bitwise what the CPU computes.

// requireOn fails unless every parameter and buffer of m is on dev.
func requireOn(t *testing.T, dev tensor.Device, m nn.Module, what string) {
	t.Helper()
	require.NotNil(t, m, what)
	got, err := nn.Device(m)
	require.NoError(t, err, what)
	require.Equal(t, dev, got, what)
}

// hostValues copies x to the host and returns its elements.
func hostValues(t *testing.T, x *tensor.Tensor) []float64 {
	t.Helper()
	h, err := x.ToDevice(tensor.CPU)
	require.NoError(t, err)
	return h.Float64s()
}

// TestSeedsGrowOnHostDevice: a model whose host is moved to sim after the
// model was built germinates its seeds on sim (ADD and gated), a gate
// created later by SetAlphaTarget joins them there, LoadSlots restores
// seeds onto sim, and forwards and backwards cost no host sync and
// equal the CPU twin's bitwise.
func TestSeedsGrowOnHostDevice(t *testing.T) {
	dev := tensor.Sim(1)
	build := func(onSim bool) *MorphogeneticModel {
		h, err := NewCNNHost(CNNHostOptions{InChannels: 1, Classes: 3, Blocks: 2, BaseChannels: 4, RNG: tensor.NewRNG(5)})
		require.NoError(t, err)
		m, err := NewMorphogeneticModel(h, ModelOptions{Slots: []string{"r0c0", "r1c0", "r0c1"}})
		require.NoError(t, err)
		if onSim {
			require.NoError(t, nn.To(m, dev)) // after the slots were made
		}
		require.NoError(t, m.GerminateSeed("r0c0", GerminateOptions{Blueprint: "conv_light", Tempo: 1}))
		require.NoError(t, m.GerminateSeed("r1c0", GerminateOptions{Blueprint: "conv_small", BlendAlgorithmID: BlendGated, Tempo: 1}))
		require.NoError(t, m.GerminateSeed("r0c1", GerminateOptions{Blueprint: "attention", Tempo: 1}))
		for _, s := range m.Slots() {
			advanceTo(t, s, leyline.StageHolding)
		}
		// The ADD seed switches to GATE: its gate is created now.
		s, _ := m.Slot("r0c0")
		ok, err := s.SetAlphaTarget(0.5, leyline.BlendGate, RampOptions{Steps: 1})
		require.NoError(t, err)
		require.True(t, ok)
		s.StepEpoch()
		return m
	}
	cpu, sim := build(false), build(true)
	for _, s := range sim.Slots() {
		assert.Equal(t, dev, s.Device(), s.ID())
		requireOn(t, dev, s.Seed(), s.ID()+" seed")
	}
	for _, id := range []string{"r0c0", "r1c0"} {
		s, _ := sim.Slot(id)
		requireOn(t, dev, s.AlphaSchedule(), id+" gate")
	}

	x := tensor.Uniform(tensor.NewRNG(3), tensor.F32, -1, 1, 2, 1, 8, 8)
	xs, err := x.ToDevice(dev)
	require.NoError(t, err)
	r := tensor.Uniform(tensor.NewRNG(4), tensor.F32, -1, 1, 2, 3)
	rs, err := r.ToDevice(dev)
	require.NoError(t, err)
	want := cpu.Forward(autograd.Const(x))
	autograd.Backward(want, r)
	before := tensor.HostSyncs(dev)
	got := sim.Forward(autograd.Const(xs))
	autograd.Backward(got, rs)
	assert.Zero(t, tensor.HostSyncs(dev)-before, "host syncs of a forward and backward")
	require.Equal(t, dev, got.Value.Device())
	assert.Equal(t, want.Value.Float64s(), hostValues(t, got.Value), "logits")
	wp, sp := cpu.NamedParameters(), sim.NamedParameters()
	require.Equal(t, len(wp), len(sp))
	for i := range wp {
		require.Equal(t, wp[i].Name, sp[i].Name)
		require.NotNil(t, sp[i].Var.Grad, sp[i].Name)
		assert.Equal(t, wp[i].Var.Grad.Float64s(), hostValues(t, sp[i].Var.Grad), "gradient of %s", sp[i].Name)
	}

	// Every slot's gradient telemetry and the norms of extra tensors in
	// one read on sim (MorphogeneticModel.GradientTelemetry), equal to
	// the CPU twin's per-slot CaptureGradientTelemetry; the host's
	// gradients, each slot's too, are listed again and reduced once.
	var extra, extraCPU []*tensor.Tensor
	for i := range sp {
		if i%2 == 0 {
			extra, extraCPU = append(extra, sp[i].Var.Grad), append(extraCPU, wp[i].Var.Grad)
		}
	}
	extra, extraCPU = append(extra, nil), append(extraCPU, nil)
	for _, sl := range cpu.Slots() {
		sl.CaptureGradientTelemetry()
	}
	wantNorms, err := TensorNorms(extraCPU)
	require.NoError(t, err)
	before = tensor.HostSyncs(dev)
	gotNorms, err := sim.GradientTelemetry(extra)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), tensor.HostSyncs(dev)-before, "host syncs of GradientTelemetry over %d slots", len(sim.Slots()))
	assert.Equal(t, wantNorms, gotNorms, "norms of the extra tensors")
	assert.Equal(t, -1.0, gotNorms[len(gotNorms)-1], "a nil extra tensor")
	for i, sl := range sim.Slots() {
		w := cpu.Slots()[i].State()
		require.True(t, sl.State().Telemetry.HealthMeasured, sl.ID())
		assert.Equal(t, w.Telemetry, sl.State().Telemetry, "%s telemetry", sl.ID())
		assert.Equal(t, w.Metrics, sl.State().Metrics, "%s metrics", sl.ID())
	}

	// The same telemetry launched (LaunchGradientTelemetry) reads
	// nothing: its norms are taken on the device at the launch, so that
	// gradients overwritten afterwards (zeroed here, as the next step
	// does) do not change them; the pending norms read later and applied
	// give the CPU twin's second capture (the previous health included).
	for _, sl := range cpu.Slots() {
		sl.CaptureGradientTelemetry()
	}
	before = tensor.HostSyncs(dev)
	p, err := sim.LaunchGradientTelemetry(extra)
	require.NoError(t, err)
	assert.Zero(t, tensor.HostSyncs(dev)-before, "host syncs of LaunchGradientTelemetry")
	require.NotNil(t, p.Pending())
	for _, v := range sp {
		kernels.For(dev).Fill(v.Var.Grad, 0)
	}
	_, err = p.Apply(nil)
	require.ErrorContains(t, err, "want the host copy of the pending F64")
	host, err := p.Pending().ToDevice(tensor.CPU)
	require.NoError(t, err)
	gotNorms, err = p.Apply(host)
	require.NoError(t, err)
	assert.Equal(t, wantNorms, gotNorms, "norms of the extra tensors, launched")
	for i, sl := range sim.Slots() {
		w := cpu.Slots()[i].State()
		require.NotNil(t, sl.State().Telemetry.PrevGradientHealth, sl.ID())
		assert.Equal(t, w.Telemetry, sl.State().Telemetry, "%s telemetry, launched", sl.ID())
		assert.Equal(t, w.Metrics, sl.State().Metrics, "%s metrics, launched", sl.ID())
	}
	_, err = p.Apply(host)
	require.ErrorContains(t, err, "called twice")

	// Save the slots from sim (one host sync per slot) and restore them
	// onto a fresh sim model with the host's state: its seeds and gates
	// are created on sim with the saved weights.
	before = tensor.HostSyncs(dev)
	cks, err := sim.SaveSlots()
	require.NoError(t, err)
	assert.Equal(t, uint64(len(sim.Slots())), tensor.HostSyncs(dev)-before, "host syncs of SaveSlots")
	h2, err := NewCNNHost(CNNHostOptions{InChannels: 1, Classes: 3, Blocks: 2, BaseChannels: 4, RNG: tensor.NewRNG(5)})
	require.NoError(t, err)
	require.NoError(t, nn.To(h2, dev))
	require.NoError(t, nn.LoadStateDict(h2, nn.StateDict(sim.Host()), true)) // the batch norms' statistics
	m2, err := NewMorphogeneticModel(h2, ModelOptions{Slots: []string{"r0c0", "r1c0", "r0c1"}})
	require.NoError(t, err)
	require.NoError(t, m2.LoadSlots(cks))
	for _, s := range m2.Slots() {
		requireOn(t, dev, s.Seed(), s.ID()+" restored seed")
	}
	cpu.SetTraining(false)
	m2.SetTraining(false)
	want = cpu.Forward(autograd.Const(x))
	assert.Equal(t, want.Value.Float64s(), hostValues(t, m2.Forward(autograd.Const(xs)).Value), "restored logits")
}

// TestSlotDeviceOption: a slot without host parameters builds its seeds
// and gates on SlotOptions.Device; with host parameters it follows them
// and ignores the option.
func TestSlotDeviceOption(t *testing.T) {
	dev := tensor.Sim(2)
	s, err := NewSlot(SlotOptions{ID: "r0c0", Channels: 4, Device: dev})
	require.NoError(t, err)
	assert.Equal(t, dev, s.Device())
	require.NoError(t, s.Germinate(GerminateOptions{Blueprint: "conv_light", BlendAlgorithmID: BlendGated}))
	requireOn(t, dev, s.Seed(), "seed")
	requireOn(t, dev, s.AlphaSchedule(), "gate")

	c, err := NewSlot(SlotOptions{ID: "r0c0", Channels: 4})
	require.NoError(t, err)
	assert.Equal(t, tensor.CPU, c.Device(), "the default")

	host := MustCNNHost(CNNHostOptions{InChannels: 1, Blocks: 2, BaseChannels: 4})
	f, err := NewSlot(SlotOptions{ID: "r0c0", Channels: 4, HostParams: host.Parameters(), Device: dev})
	require.NoError(t, err)
	assert.Equal(t, tensor.CPU, f.Device(), "a CPU host's slot")
	require.NoError(t, nn.To(host, tensor.Sim(3)))
	assert.Equal(t, tensor.Sim(3), f.Device(), "the slot follows its host")
	require.NoError(t, f.Germinate(GerminateOptions{Blueprint: "norm"}))
	requireOn(t, tensor.Sim(3), f.Seed(), "seed of a moved host")
}
