package simic

import (
	"errors"
	"github.com/esper-go/esper/internal/testdevice"
	"math"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

func TestMLPPolicyMaskedSampling(t *testing.T) {
	spec := EnvSpec{HeadSizes: []int{3, 2}}
	pol, err := NewMLPPolicy(MLPPolicyOptions{ObsDim: 2, Spec: spec, Seed: 1, ActorOutScale: 1, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	obs := [][]float32{{0.3, -1}, {1, 2}}
	masks := []Masks{{{true, false, true}, {false, true}}, nil}
	rng := tensor.NewRNG(9)
	seen := map[int]bool{}
	for i := 0; i < 300; i++ {
		out, err := pol.Act(obs, masks, rng, false)
		if err != nil {
			t.Fatal(err)
		}
		a := out.Actions[0]
		if a[0] == 1 || a[1] != 1 {
			t.Fatalf("masked option chosen: %v", a)
		}
		seen[a[0]] = true
	}
	if !seen[0] || !seen[2] {
		t.Fatalf("sampling never chose some valid option: %v", seen)
	}
	// Act's log-probabilities agree with Evaluate's; the single-option
	// head has entropy 0, the others lie in [0, 1].
	out, _ := pol.Act(obs, masks, rng, false)
	var ev *Evaluation
	autograd.NoGrad(func() { ev, err = pol.Evaluate(obs, masks, out.Actions) })
	if err != nil {
		t.Fatal(err)
	}
	for h := range spec.HeadSizes {
		lp := testdevice.F64(t, ev.LogProbs[h].Value)
		ent := testdevice.F64(t, ev.Entropies[h].Value)
		for b := range obs {
			if math.Abs(lp[b]-out.LogProbs[b][h]) > 1e-5 {
				t.Errorf("head %d row %d: Act log-prob %v, Evaluate %v", h, b, out.LogProbs[b][h], lp[b])
			}
			if ent[b] < -1e-6 || ent[b] > 1+1e-6 {
				t.Errorf("normalised entropy %v outside [0, 1]", ent[b])
			}
		}
	}
	if e := testdevice.F64(t, ev.Entropies[1].Value)[0]; e != 0 {
		t.Fatalf("single valid option entropy %v, want 0", e)
	}
	vals, _ := pol.Values(obs)
	for b, v := range vals {
		if math.Abs(v-out.Values[b]) > 1e-6 || math.Abs(v-testdevice.F64(t, ev.Value.Value)[b]) > 1e-6 {
			t.Fatalf("values disagree: Values %v, Act %v", vals, out.Values)
		}
	}
	// Deterministic picks the most probable valid option.
	det, _ := pol.Act(obs, masks, nil, true)
	if det.Actions[0][1] != 1 {
		t.Fatal("deterministic chose a masked option")
	}
	// Errors at the boundary.
	if _, err := pol.Evaluate(obs, masks, [][]int{{1, 1}, {0, 0}}); !errors.Is(err, ErrNoValidAction) {
		t.Fatalf("masked action evaluated: %v", err)
	}
	if _, err := pol.Act(obs, []Masks{{{false, false, false}, nil}, nil}, rng, false); !errors.Is(err, ErrNoValidAction) {
		t.Fatalf("all-false mask: %v", err)
	}
	if _, err := pol.Act(obs, nil, nil, false); err == nil {
		t.Fatal("sampling without rng accepted")
	}
	if _, err := pol.Act([][]float32{{1}}, nil, rng, false); err == nil {
		t.Fatal("wrong observation width accepted")
	}
	if _, err := NewMLPPolicy(MLPPolicyOptions{ObsDim: 0, Spec: spec}); err == nil {
		t.Fatal("ObsDim 0 accepted")
	}
}

func TestVecEnvAutoResetAndEpisodes(t *testing.T) {
	vec, err := NewVecEnv(2, func(i int) (Env[[]float32], error) { return NewCartPole(uint64(i)), nil })
	if err != nil {
		t.Fatal(err)
	}
	// Always pushing left ends env episodes by termination within ~10
	// steps; each ending is reported once with its length.
	total := 0
	var eps []Episode
	for total < 200 {
		s, err := vec.Step([][]int{{0}, {0}})
		if err != nil {
			t.Fatal(err)
		}
		total += 2
		for _, e := range s.Episodes {
			if !s.Terminated[e.Env] || s.FinalObs[e.Env] == nil || &s.FinalObs[e.Env][0] == &s.Obs[e.Env][0] {
				t.Fatalf("episode end without a separate final observation: %+v", e)
			}
		}
		eps = append(eps, s.Episodes...)
	}
	if len(eps) < 4 {
		t.Fatalf("only %d episodes in 200 steps of always-left", len(eps))
	}
	for _, e := range eps {
		if e.Return != float64(e.Length) || e.Truncated {
			t.Fatalf("episode %+v", e)
		}
	}
	if _, err := vec.Step([][]int{{0}}); err == nil {
		t.Fatal("one action for two envs accepted")
	}
}

func TestCollectMarksRolloutEndTruncated(t *testing.T) {
	tr, _, pol := newCartPoleTrainer(t, PPOOptions{Seed: 2}, 3, 40)
	if _, err := tr.Collect(); err != nil {
		t.Fatal(err)
	}
	b := tr.Buffer()
	for env := 0; env < 3; env++ {
		if b.Len(env) != 40 {
			t.Fatalf("env %d has %d steps", env, b.Len(env))
		}
		last := b.Last(env)
		if last.Done {
			continue
		}
		if !last.Truncated {
			t.Fatalf("env %d: last rollout step neither done nor truncated", env)
		}
		// The bootstrap is V of the observation after the last step.
		v, _ := pol.Values([][]float32{tr.obs[env]})
		if math.Abs(v[0]-last.Bootstrap) > 1e-6 {
			t.Fatalf("bootstrap %v, want V(next) %v", last.Bootstrap, v[0])
		}
		for i := 0; i < 39; i++ {
			s := b.At(env, i)
			if s.Truncated || (s.Done && s.Reward != 1) {
				t.Fatalf("step %d: %+v", i, s)
			}
		}
	}
	if tr.EnvSteps() != 120 {
		t.Fatalf("EnvSteps %d, want 120", tr.EnvSteps())
	}
}

func TestSeededReproducibility(t *testing.T) {
	run := func(seed uint64) *CartPoleResult {
		r, err := TrainCartPole(CartPoleOptions{Seed: seed, Envs: 4, Steps: 64, MaxEnvSteps: 1024, EvalEpisodes: 3, Device: testdevice.Device(t)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b, c := run(7), run(7), run(8)
	if len(a.TrainReturns) != 4 {
		t.Fatalf("%d updates, want 4", len(a.TrainReturns))
	}
	same := func(x, y *CartPoleResult) bool {
		for i := range x.TrainReturns {
			if x.TrainReturns[i] != y.TrainReturns[i] && !(math.IsNaN(x.TrainReturns[i]) && math.IsNaN(y.TrainReturns[i])) {
				return false
			}
		}
		px, py := x.Policy.Parameters(), y.Policy.Parameters()
		for i := range px {
			vx, vy := testdevice.F64(t, px[i].Value), testdevice.F64(t, py[i].Value)
			for j := range vx {
				if vx[j] != vy[j] {
					return false
				}
			}
		}
		return x.EvalMean == y.EvalMean
	}
	if !same(a, b) {
		t.Fatal("same seed, different runs")
	}
	if same(a, c) {
		t.Fatal("different seeds gave identical runs")
	}
}
