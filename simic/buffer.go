package simic

import (
	"errors"
	"fmt"
	"math"
)

// RollbackForfeitReward replaces every earlier reward of an episode that
// ends in a governor rollback (G2 ROLLBACK_FORFEIT_REWARD).
const RollbackForfeitReward = 0.0

// ErrBufferFull is wrapped when Add is called on an environment whose row
// already holds MaxSteps transitions.
var ErrBufferFull = errors.New("rollout buffer full")

// Transition is one environment step as the rollout buffer stores it.
type Transition[O any] struct {
	// Obs is the state the action was chosen in.
	Obs O
	// Masks are the action masks in that state (nil: all valid).
	Masks Masks
	// Actions are the chosen options, one per head.
	Actions []int
	// LogProbs are their log-probabilities under the acting policy.
	LogProbs []float64
	// Relevant[h] reports whether head h was causally relevant to this
	// action (its advantage mask); nil means every head is.
	Relevant []bool
	// Value is V(s) in the critic's (normalised) units.
	Value float64
	// Reward is the (possibly normalised) reward.
	Reward float64
	// Done marks a terminal step: nothing is bootstrapped beyond it.
	Done bool
	// Truncated marks the last step of a cut episode (time limit or the
	// end of a rollout segment): Bootstrap stands in for V(s_{t+1}).
	Truncated bool
	// Bootstrap is V(s_{t+1}) in normalised units, used when Truncated.
	Bootstrap float64
}

// Buffer is the rollout buffer: one row of at most MaxSteps transitions
// per environment (esper-reference.md §5.3). It copies what it stores, so
// callers may reuse their slices.
type Buffer[O any] struct {
	maxSteps int
	rows     [][]Transition[O]
	adv      [][]float64
	ret      [][]float64
	td       [][]float64

	advNormalized bool
	rollbacks     int
	stepsZeroed   int
}

// NewBuffer returns an empty buffer for nEnvs environments of at most
// maxSteps steps each.
func NewBuffer[O any](nEnvs, maxSteps int) (*Buffer[O], error) {
	if nEnvs <= 0 || maxSteps <= 0 {
		return nil, fmt.Errorf("simic: NewBuffer: need positive environments and steps, got %d and %d", nEnvs, maxSteps)
	}
	b := &Buffer[O]{maxSteps: maxSteps, rows: make([][]Transition[O], nEnvs),
		adv: make([][]float64, nEnvs), ret: make([][]float64, nEnvs), td: make([][]float64, nEnvs)}
	for i := range b.rows {
		b.rows[i] = make([]Transition[O], 0, maxSteps)
		b.adv[i] = make([]float64, maxSteps)
		b.ret[i] = make([]float64, maxSteps)
		b.td[i] = make([]float64, maxSteps)
	}
	return b, nil
}

// NumEnvs is the number of environment rows.
func (b *Buffer[O]) NumEnvs() int { return len(b.rows) }

// MaxSteps is the capacity of each row.
func (b *Buffer[O]) MaxSteps() int { return b.maxSteps }

// Len returns the number of transitions stored for env.
func (b *Buffer[O]) Len(env int) int { return len(b.rows[env]) }

// Total is the number of transitions stored over all rows.
func (b *Buffer[O]) Total() int {
	n := 0
	for _, r := range b.rows {
		n += len(r)
	}
	return n
}

func (b *Buffer[O]) checkEnv(env int) error {
	if env < 0 || env >= len(b.rows) {
		return fmt.Errorf("simic: rollout buffer: env %d out of range [0, %d)", env, len(b.rows))
	}
	return nil
}

// Add appends tr to env's row (deep-copying its slices). A full row is an
// error wrapping ErrBufferFull.
func (b *Buffer[O]) Add(env int, tr Transition[O]) error {
	if err := b.checkEnv(env); err != nil {
		return err
	}
	if len(b.rows[env]) >= b.maxSteps {
		return fmt.Errorf("simic: env %d: %w (%d steps)", env, ErrBufferFull, b.maxSteps)
	}
	tr.Masks = tr.Masks.clone()
	tr.Actions = append([]int(nil), tr.Actions...)
	tr.LogProbs = append([]float64(nil), tr.LogProbs...)
	if tr.Relevant != nil {
		tr.Relevant = append([]bool(nil), tr.Relevant...)
	}
	b.rows[env] = append(b.rows[env], tr)
	return nil
}

// At returns env's transition t (the buffer's own copy).
func (b *Buffer[O]) At(env, t int) *Transition[O] { return &b.rows[env][t] }

// Last returns env's most recent transition, or nil when the row is
// empty.
func (b *Buffer[O]) Last(env int) *Transition[O] {
	r := b.rows[env]
	if len(r) == 0 {
		return nil
	}
	return &r[len(r)-1]
}

// Advantage, Return and TDError read the results of ComputeGAE (and
// NormalizeAdvantages) for env's step t.
func (b *Buffer[O]) Advantage(env, t int) float64 { return b.adv[env][t] }

// Return is the GAE return (advantage + de-normalised value) of env's
// step t.
func (b *Buffer[O]) Return(env, t int) float64 { return b.ret[env][t] }

// TDError is the one-step TD error δ of env's step t.
func (b *Buffer[O]) TDError(env, t int) float64 { return b.td[env][t] }

// ClearEnv empties env's row.
func (b *Buffer[O]) ClearEnv(env int) error {
	if err := b.checkEnv(env); err != nil {
		return err
	}
	b.rows[env] = b.rows[env][:0]
	return nil
}

// Reset empties every row and clears the advantage-normalisation flag and
// the rollback counters.
func (b *Buffer[O]) Reset() {
	for i := range b.rows {
		clear(b.rows[i]) // drop references to observations
		b.rows[i] = b.rows[i][:0]
	}
	b.advNormalized = false
	b.rollbacks, b.stepsZeroed = 0, 0
}

// RollbackCount is the number of MarkTerminalWithPenalty calls that
// applied since the last Reset.
func (b *Buffer[O]) RollbackCount() int { return b.rollbacks }

// RollbackStepsZeroed is the number of rewards forfeited by rollbacks
// since the last Reset.
func (b *Buffer[O]) RollbackStepsZeroed() int { return b.stepsZeroed }

// MarkTerminalWithPenalty ends env's current episode in a governor
// rollback: every earlier reward of the episode (since the last done or
// truncated step) becomes RollbackForfeitReward, the last reward becomes
// penalty, and the last step is made terminal (done, not truncated). It
// reports false, changing nothing, when env's episode has no steps.
func (b *Buffer[O]) MarkTerminalWithPenalty(env int, penalty float64) (bool, error) {
	if err := b.checkEnv(env); err != nil {
		return false, err
	}
	r := b.rows[env]
	if len(r) == 0 {
		return false, nil
	}
	last := len(r) - 1
	start := last
	for start > 0 && !r[start-1].Done && !r[start-1].Truncated {
		start--
	}
	for t := start; t < last; t++ {
		r[t].Reward = RollbackForfeitReward
	}
	r[last].Reward = penalty
	r[last].Done, r[last].Truncated = true, false
	b.rollbacks++
	b.stepsZeroed += last - start
	return true, nil
}

// ComputeGAE fills advantages, returns and TD errors per env with
// generalised advantage estimation (see GAE); stored values and
// bootstraps are multiplied by valueScale (the value normaliser's Std)
// first. It clears the advantage-normalisation flag.
func (b *Buffer[O]) ComputeGAE(gamma, lambda, valueScale float64) error {
	if err := checkGAEParams(gamma, lambda); err != nil {
		return err
	}
	if !(valueScale > 0) || math.IsInf(valueScale, 0) {
		return fmt.Errorf("simic: ComputeGAE: value scale %v must be positive and finite", valueScale)
	}
	for env, r := range b.rows {
		n := len(r)
		steps := make([]GAEStep, n)
		for t, tr := range r {
			steps[t] = GAEStep{Reward: tr.Reward, Value: tr.Value * valueScale, Done: tr.Done,
				Truncated: tr.Truncated, Bootstrap: tr.Bootstrap * valueScale}
		}
		if _, err := GAE(steps, gamma, lambda, b.adv[env][:n], b.ret[env][:n], b.td[env][:n]); err != nil {
			return fmt.Errorf("simic: env %d: %w", env, err)
		}
	}
	b.advNormalized = false
	return nil
}

// AdvantageStats are the statistics NormalizeAdvantages used.
type AdvantageStats struct {
	// Mean and Std of the advantages before normalisation; NaN when the
	// call changed nothing (already normalised, or an empty buffer).
	Mean, Std float64
}

// minAdvantageStd floors the advantage standard deviation so that a batch
// of near-identical advantages is not blown up (G2 normalize_advantages).
const minAdvantageStd = 0.1

// NormalizeAdvantages rescales the advantages of all stored steps to
// (A − mean)/(max(std, 0.1) + 1e-8). It is idempotent: once applied
// (until the next ComputeGAE or Reset) it changes nothing and returns NaN
// statistics. A single transition gives std 0 and no NaN.
func (b *Buffer[O]) NormalizeAdvantages() AdvantageStats {
	nan := AdvantageStats{Mean: math.NaN(), Std: math.NaN()}
	n := b.Total()
	if b.advNormalized || n == 0 {
		return nan
	}
	var sum float64
	for env, r := range b.rows {
		for t := range r {
			sum += b.adv[env][t]
		}
	}
	mean := sum / float64(n)
	var ss float64
	for env, r := range b.rows {
		for t := range r {
			d := b.adv[env][t] - mean
			ss += d * d
		}
	}
	std := 0.0
	if n > 1 {
		std = math.Sqrt(ss / float64(n-1)) // unbiased, as torch.std
	}
	den := math.Max(std, minAdvantageStd) + 1e-8
	for env, r := range b.rows {
		for t := range r {
			b.adv[env][t] = (b.adv[env][t] - mean) / den
		}
	}
	b.advNormalized = true
	return AdvantageStats{Mean: mean, Std: std}
}
