package simic

import (
	"errors"
	"math"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/tensor"
)

func param(t *testing.T, v ...float64) *autograd.Var {
	return autograd.Param(testdevice.To(t, tensor.FromFloat64s(tensor.F64, v, len(v))))
}

// oneHeadEval builds an Evaluation of one head with log-probs logp and
// entropies ent, value zeros, on the test device.
func oneHeadEval(t *testing.T, logp, ent []float64) *Evaluation {
	return &Evaluation{LogProbs: []*autograd.Var{param(t, logp...)}, Entropies: []*autograd.Var{param(t, ent...)},
		Value: param(t, make([]float64, len(logp))...)}
}

func onesRel(b, h int) [][]float64 {
	r := make([][]float64, b)
	for i := range r {
		r[i] = make([]float64, h)
		for j := range r[i] {
			r[i][j] = 1
		}
	}
	return r
}

// testInputs are a minibatch's constants on the host: oldLogp[b][h],
// and hostConsts' fields.
type testInputs struct {
	oldLogp, rel            [][]float64
	adv, returns, oldValues []float64
	forced                  []bool
}

// device builds the loss inputs on the test device the way Update does
// (hostConsts.toDevice, then gather), in dtype F64.
func (ti testInputs) device(t *testing.T) lossInputs {
	t.Helper()
	hc := hostConsts{rel: ti.rel, forced: ti.forced, adv: ti.adv, returns: ti.returns, oldValues: ti.oldValues}
	dev := testdevice.Device(t)
	uc, err := hc.toDevice(dev, tensor.F64, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, nh := len(ti.adv), len(ti.rel[0])
	ref := make([]float64, nh*n)
	rows := make([]int64, n)
	hostRows := make([]int, n)
	for b := 0; b < n; b++ {
		rows[b], hostRows[b] = int64(b), b
		for h := 0; h < nh; h++ {
			ref[h*n+b] = ti.oldLogp[b][h]
		}
	}
	if uc.ref, err = constOn(dev, tensor.F64, ref, nh, n); err != nil {
		t.Fatal(err)
	}
	return uc.gather(testdevice.To(t, tensor.FromSlice(rows, n)), hostRows, &hc)
}

// hostParts are lossParts read back (0 for a term that does not exist).
type hostParts struct {
	policy, value, entropy, floor, kl, ratioMaxDev, ratioMax, ratioMin float64
	headEntropy, clipFrac                                              []float64
	notLearnable                                                       []bool
}

func readParts(t *testing.T, p lossParts) hostParts {
	t.Helper()
	get := func(v *autograd.Var) float64 {
		if v == nil {
			return 0
		}
		return testdevice.Item(t, v.Value)
	}
	h := hostParts{policy: get(p.policy), value: get(p.value), entropy: get(p.entropy), floor: get(p.floor), kl: get(p.kl),
		ratioMaxDev: get(p.ratioMaxDev), ratioMax: get(p.ratioMax), ratioMin: get(p.ratioMin), notLearnable: p.notLearnable}
	h.clipFrac = testdevice.F64(t, p.clipFrac.Value)
	h.headEntropy = make([]float64, len(h.clipFrac))
	if p.headEntropy != nil {
		h.headEntropy = testdevice.F64(t, p.headEntropy.Value)
	}
	return h
}

func TestClippedSurrogate(t *testing.T) {
	// Ratios e^{0.5}≈1.65 (clipped for A>0), e^{-0.5}≈0.61 (clipped for
	// A<0), and 1.1 (inside), with ε = 0.2.
	logNew := []float64{0.5, -0.5, math.Log(1.1)}
	ev := oneHeadEval(t, logNew, []float64{0, 0, 0})
	in := testInputs{oldLogp: [][]float64{{0}, {0}, {0}}, adv: []float64{1, -1, 2}, rel: onesRel(3, 1),
		forced: make([]bool, 3), returns: make([]float64, 3), oldValues: make([]float64, 3)}
	loss, p := ppoLoss(ev, in.device(t), lossParams{clip: 0.2, valueCoef: 0.5})
	parts := readParts(t, p)
	// −mean(min(rA, clip(r)A)): 1.2·1, 0.8·(−1)... min(0.61·−1, 0.8·−1) = −0.8; 1.1·2.
	want := -(1.2 + -0.8 + 2.2) / 3
	if !near(parts.policy, want, 1e-12) {
		t.Fatalf("policy loss %v, want %v", parts.policy, want)
	}
	autograd.Backward(loss)
	g := testdevice.F64(t, ev.LogProbs[0].Grad)
	if g[0] != 0 || g[1] != 0 {
		t.Fatalf("clipped samples still get gradient: %v", g)
	}
	if !near(g[2], -1.1*2/3, 1e-12) { // d(−r·A/3)/dlogp = −r·A/3
		t.Fatalf("unclipped gradient %v, want %v", g[2], -1.1*2/3)
	}
	if !near(parts.clipFrac[0], 2.0/3, 1e-12) {
		t.Fatalf("clip fraction %v, want 2/3", parts.clipFrac[0])
	}
}

func TestLogRatioClampAndKL(t *testing.T) {
	ev := oneHeadEval(t, []float64{50, -50, 0}, []float64{0, 0, 0})
	in := testInputs{oldLogp: [][]float64{{0}, {0}, {0}}, adv: []float64{1, 1, 1}, rel: onesRel(3, 1),
		forced: make([]bool, 3), returns: make([]float64, 3), oldValues: make([]float64, 3)}
	_, p := ppoLoss(ev, in.device(t), lossParams{clip: 0.2, valueCoef: 0.5})
	parts := readParts(t, p)
	if !near(parts.ratioMax, math.Exp(20), 1e-3) || !near(parts.ratioMin, math.Exp(-20), 1e-20) {
		t.Fatalf("ratio extremes %v %v, want e^±20", parts.ratioMax, parts.ratioMin)
	}
	wantKL := ((math.Exp(20) - 1 - 20) + (math.Exp(-20) - 1 + 20)) / 3
	if !near(parts.kl, wantKL, 1e-6*wantKL) {
		t.Fatalf("KL %v, want %v", parts.kl, wantKL)
	}
	// KL ≥ 0 for any drift, 0 for identical policies.
	for _, d := range []float64{-3, -0.1, 0, 0.1, 3} {
		ev := oneHeadEval(t, []float64{d, -d}, []float64{0, 0})
		in := testInputs{oldLogp: [][]float64{{0}, {0}}, adv: []float64{1, 1}, rel: onesRel(2, 1),
			forced: make([]bool, 2), returns: make([]float64, 2), oldValues: make([]float64, 2)}
		_, p := ppoLoss(ev, in.device(t), lossParams{clip: 0.2, valueCoef: 0.5})
		if kl := readParts(t, p).kl; kl < 0 || (d == 0 && kl != 0) {
			t.Fatalf("drift %v: KL %v", d, kl)
		}
	}
}

// Per-head causal masks: a head irrelevant on every step gets no policy
// gradient and no entropy term and is reported not learnable; forced
// steps get no actor gradient and value weight 0.2.
func TestHeadMasksForcedStepsAndFloors(t *testing.T) {
	ev := &Evaluation{
		LogProbs:  []*autograd.Var{param(t, 0.1, 0.2), param(t, 0.3, 0.4)},
		Entropies: []*autograd.Var{param(t, 0.1, 0.5), param(t, 0.9, 0.9)},
		Value:     param(t, 1, 1),
	}
	in := testInputs{oldLogp: [][]float64{{0, 0}, {0, 0}}, adv: []float64{1, 1},
		rel: [][]float64{{1, 0}, {1, 0}}, forced: []bool{false, true},
		returns: []float64{0, 0}, oldValues: []float64{0, 0}}
	lp := lossParams{clip: 0.2, valueCoef: 1, entropyCoef: 0.1,
		floors: []float64{0.5, 0.5}, floorCoefs: []float64{0.3, 0.3}, floorScale: 1.5}
	loss, p := ppoLoss(ev, in.device(t), lp)
	parts := readParts(t, p)
	autograd.Backward(loss)
	g0, g1 := testdevice.F64(t, ev.LogProbs[0].Grad), ev.LogProbs[1].Grad
	if g0[0] == 0 || g0[1] != 0 {
		t.Fatalf("head 0 gradients %v: want non-zero on the free step, zero on the forced one", g0)
	}
	if g1 != nil {
		if g := testdevice.F64(t, g1); g[0] != 0 || g[1] != 0 {
			t.Fatalf("irrelevant head got gradient %v", g)
		}
	}
	if eg := ev.Entropies[1].Grad; eg != nil {
		if g := testdevice.F64(t, eg); g[0] != 0 || g[1] != 0 {
			t.Fatal("irrelevant head's entropy got gradient")
		}
	}
	if !parts.notLearnable[1] || parts.notLearnable[0] {
		t.Fatalf("notLearnable %v, want [false true]", parts.notLearnable)
	}
	// Value: 0.5·(1·1² + 0.2·1²)/(1.2) = 0.5.
	if !near(parts.value, 0.5, 1e-12) {
		t.Fatalf("value loss %v, want 0.5", parts.value)
	}
	// Floor: head 0 mean entropy 0.3 < 0.5 → 0.3·1.5·0.2² = 0.018; head 1
	// skipped (no available steps).
	if !near(parts.floor, 0.3*1.5*0.04, 1e-12) {
		t.Fatalf("floor penalty %v, want %v", parts.floor, 0.3*1.5*0.04)
	}
	// Quadratic: above the floor, no penalty.
	ev2 := oneHeadEval(t, []float64{0}, []float64{0.8})
	in2 := testInputs{oldLogp: [][]float64{{0}}, adv: []float64{0}, rel: onesRel(1, 1), forced: []bool{false}, returns: []float64{0}, oldValues: []float64{0}}
	if _, p := ppoLoss(ev2, in2.device(t), lossParams{clip: 0.2, valueCoef: 1, floors: []float64{0.5}, floorCoefs: []float64{1}, floorScale: 1}); readParts(t, p).floor != 0 {
		t.Fatalf("penalty %v above the floor", readParts(t, p).floor)
	}
	// A fully masked batch reports KL 0.
	in3 := in2
	in3.rel = [][]float64{{0}}
	ev3 := oneHeadEval(t, []float64{3}, []float64{0.8})
	if _, p := ppoLoss(ev3, in3.device(t), lossParams{clip: 0.2, valueCoef: 1}); readParts(t, p).kl != 0 {
		t.Fatalf("fully masked KL %v", readParts(t, p).kl)
	}
}

func TestEntropyFloorSchedule(t *testing.T) {
	for _, c := range []struct {
		step, total int
		want        float64
	}{{0, 100, 1.5}, {24, 100, 1.5}, {25, 100, 1}, {74, 100, 1}, {75, 100, 1}, {875, 1000, 0.75}, {100, 100, 0.5}, {500, 100, 0.5}, {-5, 100, 1.5}} {
		got, err := EntropyFloorSchedule(c.step, c.total)
		if err != nil || !near(got, c.want, 1e-12) {
			t.Errorf("schedule(%d/%d) = %v, %v; want %v", c.step, c.total, got, err, c.want)
		}
	}
	if _, err := EntropyFloorSchedule(1, 0); err == nil {
		t.Error("total 0 accepted")
	}
}

func TestExplainedVariance(t *testing.T) {
	ev, floored, err := ExplainedVariance([]float64{0, 0, 0}, []float64{0.1, 0.2, 0.3})
	if err != nil || !floored || !near(ev, 1-variance([]float64{0.1, 0.2, 0.3}), 1e-12) {
		t.Fatalf("small-variance returns: ev %v floored %v err %v", ev, floored, err)
	}
	ev, floored, _ = ExplainedVariance([]float64{1, 2, 3, 4}, []float64{10, 20, 30, 40})
	if floored || !near(ev, 1-variance([]float64{9, 18, 27, 36})/variance([]float64{10, 20, 30, 40}), 1e-12) {
		t.Fatalf("ev %v floored %v", ev, floored)
	}
	if _, _, err := ExplainedVariance([]float64{1}, []float64{1}); err == nil {
		t.Fatal("one-element batch accepted")
	}
}

func TestPPOOptionErrors(t *testing.T) {
	spec := EnvSpec{HeadSizes: []int{2}}
	pol, _ := NewMLPPolicy(MLPPolicyOptions{ObsDim: 4, Spec: spec, Device: testdevice.Device(t)})
	for name, o := range map[string]PPOOptions{
		"epochs<1":        {Epochs: -1},
		"clipvalue K>1":   {ClipValue: true, Epochs: 2},
		"clip ratio":      {ClipRatio: 1.5},
		"gamma":           {Gamma: 1.5},
		"floors alone":    {EntropyFloors: []float64{0.1}},
		"head weights":    {HeadEntropyWeights: []float64{1, 2}},
		"negative LR":     {LR: -1},
		"minibatch":       {MinibatchSize: -4},
		"negative anneal": {EntropyAnnealUpdates: -1},
	} {
		if _, err := NewPPO[[]float32](pol, spec, o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := NewPPO[[]float32](pol, spec, PPOOptions{ClipValue: true}); err != nil {
		t.Errorf("ClipValue with K=1 rejected: %v", err)
	}
}

// fillCartPole fills a trainer's buffer with one rollout.
func newCartPoleTrainer(t *testing.T, o PPOOptions, envs, steps int) (*Trainer[[]float32], *PPO[[]float32], *MLPPolicy) {
	t.Helper()
	spec := (&CartPole{}).Spec()
	pol, err := NewMLPPolicy(MLPPolicyOptions{ObsDim: 4, Spec: spec, Seed: 5, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := NewPPO[[]float32](pol, spec, o)
	if err != nil {
		t.Fatal(err)
	}
	vec, err := NewVecEnv(envs, func(i int) (Env[[]float32], error) { return NewCartPole(uint64(100 + i)), nil })
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(agent, vec, TrainerOptions[[]float32]{Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	return tr, agent, pol
}

func TestUpdateEpochZeroRatioIsOne(t *testing.T) {
	tr, agent, _ := newCartPoleTrainer(t, PPOOptions{Seed: 1}, 2, 32)
	if _, err := tr.Collect(); err != nil {
		t.Fatal(err)
	}
	st, err := agent.Update(tr.Buffer())
	if err != nil {
		t.Fatal(err)
	}
	if st.FirstRatioMaxDev != 0 || st.ApproxKL != 0 || st.Epochs != 1 || st.Steps != 1 || !st.Performed {
		t.Fatalf("first minibatch: ratio dev %v KL %v epochs %d steps %d performed %v; want 0, 0, 1, 1, true",
			st.FirstRatioMaxDev, st.ApproxKL, st.Epochs, st.Steps, st.Performed)
	}
	if agent.Updates() != 1 {
		t.Fatalf("Updates %d", agent.Updates())
	}
}

func TestKLEarlyStopOnRealDrift(t *testing.T) {
	// A huge learning rate makes the policy drift within the first step.
	tr, agent, _ := newCartPoleTrainer(t, PPOOptions{Seed: 1, Epochs: 4, LR: 0.5, MaxGradNorm: 100}, 2, 64)
	tr.Collect()
	st, err := agent.Update(tr.Buffer())
	if err != nil {
		t.Fatal(err)
	}
	if !st.EarlyStopped || st.StopEpoch < 1 || st.Steps >= 4 || st.MaxKL <= KLStopFactor*DefaultTargetKL {
		t.Fatalf("no early stop: %+v", st)
	}
	// Without the early stop all four epochs run.
	tr2, agent2, _ := newCartPoleTrainer(t, PPOOptions{Seed: 1, Epochs: 4, LR: 0.5, MaxGradNorm: 100, NoKLStop: true}, 2, 64)
	tr2.Collect()
	st2, _ := agent2.Update(tr2.Buffer())
	if st2.EarlyStopped || st2.Steps != 4 {
		t.Fatalf("NoKLStop: early=%v steps %d", st2.EarlyStopped, st2.Steps)
	}
}

// nanPolicy wraps a policy and poisons its values.
type nanPolicy struct{ *MLPPolicy }

func (p nanPolicy) Evaluate(obs [][]float32, m []Masks, a [][]int) (*Evaluation, error) {
	ev, err := p.MLPPolicy.Evaluate(obs, m, a)
	if err != nil {
		return nil, err
	}
	ev.Value = autograd.MulScalar(ev.Value, math.NaN())
	return ev, nil
}

func TestNonFiniteLossSkipsStepAndErrorsAfterThree(t *testing.T) {
	spec := (&CartPole{}).Spec()
	pol, _ := NewMLPPolicy(MLPPolicyOptions{ObsDim: 4, Spec: spec, Seed: 5, Device: testdevice.Device(t)})
	agent, err := NewPPO[[]float32](nanPolicy{pol}, spec, PPOOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vec, _ := NewVecEnv(1, func(i int) (Env[[]float32], error) { return NewCartPole(1), nil })
	tr, _ := NewTrainer(agent, vec, TrainerOptions[[]float32]{Steps: 8})
	before := testdevice.F64(t, pol.Parameters()[0].Value)
	for i := 1; i <= 3; i++ {
		tr.Collect()
		st, err := agent.Update(tr.Buffer())
		if i < 3 {
			if err != nil || st.Performed || st.Skipped != 1 {
				t.Fatalf("update %d: err %v performed %v skipped %d", i, err, st.Performed, st.Skipped)
			}
		} else if !errors.Is(err, ErrUpdateSkipped) {
			t.Fatalf("third skipped update: %v, want ErrUpdateSkipped", err)
		}
	}
	if agent.Updates() != 0 {
		t.Fatalf("skipped updates counted: %d", agent.Updates())
	}
	for i, v := range testdevice.F64(t, pol.Parameters()[0].Value) {
		if v != before[i] {
			t.Fatal("a skipped update changed the parameters")
		}
	}
}

func TestEntropyAnneal(t *testing.T) {
	spec := EnvSpec{HeadSizes: []int{2}}
	pol, _ := NewMLPPolicy(MLPPolicyOptions{ObsDim: 4, Spec: spec, Device: testdevice.Device(t)})
	a, _ := NewPPO[[]float32](pol, spec, PPOOptions{EntropyCoef: 0.1, EntropyCoefEnd: 0.02, EntropyAnnealUpdates: 4})
	if a.EntropyCoef() != 0.1 {
		t.Fatal("anneal does not start at EntropyCoef")
	}
	a.updates = 2
	if !near(a.EntropyCoef(), 0.06, 1e-12) {
		t.Fatalf("halfway %v, want 0.06", a.EntropyCoef())
	}
	a.updates = 10
	if !near(a.EntropyCoef(), 0.02, 1e-12) {
		t.Fatalf("after the anneal %v, want 0.02", a.EntropyCoef())
	}
}

// TestFloorPenaltyLeavesOutHeadsWithoutAFloor: a learnable head without
// a floor stays out of the floor penalty even when its entropies are
// NaN (the heads are computed side by side, the others masked out), so
// with no entropy bonus the loss stays finite.
func TestFloorPenaltyLeavesOutHeadsWithoutAFloor(t *testing.T) {
	ev := &Evaluation{
		LogProbs:  []*autograd.Var{param(t, 0.1, 0.2), param(t, 0.3, 0.4)},
		Entropies: []*autograd.Var{param(t, 0.1, 0.2), param(t, math.NaN(), math.NaN())},
		Value:     param(t, 1, 1),
	}
	in := testInputs{oldLogp: [][]float64{{0, 0}, {0, 0}}, adv: []float64{1, -1}, rel: onesRel(2, 2),
		forced: []bool{false, false}, returns: []float64{0, 0}, oldValues: []float64{0, 0}}
	lp := lossParams{clip: 0.2, valueCoef: 1, floors: []float64{0.5, 0.5}, floorCoefs: []float64{0.3, 0}, floorScale: 1}
	loss, p := ppoLoss(ev, in.device(t), lp)
	parts := readParts(t, p)
	// Head 0 alone: mean entropy 0.15, 0.3·(0.5 − 0.15)².
	if want := 0.3 * 0.35 * 0.35; !near(parts.floor, want, 1e-12) {
		t.Fatalf("floor penalty %v, want %v (head 0's alone)", parts.floor, want)
	}
	if v := testdevice.Item(t, loss.Value); math.IsNaN(v) || math.IsInf(v, 0) {
		t.Fatalf("loss %v: a head without a floor reached it", v)
	}
}
