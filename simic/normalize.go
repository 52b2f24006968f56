package simic

import (
	"errors"
	"fmt"
	"math"
)

// Normaliser defaults (esper-reference.md §5.5).
const (
	// DefaultNormMomentum is the EMA momentum once the Welford phase is
	// over (G2 normalisers: 0.99).
	DefaultNormMomentum = 0.99
	// DefaultNormWelfordSamples is how many samples are merged exactly
	// (Welford/Chan) before switching to the EMA (G2 ValueNormalizer: 32).
	DefaultNormWelfordSamples = 32
	// DefaultNormClip is the output clip of the observation and reward
	// normalisers (G2: ±10).
	DefaultNormClip = 10.0
	// DefaultNormEpsilon keeps divisions by a standard deviation finite.
	DefaultNormEpsilon = 1e-8
)

// ErrNormalizerState is wrapped when a normaliser state cannot be loaded.
var ErrNormalizerState = errors.New("invalid normaliser state")

// NormOptions configure the normalisers; the zero value selects the
// defaults.
type NormOptions struct {
	// Momentum is the EMA momentum in (0, 1) after the Welford phase; 0
	// means DefaultNormMomentum.
	Momentum float64
	// WelfordSamples is how many samples are merged exactly before the
	// EMA takes over; 0 means DefaultNormWelfordSamples, negative means
	// always exact (never EMA).
	WelfordSamples int
	// Clip is the symmetric output clip (> 0); 0 means DefaultNormClip.
	Clip float64
	// Epsilon is added to the variance before the square root; 0 means
	// DefaultNormEpsilon.
	Epsilon float64
}

func (o NormOptions) withDefaults() (NormOptions, error) {
	if o.Momentum == 0 {
		o.Momentum = DefaultNormMomentum
	}
	if o.WelfordSamples == 0 {
		o.WelfordSamples = DefaultNormWelfordSamples
	}
	if o.Clip == 0 {
		o.Clip = DefaultNormClip
	}
	if o.Epsilon == 0 {
		o.Epsilon = DefaultNormEpsilon
	}
	switch {
	case !(o.Momentum > 0 && o.Momentum < 1):
		return o, fmt.Errorf("simic: normaliser Momentum %v must lie in (0, 1)", o.Momentum)
	case !(o.Clip > 0) || math.IsInf(o.Clip, 0):
		return o, fmt.Errorf("simic: normaliser Clip %v must be positive and finite", o.Clip)
	case !(o.Epsilon > 0) || math.IsInf(o.Epsilon, 0):
		return o, fmt.Errorf("simic: normaliser Epsilon %v must be positive and finite", o.Epsilon)
	}
	return o, nil
}

// NormState is the checkpointable state of a normaliser: per-feature
// running mean and (population) variance and the number of samples seen.
type NormState struct {
	Count int64     `json:"count"`
	Mean  []float64 `json:"mean"`
	Var   []float64 `json:"var"`
	// M2 is the RewardNormalizer's sum of squared deviations, from which
	// Var is derived: Var does not give it back bit for bit, M2 does (a
	// resumed run normalises exactly as the saved one). Absent (nil) in
	// other normalisers' states and in states saved before it was added,
	// which restore it from Var.
	M2 []float64 `json:"m2,omitempty"`
}

// RunningMeanStd tracks per-feature mean and variance of a stream of
// vectors: exactly (Chan's parallel Welford merge) for the first
// WelfordSamples samples, then as an EMA of batch statistics with
// Momentum, so the statistics follow a drifting distribution. The count
// starts at 0. It is the observation normaliser of §5.5.
type RunningMeanStd struct {
	opts  NormOptions
	count int64
	mean  []float64
	m2    []float64 // variance (not the sum of squares), per feature
}

// NewRunningMeanStd returns a normaliser for vectors of dim features.
func NewRunningMeanStd(dim int, o NormOptions) (*RunningMeanStd, error) {
	if dim <= 0 {
		return nil, fmt.Errorf("simic: RunningMeanStd dim %d must be positive", dim)
	}
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return &RunningMeanStd{opts: o, mean: make([]float64, dim), m2: make([]float64, dim)}, nil
}

// Dim is the number of features.
func (r *RunningMeanStd) Dim() int { return len(r.mean) }

// Count is the number of samples seen.
func (r *RunningMeanStd) Count() int64 { return r.count }

// Mean returns a copy of the running mean.
func (r *RunningMeanStd) Mean() []float64 { return append([]float64(nil), r.mean...) }

// Var returns a copy of the running variance.
func (r *RunningMeanStd) Var() []float64 { return append([]float64(nil), r.m2...) }

// Update folds a batch of vectors (each Dim long) into the statistics.
func (r *RunningMeanStd) Update(batch [][]float64) error {
	if len(batch) == 0 {
		return nil
	}
	d := len(r.mean)
	bm := make([]float64, d)
	bv := make([]float64, d)
	for i, x := range batch {
		if len(x) != d {
			return fmt.Errorf("simic: RunningMeanStd.Update: sample %d has %d features, want %d", i, len(x), d)
		}
		for j, v := range x {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("simic: RunningMeanStd.Update: sample %d feature %d is %v", i, j, v)
			}
			bm[j] += v
		}
	}
	n := float64(len(batch))
	for j := range bm {
		bm[j] /= n
	}
	for _, x := range batch {
		for j, v := range x {
			bv[j] += (v - bm[j]) * (v - bm[j])
		}
	}
	for j := range bv {
		bv[j] /= n
	}
	r.merge(bm, bv, int64(len(batch)))
	return nil
}

// merge folds batch mean bm and variance bv of n samples in.
func (r *RunningMeanStd) merge(bm, bv []float64, n int64) {
	exact := r.opts.WelfordSamples < 0 || r.count < int64(r.opts.WelfordSamples)
	if exact {
		tot := float64(r.count + n)
		na, nb := float64(r.count), float64(n)
		for j := range r.mean {
			delta := bm[j] - r.mean[j]
			r.mean[j] += delta * nb / tot
			r.m2[j] = (r.m2[j]*na + bv[j]*nb + delta*delta*na*nb/tot) / tot
		}
	} else {
		m := r.opts.Momentum
		for j := range r.mean {
			delta := bm[j] - r.mean[j]
			r.mean[j] = m*r.mean[j] + (1-m)*bm[j]
			// EMA of the variance around the moving mean: the batch's own
			// spread plus the shift of its mean.
			r.m2[j] = m*r.m2[j] + (1-m)*(bv[j]+m*delta*delta)
		}
	}
	r.count += n
}

// Normalize returns (x − mean)/sqrt(var + ε) clipped to ±Clip. Before any
// sample has been seen it returns x clipped.
func (r *RunningMeanStd) Normalize(x []float64) ([]float64, error) {
	if len(x) != len(r.mean) {
		return nil, fmt.Errorf("simic: RunningMeanStd.Normalize: %d features, want %d", len(x), len(r.mean))
	}
	out := make([]float64, len(x))
	c := r.opts.Clip
	for j, v := range x {
		if r.count > 0 {
			v = (v - r.mean[j]) / math.Sqrt(r.m2[j]+r.opts.Epsilon)
		}
		out[j] = clip(v, c)
	}
	return out, nil
}

// State returns a copy of the statistics for a checkpoint.
func (r *RunningMeanStd) State() NormState {
	return NormState{Count: r.count, Mean: r.Mean(), Var: r.Var()}
}

// LoadState replaces the statistics with s (validated first: nothing
// changes on error).
func (r *RunningMeanStd) LoadState(s NormState) error {
	if len(s.Mean) != len(r.mean) || len(s.Var) != len(r.mean) {
		return fmt.Errorf("simic: %w: %d means and %d variances for %d features", ErrNormalizerState, len(s.Mean), len(s.Var), len(r.mean))
	}
	if s.Count < 0 {
		return fmt.Errorf("simic: %w: negative count %d", ErrNormalizerState, s.Count)
	}
	for j := range s.Mean {
		if !finite(s.Mean[j]) || !finite(s.Var[j]) || s.Var[j] < 0 {
			return fmt.Errorf("simic: %w: feature %d has mean %v, variance %v", ErrNormalizerState, j, s.Mean[j], s.Var[j])
		}
	}
	r.count = s.Count
	copy(r.mean, s.Mean)
	copy(r.m2, s.Var)
	return nil
}

// RewardNormalizer scales rewards by the running standard deviation of
// the rewards seen (exact Welford, no mean subtraction) and clips the
// result to ±Clip. With fewer than two samples the variance is undefined
// and the raw reward is returned, clipped.
type RewardNormalizer struct {
	opts  NormOptions
	count int64
	mean  float64
	m2    float64 // sum of squared deviations (Welford)
}

// NewRewardNormalizer returns a reward normaliser (Momentum and
// WelfordSamples are unused: rewards are always merged exactly).
func NewRewardNormalizer(o NormOptions) (*RewardNormalizer, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return &RewardNormalizer{opts: o}, nil
}

// Count is the number of rewards seen.
func (r *RewardNormalizer) Count() int64 { return r.count }

// Std is the running (sample) standard deviation, 0 with < 2 samples.
func (r *RewardNormalizer) Std() float64 {
	if r.count < 2 {
		return 0
	}
	return math.Sqrt(r.m2 / float64(r.count-1))
}

// Observe folds reward in and returns it normalised. A non-finite reward
// is an error and leaves the statistics unchanged.
func (r *RewardNormalizer) Observe(reward float64) (float64, error) {
	if !finite(reward) {
		return 0, fmt.Errorf("simic: RewardNormalizer: reward %v is not finite", reward)
	}
	r.count++
	d := reward - r.mean
	r.mean += d / float64(r.count)
	r.m2 += d * (reward - r.mean)
	return r.Normalize(reward), nil
}

// Normalize scales reward by the current statistics without updating
// them.
func (r *RewardNormalizer) Normalize(reward float64) float64 {
	if r.count < 2 {
		return clip(reward, r.opts.Clip)
	}
	return clip(reward/(r.Std()+r.opts.Epsilon), r.opts.Clip)
}

// State returns the statistics for a checkpoint (Var is the sample
// variance).
func (r *RewardNormalizer) State() NormState {
	v := 0.0
	if r.count >= 2 {
		v = r.m2 / float64(r.count-1)
	}
	return NormState{Count: r.count, Mean: []float64{r.mean}, Var: []float64{v}, M2: []float64{r.m2}}
}

// LoadState restores statistics saved by State.
func (r *RewardNormalizer) LoadState(s NormState) error {
	if err := checkScalarState(s); err != nil {
		return err
	}
	if s.M2 != nil && (len(s.M2) != 1 || !finite(s.M2[0]) || s.M2[0] < 0) {
		return fmt.Errorf("simic: %w: M2 %v, want one finite value >= 0", ErrNormalizerState, s.M2)
	}
	r.count, r.mean = s.Count, s.Mean[0]
	switch {
	case s.M2 != nil:
		r.m2 = s.M2[0]
	case s.Count >= 2:
		r.m2 = s.Var[0] * float64(s.Count-1)
	default:
		r.m2 = 0
	}
	return nil
}

// ValueNormalizer scales returns by their running standard deviation (no
// centring) so the critic learns targets of unit scale whatever the
// reward scale; value predictions are multiplied back by Std before GAE.
// Statistics are merged exactly for the first WelfordSamples samples,
// then by EMA with Momentum (§5.5).
type ValueNormalizer struct {
	rms *RunningMeanStd
}

// NewValueNormalizer returns a value normaliser (Clip is unused).
func NewValueNormalizer(o NormOptions) (*ValueNormalizer, error) {
	rms, err := NewRunningMeanStd(1, o)
	if err != nil {
		return nil, err
	}
	return &ValueNormalizer{rms: rms}, nil
}

// Count is the number of returns seen.
func (v *ValueNormalizer) Count() int64 { return v.rms.count }

// Std is the scale: sqrt(var + ε), or 1 before any return is seen.
func (v *ValueNormalizer) Std() float64 {
	if v.rms.count == 0 {
		return 1
	}
	return math.Sqrt(v.rms.m2[0] + v.rms.opts.Epsilon)
}

// Update folds a batch of returns in.
func (v *ValueNormalizer) Update(returns []float64) error {
	b := make([][]float64, len(returns))
	for i, r := range returns {
		b[i] = []float64{r}
	}
	return v.rms.Update(b)
}

// Normalize returns ret / Std.
func (v *ValueNormalizer) Normalize(ret float64) float64 { return ret / v.Std() }

// Denormalize returns value × Std.
func (v *ValueNormalizer) Denormalize(value float64) float64 { return value * v.Std() }

// State returns the statistics for a checkpoint.
func (v *ValueNormalizer) State() NormState { return v.rms.State() }

// LoadState restores statistics saved by State.
func (v *ValueNormalizer) LoadState(s NormState) error {
	if err := checkScalarState(s); err != nil {
		return err
	}
	return v.rms.LoadState(s)
}

func checkScalarState(s NormState) error {
	if len(s.Mean) != 1 || len(s.Var) != 1 || s.Count < 0 || !finite(s.Mean[0]) || !finite(s.Var[0]) || s.Var[0] < 0 {
		return fmt.Errorf("simic: %w: want one finite mean and non-negative variance and a count >= 0, got %+v", ErrNormalizerState, s)
	}
	return nil
}

func clip(v, c float64) float64 { return math.Max(-c, math.Min(c, v)) }

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
