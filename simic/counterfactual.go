package simic

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/esper-go/esper/tensor"
)

// Counterfactual engine defaults (esper-reference.md §5.7,
// CounterfactualConfig).
const (
	// DefaultShapleySamples is the number of sampled permutations.
	DefaultShapleySamples = 20 // G2 CounterfactualConfig.shapley_samples
	// MaxShapleySamples caps the sampled permutations; a larger request is
	// capped with a warning.
	MaxShapleySamples = 100 // G2 shapley_samples cap
	// FullFactorialMaxSeeds is the largest seed count CounterfactualAuto
	// evaluates exhaustively (2^n configurations).
	FullFactorialMaxSeeds = 4 // G2 strategy "auto"
	// MaxFullFactorialSeeds bounds an explicitly requested full factorial
	// (65 536 configurations).
	MaxFullFactorialSeeds = 16
	// MaxCounterfactualSeeds is the most seeds a Coalition can hold.
	MaxCounterfactualSeeds = 63
	// SynergyThreshold and InterferenceThreshold label pairwise interaction
	// regimes; RecoveringDerivative is the slope above which interference
	// counts as recovering (G2 regime labels).
	SynergyThreshold      = 0.5
	InterferenceThreshold = -0.5
	RecoveringDerivative  = 0.001
)

// Errors of the counterfactual engine, matched with errors.Is.
var (
	// ErrMissingCoalition is wrapped when a computation needs a coalition
	// that was not evaluated; nothing is substituted for it.
	ErrMissingCoalition = errors.New("coalition not evaluated")
	// ErrPartialMatrix is wrapped when the results do not cover the plan
	// one-to-one or an evaluation failed (non-finite value): the whole
	// matrix is rejected.
	ErrPartialMatrix = errors.New("partial or failed counterfactual matrix")
)

// Coalition is a set of seeds as a bit mask: bit i set means seed i (an
// index into the seed list) is on (alpha as is) and clear means off (alpha
// forced to 0). The empty coalition is "all off".
type Coalition uint64

// FullCoalition returns the coalition with seeds 0..n-1 on.
func FullCoalition(n int) Coalition {
	if n >= 64 {
		return ^Coalition(0)
	}
	return Coalition(1)<<n - 1
}

// Has reports whether seed i is on.
func (c Coalition) Has(i int) bool { return c>>i&1 == 1 }

// With returns c with seed i on.
func (c Coalition) With(i int) Coalition { return c | 1<<i }

// Without returns c with seed i off.
func (c Coalition) Without(i int) Coalition { return c &^ (1 << i) }

// Len returns the number of seeds on.
func (c Coalition) Len() int { return bits.OnesCount64(uint64(c)) }

// Mask returns the on/off flags of seeds 0..n-1: the per-slot alpha mask an
// evaluator applies.
func (c Coalition) Mask(n int) []bool {
	m := make([]bool, n)
	for i := range m {
		m[i] = c.Has(i)
	}
	return m
}

// CoalitionOf converts a mask back to a Coalition.
func CoalitionOf(mask []bool) (Coalition, error) {
	if len(mask) > MaxCounterfactualSeeds {
		return 0, fmt.Errorf("simic: mask of %d seeds exceeds %d", len(mask), MaxCounterfactualSeeds)
	}
	var c Coalition
	for i, on := range mask {
		if on {
			c = c.With(i)
		}
	}
	return c, nil
}

// CounterfactualStrategy chooses which configurations are evaluated.
type CounterfactualStrategy int

// Strategies (G2 CounterfactualConfig.strategy).
const (
	// CounterfactualAuto is the full factorial for at most
	// FullFactorialMaxSeeds seeds and Shapley sampling above.
	CounterfactualAuto CounterfactualStrategy = iota
	// CounterfactualFullFactorial evaluates all 2^n configurations and gives
	// exact Shapley values and all pairwise interactions.
	CounterfactualFullFactorial
	// CounterfactualShapley samples antithetic permutation pairs and
	// evaluates their prefix coalitions plus the ablation configurations.
	CounterfactualShapley
	// CounterfactualAblationOnly evaluates all on, each one off and all
	// off (n+2 configurations); it gives no Shapley values.
	CounterfactualAblationOnly
)

var strategyNames = [...]string{"auto", "full_factorial", "shapley", "ablation_only"}

// String returns the strategy's reference name ("full_factorial").
func (s CounterfactualStrategy) String() string {
	if s < 0 || int(s) >= len(strategyNames) {
		return fmt.Sprintf("CounterfactualStrategy(%d)", int(s))
	}
	return strategyNames[s]
}

// CounterfactualOptions configure NewCounterfactualEngine; the zero value
// is strategy auto with 20 samples drawn from seed 0.
type CounterfactualOptions struct {
	// Strategy picks the configurations; zero is CounterfactualAuto.
	Strategy CounterfactualStrategy
	// ShapleySamples is the number of sampled permutations, rounded up to
	// an even number (antithetic pairs); 0 means DefaultShapleySamples,
	// more than MaxShapleySamples is capped with a warning.
	ShapleySamples int
	// Seed seeds the permutation sampling: the same seed gives the same
	// plan and estimates, different seeds give different ones.
	Seed uint64
}

// CounterfactualEngine plans counterfactual configurations and computes
// attributions from their evaluations. Each Plan call draws from a fresh
// generator seeded by the options, so plans are reproducible.
type CounterfactualEngine struct {
	o        CounterfactualOptions
	warnings []string
}

// NewCounterfactualEngine validates the options.
func NewCounterfactualEngine(o CounterfactualOptions) (*CounterfactualEngine, error) {
	if o.Strategy < 0 || int(o.Strategy) >= len(strategyNames) {
		return nil, fmt.Errorf("simic: unknown counterfactual strategy %d", int(o.Strategy))
	}
	if o.ShapleySamples < 0 {
		return nil, fmt.Errorf("simic: ShapleySamples %d must not be negative", o.ShapleySamples)
	}
	e := &CounterfactualEngine{o: o}
	if e.o.ShapleySamples == 0 {
		e.o.ShapleySamples = DefaultShapleySamples
	}
	if e.o.ShapleySamples > MaxShapleySamples {
		e.warnings = append(e.warnings, fmt.Sprintf("shapley samples %d capped at %d", e.o.ShapleySamples, MaxShapleySamples))
		e.o.ShapleySamples = MaxShapleySamples
	}
	return e, nil
}

// Options returns the options in effect (defaults filled, cap applied).
func (e *CounterfactualEngine) Options() CounterfactualOptions { return e.o }

// Warnings returns the warnings raised while applying the options.
func (e *CounterfactualEngine) Warnings() []string { return append([]string(nil), e.warnings...) }

// CounterfactualPlan lists the configurations to evaluate for one set of
// seeds. A fused-validation caller evaluates Masks() in one batched pass
// and hands the accuracies, in the same order, to Compute.
type CounterfactualPlan struct {
	// SeedIDs names the seeds; Coalition bit i is SeedIDs[i].
	SeedIDs []string
	// Strategy is the strategy applied (auto resolved).
	Strategy CounterfactualStrategy
	// Configs are the coalitions to evaluate, without duplicates. All on
	// and all off are always included.
	Configs []Coalition
	// Permutations are the sampled seed orders (Shapley only): pairs of a
	// permutation followed by its reverse.
	Permutations [][]int
	// Warnings carries the engine's warnings (e.g. a capped sample count).
	Warnings []string

	index map[Coalition]int
}

// Plan returns the configurations needed to attribute the given seeds. An
// empty seed list yields the single empty configuration.
func (e *CounterfactualEngine) Plan(seedIDs []string) (*CounterfactualPlan, error) {
	n := len(seedIDs)
	seen := make(map[string]bool, n)
	for _, id := range seedIDs {
		if seen[id] {
			return nil, fmt.Errorf("simic: seed %q listed twice", id)
		}
		seen[id] = true
	}
	strategy := e.o.Strategy
	if strategy == CounterfactualAuto {
		strategy = CounterfactualShapley
		if n <= FullFactorialMaxSeeds {
			strategy = CounterfactualFullFactorial
		}
	}
	switch {
	case n > MaxCounterfactualSeeds:
		return nil, fmt.Errorf("simic: %d seeds exceed the counterfactual limit %d", n, MaxCounterfactualSeeds)
	case strategy == CounterfactualFullFactorial && n > MaxFullFactorialSeeds:
		return nil, fmt.Errorf("simic: full factorial over %d seeds (2^%d configurations) exceeds %d seeds; use Shapley sampling",
			n, n, MaxFullFactorialSeeds)
	}
	p := &CounterfactualPlan{
		SeedIDs:  append([]string(nil), seedIDs...),
		Strategy: strategy,
		Warnings: e.Warnings(),
		index:    map[Coalition]int{},
	}
	full := FullCoalition(n)
	if strategy == CounterfactualFullFactorial {
		for c := Coalition(0); c <= full; c++ {
			p.add(c)
		}
		return p, nil
	}
	// Ablation configurations: all on, each one off, all off.
	p.add(full)
	for i := 0; i < n; i++ {
		p.add(full.Without(i))
	}
	p.add(0)
	if strategy == CounterfactualShapley && n > 0 {
		rng := tensor.NewRNG(e.o.Seed)
		pairs := (e.o.ShapleySamples + 1) / 2
		for k := 0; k < pairs; k++ {
			perm := rng.Perm(n)
			rev := make([]int, n)
			for j, v := range perm {
				rev[n-1-j] = v
			}
			for _, order := range [][]int{perm, rev} {
				p.Permutations = append(p.Permutations, order)
				var c Coalition
				for _, i := range order {
					c = c.With(i)
					p.add(c)
				}
			}
		}
	}
	return p, nil
}

func (p *CounterfactualPlan) add(c Coalition) {
	if _, ok := p.index[c]; !ok {
		p.index[c] = len(p.Configs)
		p.Configs = append(p.Configs, c)
	}
}

// Index returns the position of a coalition in Configs.
func (p *CounterfactualPlan) Index(c Coalition) (int, bool) {
	i, ok := p.index[c]
	return i, ok
}

// Masks returns Configs as per-seed on/off masks, in order.
func (p *CounterfactualPlan) Masks() [][]bool {
	out := make([][]bool, len(p.Configs))
	for k, c := range p.Configs {
		out[k] = c.Mask(len(p.SeedIDs))
	}
	return out
}

// ConfigEvaluator evaluates alpha configurations, typically in one batched
// validation pass: masks[k][i] reports whether seed i is on in
// configuration k, and the result holds one accuracy (or any score) per
// configuration, in order.
type ConfigEvaluator interface {
	EvaluateConfigs(masks [][]bool) ([]float64, error)
}

// ConfigEvaluatorFunc adapts a function to ConfigEvaluator.
type ConfigEvaluatorFunc func(masks [][]bool) ([]float64, error)

// EvaluateConfigs calls f.
func (f ConfigEvaluatorFunc) EvaluateConfigs(masks [][]bool) ([]float64, error) { return f(masks) }

// Run plans the configurations for the seeds, evaluates them with one
// EvaluateConfigs call and computes the result. A failed evaluation aborts
// the whole matrix.
func (e *CounterfactualEngine) Run(seedIDs []string, ev ConfigEvaluator) (*CounterfactualResult, error) {
	start := time.Now()
	p, err := e.Plan(seedIDs)
	if err != nil {
		return nil, err
	}
	values, err := ev.EvaluateConfigs(p.Masks())
	if err != nil {
		return nil, fmt.Errorf("simic: counterfactual evaluation: %w", err)
	}
	res, err := p.Compute(values)
	if err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// CounterfactualMatrix holds evaluated coalition values.
type CounterfactualMatrix struct {
	// SeedIDs names the seeds; Coalition bit i is SeedIDs[i].
	SeedIDs []string
	// Values maps each evaluated coalition to its value.
	Values map[Coalition]float64
}

// Value returns a coalition's value, or an error wrapping
// ErrMissingCoalition.
func (m *CounterfactualMatrix) Value(c Coalition) (float64, error) {
	v, ok := m.Values[c]
	if !ok {
		return 0, fmt.Errorf("simic: %w: %v", ErrMissingCoalition, m.describe(c))
	}
	return v, nil
}

func (m *CounterfactualMatrix) describe(c Coalition) []string {
	on := []string{}
	for i, id := range m.SeedIDs {
		if c.Has(i) {
			on = append(on, id)
		}
	}
	return on
}

// Interaction returns the pairwise interaction I_ij = f({i,j}) − f({i}) −
// f({j}) + f(∅) (esper-reference.md §5.2); positive means synergy.
func (m *CounterfactualMatrix) Interaction(i, j int) (float64, error) {
	if i == j || i < 0 || j < 0 || i >= len(m.SeedIDs) || j >= len(m.SeedIDs) {
		return 0, fmt.Errorf("simic: interaction of seeds %d and %d among %d", i, j, len(m.SeedIDs))
	}
	var v [4]float64
	for k, c := range [4]Coalition{Coalition(0).With(i).With(j), Coalition(0).With(i), Coalition(0).With(j), 0} {
		x, err := m.Value(c)
		if err != nil {
			return 0, err
		}
		v[k] = x
	}
	return v[0] - v[1] - v[2] + v[3], nil
}

// ExactShapley returns the exact Shapley value of every seed,
// φ_i = Σ_{S ⊆ N∖{i}} |S|!(n−|S|−1)!/n! · (f(S ∪ {i}) − f(S)); it needs all
// 2^n coalitions.
func (m *CounterfactualMatrix) ExactShapley() ([]float64, error) {
	n := len(m.SeedIDs)
	if n > MaxFullFactorialSeeds {
		return nil, fmt.Errorf("simic: exact Shapley over %d seeds exceeds %d", n, MaxFullFactorialSeeds)
	}
	// weight[s] = s!(n−s−1)!/n! = 1/(n·C(n−1, s)), without factorials.
	weight := make([]float64, n)
	for s := 0; s < n; s++ {
		weight[s] = 1 / (float64(n) * binomial(n-1, s))
	}
	phi := make([]float64, n)
	full := FullCoalition(n)
	for c := Coalition(0); c <= full; c++ {
		v, err := m.Value(c)
		if err != nil {
			return nil, err
		}
		for i := 0; i < n; i++ {
			if c.Has(i) {
				continue
			}
			w, err := m.Value(c.With(i))
			if err != nil {
				return nil, err
			}
			phi[i] += weight[c.Len()] * (w - v)
		}
	}
	return phi, nil
}

func binomial(n, k int) float64 {
	r := 1.0
	for j := 1; j <= k; j++ {
		r = r * float64(n-k+j) / float64(j)
	}
	return r
}

// ShapleyEstimate is one seed's Shapley value.
type ShapleyEstimate struct {
	// Mean is the Shapley value (exact, or the mean sampled marginal gain).
	Mean float64
	// Std is the sample standard deviation (n−1) of the sampled marginal
	// gains; 0 when exact or from a single permutation.
	Std float64
	// Samples is the number of permutations behind Mean; 0 when exact.
	Samples int
}

// CounterfactualResult is the attribution computed from one plan's
// evaluations.
type CounterfactualResult struct {
	// SeedIDs names the seeds in index order.
	SeedIDs []string
	// Strategy is the strategy applied.
	Strategy CounterfactualStrategy
	// Matrix holds every evaluated coalition value.
	Matrix *CounterfactualMatrix
	// FullAccuracy is f(all on); BaselineAccuracy is f(all off).
	FullAccuracy, BaselineAccuracy float64
	// Removal[i] is f(all) − f(all without i): what removing seed i costs
	// (the per-step counterfactual contribution).
	Removal []float64
	// Marginal[i] is mean(f | i on) − mean(f | i off) over the evaluated
	// configurations.
	Marginal []float64
	// Shapley holds one value per seed; nil for ablation only.
	Shapley []ShapleyEstimate
	// ShapleyExact reports values from the full factorial.
	ShapleyExact bool
	// Interactions[i][j] is the pairwise interaction I_ij (symmetric, zero
	// diagonal); nil unless every pair was evaluated (full factorial).
	Interactions [][]float64
	// InteractionSum[i] is Σ_j I_ij; BoostReceived[i] is max(0, max_j I_ij).
	// Both are nil when Interactions is.
	InteractionSum, BoostReceived []float64
	// Warnings are carried over from the plan.
	Warnings []string
	// Elapsed is the time spent computing (and, from Run, evaluating).
	Elapsed time.Duration
}

// Compute turns the evaluated values, one per Configs entry and in the same
// order, into attributions. A length mismatch or a non-finite value (a
// failed evaluation) rejects the whole matrix with ErrPartialMatrix.
func (p *CounterfactualPlan) Compute(values []float64) (*CounterfactualResult, error) {
	start := time.Now()
	if len(values) != len(p.Configs) {
		return nil, fmt.Errorf("simic: %w: %d values for %d configurations", ErrPartialMatrix, len(values), len(p.Configs))
	}
	n := len(p.SeedIDs)
	m := &CounterfactualMatrix{SeedIDs: p.SeedIDs, Values: make(map[Coalition]float64, len(values))}
	for k, v := range values {
		if !finite(v) {
			return nil, fmt.Errorf("simic: %w: configuration %v evaluated to %v", ErrPartialMatrix, m.describe(p.Configs[k]), v)
		}
		m.Values[p.Configs[k]] = v
	}
	res := &CounterfactualResult{
		SeedIDs: p.SeedIDs, Strategy: p.Strategy, Matrix: m,
		Removal: make([]float64, n), Marginal: make([]float64, n),
		Warnings: append([]string(nil), p.Warnings...),
	}
	full := FullCoalition(n)
	var err error
	if res.FullAccuracy, err = m.Value(full); err != nil {
		return nil, err
	}
	if res.BaselineAccuracy, err = m.Value(0); err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		off, err := m.Value(full.Without(i))
		if err != nil {
			return nil, err
		}
		res.Removal[i] = res.FullAccuracy - off
		var sumOn, sumOff float64
		var nOn, nOff int
		for _, c := range p.Configs {
			if c.Has(i) {
				sumOn += m.Values[c]
				nOn++
			} else {
				sumOff += m.Values[c]
				nOff++
			}
		}
		res.Marginal[i] = sumOn/float64(nOn) - sumOff/float64(nOff)
	}
	switch p.Strategy {
	case CounterfactualFullFactorial:
		phi, err := m.ExactShapley()
		if err != nil {
			return nil, err
		}
		res.Shapley = make([]ShapleyEstimate, n)
		for i, v := range phi {
			res.Shapley[i] = ShapleyEstimate{Mean: v}
		}
		res.ShapleyExact = true
		if err := res.pairwise(); err != nil {
			return nil, err
		}
	case CounterfactualShapley:
		if res.Shapley, err = sampledShapley(m, p.Permutations, n); err != nil {
			return nil, err
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

func (r *CounterfactualResult) pairwise() error {
	n := len(r.SeedIDs)
	if n < 2 {
		return nil
	}
	r.Interactions = make([][]float64, n)
	for i := range r.Interactions {
		r.Interactions[i] = make([]float64, n)
	}
	r.InteractionSum = make([]float64, n)
	r.BoostReceived = make([]float64, n)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			v, err := r.Matrix.Interaction(i, j)
			if err != nil {
				return err
			}
			r.Interactions[i][j], r.Interactions[j][i] = v, v
			for _, k := range [2]int{i, j} {
				r.InteractionSum[k] += v
				r.BoostReceived[k] = math.Max(r.BoostReceived[k], v)
			}
		}
	}
	return nil
}

// sampledShapley averages each seed's marginal gain over the permutations,
// looking the prefix coalitions up in the matrix.
func sampledShapley(m *CounterfactualMatrix, perms [][]int, n int) ([]ShapleyEstimate, error) {
	gains := make([][]float64, n)
	for _, order := range perms {
		var c Coalition
		prev, err := m.Value(c)
		if err != nil {
			return nil, err
		}
		for _, i := range order {
			c = c.With(i)
			v, err := m.Value(c)
			if err != nil {
				return nil, err
			}
			gains[i] = append(gains[i], v-prev)
			prev = v
		}
	}
	out := make([]ShapleyEstimate, n)
	for i, g := range gains {
		mean := 0.0
		for _, x := range g {
			mean += x
		}
		mean /= float64(len(g))
		std := 0.0
		if len(g) > 1 {
			for _, x := range g {
				std += (x - mean) * (x - mean)
			}
			std = math.Sqrt(std / float64(len(g)-1))
		}
		out[i] = ShapleyEstimate{Mean: mean, Std: std, Samples: len(g)}
	}
	return out, nil
}

// InteractionRegime labels a pairwise interaction.
type InteractionRegime int

// Interaction regimes (G2 regime labels).
const (
	// RegimeNeutral is an interaction within ±0.5.
	RegimeNeutral InteractionRegime = iota
	// RegimeSynergy is an interaction above SynergyThreshold.
	RegimeSynergy
	// RegimeInterference is an interaction below InterferenceThreshold.
	RegimeInterference
	// RegimeRecovering is interference whose derivative exceeds
	// RecoveringDerivative.
	RegimeRecovering
)

var regimeNames = [...]string{"neutral", "synergy", "interference", "recovering"}

// String returns the regime's name ("synergy").
func (r InteractionRegime) String() string {
	if r < 0 || int(r) >= len(regimeNames) {
		return fmt.Sprintf("InteractionRegime(%d)", int(r))
	}
	return regimeNames[r]
}

// ClassifyInteraction labels an interaction value given its change per
// epoch (derivative).
func ClassifyInteraction(value, derivative float64) InteractionRegime {
	switch {
	case value > SynergyThreshold:
		return RegimeSynergy
	case value < InterferenceThreshold && derivative > RecoveringDerivative:
		return RegimeRecovering
	case value < InterferenceThreshold:
		return RegimeInterference
	}
	return RegimeNeutral
}
