package kasmina

import (
	"errors"
	"fmt"
	"sort"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// ModelOptions configure a MorphogeneticModel.
type ModelOptions struct {
	// Slots are the host slots to equip with seed slots; required, each
	// one of the host's, no duplicates. They run in the host's timeline
	// order whatever order they are given in.
	Slots []string
	// StrictGates selects the strict quality gates for every slot; by
	// default they are permissive.
	StrictGates bool
	// AutoForward lists the gates that advance seeds by themselves in
	// StepEpoch (see SlotOptions.AutoForward); by default none.
	AutoForward []GateLevel
	// Sink receives every slot's events; nil means none.
	Sink EventSink
}

// MorphogeneticModel is a host with seed slots: an nn.Module whose
// forward pass runs the host segment by segment and lets each slot's
// seed blend into the activation on the way.
//
// Its parameters are the host's ("host.…") followed by each slot's seed
// and gate parameters ("seed_slots.<slot>.seed.…",
// "seed_slots.<slot>.alpha_schedule.…") in timeline order. That set
// changes when seeds are germinated or pruned (and trainability changes
// when a seed is frozen for a ramp down): Version changes with it, so an
// optimizer arena can be rebuilt and capture guards can key on it.
type MorphogeneticModel struct {
	host     Host
	slots    []*Slot
	byID     map[string]*Slot
	training bool
}

// NewMorphogeneticModel equips host with the slots in o. No slots, an
// unknown slot (the error lists the host's) or a duplicate is an error.
func NewMorphogeneticModel(host Host, o ModelOptions) (*MorphogeneticModel, error) {
	if host == nil {
		return nil, errors.New("kasmina: NewMorphogeneticModel: nil host")
	}
	if len(o.Slots) == 0 {
		return nil, fmt.Errorf("kasmina: NewMorphogeneticModel: at least one slot is required (host slots: %v)", host.TimelineOrder())
	}
	channels := host.SegmentChannels()
	want := map[string]bool{}
	for _, id := range o.Slots {
		if _, ok := channels[id]; !ok {
			return nil, fmt.Errorf("kasmina: NewMorphogeneticModel: unknown slot %q (host slots: %v)", id, host.TimelineOrder())
		}
		if want[id] {
			return nil, fmt.Errorf("kasmina: NewMorphogeneticModel: slot %q listed twice", id)
		}
		want[id] = true
	}
	dt := tensor.F32
	if ps := host.Parameters(); len(ps) > 0 {
		dt = ps[0].DType()
	}
	m := &MorphogeneticModel{host: host, byID: map[string]*Slot{}, training: host.Training()}
	for _, id := range host.TimelineOrder() {
		if !want[id] {
			continue
		}
		s, err := NewSlot(SlotOptions{
			ID: id, Channels: channels[id], Topology: host.Topology(), StrictGates: o.StrictGates,
			AutoForward: o.AutoForward, HostParams: host.Parameters(), DType: dt, Sink: o.Sink,
		})
		if err != nil {
			return nil, err
		}
		s.SetTraining(m.training)
		m.slots = append(m.slots, s)
		m.byID[id] = s
	}
	return m, nil
}

// Host returns the host network.
func (m *MorphogeneticModel) Host() Host { return m.host }

// Slots returns the seed slots in timeline order.
func (m *MorphogeneticModel) Slots() []*Slot { return append([]*Slot(nil), m.slots...) }

// SlotIDs returns the ids of the seed slots in timeline order.
func (m *MorphogeneticModel) SlotIDs() []string {
	out := make([]string, len(m.slots))
	for i, s := range m.slots {
		out[i] = s.id
	}
	return out
}

// Slot returns the seed slot id; an id the model has no slot for is an
// error.
func (m *MorphogeneticModel) Slot(id string) (*Slot, error) {
	s, ok := m.byID[id]
	if !ok {
		return nil, fmt.Errorf("kasmina: unknown slot %q (model slots: %v)", id, m.SlotIDs())
	}
	return s, nil
}

// Forward runs the host with every slot's seed blended in. It panics if
// a slot fails (an internal inconsistency or a malformed input); use
// FusedForward for an error instead.
func (m *MorphogeneticModel) Forward(x *autograd.Var) *autograd.Var {
	out, err := m.FusedForward(x, nil)
	if err != nil {
		panic(err.Error())
	}
	return out
}

// FusedForward is Forward with per-sample alpha overrides per slot id,
// used to evaluate K alpha configurations in one pass over a batch of
// K·B samples: each override must be [K·B, 1, 1, 1] for cnn hosts or
// [K·B, 1] for mlp hosts. An unknown slot key or a malformed override is
// an error; nil or empty overrides are allowed.
func (m *MorphogeneticModel) FusedForward(x *autograd.Var, overrides map[string]*autograd.Var) (*autograd.Var, error) {
	return m.forward(x, overrides, false)
}

// ForwardFeatures is Forward stopping before the host's output layer
// when the host has a linear classifier head (LinearHead): it returns
// the head's input and the head, whose Forward of the features is
// Forward's result bit for bit. A host without one gives a nil head and
// Forward's output, the logits.
func (m *MorphogeneticModel) ForwardFeatures(x *autograd.Var) (*autograd.Var, *nn.Linear, error) {
	lh, ok := m.host.(LinearHead)
	if !ok || lh.Head() == nil {
		out, err := m.forward(x, nil, false)
		return out, nil, err
	}
	out, err := m.forward(x, nil, true)
	if err != nil {
		return nil, nil, err
	}
	return out, lh.Head(), nil
}

// forward is FusedForward, stopping before the host's LinearHead with
// features (the host must have one).
func (m *MorphogeneticModel) forward(x *autograd.Var, overrides map[string]*autograd.Var, features bool) (*autograd.Var, error) {
	if x == nil {
		return nil, errors.New("kasmina: forward of a nil input")
	}
	if x.Value.Rank() == 0 {
		return nil, fmt.Errorf("kasmina: forward of a scalar input")
	}
	keys := make([]string, 0, len(overrides))
	for k := range overrides {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	batch := x.Shape()[0]
	for _, k := range keys {
		s, ok := m.byID[k]
		if !ok {
			return nil, fmt.Errorf("kasmina: alpha override for unknown slot %q (model slots: %v)", k, m.SlotIDs())
		}
		if a := overrides[k]; a != nil {
			if err := s.checkOverrideShape(batch, a); err != nil {
				return nil, err
			}
		}
	}
	prev := ""
	var err error
	for _, s := range m.slots {
		if !s.IsActive() && overrides[s.id] == nil {
			// An empty slot passes its input on: the host runs across it
			// (and may fuse the steps on either side of its cut).
			continue
		}
		if x, err = m.host.ForwardToSegment(s.id, x, prev); err != nil {
			return nil, err
		}
		if x, err = s.Forward(x, overrides[s.id]); err != nil {
			return nil, err
		}
		prev = s.id
	}
	if prev == "" && len(m.slots) > 0 {
		// Every slot is empty: the host's whole forward.
		if h, ok := m.host.(wholeFeaturer); ok && features {
			return h.featuresWhole(x)
		}
		if h, ok := m.host.(wholeForwarder); ok && !features {
			return h.ForwardWhole(x)
		}
		prev = m.slots[len(m.slots)-1].id
		if x, err = m.host.ForwardToSegment(prev, x, ""); err != nil {
			return nil, err
		}
	}
	if features {
		return m.host.(LinearHead).FeaturesFromSegment(prev, x)
	}
	return m.host.ForwardFromSegment(prev, x)
}

// GerminateSeed germinates a seed in slot (see Slot.Germinate).
func (m *MorphogeneticModel) GerminateSeed(slot string, o GerminateOptions) error {
	s, err := m.Slot(slot)
	if err != nil {
		return err
	}
	return s.Germinate(o)
}

// PruneSeed prunes the seed in slot (see Slot.Prune); the bool is
// Prune's answer.
func (m *MorphogeneticModel) PruneSeed(slot, reason, initiator string) (bool, error) {
	s, err := m.Slot(slot)
	if err != nil {
		return false, err
	}
	return s.Prune(reason, initiator), nil
}

// StepEpoch ticks every slot once (see Slot.StepEpoch).
func (m *MorphogeneticModel) StepEpoch() {
	for _, s := range m.slots {
		s.StepEpoch()
	}
}

// CaptureGradientTelemetry updates every seed's gradient telemetry from
// the current gradients (see Slot.CaptureGradientTelemetry).
func (m *MorphogeneticModel) CaptureGradientTelemetry() {
	_, _ = m.GradientTelemetry(nil)
}

// GradientTelemetry is CaptureGradientTelemetry that also returns the
// norms of extra tensors (TensorNorms' convention: -1 for a nil one),
// all read in one TensorNorms call: on a device one host sync for every
// slot and the extra tensors together, where each slot alone takes one.
// A tensor listed more than once (a slot's host gradients are every
// slot's, and callers often pass them again) is reduced once. When the
// norms cannot be computed the seeds' telemetry is left as it was and
// the error is returned. It is LaunchGradientTelemetry, the read of its
// pending norms and Apply.
func (m *MorphogeneticModel) GradientTelemetry(extra []*tensor.Tensor) ([]float64, error) {
	p, err := m.LaunchGradientTelemetry(extra)
	if err != nil {
		return nil, err
	}
	var host *tensor.Tensor
	if d := p.Pending(); d != nil {
		if host, err = d.ToDevice(tensor.CPU); err != nil {
			return nil, err
		}
	}
	return p.Apply(host)
}

// PendingTelemetry is gradient telemetry whose norms were computed where
// the gradients are and not yet read (LaunchGradientTelemetry): a
// training loop reads Pending with the other values it reads at the end
// of its epoch, in one host sync, and then calls Apply, instead of
// stopping for the device at the step that took the telemetry.
type PendingTelemetry struct {
	// norms are the norms on their device (F64 [k]), nil when they are
	// known already: host.
	norms *tensor.Tensor
	host  []float64
	slots []pendingSlot
	extra []int
	done  bool
}

// pendingSlot is a slot whose telemetry a PendingTelemetry updates: the
// indices of its telemetryTensors' norms, and the state of the seed they
// were taken of (a slot whose seed changed before Apply is left alone: a
// new germination makes a new state).
type pendingSlot struct {
	s     *Slot
	state *SeedState
	idx   []int
}

// LaunchGradientTelemetry starts GradientTelemetry: the norms of every
// seed's telemetry tensors and of extra are computed on their device
// (one ForeachNorm into a fresh float64 vector, queued after the step
// that made the gradients, so later steps may overwrite them), and
// nothing is read. On the CPU, or where the device's kernel refuses the
// tensors (TensorNorms' host fallback), the norms are computed at once
// and Pending is nil.
func (m *MorphogeneticModel) LaunchGradientTelemetry(extra []*tensor.Tensor) (*PendingTelemetry, error) {
	var ts []*tensor.Tensor
	at := map[*tensor.Tensor]int{}
	index := func(list []*tensor.Tensor) []int {
		idx := make([]int, len(list))
		for i, t := range list {
			if t == nil {
				idx[i] = -1
				continue
			}
			k, ok := at[t]
			if !ok {
				k = len(ts)
				at[t] = k
				ts = append(ts, t)
			}
			idx[i] = k
		}
		return idx
	}
	p := &PendingTelemetry{}
	for _, s := range m.slots {
		if list := s.telemetryTensors(); list != nil {
			p.slots = append(p.slots, pendingSlot{s: s, state: s.state, idx: index(list)})
		}
	}
	p.extra = index(extra)
	if len(ts) == 0 {
		return p, nil
	}
	if p.norms = launchNorms(ts); p.norms != nil {
		return p, nil
	}
	var err error
	if p.host, err = TensorNorms(ts); err != nil {
		return nil, err
	}
	return p, nil
}

// launchNorms queues ForeachNorm of ts, all on one device other than the
// CPU, into a new F64 vector there and returns it; nil when the tensors
// are on the CPU or on several devices, or the device refuses them.
func launchNorms(ts []*tensor.Tensor) *tensor.Tensor {
	dev := ts[0].Device()
	if dev.IsCPU() {
		return nil
	}
	cs := make([]*tensor.Tensor, len(ts))
	for i, t := range ts {
		if t.Device() != dev {
			return nil
		}
		cs[i] = t.Contiguous()
	}
	dst, err := queueNorms(dev, cs)
	if err != nil {
		return nil // TensorNorms takes them on the host
	}
	return dst
}

// Pending returns the device tensor of norms to read (F64, on the
// gradients' device), or nil when there is nothing to read: pass its
// host copy to Apply.
func (p *PendingTelemetry) Pending() *tensor.Tensor { return p.norms }

// Apply updates the seeds' telemetry from the norms, host being the CPU
// copy of Pending (nil when Pending is nil), and returns the norms of the
// extra tensors. A slot whose seed changed since the launch is skipped.
// It applies once: a second call is an error.
func (p *PendingTelemetry) Apply(host *tensor.Tensor) ([]float64, error) {
	if p.done {
		return nil, errors.New("kasmina: PendingTelemetry.Apply called twice")
	}
	norms := p.host
	if p.norms != nil {
		if host == nil || !host.Device().IsCPU() || host.DType() != tensor.F64 || host.Numel() != p.norms.Numel() {
			return nil, fmt.Errorf("kasmina: PendingTelemetry.Apply: want the host copy of the pending F64 [%d] norms, got %v", p.norms.Numel(), describe(host))
		}
		norms = host.Float64s()
	}
	p.done = true
	for _, ps := range p.slots {
		if ps.s.state == ps.state {
			ps.s.applyGradientTelemetry(pick(norms, ps.idx))
		}
	}
	return pick(norms, p.extra), nil
}

// describe names a tensor's dtype, shape and device for an error (nil
// too).
func describe(t *tensor.Tensor) string {
	if t == nil {
		return "nil"
	}
	return fmt.Sprintf("%v %v on %v", t.DType(), t.Shape(), t.Device())
}

// pick gathers norms[idx[i]], -1 where idx[i] < 0.
func pick(norms []float64, idx []int) []float64 {
	out := make([]float64, len(idx))
	for i, k := range idx {
		out[i] = -1
		if k >= 0 {
			out[i] = norms[k]
		}
	}
	return out
}

// ActiveSeedCount counts the seeds that take part in the forward pass
// (TRAINING, BLENDING, HOLDING and FOSSILIZED, as leyline.IsActiveStage).
func (m *MorphogeneticModel) ActiveSeedCount() int {
	n := 0
	for _, s := range m.slots {
		if s.IsActive() {
			n++
		}
	}
	return n
}

// FossilizedSeedCount counts the FOSSILIZED seeds.
func (m *MorphogeneticModel) FossilizedSeedCount() int {
	n := 0
	for _, s := range m.slots {
		if s.state != nil && s.state.Stage == leyline.StageFossilized {
			n++
		}
	}
	return n
}

// HostParameters returns the host's parameters.
func (m *MorphogeneticModel) HostParameters() []*autograd.Var { return m.host.Parameters() }

// SeedParameters returns the parameters of slot's seed and gate (none
// for an empty slot); an unknown slot is an error.
func (m *MorphogeneticModel) SeedParameters(slot string) ([]*autograd.Var, error) {
	s, err := m.Slot(slot)
	if err != nil {
		return nil, err
	}
	return s.Parameters(), nil
}

// Parameters returns the host's parameters then each slot's, in the
// order of NamedParameters.
func (m *MorphogeneticModel) Parameters() []*autograd.Var {
	ns := m.NamedParameters()
	out := make([]*autograd.Var, len(ns))
	for i, n := range ns {
		out[i] = n.Var
	}
	return out
}

// NamedParameters returns "host.…" then "seed_slots.<slot>.…" for every
// slot in timeline order.
func (m *MorphogeneticModel) NamedParameters() []nn.Named {
	var out []nn.Named
	for _, p := range m.host.NamedParameters() {
		out = append(out, nn.Named{Name: "host." + p.Name, Var: p.Var})
	}
	for _, s := range m.slots {
		for _, p := range s.NamedParameters() {
			out = append(out, nn.Named{Name: "seed_slots." + s.id + "." + p.Name, Var: p.Var})
		}
	}
	return out
}

// NamedBuffers returns the host's and the slots' buffers, named like
// NamedParameters.
func (m *MorphogeneticModel) NamedBuffers() []nn.NamedBuffer {
	var out []nn.NamedBuffer
	for _, b := range m.host.NamedBuffers() {
		out = append(out, nn.NamedBuffer{Name: "host." + b.Name, Tensor: b.Tensor})
	}
	for _, s := range m.slots {
		for _, b := range s.NamedBuffers() {
			out = append(out, nn.NamedBuffer{Name: "seed_slots." + s.id + "." + b.Name, Tensor: b.Tensor})
		}
	}
	return out
}

// SetTraining switches the host and every seed between training and
// evaluation.
func (m *MorphogeneticModel) SetTraining(training bool) {
	m.training = training
	m.host.SetTraining(training)
	for _, s := range m.slots {
		s.SetTraining(training)
	}
}

// Training reports whether the model is in training mode.
func (m *MorphogeneticModel) Training() bool { return m.training }

// Version changes whenever the model's parameter set (or a seed's
// trainability) changes; it starts at 1 and only grows. Pass it as
// autograd.CaptureOptions.Version and rebuild the optimizer arena when
// it changes.
func (m *MorphogeneticModel) Version() uint64 {
	v := uint64(1)
	for _, s := range m.slots {
		v += s.version
	}
	return v
}
