package simic

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
)

func mustRewarder(t *testing.T, o RewardOptions) *Rewarder {
	t.Helper()
	r, err := NewRewarder(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustReward(t *testing.T, r *Rewarder, in RewardInputs) Reward {
	t.Helper()
	got, err := r.Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// termsByName lists every term with the name the golden file uses, so a
// new term that is not listed fails TestRewardTermsAllNamed.
func termsByName(t RewardTerms) map[string]float64 {
	return map[string]float64{
		"attribution": t.Attribution, "ratio_penalty": t.RatioPenalty,
		"blending_warning": t.BlendingWarning, "holding_warning": t.HoldingWarning,
		"pbrs": t.PBRS, "synergy": t.Synergy, "rent": t.Rent, "alpha_shock": t.AlphaShock,
		"occupancy": t.Occupancy, "fossil_maintenance": t.FossilMaintenance,
		"action_shaping": t.ActionShaping, "action_pbrs": t.ActionPBRS,
		"intervention_cost": t.InterventionCost, "fossilize_bonus": t.FossilizeBonus,
		"terminal": t.Terminal, "auto_prune": t.AutoPrune,
	}
}

func TestRewardTermsAllNamed(t *testing.T) {
	// Setting every term to 1 must give a Sum equal to the number of named
	// terms: a field missing from Sum or from termsByName shows up here.
	var terms RewardTerms
	v := &terms
	for _, p := range []*float64{&v.Attribution, &v.RatioPenalty, &v.BlendingWarning, &v.HoldingWarning,
		&v.PBRS, &v.Synergy, &v.Rent, &v.AlphaShock, &v.Occupancy, &v.FossilMaintenance,
		&v.ActionShaping, &v.ActionPBRS, &v.InterventionCost, &v.FossilizeBonus, &v.Terminal, &v.AutoPrune} {
		*p = 1
	}
	named := termsByName(terms)
	if terms.Sum() != float64(len(named)) {
		t.Fatalf("Sum = %v with %d named terms", terms.Sum(), len(named))
	}
	for n, x := range named {
		if x != 1 {
			t.Errorf("term %s not wired", n)
		}
	}
}

type goldenSeed struct {
	Stage     int      `json:"stage"`
	EIS       int      `json:"eis"`
	Age       int      `json:"age"`
	C         *float64 `json:"c"`
	CF        *float64 `json:"cf"`
	ISum      float64  `json:"isum"`
	ISSS      float64  `json:"isss"`
	PrevStage int      `json:"prev_stage"`
	PrevEIS   int      `json:"prev_eis"`
}

type goldenCase struct {
	Name   string `json:"name"`
	Inputs struct {
		Op        int         `json:"op"`
		Seed      *goldenSeed `json:"seed"`
		ValAcc    float64     `json:"val_acc"`
		AccGerm   *float64    `json:"acc_germ"`
		Epoch     int         `json:"epoch"`
		MaxEpochs int         `json:"max_epochs"`
		Host      int         `json:"host"`
		Eff       float64     `json:"eff"`
		DAlpha    float64     `json:"dalpha"`
		NActive   int         `json:"n_active"`
		NFossil   int         `json:"n_fossil"`
	} `json:"inputs"`
	Terms map[string]float64 `json:"terms"`
	Total float64            `json:"total"`
}

// TestRewardGoldenFile checks SHAPED against testdata/reward_golden.json,
// written by testdata/reward_golden.py, an independent Python reading of
// esper-reference.md §5.6, over cases that exercise every term.
func TestRewardGoldenFile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "reward_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("only %d golden cases", len(cases))
	}
	r := mustRewarder(t, RewardOptions{})
	seen := map[string]bool{}
	for _, gc := range cases {
		x := gc.Inputs
		in := RewardInputs{
			Op: leyline.LifecycleOp(x.Op), ValAcc: x.ValAcc, Epoch: x.Epoch, MaxEpochs: x.MaxEpochs,
			HostParams: x.Host, EffectiveSeedParams: x.Eff, AlphaDeltaSqSum: x.DAlpha,
			NumActiveSeeds: x.NActive, NumFossilizedSeeds: x.NFossil,
		}
		if x.AccGerm != nil {
			in.AccAtGermination, in.AccAtGerminationKnown = *x.AccGerm, true
		}
		if s := x.Seed; s != nil {
			rs := &RewardSeed{
				Stage: leyline.SeedStage(s.Stage), EpochsInStage: s.EIS, SeedAgeEpochs: s.Age,
				PreviousStage: leyline.SeedStage(s.PrevStage), PreviousEpochsInStage: s.PrevEIS,
				InteractionSum: s.ISum, ImprovementSinceStageStart: s.ISSS,
			}
			if s.C != nil {
				rs.Contribution, rs.ContributionMeasured = *s.C, true
			}
			if s.CF != nil {
				rs.TotalImprovement, rs.TotalImprovementMeasured = *s.CF, true
			}
			in.Seed = rs
		}
		got := mustReward(t, r, in)
		names := termsByName(got.Terms)
		for name, want := range gc.Terms {
			g, ok := names[name]
			if !ok {
				t.Fatalf("%s: golden term %q unknown", gc.Name, name)
			}
			if !near(g, want, 1e-9) {
				t.Errorf("%s: term %s = %.10f, want %.10f", gc.Name, name, g, want)
			}
			if want != 0 {
				seen[name] = true
			}
		}
		if !near(got.Total, gc.Total, 1e-9) {
			t.Errorf("%s: total = %.10f, want %.10f", gc.Name, got.Total, gc.Total)
		}
	}
	// Every SHAPED term (auto_prune is mode-independent) is non-zero in
	// at least one case.
	for name := range termsByName(RewardTerms{}) {
		if name != "auto_prune" && !seen[name] {
			t.Errorf("no golden case exercises term %s", name)
		}
	}
}

// TestRewardHandGolden pins values worked out by hand in the comments.
func TestRewardHandGolden(t *testing.T) {
	shaped := mustRewarder(t, RewardOptions{})
	simplified := mustRewarder(t, RewardOptions{Mode: RewardSimplified})
	sparse := mustRewarder(t, RewardOptions{Mode: RewardSparse})
	training2 := &RewardSeed{Stage: leyline.StageTraining, EpochsInStage: 2, SeedAgeEpochs: 4}

	// §5.6 golden: SIMPLIFIED PRUNE at TRAINING, 2 epochs in stage:
	// 0.3·(0.995·(2+0.6) − (2+0.3)) − 0.01 = 0.0761.
	got := mustReward(t, simplified, RewardInputs{Op: leyline.OpPrune, Seed: training2, ValAcc: 50, Epoch: 10, MaxEpochs: 150})
	if !near(got.Total, 0.0761, 1e-12) {
		t.Errorf("SIMPLIFIED PRUNE = %v, want 0.0761", got.Total)
	}
	// SIMPLIFIED terminal WAIT without a seed: 3·0.8 + 2·2 = 6.4.
	got = mustReward(t, simplified, RewardInputs{Op: leyline.OpWait, ValAcc: 80, Epoch: 150, MaxEpochs: 150, NumContributingFossilized: 2})
	if !near(got.Total, 6.4, 1e-12) {
		t.Errorf("SIMPLIFIED terminal = %v, want 6.4", got.Total)
	}
	// SPARSE terminal: 0.72 − 0.1·250000/500000 = 0.67.
	got = mustReward(t, sparse, RewardInputs{Op: leyline.OpWait, CommittedValAcc: 72, FossilizedSeedParams: 250_000, Epoch: 150, MaxEpochs: 150})
	if !near(got.Total, 0.67, 1e-12) {
		t.Errorf("SPARSE terminal = %v, want 0.67", got.Total)
	}
	// Rent: growth 5000/10000 = 0.5 → 0.5·ln 1.5; tiny host uses the floor
	// 200: 1000/200 = 5 → min(0.5·ln 6, 1.5) = 0.8959.
	got = mustReward(t, shaped, RewardInputs{Op: leyline.OpWait, HostParams: 10000, EffectiveSeedParams: 5000, Epoch: 1, MaxEpochs: 150})
	if !near(got.Terms.Rent, -0.5*math.Log(1.5), 1e-12) || !near(got.GrowthRatio, 0.5, 1e-12) {
		t.Errorf("rent = %v (growth %v)", got.Terms.Rent, got.GrowthRatio)
	}
	got = mustReward(t, shaped, RewardInputs{Op: leyline.OpWait, HostParams: 17, EffectiveSeedParams: 1000, Epoch: 1, MaxEpochs: 150})
	if !near(got.Terms.Rent, -0.5*math.Log(6), 1e-12) {
		t.Errorf("floored rent = %v, want %v", got.Terms.Rent, -0.5*math.Log(6))
	}
	// Ratio penalty: c = 8, cf = 1 → ratio 8 → −min(0.3, 0.1·3/5) = −0.06;
	// cf at or below the safe threshold: −0.3·min(1, c/10).
	for _, tc := range []struct{ c, cf, want float64 }{{8, 1, -0.06}, {3, 0.05, -0.09}, {20, 0.1, -0.3}, {4, 1, 0}, {1, 0, 0}} {
		s := &RewardSeed{Stage: leyline.StageTraining, EpochsInStage: 3, SeedAgeEpochs: 20,
			Contribution: tc.c, ContributionMeasured: true, TotalImprovement: tc.cf, TotalImprovementMeasured: true}
		got = mustReward(t, shaped, RewardInputs{Op: leyline.OpWait, Seed: s, Epoch: 30, MaxEpochs: 150, ValAcc: 60})
		if !near(got.Terms.RatioPenalty, tc.want, 1e-12) {
			t.Errorf("c=%v cf=%v: ratio penalty %v, want %v", tc.c, tc.cf, got.Terms.RatioPenalty, tc.want)
		}
	}
	// Immediate fossilize bonus at full legitimacy: 3·tanh(1/3) ≈ 0.965.
	hold := &RewardSeed{Stage: leyline.StageHolding, EpochsInStage: 5, SeedAgeEpochs: 30,
		Contribution: 1.0, ContributionMeasured: true, TotalImprovement: 0, TotalImprovementMeasured: true}
	got = mustReward(t, shaped, RewardInputs{Op: leyline.OpFossilize, Seed: hold, Epoch: 50, MaxEpochs: 150, ValAcc: 70})
	if !near(got.Terms.FossilizeBonus, 3*math.Tanh(1.0/3), 1e-12) || !near(got.Terms.FossilizeBonus, 0.965, 1e-3) {
		t.Errorf("fossilize bonus = %v", got.Terms.FossilizeBonus)
	}
	if !near(got.Terms.ActionShaping, 0.6, 1e-12) { // (0.5 + 0.1·1)·1
		t.Errorf("fossilize shaping = %v, want 0.6", got.Terms.ActionShaping)
	}
	// Auto-prune penalty is added in every mode.
	for _, r := range []*Rewarder{shaped, simplified, sparse} {
		got = mustReward(t, r, RewardInputs{Op: leyline.OpWait, Epoch: 3, MaxEpochs: 150, PendingAutoPrunes: 2})
		if !near(got.Terms.AutoPrune, -0.4, 1e-12) || !near(got.Total, -0.4, 1e-12) {
			t.Errorf("%v: auto-prune term %v, total %v", r.o.Mode, got.Terms.AutoPrune, got.Total)
		}
	}
}

func TestStagePotentials(t *testing.T) {
	happy := []leyline.SeedStage{leyline.StageDormant, leyline.StageGerminated, leyline.StageTraining,
		leyline.StageBlending, leyline.StageHolding, leyline.StageFossilized}
	for i := 1; i < len(happy); i++ {
		if !(StagePotential(happy[i]) > StagePotential(happy[i-1])) {
			t.Errorf("potential of %v not above %v", happy[i], happy[i-1])
		}
	}
	for _, s := range leyline.ValidStages() {
		if StagePotential(s) < 0 {
			t.Errorf("negative potential for %v", s)
		}
	}
	for _, s := range []leyline.SeedStage{leyline.StagePruned, leyline.StageEmbargoed, leyline.StageResetting, leyline.StageDormant} {
		if StagePotential(s) != 0 {
			t.Errorf("%v potential %v, want 0", s, StagePotential(s))
		}
	}
	if StagePotential(leyline.StageHolding) != 5.5 || StagePotential(leyline.StageBlending) != 3.5 {
		t.Error("potential values differ from §5.6")
	}
}

func TestPBRS(t *testing.T) {
	g1 := mustRewarder(t, RewardOptions{Gamma: 1})
	def := mustRewarder(t, RewardOptions{})
	pb := func(r *Rewarder, s RewardSeed) float64 {
		return mustReward(t, r, RewardInputs{Op: leyline.OpWait, Seed: &s, Epoch: 5, MaxEpochs: 150}).Terms.PBRS
	}
	// Same stage with the progress bonus saturated: no shaping at γ = 1.
	if v := pb(g1, RewardSeed{Stage: leyline.StageHolding, EpochsInStage: 12}); v != 0 {
		t.Errorf("same-stage saturated PBRS = %v, want 0", v)
	}
	// Progress bonus caps at 2.0: with γ = 0.995 the saturated step is
	// 0.3·(0.995−1)·(3.5+2).
	if v := pb(def, RewardSeed{Stage: leyline.StageBlending, EpochsInStage: 40}); !near(v, 0.3*(0.995-1)*5.5, 1e-12) {
		t.Errorf("saturated PBRS = %v, want %v", v, 0.3*(0.995-1)*5.5)
	}
	// A stage change uses the previous stage's potential: BLENDING after 4
	// epochs of TRAINING: 0.3·(3.5 − (2 + 1.2)) at γ = 1.
	if v := pb(g1, RewardSeed{Stage: leyline.StageBlending, PreviousStage: leyline.StageTraining, PreviousEpochsInStage: 4}); !near(v, 0.3*0.3, 1e-12) {
		t.Errorf("stage-change PBRS = %v, want 0.09", v)
	}
	// Telescoping at γ = 1: a happy-path trajectory's PBRS sums to
	// 0.3·(φ_final − φ_initial).
	type step struct {
		st  leyline.SeedStage
		eis int
	}
	var traj []step
	for _, seg := range []struct {
		st leyline.SeedStage
		n  int
	}{{leyline.StageGerminated, 2}, {leyline.StageTraining, 9}, {leyline.StageBlending, 6}, {leyline.StageHolding, 5}, {leyline.StageFossilized, 3}} {
		for e := 0; e < seg.n; e++ {
			traj = append(traj, step{seg.st, e})
		}
	}
	sum := 0.0
	for i := 1; i < len(traj); i++ {
		s := RewardSeed{Stage: traj[i].st, EpochsInStage: traj[i].eis}
		if traj[i].eis == 0 {
			s.PreviousStage, s.PreviousEpochsInStage = traj[i-1].st, traj[i-1].eis
		}
		sum += pb(g1, s)
	}
	first, last := traj[0], traj[len(traj)-1]
	want := 0.3 * (seedPotential(last.st, last.eis) - seedPotential(first.st, first.eis))
	if !near(sum, want, 1e-9) {
		t.Errorf("telescoped PBRS = %v, want %v", sum, want)
	}
}

func TestPruneShapingToxicVersusGood(t *testing.T) {
	r := mustRewarder(t, RewardOptions{})
	prune := func(c float64, age int) Reward {
		s := &RewardSeed{Stage: leyline.StageBlending, EpochsInStage: 3, SeedAgeEpochs: age,
			Contribution: c, ContributionMeasured: true, TotalImprovement: c, TotalImprovementMeasured: true}
		return mustReward(t, r, RewardInputs{Op: leyline.OpPrune, Seed: s, Epoch: 40, MaxEpochs: 150, ValAcc: 60, AccAtGermination: 58, AccAtGerminationKnown: true})
	}
	toxic, good := prune(-2, 12), prune(3, 12)
	if !(toxic.Terms.ActionShaping > 0) || !(toxic.Terms.Attribution > 0) {
		t.Errorf("pruning a toxic seed: shaping %v, attribution %v, want both > 0", toxic.Terms.ActionShaping, toxic.Terms.Attribution)
	}
	if !(good.Terms.ActionShaping < 0) || !(good.Terms.Attribution < 0) {
		t.Errorf("pruning a good seed: shaping %v, attribution %v, want both < 0", good.Terms.ActionShaping, good.Terms.Attribution)
	}
	if !(toxic.Total > good.Total) {
		t.Errorf("toxic prune %v not above good prune %v", toxic.Total, good.Total)
	}
	if v := prune(-0.2, 12).Terms.ActionShaping; v != pruneAcceptableBonus {
		t.Errorf("slightly negative seed: shaping %v, want %v", v, pruneAcceptableBonus)
	}
	if v := prune(20, 12).Terms.ActionShaping; v != pruneGoodSeedMax {
		t.Errorf("very good seed: shaping %v, want cap %v", v, pruneGoodSeedMax)
	}
	if v := prune(3, 2).Terms.ActionShaping; !near(v, -0.9, 1e-12) {
		t.Errorf("prune at age 2: shaping %v, want −0.3·3", v)
	}
	fossil := mustReward(t, r, RewardInputs{Op: leyline.OpPrune, Seed: &RewardSeed{Stage: leyline.StageFossilized, SeedAgeEpochs: 40}, Epoch: 60, MaxEpochs: 150})
	if fossil.Terms.ActionShaping != pruneFossilizedPenalty {
		t.Errorf("prune fossil shaping %v", fossil.Terms.ActionShaping)
	}
	empty := mustReward(t, r, RewardInputs{Op: leyline.OpPrune, Epoch: 60, MaxEpochs: 150})
	if empty.Terms.ActionShaping != pruneNoSeedPenalty || empty.Terms.ActionPBRS != 0 {
		t.Errorf("prune empty slot: %+v", empty.Terms)
	}
}

func TestHoldingWarning(t *testing.T) {
	r := mustRewarder(t, RewardOptions{})
	warn := func(eis int, c float64, op leyline.LifecycleOp) float64 {
		s := &RewardSeed{Stage: leyline.StageHolding, EpochsInStage: eis, SeedAgeEpochs: 30,
			Contribution: c, ContributionMeasured: true, TotalImprovement: 2, TotalImprovementMeasured: true}
		return mustReward(t, r, RewardInputs{Op: op, Seed: s, Epoch: 40, MaxEpochs: 150, ValAcc: 70, AccAtGermination: 65, AccAtGerminationKnown: true}).Terms.HoldingWarning
	}
	if v := warn(2, 1.5, leyline.OpWait); !near(v, -0.1, 1e-12) {
		t.Errorf("epoch 2: %v, want −0.1", v)
	}
	if v := warn(1, 1.5, leyline.OpWait); v != 0 {
		t.Errorf("epoch 1: %v, want 0", v)
	}
	if v := warn(2, -1, leyline.OpWait); v != 0 {
		t.Errorf("attribution ≤ 0: %v, want 0", v)
	}
	if v := warn(2, 0, leyline.OpWait); v != 0 {
		t.Errorf("attribution 0: %v, want 0", v)
	}
	if v := warn(4, 1.5, leyline.OpSetAlphaTarget); !near(v, -0.2, 1e-12) {
		t.Errorf("epoch 4 SET_ALPHA_TARGET: %v, want −0.2", v)
	}
	if v := warn(20, 1.5, leyline.OpWait); !near(v, -0.3, 1e-12) {
		t.Errorf("cap: %v, want −0.3", v)
	}
	if v := warn(4, 1.5, leyline.OpFossilize); v != 0 {
		t.Errorf("FOSSILIZE resolves HOLDING: %v, want 0", v)
	}
}

func TestHackingDiagnostics(t *testing.T) {
	r := mustRewarder(t, RewardOptions{})
	diag := func(c, cf float64) Reward {
		s := &RewardSeed{Stage: leyline.StageTraining, EpochsInStage: 3, SeedAgeEpochs: 20,
			Contribution: c, ContributionMeasured: true, TotalImprovement: cf, TotalImprovementMeasured: true}
		return mustReward(t, r, RewardInputs{Op: leyline.OpWait, Seed: s, Epoch: 30, MaxEpochs: 150, ValAcc: 60})
	}
	if !diag(6, 1).HackingSuspected {
		t.Error("6× ratio: hacking not suspected")
	}
	if diag(4, 1).HackingSuspected {
		t.Error("4× ratio: hacking suspected")
	}
	if got := diag(2, -1); !got.RansomwareSignature || got.HackingSuspected {
		t.Errorf("c 2, cf −1: ransomware %v hacking %v", got.RansomwareSignature, got.HackingSuspected)
	}
	if diag(2, 0.5).RansomwareSignature {
		t.Error("positive total improvement flagged as ransomware")
	}
}

func TestTimingDiscountAndHarmonic(t *testing.T) {
	for _, tc := range []struct {
		e    int
		want float64
	}{{0, 0.4}, {5, 0.7}, {10, 1}, {40, 1}, {-3, 0.4}} {
		if got := TimingDiscount(tc.e); !near(got, tc.want, 1e-12) {
			t.Errorf("TimingDiscount(%d) = %v, want %v", tc.e, got, tc.want)
		}
	}
	for e := 1; e < 10; e++ {
		if !(TimingDiscount(e) > TimingDiscount(e-1)) {
			t.Errorf("timing discount not increasing at %d", e)
		}
	}
	rng := tensor.NewRNG(3)
	for i := 0; i < 2000; i++ {
		p, c := rng.Float64()*20-2, rng.Float64()*20-2
		h := HarmonicAttribution(p, c)
		if h > 2*math.Min(p, c)+1e-12 && h != 0 {
			t.Fatalf("harmonic(%v, %v) = %v above 2·min", p, c, h)
		}
		if h < 0 {
			t.Fatalf("harmonic(%v, %v) = %v negative", p, c, h)
		}
	}
	if !near(HarmonicAttribution(2, 4), 16.0/6, 1e-12) {
		t.Error("harmonic(2, 4) wrong")
	}
	// The attribution applies the timing discount of the germination epoch.
	r := mustRewarder(t, RewardOptions{})
	s := &RewardSeed{Stage: leyline.StageTraining, EpochsInStage: 2, SeedAgeEpochs: 6,
		Contribution: 1, ContributionMeasured: true, TotalImprovement: 1, TotalImprovementMeasured: true}
	got := mustReward(t, r, RewardInputs{Op: leyline.OpWait, Seed: s, Epoch: 6, MaxEpochs: 150, ValAcc: 61, AccAtGermination: 59, AccAtGerminationKnown: true})
	if !near(got.TimingDiscount, 0.4, 1e-12) || !near(got.Terms.Attribution, 0.4, 1e-12) {
		t.Errorf("germinated at epoch 0: discount %v attribution %v, want 0.4 and 0.4", got.TimingDiscount, got.Terms.Attribution)
	}
	noTiming := mustRewarder(t, RewardOptions{DisableTimingDiscount: true})
	if got := mustReward(t, noTiming, RewardInputs{Op: leyline.OpWait, Seed: s, Epoch: 6, MaxEpochs: 150, ValAcc: 61, AccAtGermination: 59, AccAtGerminationKnown: true}); got.Terms.Attribution != 1 {
		t.Errorf("timing discount disabled: attribution %v, want 1", got.Terms.Attribution)
	}
}

func TestSparseReward(t *testing.T) {
	r := mustRewarder(t, RewardOptions{Mode: RewardSparse})
	rng := tensor.NewRNG(9)
	for i := 0; i < 500; i++ {
		epoch := 1 + rng.IntN(20)
		in := RewardInputs{Op: leyline.LifecycleOp(rng.IntN(leyline.NumOps)), Epoch: epoch, MaxEpochs: 20,
			CommittedValAcc: rng.Float64() * 300, FossilizedSeedParams: rng.IntN(50_000_000), ValAcc: 90}
		got := mustReward(t, r, in)
		if epoch < 20 && got.Total != 0 {
			t.Fatalf("epoch %d: sparse reward %v before terminal", epoch, got.Total)
		}
		if got.Total < -1 || got.Total > 1 {
			t.Fatalf("sparse reward %v outside [−1, 1]", got.Total)
		}
	}
	// Clamp at both ends.
	if got := mustReward(t, r, RewardInputs{Epoch: 5, MaxEpochs: 5, CommittedValAcc: 100, FossilizedSeedParams: 100_000_000}); got.Total != -1 {
		t.Errorf("clamped low: %v", got.Total)
	}
}

func randomRewardInputs(rng interface {
	Float64() float64
	IntN(int) int
}) RewardInputs {
	maxE := 1 + rng.IntN(150)
	in := RewardInputs{
		Op: leyline.LifecycleOp(rng.IntN(leyline.NumOps)), ValAcc: rng.Float64() * 100,
		Epoch: rng.IntN(maxE + 1), MaxEpochs: maxE, HostParams: rng.IntN(1_000_000),
		EffectiveSeedParams: rng.Float64() * 1e7, AlphaDeltaSqSum: rng.Float64() * 20,
		NumActiveSeeds: rng.IntN(4), NumFossilizedSeeds: rng.IntN(4), NumContributingFossilized: rng.IntN(4),
		CommittedValAcc: rng.Float64() * 100, FossilizedSeedParams: rng.IntN(2_000_000), PendingAutoPrunes: rng.IntN(3),
	}
	if rng.IntN(2) == 0 {
		in.AccAtGermination, in.AccAtGerminationKnown = rng.Float64()*100, true
	}
	if rng.IntN(5) > 0 {
		stages := leyline.ValidStages()
		s := &RewardSeed{
			Stage: stages[rng.IntN(len(stages))], EpochsInStage: rng.IntN(30),
			PreviousStage: stages[rng.IntN(len(stages))], PreviousEpochsInStage: rng.IntN(30),
			SeedAgeEpochs: rng.IntN(60), ImprovementSinceStageStart: rng.Float64()*20 - 10,
			InteractionSum: rng.Float64()*10 - 5,
		}
		if rng.IntN(3) > 0 {
			s.Contribution, s.ContributionMeasured = rng.Float64()*40-20, true
			s.TotalImprovement, s.TotalImprovementMeasured = rng.Float64()*40-20, true
		} else if rng.IntN(2) == 0 {
			s.TotalImprovement, s.TotalImprovementMeasured = rng.Float64()*40-20, true
		}
		in.Seed = s
	}
	return in
}

// TestRewardInvariants checks, over random inputs in every mode, that the
// terms sum to the total, the reward stays within [−50, 50] and the
// intervention costs are never positive.
func TestRewardInvariants(t *testing.T) {
	rng := tensor.NewRNG(11)
	for _, mode := range []RewardMode{RewardShaped, RewardSimplified, RewardSparse} {
		r := mustRewarder(t, RewardOptions{Mode: mode})
		nonzero := 0
		for i := 0; i < 3000; i++ {
			in := randomRewardInputs(rng)
			got := mustReward(t, r, in)
			tm := got.Terms
			sum := tm.Attribution + tm.RatioPenalty + tm.BlendingWarning + tm.HoldingWarning + tm.PBRS +
				tm.Synergy + tm.Rent + tm.AlphaShock + tm.Occupancy + tm.FossilMaintenance + tm.ActionShaping +
				tm.ActionPBRS + tm.InterventionCost + tm.FossilizeBonus + tm.Terminal + tm.AutoPrune
			if !near(sum, got.Total, 1e-12) {
				t.Fatalf("%v: terms sum to %v, total %v", mode, sum, got.Total)
			}
			if got.Total < -50 || got.Total > 50 || math.IsNaN(got.Total) {
				t.Fatalf("%v: reward %v outside [−50, 50] for %+v", mode, got.Total, in)
			}
			if tm.InterventionCost > 0 || tm.RatioPenalty > 0 || tm.Rent > 0 || tm.AlphaShock > 0 ||
				tm.BlendingWarning > 0 || tm.HoldingWarning > 0 || tm.Occupancy > 0 || tm.FossilMaintenance > 0 {
				t.Fatalf("%v: a cost term is positive: %+v", mode, tm)
			}
			if got.Total != 0 {
				nonzero++
			}
		}
		if nonzero == 0 {
			t.Errorf("%v: every random reward was 0", mode)
		}
	}
}

// TestGerminatePruneNotProfitable: germinating and pruning one epoch later
// must not pay, so the policy cannot farm the germination bonus.
func TestGerminatePruneNotProfitable(t *testing.T) {
	r := mustRewarder(t, RewardOptions{})
	for _, epoch := range []int{1, 5, 20} {
		g := mustReward(t, r, RewardInputs{Op: leyline.OpGerminate, Epoch: epoch, MaxEpochs: 150, ValAcc: 50, HostParams: 10000})
		seed := &RewardSeed{Stage: leyline.StageGerminated, EpochsInStage: 1, SeedAgeEpochs: 1}
		p := mustReward(t, r, RewardInputs{Op: leyline.OpPrune, Seed: seed, Epoch: epoch + 1, MaxEpochs: 150, ValAcc: 50,
			AccAtGermination: 50, AccAtGerminationKnown: true, HostParams: 10000, NumActiveSeeds: 1})
		if npv := g.Total + leyline.DefaultGamma*p.Total; npv >= 0 {
			t.Errorf("germinate at %d then prune: NPV %v ≥ 0 (%v, %v)", epoch, npv, g.Total, p.Total)
		}
	}
}

func TestRewardErrors(t *testing.T) {
	r := mustRewarder(t, RewardOptions{})
	cases := map[string]RewardInputs{
		"contribution without total": {Op: leyline.OpWait, Epoch: 1, MaxEpochs: 10,
			Seed: &RewardSeed{Stage: leyline.StageTraining, Contribution: 1, ContributionMeasured: true}},
		"bad op":         {Op: leyline.LifecycleOp(9), Epoch: 1, MaxEpochs: 10},
		"no max epochs":  {Op: leyline.OpWait},
		"epoch too late": {Op: leyline.OpWait, Epoch: 11, MaxEpochs: 10},
		"reserved stage": {Op: leyline.OpWait, Epoch: 1, MaxEpochs: 10, Seed: &RewardSeed{Stage: leyline.SeedStage(5)}},
		"NaN accuracy":   {Op: leyline.OpWait, Epoch: 1, MaxEpochs: 10, ValAcc: math.NaN()},
		"negative rent":  {Op: leyline.OpWait, Epoch: 1, MaxEpochs: 10, EffectiveSeedParams: -1},
		"negative added": {Op: leyline.OpWait, Epoch: 1, MaxEpochs: 10, AddedParams: -1},
		"bad transition": {Op: leyline.OpWait, Epoch: 1, MaxEpochs: 10, Transitions: []StageTransition{{Before: leyline.SeedStage(5)}}},
	}
	for name, in := range cases {
		if _, err := r.Compute(in); !errors.Is(err, ErrRewardInput) {
			t.Errorf("%s: err = %v, want ErrRewardInput", name, err)
		}
	}
	for name, o := range map[string]RewardOptions{
		"gamma":  {Gamma: 1.5},
		"mode":   {Mode: RewardMode(7)},
		"weight": {PBRSWeight: -1},
		"floor":  {RentHostParamsFloor: -2},
		"budget": {ParamBudget: -1},
		"scale":  {AccuracyScale: -0.1},
		"window": {AccuracyWindow: -1},
		"cost":   {ParamCost: math.NaN()},
	} {
		if _, err := NewRewarder(o); err == nil {
			t.Errorf("options %s accepted", name)
		}
	}
	def := mustRewarder(t, RewardOptions{}).Options()
	if def.Gamma != leyline.DefaultGamma || def.PBRSWeight != 0.3 || def.RentHostParamsFloor != 200 || def.ParamBudget != 500_000 {
		t.Errorf("defaults not filled: %+v", def)
	}
}

func TestRewardModeNames(t *testing.T) {
	for _, m := range []RewardMode{RewardShaped, RewardSimplified, RewardSparse, RewardAccuracy} {
		got, err := ParseRewardMode(m.String())
		if err != nil || got != m {
			t.Errorf("round trip of %v: %v, %v", m, got, err)
		}
	}
	if m, err := ParseRewardMode("simplified"); err != nil || m != RewardSimplified {
		t.Errorf("lower case: %v, %v", m, err)
	}
	if _, err := ParseRewardMode("escrow"); err == nil {
		t.Error("unsupported mode parsed")
	}
}

func TestEffectiveSeedParamsAndAlphaShock(t *testing.T) {
	slots := []SlotParams{
		{Stage: leyline.StageTraining, Alpha: 0, SeedParams: 5000},
		{Stage: leyline.StageBlending, Alpha: 0.5, PrevAlpha: 0.25, SeedParams: 2000},
		{Stage: leyline.StageFossilized, Alpha: 1, PrevAlpha: 1, SeedParams: 1000},
	}
	// 2·0.0039·10000 + 0.5·2000 + 1·1000 = 2078.
	if got := EffectiveSeedParams(10000, slots); !near(got, 2078, 1e-9) {
		t.Errorf("EffectiveSeedParams = %v, want 2078", got)
	}
	// 0.25²·2000/10000 = 0.0125.
	if got := AlphaDeltaSqSum(10000, slots); !near(got, 0.0125, 1e-12) {
		t.Errorf("AlphaDeltaSqSum = %v, want 0.0125", got)
	}
	r := mustRewarder(t, RewardOptions{})
	got := mustReward(t, r, RewardInputs{Op: leyline.OpWait, Epoch: 2, MaxEpochs: 10, AlphaDeltaSqSum: 0.0125})
	if !near(got.Terms.AlphaShock, -0.1958*0.0125, 1e-12) {
		t.Errorf("alpha shock %v", got.Terms.AlphaShock)
	}
	if got := mustReward(t, r, RewardInputs{Op: leyline.OpWait, Epoch: 2, MaxEpochs: 10, AlphaDeltaSqSum: 100}); got.Terms.AlphaShock != -1 {
		t.Errorf("alpha shock cap: %v", got.Terms.AlphaShock)
	}
	anti := mustRewarder(t, RewardOptions{DisableAntiGaming: true})
	if got := mustReward(t, anti, RewardInputs{Op: leyline.OpWait, Epoch: 2, MaxEpochs: 10, AlphaDeltaSqSum: 100}); got.Terms.AlphaShock != 0 {
		t.Errorf("anti-gaming disabled: alpha shock %v", got.Terms.AlphaShock)
	}
}

// TestAccuracyReward checks ACCURACY term by term against hand-computed
// values: the accuracy paid over the last AccuracyWindow epochs, the
// parameter cost at the last one, and the stage shaping of every slot.
func TestAccuracyReward(t *testing.T) {
	r := mustRewarder(t, RewardOptions{Mode: RewardAccuracy})
	o := r.Options()
	if o.AccuracyScale != 0.1 || o.AccuracyWindow != 5 || o.ParamCost != 0.05 || o.StagePotentialWeight != 0.3 {
		t.Fatalf("defaults %+v", o)
	}
	// Mid-run, no seed: nothing.
	got := mustReward(t, r, RewardInputs{Op: leyline.OpWait, Epoch: 10, MaxEpochs: 45, ValAcc: 30})
	if got.Total != 0 {
		t.Errorf("mid-run WAIT paid %v", got.Total)
	}
	// Epoch 41 of 45 is in the window of 5: 0.1·30/5 = 0.6; epoch 40 is not.
	if got := mustReward(t, r, RewardInputs{Op: leyline.OpWait, Epoch: 41, MaxEpochs: 45, ValAcc: 30}); !near(got.Terms.Terminal, 0.6, 1e-12) || got.Total != got.Terms.Terminal {
		t.Errorf("epoch 41: %+v", got)
	}
	if got := mustReward(t, r, RewardInputs{Op: leyline.OpWait, Epoch: 40, MaxEpochs: 45, ValAcc: 30}); got.Total != 0 {
		t.Errorf("epoch 40 paid %v", got.Total)
	}
	// A germination in one slot, the other empty: 0.3·(0.995·1 − 0) = 0.2985.
	germ := RewardInputs{Op: leyline.OpGerminate, Epoch: 3, MaxEpochs: 45, ValAcc: 12,
		Transitions: []StageTransition{{Before: leyline.StageUnknown, After: leyline.StageGerminated}, {}}}
	if got := mustReward(t, r, germ); !near(got.Terms.PBRS, 0.2985, 1e-12) || !near(got.Total, 0.2985, 1e-12) {
		t.Errorf("germination: %+v", got)
	}
	// BLENDING → HOLDING beside a TRAINING seed: 0.3·(0.995·5.5 − 3.5) + 0.3·(0.995·2 − 2) = 0.59175 − 0.003.
	adv := RewardInputs{Op: leyline.OpAdvance, Epoch: 20, MaxEpochs: 45,
		Transitions: []StageTransition{{Before: leyline.StageBlending, After: leyline.StageHolding}, {Before: leyline.StageTraining, After: leyline.StageTraining}}}
	if got := mustReward(t, r, adv); !near(got.Terms.PBRS, 0.58875, 1e-12) {
		t.Errorf("advance: PBRS %v, want 0.58875", got.Terms.PBRS)
	}
	// A prune forfeits the potential: 0.3·(0 − 2).
	prune := RewardInputs{Op: leyline.OpPrune, Epoch: 20, MaxEpochs: 45, Transitions: []StageTransition{{Before: leyline.StageTraining, After: leyline.StagePruned}}}
	if got := mustReward(t, r, prune); !near(got.Terms.PBRS, -0.6, 1e-12) {
		t.Errorf("prune: PBRS %v, want -0.6", got.Terms.PBRS)
	}
	// The last epoch: the potentials go back (0.3·(0 − 6) for a fossil),
	// 0.1·25/5 = 0.5 of accuracy, and 0.05·1.348 for 1348 added parameters.
	last := RewardInputs{Op: leyline.OpWait, Epoch: 45, MaxEpochs: 45, ValAcc: 25, AddedParams: 1348,
		Transitions: []StageTransition{{Before: leyline.StageFossilized, After: leyline.StageFossilized}}}
	got = mustReward(t, r, last)
	if !near(got.Terms.PBRS, -1.8, 1e-12) || !near(got.Terms.Terminal, 0.5, 1e-12) || !near(got.Terms.Rent, -0.0674, 1e-12) || !near(got.Total, -1.8+0.5-0.0674, 1e-12) {
		t.Errorf("last epoch: %+v", got.Terms)
	}
	// No parameter cost, no shaping: only the accuracy.
	bare := mustRewarder(t, RewardOptions{Mode: RewardAccuracy, ParamCost: -1, StagePotentialWeight: -1, AccuracyWindow: 1})
	if got := mustReward(t, bare, last); got.Total != 0.1*25 {
		t.Errorf("bare last epoch: %+v", got.Terms)
	}
}

// TestAccuracyRewardShapingTelescopes: over a whole episode the stage
// shaping of ACCURACY sums to −φ of the first state (0 from empty slots)
// up to the discount's leak, whatever the lifecycle, so the episode with
// the higher final accuracy is the one that pays more (here: a seed
// germinated, advanced, blended, held and fossilized, against none).
func TestAccuracyRewardShapingTelescopes(t *testing.T) {
	r := mustRewarder(t, RewardOptions{Mode: RewardAccuracy, Gamma: 1})
	const epochs = 12
	path := []leyline.SeedStage{leyline.StageUnknown, leyline.StageGerminated, leyline.StageTraining, leyline.StageTraining,
		leyline.StageBlending, leyline.StageBlending, leyline.StageHolding, leyline.StageFossilized}
	shaping, total := 0.0, 0.0
	for e := 1; e <= epochs; e++ {
		before := path[min(e-1, len(path)-1)]
		after := path[min(e, len(path)-1)]
		got := mustReward(t, r, RewardInputs{Op: leyline.OpWait, Epoch: e, MaxEpochs: epochs, ValAcc: 30, AddedParams: 200,
			Transitions: []StageTransition{{Before: before, After: after}, {}}})
		shaping += got.Terms.PBRS
		total += got.Total
	}
	if !near(shaping, 0, 1e-12) {
		t.Errorf("shaping over the episode = %v, want 0", shaping)
	}
	// 5 epochs × 0.1·30/5 − 0.05·0.2 = 2.99.
	if !near(total, 2.99, 1e-12) {
		t.Errorf("episode return %v, want 2.99", total)
	}
}
