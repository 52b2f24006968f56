package tamiyo

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

func newHeuristic(t *testing.T, opts HeuristicOptions) *Heuristic {
	t.Helper()
	h, err := NewHeuristic(opts)
	require.NoError(t, err)
	return h
}

// epochState builds a cnn state over the default slots r0c0..r0c2. The
// available slot count is derived from the seeds.
func epochState(epoch, plateau int, stabilized bool, seeds ...leyline.SeedReport) leyline.EpochState {
	st := 0
	if stabilized {
		st = 1
	}
	occupied := 0
	for _, s := range seeds {
		if !isEmptySlotStage(s.Stage) {
			occupied++
		}
	}
	return leyline.EpochState{
		Signals: leyline.TrainingSignals{
			Metrics:        leyline.TrainingMetrics{Epoch: epoch, PlateauEpochs: plateau, HostStabilized: st},
			AvailableSlots: max(0, 3-occupied),
		},
		Seeds:    seeds,
		Slots:    leyline.DefaultSlotConfig(),
		Topology: leyline.TopologyCNN,
	}
}

// ready is a state in which germination goes ahead.
func ready(epoch int) leyline.EpochState { return epochState(epoch, 3, true) }

func training(id, slot, bp string, epochsInStage int, improvement float64) leyline.SeedReport {
	return leyline.SeedReport{SeedID: id, SlotID: slot, BlueprintID: bp, Stage: leyline.StageTraining, EpochsInStage: epochsInStage, ImprovementSinceStageStart: improvement}
}

func holding(id, slot, bp string, contribution *float64, total float64) leyline.SeedReport {
	return leyline.SeedReport{SeedID: id, SlotID: slot, BlueprintID: bp, Stage: leyline.StageHolding, Alpha: 1, AlphaTarget: 1, Counterfactual: contribution, TotalImprovement: total, EpochsInStage: 5}
}

func blending(id, slot string, alpha, target float64, mode leyline.AlphaMode) leyline.SeedReport {
	return leyline.SeedReport{SeedID: id, SlotID: slot, BlueprintID: "norm", Stage: leyline.StageBlending, Alpha: alpha, AlphaTarget: target, AlphaMode: mode}
}

// failingTraining is a TRAINING seed that should_prune condemns.
func failingTraining(id, slot, bp string) leyline.SeedReport {
	return training(id, slot, bp, 5, -2.5)
}

func assertWellFormed(t *testing.T, d leyline.Decision, s leyline.EpochState) {
	t.Helper()
	assert.NotEmpty(t, d.Reason, "decision %v has no reason", d)
	assert.True(t, d.Confidence >= 0 && d.Confidence <= 1, "confidence %v outside [0, 1] (%v)", d.Confidence, d)
	assert.True(t, d.Op.Valid(), "op %v", d.Op)
	if d.Op == leyline.OpWait {
		assert.Empty(t, d.SlotID)
	} else {
		assert.True(t, s.Slots.Contains(d.SlotID), "slot %q of %v not among the slots", d.SlotID, d)
	}
}

func TestHeuristicDefaults(t *testing.T) {
	h := newHeuristic(t, HeuristicOptions{})
	o := h.Options()
	assert.Equal(t, HeuristicOptions{
		Topology:                           "cnn",
		PlateauEpochsToGerminate:           3,
		MinEpochsBeforeGerminate:           5,
		PruneAfterEpochsWithoutImprovement: 5,
		PruneIfAccuracyDropsBy:             2.0,
		MinImprovementToFossilize:          0.5,
		EmbargoEpochsAfterPrune:            5,
		BlueprintRotation:                  []string{"conv_light", "conv_heavy", "attention", "norm", "depthwise"},
		BlueprintPenaltyOnPrune:            2.0,
		BlueprintPenaltyDecay:              0.5,
		BlueprintPenaltyThreshold:          3.0,
		RansomwareContributionThreshold:    0.1,
		RansomwareImprovementThreshold:     0,
	}, o)
	assert.Equal(t, -100, h.LastPruneEpoch())
	assert.Empty(t, h.Penalties())

	mlp := newHeuristic(t, HeuristicOptions{Topology: "mlp"})
	assert.Equal(t, []string{"mlp_small", "lora", "norm", "mlp", "lora_large"}, mlp.Options().BlueprintRotation)

	neg := newHeuristic(t, HeuristicOptions{EmbargoEpochsAfterPrune: -1, MinEpochsBeforeGerminate: -3, PruneIfAccuracyDropsBy: -1})
	assert.Equal(t, 0, neg.Options().EmbargoEpochsAfterPrune)
	assert.Equal(t, 0, neg.Options().MinEpochsBeforeGerminate)
	assert.Equal(t, 0.0, neg.Options().PruneIfAccuracyDropsBy)
}

func TestNewHeuristicRejects(t *testing.T) {
	cases := []struct {
		name string
		opts HeuristicOptions
		want []string // substrings of the error
	}{
		{"cnn rotation on mlp", HeuristicOptions{Topology: "mlp", BlueprintRotation: []string{"conv_light", "norm", "attention"}},
			[]string{"attention, conv_light", "available: lora, lora_large, mlp, mlp_small, norm"}},
		{"unknown blueprint", HeuristicOptions{BlueprintRotation: []string{"norm", "wide_resnet"}},
			[]string{"wide_resnet", "available: attention, bottleneck, conv_heavy, conv_light, conv_small, depthwise, norm"}},
		{"noop is not germinable", HeuristicOptions{BlueprintRotation: []string{"noop"}}, []string{"noop"}},
		{"transformer has no default rotation", HeuristicOptions{Topology: "transformer"}, []string{"no default blueprint rotation", "flex_attention"}},
		{"unknown topology", HeuristicOptions{Topology: "resnet"}, []string{"unknown topology"}},
		{"topology is case sensitive", HeuristicOptions{Topology: "CNN"}, []string{"unknown topology"}},
		{"NaN threshold", HeuristicOptions{MinImprovementToFossilize: math.NaN()}, []string{"MinImprovementToFossilize"}},
		{"Inf ransomware", HeuristicOptions{RansomwareImprovementThreshold: math.Inf(-1)}, []string{"RansomwareImprovementThreshold"}},
		{"growing penalties", HeuristicOptions{BlueprintPenaltyDecay: 1.5}, []string{"BlueprintPenaltyDecay"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewHeuristic(c.opts)
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	h := newHeuristic(t, HeuristicOptions{Topology: "transformer", BlueprintRotation: []string{"attention", "lora"}})
	assert.Equal(t, "transformer", h.Options().Topology)
}

// §7: decide() always returns a decision with a reason and confidence in
// [0, 1], over a sweep of states.
func TestDecideAlwaysWellFormed(t *testing.T) {
	contributions := []*float64{nil, cf(-3), cf(0), cf(0.3), cf(0.51), cf(4), cf(40), cf(math.NaN())}
	stages := []leyline.SeedStage{
		leyline.StageDormant, leyline.StageGerminated, leyline.StageTraining, leyline.StageBlending,
		leyline.StageHolding, leyline.StageFossilized, leyline.StagePruned, leyline.StageEmbargoed, leyline.StageResetting,
	}
	n := 0
	for _, plateau := range []int{0, 2, 3, 5, 12} {
		for _, epoch := range []int{0, 4, 5, 30} {
			for _, stab := range []bool{false, true} {
				h := newHeuristic(t, HeuristicOptions{})
				s := epochState(epoch, plateau, stab)
				assertWellFormed(t, h.Decide(s), s)
				n++
				for _, stage := range stages {
					for _, c := range contributions {
						for _, imp := range []float64{-10, -2.01, 0, 3} {
							seed := leyline.SeedReport{SeedID: "s", SlotID: "r0c1", BlueprintID: "norm", Stage: stage,
								EpochsInStage: epoch, ImprovementSinceStageStart: imp, TotalImprovement: imp,
								Counterfactual: c, Alpha: 1, AlphaTarget: 1}
							if stage == leyline.StageDormant {
								seed.SeedID = ""
							}
							s := epochState(epoch, plateau, stab, seed)
							d := h.Decide(s)
							assertWellFormed(t, d, s)
							n++
						}
					}
				}
			}
		}
	}
	assert.Greater(t, n, 1000)
}

// §7: GERMINATED seeds get ADVANCE, whatever else holds.
func TestGerminatedSeedsAdvance(t *testing.T) {
	cases := []struct {
		name string
		seed leyline.SeedReport
	}{
		{"fresh", leyline.SeedReport{SeedID: "s1", SlotID: "r0c1", Stage: leyline.StageGerminated}},
		{"old and failing", leyline.SeedReport{SeedID: "s2", SlotID: "r0c2", Stage: leyline.StageGerminated, EpochsInStage: 50, ImprovementSinceStageStart: -30}},
		{"with a negative counterfactual", leyline.SeedReport{SeedID: "s3", SlotID: "r0c0", Stage: leyline.StageGerminated, Counterfactual: cf(-5)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHeuristic(t, HeuristicOptions{})
			d := h.Decide(epochState(20, 10, true, c.seed))
			assert.Equal(t, leyline.OpAdvance, d.Op)
			assert.Equal(t, c.seed.SlotID, d.SlotID)
			assert.Equal(t, c.seed.SeedID, d.SeedID)
			assert.Equal(t, 1.0, d.Confidence)
			assert.Equal(t, -100, h.LastPruneEpoch())
		})
	}
}

// §7: TRAINING and BLENDING seeds are never fossilized, however much they
// contribute.
func TestTrainingAndBlendingNeverFossilize(t *testing.T) {
	for _, stage := range []leyline.SeedStage{leyline.StageTraining, leyline.StageBlending} {
		for _, c := range []*float64{nil, cf(0.6), cf(5), cf(100)} {
			for _, imp := range []float64{-5, 0, 2, 50} {
				for _, epochs := range []int{0, 5, 40} {
					for _, alpha := range []float64{0, 0.5, 1} {
						h := newHeuristic(t, HeuristicOptions{})
						seed := leyline.SeedReport{SeedID: "s", SlotID: "r0c0", BlueprintID: "norm", Stage: stage,
							Counterfactual: c, ImprovementSinceStageStart: imp, TotalImprovement: imp,
							EpochsInStage: epochs, Alpha: alpha, AlphaTarget: 1}
						d := h.Decide(epochState(30, 0, true, seed))
						assert.NotEqual(t, leyline.OpFossilize, d.Op, "%v %+v", stage, seed)
						if stage == leyline.StageTraining {
							assert.Contains(t, []leyline.LifecycleOp{leyline.OpAdvance, leyline.OpPrune}, d.Op)
						} else {
							assert.Contains(t, []leyline.LifecycleOp{leyline.OpAdvance, leyline.OpPrune, leyline.OpWait}, d.Op)
						}
					}
				}
			}
		}
	}
}

// should_prune: epochs in stage ≥ 5 AND improvement < −2.0, exactly.
func TestShouldPruneThresholds(t *testing.T) {
	cases := []struct {
		epochs      int
		improvement float64
		prune       bool
	}{
		{5, -2.01, true},
		{4, -2.01, false},
		{5, -2.0, false},
		{6, -10, true},
		{100, -1.99, false},
		{0, -50, false},
	}
	for _, c := range cases {
		for _, stage := range []leyline.SeedStage{leyline.StageTraining, leyline.StageBlending} {
			h := newHeuristic(t, HeuristicOptions{})
			seed := leyline.SeedReport{SeedID: "s", SlotID: "r0c2", BlueprintID: "depthwise", Stage: stage,
				EpochsInStage: c.epochs, ImprovementSinceStageStart: c.improvement, Alpha: 0.3, AlphaTarget: 1, AlphaMode: leyline.AlphaUp}
			d := h.Decide(epochState(12, 0, true, seed))
			if c.prune {
				assert.Equal(t, leyline.OpPrune, d.Op, "%v epochs=%d imp=%v", stage, c.epochs, c.improvement)
				assert.Equal(t, "r0c2", d.SlotID)
				assert.Equal(t, "s", d.SeedID)
				assert.Equal(t, leyline.AlphaSpeedInstant, d.AlphaSpeed)
				assert.Equal(t, 12, h.LastPruneEpoch())
				assert.Equal(t, map[string]float64{"depthwise": 2.0}, h.Penalties())
			} else {
				assert.NotEqual(t, leyline.OpPrune, d.Op, "%v epochs=%d imp=%v", stage, c.epochs, c.improvement)
				assert.Equal(t, -100, h.LastPruneEpoch())
				assert.Empty(t, h.Penalties())
			}
		}
	}
	// Configured thresholds are used.
	h := newHeuristic(t, HeuristicOptions{PruneAfterEpochsWithoutImprovement: 2, PruneIfAccuracyDropsBy: 0.5})
	assert.Equal(t, leyline.OpPrune, h.Decide(epochState(9, 0, true, training("s", "r0c0", "norm", 2, -0.6))).Op)
}

func TestStageRules(t *testing.T) {
	cases := []struct {
		name   string
		seed   leyline.SeedReport
		op     leyline.LifecycleOp
		reason string
		conf   float64
	}{
		{"training advances", training("s", "r0c1", "norm", 1, 0.2), leyline.OpAdvance, "BLENDING", 1},
		{"blending at full target advances", blending("s", "r0c1", 1, 1, leyline.AlphaHold), leyline.OpAdvance, "HOLDING", 1},
		{"blending within tolerance advances", blending("s", "r0c1", 1-1e-7, 1, leyline.AlphaHold), leyline.OpAdvance, "HOLDING", 1},
		{"blending still ramping waits", blending("s", "r0c1", 0.6, 1, leyline.AlphaUp), leyline.OpWait, "alpha=0.60", 1},
		{"blending not yet at target waits", blending("s", "r0c1", 0.999, 1, leyline.AlphaHold), leyline.OpWait, "Blending", 1},
		{"blending held at a partial target waits", blending("s", "r0c1", 0.7, 0.7, leyline.AlphaHold), leyline.OpWait, "Blending", 1},
		{"blending at full alpha but moving waits", blending("s", "r0c1", 1, 1, leyline.AlphaDown), leyline.OpWait, "Blending", 1},
		{"holding without counterfactual waits", holding("s", "r0c1", "norm", nil, -4), leyline.OpWait, "awaiting", 1},
		{"holding with contribution fossilizes", holding("s", "r0c1", "norm", cf(2), 1), leyline.OpFossilize, "Fossilizing", 0.4},
		{"fossilize confidence caps at 1", holding("s", "r0c1", "norm", cf(12), 3), leyline.OpFossilize, "Fossilizing", 1},
		{"just above the threshold fossilizes", holding("s", "r0c1", "norm", cf(0.51), 0.2), leyline.OpFossilize, "Fossilizing", 0.102},
		{"contribution of exactly 0.5 prunes", holding("s", "r0c1", "norm", cf(0.5), 0.2), leyline.OpPrune, "No improvement", 1},
		{"zero contribution prunes", holding("s", "r0c1", "norm", cf(0), 1), leyline.OpPrune, "No improvement", 1},
		// §7: negative counterfactual → prune.
		{"negative counterfactual prunes", holding("s", "r0c1", "norm", cf(-1.5), 2), leyline.OpPrune, "No improvement", 1},
		// §7: ransomware (high contribution, negative total) → prune.
		{"ransomware prunes despite a large contribution", holding("s", "r0c1", "norm", cf(3), -0.5), leyline.OpPrune, "Ransomware", 1},
		{"ransomware just over the contribution threshold", holding("s", "r0c1", "norm", cf(0.11), -0.01), leyline.OpPrune, "Ransomware", 1},
		{"zero total improvement is not ransomware", holding("s", "r0c1", "norm", cf(3), 0), leyline.OpFossilize, "Fossilizing", 0.6},
		{"contribution 0.1 is not ransomware", holding("s", "r0c1", "norm", cf(0.1), -5), leyline.OpPrune, "No improvement", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHeuristic(t, HeuristicOptions{})
			s := epochState(40, 0, true, c.seed)
			d := h.Decide(s)
			assertWellFormed(t, d, s)
			assert.Equal(t, c.op, d.Op, d.Reason)
			assert.Contains(t, d.Reason, c.reason)
			assert.InDelta(t, c.conf, d.Confidence, 1e-12)
			assert.Equal(t, "s", d.SeedID)
			if c.op != leyline.OpWait {
				assert.Equal(t, "r0c1", d.SlotID)
			}
			if c.op == leyline.OpPrune {
				assert.Equal(t, 40, h.LastPruneEpoch())
				assert.Equal(t, map[string]float64{"norm": 2}, h.Penalties())
			} else {
				assert.Equal(t, -100, h.LastPruneEpoch())
			}
		})
	}
}

func TestFirstApplicableRuleWins(t *testing.T) {
	germ := leyline.SeedReport{SeedID: "g", SlotID: "r0c2", Stage: leyline.StageGerminated}
	fossil := leyline.SeedReport{SeedID: "f", SlotID: "r0c0", Stage: leyline.StageFossilized}
	pruned := leyline.SeedReport{SeedID: "p", SlotID: "r0c0", Stage: leyline.StagePruned, BlueprintID: "norm"}
	cases := []struct {
		name  string
		seeds []leyline.SeedReport
		op    leyline.LifecycleOp
		seed  string
	}{
		{"a waiting blend ahead of a germinated seed", []leyline.SeedReport{blending("b", "r0c1", 0.4, 1, leyline.AlphaUp), germ}, leyline.OpWait, "b"},
		{"germinated ahead of a failing trainee", []leyline.SeedReport{germ, failingTraining("t", "r0c1", "norm")}, leyline.OpAdvance, "g"},
		{"failing trainee ahead of germinated", []leyline.SeedReport{failingTraining("t", "r0c1", "norm"), germ}, leyline.OpPrune, "t"},
		{"fossilized seeds are skipped", []leyline.SeedReport{fossil, training("t", "r0c1", "norm", 0, 0)}, leyline.OpAdvance, "t"},
		{"pruned seeds are skipped", []leyline.SeedReport{pruned, holding("h", "r0c1", "norm", cf(1), 1)}, leyline.OpFossilize, "h"},
		{"holding awaiting counterfactual stops the walk", []leyline.SeedReport{holding("h", "r0c1", "norm", nil, 1), germ}, leyline.OpWait, "h"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHeuristic(t, HeuristicOptions{})
			s := epochState(30, 5, true, c.seeds...)
			d := h.Decide(s)
			assertWellFormed(t, d, s)
			assert.Equal(t, c.op, d.Op, d.Reason)
			assert.Equal(t, c.seed, d.SeedID)
		})
	}
}

func TestGerminationGates(t *testing.T) {
	fossil := func(slot string) leyline.SeedReport {
		return leyline.SeedReport{SeedID: "f" + slot, SlotID: slot, Stage: leyline.StageFossilized}
	}
	allFull := epochState(20, 5, true, fossil("r0c0"), fossil("r0c1"), fossil("r0c2"))
	inconsistent := allFull
	inconsistent.Signals.AvailableSlots = 1
	noSlot := ready(20)
	noSlot.Signals.AvailableSlots = 0

	cases := []struct {
		name       string
		prepare    func(h *Heuristic) // runs before the decision
		s          leyline.EpochState
		op         leyline.LifecycleOp
		reason     string
		confidence float64
	}{
		{"embargo comes first, even unstabilised", pruneAt(10), epochState(12, 5, false), leyline.OpWait, "Embargo (2/5", 1},
		{"host not stabilized", nil, epochState(20, 10, false), leyline.OpWait, "Host not stabilized", 1},
		{"too early", nil, epochState(4, 10, true), leyline.OpWait, "Too early", 1},
		{"no available slot", nil, noSlot, leyline.OpWait, "No available slot", 1},
		{"every slot occupied", nil, inconsistent, leyline.OpWait, "No empty slot", 1},
		{"fossilized everywhere, no slot", nil, allFull, leyline.OpWait, "No available slot", 1},
		{"no plateau", nil, epochState(20, 2, true), leyline.OpWait, "progressing normally", 1},
		{"plateau of 3 germinates at epoch 5", nil, epochState(5, 3, true), leyline.OpGerminate, "Plateau detected (3 epochs)", 0.6},
		{"confidence grows with the plateau", nil, epochState(9, 4, true), leyline.OpGerminate, "Plateau", 0.8},
		{"confidence caps at 1", nil, epochState(9, 11, true), leyline.OpGerminate, "Plateau", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHeuristic(t, HeuristicOptions{})
			if c.prepare != nil {
				c.prepare(h)
			}
			d := h.Decide(c.s)
			assertWellFormed(t, d, c.s)
			assert.Equal(t, c.op, d.Op, d.Reason)
			assert.Contains(t, d.Reason, c.reason)
			assert.InDelta(t, c.confidence, d.Confidence, 1e-12)
			want := 0
			if c.op == leyline.OpGerminate {
				want = 1
			}
			assert.Equal(t, want, h.GerminationCount())
		})
	}
}

// pruneAt makes h prune a failing TRAINING seed of blueprint norm at epoch.
func pruneAt(epoch int) func(*Heuristic) {
	return func(h *Heuristic) {
		d := h.Decide(epochState(epoch, 0, true, failingTraining("victim", "r0c0", "norm")))
		if d.Op != leyline.OpPrune {
			panic("pruneAt: expected a prune, got " + d.String())
		}
	}
}

func TestGerminateDecision(t *testing.T) {
	cases := []struct {
		name  string
		seeds []leyline.SeedReport
		slot  string
	}{
		{"empty host takes the first slot", nil, "r0c0"},
		{"a fossilized seed occupies its slot", []leyline.SeedReport{{SeedID: "f", SlotID: "r0c0", Stage: leyline.StageFossilized}}, "r0c1"},
		{"an embargoed slot is not empty", []leyline.SeedReport{
			{SeedID: "f", SlotID: "r0c0", Stage: leyline.StageFossilized},
			{SeedID: "e", SlotID: "r0c1", Stage: leyline.StageEmbargoed}}, "r0c2"},
		{"a dormant report leaves its slot empty", []leyline.SeedReport{{SlotID: "r0c0", Stage: leyline.StageDormant}}, "r0c0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHeuristic(t, HeuristicOptions{EmbargoEpochsAfterPrune: -1})
			s := epochState(10, 3, true, c.seeds...)
			d := h.Decide(s)
			assert.Equal(t, leyline.Decision{
				Op:          leyline.OpGerminate,
				SlotID:      c.slot,
				Blueprint:   leyline.BlueprintConvLight,
				Style:       leyline.StyleSigmoidAdd,
				Tempo:       leyline.TempoStandard,
				AlphaTarget: leyline.AlphaTargetFull,
				Reason:      "Plateau detected (3 epochs)",
				Confidence:  0.6,
			}, d)
		})
	}
	// The slot order is s.Slots' order, not sorted.
	h := newHeuristic(t, HeuristicOptions{})
	s := ready(10)
	s.Slots, _ = leyline.NewSlotConfig("r1c0", "r0c1")
	assert.Equal(t, "r1c0", h.Decide(s).SlotID)
}

// §7: the embargo after a prune is honoured for 5 epochs.
func TestEmbargoAfterPrune(t *testing.T) {
	h := newHeuristic(t, HeuristicOptions{})
	pruneAt(10)(h)
	require.Equal(t, 10, h.LastPruneEpoch())
	for epoch := 10; epoch <= 14; epoch++ {
		d := h.Decide(ready(epoch))
		assert.Equal(t, leyline.OpWait, d.Op, "epoch %d", epoch)
		assert.Contains(t, d.Reason, "Embargo", "epoch %d", epoch)
	}
	d := h.Decide(ready(15))
	assert.Equal(t, leyline.OpGerminate, d.Op, "epoch 15: %s", d.Reason)

	// A configured embargo, and none at all.
	h = newHeuristic(t, HeuristicOptions{EmbargoEpochsAfterPrune: 2})
	pruneAt(10)(h)
	assert.Equal(t, leyline.OpWait, h.Decide(ready(11)).Op)
	assert.Equal(t, leyline.OpGerminate, h.Decide(ready(12)).Op)
	h = newHeuristic(t, HeuristicOptions{EmbargoEpochsAfterPrune: -1})
	pruneAt(10)(h)
	assert.Equal(t, leyline.OpGerminate, h.Decide(ready(10)).Op)
}

// §7: blueprint penalties accumulate on prunes and decay per epoch, with
// the exact values.
func TestPenaltiesAccumulateAndDecay(t *testing.T) {
	h := newHeuristic(t, HeuristicOptions{})
	pruneAt(10)(h)
	assert.Equal(t, map[string]float64{"norm": 2}, h.Penalties())
	pruneAt(10)(h) // same epoch: no decay in between
	assert.Equal(t, map[string]float64{"norm": 4}, h.Penalties())
	h.Decide(epochState(10, 0, true, holding("h", "r0c1", "attention", cf(-1), 0)))
	assert.Equal(t, map[string]float64{"norm": 4, "attention": 2}, h.Penalties())

	want := []map[string]float64{
		11: {"norm": 2, "attention": 1},
		12: {"norm": 1, "attention": 0.5},
		13: {"norm": 0.5, "attention": 0.25},
		14: {"norm": 0.25, "attention": 0.125},
		15: {"norm": 0.125}, // 0.0625 < 0.1 is dropped
		16: {},
	}
	for epoch := 11; epoch <= 16; epoch++ {
		h.Decide(epochState(epoch, 0, false))
		assert.Equal(t, want[epoch], h.Penalties(), "epoch %d", epoch)
	}

	// Decay happens once per new epoch: repeated and older epochs do not
	// decay again.
	h = newHeuristic(t, HeuristicOptions{})
	pruneAt(20)(h)
	h.Decide(epochState(20, 0, false))
	h.Decide(epochState(19, 0, false))
	assert.Equal(t, map[string]float64{"norm": 2}, h.Penalties())
	h.Decide(epochState(25, 0, false)) // a jump of several epochs decays once
	assert.Equal(t, map[string]float64{"norm": 1}, h.Penalties())

	// Configured increment and decay.
	h = newHeuristic(t, HeuristicOptions{BlueprintPenaltyOnPrune: 1.5, BlueprintPenaltyDecay: 0.8})
	pruneAt(3)(h)
	h.Decide(epochState(4, 0, false))
	assert.InDelta(t, 1.2, h.Penalties()["norm"], 1e-12)

	// The floor: exactly 0.1 stays, anything below it goes.
	floor := []struct {
		onPrune float64
		want    map[string]float64
	}{
		{0.2, map[string]float64{"norm": 0.1}},
		{0.15, map[string]float64{}}, // 0.075
	}
	for _, f := range floor {
		h = newHeuristic(t, HeuristicOptions{BlueprintPenaltyOnPrune: f.onPrune})
		pruneAt(3)(h)
		h.Decide(epochState(4, 0, false))
		assert.Equal(t, f.want, h.Penalties(), "penalty %v halved", f.onPrune)
	}
}

// §7 rotation: penalised blueprints are skipped; when all are penalised
// the (penalty, name) order is walked from the start position.
func TestBlueprintRotation(t *testing.T) {
	germinateSeq := func(h *Heuristic, n, epoch int) []string {
		var out []string
		for range n {
			d := h.Decide(ready(epoch))
			require.Equal(t, leyline.OpGerminate, d.Op, d.Reason)
			out = append(out, d.Blueprint.ID())
		}
		return out
	}
	prune := func(h *Heuristic, bp string, times, epoch int) {
		for range times {
			d := h.Decide(epochState(epoch, 0, true, holding("x", "r0c0", bp, cf(-1), 0)))
			require.Equal(t, leyline.OpPrune, d.Op)
		}
	}
	// Decay 1 keeps the penalties constant; no embargo.
	opts := HeuristicOptions{BlueprintPenaltyDecay: 1, EmbargoEpochsAfterPrune: -1}

	t.Run("default order", func(t *testing.T) {
		h := newHeuristic(t, opts)
		assert.Equal(t, []string{"conv_light", "conv_heavy", "attention", "norm", "depthwise", "conv_light"}, germinateSeq(h, 6, 10))
		assert.Equal(t, 6, h.GerminationCount())
	})
	t.Run("penalised blueprint skipped", func(t *testing.T) {
		h := newHeuristic(t, opts)
		prune(h, "conv_heavy", 2, 10) // 4.0 ≥ 3.0
		assert.Equal(t, []string{"conv_light", "attention", "norm", "depthwise", "conv_light", "attention"}, germinateSeq(h, 6, 10))
	})
	t.Run("exactly the threshold is skipped", func(t *testing.T) {
		h := newHeuristic(t, HeuristicOptions{BlueprintPenaltyDecay: 1, EmbargoEpochsAfterPrune: -1, BlueprintPenaltyOnPrune: 3})
		prune(h, "conv_light", 1, 10)
		assert.Equal(t, []string{"conv_heavy"}, germinateSeq(h, 1, 10))
	})
	t.Run("below the threshold is not skipped", func(t *testing.T) {
		h := newHeuristic(t, HeuristicOptions{BlueprintPenaltyDecay: 1, EmbargoEpochsAfterPrune: -1, BlueprintPenaltyOnPrune: 2.99})
		prune(h, "conv_light", 1, 10)
		assert.Equal(t, []string{"conv_light"}, germinateSeq(h, 1, 10))
	})
	t.Run("all penalised falls back to (penalty, name) order", func(t *testing.T) {
		h := newHeuristic(t, HeuristicOptions{BlueprintPenaltyDecay: 1, EmbargoEpochsAfterPrune: -1,
			BlueprintRotation: []string{"conv_light", "norm", "attention"}})
		prune(h, "conv_light", 2, 10) // 4
		prune(h, "norm", 3, 10)       // 6
		prune(h, "attention", 2, 10)  // 4
		require.Equal(t, map[string]float64{"conv_light": 4, "norm": 6, "attention": 4}, h.Penalties())
		// Sorted: attention(4), conv_light(4), norm(6); start positions 0, 1, 2, 3.
		assert.Equal(t, []string{"attention", "conv_light", "norm", "attention"}, germinateSeq(h, 4, 10))
	})
	t.Run("penalties decay back into the rotation", func(t *testing.T) {
		h := newHeuristic(t, HeuristicOptions{EmbargoEpochsAfterPrune: -1})
		prune(h, "conv_light", 2, 10) // 4.0 at epoch 10
		assert.Equal(t, []string{"conv_heavy"}, germinateSeq(h, 1, 10))
		// Epoch 11 decays to 2.0 < 3.0; the position is at attention,
		// so conv_light comes round again after depthwise.
		assert.Equal(t, []string{"attention", "norm", "depthwise", "conv_light"}, germinateSeq(h, 4, 11))
	})
	t.Run("mlp rotation", func(t *testing.T) {
		h := newHeuristic(t, HeuristicOptions{Topology: "mlp"})
		s := ready(10)
		s.Topology = "mlp"
		var got []leyline.BlueprintAction
		for range 5 {
			got = append(got, h.Decide(s).Blueprint)
		}
		assert.Equal(t, []leyline.BlueprintAction{leyline.BlueprintMLPSmall, leyline.BlueprintLora, leyline.BlueprintNorm, leyline.BlueprintMLP, leyline.BlueprintLoraLarge}, got)
	})
}

func TestHeuristicReset(t *testing.T) {
	h := newHeuristic(t, HeuristicOptions{EmbargoEpochsAfterPrune: -1})
	pruneAt(30)(h)
	h.Decide(ready(30))
	h.Decide(ready(31))
	require.Equal(t, 2, h.GerminationCount())
	h.Reset()
	assert.Equal(t, -100, h.LastPruneEpoch())
	assert.Equal(t, 0, h.GerminationCount())
	assert.Empty(t, h.Penalties())
	d := h.Decide(ready(5))
	assert.Equal(t, leyline.BlueprintConvLight, d.Blueprint, "rotation restarts")

	// The decay clock restarts too: a prune at epoch 2 decays at epoch 3.
	h.Reset()
	pruneAt(2)(h)
	h.Decide(epochState(3, 0, false))
	assert.Equal(t, map[string]float64{"norm": 1}, h.Penalties())
}

// flakyCtx is live for its first n Err calls and expired afterwards:
// a deadline that passes while the controller decides.
type flakyCtx struct {
	context.Context
	n int
}

func (c *flakyCtx) Err() error {
	if c.n > 0 {
		c.n--
		return nil
	}
	return context.DeadlineExceeded
}

// §7 / Controller contract: EvaluateEpoch honours a cancelled ctx.
func TestEvaluateEpochHonoursContext(t *testing.T) {
	failing := epochState(20, 0, true, failingTraining("t", "r0c1", "norm"))

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()

	cases := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"deadline passed", expired, context.DeadlineExceeded},
		{"deadline passes while deciding", &flakyCtx{Context: context.Background(), n: 1}, context.DeadlineExceeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHeuristic(t, HeuristicOptions{})
			d, err := h.EvaluateEpoch(c.ctx, failing)
			require.Error(t, err)
			assert.True(t, errors.Is(err, c.want), "%v", err)
			assert.Equal(t, leyline.OpWait, d.Op, "a WAIT comes back with the error")
			// The prune was not recorded: no embargo, no penalty.
			assert.Equal(t, -100, h.LastPruneEpoch())
			assert.Empty(t, h.Penalties())
		})
	}

	h := newHeuristic(t, HeuristicOptions{})
	d, err := h.EvaluateEpoch(context.Background(), failing)
	require.NoError(t, err)
	assert.Equal(t, leyline.OpPrune, d.Op)
	assert.Equal(t, 20, h.LastPruneEpoch())
}

// EvaluateEpoch, given an epoch's raw figures, decides as Decide does
// on the signals a SignalTracker derives from them.
func TestEvaluateEpochMatchesDecide(t *testing.T) {
	raw := func(e int, seeds ...leyline.SeedReport) leyline.EpochState {
		s := epochState(e, 0, false, seeds...)
		s.Signals.Metrics = leyline.TrainingMetrics{Epoch: e, GlobalStep: 10 * e, TrainLoss: 1, ValLoss: 1, TrainAccuracy: 50, ValAccuracy: 50}
		return s
	}
	var states []leyline.EpochState
	for e := range 8 {
		states = append(states, raw(e))
	}
	states = append(states, raw(8, training("t", "r0c1", "norm", 1, 0)), raw(9, holding("h", "r0c2", "norm", cf(1), 1)))
	a := newHeuristic(t, HeuristicOptions{})
	b := newHeuristic(t, HeuristicOptions{})
	tracker, err := NewSignalTracker(TrackerOptions{})
	require.NoError(t, err)
	germinated := false
	for _, s := range states {
		d, err := a.EvaluateEpoch(context.Background(), s)
		require.NoError(t, err)
		m := s.Signals.Metrics
		derived := s
		derived.Signals, err = tracker.Update(EpochResult{Epoch: m.Epoch, GlobalStep: m.GlobalStep, TrainLoss: m.TrainLoss,
			TrainAccuracy: m.TrainAccuracy, ValLoss: m.ValLoss, ValAccuracy: m.ValAccuracy, Seeds: s.Seeds, AvailableSlots: s.Signals.AvailableSlots})
		require.NoError(t, err)
		assert.Equal(t, b.Decide(derived), d, "epoch %d", m.Epoch)
		germinated = germinated || d.Op == leyline.OpGerminate
	}
	assert.True(t, germinated, "the derived plateau and stabilisation reached the rules")
	// An empty topology is accepted as the heuristic's own.
	s := ready(10)
	s.Topology = ""
	_, err = a.EvaluateEpoch(context.Background(), s)
	assert.NoError(t, err)
}

func TestEvaluateEpochRejectsInconsistentState(t *testing.T) {
	mod := func(f func(*leyline.EpochState)) leyline.EpochState {
		s := epochState(10, 0, true, training("t", "r0c1", "norm", 1, 0))
		f(&s)
		return s
	}
	cases := []struct {
		name string
		s    leyline.EpochState
		want string
	}{
		{"other topology", mod(func(s *leyline.EpochState) { s.Topology = "mlp" }), "topology"},
		{"duplicate seed id", mod(func(s *leyline.EpochState) {
			s.Seeds = append(s.Seeds, training("t", "r0c2", "norm", 1, 0))
		}), "duplicate seed id"},
		{"two seeds in one slot", mod(func(s *leyline.EpochState) {
			s.Seeds = append(s.Seeds, training("u", "r0c1", "norm", 1, 0))
		}), "both occupy"},
		{"slot outside the configuration", mod(func(s *leyline.EpochState) { s.Seeds[0].SlotID = "r3c3" }), "not among the slots"},
		{"reserved stage", mod(func(s *leyline.EpochState) { s.Seeds[0].Stage = leyline.SeedStage(5) }), "invalid seed stage"},
		{"empty seed id", mod(func(s *leyline.EpochState) { s.Seeds[0].SeedID = "" }), "no seed id"},
		{"negative available slots", mod(func(s *leyline.EpochState) { s.Signals.AvailableSlots = -1 }), "AvailableSlots"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHeuristic(t, HeuristicOptions{})
			_, err := h.EvaluateEpoch(context.Background(), c.s)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalidEpochState), "%v", err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestHeuristicConcurrentUse(t *testing.T) {
	h := newHeuristic(t, HeuristicOptions{EmbargoEpochsAfterPrune: -1})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if (g+i)%3 == 0 {
					h.Decide(epochState(i, 0, true, failingTraining("t", "r0c0", "norm")))
				} else {
					_, _ = h.EvaluateEpoch(context.Background(), ready(i))
				}
				_ = h.Penalties()
			}
		}()
	}
	wg.Wait()
	assert.GreaterOrEqual(t, h.LastPruneEpoch(), 0)
	assert.Equal(t, map[string]float64{"norm": h.Penalties()["norm"]}, h.Penalties())
}

func TestDecisionStringMentionsReason(t *testing.T) {
	h := newHeuristic(t, HeuristicOptions{})
	d := h.Decide(ready(10))
	assert.True(t, strings.HasPrefix(d.String(), "GERMINATE r0c0 conv_light"), d.String())
}
