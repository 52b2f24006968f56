package simic

import (
	"errors"
	"iter"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// tinyEsper builds the shared data and a small policy for the Esper
// environment tests.
func tinyEsper(t *testing.T) (*EsperData, *TamiyoPolicy) {
	t.Helper()
	d, err := NewSyntheticData(SyntheticDataOptions{Train: 128, Val: 64, Batch: 32, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	p, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Hidden: 16, GATHidden: 8, GATHeads: 2, HeadHidden: 16, NoDropout: true, Seed: 5, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := NewTamiyoPolicy(p, TamiyoPolicyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d, tp
}

func newTinyEnv(t *testing.T, d *EsperData, i, maxEpochs int) *EsperEnv {
	t.Helper()
	e, err := NewEsperEnv(EsperEnvOptions{Data: d, Index: i, Seed: 11, MaxEpochs: maxEpochs, Blocks: 3, BaseChannels: 2, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// resetObs returns the first observations of n new tiny environments.
func resetObs(t *testing.T, d *EsperData, n int) []TamiyoObs {
	t.Helper()
	var obs []TamiyoObs
	for i := 0; i < n; i++ {
		o, err := newTinyEnv(t, d, i, 4).Reset()
		if err != nil {
			t.Fatal(err)
		}
		obs = append(obs, o)
	}
	return obs
}

func TestTamiyoPolicyActEvaluateConsistency(t *testing.T) {
	d, pol := tinyEsper(t)
	obs := resetObs(t, d, 2)
	act, err := pol.Act(obs, nil, tensor.NewRNG(1), false)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := pol.Evaluate(obs, nil, act.Actions)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := pol.Values(obs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.LogProbs) != leyline.NumActionHeads || len(ev.Entropies) != leyline.NumActionHeads {
		t.Fatalf("evaluation has %d log-prob heads", len(ev.LogProbs))
	}
	for h := range ev.LogProbs {
		lp := testdevice.F64(t, ev.LogProbs[h].Value)
		for b := range obs {
			if math.Abs(lp[b]-act.LogProbs[b][h]) > 1e-4 {
				t.Errorf("env %d head %s: Evaluate log-prob %v, Act %v", b, leyline.HeadNames[h], lp[b], act.LogProbs[b][h])
			}
		}
	}
	v := testdevice.F64(t, ev.Value.Value)
	for b := range obs {
		if math.Abs(v[b]-act.Values[b]) > 1e-4 || math.Abs(vals[b]-act.Values[b]) > 1e-4 {
			t.Errorf("env %d: values Act %v, Evaluate %v, Values %v", b, act.Values[b], v[b], vals[b])
		}
		rel := TamiyoRelevance(act.Actions[b])
		if !rel[leyline.HeadOp] || len(rel) != leyline.NumActionHeads {
			t.Errorf("relevance %v", rel)
		}
	}
	// Only WAIT valid on the op head: a forced step for PPO.
	m := TamiyoMasks(obs[0].Masks)
	wait := make([]bool, len(m[leyline.HeadOp]))
	wait[leyline.OpWait] = true
	m[leyline.HeadOp] = wait
	if m.numValid(leyline.HeadOp, len(wait)) != 1 {
		t.Error("forced mask has more than one valid op")
	}
}

func TestEsperEnvStepShapesAndTruncation(t *testing.T) {
	d, pol := tinyEsper(t)
	env := newTinyEnv(t, d, 0, 3)
	obs, err := env.Reset()
	if err != nil {
		t.Fatal(err)
	}
	if dev, err := nn.Device(env.Model()); err != nil || dev != testdevice.Device(t) {
		t.Fatalf("host on %v (%v), want %v", dev, err, testdevice.Device(t))
	}
	spec := env.Spec()
	if len(spec.HeadSizes) != leyline.NumActionHeads || spec.HeadSizes[leyline.HeadSlot] != 3 {
		t.Fatalf("spec %v", spec.HeadSizes)
	}
	rng := tensor.NewRNG(2)
	for step := 0; step < 3; step++ {
		masks := env.ActionMasks()
		if err := masks.check(spec); err != nil {
			t.Fatalf("step %d masks: %v", step, err)
		}
		if obs.Graph == nil || obs.Graph.NumGraphs != 1 || obs.Graph.NumSlots(0) != 3 {
			t.Fatalf("step %d: bad graph", step)
		}
		act, err := pol.Act([]TamiyoObs{obs}, nil, rng, false)
		if err != nil {
			t.Fatal(err)
		}
		// Germinate where the masks allow it, to exercise the seeds path.
		a := act.Actions[0]
		if step == 0 && obs.Masks.OpValid(leyline.OpGerminate) {
			a[leyline.HeadOp] = int(leyline.OpGerminate)
			for i, ok := range obs.Masks.SlotByOp[leyline.OpGerminate] {
				if ok {
					a[leyline.HeadSlot] = i
					break
				}
			}
		}
		r, err := env.Step(a)
		if err != nil {
			t.Fatal(err)
		}
		if math.IsNaN(r.Reward) || math.IsInf(r.Reward, 0) {
			t.Fatalf("step %d reward %v", step, r.Reward)
		}
		info := env.LastStep()
		if sum := info.Reward.Terms.Sum(); math.Abs(sum-r.Reward) > 1e-9 && !r.Rollback {
			t.Errorf("step %d: terms sum %v, reward %v", step, sum, r.Reward)
		}
		if step == 0 && a[leyline.HeadOp] == int(leyline.OpGerminate) && info.Applied.String() != "applied" {
			t.Errorf("germination %v: %v (veto %q)", info.Decision, info.Applied, info.VetoReason)
		}
		// Without Terminal the run's last epoch is truncated, as in G2.
		if want := step == 2; r.Truncated != want || r.Terminated {
			t.Fatalf("step %d terminated %v truncated %v", step, r.Terminated, r.Truncated)
		}
		if r.Obs.Graph == nil {
			t.Fatalf("step %d: no observation", step)
		}
		obs = r.Obs
	}
	if _, err := env.Step(make([]int, leyline.NumActionHeads)); err == nil {
		t.Error("Step after the episode's end succeeded")
	}
}

func TestEsperEnvGovernorRollback(t *testing.T) {
	d, _ := tinyEsper(t)
	env := newTinyEnv(t, d, 0, 6)
	if _, err := env.Reset(); err != nil {
		t.Fatal(err)
	}
	// Poison the host while epoch 0 waits for its decision: epoch 1's
	// validation loss is NaN, the governor panics and restores epoch 0's
	// snapshot, and the step reports the rollback with the penalty.
	p := env.Model().HostParameters()[0]
	kernels.For(p.Value.Device()).Fill(p.Value, math.NaN())
	r, err := env.Step(make([]int, leyline.NumActionHeads)) // WAIT
	if err != nil {
		t.Fatal(err)
	}
	if !r.Rollback || r.Reward != env.Trainer().Governor().PunishmentReward() {
		t.Fatalf("rollback %v, reward %v", r.Rollback, r.Reward)
	}
	if env.Epoch() != 2 || env.LastStep().Rollbacks != 1 {
		t.Fatalf("parked at epoch %d after %d rollbacks, want 2 and 1", env.Epoch(), env.LastStep().Rollbacks)
	}
	if v := testdevice.F64(t, p.Value)[0]; math.IsNaN(v) {
		t.Fatal("the rollback did not restore the host")
	}
	if r.Obs.Graph == nil || r.Truncated || r.Terminated {
		t.Fatalf("the episode should go on: %+v", r)
	}
}

// scriptedEnv is a one-feature environment whose step k returns reward
// k+1 and, at rollbackAt, a governor rollback with penalty −10.
type scriptedEnv struct {
	t, rollbackAt, length int
}

func (e *scriptedEnv) Spec() EnvSpec             { return EnvSpec{HeadSizes: []int{2}} }
func (e *scriptedEnv) ActionMasks() Masks        { return nil }
func (e *scriptedEnv) Reset() ([]float32, error) { e.t = 0; return []float32{0}, nil }
func (e *scriptedEnv) Step([]int) (StepResult[[]float32], error) {
	e.t++
	r := StepResult[[]float32]{Obs: []float32{float32(e.t)}, Reward: float64(e.t), Truncated: e.t == e.length}
	if e.t == e.rollbackAt {
		r.Rollback, r.Reward = true, -10
	}
	return r, nil
}

func TestCollectRollbackForfeitsPrefixAndBootstrapsTruncation(t *testing.T) {
	vec, err := NewVecEnv(1, func(int) (Env[[]float32], error) { return &scriptedEnv{rollbackAt: 3, length: 5}, nil })
	if err != nil {
		t.Fatal(err)
	}
	spec := vec.Spec()
	pol, err := NewMLPPolicy(MLPPolicyOptions{ObsDim: 1, Spec: spec, Seed: 1, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	ppo, err := NewPPO[[]float32](pol, spec, PPOOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(ppo, vec, TrainerOptions[[]float32]{Steps: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Collect(); err != nil {
		t.Fatal(err)
	}
	b := tr.Buffer()
	want := []float64{0, 0, -10, 4, 5} // prefix forfeited, penalty, then the episode goes on
	for i, w := range want {
		if got := b.At(0, i).Reward; got != w {
			t.Errorf("step %d reward %v, want %v", i, got, w)
		}
	}
	if !b.At(0, 2).Done || b.At(0, 2).Truncated || b.RollbackCount() != 1 {
		t.Errorf("rollback step: done %v truncated %v rollbacks %d", b.At(0, 2).Done, b.At(0, 2).Truncated, b.RollbackCount())
	}
	last := b.At(0, 4)
	v, err := pol.Values([][]float32{{5}})
	if err != nil {
		t.Fatal(err)
	}
	if !last.Truncated || last.Done || last.Bootstrap != v[0] {
		t.Errorf("truncation: truncated %v done %v bootstrap %v, want V(final) %v", last.Truncated, last.Done, last.Bootstrap, v[0])
	}
}

// TestEsperEnvFusedCounterfactuals: with a BLENDING seed at alpha > 0,
// the epoch's counterfactuals come from the fused validation alone — no
// ablation pass of the trainer's, the all-on configuration taken from the
// validation pass (and equal to evaluating it), the seed's recorded
// contribution the validation accuracy less the fused solo-off accuracy.
func TestEsperEnvFusedCounterfactuals(t *testing.T) {
	d, _ := tinyEsper(t)
	env := newTinyEnv(t, d, 0, 6)
	if _, err := env.Reset(); err != nil {
		t.Fatal(err)
	}
	if w := env.PendingWork(); w != (EsperEpochWork{}) {
		t.Fatalf("work without seeds: %+v", w)
	}
	// While epoch 0 waits for its decision: a seed driven to BLENDING.
	m := env.Model()
	id := env.slotIDs[0]
	if err := m.GerminateSeed(id, kasmina.GerminateOptions{Blueprint: "conv_light"}); err != nil {
		t.Fatal(err)
	}
	s, err := m.Slot(id)
	if err != nil {
		t.Fatal(err)
	}
	st := s.State()
	for s.Stage() != leyline.StageBlending {
		if s.Stage() == leyline.StageTraining {
			st.Metrics.EpochsInCurrentStage = kasmina.MinBlendingEpochs
			st.Telemetry.HealthMeasured, st.Telemetry.GradientHealth = true, 1
			ratio := 1.0
			st.Metrics.SeedGradientNormRatio = &ratio
			st.Metrics.CurrentValAccuracy = st.Metrics.AccuracyAtStageStart + 1
		}
		if res, err := s.AdvanceStage(0); err != nil || !res.Passed {
			t.Fatalf("advance from %v: %+v, %v", s.Stage(), res, err)
		}
	}
	// WAIT: the epoch ends (alpha ramps up), epoch 1 runs to its decision.
	// On a device it reads the host back twice: tolaria's training and
	// validation sums (read together), and the fused validation's one
	// read of every configuration's correct counts.
	dev := testdevice.Device(t)
	s0 := tensor.HostSyncs(dev)
	if _, err := env.Step(make([]int, leyline.NumActionHeads)); err != nil {
		t.Fatal(err)
	}
	if syncs := tensor.HostSyncs(dev) - s0; !dev.IsCPU() && syncs != 2 {
		t.Errorf("the epoch read %v back %d times, want 2", dev, syncs)
	}
	if s.Stage() != leyline.StageBlending || s.Alpha() <= 0 {
		t.Fatalf("seed %v at alpha %v", s.Stage(), s.Alpha())
	}
	if w := env.PendingWork(); w != (EsperEpochWork{FusedConfigs: 1}) {
		t.Fatalf("work %+v, want the solo-off configuration alone", w)
	}
	cf := env.PendingCounterfactual()
	if cf == nil || len(cf.SeedIDs) != 1 {
		t.Fatalf("counterfactual %+v", cf)
	}
	valAcc := env.state.Signals.Metrics.ValAccuracy
	on, off := cf.Matrix.Values[FullCoalition(1)], cf.Matrix.Values[0]
	if on != valAcc {
		t.Errorf("all-on accuracy %v, validation %v", on, valAcc)
	}
	// Every configuration evaluated by the fused pass, the all-on one
	// included: the same figures.
	plan, err := env.cf.Plan(cf.SeedIDs)
	if err != nil {
		t.Fatal(err)
	}
	all, k, err := newFusedValidator().evaluate(m, d.Val, env.Epoch(), []*kasmina.Slot{s}, plan.Masks(), -1, 0)
	if err != nil || k != 2 {
		t.Fatalf("full fused pass: %d configurations, %v", k, err)
	}
	onIdx, _ := plan.Index(FullCoalition(1))
	offIdx, _ := plan.Index(0)
	if all[onIdx] != valAcc || all[offIdx] != off {
		t.Errorf("full fused pass on %v off %v, want %v and %v", all[onIdx], all[offIdx], valAcc, off)
	}
	if c := st.Metrics.CounterfactualContribution; c == nil || *c != valAcc-off {
		t.Errorf("recorded contribution %v, want %v", c, valAcc-off)
	}
}

// TestEsperEnvFirstEpisode: an environment built with FirstEpisode n
// starts the episode another reaches after n resets: the same host, the
// same first epoch.
func TestEsperEnvFirstEpisode(t *testing.T) {
	d, _ := tinyEsper(t)
	a := newTinyEnv(t, d, 1, 3)
	if a.Episode() != 0 {
		t.Fatalf("episode %d before Reset", a.Episode())
	}
	for i := 0; i < 2; i++ {
		if _, err := a.Reset(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := NewEsperEnv(EsperEnvOptions{Data: d, Index: 1, Seed: 11, MaxEpochs: 3, Blocks: 3, BaseChannels: 2, FirstEpisode: 2, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if _, err := b.Reset(); err != nil {
		t.Fatal(err)
	}
	if a.Episode() != 2 || b.Episode() != 2 {
		t.Fatalf("episodes %d and %d, want 2", a.Episode(), b.Episode())
	}
	pa, pb := a.Model().HostParameters(), b.Model().HostParameters()
	for i := range pa {
		va, vb := testdevice.F64(t, pa[i].Value), testdevice.F64(t, pb[i].Value)
		for j := range va {
			if math.Float64bits(va[j]) != math.Float64bits(vb[j]) {
				t.Fatalf("host parameter %d differs at %d: %v vs %v", i, j, va[j], vb[j])
			}
		}
	}
	ma, mb := a.state.Signals.Metrics, b.state.Signals.Metrics
	if ma.ValLoss != mb.ValLoss || ma.ValAccuracy != mb.ValAccuracy {
		t.Fatalf("first epochs differ: %+v vs %+v", ma, mb)
	}
	if _, err := NewEsperEnv(EsperEnvOptions{Data: d, FirstEpisode: -1}); err == nil {
		t.Fatal("negative FirstEpisode accepted")
	}
}

// TestEsperEnvDivergedHostEndsTheEpisode: a host that diverges past the
// governor's rollbacks (tolaria.ErrDiverged, at a host rate of 1e6) ends
// its episode as a terminal state with the rollback penalty — it used to
// be an error that stopped the whole PPO run — and the next Reset starts
// a fresh episode.
func TestEsperEnvDivergedHostEndsTheEpisode(t *testing.T) {
	d, _ := tinyEsper(t)
	env, err := NewEsperEnv(EsperEnvOptions{Data: d, Index: 0, Seed: 11, MaxEpochs: 8, Blocks: 3, BaseChannels: 2, HostLR: 1e6, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	if _, err := env.Reset(); err != nil {
		t.Fatal(err)
	}
	var last StepResult[TamiyoObs]
	for i := 0; i < 8; i++ {
		r, err := env.Step(make([]int, leyline.NumActionHeads)) // WAIT
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		last = r
		if r.Terminated || r.Truncated {
			break
		}
	}
	if !last.Terminated || last.Truncated || !last.Rollback || last.Reward != env.Trainer().Governor().PunishmentReward() {
		t.Fatalf("last step: terminated %v truncated %v rollback %v reward %v", last.Terminated, last.Truncated, last.Rollback, last.Reward)
	}
	if last.Obs.Graph == nil {
		t.Fatal("a terminal step still carries its final observation")
	}
	if _, err := env.Reset(); err != nil {
		t.Fatalf("the next episode: %v", err)
	}
}

// scriptedAction returns the action that takes op in the first slot
// where the masks allow it (WAIT when none does), germinating conv_light.
func scriptedAction(m leyline.ActionMasks, op leyline.LifecycleOp) []int {
	a := make([]int, leyline.NumActionHeads)
	a[leyline.HeadBlueprint] = int(leyline.BlueprintConvLight)
	a[leyline.HeadStyle] = int(leyline.StyleSigmoidAdd)
	a[leyline.HeadAlphaTarget] = int(leyline.AlphaTargetFull)
	a[leyline.HeadTempo] = int(leyline.TempoFast)
	for i, ok := range m.SlotByOp[op] {
		if ok {
			a[leyline.HeadSlot], a[leyline.HeadOp] = i, int(op)
			return a
		}
	}
	return a
}

// TestEsperEnvEpisodeData: with NewData every episode trains on the
// stream made for its number (and the previous one is closed), and the
// episode summaries count what the episode did.
func TestEsperEnvEpisodeData(t *testing.T) {
	var asked []int
	var made []*EsperData
	newData := func(episode int) (*EsperData, error) {
		asked = append(asked, episode)
		d, err := NewSyntheticData(SyntheticDataOptions{Train: 64, Val: 32, Batch: 32, Seed: uint64(episode)})
		made = append(made, d)
		return d, err
	}
	rw := mustRewarder(t, RewardOptions{Mode: RewardAccuracy})
	e, err := NewEsperEnv(EsperEnvOptions{NewData: newData, Seed: 3, MaxEpochs: 2, Terminal: true, Blocks: 2, BaseChannels: 2, KernelSize: 1,
		HostLR: 0.05, Cosine: true, Rewarder: rw, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := NewEsperEnv(EsperEnvOptions{NewData: newData, Data: made[0]}); err == nil {
		t.Error("Data and NewData together accepted")
	}
	for ep := 1; ep <= 2; ep++ {
		obs, err := e.Reset()
		if err != nil {
			t.Fatal(err)
		}
		if e.data != made[len(made)-1] || asked[len(asked)-1] != ep {
			t.Fatalf("episode %d trains on the stream of episode %d", ep, asked[len(asked)-1])
		}
		if prev := made[len(made)-2]; prev.close != nil {
			t.Fatalf("episode %d: the previous stream is still open", ep)
		}
		// GERMINATE, then ADVANCE.
		r, err := e.Step(scriptedAction(obs.Masks, leyline.OpGerminate))
		if err != nil {
			t.Fatal(err)
		}
		info := e.LastStep()
		// ACCURACY pays the germination's potential: 0.3·0.995·1.
		if info.Applied != tolaria.ApplyApplied || !near(info.Reward.Terms.PBRS, 0.2985, 1e-12) {
			t.Fatalf("episode %d germination: %v, terms %+v", ep, info.Applied, info.Reward.Terms)
		}
		r, err = e.Step(scriptedAction(r.Obs.Masks, leyline.OpAdvance))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Terminated {
			t.Fatal("the 2-epoch episode did not end")
		}
		info = e.LastStep()
		seeds := 0
		for _, p := range e.Model().Parameters() {
			seeds += p.Value.Numel()
		}
		for _, p := range e.Model().HostParameters() {
			seeds -= p.Value.Numel()
		}
		// The last epoch: GERMINATED → TRAINING's potential is taken back
		// (0.3·(0 − 1)), the accuracy of both epochs in the window of 5
		// paid (0.1·acc/2), and the seed's parameters charged.
		want := -0.3 + 0.1*info.ValAccuracy/2 - 0.05*float64(seeds)/1000
		if seeds <= 0 || !near(info.Reward.Total, want, 1e-9) {
			t.Fatalf("episode %d last step: reward %v, want %v (%d seed parameters, terms %+v)", ep, info.Reward.Total, want, seeds, info.Reward.Terms)
		}
		eps := e.TakeEpisodes()
		if len(eps) != 1 || len(e.TakeEpisodes()) != 0 {
			t.Fatalf("episode %d: %d summaries", ep, len(eps))
		}
		s := eps[0]
		if s.Episode != ep || s.Steps != 2 || s.Ops[leyline.OpGerminate] != 1 || s.Ops[leyline.OpAdvance] != 1 ||
			s.Applied[leyline.OpGerminate] != 1 || s.Applied[leyline.OpAdvance] != 1 || s.Germinated != 1 || s.AddedParams != seeds ||
			s.FinalAccuracy != e.Trainer().Summary().Final().ValAccuracy {
			t.Errorf("episode %d summary %+v", ep, s)
		}
		if st := NewEsperRoundStats(eps); st.Episodes != 1 || st.OpShare[leyline.OpGerminate] != 0.5 || !math.IsNaN(st.OpReward[leyline.OpPrune]) ||
			!near(st.Terms.Sum(), s.Return, 1e-9) {
			t.Errorf("round stats %+v", st)
		}
	}
}

// TestEsperEnvCosine: Cosine anneals the host's rate over the episode:
// the first epoch (full rate) trains exactly as without it, the second
// (half the rate, of 2) does not.
func TestEsperEnvCosine(t *testing.T) {
	d, _ := tinyEsper(t)
	var loss [2][2]float64
	for i, cosine := range []bool{false, true} {
		e, err := NewEsperEnv(EsperEnvOptions{Data: d, Seed: 11, MaxEpochs: 2, Blocks: 2, BaseChannels: 2, HostLR: 0.05, Cosine: cosine, Device: testdevice.Device(t)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Reset(); err != nil {
			t.Fatal(err)
		}
		for ep := 0; ep < 2; ep++ {
			if _, err := e.Step(make([]int, leyline.NumActionHeads)); err != nil {
				t.Fatal(err)
			}
		}
		for ep, r := range e.Trainer().Summary().Epochs {
			loss[i][ep] = r.TrainLoss
		}
		e.Close()
	}
	if loss[0][0] != loss[1][0] || loss[0][1] == loss[1][1] {
		t.Errorf("train losses constant %v, cosine %v: want the first epochs equal and the second different", loss[0], loss[1])
	}
}

// TestEsperEnvLastActionAsDeployed: an op the host rejects (ADVANCE of a
// seed one epoch into TRAINING: G2 wants 10) is still reported as a
// success in the next observation, as the inference service reports
// every op: the policy is trained on the features it is deployed on.
func TestEsperEnvLastActionAsDeployed(t *testing.T) {
	d, _ := tinyEsper(t)
	env := newTinyEnv(t, d, 0, 4)
	obs, err := env.Reset()
	if err != nil {
		t.Fatal(err)
	}
	for i, op := range []leyline.LifecycleOp{leyline.OpGerminate, leyline.OpAdvance, leyline.OpAdvance} {
		r, err := env.Step(scriptedAction(obs.Masks, op))
		if err != nil {
			t.Fatal(err)
		}
		info := env.LastStep()
		if want := i < 2; (info.Applied == tolaria.ApplyApplied) != want {
			t.Fatalf("step %d (%v): %v, want applied %v", i, op, info.Applied, want)
		}
		g := r.Obs.Graph.Nodes[tamiyo.NodeGlobal].Features
		if g[16] != 1 || g[17+int(op)] != 1 {
			t.Errorf("step %d (%v, %v): last-action features success %v, op one-hot %v", i, op, info.Applied, g[16], g[17:23])
		}
		obs = r.Obs
	}
}

// TestEsperEnvShapedPBRSPaysTransitions: SHAPED's stage PBRS pays the
// step after an ADVANCE the potential jump of the transition,
// γ·φ(TRAINING, e) − φ(GERMINATED, e'), with the stages and epochs seen
// at the two decisions; before the fix the previous stage was the
// current one and no transition was ever paid.
func TestEsperEnvShapedPBRSPaysTransitions(t *testing.T) {
	d, _ := tinyEsper(t)
	env := newTinyEnv(t, d, 0, 5)
	obs, err := env.Reset()
	if err != nil {
		t.Fatal(err)
	}
	var seen []leyline.SeedReport
	for _, op := range []leyline.LifecycleOp{leyline.OpGerminate, leyline.OpAdvance, leyline.OpWait} {
		a := scriptedAction(obs.Masks, op)
		if op == leyline.OpWait {
			a[leyline.HeadSlot] = seenSlot(t, env, seen)
		}
		for _, s := range env.state.Seeds {
			seen = append(seen, s)
		}
		r, err := env.Step(a)
		if err != nil {
			t.Fatal(err)
		}
		obs = r.Obs
	}
	if len(seen) != 2 || seen[0].Stage != leyline.StageGerminated || seen[1].Stage != leyline.StageTraining {
		t.Fatalf("seeds at the decisions %+v, want GERMINATED then TRAINING", seen)
	}
	want := 0.3 * (0.995*seedPotential(leyline.StageTraining, seen[1].EpochsInStage) - seedPotential(leyline.StageGerminated, seen[0].EpochsInStage))
	if got := env.LastStep().Reward.Terms.PBRS; !near(got, want, 1e-12) || got < 0.25 {
		t.Errorf("PBRS after the ADVANCE %v, want %v", got, want)
	}
}

// seenSlot is the slot index of the first seed seen.
func seenSlot(t *testing.T, env *EsperEnv, seen []leyline.SeedReport) int {
	t.Helper()
	for i, id := range env.slotIDs {
		if len(seen) > 0 && id == seen[0].SlotID {
			return i
		}
	}
	t.Fatal("no seed seen")
	return 0
}

// TestTamiyoPolicyCaptureActsAlike: Act through the captured forward
// (TamiyoPolicyOptions.Capture) samples the same actions with bitwise the
// same log-probabilities and values as the eager Act, call after call
// (warm-up, capture, replays), on the test device; a policy with dropout
// is refused.
func TestTamiyoPolicyCaptureActsAlike(t *testing.T) {
	d, eager := tinyEsper(t)
	captured, err := NewTamiyoPolicy(eager.Network(), TamiyoPolicyOptions{Capture: true})
	if err != nil {
		t.Fatal(err)
	}
	obs := resetObs(t, d, 2)
	for call := 0; call < 4; call++ {
		want, err := eager.Act(obs, nil, tensor.NewRNG(uint64(call)), false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := captured.Act(obs, nil, tensor.NewRNG(uint64(call)), false)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("call %d: captured Act %+v, eager %+v", call, got, want)
		}
	}
	if st := captured.ActStats(); st.Captures != 1 || st.Replays < 2 {
		t.Errorf("captured Act stats %+v, want one capture and replays", st)
	}
	withDropout, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Hidden: 16, GATHidden: 8, GATHeads: 2, HeadHidden: 16, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewTamiyoPolicy(withDropout, TamiyoPolicyOptions{Capture: true}); err == nil || !strings.Contains(err.Error(), "dropout") {
		t.Errorf("a policy with dropout and Capture: err = %v", err)
	}
}

// stepOnly hides an environment's SplitStepper halves: VecEnv steps it
// with Step, reading its epoch on its own.
type stepOnly struct{ Env[TamiyoObs] }

// TestVecEnvReadsEsperEpochsTogether: three Esper environments stepped
// by a VecEnv through their split steps (one read of every environment's
// epoch per lock-step step) give the same rewards, flags and
// observations, bit for bit, as the same environments stepped one whole
// Step at a time, across an episode's end and reset, and after
// ResetUnfinished; on a device the batched loop reads once per lock-step
// step (a step that ends the episodes reads the next episodes' first
// epochs together), once for NewVecEnv's resets and once for
// ResetUnfinished's, where the other reads once per environment.
func TestVecEnvReadsEsperEpochsTogether(t *testing.T) {
	d, pol := tinyEsper(t)
	dev := testdevice.Device(t)
	const envs, steps = 3, 5
	type run struct {
		rewards []float64
		flags   []bool
		obs     [][]TamiyoObs
		syncs   uint64
		reads   []uint64
		// resetReads are the batched reads of NewVecEnv and of
		// ResetUnfinished; resetObs the observations after the latter.
		resetReads []uint64
		resetObs   []TamiyoObs
	}
	do := func(split bool) run {
		vec, err := NewVecEnv(envs, func(i int) (Env[TamiyoObs], error) {
			e := newTinyEnv(t, d, i, 3) // the episode ends at step 3
			if split {
				return e, nil
			}
			return stepOnly{e}, nil
		})
		require.NoError(t, err)
		rng := tensor.NewRNG(9)
		var r run
		r.resetReads = append(r.resetReads, vec.ReadSyncs())
		for k := 0; k < steps; k++ {
			act, err := pol.Act(vec.Obs(), nil, rng, false)
			require.NoError(t, err)
			s0, r0 := tensor.HostSyncs(dev), vec.ReadSyncs()
			vs, err := vec.Step(act.Actions)
			require.NoError(t, err)
			r.syncs += tensor.HostSyncs(dev) - s0
			r.reads = append(r.reads, vec.ReadSyncs()-r0)
			r.rewards = append(r.rewards, vs.Rewards...)
			r.flags = append(r.flags, vs.Terminated...)
			r.flags = append(r.flags, vs.Truncated...)
			r.flags = append(r.flags, vs.Rollback...)
			r.obs = append(r.obs, vs.Obs)
		}
		r0 := vec.ReadSyncs()
		idx, err := vec.ResetUnfinished()
		require.NoError(t, err)
		require.Equal(t, []int{0, 1, 2}, idx, "every environment is inside its second episode")
		r.resetReads = append(r.resetReads, vec.ReadSyncs()-r0)
		r.resetObs = vec.Obs()
		return r
	}
	whole, batched := do(false), do(true)
	for i := range whole.rewards {
		require.Equal(t, math.Float64bits(whole.rewards[i]), math.Float64bits(batched.rewards[i]), "reward %d", i)
	}
	require.Equal(t, whole.flags, batched.flags)
	require.Contains(t, batched.flags, true, "an episode ended")
	require.True(t, reflect.DeepEqual(whole.obs, batched.obs), "observations")
	require.True(t, reflect.DeepEqual(whole.resetObs, batched.resetObs), "observations after ResetUnfinished")
	require.Equal(t, make([]uint64, steps), whole.reads, "Step reads nothing through VecEnv")
	require.Equal(t, []uint64{0, 0}, whole.resetReads, "Reset reads nothing through VecEnv")
	if dev.IsCPU() {
		require.Zero(t, batched.syncs)
		return
	}
	require.Equal(t, []uint64{1, 1, 1, 1, 1}, batched.reads, "one batched read per lock-step step, the one that ends the episodes too")
	require.Equal(t, whole.syncs-(envs-1)*steps, batched.syncs, "the batched loop saves envs-1 reads per step")
	require.Equal(t, []uint64{1, 1}, batched.resetReads, "NewVecEnv and ResetUnfinished read the first epochs together")
}

// badFromEpoch yields its inner batches with their labels cut to one row
// from epoch from on: the trainer refuses such a batch before its epoch's
// read.
type badFromEpoch struct {
	inner tolaria.Batches
	from  int
}

func (b badFromEpoch) Batches(e int) iter.Seq2[*tensor.Tensor, *tensor.Tensor] {
	return func(yield func(*tensor.Tensor, *tensor.Tensor) bool) {
		for x, y := range b.inner.Batches(e) {
			if e >= b.from {
				y = y.Narrow(0, 0, 1)
			}
			if !yield(x, y) {
				return
			}
		}
	}
}

// TestVecEnvStepFailures: when an environment's step fails inside
// VecEnv.Step, the environments started before it still get their reads
// and finish their steps (each then steps on as usual), the one that
// failed keeps its decision pending, and an epoch that fails before its
// read leaves nothing waiting: every environment closes, also one left
// after StepStart without StepFinish. A reset that fails inside a
// batched reset leaves the others reset; ResetFinish wants ResetStart
// first, and an environment left after ResetStart closes.
func TestVecEnvStepFailures(t *testing.T) {
	d, _ := tinyEsper(t)
	wait := func() []int {
		a := make([]int, leyline.NumActionHeads)
		a[leyline.HeadOp] = int(leyline.OpWait)
		return a
	}
	t.Run("bad action", func(t *testing.T) {
		var envs []*EsperEnv
		vec, err := NewVecEnv(2, func(i int) (Env[TamiyoObs], error) {
			e := newTinyEnv(t, d, i, 8)
			envs = append(envs, e)
			return e, nil
		})
		require.NoError(t, err)
		bad := wait()
		bad[leyline.HeadSlot] = 99
		_, err = vec.Step([][]int{wait(), bad})
		require.ErrorContains(t, err, "env 1")
		require.Equal(t, 1, envs[0].Epoch(), "env 0 finished its step")
		require.Equal(t, 0, envs[1].Epoch(), "env 1 did not step")
		for i, e := range envs {
			_, err := e.Step(wait())
			require.NoError(t, err, "env %d steps on", i)
		}
	})
	t.Run("epoch fails before its read", func(t *testing.T) {
		bd := &EsperData{Train: badFromEpoch{d.Train, 1}, Val: d.Val, InChannels: d.InChannels, Classes: d.Classes}
		vec, envs, err := badDataEnvs(t, 2, 0, d, bd)
		require.NoError(t, err)
		_, err = vec.Step([][]int{wait(), wait()})
		require.ErrorContains(t, err, "env 0")
		// Without VecEnv: StepStart alone, then Close.
		lone, err := NewEsperEnv(EsperEnvOptions{Data: bd, Index: 2, Seed: 11, MaxEpochs: 8, Blocks: 3, BaseChannels: 2, Device: testdevice.Device(t)})
		require.NoError(t, err)
		envs = append(envs, lone)
		_, err = lone.Reset()
		require.NoError(t, err)
		reads, err := lone.StepStart(wait())
		require.NoError(t, err)
		require.Nil(t, reads, "the epoch failed before its read")
		closeWithin(t, envs, "after an epoch failed before its read")
	})
	t.Run("a reset fails", func(t *testing.T) {
		bd := &EsperData{Train: badFromEpoch{d.Train, 0}, Val: d.Val, InChannels: d.InChannels, Classes: d.Classes}
		_, envs, err := badDataEnvs(t, 3, 1, d, bd)
		require.ErrorContains(t, err, "env 1 reset")
		for _, i := range []int{0, 2} {
			_, err := envs[i].Step(wait())
			require.NoError(t, err, "env %d finished its reset and steps on", i)
		}
		_, err = envs[1].Step(wait())
		require.ErrorContains(t, err, "no decision pending")
		// The halves out of order, and ResetStart left unfinished.
		lone, err := NewEsperEnv(EsperEnvOptions{Data: d, Index: 3, Seed: 11, MaxEpochs: 8, Blocks: 3, BaseChannels: 2, Device: testdevice.Device(t)})
		require.NoError(t, err)
		envs = append(envs, lone)
		_, err = lone.ResetFinish(nil, nil)
		require.ErrorContains(t, err, "without ResetStart")
		reads, err := lone.ResetStart()
		require.NoError(t, err)
		require.NotNil(t, reads, "the first epoch waits for its read")
		_, err = lone.StepStart(wait())
		require.ErrorContains(t, err, "no decision pending")
		closeWithin(t, envs, "after ResetStart")
	})
}

// badDataEnvs builds n small Esper environments in a VecEnv, environment
// bad on the data bd and the others on d, and returns the VecEnv's
// error with every environment made.
func badDataEnvs(t *testing.T, n, bad int, d, bd *EsperData) (*VecEnv[TamiyoObs], []*EsperEnv, error) {
	var envs []*EsperEnv
	vec, err := NewVecEnv(n, func(i int) (Env[TamiyoObs], error) {
		data := d
		if i == bad {
			data = bd
		}
		e, err := NewEsperEnv(EsperEnvOptions{Data: data, Index: i, Seed: 11, MaxEpochs: 8, Blocks: 3, BaseChannels: 2, Device: testdevice.Device(t)})
		envs = append(envs, e)
		return e, err
	})
	return vec, envs, err
}

// closeWithin closes every environment and fails the test if that takes
// 20 s (a Close waiting forever for an epoch), naming when.
func closeWithin(t *testing.T, envs []*EsperEnv, when string) {
	t.Helper()
	closed := make(chan struct{})
	go func() {
		for _, e := range envs {
			e.Close()
		}
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close hangs " + when)
	}
}

// resetCounter counts the whole Resets VecEnv makes of an EsperEnv (its
// split halves are promoted and not counted).
type resetCounter struct {
	*EsperEnv
	whole *int
}

func (r resetCounter) Reset() (TamiyoObs, error) {
	*r.whole++
	return r.EsperEnv.Reset()
}

// TestVecEnvResetsDivergedEpisodesTogether: episodes that end after the
// step's batched read (a host that diverged past the governor's
// rollbacks ends its episode in StepFinish) start their next episodes
// through the split reset, all in one more read, never through a whole
// Reset each; the step that ends them reads at most twice.
func TestVecEnvResetsDivergedEpisodesTogether(t *testing.T) {
	d, _ := tinyEsper(t)
	whole := 0
	var envs []*EsperEnv
	vec, err := NewVecEnv(3, func(i int) (Env[TamiyoObs], error) {
		e, err := NewEsperEnv(EsperEnvOptions{Data: d, Index: i, Seed: 11, MaxEpochs: 8, Blocks: 3, BaseChannels: 2, HostLR: 1e6, Device: testdevice.Device(t)})
		envs = append(envs, e)
		return resetCounter{e, &whole}, err
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, e := range envs {
			e.Close()
		}
	})
	wait := make([][]int, 3)
	for i := range wait {
		wait[i] = make([]int, leyline.NumActionHeads)
	}
	diverged := 0
	for k := 0; k < 8; k++ {
		r0 := vec.ReadSyncs()
		s, err := vec.Step(wait)
		require.NoError(t, err, "step %d", k)
		for _, ep := range s.Episodes {
			require.False(t, ep.Truncated, "a diverged host ends its episode as terminal")
			diverged++
		}
		require.LessOrEqual(t, vec.ReadSyncs()-r0, uint64(2), "step %d: the step's read and one for the late resets", k)
		for i, o := range s.Obs {
			require.NotNil(t, o.Graph, "step %d: env %d has an observation", k, i)
		}
	}
	require.Positive(t, diverged, "the hosts diverged")
	require.Zero(t, whole, "no environment was reset on its own")
}

// splitFake is a SplitStepper and SplitResetter whose step reads nothing
// and whose episodes last two steps; its observation is its episode
// number; with failAt > 0 its StepStart fails once, at that call.
type splitFake struct {
	episode, steps, calls, failAt int
}

func (f *splitFake) Spec() EnvSpec      { return EnvSpec{HeadSizes: []int{2}} }
func (f *splitFake) ActionMasks() Masks { return nil }
func (f *splitFake) Reset() (int, error) {
	if _, err := f.ResetStart(); err != nil {
		return 0, err
	}
	return f.ResetFinish(nil, nil)
}
func (f *splitFake) ResetStart() ([]*tensor.Tensor, error)            { f.episode++; f.steps = 0; return nil, nil }
func (f *splitFake) ResetFinish([]*tensor.Tensor, error) (int, error) { return f.episode, nil }
func (f *splitFake) Step(a []int) (StepResult[int], error) {
	if _, err := f.StepStart(a); err != nil {
		return StepResult[int]{}, err
	}
	return f.StepFinish(nil, nil)
}
func (f *splitFake) StepStart([]int) ([]*tensor.Tensor, error) {
	f.calls++
	if f.calls == f.failAt {
		return nil, errors.New("fake failure")
	}
	f.steps++
	return nil, nil
}
func (f *splitFake) StepFinish([]*tensor.Tensor, error) (StepResult[int], error) {
	return StepResult[int]{Obs: f.episode, Reward: 1, Truncated: f.steps == 2}, nil
}

// TestVecEnvFailedStepKeepsWhatCompleted: when an environment's step
// fails after another's episode ended and its next one started within
// the same Step, the error comes with the VecStep of what completed (the
// ended episode reported, the new episode's observation) and VecEnv's
// state holds it: the next Step goes on from the new episode.
func TestVecEnvFailedStepKeepsWhatCompleted(t *testing.T) {
	a, b := &splitFake{}, &splitFake{failAt: 2}
	vec, err := NewVecEnv(2, func(i int) (Env[int], error) { return []Env[int]{a, b}[i], nil })
	require.NoError(t, err)
	act := [][]int{{0}, {0}}
	_, err = vec.Step(act)
	require.NoError(t, err)
	s, err := vec.Step(act) // a's episode ends and a restarts; then b fails
	require.ErrorContains(t, err, "env 1: fake failure")
	require.NotNil(t, s)
	require.Equal(t, []Episode{{Env: 0, Return: 2, Length: 2, Truncated: true}}, s.Episodes)
	require.Equal(t, []int{2, 1}, s.Obs, "a in its second episode; b as it was")
	require.Equal(t, []int{2, 1}, vec.Obs())
	// b's failed step did not count: this one is its episode's second.
	s, err = vec.Step(act)
	require.NoError(t, err)
	require.Equal(t, []Episode{{Env: 1, Return: 2, Length: 2, Truncated: true}}, s.Episodes)
	require.Equal(t, []int{2, 2}, s.Obs)
}

// TestEsperEnvResetClosesTheLastTrainer: with capture on, a reset frees
// the ended episode's trainer's captured graphs (tolaria.Trainer.Close),
// and so does Close for the running one's.
func TestEsperEnvResetClosesTheLastTrainer(t *testing.T) {
	d, _ := tinyEsper(t)
	e, err := NewEsperEnv(EsperEnvOptions{Data: d, Seed: 11, MaxEpochs: 4, Blocks: 3, BaseChannels: 2, Capture: true, Device: testdevice.Device(t)})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	_, err = e.Reset()
	require.NoError(t, err)
	first := e.Trainer()
	require.Positive(t, first.CaptureStats().CachedGraphs, "the first epoch captured its step")
	_, err = e.Reset()
	require.NoError(t, err)
	require.NotSame(t, first, e.Trainer())
	require.Zero(t, first.CaptureStats().CachedGraphs, "the ended episode's graphs were left")
	second := e.Trainer()
	require.Positive(t, second.CaptureStats().CachedGraphs)
	e.Close()
	require.Zero(t, second.CaptureStats().CachedGraphs, "Close left the running episode's graphs")
}
