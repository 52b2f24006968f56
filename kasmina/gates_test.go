package kasmina

import (
	"math"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
)

func fptr(v float64) *float64 { return &v }

func gateState(stage leyline.SeedStage) *SeedState {
	st := NewSeedState("r0c0-x", "x", "r0c0")
	st.Stage = stage
	return st
}

func mustCheck(t *testing.T, q QualityGates, st *SeedState, target leyline.SeedStage) GateResult {
	t.Helper()
	r, err := q.Check(st, target)
	noErr(t, err)
	check(t, r.Score >= 0 && r.Score <= 1, "score %g outside [0,1]", r.Score)
	check(t, r.Passed == (len(r.ChecksFailed) == 0), "passed %v with failed checks %v", r.Passed, r.ChecksFailed)
	return r
}

func TestGateMapping(t *testing.T) {
	for target, want := range map[leyline.SeedStage]GateLevel{
		leyline.StageGerminated: G0, leyline.StageTraining: G1, leyline.StageBlending: G2,
		leyline.StageHolding: G3, leyline.StageFossilized: G5,
	} {
		g, err := GateFor(target)
		noErr(t, err)
		check(t, g == want, "%v → %v, want %v", target, g, want)
	}
	for _, bad := range []leyline.SeedStage{leyline.StagePruned, leyline.StageEmbargoed, leyline.StageResetting, leyline.StageDormant, leyline.StageUnknown} {
		_, err := QualityGates{}.Check(gateState(leyline.StageTraining), bad)
		check(t, err != nil, "gate for %v accepted", bad)
	}
	check(t, G5.String() == "G5", "name %q", G5.String())
}

func TestG0G1(t *testing.T) {
	q := QualityGates{}
	check(t, mustCheck(t, q, gateState(leyline.StageDormant), leyline.StageGerminated).Passed, "G0 with ids failed")
	st := gateState(leyline.StageDormant)
	st.SeedID = ""
	r := mustCheck(t, q, st, leyline.StageGerminated)
	check(t, !r.Passed && containsStr(r.ChecksFailed, "seed_id_missing"), "G0 without seed id: %+v", r)
	st = gateState(leyline.StageDormant)
	st.BlueprintID = ""
	check(t, !mustCheck(t, q, st, leyline.StageGerminated).Passed, "G0 without blueprint passed")
	check(t, mustCheck(t, q, gateState(leyline.StageGerminated), leyline.StageTraining).Passed, "G1 from GERMINATED failed")
	check(t, !mustCheck(t, q, gateState(leyline.StageTraining), leyline.StageTraining).Passed, "G1 from TRAINING passed")
	r = mustCheck(t, q, nil, leyline.StageTraining)
	check(t, !r.Passed && containsStr(r.ChecksFailed, "no_active_seed"), "nil state: %+v", r)
}

func TestG2Strict(t *testing.T) {
	q := QualityGates{}
	ok := func() *SeedState {
		st := gateState(leyline.StageTraining)
		st.Metrics.AccuracyAtStageStart = 50
		st.Metrics.CurrentValAccuracy = 50.5
		st.Metrics.EpochsInCurrentStage = 10
		st.Metrics.SeedGradientNormRatio = fptr(0.10)
		return st
	}
	r := mustCheck(t, q, ok(), leyline.StageBlending)
	check(t, r.Passed && r.Gate == G2, "at the thresholds: %+v", r)
	check(t, math.Abs(r.Score-0.1) < 1e-12, "score %g, want 0.5/5", r.Score)

	st := ok()
	st.Metrics.CurrentValAccuracy = 50.49
	check(t, !mustCheck(t, q, st, leyline.StageBlending).Passed, "improvement 0.49 passed")
	st = ok()
	st.Metrics.EpochsInCurrentStage = 9
	check(t, !mustCheck(t, q, st, leyline.StageBlending).Passed, "9 epochs passed")
	st = ok()
	st.Metrics.SeedGradientNormRatio = fptr(0.0999)
	check(t, !mustCheck(t, q, st, leyline.StageBlending).Passed, "ratio 0.0999 passed")
	st = ok()
	st.Metrics.SeedGradientNormRatio = nil
	r = mustCheck(t, q, st, leyline.StageBlending)
	check(t, !r.Passed && containsStr(r.ChecksFailed, "gradient_stats_never_measured"), "unmeasured ratio: %+v", r)
	st = ok()
	st.Metrics.CurrentValAccuracy = 40
	check(t, mustCheck(t, q, st, leyline.StageBlending).Score == 0, "negative improvement scores")
}

func TestG2Permissive(t *testing.T) {
	q := QualityGates{Permissive: true}
	ok := func() *SeedState {
		st := gateState(leyline.StageTraining)
		st.Metrics.EpochsInCurrentStage = 10
		st.Telemetry = SeedTelemetry{HealthMeasured: true, GradientHealth: 0.7}
		return st
	}
	check(t, mustCheck(t, q, ok(), leyline.StageBlending).Passed, "health 0.7 at 10 epochs failed")
	st := ok()
	st.Telemetry.GradientHealth = 0.6999
	check(t, !mustCheck(t, q, st, leyline.StageBlending).Passed, "health 0.6999 passed")
	st = ok()
	st.Telemetry.HasExploding = true
	check(t, !mustCheck(t, q, st, leyline.StageBlending).Passed, "exploding passed")
	st = ok()
	st.Metrics.EpochsInCurrentStage = 9
	check(t, !mustCheck(t, q, st, leyline.StageBlending).Passed, "9 epochs passed")
	// KTS-001: absent telemetry never passes, even with a perfect-looking
	// zero value elsewhere.
	st = ok()
	st.Telemetry = SeedTelemetry{GradientHealth: 1}
	r := mustCheck(t, q, st, leyline.StageBlending)
	check(t, !r.Passed && containsStr(r.ChecksFailed, "gradient_stats_never_measured"), "unmeasured health: %+v", r)
}

func TestG3(t *testing.T) {
	for _, permissive := range []bool{false, true} {
		q := QualityGates{Permissive: permissive}
		ok := func() *SeedState {
			st := gateState(leyline.StageBlending)
			st.AlphaController = NewAlphaController(1)
			st.Metrics.EpochsInCurrentStage = 10
			return st
		}
		r := mustCheck(t, q, ok(), leyline.StageHolding)
		check(t, r.Passed && r.Score == 1, "alpha 1 in HOLD: %+v", r)
		st := ok()
		st.AlphaController = NewAlphaController(0.5)
		check(t, !mustCheck(t, q, st, leyline.StageHolding).Passed, "target 0.5 passed")
		st = ok()
		st.AlphaController = NewAlphaController(0)
		noErr(t, st.AlphaController.Retarget(1, 2, 0, 0))
		st.AlphaController.Step()
		r = mustCheck(t, q, st, leyline.StageHolding)
		check(t, !r.Passed && math.Abs(r.Score-0.5) < 1e-12, "mid-ramp: %+v", r)
		st = ok()
		st.Metrics.EpochsInCurrentStage = 9
		check(t, mustCheck(t, q, st, leyline.StageHolding).Passed == permissive, "9 epochs, permissive=%v", permissive)
	}
}

func TestG5(t *testing.T) {
	strict, permissive := QualityGates{}, QualityGates{Permissive: true}
	st := gateState(leyline.StageHolding)
	r := mustCheck(t, strict, st, leyline.StageFossilized)
	check(t, !r.Passed && containsStr(r.ChecksFailed, "counterfactual_not_available"), "no counterfactual: %+v", r)
	check(t, !mustCheck(t, permissive, st, leyline.StageFossilized).Passed, "permissive without counterfactual passed")
	for _, c := range []struct {
		v          float64
		strict, pm bool
	}{{-1, false, false}, {0, false, false}, {0.99, false, true}, {1.0, true, true}, {25, true, true}} {
		st.Metrics.CounterfactualContribution = fptr(c.v)
		rs, rp := mustCheck(t, strict, st, leyline.StageFossilized), mustCheck(t, permissive, st, leyline.StageFossilized)
		check(t, rs.Passed == c.strict && rp.Passed == c.pm, "contribution %g: strict %v permissive %v", c.v, rs.Passed, rp.Passed)
	}
	st.Metrics.CounterfactualContribution = fptr(1)
	check(t, math.Abs(mustCheck(t, strict, st, leyline.StageFossilized).Score-0.1) < 1e-12, "score")
	st.IsHealthy = false
	r = mustCheck(t, strict, st, leyline.StageFossilized)
	check(t, !r.Passed && containsStr(r.ChecksFailed, "seed_unhealthy"), "unhealthy: %+v", r)
}

// TestGradientHealth measures gradients on the test device: on a device
// each measurement reads them all back in one host sync.
func TestGradientHealth(t *testing.T) {
	dev := testdevice.Device(t)
	mk := func(vals ...float64) *autograd.Var {
		p := autograd.Param(testdevice.To(t, tensor.Zeros(tensor.F64, len(vals))))
		p.Grad = testdevice.To(t, tensor.FromFloat64s(tensor.F64, vals, len(vals)))
		return p
	}
	_, ok := MeasureGradientHealth([]*autograd.Var{autograd.Param(testdevice.To(t, tensor.Zeros(tensor.F64, 2)))})
	check(t, !ok, "no gradients counted as measured")
	params := []*autograd.Var{mk(1, 1), mk(1e-9), mk(20), mk(0.5)}
	before := tensor.HostSyncs(dev)
	h, ok := MeasureGradientHealth(params)
	if testdevice.OnDevice(t) {
		check(t, tensor.HostSyncs(dev)-before == 1, "%d host syncs per measurement, want 1", tensor.HostSyncs(dev)-before)
	}
	check(t, ok && h.Params == 4, "params %d", h.Params)
	check(t, h.HasVanishing && h.HasExploding && h.VanishingRatio == 0.25 && h.ExplodingRatio == 0.25, "%+v", h)
	check(t, math.Abs(h.Health-(1-0.5*0.25-0.8*0.25)) < 1e-12, "health %g", h.Health)
	h, _ = MeasureGradientHealth([]*autograd.Var{mk(1e20, 1e20)})
	check(t, math.Abs(h.Norm-math.Sqrt2*1e20)/1e20 < 1e-12, "overflow-unsafe norm %g", h.Norm)
	check(t, h.HasExploding && math.Abs(h.Health-0.2) < 1e-12, "1e20 gradient: %+v", h)
	h, _ = MeasureGradientHealth([]*autograd.Var{mk(1), mk(math.NaN())})
	check(t, h.HasExploding && h.Health == 0, "NaN gradient: %+v", h)
	h, _ = MeasureGradientHealth([]*autograd.Var{mk(1), mk(2)})
	check(t, h.Health == 1 && !h.HasVanishing && !h.HasExploding, "healthy: %+v", h)
	params = []*autograd.Var{mk(3), mk(4)}
	before = tensor.HostSyncs(dev)
	check(t, math.Abs(GradNorm(params)-5) < 1e-12, "GradNorm")
	if testdevice.OnDevice(t) {
		check(t, tensor.HostSyncs(dev)-before == 1, "%d host syncs per GradNorm, want 1", tensor.HostSyncs(dev)-before)
	}
}

// TestG3Tolerance pins G3's 1e-6 tolerance (§2.5) in both modes: a
// controller holding at alpha = target = 1−5e-7 passes, at 1−2e-6 it
// fails on the target; a target of 1 with alpha 5e-7 short passes, 2e-6
// short fails on alpha.
func TestG3Tolerance(t *testing.T) {
	for _, permissive := range []bool{false, true} {
		q := QualityGates{Permissive: permissive}
		state := func(alpha, target float64) *SeedState {
			st := gateState(leyline.StageBlending)
			st.AlphaController = NewAlphaController(target)
			st.AlphaController.Alpha = alpha
			st.Metrics.EpochsInCurrentStage = MinBlendingEpochs
			return st
		}
		for _, c := range []struct {
			alpha, target float64
			pass          bool
			failed        string
		}{
			{1 - 5e-7, 1 - 5e-7, true, ""},
			{1 - 2e-6, 1 - 2e-6, false, "alpha_target_below_full"},
			{1 - 5e-7, 1, true, ""},
			{1 - 2e-6, 1, false, "alpha_not_at_target"},
		} {
			r := mustCheck(t, q, state(c.alpha, c.target), leyline.StageHolding)
			check(t, r.Passed == c.pass, "permissive=%v alpha %v target %v: passed %v (%v)", permissive, c.alpha, c.target, r.Passed, r.ChecksFailed)
			if c.pass {
				check(t, r.Score == c.alpha, "score %v, want alpha %v", r.Score, c.alpha)
			} else {
				check(t, len(r.ChecksFailed) == 1 && r.ChecksFailed[0] == c.failed, "permissive=%v alpha %v target %v: failed %v, want [%s]", permissive, c.alpha, c.target, r.ChecksFailed, c.failed)
			}
		}
	}
}
