package kasmina

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kasmina/blueprint"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// EmbargoEpochsAfterPrune is how many ticks a pruned slot stays
// EMBARGOED before it resets (G2 DEFAULT_EMBARGO_EPOCHS_AFTER_PRUNE 5).
const EmbargoEpochsAfterPrune = 5

// Blend algorithm ids: how the blending ramp is shaped, chosen at
// germination (G2 blend_algorithm_id).
const (
	BlendLinear  = "linear"
	BlendSigmoid = "sigmoid"
	BlendGated   = "gated"
)

// Prune initiators (SeedPrunedPayload.Initiator).
const (
	InitiatorPolicy   = "policy"
	InitiatorGovernor = "governor"
	InitiatorAuto     = "auto"
)

// ErrSlotUnavailable is wrapped by Germinate's error when the slot holds
// a seed or the state of one (including PRUNED, EMBARGOED and RESETTING).
var ErrSlotUnavailable = errors.New("slot unavailable for germination")

// EventSink receives telemetry events. nissa.Hub implements it; a nil
// sink means no telemetry.
type EventSink interface {
	Emit(leyline.TelemetryEvent)
}

// SlotOptions configure a Slot.
type SlotOptions struct {
	// ID is the slot id ("r0c1"); required.
	ID string
	// Channels is the width of the activation at the slot; required.
	Channels int
	// Topology is "cnn" or "mlp"; zero means "cnn".
	Topology string
	// StrictGates selects the strict quality gates; by default the gates
	// are permissive (the reference's RL default).
	StrictGates bool
	// AutoForward lists the gates (G1, G2, G3) whose stage the slot
	// enters by itself in StepEpoch when the gate passes; by default
	// none, so StepEpoch never advances a seed.
	AutoForward []GateLevel
	// HostParams are the host's parameters, for gradient telemetry (the
	// seed-to-host gradient norm ratio) and the host parameter count.
	HostParams []*autograd.Var
	// DType of the seeds' parameters; zero means F32.
	DType tensor.DType
	// Device is where a slot without HostParams builds its seeds and
	// gates; zero means the CPU. A slot with HostParams ignores it: its
	// seeds and gates are built on the device of the host's parameters,
	// wherever the host has been moved (nn.To) by then.
	Device tensor.Device
	// Sink receives the slot's events; nil means none.
	Sink EventSink
}

// Slot is one seed slot of a host (the reference's SeedSlot): it
// germinates a seed from the blueprint catalog, drives it through the
// lifecycle under the quality gates, blends its output into the host's
// activation and prunes it. A Slot is not safe for concurrent use.
type Slot struct {
	id       string
	channels int
	topology string
	gates    QualityGates
	auto     map[GateLevel]bool
	host     []*autograd.Var
	dtype    tensor.DType
	dev      tensor.Device
	sink     EventSink

	state    *SeedState
	seed     nn.Module
	schedule *GatedBlend
	// isolate detaches the seed's input from the host graph.
	isolate bool
	// blendID is the germination's blend algorithm id.
	blendID string
	rng     *rand.Rand
	// forced overrides the state's alpha inside ForceAlpha.
	forced *float64
	// pendingReason and pendingInitiator are the scheduled prune's.
	pendingReason, pendingInitiator string
	// frozen is set while the seed's parameters are frozen (BLEND_OUT).
	frozen   bool
	training bool
	// version counts changes of the slot's parameter set or
	// trainability.
	version uint64
}

// NewSlot returns an empty slot; invalid options are an error.
func NewSlot(o SlotOptions) (*Slot, error) {
	if o.Topology == "" {
		o.Topology = TopologyCNN
	}
	if err := leyline.ValidateSlotID(o.ID); err != nil {
		return nil, fmt.Errorf("kasmina: NewSlot: %w", err)
	}
	if o.Channels <= 0 {
		return nil, fmt.Errorf("kasmina: NewSlot %s: Channels must be > 0, got %d", o.ID, o.Channels)
	}
	if o.Topology != TopologyCNN && o.Topology != TopologyMLP {
		return nil, fmt.Errorf("kasmina: NewSlot %s: unknown topology %q (cnn, mlp)", o.ID, o.Topology)
	}
	if o.DType == tensor.Invalid {
		o.DType = tensor.F32
	}
	s := &Slot{
		id: o.ID, channels: o.Channels, topology: o.Topology,
		gates: QualityGates{Permissive: !o.StrictGates}, auto: map[GateLevel]bool{},
		host: append([]*autograd.Var(nil), o.HostParams...), dtype: o.DType, dev: o.Device, sink: o.Sink,
		training: true,
	}
	for _, g := range o.AutoForward {
		if g != G1 && g != G2 && g != G3 {
			return nil, fmt.Errorf("kasmina: NewSlot %s: AutoForward supports G1, G2 and G3, got %v", o.ID, g)
		}
		s.auto[g] = true
	}
	return s, nil
}

// ID returns the slot id.
func (s *Slot) ID() string { return s.id }

// Channels returns the activation width at the slot.
func (s *Slot) Channels() int { return s.channels }

// Topology returns "cnn" or "mlp".
func (s *Slot) Topology() string { return s.topology }

// Gates returns the slot's quality gates.
func (s *Slot) Gates() QualityGates { return s.gates }

// State returns the seed's state, or nil for an empty slot. It is the
// slot's own: change it only through the slot's methods (RecordAccuracy
// and counterfactual bookkeeping on Metrics excepted).
func (s *Slot) State() *SeedState { return s.state }

// Seed returns the seed module, or nil when there is none (empty or
// pruned).
func (s *Slot) Seed() nn.Module { return s.seed }

// AlphaSchedule returns the GATE algorithm's gate, or nil.
func (s *Slot) AlphaSchedule() *GatedBlend { return s.schedule }

// IsolateGradients reports whether the seed's input is detached from
// the host graph.
func (s *Slot) IsolateGradients() bool { return s.isolate }

// BlendAlgorithmID returns the germination's blend algorithm id
// ("linear", "sigmoid", "gated"), "" for an empty slot.
func (s *Slot) BlendAlgorithmID() string { return s.blendID }

// Frozen reports whether the seed's parameters are frozen because alpha
// is ramping down (BLEND_OUT).
func (s *Slot) Frozen() bool { return s.frozen }

// Version changes whenever the slot's parameter set or its trainability
// changes (germinate, prune, gate created or dropped, freeze, load).
func (s *Slot) Version() uint64 { return s.version }

// Stage returns the seed's stage, or DORMANT for an empty slot.
func (s *Slot) Stage() leyline.SeedStage {
	if s.state == nil {
		return leyline.StageDormant
	}
	return s.state.Stage
}

// IsActive reports whether the slot's seed takes part in the forward
// pass (TRAINING, BLENDING, HOLDING or FOSSILIZED with a module).
func (s *Slot) IsActive() bool {
	return s.state != nil && s.seed != nil && leyline.IsActiveStage(s.state.Stage)
}

// Alpha returns the alpha the next Forward uses (a ForceAlpha override,
// else the state's alpha; 0 for an empty slot).
func (s *Slot) Alpha() float64 {
	if s.forced != nil {
		return *s.forced
	}
	if s.state == nil {
		return 0
	}
	return s.state.Alpha
}

// Parameters returns the seed's parameters then the gate's (none for an
// empty slot).
func (s *Slot) Parameters() []*autograd.Var {
	var out []*autograd.Var
	for _, n := range s.NamedParameters() {
		out = append(out, n.Var)
	}
	return out
}

// NamedParameters returns the seed's parameters prefixed "seed." and the
// gate's prefixed "alpha_schedule.".
func (s *Slot) NamedParameters() []nn.Named {
	var out []nn.Named
	if s.seed != nil {
		for _, p := range s.seed.NamedParameters() {
			out = append(out, nn.Named{Name: "seed." + p.Name, Var: p.Var})
		}
	}
	if s.schedule != nil {
		for _, p := range s.schedule.NamedParameters() {
			out = append(out, nn.Named{Name: "alpha_schedule." + p.Name, Var: p.Var})
		}
	}
	return out
}

// NamedBuffers returns the seed's and the gate's buffers, prefixed like
// NamedParameters.
func (s *Slot) NamedBuffers() []nn.NamedBuffer {
	var out []nn.NamedBuffer
	if s.seed != nil {
		for _, b := range s.seed.NamedBuffers() {
			out = append(out, nn.NamedBuffer{Name: "seed." + b.Name, Tensor: b.Tensor})
		}
	}
	if s.schedule != nil {
		for _, b := range s.schedule.NamedBuffers() {
			out = append(out, nn.NamedBuffer{Name: "alpha_schedule." + b.Name, Tensor: b.Tensor})
		}
	}
	return out
}

// SetTraining switches the seed and gate between training and
// evaluation; seeds germinated later start in the same mode.
func (s *Slot) SetTraining(training bool) {
	s.training = training
	if s.seed != nil {
		s.seed.SetTraining(training)
	}
	if s.schedule != nil {
		s.schedule.SetTraining(training)
	}
}

// GerminateOptions configure Slot.Germinate.
type GerminateOptions struct {
	// Blueprint is the catalog name ("conv_light"); required.
	Blueprint string
	// SeedID names the seed; zero means "{slot}-{blueprint}".
	SeedID string
	// BlendAlgorithmID shapes the blending ramp: "linear", "sigmoid"
	// (the default) or "gated" (which requires the GATE algorithm).
	BlendAlgorithmID string
	// Tempo is the blending ramp length in epochs; zero means 5.
	Tempo int
	// AlphaAlgorithm is how the seed blends in; zero means ADD, or GATE
	// with BlendAlgorithmID "gated". GATE requires "gated".
	AlphaAlgorithm leyline.AlphaAlgorithm
	// AlphaTarget is where blending ramps alpha to, in (0, 1]; zero
	// means 1.
	AlphaTarget float64
	// RNG initialises the seed; nil means an RNG seeded from the seed id,
	// so that germination is reproducible.
	RNG *rand.Rand
}

// Germinate builds a seed from the blueprint catalog (probing that it
// preserves the activation's shape), checks G0, and leaves it GERMINATED
// in the slot, emitting SEED_GERMINATED. MULTIPLY seeds start with their
// final affine layer zeroed, so the valve starts at the identity. The
// slot must be empty (ErrSlotUnavailable otherwise); invalid options and
// an unknown blueprint (wrapping blueprint.ErrUnknown, listing the
// available names) are errors.
func (s *Slot) Germinate(o GerminateOptions) error {
	if o.AlphaTarget == 0 {
		o.AlphaTarget = 1
	}
	if !(o.AlphaTarget > 0 && o.AlphaTarget <= 1) {
		return fmt.Errorf("kasmina: germinate %s: alpha target %g must be in (0, 1]", s.id, o.AlphaTarget)
	}
	if o.BlendAlgorithmID == "" {
		o.BlendAlgorithmID = BlendSigmoid
	}
	if o.AlphaAlgorithm == 0 {
		o.AlphaAlgorithm = leyline.BlendAdd
		if o.BlendAlgorithmID == BlendGated {
			o.AlphaAlgorithm = leyline.BlendGate
		}
	}
	if o.Tempo == 0 {
		o.Tempo = DefaultBlendTempoEpochs
	}
	switch {
	case o.BlendAlgorithmID != BlendLinear && o.BlendAlgorithmID != BlendSigmoid && o.BlendAlgorithmID != BlendGated:
		return fmt.Errorf("kasmina: germinate %s: unknown blend algorithm id %q (linear, sigmoid, gated)", s.id, o.BlendAlgorithmID)
	case !o.AlphaAlgorithm.Valid():
		return fmt.Errorf("kasmina: germinate %s: invalid alpha algorithm %v", s.id, o.AlphaAlgorithm)
	case (o.BlendAlgorithmID == BlendGated) != (o.AlphaAlgorithm == leyline.BlendGate):
		return fmt.Errorf("kasmina: germinate %s: blend algorithm %q and alpha algorithm %v do not match (\"gated\" goes with GATE and only with it)", s.id, o.BlendAlgorithmID, o.AlphaAlgorithm)
	case o.Tempo < 0:
		return fmt.Errorf("kasmina: germinate %s: tempo %d must be ≥ 0", s.id, o.Tempo)
	case o.Blueprint == "":
		return fmt.Errorf("kasmina: germinate %s: blueprint is required", s.id)
	}
	if s.state != nil || s.seed != nil {
		return fmt.Errorf("kasmina: germinate %s: %w: it holds %v", s.id, ErrSlotUnavailable, s.describe())
	}
	if o.SeedID == "" {
		o.SeedID = s.id + "-" + o.Blueprint
	}
	if o.RNG == nil {
		h := fnv.New64a()
		h.Write([]byte(o.SeedID))
		o.RNG = tensor.NewRNG(h.Sum64())
	}
	seed, err := blueprint.Build(s.topology, o.Blueprint, blueprint.Options{
		Channels: s.channels, RNG: o.RNG, ZeroFinal: o.AlphaAlgorithm == leyline.BlendMultiply, DType: s.dtype,
	})
	if err != nil {
		return fmt.Errorf("kasmina: germinate %s: %w", s.id, err)
	}
	var gate *GatedBlend
	if o.AlphaAlgorithm == leyline.BlendGate {
		if gate, err = NewGatedBlend(GatedBlendOptions{Channels: s.channels, Topology: s.topology, RNG: o.RNG, DType: s.dtype}); err != nil {
			return fmt.Errorf("kasmina: germinate %s: %w", s.id, err)
		}
	}
	if err := s.toHostDevice(seed, gate); err != nil {
		return fmt.Errorf("kasmina: germinate %s: %w", s.id, err)
	}
	st := NewSeedState(o.SeedID, o.Blueprint, s.id)
	st.AlphaAlgorithm = o.AlphaAlgorithm
	st.BlendTempoEpochs = o.Tempo
	st.AlphaTarget = o.AlphaTarget
	st.Metrics.SeedParamCount = blueprint.ParamCount(seed)
	if gate != nil {
		st.Metrics.SeedParamCount += blueprint.ParamCount(gate)
	}
	st.Metrics.HostParamCount = numel(s.host)
	res, err := s.gates.Check(st, leyline.StageGerminated)
	if err != nil {
		return err
	}
	s.emitGate(st, res, leyline.StageGerminated)
	if !res.Passed {
		return fmt.Errorf("kasmina: germinate %s: %s", s.id, res.Message)
	}
	if err := st.Transition(leyline.StageGerminated); err != nil {
		return err
	}
	seed.SetTraining(s.training)
	if gate != nil {
		gate.SetTraining(s.training)
	}
	s.state, s.seed, s.schedule = st, seed, gate
	s.blendID = o.BlendAlgorithmID
	s.rng = o.RNG
	s.isolate, s.frozen = false, false
	s.pendingReason, s.pendingInitiator = "", ""
	s.version++
	s.emit(leyline.EventSeedGerminated, &leyline.SeedGerminatedPayload{
		SlotID: s.id, EnvID: leyline.EnvIDUnset, BlueprintID: o.Blueprint, Params: st.Metrics.SeedParamCount,
		BlendTempoEpochs: o.Tempo, AlphaCurve: s.blendCurve().String(),
	})
	return nil
}

// Device returns where the slot builds its seeds and gates: the device
// of its host's parameters, or SlotOptions.Device for a slot without
// them.
func (s *Slot) Device() tensor.Device {
	for _, p := range s.host {
		if p != nil && p.Value != nil {
			return p.Value.Device()
		}
	}
	return s.dev
}

// toHostDevice moves a freshly built seed and its gate (either nil when
// absent) to the slot's Device (nn.To: one host-to-device copy of their
// initial weights), so that a model moved to a device grows seeds there.
func (s *Slot) toHostDevice(seed nn.Module, gate *GatedBlend) error {
	dev := s.Device()
	if dev.IsCPU() {
		return nil
	}
	if seed != nil {
		if err := nn.To(seed, dev); err != nil {
			return err
		}
	}
	if gate != nil {
		return nn.To(gate, dev)
	}
	return nil
}

// describe names what the slot holds, for error messages.
func (s *Slot) describe() string {
	if s.state == nil {
		return "no seed"
	}
	return fmt.Sprintf("seed %q in %v", s.state.SeedID, s.state.Stage)
}

// blendCurve is the easing of the germination's blend algorithm.
func (s *Slot) blendCurve() leyline.AlphaCurve {
	if s.blendID == BlendSigmoid {
		return leyline.CurveSigmoid
	}
	return leyline.CurveLinear
}

// AdvanceStage evaluates the gate guarding target and, if it passes,
// moves the seed there, running the stage-entry hook and emitting
// SEED_GATE_EVALUATED (pass or fail), SEED_STAGE_CHANGED and, on
// fossilization, SEED_FOSSILIZED. Target zero (StageUnknown) means the
// next stage of the lifecycle (leyline.NextStage). An empty slot yields a
// failed G0 result ("no_active_seed"). A failure stage as target is an
// error (use Prune), and so is a target the transition table does not
// allow from the current stage (wrapping ErrInvalidTransition; the gate
// is not evaluated).
func (s *Slot) AdvanceStage(target leyline.SeedStage) (GateResult, error) {
	if s.state == nil {
		return failed(G0, "no_active_seed"), nil
	}
	if leyline.IsFailureStage(target) {
		return GateResult{}, fmt.Errorf("kasmina: advance %s to %v: failure stages are entered with Prune", s.id, target)
	}
	if target == leyline.StageUnknown {
		next, ok := leyline.NextStage(s.state.Stage)
		if !ok {
			return GateResult{}, fmt.Errorf("kasmina: advance %s: %w: no stage follows %v", s.id, ErrInvalidTransition, s.state.Stage)
		}
		target = next
	}
	gate, err := GateFor(target)
	if err != nil {
		return GateResult{}, fmt.Errorf("kasmina: advance %s: %w", s.id, err)
	}
	if !leyline.IsValidTransition(s.state.Stage, target) {
		return failed(gate, "invalid_transition"), fmt.Errorf("kasmina: advance %s: %w %v → %v", s.id, ErrInvalidTransition, s.state.Stage, target)
	}
	res, err := s.gates.Check(s.state, target)
	if err != nil {
		return GateResult{}, err
	}
	s.emitGate(s.state, res, target)
	if !res.Passed {
		return res, nil
	}
	if err := s.transition(target); err != nil {
		return res, err
	}
	return res, nil
}

// transition moves the state to stage to, runs the stage-entry hook and
// emits the events.
func (s *Slot) transition(to leyline.SeedStage) error {
	st := s.state
	from := st.Stage
	epochs := st.Metrics.EpochsInCurrentStage
	if err := st.Transition(to); err != nil {
		return err
	}
	if err := s.onEnter(from, to); err != nil {
		return err
	}
	s.emitStageChange(from, to, epochs)
	if to == leyline.StageFossilized {
		s.emit(leyline.EventSeedFossilized, &leyline.SeedFossilizedPayload{
			SlotID: s.id, EnvID: leyline.EnvIDUnset, BlueprintID: st.BlueprintID,
			Improvement: st.Metrics.TotalImprovement(), ParamsAdded: st.Metrics.SeedParamCount,
			Alpha: st.Alpha, EpochsTotal: st.Metrics.EpochsTotal,
			Counterfactual: st.Metrics.CounterfactualContribution, BlendingDelta: st.Metrics.BlendingDelta(),
		})
	}
	return nil
}

// onEnter is the stage-entry hook.
func (s *Slot) onEnter(from, to leyline.SeedStage) error {
	st := s.state
	switch {
	case to == leyline.StageTraining:
		s.isolate = true
	case to == leyline.StageBlending && from == leyline.StageTraining:
		// cnn hosts keep the seed's input detached; other topologies
		// let the host co-adapt.
		s.isolate = s.topology == TopologyCNN
		st.Metrics.AccuracyAtBlendingStart = st.Metrics.CurrentValAccuracy
		st.Metrics.BlendingStarted = true
		return s.startBlending()
	case to == leyline.StageHolding:
		if st.AlphaAlgorithm != leyline.BlendGate && s.schedule != nil {
			s.schedule = nil
			s.version++
		}
		c := st.AlphaController
		c.Alpha, c.Start, c.Target = 1, 1, 1
		c.Mode = leyline.AlphaHold
		c.StepsDone = c.StepsTotal
		st.setAlpha(1)
	}
	return nil
}

// startBlending starts the alpha ramp from the current alpha to the
// germination's target over its tempo.
func (s *Slot) startBlending() error {
	st := s.state
	steps := st.BlendTempoEpochs
	if steps <= 0 {
		steps = DefaultBlendTempoEpochs
	}
	st.AlphaController = NewAlphaController(st.Alpha)
	if err := st.AlphaController.Retarget(st.AlphaTarget, steps, s.blendCurve(), DefaultSteepness); err != nil {
		return err
	}
	if s.blendID == BlendGated {
		st.AlphaAlgorithm = leyline.BlendGate
		return s.ensureSchedule()
	}
	return nil
}

// ensureSchedule creates the GATE algorithm's gate if missing.
func (s *Slot) ensureSchedule() error {
	if s.schedule != nil {
		return nil
	}
	rng := s.rng
	if rng == nil {
		rng = tensor.NewRNG(0)
	}
	g, err := NewGatedBlend(GatedBlendOptions{Channels: s.channels, Topology: s.topology, RNG: rng, DType: s.dtype})
	if err != nil {
		return err
	}
	// The gate joins the seed on the host's device.
	if err := s.toHostDevice(nil, g); err != nil {
		return err
	}
	g.SetTraining(s.training)
	if s.frozen {
		setRequiresGrad(g.Parameters(), false)
	}
	s.schedule = g
	s.version++
	return nil
}

// Prune removes the seed at once: the state moves to PRUNED (and is kept
// through the embargo), the module is freed, alpha drops to 0, and
// SEED_STAGE_CHANGED and SEED_PRUNED are emitted. A reason in
// AutoPruneReasons marks the seed auto-pruned. It returns false, doing
// nothing, for an empty slot, a FOSSILIZED seed, or one already on the
// failure path. An empty initiator means "policy".
func (s *Slot) Prune(reason, initiator string) bool {
	if s.state == nil || !leyline.IsValidTransition(s.state.Stage, leyline.StagePruned) {
		return false
	}
	if initiator == "" {
		initiator = InitiatorPolicy
	}
	if reason == "" {
		reason = "unspecified"
	}
	st := s.state
	if AutoPruneReasons[reason] {
		st.Metrics.AutoPruned = true
		st.Metrics.AutoPruneReason = reason
	}
	from, epochs := st.Stage, st.Metrics.EpochsInCurrentStage
	if err := st.Transition(leyline.StagePruned); err != nil {
		return false
	}
	s.seed, s.schedule = nil, nil
	s.frozen, s.isolate = false, false
	s.pendingReason, s.pendingInitiator = "", ""
	s.version++
	st.AlphaController.Snap(0)
	st.setAlpha(0)
	s.emitStageChange(from, leyline.StagePruned, epochs)
	s.emit(leyline.EventSeedPruned, &leyline.SeedPrunedPayload{
		SlotID: s.id, EnvID: leyline.EnvIDUnset, Reason: reason, BlueprintID: st.BlueprintID,
		Improvement: st.Metrics.TotalImprovement(), AutoPruned: st.Metrics.AutoPruned,
		EpochsTotal: st.Metrics.EpochsTotal, Counterfactual: st.Metrics.CounterfactualContribution,
		BlendingDelta: st.Metrics.BlendingDelta(), Initiator: initiator,
	})
	return true
}

// RampOptions configure an alpha ramp (SchedulePrune, SetAlphaTarget).
type RampOptions struct {
	// Steps is the ramp length in epochs (0 = at once).
	Steps int
	// Curve is the easing; zero means LINEAR.
	Curve leyline.AlphaCurve
	// Steepness of the SIGMOID curve; zero means 12.
	Steepness float64
	// Initiator of the change ("policy" when empty).
	Initiator string
}

func (o RampOptions) filled() RampOptions {
	if o.Curve == 0 {
		o.Curve = leyline.CurveLinear
	}
	if o.Steepness == 0 {
		o.Steepness = DefaultSteepness
	}
	if o.Initiator == "" {
		o.Initiator = InitiatorPolicy
	}
	return o
}

// SchedulePrune ramps alpha down to 0 over o.Steps epochs and prunes the
// seed (with reason) when StepEpoch reaches 0; meanwhile the seed's
// parameters are frozen (BLEND_OUT) while its forward still runs. With
// no steps or alpha already 0, or for a seed not yet blending, it prunes
// at once; a HOLDING seed first moves back to BLENDING. It returns false
// for an empty slot, a FOSSILIZED seed, a seed on the failure path, or
// while an alpha ramp is running.
func (s *Slot) SchedulePrune(reason string, o RampOptions) bool {
	if s.state == nil || s.state.Stage == leyline.StageFossilized || leyline.IsFailureStage(s.state.Stage) {
		return false
	}
	o = o.filled()
	st := s.state
	if o.Steps <= 0 || st.Alpha <= 0 {
		return s.Prune(reason, o.Initiator)
	}
	if st.AlphaController.Mode != leyline.AlphaHold {
		return false
	}
	if st.Stage == leyline.StageHolding {
		if err := s.transition(leyline.StageBlending); err != nil {
			return false
		}
	}
	if st.Stage != leyline.StageBlending {
		return s.Prune(reason, o.Initiator)
	}
	if err := st.AlphaController.Retarget(0, o.Steps, o.Curve, o.Steepness); err != nil {
		return false
	}
	if reason == "" {
		reason = "scheduled_prune"
	}
	s.pendingReason, s.pendingInitiator = reason, o.Initiator
	s.updateFreeze()
	return true
}

// SetAlphaTarget retargets a BLENDING or HOLDING seed's alpha to target
// (in (0, 1]) over o.Steps epochs, optionally switching the blend
// algorithm (zero algorithm keeps the current one; GATE creates the gate,
// ADD and MULTIPLY drop it). A HOLDING seed with target < 1 moves back to
// BLENDING. A ramp down freezes the seed's parameters (BLEND_OUT) until
// alpha holds again. It returns false for an empty slot, a FOSSILIZED
// seed, target ≤ 0, a running ramp, or any other stage; an error only
// when the gate cannot be built.
func (s *Slot) SetAlphaTarget(target float64, algorithm leyline.AlphaAlgorithm, o RampOptions) (bool, error) {
	if s.state == nil || !(target > 0) || math.IsNaN(target) {
		return false, nil
	}
	st := s.state
	if st.Stage != leyline.StageBlending && st.Stage != leyline.StageHolding {
		return false, nil
	}
	if st.AlphaController.Mode != leyline.AlphaHold {
		return false, nil
	}
	if algorithm != 0 && !algorithm.Valid() {
		return false, fmt.Errorf("kasmina: set alpha target %s: invalid alpha algorithm %v", s.id, algorithm)
	}
	o = o.filled()
	target = clamp01(target)
	if st.Stage == leyline.StageHolding && target < 1 {
		if err := s.transition(leyline.StageBlending); err != nil {
			return false, err
		}
	}
	if algorithm != 0 && algorithm != st.AlphaAlgorithm {
		if algorithm == leyline.BlendGate {
			if err := s.ensureSchedule(); err != nil {
				return false, err
			}
		} else if s.schedule != nil {
			s.schedule = nil
			s.version++
		}
		st.AlphaAlgorithm = algorithm
	}
	if err := st.AlphaController.Retarget(target, o.Steps, o.Curve, o.Steepness); err != nil {
		return false, nil
	}
	st.Alpha = st.AlphaController.Alpha
	st.Metrics.CurrentAlpha = st.Alpha
	s.updateFreeze()
	return true, nil
}

// updateFreeze freezes the seed's (and gate's) parameters while alpha
// ramps down and thaws them otherwise. Freezing clears requires-grad on
// the leaves, so the forward graph stays intact but no gradient
// accumulates into them.
func (s *Slot) updateFreeze() {
	want := s.state != nil && s.state.AlphaController.Mode == leyline.AlphaDown
	if want == s.frozen {
		return
	}
	s.frozen = want
	setRequiresGrad(s.Parameters(), !want)
	s.version++
}

func setRequiresGrad(ps []*autograd.Var, b bool) {
	for _, p := range ps {
		if p.IsLeaf() {
			p.SetRequiresGrad(b)
		}
	}
}

// StepEpoch advances the slot by one epoch tick:
//
//   - GERMINATED, TRAINING: advance only if that gate is in AutoForward
//     (TRAINING also needs MinBlendingEpochs in stage).
//   - BLENDING: one alpha controller step; on reaching a target of 0 the
//     scheduled prune happens; on reaching another target, G3 in
//     AutoForward advances to HOLDING (strict gates also need
//     MinBlendingEpochs in stage). Nothing advances otherwise.
//   - HOLDING, FOSSILIZED: nothing (no auto-fossilize, no timeout prune).
//   - PRUNED → EMBARGOED; EMBARGOED counts EmbargoEpochsAfterPrune ticks
//     → RESETTING; RESETTING one tick → the slot is empty. A prune is
//     therefore followed by 7 ticks before the slot can germinate again.
func (s *Slot) StepEpoch() {
	if s.state == nil {
		return
	}
	s.updateFreeze()
	st := s.state
	switch st.Stage {
	case leyline.StageGerminated:
		if s.auto[G1] {
			_, _ = s.AdvanceStage(leyline.StageTraining)
		}
	case leyline.StageTraining:
		if s.auto[G2] && st.Metrics.EpochsInCurrentStage >= MinBlendingEpochs {
			_, _ = s.AdvanceStage(leyline.StageBlending)
		}
	case leyline.StageBlending:
		c := st.AlphaController
		c.Step()
		st.Alpha = c.Alpha
		st.Metrics.CurrentAlpha = c.Alpha
		st.Metrics.AlphaRampStep = c.StepsDone
		if !c.AtTarget() {
			return
		}
		if c.Target <= alphaEps {
			reason, initiator := s.pendingReason, s.pendingInitiator
			if reason == "" {
				reason = "scheduled_prune"
			}
			s.Prune(reason, initiator)
			return
		}
		s.updateFreeze()
		if s.auto[G3] && (s.gates.Permissive || st.Metrics.EpochsInCurrentStage >= MinBlendingEpochs) {
			_, _ = s.AdvanceStage(leyline.StageHolding)
		}
	case leyline.StagePruned:
		s.tick(leyline.StageEmbargoed, false)
	case leyline.StageEmbargoed:
		st.Metrics.EpochsTotal++
		st.Metrics.EpochsInCurrentStage++
		if st.Metrics.EpochsInCurrentStage >= EmbargoEpochsAfterPrune {
			s.tick(leyline.StageResetting, false)
		}
	case leyline.StageResetting:
		st.Metrics.EpochsTotal++
		st.Metrics.EpochsInCurrentStage++
		s.tick(leyline.StageDormant, true)
	}
}

// tick moves a failure-path state on, emitting the stage change; clear
// empties the slot afterwards.
func (s *Slot) tick(to leyline.SeedStage, clear bool) {
	st := s.state
	from, epochs := st.Stage, st.Metrics.EpochsInCurrentStage
	if err := st.Transition(to); err != nil {
		return
	}
	s.emitStageChange(from, to, epochs)
	if clear {
		s.state = nil
		s.blendID = ""
		s.rng = nil
	}
}

// SetAlpha sets the seed's alpha, clamped to [0, 1], in the state, its
// metrics and its controller. No-op for an empty slot.
func (s *Slot) SetAlpha(v float64) {
	if s.state != nil {
		s.state.setAlpha(v)
	}
}

// ForceAlpha runs f with the seed's alpha overridden by v (clamped), as
// counterfactual evaluation needs, and restores it afterwards, also when
// f panics. Calls nest.
func (s *Slot) ForceAlpha(v float64, f func()) {
	prev := s.forced
	v = clamp01(v)
	s.forced = &v
	defer func() { s.forced = prev }()
	f()
}

// RecordAccuracy records one epoch's validation accuracy (percent) in the
// seed's metrics; no-op for an empty slot.
func (s *Slot) RecordAccuracy(acc float64) {
	if s.state != nil {
		s.state.Metrics.RecordAccuracy(acc)
	}
}

// Forward blends the seed's output into the host activation h at this
// slot. Without an active seed it returns h itself (the seed is not
// called). Otherwise the seed runs on h, detached when gradients are
// isolated; in TRAINING at alpha 0 without an override the
// straight-through blend keeps the value exactly h while the seed learns;
// else the seed's algorithm blends with alpha = override (a per-sample
// [B, 1, 1, 1] (cnn) or [B, 1] (mlp) Var), or the forced or current
// alpha. A malformed override, a seed that fails on h, or a gate present
// with ADD/MULTIPLY (missing with GATE) is an error.
func (s *Slot) Forward(h *autograd.Var, override *autograd.Var) (out *autograd.Var, err error) {
	if h == nil {
		return nil, errors.New("kasmina: slot Forward of a nil activation")
	}
	if override != nil {
		if err := s.checkOverride(h, override); err != nil {
			return nil, err
		}
	}
	if !s.IsActive() {
		return h, nil
	}
	st := s.state
	switch {
	case st.AlphaAlgorithm == leyline.BlendGate && s.schedule == nil:
		return nil, fmt.Errorf("kasmina: slot %s: GATE blending without a gate", s.id)
	case st.AlphaAlgorithm != leyline.BlendGate && s.schedule != nil:
		return nil, fmt.Errorf("kasmina: slot %s: %v blending with a gate present", s.id, st.AlphaAlgorithm)
	}
	err = guard("slot "+s.id+" Forward", func() {
		in := h
		if s.isolate {
			in = autograd.Detach(h)
		}
		sd := s.seed.Forward(in)
		alpha := s.Alpha()
		if st.Stage == leyline.StageTraining && alpha == 0 && override == nil {
			out = StraightThrough(h, sd)
			return
		}
		a := ScalarAlpha(alpha)
		if override != nil {
			a = SampleAlpha(override)
		}
		switch st.AlphaAlgorithm {
		case leyline.BlendMultiply:
			out = BlendMultiply(h, sd, in, a)
		case leyline.BlendGate:
			out = BlendGate(h, sd, s.schedule.Forward(in), a)
		default:
			out = BlendAdd(h, sd, a)
		}
	})
	return out, err
}

// checkOverride validates a per-sample alpha against the activation h.
func (s *Slot) checkOverride(h, a *autograd.Var) error {
	batch := 0
	if hs := h.Shape(); len(hs) > 0 {
		batch = hs[0]
	}
	return s.checkOverrideShape(batch, a)
}

// checkOverrideShape validates a per-sample alpha for a batch: [B, 1, 1,
// 1] for cnn, [B, 1] for mlp.
func (s *Slot) checkOverrideShape(batch int, a *autograd.Var) error {
	want := []int{batch, 1}
	if s.topology == TopologyCNN {
		want = []int{batch, 1, 1, 1}
	}
	if as := a.Shape(); !tensor.SameShape(as, want) {
		return fmt.Errorf("kasmina: slot %s: alpha override of shape %v, want %v (%s, batch %d)", s.id, as, want, s.topology, batch)
	}
	return nil
}

// CaptureGradientTelemetry reads the gradients of the host parameters
// (SlotOptions.HostParams) and of the seed after a backward pass and
// updates the seed's metrics and telemetry: the seed-to-host gradient
// norm ratio, normalised by √(host params / seed params) and capped at
// MaxGradientNormRatio; the EMA of the seed's gradient norm; and the
// seed's gradient health (§5.8). Non-finite norms leave the ratio and
// the EMA unchanged and record the seed as exploding with health 0. It
// reads the gradients' per-parameter norms on the host (computed where
// the gradients are, TensorNorms): call it outside captured regions,
// every few steps.
func (s *Slot) CaptureGradientTelemetry() {
	ts := s.telemetryTensors()
	if ts == nil {
		return
	}
	// The seed's and the host's per-parameter norms are computed where
	// the gradients are and reach the host together: one host sync per
	// slot on a device (MorphogeneticModel.GradientTelemetry takes one
	// for every slot).
	norms, err := TensorNorms(ts)
	if err != nil {
		norms = nil
	}
	s.applyGradientTelemetry(norms)
}

// telemetryTensors lists the gradients CaptureGradientTelemetry reads:
// the seed's parameters' then the host's (nil entries where a parameter
// has no gradient); nil for a slot without a seed.
func (s *Slot) telemetryTensors() []*tensor.Tensor {
	if s.state == nil || s.seed == nil {
		return nil
	}
	return append(gradsOf(s.Parameters()), gradsOf(s.host)...)
}

// applyGradientTelemetry is CaptureGradientTelemetry's update from the
// norms of telemetryTensors (nil: they could not be computed, and nothing
// changes).
func (s *Slot) applyGradientTelemetry(norms []float64) {
	if s.state == nil || s.seed == nil {
		return
	}
	st := s.state
	seedParams := s.Parameters()
	var health GradientHealth
	ok := false
	if norms != nil {
		health, ok = gradientHealth(norms[:len(seedParams)])
	}
	if !ok {
		return
	}
	t := &st.Telemetry
	if t.HealthMeasured {
		prev := t.GradientHealth
		t.PrevGradientHealth = &prev
	}
	t.HealthMeasured = true
	t.GradientHealth = health.Health
	t.HasVanishing, t.HasExploding = health.HasVanishing, health.HasExploding
	seedNorm := health.Norm
	hostNorm := gradNorm(norms[len(seedParams):])
	if !isFinite(seedNorm) || !isFinite(hostNorm) {
		t.GradientNorm = 0
		t.HasExploding = true
		t.GradientHealth = 0
		return
	}
	t.GradientNorm = seedNorm
	raw := 0.0
	if hostNorm >= hostNormFloor {
		raw = seedNorm / hostNorm
	}
	hostCount, seedCount := numel(s.host), numel(seedParams)
	if hostCount > 0 && seedCount > 0 {
		raw *= math.Sqrt(float64(hostCount) / float64(seedCount))
	}
	ratio := math.Min(MaxGradientNormRatio, raw)
	st.Metrics.SeedGradientNormRatio = &ratio
	st.Metrics.GradientNormAvg = gradNormEMADecay*st.Metrics.GradientNormAvg + (1-gradNormEMADecay)*seedNorm
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// numel counts the elements of params.
func numel(params []*autograd.Var) int {
	n := 0
	for _, p := range params {
		n += p.Value.Numel()
	}
	return n
}

// emit sends an event about the slot's seed to the sink.
func (s *Slot) emit(t leyline.EventType, data leyline.Payload) {
	if s.sink == nil {
		return
	}
	ev := leyline.NewEvent(t, data)
	ev.SlotID = s.id
	if s.state != nil {
		ev.SeedID = s.state.SeedID
	}
	s.sink.Emit(ev)
}

func (s *Slot) emitGate(st *SeedState, r GateResult, target leyline.SeedStage) {
	if s.sink == nil {
		return
	}
	ev := leyline.NewEvent(leyline.EventSeedGateEvaluated, &leyline.SeedGateEvaluatedPayload{
		SlotID: s.id, EnvID: leyline.EnvIDUnset, Gate: r.Gate.String(), Passed: r.Passed, TargetStage: target,
		ChecksPassed: append([]string{}, r.ChecksPassed...), ChecksFailed: append([]string{}, r.ChecksFailed...),
		Message: r.Message,
	})
	ev.SlotID, ev.SeedID = s.id, st.SeedID
	ev.Message = r.Message
	s.sink.Emit(ev)
}

func (s *Slot) emitStageChange(from, to leyline.SeedStage, epochsInFrom int) {
	if s.sink == nil || s.state == nil {
		return
	}
	st := s.state
	p := &leyline.SeedStageChangedPayload{
		SlotID: s.id, EnvID: leyline.EnvIDUnset, From: from, To: to,
		Alpha: st.Alpha, AccuracyDelta: st.Metrics.TotalImprovement(), EpochsInStage: epochsInFrom,
	}
	if r := st.Metrics.SeedGradientNormRatio; r != nil {
		p.GradRatio = *r
	}
	s.emit(leyline.EventSeedStageChanged, p)
}
