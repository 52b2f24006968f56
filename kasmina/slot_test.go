package kasmina

import (
	"errors"
	"slices"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina/blueprint"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
)

// newSlot is a cnn slot of 4 channels with a recorder, building its
// seeds on the test device.
func newSlot(t *testing.T, o SlotOptions) (*Slot, *recorder) {
	t.Helper()
	rec := &recorder{}
	o.Device = testdevice.Device(t)
	if o.ID == "" {
		o.ID = "r0c0"
	}
	if o.Channels == 0 {
		o.Channels = 4
	}
	o.Sink = rec
	s, err := NewSlot(o)
	noErr(t, err)
	return s, rec
}

func TestSlotLifecycleHappyPath(t *testing.T) {
	s, rec := newSlot(t, SlotOptions{})
	check(t, s.Stage() == leyline.StageDormant && !s.IsActive(), "new slot not empty")
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light"}))
	st := s.State()
	check(t, st.SeedID == "r0c0-conv_light" && st.Stage == leyline.StageGerminated, "state %+v", st)
	check(t, st.Metrics.SeedParamCount == blueprint.ParamCount(s.Seed()) && st.Metrics.SeedParamCount > 0, "param count")
	check(t, rec.count(leyline.EventSeedGerminated) == 1, "events %v", rec.types())

	res, err := s.AdvanceStage(0)
	noErr(t, err)
	check(t, res.Passed && res.Gate == G1 && s.Stage() == leyline.StageTraining && s.IsolateGradients(), "to TRAINING: %+v", res)
	readyForBlending(st)
	res, err = s.AdvanceStage(leyline.StageBlending)
	noErr(t, err)
	check(t, res.Passed && s.Stage() == leyline.StageBlending && s.IsolateGradients(), "to BLENDING: %+v", res)
	check(t, st.Metrics.BlendingStarted && st.AlphaController.Mode == leyline.AlphaUp && st.AlphaController.Curve == leyline.CurveSigmoid, "blending ramp %+v", st.AlphaController)
	for i := 0; i < DefaultBlendTempoEpochs; i++ {
		check(t, s.Stage() == leyline.StageBlending, "left BLENDING by itself")
		s.StepEpoch()
	}
	check(t, st.Alpha == 1 && st.Metrics.AlphaRampStep == DefaultBlendTempoEpochs, "alpha %g after the ramp", st.Alpha)
	s.StepEpoch()
	check(t, s.Stage() == leyline.StageBlending, "BLENDING at α=1 advanced by itself")
	res, err = s.AdvanceStage(0)
	noErr(t, err)
	check(t, res.Passed && res.Gate == G3 && s.Stage() == leyline.StageHolding, "to HOLDING: %+v", res)
	res, err = s.AdvanceStage(0)
	noErr(t, err)
	check(t, !res.Passed && containsStr(res.ChecksFailed, "counterfactual_not_available"), "G5 without counterfactual: %+v", res)
	st.Metrics.RecordCounterfactual(3)
	res, err = s.AdvanceStage(0)
	noErr(t, err)
	check(t, res.Passed && res.Gate == G5 && s.Stage() == leyline.StageFossilized, "to FOSSILIZED: %+v", res)
	check(t, !s.Prune("x", ""), "pruned a fossilized seed")
	check(t, !s.SchedulePrune("x", RampOptions{Steps: 3}), "scheduled prune of a fossilized seed")
	ok, _ := s.SetAlphaTarget(0.5, 0, RampOptions{})
	check(t, !ok, "retargeted a fossilized seed")
	_, err = s.AdvanceStage(0)
	wantErr(t, err, ErrInvalidTransition)

	want := []leyline.EventType{
		leyline.EventSeedGateEvaluated, leyline.EventSeedGerminated, // G0
		leyline.EventSeedGateEvaluated, leyline.EventSeedStageChanged, // TRAINING
		leyline.EventSeedGateEvaluated, leyline.EventSeedStageChanged, // BLENDING
		leyline.EventSeedGateEvaluated, leyline.EventSeedStageChanged, // HOLDING
		leyline.EventSeedGateEvaluated,                                                             // G5 failed
		leyline.EventSeedGateEvaluated, leyline.EventSeedStageChanged, leyline.EventSeedFossilized, // FOSSILIZED
	}
	check(t, slices.Equal(rec.types(), want), "events %v", rec.types())
	for _, e := range rec.events {
		noErr(t, e.Data.Validate())
		check(t, e.SlotID == "r0c0" && e.SeedID == "r0c0-conv_light", "event ids %q %q", e.SlotID, e.SeedID)
		switch p := e.Data.(type) {
		case *leyline.SeedGateEvaluatedPayload:
			check(t, p.EnvID == leyline.EnvIDUnset && p.ChecksFailed != nil && p.ChecksPassed != nil, "gate payload %+v", p)
		case *leyline.SeedStageChangedPayload:
			check(t, p.EnvID == leyline.EnvIDUnset, "env id")
		}
	}
}

func TestSlotGerminateChecks(t *testing.T) {
	s, _ := newSlot(t, SlotOptions{})
	for _, o := range []GerminateOptions{
		{Blueprint: "conv_light", AlphaTarget: 1.5},
		{Blueprint: "conv_light", AlphaTarget: -0.1},
		{Blueprint: "conv_light", BlendAlgorithmID: BlendGated, AlphaAlgorithm: leyline.BlendAdd},
		{Blueprint: "conv_light", AlphaAlgorithm: leyline.BlendGate},
		{Blueprint: "conv_light", BlendAlgorithmID: "cubic"},
		{Blueprint: ""},
	} {
		check(t, s.Germinate(o) != nil, "germinate %+v accepted", o)
	}
	err := s.Germinate(GerminateOptions{Blueprint: "no_such_blueprint"})
	wantErr(t, err, blueprint.ErrUnknown)
	check(t, s.State() == nil, "failed germination left state")

	noErr(t, s.Germinate(GerminateOptions{Blueprint: "norm", SeedID: "mine"}))
	check(t, s.State().SeedID == "mine", "seed id %q", s.State().SeedID)
	wantErr(t, s.Germinate(GerminateOptions{Blueprint: "norm"}), ErrSlotUnavailable)

	// "gated" defaults to GATE and builds the gate.
	g, _ := newSlot(t, SlotOptions{})
	noErr(t, g.Germinate(GerminateOptions{Blueprint: "conv_small", BlendAlgorithmID: BlendGated}))
	check(t, g.State().AlphaAlgorithm == leyline.BlendGate && g.AlphaSchedule() != nil, "gated germination")
	check(t, len(g.Parameters()) == len(g.Seed().Parameters())+4, "gate parameters not owned by the slot")
}

func TestSlotRejectedTransitions(t *testing.T) {
	s, _ := newSlot(t, SlotOptions{})
	res, err := s.AdvanceStage(0)
	noErr(t, err)
	check(t, !res.Passed && res.Gate == G0 && containsStr(res.ChecksFailed, "no_active_seed"), "empty slot: %+v", res)
	check(t, !s.Prune("x", ""), "pruned an empty slot")
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "noop"}))
	readyForBlending(s.State())
	_, err = s.AdvanceStage(leyline.StageBlending) // skips TRAINING
	wantErr(t, err, ErrInvalidTransition)
	_, err = s.AdvanceStage(leyline.StageFossilized)
	wantErr(t, err, ErrInvalidTransition)
	for _, f := range []leyline.SeedStage{leyline.StagePruned, leyline.StageEmbargoed, leyline.StageResetting} {
		_, err = s.AdvanceStage(f)
		check(t, err != nil, "advance to %v accepted", f)
	}
	advanceTo(t, s, leyline.StageTraining)
	_, err = s.AdvanceStage(leyline.StageFossilized) // FOSSILIZE from TRAINING
	wantErr(t, err, ErrInvalidTransition)
	_, err = s.AdvanceStage(leyline.StageGerminated) // backwards
	wantErr(t, err, ErrInvalidTransition)
	advanceTo(t, s, leyline.StageBlending)
	s.State().Metrics.RecordCounterfactual(5)
	_, err = s.AdvanceStage(leyline.StageFossilized) // FOSSILIZE from BLENDING
	wantErr(t, err, ErrInvalidTransition)
	check(t, s.Stage() == leyline.StageBlending, "stage changed")
}

func TestSeedStateTransition(t *testing.T) {
	st := NewSeedState("a", "b", "r0c0")
	noErr(t, st.Transition(leyline.StageGerminated))
	noErr(t, st.Transition(leyline.StageTraining))
	st.Metrics.RecordAccuracy(40)
	st.Metrics.RecordAccuracy(45)
	wantErr(t, st.Transition(leyline.StageTraining), ErrInvalidTransition)   // same stage
	wantErr(t, st.Transition(leyline.StageHolding), ErrInvalidTransition)    // skip
	wantErr(t, st.Transition(leyline.StageGerminated), ErrInvalidTransition) // backwards
	wantErr(t, st.Transition(leyline.SeedStage(5)), ErrInvalidTransition)    // reserved
	noErr(t, st.Transition(leyline.StageBlending))
	check(t, st.PreviousStage == leyline.StageTraining && st.PreviousEpochsInStage == 2, "previous %v %d", st.PreviousStage, st.PreviousEpochsInStage)
	check(t, st.Metrics.EpochsInCurrentStage == 0 && st.Metrics.AccuracyAtStageStart == 45, "baseline not reset")
	check(t, len(st.StageHistory) == 3 && st.StageHistory[2].From == leyline.StageTraining && st.StageHistory[2].EpochsInFrom == 2, "history %+v", st.StageHistory)
	for i := 0; i < 120; i++ {
		noErr(t, st.Transition(leyline.StageHolding))
		noErr(t, st.Transition(leyline.StageBlending))
	}
	check(t, len(st.StageHistory) == StageHistoryLimit, "history length %d", len(st.StageHistory))
	check(t, st.StageHistory[StageHistoryLimit-1].To == leyline.StageBlending, "newest entry kept")
}

func TestMetricsRecordAccuracy(t *testing.T) {
	var m SeedMetrics
	m.RecordAccuracy(50)
	check(t, m.InitialValAccuracy == 50 && m.AccuracyAtStageStart == 50 && m.EpochsTotal == 1, "%+v", m)
	m.RecordAccuracy(70)
	m.RecordAccuracy(60)
	check(t, m.BestValAccuracy == 70 && m.CurrentValAccuracy == 60 && m.EpochsInCurrentStage == 3, "%+v", m)
	check(t, m.TotalImprovement() == 10 && m.NormalizedTotalImprovement() == 1, "improvement")
	m.RecordAccuracy(-1000)
	check(t, m.NormalizedImprovementSinceStageStart() == -1, "normalised clamp")
	check(t, m.BlendingDelta() == 0, "blending delta before blending")
	m.RecordCounterfactual(2)
	check(t, m.ContributionVelocity == 0, "velocity after the first measurement")
	m.RecordCounterfactual(4)
	check(t, m.ContributionVelocity == 0.6, "velocity %g", m.ContributionVelocity)
}

func TestStepEpochNeverAutoAdvances(t *testing.T) {
	s, _ := newSlot(t, SlotOptions{})
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "noop"}))
	for i := 0; i < 3; i++ {
		s.StepEpoch()
	}
	check(t, s.Stage() == leyline.StageGerminated, "GERMINATED advanced by itself")
	advanceTo(t, s, leyline.StageTraining)
	readyForBlending(s.State())
	s.State().Metrics.EpochsInCurrentStage = 50
	for i := 0; i < 3; i++ {
		s.StepEpoch()
	}
	check(t, s.Stage() == leyline.StageTraining, "TRAINING advanced by itself")
	advanceTo(t, s, leyline.StageHolding)
	s.State().Metrics.CounterfactualContribution = fptr(-5)
	for i := 0; i < 100; i++ {
		s.StepEpoch()
	}
	check(t, s.Stage() == leyline.StageHolding, "HOLDING timed out or auto-pruned: %v", s.Stage())
	s.State().Metrics.CounterfactualContribution = fptr(0)
	s.StepEpoch()
	check(t, s.Stage() == leyline.StageHolding, "zero counterfactual auto-pruned")
}

func TestStepEpochAutoForward(t *testing.T) {
	s, _ := newSlot(t, SlotOptions{AutoForward: []GateLevel{G1, G2, G3}})
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "noop", Tempo: 2}))
	s.StepEpoch()
	check(t, s.Stage() == leyline.StageTraining, "G1 auto-forward: %v", s.Stage())
	readyForBlending(s.State())
	s.StepEpoch()
	check(t, s.Stage() == leyline.StageBlending, "G2 auto-forward: %v", s.Stage())
	s.StepEpoch()
	s.StepEpoch()
	check(t, s.Stage() == leyline.StageHolding, "G3 auto-forward (permissive): %v", s.Stage())
	_, err := NewSlot(SlotOptions{ID: "r0c0", Channels: 2, AutoForward: []GateLevel{G5}})
	check(t, err != nil, "auto-forward G5 accepted")
}

func TestPruneEmbargoReset(t *testing.T) {
	s, rec := newSlot(t, SlotOptions{})
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light"}))
	advanceTo(t, s, leyline.StageBlending)
	s.StepEpoch()
	check(t, s.State().Alpha > 0, "alpha did not ramp")
	v := s.Version()
	check(t, s.Prune("governor_nan", InitiatorGovernor), "prune failed")
	st := s.State()
	check(t, st.Stage == leyline.StagePruned && s.Seed() == nil && !s.IsActive() && st.Alpha == 0, "after prune: %v", st.Stage)
	check(t, st.Metrics.AutoPruned && st.Metrics.AutoPruneReason == "governor_nan", "auto prune flag")
	check(t, st.AlphaController.Mode == leyline.AlphaHold && st.AlphaController.Alpha == 0 && !s.IsolateGradients(), "controller %+v", st.AlphaController)
	check(t, s.Version() != v, "version did not change on prune")
	check(t, rec.count(leyline.EventSeedPruned) == 1, "events %v", rec.types())
	check(t, !s.Prune("again", ""), "pruned twice")
	wantErr(t, s.Germinate(GerminateOptions{Blueprint: "norm"}), ErrSlotUnavailable)

	stages := []leyline.SeedStage{}
	for tick := 1; tick <= 7; tick++ {
		check(t, s.State() != nil, "slot emptied after %d ticks", tick-1)
		s.StepEpoch()
		stages = append(stages, s.Stage())
		if tick < 7 {
			wantErr(t, s.Germinate(GerminateOptions{Blueprint: "norm"}), ErrSlotUnavailable)
		}
	}
	want := []leyline.SeedStage{
		leyline.StageEmbargoed, leyline.StageEmbargoed, leyline.StageEmbargoed, leyline.StageEmbargoed,
		leyline.StageEmbargoed, leyline.StageResetting, leyline.StageDormant,
	}
	check(t, slices.Equal(stages, want), "stages %v", stages)
	check(t, s.State() == nil, "slot not empty after 7 ticks")

	// Germination after prune works with fresh metrics.
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light"}))
	m := s.State().Metrics
	check(t, m.EpochsTotal == 0 && !m.AutoPruned && s.State().Alpha == 0, "metrics not fresh: %+v", m)
}

func TestSchedulePruneFreezesAndPrunes(t *testing.T) {
	s, _ := newSlot(t, SlotOptions{})
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light", Tempo: 1}))
	advanceTo(t, s, leyline.StageHolding)
	h := input(t, 1, tensor.F32, 2, 4, 3, 3)
	v := s.Version()
	check(t, s.SchedulePrune("", RampOptions{Steps: 2}), "schedule prune from HOLDING failed")
	check(t, s.Stage() == leyline.StageBlending && s.Frozen() && s.Version() != v, "not blending out")
	check(t, !s.SchedulePrune("", RampOptions{Steps: 2}), "second schedule during the ramp accepted")
	for _, p := range s.Parameters() {
		check(t, !p.RequiresGrad(), "parameter %q still trainable", p.Name)
	}
	out, err := s.Forward(h, nil)
	noErr(t, err)
	check(t, !bitwiseEqual(t, out.Value, h.Value), "frozen seed no longer in the forward pass")
	s.StepEpoch()
	check(t, s.State().Alpha == 0.5 && s.Stage() == leyline.StageBlending, "half way: %g", s.State().Alpha)
	s.StepEpoch()
	check(t, s.Stage() == leyline.StagePruned && s.Seed() == nil, "not pruned at alpha 0: %v", s.Stage())

	// Instant cases: TRAINING seeds and zero steps.
	s2, _ := newSlot(t, SlotOptions{})
	noErr(t, s2.Germinate(GerminateOptions{Blueprint: "norm"}))
	advanceTo(t, s2, leyline.StageTraining)
	check(t, s2.SchedulePrune("", RampOptions{Steps: 3}) && s2.Stage() == leyline.StagePruned, "TRAINING not pruned at once")
	check(t, !s2.SchedulePrune("", RampOptions{Steps: 3}), "schedule on a pruned seed")
}

// TestSchedulePruneInstantCases covers schedule_prune's early exits
// (§2.3): steps ≤ 0 or alpha ≤ 0 prune at once (whatever the stage),
// FOSSILIZED and a running ramp refuse, and a seed not yet blending is
// pruned at once even with steps and alpha > 0.
func TestSchedulePruneInstantCases(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, s *Slot)
		steps int
		want  bool
		stage leyline.SeedStage
	}{
		{"holding zero steps", func(t *testing.T, s *Slot) { advanceTo(t, s, leyline.StageHolding) }, 0, true, leyline.StagePruned},
		{"holding negative steps", func(t *testing.T, s *Slot) { advanceTo(t, s, leyline.StageHolding) }, -2, true, leyline.StagePruned},
		{"holding alpha 0", func(t *testing.T, s *Slot) {
			advanceTo(t, s, leyline.StageHolding)
			s.SetAlpha(0)
		}, 3, true, leyline.StagePruned},
		{"germinated", func(*testing.T, *Slot) {}, 3, true, leyline.StagePruned},
		{"germinated alpha > 0", func(_ *testing.T, s *Slot) { s.SetAlpha(0.4) }, 3, true, leyline.StagePruned},
		{"fossilized", func(t *testing.T, s *Slot) { advanceTo(t, s, leyline.StageFossilized) }, 3, false, leyline.StageFossilized},
		{"fossilized zero steps", func(t *testing.T, s *Slot) { advanceTo(t, s, leyline.StageFossilized) }, 0, false, leyline.StageFossilized},
		{"ramp running", func(t *testing.T, s *Slot) {
			advanceTo(t, s, leyline.StageBlending)
			s.StepEpoch()
			c := s.State().AlphaController
			check(t, c.Mode == leyline.AlphaUp && s.State().Alpha > 0, "setup: mode %v alpha %g", c.Mode, s.State().Alpha)
		}, 3, false, leyline.StageBlending},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, rec := newSlot(t, SlotOptions{})
			noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light", Tempo: 3}))
			c.setup(t, s)
			alpha, pruned := s.State().Alpha, rec.count(leyline.EventSeedPruned)
			got := s.SchedulePrune("test_reason", RampOptions{Steps: c.steps})
			check(t, got == c.want, "SchedulePrune = %v, want %v", got, c.want)
			check(t, s.Stage() == c.stage, "stage %v, want %v", s.Stage(), c.stage)
			st := s.State()
			if c.want {
				check(t, s.Seed() == nil && st.Alpha == 0 && st.AlphaController.Mode == leyline.AlphaHold && !s.Frozen(), "pruned seed: module %v alpha %g mode %v frozen %v", s.Seed() != nil, st.Alpha, st.AlphaController.Mode, s.Frozen())
				check(t, rec.count(leyline.EventSeedPruned) == pruned+1, "SEED_PRUNED emitted %d times", rec.count(leyline.EventSeedPruned)-pruned)
				p := rec.events[len(rec.events)-1].Data.(*leyline.SeedPrunedPayload)
				check(t, p.Reason == "test_reason" && p.Initiator == InitiatorPolicy, "pruned payload %+v", p)
			} else {
				check(t, s.Seed() != nil && st.Alpha == alpha && !s.Frozen(), "refused schedule changed the seed: alpha %g → %g frozen %v", alpha, st.Alpha, s.Frozen())
				check(t, rec.count(leyline.EventSeedPruned) == pruned, "refused schedule emitted SEED_PRUNED")
			}
		})
	}
}

// TestAdvanceSameStageRejected: advancing a TRAINING seed to TRAINING is
// an invalid transition, and nothing about the slot changes.
func TestAdvanceSameStageRejected(t *testing.T) {
	s, rec := newSlot(t, SlotOptions{})
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light"}))
	advanceTo(t, s, leyline.StageTraining)
	s.RecordAccuracy(40)
	s.RecordAccuracy(42)
	before := s.State().Clone()
	v, events := s.Version(), len(rec.events)
	res, err := s.AdvanceStage(leyline.StageTraining)
	wantErr(t, err, ErrInvalidTransition)
	check(t, !res.Passed, "same-stage advance passed: %+v", res)
	st := s.State()
	check(t, st.Stage == leyline.StageTraining && st.PreviousStage == before.PreviousStage, "stage %v (previous %v)", st.Stage, st.PreviousStage)
	check(t, st.Metrics == before.Metrics, "metrics changed: %+v → %+v", before.Metrics, st.Metrics)
	check(t, st.Metrics.EpochsInCurrentStage == 2, "epochs in stage %d", st.Metrics.EpochsInCurrentStage)
	check(t, len(st.StageHistory) == len(before.StageHistory) && st.StageEnteredAt == before.StageEnteredAt, "history or entry time changed")
	check(t, s.Version() == v && s.IsolateGradients() && len(rec.events) == events, "version %d→%d isolate %v events %d→%d", v, s.Version(), s.IsolateGradients(), events, len(rec.events))
}

func TestSetAlphaTarget(t *testing.T) {
	s, _ := newSlot(t, SlotOptions{})
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light", Tempo: 1}))
	advanceTo(t, s, leyline.StageTraining)
	ok, _ := s.SetAlphaTarget(0.5, 0, RampOptions{Steps: 2})
	check(t, !ok, "retarget in TRAINING accepted")
	advanceTo(t, s, leyline.StageHolding)
	for _, bad := range []float64{0, -1} {
		ok, _ := s.SetAlphaTarget(bad, 0, RampOptions{})
		check(t, !ok, "target %g accepted", bad)
	}
	ok, err := s.SetAlphaTarget(0.5, leyline.BlendGate, RampOptions{Steps: 2, Curve: leyline.CurveCosine})
	noErr(t, err)
	check(t, ok && s.Stage() == leyline.StageBlending && s.Frozen() && s.AlphaSchedule() != nil, "HOLDING → 0.5 with GATE")
	ok, _ = s.SetAlphaTarget(1, 0, RampOptions{Steps: 2})
	check(t, !ok, "retarget during a ramp accepted")
	s.StepEpoch()
	s.StepEpoch()
	check(t, s.State().Alpha == 0.5 && !s.Frozen(), "alpha %g frozen %v", s.State().Alpha, s.Frozen())
	_, err = s.Forward(input(t, 1, tensor.F32, 2, 4, 3, 3), nil)
	noErr(t, err)
	ok, _ = s.SetAlphaTarget(1, leyline.BlendAdd, RampOptions{Steps: 1})
	check(t, ok && s.AlphaSchedule() == nil && !s.Frozen(), "back to ADD")
	s.StepEpoch()
	check(t, s.State().Alpha == 1, "alpha %g", s.State().Alpha)
}

func TestSlotForwardAlpha(t *testing.T) {
	s, _ := newSlot(t, SlotOptions{})
	h := input(t, 1, tensor.F32, 2, 4, 3, 3)
	out, err := s.Forward(h, nil)
	noErr(t, err)
	check(t, out == h, "empty slot changed the activation")
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light"}))
	out, _ = s.Forward(h, nil)
	check(t, out == h, "GERMINATED seed ran in forward")
	advanceTo(t, s, leyline.StageBlending)
	var seedOut *autograd.Var
	autograd.NoGrad(func() { seedOut = s.Seed().Forward(h) })

	s.SetAlpha(-0.1)
	check(t, s.State().Alpha == 0 && s.State().AlphaController.Alpha == 0 && s.State().Metrics.CurrentAlpha == 0, "−0.1 not clamped")
	out, _ = s.Forward(h, nil)
	check(t, bitwiseEqual(t, out.Value, h.Value), "α=0 output is not the host")
	s.SetAlpha(1.5)
	check(t, s.State().Alpha == 1, "1.5 not clamped")
	out, _ = s.Forward(h, nil)
	check(t, maxAbsDiff(t, out.Value, seedOut.Value) < 1e-6, "α=1 output is not the seed")
	s.SetAlpha(0.5)
	out, _ = s.Forward(h, nil)
	mean := autograd.MulScalar(autograd.Add(h, seedOut), 0.5)
	check(t, maxAbsDiff(t, out.Value, mean.Value) < 1e-6, "α=½ output is not the mean")

	// ForceAlpha overrides and restores, also on panic.
	s.ForceAlpha(0, func() {
		out, _ := s.Forward(h, nil)
		check(t, bitwiseEqual(t, out.Value, h.Value), "forced α=0 is not the host")
		check(t, s.Alpha() == 0, "Alpha under force")
	})
	check(t, s.Alpha() == 0.5, "alpha not restored: %g", s.Alpha())
	func() {
		defer func() { _ = recover() }()
		s.ForceAlpha(1, func() { panic("boom") })
	}()
	check(t, s.Alpha() == 0.5, "alpha not restored after a panic")

	// Per-sample override: sample 0 host, sample 1 seed.
	a := onDevice(t, tensor.FromFloat64s(tensor.F32, []float64{0, 1}, 2, 1, 1, 1))
	out, err = s.Forward(h, a)
	noErr(t, err)
	check(t, bitwiseEqual(t, testdevice.Host(t, out.Value).Narrow(0, 0, 1).Contiguous(), testdevice.Host(t, h.Value).Narrow(0, 0, 1).Contiguous()), "override α=0 sample is not the host")
	for _, bad := range [][]int{{2, 1}, {3, 1, 1, 1}, {2, 1, 1}, {2, 4, 1, 1}} {
		_, err = s.Forward(h, onDevice(t, tensor.Zeros(tensor.F32, bad...)))
		check(t, err != nil, "override of shape %v accepted", bad)
	}
	// A wrongly shaped activation is an error, not a panic.
	_, err = s.Forward(input(t, 1, tensor.F32, 2, 5, 3, 3), nil)
	check(t, err != nil, "5-channel activation accepted by a 4-channel seed")
}

func TestMultiplySeedStartsAsIdentity(t *testing.T) {
	s, _ := newSlot(t, SlotOptions{})
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light", AlphaAlgorithm: leyline.BlendMultiply, BlendAlgorithmID: BlendLinear}))
	advanceTo(t, s, leyline.StageBlending)
	s.SetAlpha(1)
	h := input(t, 3, tensor.F32, 2, 4, 3, 3)
	out, err := s.Forward(h, nil)
	noErr(t, err)
	check(t, bitwiseEqual(t, out.Value, h.Value), "MULTIPLY seed with a zeroed final layer is not the identity valve")
}

// TestGradientTelemetry: the seed-to-host gradient ratio and the seed's
// gradient health, measured on the test device in one host sync per
// capture there.
func TestGradientTelemetry(t *testing.T) {
	host := smallCNN(t, 1, tensor.F32)
	s, _ := newSlot(t, SlotOptions{HostParams: host.Parameters()})
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light"}))
	check(t, s.State().Metrics.HostParamCount == numel(host.Parameters()), "host param count")
	s.CaptureGradientTelemetry()
	check(t, s.State().Metrics.SeedGradientNormRatio == nil && !s.State().Telemetry.HealthMeasured, "measured without gradients")
	for _, p := range append(host.Parameters(), s.Parameters()...) {
		p.Grad = testdevice.To(t, tensor.Full(p.DType(), 0.01, p.Shape()...))
	}
	dev := testdevice.Device(t)
	before := tensor.HostSyncs(dev)
	s.CaptureGradientTelemetry()
	if testdevice.OnDevice(t) {
		check(t, tensor.HostSyncs(dev)-before == 1, "%d host syncs per capture, want 1", tensor.HostSyncs(dev)-before)
	}
	st := s.State()
	check(t, st.Metrics.SeedGradientNormRatio != nil && *st.Metrics.SeedGradientNormRatio > 0, "ratio not measured")
	// Equal per-element gradients: the normalised ratio is 1.
	check(t, abs(*st.Metrics.SeedGradientNormRatio-1) < 1e-5, "ratio %g", *st.Metrics.SeedGradientNormRatio)
	check(t, st.Telemetry.HealthMeasured && st.Telemetry.GradientHealth == 1 && st.Metrics.GradientNormAvg > 0, "telemetry %+v", st.Telemetry)
	check(t, st.Telemetry.PrevGradientHealth == nil, "previous health before a second measurement")
	s.CaptureGradientTelemetry()
	check(t, st.Telemetry.PrevGradientHealth != nil && *st.Telemetry.PrevGradientHealth == 1, "previous health")
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

func TestNewSlotRejectsBadOptions(t *testing.T) {
	for _, o := range []SlotOptions{{ID: "early", Channels: 2}, {ID: "r0c0"}, {ID: "r0c0", Channels: 2, Topology: "transformer"}} {
		_, err := NewSlot(o)
		check(t, err != nil, "NewSlot(%+v) accepted", o)
	}
	_, err := NewSlot(SlotOptions{ID: "bad", Channels: 1})
	check(t, errors.Is(err, leyline.ErrInvalidSlotID), "slot id error %v", err)
}
