package simic

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
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
//
// The update runs on the policy's device with no host read per
// minibatch: the per-sample constants (advantages, return targets,
// rollout values, the causal relevance weights) go there in one copy,
// the reference log-probabilities are computed and kept there, and every
// figure UpdateStats reports is accumulated there and read back in one
// copy at the end. The finiteness gate and the KL early stop are decided
// there too: a minibatch whose loss or gradient norm is not finite, or
// that comes after the KL stop in its epoch, is still computed but its
// optimiser step is skipped on the device (optim.AdamW.StepSkipIf), so
// the parameters, the optimiser's state and its step count are those of
// the minibatches that stepped. Between epochs (Epochs > 1 with the KL
// stop on) one read of the stop flag ends the update early rather than
// computing whole epochs to discard. What stays on the host is host data
// by construction: GAE over the rollout's rewards and values, the value
// normaliser's statistics of the returns, the advantage normalisation
// and the explained variance.
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
	st := &UpdateStats{Transitions: len(idx), EntropyCoef: p.EntropyCoef()}
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
	// Per-sample constants, on the host.
	hc := hostConsts{rel: make([][]float64, n), forced: make([]bool, n), adv: make([]float64, n), returns: make([]float64, n), oldValues: make([]float64, n)}
	scale := p.valueScale()
	for i, s := range idx {
		tr := buf.At(s.env, s.t)
		hc.rel[i] = make([]float64, nh)
		hc.forced[i] = true
		for h := 0; h < nh; h++ {
			if tr.Relevant == nil || tr.Relevant[h] {
				hc.rel[i][h] = 1
				if tr.Masks.numValid(h, p.spec.HeadSizes[h]) > 1 {
					hc.forced[i] = false
				}
			}
		}
		hc.adv[i] = buf.Advantage(s.env, s.t)
		hc.returns[i] = buf.Return(s.env, s.t) / scale
		hc.oldValues[i] = tr.Value
	}
	floorS := 1.0
	if o.TotalUpdates > 0 {
		floorS, _ = EntropyFloorSchedule(p.updates, o.TotalUpdates)
	}
	lp := lossParams{clip: o.ClipRatio, valueCoef: o.ValueCoef, entropyCoef: st.EntropyCoef,
		headEntropy: o.HeadEntropyWeights, floors: o.EntropyFloors, floorCoefs: o.FloorPenaltyCoefs, floorScale: floorS,
		clipValue: o.ClipValue, valueClip: o.ValueClip}
	// 3. Anchored reference pass at θ0, kept on the device.
	var refs []*autograd.Var
	var uc *updateConsts
	var err error
	autograd.NoGrad(func() {
		for lo := 0; lo < n && err == nil; lo += mb {
			hi := min(lo+mb, n)
			var ev *Evaluation
			if ev, err = p.evaluate(buf, idx[lo:hi]); err != nil {
				return
			}
			if uc == nil {
				if uc, err = hc.toDevice(ev.Value.Value.Device(), ev.Value.DType(), &lp); err != nil {
					return
				}
			}
			if ev.LogProbsAll != nil {
				refs = append(refs, autograd.Const(ev.LogProbsAll.Value)) // [H, b]
				continue
			}
			cols := make([]*autograd.Var, nh)
			for h := range cols {
				cols[h] = autograd.Const(ev.LogProbs[h].Value)
			}
			refs = append(refs, autograd.Stack(cols, 0)) // [H, b]
		}
		if err == nil {
			uc.ref = autograd.Concat(refs, 1).Value // [H, n]
		}
	})
	if err != nil {
		return nil, err
	}
	acc := newUpdateAcc(uc.dev, nh)
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	rowIdx := make([]int64, n)
	first := true
	for k := 0; k < o.Epochs; k++ {
		if k > 0 && !o.NoKLStop {
			// The early stop between epochs: one read of the stop flag.
			live, err := hostFloat64s(acc.live.Value)
			if err != nil {
				return nil, err
			}
			if live[0] == 0 {
				break
			}
		}
		st.Epochs = k + 1
		if mb < n {
			p.rng.Shuffle(n, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		}
		for i, r := range perm {
			rowIdx[i] = int64(r)
		}
		rows, err := toDevice(tensor.FromSlice(rowIdx, n), uc.dev)
		if err != nil {
			return nil, err
		}
		for lo := 0; lo < n; lo += mb {
			hi := min(lo+mb, n)
			batch := make([]sample, hi-lo)
			for i, r := range perm[lo:hi] {
				batch[i] = idx[r]
			}
			ev, err := p.evaluate(buf, batch)
			if err != nil {
				return nil, err
			}
			in := uc.gather(rows.Narrow(0, lo, hi-lo), perm[lo:hi], &hc)
			loss, parts := ppoLoss(ev, in, lp)
			if first {
				st.NotLearnable = parts.notLearnable
				acc.firstDev = parts.ratioMaxDev
				first = false
			}
			p.opt.ZeroGrad()
			autograd.Backward(loss)
			gn := optim.ClipGradNorm(p.opt.Arena(), o.MaxGradNorm)
			skip := acc.gate(loss, gn, parts, k, o.NoKLStop, KLStopFactor*o.TargetKL)
			p.opt.StepSkipIf(skip)
			acc.add(parts)
		}
	}
	// The update's one read.
	if err := acc.read(st); err != nil {
		return nil, err
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
	want := []int{len(p.spec.HeadSizes), len(batch)}
	for _, all := range []*autograd.Var{ev.LogProbsAll, ev.EntropiesAll} {
		if all != nil && !tensor.SameShape(all.Shape(), want) {
			return nil, fmt.Errorf("simic: PPO: policy.Evaluate returned all heads as %v, want %v", all.Shape(), want)
		}
	}
	return ev, nil
}

// hostConsts are an update's per-sample constants on the host.
type hostConsts struct {
	rel       [][]float64 // [n][H] causal relevance 0/1
	forced    []bool      // [n]
	adv       []float64   // [n] advantages
	returns   []float64   // [n] normalised return targets
	oldValues []float64   // [n] rollout values (normalised units)
}

// Rows of updateConsts.samples.
const (
	rowAdv = iota
	rowReturns
	rowOldValues
	rowValueW
	rowHeads // then H rows of actor weights, then H rows of entropy weights
)

// weights returns a sample's loss weights: per head the actor's (its
// relevance, 0 on a forced step) and the entropy's (its relevance), and
// the value's (1, ForcedValueWeight on a forced step).
func (c *hostConsts) weights(i, h int) (actor, ent float64) {
	ent = c.rel[i][h]
	if !c.forced[i] {
		actor = ent
	}
	return actor, ent
}

func (c *hostConsts) valueWeight(i int) float64 {
	if c.forced[i] {
		return ForcedValueWeight
	}
	return 1
}

// toDevice copies the constants to dev, in dtype dt, in one copy: the
// per-sample rows and, when lp is not nil, the loss's per-head constants
// (lossParams.vectors), which lp then holds.
func (c *hostConsts) toDevice(dev tensor.Device, dt tensor.DType, lp *lossParams) (*updateConsts, error) {
	n, nh := len(c.adv), 0
	if n > 0 {
		nh = len(c.rel[0])
	}
	rows := rowHeads + 2*nh
	var heads []float64
	if lp != nil {
		heads = lp.headValues(nh)
	}
	v := make([]float64, rows*n, rows*n+len(heads))
	v = append(v, heads...)
	for i := 0; i < n; i++ {
		v[rowAdv*n+i] = c.adv[i]
		v[rowReturns*n+i] = c.returns[i]
		v[rowOldValues*n+i] = c.oldValues[i]
		v[rowValueW*n+i] = c.valueWeight(i)
		for h := 0; h < nh; h++ {
			v[(rowHeads+h)*n+i], v[(rowHeads+nh+h)*n+i] = c.weights(i, h)
		}
	}
	t, err := constOn(dev, dt, v, len(v))
	if err != nil {
		return nil, err
	}
	if lp != nil {
		lp.headVecs = t.Narrow(0, rows*n, len(heads)).Reshape(3, nh)
	}
	return &updateConsts{dev: dev, nh: nh, samples: t.Narrow(0, 0, rows*n).Reshape(rows, n)}, nil
}

// updateConsts are an update's per-sample constants on the policy's
// device: the rows of samples (see rowAdv) and the reference
// log-probabilities ref [H, n], gathered per minibatch.
type updateConsts struct {
	dev     tensor.Device
	nh      int
	samples *tensor.Tensor // [rowHeads + 2H, n]
	ref     *tensor.Tensor // [H, n]
}

// gather returns the loss inputs of the minibatch whose rows are the
// device index rows (I64 [B]) and, on the host, hostRows.
func (u *updateConsts) gather(rows *tensor.Tensor, hostRows []int, c *hostConsts) lossInputs {
	bsz := len(hostRows)
	var s, ref *tensor.Tensor
	autograd.NoGrad(func() {
		s = autograd.IndexSelect(autograd.Const(u.samples), 1, rows).Value
		ref = autograd.IndexSelect(autograd.Const(u.ref), 1, rows).Value
	})
	row := func(t *tensor.Tensor, r int) *tensor.Tensor { return t.Narrow(0, r, 1).Reshape(bsz) }
	in := lossInputs{adv: row(s, rowAdv), returns: row(s, rowReturns), oldValues: row(s, rowOldValues), valueW: row(s, rowValueW),
		oldLogp: ref, actorW: s.Narrow(0, rowHeads, u.nh), entW: s.Narrow(0, rowHeads+u.nh, u.nh),
		actorSum: make([]float64, u.nh), entSum: make([]float64, u.nh)}
	for _, r := range hostRows {
		in.valueSum += c.valueWeight(r)
		for h := 0; h < u.nh; h++ {
			a, e := c.weights(r, h)
			in.actorSum[h] += a
			in.entSum[h] += e
		}
	}
	return in
}

// lossInputs are the per-sample constants of a minibatch: tensors of B
// elements on the policy's device, with the sums of the weights (host
// data, known from the relevance) that normalise the masked means and
// decide which terms exist.
type lossInputs struct {
	oldLogp      *tensor.Tensor // [H, B] reference log-probs
	adv          *tensor.Tensor // [B]
	actorW, entW *tensor.Tensor // [H, B]: relevance (0 on forced steps for the actor)
	valueW       *tensor.Tensor // [B]: 1, ForcedValueWeight on forced steps
	returns      *tensor.Tensor // [B] normalised return targets
	oldValues    *tensor.Tensor // [B] rollout values (normalised units)
	actorSum     []float64      // [H] Σ actorW
	entSum       []float64      // [H] Σ entW
	valueSum     float64        // Σ valueW
}

// lossParams are the loss coefficients.
type lossParams struct {
	clip, valueCoef, entropyCoef float64
	headEntropy                  []float64
	floors, floorCoefs           []float64
	floorScale                   float64
	clipValue                    bool
	valueClip                    float64
	// headVecs caches vectors' result for the update.
	headVecs *tensor.Tensor
}

// lossParts are a minibatch's loss terms and statistics: F64 scalars on
// the policy's device (nil where the term does not exist), the per-head
// figures as F64 vectors [H] (0 for a head with no relevant step;
// headEntropy nil when no head has one), and
// which heads had nothing to learn (host, from the relevance).
type lossParts struct {
	policy, value, entropy, floor *autograd.Var
	kl                            *autograd.Var
	headEntropy, clipFrac         *autograd.Var
	notLearnable                  []bool
	ratioMaxDev                   *autograd.Var
	ratioMax, ratioMin            *autograd.Var
}

// maskedMean is Σ x·w / s, s = Σ w (w constant, s > 0).
func maskedMean(x *autograd.Var, w *tensor.Tensor, s float64) *autograd.Var {
	wv := autograd.Const(w)
	if w.DType() != x.DType() {
		wv = autograd.Cast(wv, x.DType())
	}
	return autograd.MulScalar(autograd.SumAll(autograd.Mul(x, wv)), 1/s)
}

// fullOn returns an F64 tensor of value v on dev, of the given shape
// (none: a scalar, shape []) — a fill, no copy.
func fullOn(dev tensor.Device, v float64, shape ...int) *autograd.Var {
	t, err := tensor.EmptyOn(dev, tensor.F64, shape...)
	if err != nil {
		panic(fmt.Sprintf("simic: allocating %v of F64 on %v: %v", shape, dev, err))
	}
	if dev.IsCPU() {
		t.Fill(v)
	} else {
		kernels.For(dev).Fill(t, v)
	}
	return autograd.Const(t)
}

// stat returns x's value as an F64 constant (detached from the graph).
func stat(x *autograd.Var) *autograd.Var {
	return autograd.Cast(autograd.Const(x.Value), tensor.F64)
}

// flag is 1 where cond holds, else 0 (F64).
func flag(cond *tensor.Tensor, one, zero *autograd.Var) *autograd.Var {
	return autograd.Where(cond, one, zero)
}

// isFinite is the Bool of x − x = 0: false for NaN and ±Inf.
func isFinite(x, zero *autograd.Var) *tensor.Tensor {
	return autograd.Compare(kernels.Eq, autograd.Sub(x, x), zero)
}

// ppoLoss builds the PPO loss of one minibatch (esper-reference.md §5.4
// step 4) and measures its KL and ratio statistics on the device:
//
//	policy  = Σ_h masked-mean_h(−min(r_h·A, clip(r_h, 1±ε)·A)), actor weight 0 on forced steps
//	value   = 0.5·weighted-mean((V − R̂)²), weight ForcedValueWeight on forced steps
//	entropy = −Σ_h w_h·masked-mean_h(H_h)
//	floor   = Σ_h c_h·s·max(0, floor_h − masked-mean_h(H_h))²
//	total   = policy + valueCoef·value + entropyCoef·entropy + floor
//
// Every head is computed at once, as the rows of [H, B] tensors (the
// heads' log-probabilities and entropies: Evaluation's LogProbsAll and
// EntropiesAll, or stacked), so that the number of ops, and of launches
// on a GPU, does not grow with the heads. A head without a relevant step
// for the actor (or for the entropy), or without a floor, is masked out
// of that term's value (Where: a NaN of its own does not reach the
// loss), as if it were left out. Its gradient is zero but not isolated:
// the policy's backward multiplies that zero by the head's values, so a
// NaN in a head's outputs makes the gradient norm NaN, and the update's
// gate then skips the minibatch.
func ppoLoss(ev *Evaluation, in lossInputs, lp lossParams) (*autograd.Var, lossParts) {
	nh := len(ev.LogProbs)
	dt := ev.Value.DType()
	dev := ev.Value.Value.Device()
	bsz := in.adv.Numel()
	parts := lossParts{notLearnable: make([]bool, nh)}
	zero, one := fullOn(dev, 0), fullOn(dev, 1)
	anyActor, anyEnt, anyFloor := false, false, false
	for h := 0; h < nh; h++ {
		anyActor = anyActor || in.actorSum[h] > 0
		if in.entSum[h] == 0 {
			parts.notLearnable[h] = true
			continue
		}
		anyEnt = true
		anyFloor = anyFloor || (lp.floors != nil && lp.floorCoefs[h] > 0)
	}
	asDT := func(t *tensor.Tensor) *autograd.Var {
		v := autograd.Const(t)
		if t.DType() != dt {
			v = autograd.Cast(v, dt)
		}
		return v
	}
	zeroDT := autograd.Cast(zero, dt)
	A := asDT(in.adv)
	logp, ents := ev.LogProbsAll, ev.EntropiesAll
	if logp == nil {
		logp = autograd.Stack(ev.LogProbs, 0)
	}
	logr := autograd.Clamp(autograd.Sub(logp, asDT(in.oldLogp)), -LogRatioClamp, LogRatioClamp) // [H, B]
	ratio := autograd.Exp(logr)
	// Per head (NoGrad, from the constant weights): which heads have a
	// relevant step for the actor and for the entropy, and 1/Σ weight
	// (0 for a head with none).
	var actorOn, entOn *tensor.Tensor
	var invActor, invEnt *autograd.Var
	perHead := func(w *tensor.Tensor) (*tensor.Tensor, *autograd.Var) {
		sum := autograd.Sum(asDT(w), []int{1}, false) // [H]
		on := autograd.Compare(kernels.Gt, sum, zeroDT)
		return on, autograd.Where(on, autograd.Recip(sum), zeroDT)
	}
	var joint *autograd.Var
	autograd.NoGrad(func() {
		actorOn, invActor = perHead(in.actorW)
		entOn, invEnt = perHead(in.entW)
		// Statistics from the forward values, in F64 on the device, over
		// the relevant steps.
		v := stat(logr)
		r := autograd.Exp(v)
		rel64 := autograd.Cast(autograd.Const(in.entW), tensor.F64)
		rel := autograd.Compare(kernels.Gt, rel64, zero)
		kl := autograd.Sub(autograd.AddScalar(r, -1), v)
		parts.kl = autograd.MulScalar(autograd.SumAll(autograd.Where(rel, kl, zero)), 1/float64(bsz))
		drift := autograd.Abs(autograd.AddScalar(r, -1))
		parts.ratioMaxDev = autograd.Max(autograd.Where(rel, drift, zero), nil, false)
		out := flag(autograd.Compare(kernels.Gt, autograd.AddScalar(drift, -lp.clip), zero), one, zero)
		clipped := autograd.Sum(autograd.Where(rel, out, zero), []int{1}, false) // [H]
		relSteps := autograd.Sum(rel64, []int{1}, false)
		parts.clipFrac = autograd.Where(autograd.Compare(kernels.Gt, relSteps, zero), autograd.Div(clipped, relSteps), zero)
		joint = autograd.Sum(autograd.Where(rel, v, zero), []int{0}, false) // [B]
	})
	var policy, entropy, floor *autograd.Var
	if anyActor {
		surr := autograd.Minimum(autograd.Mul(ratio, A), autograd.Mul(autograd.Clamp(ratio, 1-lp.clip, 1+lp.clip), A))
		sums := autograd.Sum(autograd.Mul(autograd.Neg(surr), asDT(in.actorW)), []int{1}, false) // [H]
		policy = autograd.SumAll(autograd.Mul(autograd.Where(actorOn, sums, zeroDT), invActor))
	}
	if anyEnt {
		hv := lp.vectors(dev, dt, nh)
		if ents == nil {
			ents = autograd.Stack(ev.Entropies, 0)
		}
		sums := autograd.Sum(autograd.Mul(ents, asDT(in.entW)), []int{1}, false) // [H]
		meanEnt := autograd.Mul(autograd.Where(entOn, sums, zeroDT), invEnt)     // 0 for a head not learnable
		parts.headEntropy = stat(meanEnt)
		entropy = autograd.SumAll(autograd.Mul(meanEnt, autograd.Const(hv.Narrow(0, 0, 1).Reshape(nh))))
		if anyFloor {
			// The heads with a floor and a relevant step; any other
			// head's gap is its floor's against itself, 0.
			floorV := autograd.Const(hv.Narrow(0, 1, 1).Reshape(nh))
			var coef *autograd.Var
			var on *tensor.Tensor
			autograd.NoGrad(func() {
				coef = autograd.Where(entOn, autograd.Const(hv.Narrow(0, 2, 1).Reshape(nh)), zeroDT)
				on = autograd.Compare(kernels.Gt, coef, zeroDT)
			})
			gap := autograd.Relu(autograd.Sub(floorV, autograd.Where(on, meanEnt, floorV)))
			floor = autograd.SumAll(autograd.Mul(autograd.Square(gap), coef))
		}
	}
	autograd.NoGrad(func() {
		rj := autograd.Exp(autograd.Clamp(joint, -JointLogRatioClamp, JointLogRatioClamp))
		parts.ratioMax = autograd.Max(rj, nil, false)
		parts.ratioMin = autograd.Min(rj, nil, false)
	})
	// Value loss.
	ret := asDT(in.returns)
	diff := autograd.Sub(ev.Value, ret)
	sq := autograd.Square(diff)
	if lp.clipValue {
		old := asDT(in.oldValues)
		vc := autograd.Add(old, autograd.Clamp(autograd.Sub(ev.Value, old), -lp.valueClip, lp.valueClip))
		sq = autograd.Maximum(sq, autograd.Square(autograd.Sub(vc, ret)))
	}
	value := autograd.MulScalar(maskedMean(sq, in.valueW, in.valueSum), 0.5)
	total := autograd.MulScalar(value, lp.valueCoef)
	parts.value = stat(value)
	if policy != nil {
		total = autograd.Add(total, policy)
		parts.policy = stat(policy)
	}
	if entropy != nil {
		parts.entropy = stat(entropy)
		if lp.entropyCoef != 0 {
			total = autograd.Add(total, autograd.MulScalar(entropy, lp.entropyCoef))
		}
	}
	if floor != nil {
		parts.floor = stat(floor)
		total = autograd.Add(total, floor)
	}
	return total, parts
}

// vectors returns the per-head constants of the entropy terms as rows
// of a [3, H] tensor of dtype dt on dev: −w_h (the entropy weight,
// negated), floor_h and c_h·s (the floor penalty's coefficient, 0 for a
// head without a floor) — uploaded once per update with its per-sample
// constants (hostConsts.toDevice sets headVecs), else on each call.
func (lp *lossParams) vectors(dev tensor.Device, dt tensor.DType, nh int) *tensor.Tensor {
	if lp.headVecs != nil && lp.headVecs.Device() == dev && lp.headVecs.DType() == dt && lp.headVecs.Shape()[1] == nh {
		return lp.headVecs
	}
	t, err := constOn(dev, dt, lp.headValues(nh), 3, nh)
	if err != nil {
		panic(fmt.Sprintf("simic: the loss's per-head constants on %v: %v", dev, err))
	}
	lp.headVecs = t
	return t
}

// headValues are vectors' values, its three rows one after another.
func (lp *lossParams) headValues(nh int) []float64 {
	v := make([]float64, 3*nh)
	for h := 0; h < nh; h++ {
		w := 1.0
		if lp.headEntropy != nil {
			w = lp.headEntropy[h]
		}
		v[h] = -w
		if lp.floors != nil && lp.floorCoefs[h] > 0 {
			v[nh+h] = lp.floors[h]
			v[2*nh+h] = lp.floorCoefs[h] * lp.floorScale
		}
	}
	return v
}

// updateAcc accumulates an update's figures on the policy's device, as
// F64 scalars, gated per minibatch on the device by the KL early stop
// and the finiteness of the loss and the gradient norm.
type updateAcc struct {
	zero, one *autograd.Var
	// live is 1 until the KL early stop; ok is 1 for the minibatch being
	// accumulated when it stepped.
	live, ok                                    *autograd.Var
	steps, skipped                              *autograd.Var
	policy, value, entropy, floor               *autograd.Var
	approxKL, maxKL, gradNorm, early, stopEpoch *autograd.Var
	firstDev, ratioMax, ratioMin                *autograd.Var
	entropyH, clipH                             *autograd.Var // [H]
	nh                                          int
}

func newUpdateAcc(dev tensor.Device, nh int) *updateAcc {
	z := fullOn(dev, 0)
	a := &updateAcc{zero: z, one: fullOn(dev, 1), live: fullOn(dev, 1), steps: z, skipped: z, policy: z, value: z, entropy: z, floor: z,
		approxKL: z, maxKL: z, gradNorm: z, early: z, stopEpoch: z, firstDev: z,
		ratioMax: fullOn(dev, math.Inf(-1)), ratioMin: fullOn(dev, math.Inf(1)), nh: nh}
	a.entropyH, a.clipH = fullOn(dev, 0, nh), fullOn(dev, 0, nh)
	return a
}

// gate decides on the device whether the minibatch of epoch k steps —
// the update still live, its KL not past the stop (unless noStop), its
// loss and its gradient norm gn finite — and returns the one-element
// skip flag for optim's StepSkipIf. It records the minibatch's KL, its
// gradient norm, the counts and the stop.
func (a *updateAcc) gate(loss *autograd.Var, gn *tensor.Tensor, parts lossParts, k int, noStop bool, klLimit float64) *tensor.Tensor {
	var skip *tensor.Tensor
	autograd.NoGrad(func() {
		z, one := a.zero, a.one
		live := autograd.Compare(kernels.Gt, a.live, z)
		a.approxKL = autograd.Where(live, parts.kl, a.approxKL)
		a.maxKL = autograd.Where(live, autograd.Maximum(a.maxKL, parts.kl), a.maxKL)
		proceed := a.live
		if !noStop {
			over := flag(autograd.Compare(kernels.Gt, autograd.AddScalar(parts.kl, -klLimit), z), one, z)
			stop := autograd.Mul(a.live, over)
			a.early = autograd.Maximum(a.early, stop)
			a.stopEpoch = autograd.Where(autograd.Compare(kernels.Gt, stop, z), fullOn(z.Value.Device(), float64(k)), a.stopEpoch)
			proceed = autograd.Sub(a.live, stop)
		}
		lossOK := flag(isFinite(stat(loss), z), one, z)
		g := autograd.Cast(autograd.Const(gn), tensor.F64)
		gnOK := flag(isFinite(g, z), one, z)
		measured := autograd.Mul(proceed, lossOK)
		a.gradNorm = autograd.Where(autograd.Compare(kernels.Gt, measured, z), g, a.gradNorm)
		a.ok = autograd.Mul(measured, gnOK)
		a.steps = autograd.Add(a.steps, a.ok)
		a.skipped = autograd.Add(a.skipped, autograd.Sub(proceed, a.ok))
		a.live = proceed
		// optim reads the skip flag as one F32 element (kernels.CheckFlag).
		skip = autograd.Cast(autograd.Sub(one, a.ok), tensor.F32).Value
	})
	return skip
}

// add accumulates the figures of a minibatch that stepped (gate's ok).
func (a *updateAcc) add(parts lossParts) {
	autograd.NoGrad(func() {
		ok := autograd.Compare(kernels.Gt, a.ok, a.zero)
		sum := func(acc, x *autograd.Var) *autograd.Var {
			if x == nil {
				return acc
			}
			return autograd.Where(ok, autograd.Add(acc, x), acc)
		}
		a.policy = sum(a.policy, parts.policy)
		a.value = sum(a.value, parts.value)
		a.entropy = sum(a.entropy, parts.entropy)
		a.floor = sum(a.floor, parts.floor)
		a.ratioMax = autograd.Where(ok, autograd.Maximum(a.ratioMax, parts.ratioMax), a.ratioMax)
		a.ratioMin = autograd.Where(ok, autograd.Minimum(a.ratioMin, parts.ratioMin), a.ratioMin)
		a.entropyH = sum(a.entropyH, parts.headEntropy)
		a.clipH = sum(a.clipH, parts.clipFrac)
	})
}

// read copies every figure to the host in one read and fills st's sums
// (Update divides them by the steps).
func (a *updateAcc) read(st *UpdateStats) error {
	fields := []*autograd.Var{a.steps, a.skipped, a.policy, a.value, a.entropy, a.floor, a.approxKL, a.maxKL, a.gradNorm,
		a.early, a.stopEpoch, a.firstDev, a.ratioMax, a.ratioMin}
	fields = append(fields, a.entropyH, a.clipH)
	var all *tensor.Tensor
	autograd.NoGrad(func() {
		flat := make([]*autograd.Var, len(fields))
		for i, f := range fields {
			flat[i] = autograd.Reshape(f, f.Value.Numel())
		}
		all = autograd.Concat(flat, 0).Value
	})
	v, err := hostFloat64s(all)
	if err != nil {
		return err
	}
	st.Steps, st.Skipped = int(v[0]), int(v[1])
	st.PolicyLoss, st.ValueLoss, st.EntropyLoss, st.FloorPenalty = v[2], v[3], v[4], v[5]
	st.ApproxKL, st.MaxKL, st.GradNorm = v[6], v[7], v[8]
	st.EarlyStopped, st.StopEpoch = v[9] != 0, int(v[10])
	st.FirstRatioMaxDev, st.RatioMax, st.RatioMin = v[11], v[12], v[13]
	nh := a.nh
	st.Entropy = append([]float64(nil), v[14:14+nh]...)
	st.ClipFraction = append([]float64(nil), v[14+nh:14+2*nh]...)
	return nil
}
