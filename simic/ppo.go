package simic

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// PPO defaults (esper-reference.md §5.1 and §5.4).
const (
	DefaultLR              = 3e-4  // G2 TrainingConfig.lr
	DefaultAdamEps         = 1e-5  // G2 PPOAgent Adam eps
	DefaultClipRatio       = 0.2   // G2 clip_ratio
	DefaultValueCoef       = 0.5   // G2 value_coef
	DefaultEntropyCoef     = 0.05  // G2 DEFAULT_ENTROPY_COEF
	DefaultEntropyCoefMin  = 0.01  // G2 DEFAULT_ENTROPY_COEF_MIN
	DefaultTargetKL        = 0.015 // G2 target_kl
	DefaultMaxGradNorm     = 5.0   // G2 PPO grad-norm clip
	DefaultValueClip       = 10.0  // G2 DEFAULT_VALUE_CLIP
	KLStopFactor           = 1.5   // early stop when approx_kl > 1.5·target_kl
	LogRatioClamp          = 20.0  // per-head log-ratio clamp
	JointLogRatioClamp     = 30.0  // joint log-ratio clamp (statistics)
	ForcedValueWeight      = 0.2   // value weight of forced steps
	MaxConsecutiveSkips    = 3     // fully skipped updates before an error
	explainedVarianceFloor = 1.0   // return-variance floor of ExplainedVariance
)

// ErrUpdateSkipped is wrapped when MaxConsecutiveSkips updates in a row
// were skipped because every loss was non-finite.
var ErrUpdateSkipped = errors.New("PPO updates skipped: non-finite loss")

// PPOOptions configure NewPPO; the zero value selects the defaults.
type PPOOptions struct {
	// LR is Adam's learning rate; 0 means DefaultLR.
	LR float64
	// AdamEps is Adam's epsilon; 0 means DefaultAdamEps.
	AdamEps float64
	// ClipRatio is ε of the clipped surrogate, in (0, 1); 0 means
	// DefaultClipRatio.
	ClipRatio float64
	// Gamma is the discount in (0, 1]; 0 means DefaultGamma.
	Gamma float64
	// GAELambda is λ in [0, 1]; 0 means DefaultGAELambda (use a tiny
	// positive value for one-step advantages).
	GAELambda float64
	// Epochs is K, the passes over the batch per update (≥ 1); 0 means 1
	// (G2 recurrent_n_epochs).
	Epochs int
	// MinibatchSize is the number of transitions per gradient step; 0
	// means the whole batch (no minibatching). Minibatches are drawn
	// from a seeded shuffle every epoch.
	MinibatchSize int
	// ValueCoef weights the value loss; 0 means DefaultValueCoef.
	ValueCoef float64
	// EntropyCoef is the entropy-bonus weight at the start; 0 means
	// DefaultEntropyCoef. NoEntropyBonus turns the bonus off.
	EntropyCoef    float64
	NoEntropyBonus bool
	// EntropyAnnealUpdates > 0 anneals the entropy weight linearly from
	// EntropyCoef to EntropyCoefEnd over that many updates.
	EntropyAnnealUpdates int
	// EntropyCoefEnd is the annealed entropy weight's end value; 0 means
	// DefaultEntropyCoefMin.
	EntropyCoefEnd float64
	// HeadEntropyWeights multiply the entropy bonus per head (G2 per-head
	// multipliers); nil means 1 for every head.
	HeadEntropyWeights []float64
	// EntropyFloors and FloorPenaltyCoefs, per head, add the penalty
	// Σ_h coef_h·s·max(0, floor_h − mean entropy_h)²; nil means no floor
	// penalty. Both must be given together.
	EntropyFloors, FloorPenaltyCoefs []float64
	// TotalUpdates is the planned number of updates, for the floor
	// schedule factor s (EntropyFloorSchedule); 0 means s = 1.
	TotalUpdates int
	// TargetKL is the KL target; an update stops before the optimiser
	// step of a minibatch whose approx KL exceeds KLStopFactor·TargetKL.
	// 0 means DefaultTargetKL; NoKLStop disables the early stop.
	TargetKL float64
	NoKLStop bool
	// MaxGradNorm is the global gradient-norm clip; 0 means
	// DefaultMaxGradNorm.
	MaxGradNorm float64
	// ClipValue clips value predictions to ±ValueClip around the rollout
	// values (only with Epochs = 1, as in G2); ValueClip 0 means
	// DefaultValueClip.
	ClipValue bool
	ValueClip float64
	// NoAdvantageNorm keeps raw advantages.
	NoAdvantageNorm bool
	// NoValueNorm trains the critic on raw returns (no ValueNormalizer).
	NoValueNorm bool
	// ValueNorm configures the value normaliser.
	ValueNorm NormOptions
	// Relevance, if set, returns for an action which heads are causally
	// relevant (per-head advantage masks, esper-reference.md §5.4); nil
	// means all heads always are. Steps where every relevant head had a
	// single valid option are "forced": no actor loss, value weight
	// ForcedValueWeight.
	Relevance func(actions []int) []bool
	// Seed seeds action sampling and minibatch shuffles.
	Seed uint64
}

func (o PPOOptions) withDefaults(numHeads int) (PPOOptions, error) {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.LR, DefaultLR)
	def(&o.AdamEps, DefaultAdamEps)
	def(&o.ClipRatio, DefaultClipRatio)
	def(&o.Gamma, DefaultGamma)
	def(&o.GAELambda, DefaultGAELambda)
	def(&o.ValueCoef, DefaultValueCoef)
	def(&o.EntropyCoef, DefaultEntropyCoef)
	def(&o.EntropyCoefEnd, DefaultEntropyCoefMin)
	def(&o.TargetKL, DefaultTargetKL)
	def(&o.MaxGradNorm, DefaultMaxGradNorm)
	def(&o.ValueClip, DefaultValueClip)
	if o.Epochs == 0 {
		o.Epochs = 1
	}
	switch {
	case o.Epochs < 1:
		return o, fmt.Errorf("simic: PPO Epochs %d must be >= 1", o.Epochs)
	case o.ClipValue && o.Epochs > 1:
		return o, fmt.Errorf("simic: PPO ClipValue needs Epochs = 1 (got %d): clipped values against stale rollout values bias later epochs", o.Epochs)
	case o.MinibatchSize < 0:
		return o, fmt.Errorf("simic: PPO MinibatchSize %d must be >= 0", o.MinibatchSize)
	case !(o.ClipRatio > 0 && o.ClipRatio < 1):
		return o, fmt.Errorf("simic: PPO ClipRatio %v must lie in (0, 1)", o.ClipRatio)
	case o.EntropyAnnealUpdates < 0 || o.TotalUpdates < 0:
		return o, fmt.Errorf("simic: PPO EntropyAnnealUpdates %d and TotalUpdates %d must be >= 0", o.EntropyAnnealUpdates, o.TotalUpdates)
	}
	if err := checkGAEParams(o.Gamma, o.GAELambda); err != nil {
		return o, err
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"LR", o.LR}, {"AdamEps", o.AdamEps}, {"ValueCoef", o.ValueCoef}, {"EntropyCoef", o.EntropyCoef},
		{"EntropyCoefEnd", o.EntropyCoefEnd}, {"TargetKL", o.TargetKL}, {"MaxGradNorm", o.MaxGradNorm}, {"ValueClip", o.ValueClip}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			return o, fmt.Errorf("simic: PPO %s %v must be positive and finite", f.name, f.v)
		}
	}
	if o.HeadEntropyWeights != nil && len(o.HeadEntropyWeights) != numHeads {
		return o, fmt.Errorf("simic: PPO has %d HeadEntropyWeights for %d heads", len(o.HeadEntropyWeights), numHeads)
	}
	if (o.EntropyFloors == nil) != (o.FloorPenaltyCoefs == nil) {
		return o, errors.New("simic: PPO EntropyFloors and FloorPenaltyCoefs go together")
	}
	if o.EntropyFloors != nil && (len(o.EntropyFloors) != numHeads || len(o.FloorPenaltyCoefs) != numHeads) {
		return o, fmt.Errorf("simic: PPO has %d EntropyFloors and %d FloorPenaltyCoefs for %d heads", len(o.EntropyFloors), len(o.FloorPenaltyCoefs), numHeads)
	}
	return o, nil
}

// PPO is the proximal-policy-optimisation agent: a Policy, its Adam
// optimiser (AdamW without weight decay, eps 1e-5) and the value
// normaliser.
type PPO[O any] struct {
	policy    Policy[O]
	spec      EnvSpec
	opts      PPOOptions
	opt       *optim.AdamW
	valueNorm *ValueNormalizer
	pcg       *rand.PCG // rng's source, whose state a checkpoint saves
	rng       *rand.Rand
	updates   int // updates that took at least one optimiser step
	skips     int // consecutive fully skipped updates
}

// NewPPO builds the agent for policy acting in environments described by
// spec. It builds the optimiser over policy.Parameters().
func NewPPO[O any](policy Policy[O], spec EnvSpec, o PPOOptions) (*PPO[O], error) {
	if policy == nil {
		return nil, errors.New("simic: NewPPO: nil policy")
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	o, err := o.withDefaults(len(spec.HeadSizes))
	if err != nil {
		return nil, err
	}
	params := policy.Parameters()
	if len(params) == 0 {
		return nil, errors.New("simic: NewPPO: the policy has no parameters")
	}
	opt, err := optim.NewAdamW(params, optim.AdamWOptions{LR: o.LR, Eps: o.AdamEps, NoWeightDecay: true})
	if err != nil {
		return nil, fmt.Errorf("simic: NewPPO: %w", err)
	}
	vn, err := NewValueNormalizer(o.ValueNorm)
	if err != nil {
		return nil, err
	}
	pcg := newPCG(o.Seed)
	return &PPO[O]{policy: policy, spec: spec, opts: o, opt: opt, valueNorm: vn, pcg: pcg, rng: rand.New(pcg)}, nil
}

// Policy returns the policy being trained.
func (p *PPO[O]) Policy() Policy[O] { return p.policy }

// Options returns the options in effect (defaults filled in).
func (p *PPO[O]) Options() PPOOptions { return p.opts }

// ValueNormalizer returns the value normaliser (for checkpoints).
func (p *PPO[O]) ValueNormalizer() *ValueNormalizer { return p.valueNorm }

// Rand is the agent's seeded generator (action sampling).
func (p *PPO[O]) Rand() *rand.Rand { return p.rng }

// Updates is the number of updates performed (skipped ones excluded).
func (p *PPO[O]) Updates() int { return p.updates }

// Optimizer returns the policy's Adam optimizer (its StateDict is what a
// checkpoint saves).
func (p *PPO[O]) Optimizer() *optim.AdamW { return p.opt }

// SetUpdates sets the count of performed updates, which drives the
// entropy annealing and floor schedules (a resumed run continues it).
func (p *PPO[O]) SetUpdates(n int) { p.updates = n }

// valueScale is the factor that turns critic outputs into return units.
func (p *PPO[O]) valueScale() float64 {
	if p.opts.NoValueNorm {
		return 1
	}
	return p.valueNorm.Std()
}

// EntropyCoef is the entropy weight for the next update (annealed).
func (p *PPO[O]) EntropyCoef() float64 {
	if p.opts.NoEntropyBonus {
		return 0
	}
	o := p.opts
	if o.EntropyAnnealUpdates == 0 {
		return o.EntropyCoef
	}
	f := math.Min(1, float64(p.updates)/float64(o.EntropyAnnealUpdates))
	return o.EntropyCoef + f*(o.EntropyCoefEnd-o.EntropyCoef)
}

// SetLR changes the learning rate (for schedules).
func (p *PPO[O]) SetLR(lr float64) error {
	if !(lr >= 0) || math.IsInf(lr, 0) {
		return fmt.Errorf("simic: SetLR(%v): want a finite rate >= 0", lr)
	}
	p.opt.SetLR(lr)
	return nil
}

// EntropyFloorSchedule is the floor-penalty factor s at progress
// step/total (clamped to [0, 1]): 1.5 before 25 %, 1.0 before 75 %, then
// linear from 1.0 down to 0.5 at the end (esper-reference.md §5.4).
func EntropyFloorSchedule(step, total int) (float64, error) {
	if total <= 0 {
		return 0, fmt.Errorf("simic: EntropyFloorSchedule: total %d must be > 0", total)
	}
	p := math.Max(0, math.Min(1, float64(step)/float64(total)))
	switch {
	case p < 0.25:
		return 1.5, nil
	case p < 0.75:
		return 1.0, nil
	default:
		return 1.0 - 0.5*(p-0.75)/0.25, nil
	}
}

// ExplainedVariance is 1 − Var(returns − values)/max(Var(returns), 1),
// with floored reporting that the return variance was below the floor.
// Fewer than two samples is an error.
func ExplainedVariance(values, returns []float64) (ev float64, floored bool, err error) {
	if len(values) != len(returns) {
		return 0, false, fmt.Errorf("simic: ExplainedVariance: %d values, %d returns", len(values), len(returns))
	}
	if len(values) < 2 {
		return 0, false, fmt.Errorf("simic: ExplainedVariance: degenerate batch of %d", len(values))
	}
	res := make([]float64, len(values))
	for i := range values {
		res[i] = returns[i] - values[i]
	}
	vr := variance(returns)
	if vr < explainedVarianceFloor {
		vr, floored = explainedVarianceFloor, true
	}
	return 1 - variance(res)/vr, floored, nil
}

func variance(x []float64) float64 {
	m := 0.0
	for _, v := range x {
		m += v
	}
	m /= float64(len(x))
	s := 0.0
	for _, v := range x {
		s += (v - m) * (v - m)
	}
	return s / float64(len(x))
}

// UpdateStats reports one PPO update.
type UpdateStats struct {
	// Performed is false when every minibatch was skipped (non-finite).
	Performed bool
	// Steps is the number of optimiser steps taken; Skipped the
	// minibatches skipped for a non-finite loss.
	Steps, Skipped int
	// Epochs is the number of epochs started; EarlyStopped reports a KL
	// early stop (at epoch StopEpoch, 0-based).
	Epochs       int
	EarlyStopped bool
	StopEpoch    int
	// PolicyLoss, ValueLoss, EntropyLoss and FloorPenalty are the means
	// over the minibatches that stepped; Entropy the mean normalised
	// entropy per head (NaN for heads with no relevant step).
	PolicyLoss, ValueLoss, EntropyLoss, FloorPenalty float64
	Entropy                                          []float64
	// NotLearnable marks heads with no relevant step in the batch (their
	// floor penalty is skipped).
	NotLearnable []bool
	// ApproxKL is the last minibatch's KL estimate; MaxKL the largest.
	ApproxKL, MaxKL float64
	// ClipFraction is, per head, the fraction of relevant steps whose
	// ratio left [1−ε, 1+ε] (means over stepped minibatches).
	ClipFraction []float64
	// FirstRatioMaxDev is max |r − 1| over the first minibatch (0 by
	// construction: the reference pass anchors the ratio).
	FirstRatioMaxDev float64
	// RatioMax and RatioMin are the extremes of the joint ratio.
	RatioMax, RatioMin float64
	// GradNorm is the last pre-clip gradient norm.
	GradNorm float64
	// ExplainedVariance of the critic over the batch (return units) and
	// whether the return variance was floored.
	ExplainedVariance float64
	EVFloored         bool
	// AdvMean and AdvStd are the advantage statistics before
	// normalisation; ReturnMean the mean return; ValueStd the value
	// normaliser's scale after the update.
	AdvMean, AdvStd, ReturnMean, ValueStd float64
	// EntropyCoef is the entropy weight used.
	EntropyCoef float64
	// Transitions is the batch size.
	Transitions int
}

// sample is one flattened buffer entry.
type sample struct{ env, t int }

// Update runs one PPO update on the contents of buf and returns its
// statistics (it does not reset buf). See esper-reference.md §5.4.
func (p *PPO[O]) Update(buf *Buffer[O]) (*UpdateStats, error) {
	o := p.opts
	nh := len(p.spec.HeadSizes)
	if buf.Total() == 0 {
		return nil, errors.New("simic: PPO.Update: empty rollout buffer")
	}
	// 1. GAE in return units, then the value normaliser.
	if err := buf.ComputeGAE(o.Gamma, o.GAELambda, p.valueScale()); err != nil {
		return nil, err
	}
	var idx []sample
	var rets, vals []float64
	for env := 0; env < buf.NumEnvs(); env++ {
		for t := 0; t < buf.Len(env); t++ {
			idx = append(idx, sample{env, t})
			rets = append(rets, buf.Return(env, t))
			vals = append(vals, buf.At(env, t).Value*p.valueScale())
		}
	}
	st := &UpdateStats{Transitions: len(idx), EntropyCoef: p.EntropyCoef(), RatioMin: math.Inf(1), RatioMax: math.Inf(-1)}
	st.ExplainedVariance, st.EVFloored, _ = ExplainedVariance(vals, rets)
	for _, r := range rets {
		st.ReturnMean += r
	}
	st.ReturnMean /= float64(len(rets))
	if !o.NoValueNorm {
		if err := p.valueNorm.Update(rets); err != nil {
			return nil, err
		}
	}
	st.ValueStd = p.valueScale()
	// 2. Advantages.
	st.AdvMean, st.AdvStd = math.NaN(), math.NaN()
	if !o.NoAdvantageNorm {
		as := buf.NormalizeAdvantages()
		st.AdvMean, st.AdvStd = as.Mean, as.Std
	}
	n := len(idx)
	mb := o.MinibatchSize
	if mb == 0 || mb > n {
		mb = n
	}
	// Per-sample constants.
	rel := make([][]float64, n) // [n][h] 0/1 causal relevance
	forced := make([]bool, n)
	for i, s := range idx {
		tr := buf.At(s.env, s.t)
		rel[i] = make([]float64, nh)
		forced[i] = true
		for h := 0; h < nh; h++ {
			if tr.Relevant == nil || tr.Relevant[h] {
				rel[i][h] = 1
				if tr.Masks.numValid(h, p.spec.HeadSizes[h]) > 1 {
					forced[i] = false
				}
			}
		}
	}
	// 3. Anchored reference pass at θ0.
	ref := make([][]float64, n)
	var err error
	autograd.NoGrad(func() {
		for lo := 0; lo < n && err == nil; lo += mb {
			hi := min(lo+mb, n)
			var ev *Evaluation
			ev, err = p.evaluate(buf, idx[lo:hi])
			if err != nil {
				return
			}
			cols := make([][]float64, nh)
			for h := range cols {
				cols[h] = ev.LogProbs[h].Value.Float64s()
			}
			for i := lo; i < hi; i++ {
				ref[i] = make([]float64, nh)
				for h := range cols {
					ref[i][h] = cols[h][i-lo]
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	floorS := 1.0
	if o.TotalUpdates > 0 {
		floorS, _ = EntropyFloorSchedule(p.updates, o.TotalUpdates)
	}
	st.Entropy = make([]float64, nh)
	st.ClipFraction = make([]float64, nh)
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	first := true
epochs:
	for k := 0; k < o.Epochs; k++ {
		st.Epochs = k + 1
		if mb < n {
			p.rng.Shuffle(n, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		}
		for lo := 0; lo < n; lo += mb {
			hi := min(lo+mb, n)
			rows := perm[lo:hi]
			batch := make([]sample, len(rows))
			for i, r := range rows {
				batch[i] = idx[r]
			}
			ev, err := p.evaluate(buf, batch)
			if err != nil {
				return nil, err
			}
			in := p.lossInputs(buf, rows, batch, rel, forced, ref)
			lp := lossParams{clip: o.ClipRatio, valueCoef: o.ValueCoef, entropyCoef: st.EntropyCoef,
				headEntropy: o.HeadEntropyWeights, floors: o.EntropyFloors, floorCoefs: o.FloorPenaltyCoefs, floorScale: floorS,
				clipValue: o.ClipValue, valueClip: o.ValueClip}
			loss, parts := ppoLoss(ev, in, lp)
			if first {
				st.FirstRatioMaxDev = parts.ratioMaxDev
				st.NotLearnable = parts.notLearnable
				first = false
			}
			st.ApproxKL = parts.kl
			st.MaxKL = math.Max(st.MaxKL, parts.kl)
			if !o.NoKLStop && parts.kl > KLStopFactor*o.TargetKL {
				st.EarlyStopped, st.StopEpoch = true, k
				break epochs
			}
			lv := loss.Item()
			if !finite(lv) {
				st.Skipped++
				continue
			}
			p.opt.ZeroGrad()
			autograd.Backward(loss)
			st.GradNorm = optim.ClipGradNorm(p.opt.Arena(), o.MaxGradNorm).Item()
			if !finite(st.GradNorm) {
				st.Skipped++
				continue
			}
			p.opt.Step()
			st.Steps++
			st.PolicyLoss += parts.policy
			st.ValueLoss += parts.value
			st.EntropyLoss += parts.entropy
			st.FloorPenalty += parts.floor
			st.RatioMax = math.Max(st.RatioMax, parts.ratioMax)
			st.RatioMin = math.Min(st.RatioMin, parts.ratioMin)
			for h := 0; h < nh; h++ {
				st.Entropy[h] += parts.headEntropy[h]
				st.ClipFraction[h] += parts.clipFrac[h]
			}
		}
	}
	if st.Steps > 0 {
		f := 1 / float64(st.Steps)
		st.PolicyLoss *= f
		st.ValueLoss *= f
		st.EntropyLoss *= f
		st.FloorPenalty *= f
		for h := 0; h < nh; h++ {
			st.Entropy[h] *= f
			st.ClipFraction[h] *= f
			if st.NotLearnable != nil && st.NotLearnable[h] {
				st.Entropy[h] = math.NaN()
			}
		}
		st.Performed = true
		p.updates++
		p.skips = 0
		return st, nil
	}
	if st.Skipped > 0 {
		p.skips++
		if p.skips >= MaxConsecutiveSkips {
			return st, fmt.Errorf("simic: %w (%d updates in a row)", ErrUpdateSkipped, p.skips)
		}
	}
	return st, nil
}

// evaluate runs the policy on the samples of buf.
func (p *PPO[O]) evaluate(buf *Buffer[O], batch []sample) (*Evaluation, error) {
	obs := make([]O, len(batch))
	masks := make([]Masks, len(batch))
	acts := make([][]int, len(batch))
	anyMask := false
	for i, s := range batch {
		tr := buf.At(s.env, s.t)
		obs[i], masks[i], acts[i] = tr.Obs, tr.Masks, tr.Actions
		anyMask = anyMask || tr.Masks != nil
	}
	if !anyMask {
		masks = nil
	}
	ev, err := p.policy.Evaluate(obs, masks, acts)
	if err != nil {
		return nil, fmt.Errorf("simic: PPO: policy.Evaluate: %w", err)
	}
	if len(ev.LogProbs) != len(p.spec.HeadSizes) || len(ev.Entropies) != len(p.spec.HeadSizes) || ev.Value == nil {
		return nil, fmt.Errorf("simic: PPO: policy.Evaluate returned %d log-prob and %d entropy heads for %d heads", len(ev.LogProbs), len(ev.Entropies), len(p.spec.HeadSizes))
	}
	return ev, nil
}

// lossInputs gathers a minibatch's constants.
func (p *PPO[O]) lossInputs(buf *Buffer[O], rows []int, batch []sample, rel [][]float64, forced []bool, ref [][]float64) lossInputs {
	in := lossInputs{oldLogp: make([][]float64, len(rows)), adv: make([]float64, len(rows)), rel: make([][]float64, len(rows)),
		forced: make([]bool, len(rows)), returns: make([]float64, len(rows)), oldValues: make([]float64, len(rows))}
	scale := p.valueScale()
	for i, r := range rows {
		s := batch[i]
		in.oldLogp[i] = ref[r]
		in.adv[i] = buf.Advantage(s.env, s.t)
		in.rel[i] = rel[r]
		in.forced[i] = forced[r]
		in.returns[i] = buf.Return(s.env, s.t) / scale
		in.oldValues[i] = buf.At(s.env, s.t).Value
	}
	return in
}

// lossInputs are the per-sample constants of a minibatch.
type lossInputs struct {
	oldLogp   [][]float64 // [B][H] reference log-probs
	adv       []float64   // [B]
	rel       [][]float64 // [B][H] causal relevance 0/1
	forced    []bool      // [B]
	returns   []float64   // [B] normalised return targets
	oldValues []float64   // [B] rollout values (normalised units)
}

// lossParams are the loss coefficients.
type lossParams struct {
	clip, valueCoef, entropyCoef float64
	headEntropy                  []float64
	floors, floorCoefs           []float64
	floorScale                   float64
	clipValue                    bool
	valueClip                    float64
}

// lossParts are a minibatch's loss terms and host statistics.
type lossParts struct {
	policy, value, entropy, floor float64
	kl                            float64
	headEntropy, clipFrac         []float64
	notLearnable                  []bool
	ratioMaxDev                   float64
	ratioMax, ratioMin            float64
}

func constVec(dt tensor.DType, v []float64) *autograd.Var {
	return autograd.Const(tensor.FromFloat64s(dt, v, len(v)))
}

// maskedMean is Σ x·w / Σ w (w constant), or nil when Σ w = 0.
func maskedMean(x *autograd.Var, w []float64) *autograd.Var {
	s := 0.0
	for _, v := range w {
		s += v
	}
	if s == 0 {
		return nil
	}
	return autograd.MulScalar(autograd.SumAll(autograd.Mul(x, constVec(x.DType(), w))), 1/s)
}

// ppoLoss builds the PPO loss of one minibatch (esper-reference.md §5.4
// step 4) and measures its KL and ratio statistics:
//
//	policy  = Σ_h masked-mean_h(−min(r_h·A, clip(r_h, 1±ε)·A)), actor weight 0 on forced steps
//	value   = 0.5·weighted-mean((V − R̂)²), weight ForcedValueWeight on forced steps
//	entropy = −Σ_h w_h·masked-mean_h(H_h)
//	floor   = Σ_h c_h·s·max(0, floor_h − masked-mean_h(H_h))²
//	total   = policy + valueCoef·value + entropyCoef·entropy + floor
func ppoLoss(ev *Evaluation, in lossInputs, lp lossParams) (*autograd.Var, lossParts) {
	bsz := len(in.adv)
	nh := len(ev.LogProbs)
	dt := ev.Value.DType()
	parts := lossParts{headEntropy: make([]float64, nh), clipFrac: make([]float64, nh), notLearnable: make([]bool, nh),
		ratioMax: math.Inf(-1), ratioMin: math.Inf(1)}
	joint := make([]float64, bsz)
	var policy, entropy, floor *autograd.Var
	add := func(acc, x *autograd.Var) *autograd.Var {
		if acc == nil {
			return x
		}
		return autograd.Add(acc, x)
	}
	for h := 0; h < nh; h++ {
		old := make([]float64, bsz)
		actorW := make([]float64, bsz) // relevance, 0 on forced steps
		entW := make([]float64, bsz)   // relevance
		for b := 0; b < bsz; b++ {
			old[b] = in.oldLogp[b][h]
			entW[b] = in.rel[b][h]
			if !in.forced[b] {
				actorW[b] = in.rel[b][h]
			}
		}
		logr := autograd.Clamp(autograd.Sub(ev.LogProbs[h], constVec(dt, old)), -LogRatioClamp, LogRatioClamp)
		ratio := autograd.Exp(logr)
		// Host statistics from the forward values.
		lr := logr.Value.Float64s()
		clipped := 0.0
		relN := 0.0
		for b, v := range lr {
			r := math.Exp(v)
			if entW[b] > 0 {
				parts.kl += ((r - 1) - v) / float64(bsz)
				relN++
				if math.Abs(r-1) > lp.clip {
					clipped++
				}
				parts.ratioMaxDev = math.Max(parts.ratioMaxDev, math.Abs(r-1))
				joint[b] += v
			}
		}
		if relN > 0 {
			parts.clipFrac[h] = clipped / relN
		}
		A := constVec(dt, in.adv)
		surr := autograd.Minimum(autograd.Mul(ratio, A), autograd.Mul(autograd.Clamp(ratio, 1-lp.clip, 1+lp.clip), A))
		if m := maskedMean(autograd.Neg(surr), actorW); m != nil {
			policy = add(policy, m)
		}
		meanEnt := maskedMean(ev.Entropies[h], entW)
		if meanEnt == nil {
			parts.notLearnable[h] = true
			continue
		}
		parts.headEntropy[h] = meanEnt.Item()
		w := 1.0
		if lp.headEntropy != nil {
			w = lp.headEntropy[h]
		}
		entropy = add(entropy, autograd.MulScalar(meanEnt, -w))
		if lp.floors != nil && lp.floorCoefs[h] > 0 {
			gap := autograd.Relu(autograd.AddScalar(autograd.Neg(meanEnt), lp.floors[h]))
			floor = add(floor, autograd.MulScalar(autograd.Square(gap), lp.floorCoefs[h]*lp.floorScale))
		}
	}
	for _, v := range joint {
		r := math.Exp(math.Max(-JointLogRatioClamp, math.Min(JointLogRatioClamp, v)))
		parts.ratioMax = math.Max(parts.ratioMax, r)
		parts.ratioMin = math.Min(parts.ratioMin, r)
	}
	// Value loss.
	vw := make([]float64, bsz)
	for b := range vw {
		vw[b] = 1
		if in.forced[b] {
			vw[b] = ForcedValueWeight
		}
	}
	diff := autograd.Sub(ev.Value, constVec(dt, in.returns))
	sq := autograd.Square(diff)
	if lp.clipValue {
		old := constVec(dt, in.oldValues)
		vc := autograd.Add(old, autograd.Clamp(autograd.Sub(ev.Value, old), -lp.valueClip, lp.valueClip))
		sq = autograd.Maximum(sq, autograd.Square(autograd.Sub(vc, constVec(dt, in.returns))))
	}
	value := autograd.MulScalar(maskedMean(sq, vw), 0.5)
	total := autograd.MulScalar(value, lp.valueCoef)
	parts.value = value.Item()
	if policy != nil {
		total = autograd.Add(total, policy)
		parts.policy = policy.Item()
	}
	if entropy != nil {
		parts.entropy = entropy.Item()
		if lp.entropyCoef != 0 {
			total = autograd.Add(total, autograd.MulScalar(entropy, lp.entropyCoef))
		}
	}
	if floor != nil {
		parts.floor = floor.Item()
		total = autograd.Add(total, floor)
	}
	return total, parts
}
