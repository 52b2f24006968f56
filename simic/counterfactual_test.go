package simic

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// game is a synthetic coalition value function.
type game func(c Coalition) float64

func (g game) evaluator(calls *int) ConfigEvaluator {
	return ConfigEvaluatorFunc(func(masks [][]bool) ([]float64, error) {
		if calls != nil {
			*calls++
		}
		out := make([]float64, len(masks))
		for k, m := range masks {
			c, err := CoalitionOf(m)
			if err != nil {
				return nil, err
			}
			out[k] = g(c)
		}
		return out, nil
	})
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("r0c%d", i)
	}
	return out
}

func mustEngine(t *testing.T, o CounterfactualOptions) *CounterfactualEngine {
	t.Helper()
	e, err := NewCounterfactualEngine(o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func mustRun(t *testing.T, e *CounterfactualEngine, n int, g game) *CounterfactualResult {
	t.Helper()
	r, err := e.Run(ids(n), g.evaluator(nil))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// weighted builds f(S) = base + Σ_{i∈S} w_i + Σ pair terms + Σ triple terms.
// Terms are added in a fixed order so f is bitwise deterministic.
func weighted(base float64, w []float64, pairs map[[2]int]float64, triples map[[3]int]float64) game {
	type term struct {
		members []int
		v       float64
	}
	var terms []term
	for i, x := range w {
		terms = append(terms, term{[]int{i}, x})
	}
	for _, p := range slices.SortedFunc(maps.Keys(pairs), func(a, b [2]int) int { return slices.Compare(a[:], b[:]) }) {
		terms = append(terms, term{p[:], pairs[p]})
	}
	for _, p := range slices.SortedFunc(maps.Keys(triples), func(a, b [3]int) int { return slices.Compare(a[:], b[:]) }) {
		terms = append(terms, term{p[:], triples[p]})
	}
	return func(c Coalition) float64 {
		v := base
		for _, t := range terms {
			all := true
			for _, i := range t.members {
				all = all && c.Has(i)
			}
			if all {
				v += t.v
			}
		}
		return v
	}
}

func TestShapleyAdditiveGame(t *testing.T) {
	w := []float64{3, -1.5, 0.25}
	r := mustRun(t, mustEngine(t, CounterfactualOptions{}), 3, weighted(50, w, nil, nil))
	if r.Strategy != CounterfactualFullFactorial || !r.ShapleyExact {
		t.Fatalf("strategy %v exact %v", r.Strategy, r.ShapleyExact)
	}
	if r.BaselineAccuracy != 50 || !near(r.FullAccuracy, 51.75, 1e-12) {
		t.Errorf("baseline %v full %v", r.BaselineAccuracy, r.FullAccuracy)
	}
	for i, x := range w {
		if !near(r.Shapley[i].Mean, x, 1e-12) || !near(r.Removal[i], x, 1e-12) || !near(r.Marginal[i], x, 1e-12) {
			t.Errorf("seed %d: shapley %v removal %v marginal %v, want %v", i, r.Shapley[i].Mean, r.Removal[i], r.Marginal[i], x)
		}
		for j := range w {
			if r.Interactions[i][j] != 0 {
				t.Errorf("additive game has interaction %d,%d = %v", i, j, r.Interactions[i][j])
			}
		}
	}
}

func TestShapleyInteractingGame(t *testing.T) {
	// f(S) = Σ w_i + w01·[0∈S][1∈S]: the pair term splits evenly, so
	// φ0 = 1 + 0.5·2, φ1 = 2 + 0.5·2, φ2 = −0.5; removing seed 0 costs
	// w0 + w01 = 3; the main effect of 0 is w0 + w01/2 = 2.
	g := weighted(10, []float64{1, 2, -0.5}, map[[2]int]float64{{0, 1}: 2}, nil)
	r := mustRun(t, mustEngine(t, CounterfactualOptions{}), 3, g)
	for i, want := range []float64{2, 3, -0.5} {
		if !near(r.Shapley[i].Mean, want, 1e-12) {
			t.Errorf("φ%d = %v, want %v", i, r.Shapley[i].Mean, want)
		}
	}
	for i, want := range []float64{3, 4, -0.5} {
		if !near(r.Removal[i], want, 1e-12) {
			t.Errorf("removal %d = %v, want %v", i, r.Removal[i], want)
		}
	}
	if !near(r.Marginal[0], 2, 1e-12) {
		t.Errorf("marginal 0 = %v, want 2", r.Marginal[0])
	}
	if r.Interactions[0][1] != 2 || r.Interactions[1][0] != 2 || r.Interactions[0][2] != 0 || r.Interactions[1][2] != 0 {
		t.Errorf("interactions %v", r.Interactions)
	}
	if !slices.Equal(r.InteractionSum, []float64{2, 2, 0}) || !slices.Equal(r.BoostReceived, []float64{2, 2, 0}) {
		t.Errorf("interaction sum %v boost %v", r.InteractionSum, r.BoostReceived)
	}
	// A pure three-way term splits in thirds; interference shows as a
	// negative pair interaction.
	r = mustRun(t, mustEngine(t, CounterfactualOptions{}), 3, weighted(0, nil, map[[2]int]float64{{1, 2}: -0.9}, map[[3]int]float64{{0, 1, 2}: 3}))
	for i, want := range []float64{1, 1 - 0.45, 1 - 0.45} {
		if !near(r.Shapley[i].Mean, want, 1e-12) {
			t.Errorf("three-way φ%d = %v, want %v", i, r.Shapley[i].Mean, want)
		}
	}
	if !near(r.Interactions[1][2], -0.9, 1e-12) || ClassifyInteraction(r.Interactions[1][2], 0) != RegimeInterference {
		t.Errorf("interference I12 = %v", r.Interactions[1][2])
	}
}

func randomGame(rng interface{ Float64() float64 }, n int) game {
	w := make([]float64, n)
	pairs := map[[2]int]float64{}
	triples := map[[3]int]float64{}
	for i := range w {
		w[i] = rng.Float64()*4 - 1
		for j := i + 1; j < n; j++ {
			pairs[[2]int{i, j}] = rng.Float64()*2 - 1
			for k := j + 1; k < n; k++ {
				triples[[3]int{i, j, k}] = rng.Float64()*2 - 1
			}
		}
	}
	return weighted(rng.Float64()*50, w, pairs, triples)
}

// TestShapleyEfficiency: contributions sum to f(all) − f(none), exactly for
// the factorial and for every sampled permutation (each telescopes).
func TestShapleyEfficiency(t *testing.T) {
	rng := tensor.NewRNG(5)
	for n := 1; n <= 6; n++ {
		g := randomGame(rng, n)
		r := mustRun(t, mustEngine(t, CounterfactualOptions{Seed: uint64(n)}), n, g)
		sum := 0.0
		for _, s := range r.Shapley {
			sum += s.Mean
		}
		want := g(FullCoalition(n)) - g(0)
		if !near(sum, want, 1e-9) || !near(r.FullAccuracy-r.BaselineAccuracy, want, 1e-12) {
			t.Errorf("n=%d (%v): Σφ = %v, want %v", n, r.Strategy, sum, want)
		}
	}
}

// TestFactorialVersusSampling compares exact Shapley values with the
// sampled estimate for 5 and 6 seeds on games with three-way terms (pure
// pairwise games are exact under antithetic sampling).
func TestFactorialVersusSampling(t *testing.T) {
	rng := tensor.NewRNG(17)
	for _, n := range []int{5, 6} {
		g := randomGame(rng, n)
		exact := mustRun(t, mustEngine(t, CounterfactualOptions{Strategy: CounterfactualFullFactorial}), n, g)
		sampled := mustRun(t, mustEngine(t, CounterfactualOptions{ShapleySamples: MaxShapleySamples, Seed: 3}), n, g)
		if sampled.Strategy != CounterfactualShapley || sampled.ShapleyExact || exact.Strategy != CounterfactualFullFactorial {
			t.Fatalf("strategies %v / %v", exact.Strategy, sampled.Strategy)
		}
		if len(exact.Matrix.Values) != 1<<n {
			t.Fatalf("full factorial evaluated %d configurations", len(exact.Matrix.Values))
		}
		maxErr := 0.0
		for i := 0; i < n; i++ {
			s := sampled.Shapley[i]
			if s.Samples != MaxShapleySamples {
				t.Fatalf("seed %d: %d samples", i, s.Samples)
			}
			diff := math.Abs(s.Mean - exact.Shapley[i].Mean)
			maxErr = math.Max(maxErr, diff)
			// Within four standard errors, and absolutely small.
			if diff > 4*s.Std/math.Sqrt(float64(s.Samples))+1e-9 || diff > 0.25 {
				t.Errorf("n=%d seed %d: sampled %v ± %v, exact %v", n, i, s.Mean, s.Std, exact.Shapley[i].Mean)
			}
		}
		t.Logf("n=%d: max |sampled − exact| = %.4f", n, maxErr)
	}
}

func TestCounterfactualReproducibility(t *testing.T) {
	g := randomGame(tensor.NewRNG(23), 6)
	plan := func(seed uint64) *CounterfactualPlan {
		p, err := mustEngine(t, CounterfactualOptions{Seed: seed}).Plan(ids(6))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b, c := plan(7), plan(7), plan(8)
	if !slices.Equal(a.Configs, b.Configs) || fmt.Sprint(a.Permutations) != fmt.Sprint(b.Permutations) {
		t.Error("same seed gave different plans")
	}
	if fmt.Sprint(a.Permutations) == fmt.Sprint(c.Permutations) {
		t.Error("different seeds gave the same permutations")
	}
	// Permutations come in antithetic pairs.
	for k := 0; k < len(a.Permutations); k += 2 {
		rev := slices.Clone(a.Permutations[k])
		slices.Reverse(rev)
		if !slices.Equal(rev, a.Permutations[k+1]) {
			t.Fatalf("permutation %d is not the reverse of %d", k+1, k)
		}
	}
	e7 := mustEngine(t, CounterfactualOptions{Seed: 7})
	r1, r2 := mustRun(t, e7, 6, g), mustRun(t, e7, 6, g)
	r3 := mustRun(t, mustEngine(t, CounterfactualOptions{Seed: 8}), 6, g)
	same, differs := true, false
	for i := range r1.Shapley {
		same = same && r1.Shapley[i] == r2.Shapley[i]
		differs = differs || r1.Shapley[i].Mean != r3.Shapley[i].Mean
	}
	if !same {
		t.Error("same seed gave different estimates")
	}
	if !differs {
		t.Error("different seeds gave identical estimates")
	}
}

func TestShapleySampleCapWarning(t *testing.T) {
	e := mustEngine(t, CounterfactualOptions{ShapleySamples: 150})
	if e.Options().ShapleySamples != MaxShapleySamples || len(e.Warnings()) != 1 {
		t.Fatalf("samples %d warnings %v", e.Options().ShapleySamples, e.Warnings())
	}
	r := mustRun(t, e, 5, randomGame(tensor.NewRNG(1), 5))
	if len(r.Warnings) != 1 || r.Shapley[0].Samples != MaxShapleySamples {
		t.Errorf("result warnings %v samples %d", r.Warnings, r.Shapley[0].Samples)
	}
	if w := mustEngine(t, CounterfactualOptions{ShapleySamples: MaxShapleySamples}).Warnings(); len(w) != 0 {
		t.Errorf("100 samples warned: %v", w)
	}
	if d := mustEngine(t, CounterfactualOptions{}).Options().ShapleySamples; d != DefaultShapleySamples {
		t.Errorf("default samples %d", d)
	}
	if _, err := NewCounterfactualEngine(CounterfactualOptions{ShapleySamples: -1}); err == nil {
		t.Error("negative samples accepted")
	}
	if _, err := NewCounterfactualEngine(CounterfactualOptions{Strategy: 9}); err == nil {
		t.Error("unknown strategy accepted")
	}
}

func TestCounterfactualStrategies(t *testing.T) {
	e := mustEngine(t, CounterfactualOptions{})
	for n, want := range map[int]int{0: 1, 1: 2, 2: 4, 4: 16} {
		p, err := e.Plan(ids(n))
		if err != nil || p.Strategy != CounterfactualFullFactorial || len(p.Configs) != want {
			t.Errorf("auto n=%d: %v %d configs (%v)", n, p.Strategy, len(p.Configs), err)
		}
	}
	p, err := e.Plan(ids(5))
	if err != nil || p.Strategy != CounterfactualShapley {
		t.Fatalf("auto n=5: %v (%v)", p.Strategy, err)
	}
	// Ablation configs come first: all on, each one off, all off.
	full := FullCoalition(5)
	for i := 0; i < 5; i++ {
		if k, ok := p.Index(full.Without(i)); !ok || k != i+1 {
			t.Errorf("one-off config %d at %d (%v)", i, k, ok)
		}
	}
	abl, err := mustEngine(t, CounterfactualOptions{Strategy: CounterfactualAblationOnly}).Plan(ids(3))
	if err != nil || len(abl.Configs) != 5 {
		t.Fatalf("ablation only: %d configs (%v)", len(abl.Configs), err)
	}
	r := mustRun(t, mustEngine(t, CounterfactualOptions{Strategy: CounterfactualAblationOnly}), 3,
		weighted(1, []float64{1, 2, 3}, map[[2]int]float64{{0, 1}: 1}, nil))
	if r.Shapley != nil || r.Interactions != nil || !slices.Equal(r.Removal, []float64{2, 3, 3}) {
		t.Errorf("ablation result: shapley %v interactions %v removal %v", r.Shapley, r.Interactions, r.Removal)
	}
	if _, err := mustEngine(t, CounterfactualOptions{Strategy: CounterfactualFullFactorial}).Plan(ids(17)); err == nil {
		t.Error("full factorial over 17 seeds accepted")
	}
	if _, err := e.Plan([]string{"a", "b", "a"}); err == nil {
		t.Error("duplicate seed IDs accepted")
	}
}

func TestCounterfactualEmptyAndSingle(t *testing.T) {
	for _, s := range []CounterfactualStrategy{CounterfactualAuto, CounterfactualShapley, CounterfactualAblationOnly} {
		e := mustEngine(t, CounterfactualOptions{Strategy: s})
		p, err := e.Plan(nil)
		if err != nil || len(p.Configs) != 1 || p.Configs[0] != 0 || len(p.Masks()[0]) != 0 {
			t.Fatalf("%v: empty plan %+v (%v)", s, p, err)
		}
		r, err := p.Compute([]float64{42})
		if err != nil || len(r.Removal) != 0 || len(r.Marginal) != 0 || len(r.Shapley) != 0 ||
			r.FullAccuracy != 42 || r.BaselineAccuracy != 42 {
			t.Fatalf("%v: empty result %+v (%v)", s, r, err)
		}
		r = mustRun(t, e, 1, weighted(60, []float64{2.5}, nil, nil))
		if !near(r.Removal[0], 2.5, 1e-12) || !near(r.Marginal[0], 2.5, 1e-12) {
			t.Errorf("%v: single seed removal %v marginal %v", s, r.Removal, r.Marginal)
		}
		if s != CounterfactualAblationOnly && !near(r.Shapley[0].Mean, 2.5, 1e-12) {
			t.Errorf("%v: single seed Shapley %v", s, r.Shapley)
		}
	}
}

func TestCounterfactualPartialMatrixRejected(t *testing.T) {
	e := mustEngine(t, CounterfactualOptions{})
	p, err := e.Plan(ids(3))
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]float64, len(p.Configs))
	if _, err := p.Compute(vals[:len(vals)-1]); !errors.Is(err, ErrPartialMatrix) {
		t.Errorf("short results: %v", err)
	}
	vals[3] = math.NaN()
	if _, err := p.Compute(vals); !errors.Is(err, ErrPartialMatrix) {
		t.Errorf("failed evaluation: %v", err)
	}
	boom := errors.New("validation pass failed")
	_, err = e.Run(ids(3), ConfigEvaluatorFunc(func([][]bool) ([]float64, error) { return nil, boom }))
	if !errors.Is(err, boom) {
		t.Errorf("evaluator error not propagated: %v", err)
	}
	// A matrix missing a coalition is rejected, never filled with 0.
	m := &CounterfactualMatrix{SeedIDs: ids(2), Values: map[Coalition]float64{0: 1, 1: 2, 3: 4}}
	if _, err := m.ExactShapley(); !errors.Is(err, ErrMissingCoalition) {
		t.Errorf("ExactShapley on a partial matrix: %v", err)
	}
	if _, err := m.Interaction(0, 1); !errors.Is(err, ErrMissingCoalition) {
		t.Errorf("Interaction on a partial matrix: %v", err)
	}
	if _, err := m.Interaction(0, 0); err == nil {
		t.Error("self interaction accepted")
	}
	m.Values[2] = 1.5
	if v, err := m.Interaction(0, 1); err != nil || v != 4-2-1.5+1 {
		t.Errorf("completed interaction %v (%v)", v, err)
	}
}

// TestCounterfactualRunBatchesOnce: Run hands every configuration to the
// evaluator in a single call (fused validation) and records its time.
func TestCounterfactualRunBatchesOnce(t *testing.T) {
	calls := 0
	g := randomGame(tensor.NewRNG(2), 5)
	e := mustEngine(t, CounterfactualOptions{Seed: 1})
	r, err := e.Run(ids(5), g.evaluator(&calls))
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("evaluator called %d times", calls)
	}
	if r.Elapsed < 0 {
		t.Errorf("negative elapsed %v", r.Elapsed)
	}
	p, _ := e.Plan(ids(5))
	if len(r.Matrix.Values) != len(p.Configs) {
		t.Errorf("matrix holds %d values for %d configs", len(r.Matrix.Values), len(p.Configs))
	}
	// The plan lists each coalition once, and every sampled prefix.
	seen := map[Coalition]bool{}
	for _, c := range p.Configs {
		if seen[c] {
			t.Fatalf("coalition %b listed twice", c)
		}
		seen[c] = true
	}
	for _, order := range p.Permutations {
		var c Coalition
		for _, i := range order {
			c = c.With(i)
			if !seen[c] {
				t.Fatalf("prefix %b missing from the plan", c)
			}
		}
	}
}

func TestCoalitionMaskAndRegimes(t *testing.T) {
	c := Coalition(0).With(0).With(3)
	m := c.Mask(5)
	if !slices.Equal(m, []bool{true, false, false, true, false}) || c.Len() != 2 {
		t.Errorf("mask %v len %d", m, c.Len())
	}
	back, err := CoalitionOf(m)
	if err != nil || back != c || c.Without(3) != Coalition(1) {
		t.Errorf("round trip %b (%v)", back, err)
	}
	if _, err := CoalitionOf(make([]bool, 64)); err == nil {
		t.Error("64-seed mask accepted")
	}
	if FullCoalition(3) != 7 || FullCoalition(0) != 0 {
		t.Error("FullCoalition wrong")
	}
	for _, tc := range []struct {
		v, d float64
		want InteractionRegime
	}{{0.6, 0, RegimeSynergy}, {0.5, 0, RegimeNeutral}, {-0.5, 0, RegimeNeutral}, {-0.6, 0, RegimeInterference},
		{-0.6, 0.001, RegimeInterference}, {-0.6, 0.002, RegimeRecovering}} {
		if got := ClassifyInteraction(tc.v, tc.d); got != tc.want {
			t.Errorf("ClassifyInteraction(%v, %v) = %v, want %v", tc.v, tc.d, got, tc.want)
		}
	}
}
