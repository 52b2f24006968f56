package kasmina

import (
	"fmt"
	"math"
	"strings"

	"github.com/esper-go/esper/leyline"
)

// Gate thresholds (esper-reference §1.7 and §2.5).
const (
	// MinTrainingImprovement is strict G2's accuracy gain (percentage
	// points) since the stage started (G2 min training improvement 0.5).
	MinTrainingImprovement = 0.5
	// MinBlendingEpochs is G2's (and strict G3's) epochs in stage (G2
	// MIN_BLENDING_EPOCHS 10).
	MinBlendingEpochs = 10
	// GradientRatioThreshold is strict G2's minimum
	// SeedGradientNormRatio (G2 gradient ratio threshold 0.10).
	GradientRatioThreshold = 0.10
	// MinGradientHealth is permissive G2's minimum gradient health (G2
	// min gradient health for blending 0.7).
	MinGradientHealth = 0.7
	// MinFossilizeContribution is strict G5's counterfactual
	// contribution in percentage points (G2 min fossilize contribution
	// 1.0).
	MinFossilizeContribution = 1.0
)

// GateLevel names a quality gate. The values are the reference's (G4
// was removed).
type GateLevel int

// The gates, by the stage they guard.
const (
	// G0 guards GERMINATED: the seed has an id and a blueprint.
	G0 GateLevel = 0
	// G1 guards TRAINING: the seed is GERMINATED.
	G1 GateLevel = 1
	// G2 guards BLENDING: the seed trained long enough and healthily.
	G2 GateLevel = 2
	// G3 guards HOLDING: alpha reached 1.
	G3 GateLevel = 3
	// G5 guards FOSSILIZED: the seed measurably contributes.
	G5 GateLevel = 5
)

// String returns "G0" … "G5".
func (g GateLevel) String() string { return fmt.Sprintf("G%d", int(g)) }

// GateFor returns the gate that guards entry into stage target; any
// stage other than GERMINATED, TRAINING, BLENDING, HOLDING and
// FOSSILIZED is an error.
func GateFor(target leyline.SeedStage) (GateLevel, error) {
	switch target {
	case leyline.StageGerminated:
		return G0, nil
	case leyline.StageTraining:
		return G1, nil
	case leyline.StageBlending:
		return G2, nil
	case leyline.StageHolding:
		return G3, nil
	case leyline.StageFossilized:
		return G5, nil
	}
	return 0, fmt.Errorf("kasmina: no quality gate guards stage %v", target)
}

// GateResult is the outcome of one gate evaluation.
type GateResult struct {
	Gate   GateLevel
	Passed bool
	// Score in [0, 1] grades how well the seed did (gate-specific).
	Score float64
	// ChecksPassed and ChecksFailed name the individual checks.
	ChecksPassed []string
	ChecksFailed []string
	Message      string
}

// QualityGates evaluates the gates. The zero value is the strict mode;
// Permissive (the reference's default for RL training) relaxes G2 to time
// plus measured gradient health, and drops the epoch requirement of G3
// and the contribution threshold of G5.
//
// G3, in both modes, needs the alpha controller holding (mode HOLD) at a
// target ≥ 1 − 1e-6 with |alpha − target| ≤ 1e-6; strict mode also needs
// MinBlendingEpochs in stage.
//
// G5 needs a measured counterfactual contribution (nil fails with
// "counterfactual_not_available") and a healthy seed in both modes. It
// also rejects a contribution ≤ 0 ("contribution_not_positive") in both
// modes: permissive G5 is therefore stricter than the reference's
// permissive rule (§2.5: only "exists and healthy"), following §7's
// "G5 fails with None/≤0" so that a seed that does not help is never
// fossilized. Strict mode further requires a contribution ≥
// MinFossilizeContribution (1.0 percentage point; exactly 1.0 passes,
// "contribution_below_threshold" otherwise). The score is
// min(1, contribution/10) for a positive contribution, else 0.
type QualityGates struct {
	Permissive bool
}

// Check evaluates the gate guarding target for state. A target no gate
// guards (a failure stage, DORMANT, …) is an error.
func (q QualityGates) Check(state *SeedState, target leyline.SeedStage) (GateResult, error) {
	gate, err := GateFor(target)
	if err != nil {
		return GateResult{}, err
	}
	if state == nil {
		return failed(gate, "no_active_seed"), nil
	}
	var r gateChecks
	switch gate {
	case G0:
		r.check(state.SeedID != "", "seed_id_present", "seed_id_missing")
		r.check(state.BlueprintID != "", "blueprint_id_present", "blueprint_id_missing")
	case G1:
		r.check(state.Stage == leyline.StageGerminated, "stage_germinated", "stage_not_germinated")
	case G2:
		q.checkG2(state, &r)
	case G3:
		c := state.AlphaController
		r.check(c != nil && c.Target >= 1-alphaEps, "alpha_target_full", "alpha_target_below_full")
		r.check(c != nil && c.Mode == leyline.AlphaHold, "alpha_holding", "alpha_ramp_in_progress")
		r.check(c != nil && math.Abs(c.Alpha-c.Target) <= alphaEps, "alpha_at_target", "alpha_not_at_target")
		if !q.Permissive {
			r.check(state.Metrics.EpochsInCurrentStage >= MinBlendingEpochs, "epochs_in_stage_ok", "insufficient_epochs_in_stage")
		}
		if c != nil {
			r.score = clamp01(c.Alpha)
		}
	case G5:
		cf := state.Metrics.CounterfactualContribution
		if cf == nil {
			r.fail("counterfactual_not_available")
		} else {
			r.check(*cf > 0, "contribution_positive", "contribution_not_positive")
			if !q.Permissive {
				r.check(*cf >= MinFossilizeContribution, "contribution_above_threshold", "contribution_below_threshold")
			}
			if *cf > 0 {
				r.score = math.Min(1, *cf/10)
			}
		}
		r.check(state.IsHealthy, "seed_healthy", "seed_unhealthy")
	}
	return r.result(gate), nil
}

func (q QualityGates) checkG2(state *SeedState, r *gateChecks) {
	m := &state.Metrics
	r.check(m.EpochsInCurrentStage >= MinBlendingEpochs, "epochs_in_stage_ok", "insufficient_epochs_in_stage")
	if q.Permissive {
		t := state.Telemetry
		if !t.HealthMeasured {
			// KTS-001: absent telemetry must never pass as healthy.
			r.fail("gradient_stats_never_measured")
			return
		}
		r.check(!t.HasExploding, "gradients_not_exploding", "gradients_exploding")
		r.check(t.GradientHealth >= MinGradientHealth, "gradient_health_ok", "gradient_health_low")
		r.score = clamp01(t.GradientHealth)
		return
	}
	imp := m.ImprovementSinceStageStart()
	r.check(imp >= MinTrainingImprovement, "improvement_ok", "improvement_insufficient")
	if m.SeedGradientNormRatio == nil {
		r.fail("gradient_stats_never_measured")
	} else {
		r.check(*m.SeedGradientNormRatio >= GradientRatioThreshold, "gradient_ratio_ok", "gradient_ratio_low")
	}
	if imp > 0 {
		r.score = math.Min(1, imp/5)
	}
}

// gateChecks accumulates the checks of one gate.
type gateChecks struct {
	passed, failed []string
	score          float64
}

func (r *gateChecks) check(ok bool, pass, fail string) {
	if ok {
		r.passed = append(r.passed, pass)
	} else {
		r.failed = append(r.failed, fail)
	}
}

func (r *gateChecks) fail(name string) { r.failed = append(r.failed, name) }

func (r *gateChecks) result(gate GateLevel) GateResult {
	res := GateResult{Gate: gate, Passed: len(r.failed) == 0, ChecksPassed: r.passed, ChecksFailed: r.failed, Score: r.score}
	if res.ChecksPassed == nil {
		res.ChecksPassed = []string{}
	}
	if res.ChecksFailed == nil {
		res.ChecksFailed = []string{}
	}
	if gate == G0 || gate == G1 {
		if res.Passed {
			res.Score = 1
		}
	}
	res.Score = clamp01(res.Score)
	if res.Passed {
		res.Message = fmt.Sprintf("%v passed (%s)", gate, strings.Join(res.ChecksPassed, ", "))
	} else {
		res.Message = fmt.Sprintf("%v failed: %s", gate, strings.Join(res.ChecksFailed, ", "))
	}
	return res
}

// failed is a result with the single failed check name.
func failed(gate GateLevel, name string) GateResult {
	r := gateChecks{failed: []string{name}}
	return r.result(gate)
}
