package tolaria

import (
	"testing"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
)

func mustApply(t *testing.T, m *kasmina.MorphogeneticModel, d leyline.Decision, want ApplyStatus) ApplyResult {
	t.Helper()
	res, err := ApplyDecision(m, d, ApplyOptions{})
	if err != nil {
		t.Fatalf("%v: %v", d, err)
	}
	if res.Status != want {
		t.Fatalf("%v: status %v (%s), want %v", d, res.Status, res.Reason, want)
	}
	if (want == ApplyRejected) != (res.Reason != "") {
		t.Fatalf("%v: reason %q with status %v", d, res.Reason, res.Status)
	}
	return res
}

func TestApplyWait(t *testing.T) {
	m := newModel(t, nil)
	v := m.Version()
	res := mustApply(t, m, leyline.Wait("nothing to do"), ApplyNoop)
	if res.Applied() || m.Version() != v {
		t.Fatal("WAIT changed the model")
	}
}

func TestApplyGerminate(t *testing.T) {
	cases := []struct {
		style  leyline.GerminationStyle
		blend  string
		algo   leyline.AlphaAlgorithm
		tempo  leyline.TempoAction
		epochs int
		target leyline.AlphaTargetAction
		alpha  float64
	}{
		{leyline.StyleLinearAdd, "linear", leyline.BlendAdd, leyline.TempoFast, 3, leyline.AlphaTargetFull, 1},
		{leyline.StyleLinearMultiply, "linear", leyline.BlendMultiply, leyline.TempoStandard, 5, leyline.AlphaTargetHalf, 0.5},
		{leyline.StyleSigmoidAdd, "sigmoid", leyline.BlendAdd, leyline.TempoSlow, 8, leyline.AlphaTargetSeventy, 0.7},
		{leyline.StyleGatedGate, "gated", leyline.BlendGate, leyline.TempoStandard, 5, leyline.AlphaTargetFull, 1},
	}
	for _, c := range cases {
		t.Run(c.style.String(), func(t *testing.T) {
			m := newModel(t, nil)
			id := m.SlotIDs()[1]
			d := leyline.Decision{Op: leyline.OpGerminate, SlotID: id, SeedID: "seed-7", Blueprint: leyline.BlueprintConvLight,
				Style: c.style, Tempo: c.tempo, AlphaTarget: c.target}
			if !mustApply(t, m, d, ApplyApplied).Applied() {
				t.Fatal("not applied")
			}
			s := slot(t, m, id)
			st := s.State()
			if s.Stage() != leyline.StageGerminated || st.BlueprintID != "conv_light" || st.SeedID != "seed-7" ||
				s.BlendAlgorithmID() != c.blend || st.AlphaAlgorithm != c.algo || st.BlendTempoEpochs != c.epochs || st.AlphaTarget != c.alpha {
				t.Fatalf("seed %+v, blend %q", st, s.BlendAlgorithmID())
			}
			// The slot is now busy: a second GERMINATE is rejected, not an error.
			mustApply(t, m, d, ApplyRejected)
		})
	}
}

func TestApplyErrors(t *testing.T) {
	m := newModel(t, nil)
	id := m.SlotIDs()[0]
	for name, d := range map[string]leyline.Decision{
		"unknown slot":        {Op: leyline.OpAdvance, SlotID: "r8c8"},
		"empty slot id":       {Op: leyline.OpPrune},
		"unknown op":          {Op: 42, SlotID: id},
		"invalid blueprint":   {Op: leyline.OpGerminate, SlotID: id, Blueprint: 99},
		"invalid style":       {Op: leyline.OpGerminate, SlotID: id, Style: 9},
		"invalid tempo":       {Op: leyline.OpGerminate, SlotID: id, Tempo: -1},
		"invalid target":      {Op: leyline.OpGerminate, SlotID: id, AlphaTarget: 3},
		"wrong topology":      {Op: leyline.OpGerminate, SlotID: id, Blueprint: leyline.BlueprintLora},
		"invalid prune speed": {Op: leyline.OpPrune, SlotID: id, AlphaSpeed: 4},
		"invalid alpha curve": {Op: leyline.OpSetAlphaTarget, SlotID: id, AlphaCurve: 5},
	} {
		if _, err := ApplyDecision(m, d, ApplyOptions{}); err == nil {
			t.Errorf("%s: expected an error", name)
		}
	}
	if _, err := ApplyDecision(nil, leyline.Wait(""), ApplyOptions{}); err == nil {
		t.Error("nil model: expected an error")
	}
	if s := slot(t, m, id); s.State() != nil {
		t.Fatalf("a failed decision left %v", s.Stage())
	}
}

func TestApplyAdvanceAndFossilize(t *testing.T) {
	m := newModel(t, nil)
	id := m.SlotIDs()[0]
	adv := leyline.Decision{Op: leyline.OpAdvance, SlotID: id}
	fos := leyline.Decision{Op: leyline.OpFossilize, SlotID: id}
	mustApply(t, m, adv, ApplyRejected) // empty slot
	germinate(t, m, id)
	res := mustApply(t, m, adv, ApplyApplied)
	if res.Gate == nil || res.Gate.Gate != kasmina.G1 || !res.Gate.Passed || slot(t, m, id).Stage() != leyline.StageTraining {
		t.Fatalf("advance to TRAINING: %+v", res)
	}
	// G2 needs epochs and health: the gate fails, which is not an error.
	res = mustApply(t, m, adv, ApplyRejected)
	if res.Gate == nil || res.Gate.Gate != kasmina.G2 || res.Reason != "G2 failed: insufficient_epochs_in_stage, gradient_stats_never_measured" {
		t.Fatalf("failed G2: %+v", res)
	}
	// FOSSILIZE is only possible from HOLDING.
	mustApply(t, m, fos, ApplyRejected)
	advanceTo(t, slot(t, m, id), leyline.StageHolding)
	st := slot(t, m, id).State()
	mustApply(t, m, fos, ApplyRejected) // no counterfactual yet: G5 fails
	c := 1.5
	st.Metrics.CounterfactualContribution = &c
	res = mustApply(t, m, fos, ApplyApplied)
	if res.Gate == nil || res.Gate.Gate != kasmina.G5 || slot(t, m, id).Stage() != leyline.StageFossilized {
		t.Fatalf("fossilize: %+v", res)
	}
	mustApply(t, m, adv, ApplyRejected) // nothing follows FOSSILIZED
}

func TestApplyPrune(t *testing.T) {
	m := newModel(t, nil)
	ids := m.SlotIDs()
	instant := leyline.Decision{Op: leyline.OpPrune, SlotID: ids[0], AlphaSpeed: leyline.AlphaSpeedInstant, Reason: "no gain"}
	mustApply(t, m, instant, ApplyRejected) // empty slot
	advanceTo(t, germinate(t, m, ids[0]), leyline.StageTraining)
	mustApply(t, m, instant, ApplyApplied)
	s := slot(t, m, ids[0])
	if s.Stage() != leyline.StagePruned || s.Seed() != nil {
		t.Fatalf("instant prune left %v", s.Stage())
	}

	// A scheduled prune of a HOLDING seed ramps alpha down.
	advanceTo(t, germinate(t, m, ids[1]), leyline.StageHolding)
	sched := leyline.Decision{Op: leyline.OpPrune, SlotID: ids[1], AlphaSpeed: leyline.AlphaSpeedFast, AlphaCurve: leyline.AlphaCurveActCosine}
	mustApply(t, m, sched, ApplyApplied)
	s = slot(t, m, ids[1])
	c := s.State().AlphaController
	if s.Stage() != leyline.StageBlending || c.Mode != leyline.AlphaDown || c.Target != 0 || c.StepsTotal != 3 || c.Curve != leyline.CurveCosine || !s.Frozen() {
		t.Fatalf("scheduled prune: stage %v controller %+v frozen %v", s.Stage(), c, s.Frozen())
	}
	// While the ramp runs, another prune is declined.
	mustApply(t, m, sched, ApplyRejected)
	for range 3 {
		m.StepEpoch()
	}
	if s.Stage() != leyline.StagePruned {
		t.Fatalf("after the ramp the seed is %v", s.Stage())
	}

	// A fossilized seed cannot be pruned.
	advanceTo(t, germinate(t, m, ids[2]), leyline.StageFossilized)
	mustApply(t, m, leyline.Decision{Op: leyline.OpPrune, SlotID: ids[2]}, ApplyRejected)
}

func TestApplySetAlphaTarget(t *testing.T) {
	m := newModel(t, nil)
	id := m.SlotIDs()[0]
	d := leyline.Decision{Op: leyline.OpSetAlphaTarget, SlotID: id, AlphaTarget: leyline.AlphaTargetHalf,
		AlphaSpeed: leyline.AlphaSpeedMedium, AlphaCurve: leyline.AlphaCurveActSigmoidSharp, Style: leyline.StyleSigmoidAdd}
	mustApply(t, m, d, ApplyRejected) // empty
	germinate(t, m, id)
	mustApply(t, m, d, ApplyRejected) // GERMINATED: not retargetable
	advanceTo(t, slot(t, m, id), leyline.StageHolding)
	mustApply(t, m, d, ApplyApplied)
	s := slot(t, m, id)
	c := s.State().AlphaController
	if s.Stage() != leyline.StageBlending || c.Target != 0.5 || c.StepsTotal != 5 || c.Curve != leyline.CurveSigmoid || c.Steepness != 24 {
		t.Fatalf("retarget: stage %v controller %+v", s.Stage(), c)
	}
	// The style's algorithm is applied: GATED_GATE builds the gate.
	for !c.AtTarget() {
		m.StepEpoch()
	}
	gate := d
	gate.Style, gate.AlphaTarget, gate.AlphaSpeed = leyline.StyleGatedGate, leyline.AlphaTargetSeventy, leyline.AlphaSpeedInstant
	mustApply(t, m, gate, ApplyApplied)
	if s.State().AlphaAlgorithm != leyline.BlendGate || s.AlphaSchedule() == nil || s.State().Alpha != 0.7 {
		t.Fatalf("gate retarget: algorithm %v schedule %v alpha %v", s.State().AlphaAlgorithm, s.AlphaSchedule(), s.State().Alpha)
	}
}
