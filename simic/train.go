package simic

import (
	"errors"
	"fmt"
	"slices"
)

// DefaultRolloutSteps is the rollout length per environment per update.
const DefaultRolloutSteps = 128

// TrainerOptions configure NewTrainer; the zero value selects the
// defaults.
type TrainerOptions[O any] struct {
	// Steps is the number of lock-step environment steps per rollout
	// (per environment); 0 means DefaultRolloutSteps. The last step of
	// every environment's rollout is stored as truncated and bootstrapped
	// with V(s) of the next observation.
	Steps int
	// NormalizeRewards scales stored rewards with a RewardNormalizer
	// (configured by RewardNorm); episode returns stay raw.
	NormalizeRewards bool
	RewardNorm       NormOptions
	// EpisodicRollouts ends every rollout at an episode boundary: the
	// environments still inside an episode when a rollout ends are reset
	// (VecEnv.ResetUnfinished) before Collect returns. Their unfinished
	// episodes were stored as truncated and bootstrapped, as always at a
	// rollout's end; they are dropped, not continued, and never reported
	// in Episodes. Between iterations every environment then stands at
	// the start of an episode, which is what makes a run resumable bit
	// for bit from a checkpoint (see TrainerState). With rollouts as long
	// as the episodes (and no governor rollbacks) no episode is cut.
	EpisodicRollouts bool
	// ObsTransform, if set, maps raw observations to what the policy
	// sees (an observation normaliser, see VectorObsNormalizer); update
	// reports whether the transform may learn from this batch (true in
	// rollouts, false for bootstrap states and evaluation).
	ObsTransform func(obs []O, update bool) ([]O, error)
}

// Trainer alternates rollouts over a VecEnv and PPO updates.
type Trainer[O any] struct {
	ppo        *PPO[O]
	vec        *VecEnv[O]
	buf        *Buffer[O]
	opts       TrainerOptions[O]
	rewardNorm *RewardNormalizer
	obs        []O // current (transformed) observations
	envSteps   int
}

// NewTrainer builds a trainer; the buffer holds opts.Steps steps per
// environment.
func NewTrainer[O any](ppo *PPO[O], vec *VecEnv[O], opts TrainerOptions[O]) (*Trainer[O], error) {
	if ppo == nil || vec == nil {
		return nil, errors.New("simic: NewTrainer: nil PPO or VecEnv")
	}
	if !slices.Equal(ppo.spec.HeadSizes, vec.Spec().HeadSizes) {
		return nil, fmt.Errorf("simic: NewTrainer: PPO heads %v, environments %v", ppo.spec.HeadSizes, vec.Spec().HeadSizes)
	}
	if opts.Steps == 0 {
		opts.Steps = DefaultRolloutSteps
	}
	if opts.Steps < 0 {
		return nil, fmt.Errorf("simic: NewTrainer: Steps %d must be positive", opts.Steps)
	}
	buf, err := NewBuffer[O](vec.Len(), opts.Steps)
	if err != nil {
		return nil, err
	}
	t := &Trainer[O]{ppo: ppo, vec: vec, buf: buf, opts: opts}
	if opts.NormalizeRewards {
		if t.rewardNorm, err = NewRewardNormalizer(opts.RewardNorm); err != nil {
			return nil, err
		}
	}
	if t.obs, err = t.transform(vec.Obs(), true); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Trainer[O]) transform(obs []O, update bool) ([]O, error) {
	if t.opts.ObsTransform == nil {
		return obs, nil
	}
	out, err := t.opts.ObsTransform(obs, update)
	if err != nil {
		return nil, fmt.Errorf("simic: observation transform: %w", err)
	}
	if len(out) != len(obs) {
		return nil, fmt.Errorf("simic: observation transform returned %d observations for %d", len(out), len(obs))
	}
	return out, nil
}

// EnvSteps is the number of environment steps taken (over all
// environments).
func (t *Trainer[O]) EnvSteps() int { return t.envSteps }

// PPO returns the trainer's PPO.
func (t *Trainer[O]) PPO() *PPO[O] { return t.ppo }

// RewardNormalizer returns the reward normaliser, or nil when
// TrainerOptions.NormalizeRewards is off.
func (t *Trainer[O]) RewardNormalizer() *RewardNormalizer { return t.rewardNorm }

// SetEnvSteps sets the environment-step counter (a resumed run continues
// its count).
func (t *Trainer[O]) SetEnvSteps(n int) { t.envSteps = n }

// Buffer is the rollout buffer (filled by Collect, reset by Iterate).
func (t *Trainer[O]) Buffer() *Buffer[O] { return t.buf }

// Iteration reports one rollout and update.
type Iteration struct {
	// EnvSteps is the total number of environment steps so far.
	EnvSteps int
	// Episodes are the episodes that ended during the rollout.
	Episodes []Episode
	// Update is the PPO update's report.
	Update *UpdateStats
}

// Collect resets the buffer and fills it with one rollout of Steps
// lock-step steps, returning the episodes that ended.
func (t *Trainer[O]) Collect() ([]Episode, error) {
	t.buf.Reset()
	p := t.ppo
	n := t.vec.Len()
	var episodes []Episode
	for step := 0; step < t.opts.Steps; step++ {
		masks := t.vec.ActionMasks()
		anyMask := false
		for _, m := range masks {
			anyMask = anyMask || m != nil
		}
		if !anyMask {
			masks = nil
		}
		act, err := p.policy.Act(t.obs, masks, p.rng, false)
		if err != nil {
			return nil, fmt.Errorf("simic: rollout: policy.Act: %w", err)
		}
		vs, err := t.vec.Step(act.Actions)
		if err != nil {
			return nil, err
		}
		t.envSteps += n
		episodes = append(episodes, vs.Episodes...)
		next, err := t.transform(vs.Obs, true)
		if err != nil {
			return nil, err
		}
		// Bootstrap states: time-limit truncations, and every unfinished
		// environment at the end of the rollout.
		last := step == t.opts.Steps-1
		var bootIdx []int
		var bootObs []O
		for i := 0; i < n; i++ {
			switch {
			case vs.Terminated[i]:
			case vs.Truncated[i]:
				bootIdx = append(bootIdx, i)
				bootObs = append(bootObs, vs.FinalObs[i])
			case last:
				bootIdx = append(bootIdx, i)
				bootObs = append(bootObs, vs.Obs[i])
			}
		}
		boot := make([]float64, n)
		if len(bootIdx) > 0 {
			tb, err := t.transform(bootObs, false)
			if err != nil {
				return nil, err
			}
			vals, err := p.policy.Values(tb)
			if err != nil {
				return nil, fmt.Errorf("simic: rollout: policy.Values: %w", err)
			}
			for j, i := range bootIdx {
				boot[i] = vals[j]
			}
		}
		for i := 0; i < n; i++ {
			r := vs.Rewards[i]
			if t.rewardNorm != nil {
				if r, err = t.rewardNorm.Observe(r); err != nil {
					return nil, err
				}
			}
			tr := Transition[O]{Obs: t.obs[i], Actions: act.Actions[i], LogProbs: act.LogProbs[i], Value: act.Values[i],
				Reward: r, Done: vs.Terminated[i], Truncated: !vs.Terminated[i] && (vs.Truncated[i] || last), Bootstrap: boot[i]}
			if masks != nil {
				tr.Masks = masks[i]
			}
			if p.opts.Relevance != nil {
				tr.Relevant = p.opts.Relevance(act.Actions[i])
				if len(tr.Relevant) != len(p.spec.HeadSizes) {
					return nil, fmt.Errorf("simic: Relevance returned %d flags for %d heads", len(tr.Relevant), len(p.spec.HeadSizes))
				}
			}
			if err := t.buf.Add(i, tr); err != nil {
				return nil, err
			}
			if vs.Rollback[i] {
				// Governor rollback: the stored reward is the penalty and
				// the rollout since the last episode boundary is
				// forfeited.
				if _, err := t.buf.MarkTerminalWithPenalty(i, r); err != nil {
					return nil, err
				}
			}
		}
		t.obs = next
	}
	if t.opts.EpisodicRollouts {
		if err := t.resetUnfinished(); err != nil {
			return nil, err
		}
	}
	return episodes, nil
}

// resetUnfinished resets the environments inside an episode and takes
// their first observations.
func (t *Trainer[O]) resetUnfinished() error {
	idx, err := t.vec.ResetUnfinished()
	if err != nil || len(idx) == 0 {
		return err
	}
	all := t.vec.Obs()
	obs := make([]O, len(idx))
	for j, i := range idx {
		obs[j] = all[i]
	}
	if obs, err = t.transform(obs, true); err != nil {
		return err
	}
	for j, i := range idx {
		t.obs[i] = obs[j]
	}
	return nil
}

// Iterate collects one rollout and runs one PPO update on it.
func (t *Trainer[O]) Iterate() (*Iteration, error) {
	eps, err := t.Collect()
	if err != nil {
		return nil, err
	}
	st, err := t.ppo.Update(t.buf)
	if err != nil {
		return nil, err
	}
	return &Iteration{EnvSteps: t.envSteps, Episodes: eps, Update: st}, nil
}

// EvalResult summarises an evaluation.
type EvalResult struct {
	// Returns are the episodes' undiscounted returns.
	Returns []float64
	// Mean is their average.
	Mean float64
	// Steps is the number of environment steps taken.
	Steps int
}

// EvaluatePolicy runs one episode in each of episodes fresh environments
// (made by newEnv(i)), all in lock-step, acting deterministically (the
// most probable option of every head), and returns the raw returns.
// transform, if non-nil, maps observations as in TrainerOptions (called
// with update = false).
func EvaluatePolicy[O any](policy Policy[O], newEnv func(i int) (Env[O], error), episodes int, transform func([]O, bool) ([]O, error)) (*EvalResult, error) {
	if episodes <= 0 {
		return nil, fmt.Errorf("simic: EvaluatePolicy: %d episodes", episodes)
	}
	envs := make([]Env[O], episodes)
	obs := make([]O, episodes)
	for i := range envs {
		e, err := newEnv(i)
		if err != nil {
			return nil, fmt.Errorf("simic: EvaluatePolicy: env %d: %w", i, err)
		}
		envs[i] = e
		if obs[i], err = e.Reset(); err != nil {
			return nil, fmt.Errorf("simic: EvaluatePolicy: env %d reset: %w", i, err)
		}
	}
	res := &EvalResult{Returns: make([]float64, episodes)}
	live := make([]int, episodes)
	for i := range live {
		live[i] = i
	}
	for len(live) > 0 {
		cur := make([]O, len(live))
		var masks []Masks
		for j, i := range live {
			cur[j] = obs[i]
			if m := envs[i].ActionMasks(); m != nil {
				if masks == nil {
					masks = make([]Masks, len(live))
				}
				masks[j] = m
			}
		}
		if transform != nil {
			var err error
			if cur, err = transform(cur, false); err != nil {
				return nil, err
			}
		}
		act, err := policy.Act(cur, masks, nil, true)
		if err != nil {
			return nil, fmt.Errorf("simic: EvaluatePolicy: %w", err)
		}
		still := live[:0]
		for j, i := range live {
			r, err := envs[i].Step(act.Actions[j])
			if err != nil {
				return nil, fmt.Errorf("simic: EvaluatePolicy: env %d: %w", i, err)
			}
			res.Steps++
			res.Returns[i] += r.Reward
			obs[i] = r.Obs
			if !r.Terminated && !r.Truncated {
				still = append(still, i)
			}
		}
		live = still
	}
	for _, r := range res.Returns {
		res.Mean += r
	}
	res.Mean /= float64(episodes)
	return res, nil
}

// VectorObsNormalizer returns an ObsTransform for []float32 observations
// backed by rms: with update it folds the batch into the statistics
// first, then normalises (clipped, see RunningMeanStd.Normalize).
func VectorObsNormalizer(rms *RunningMeanStd) func(obs [][]float32, update bool) ([][]float32, error) {
	return func(obs [][]float32, update bool) ([][]float32, error) {
		rows := make([][]float64, len(obs))
		for i, o := range obs {
			rows[i] = make([]float64, len(o))
			for j, v := range o {
				rows[i][j] = float64(v)
			}
		}
		if update {
			if err := rms.Update(rows); err != nil {
				return nil, err
			}
		}
		out := make([][]float32, len(obs))
		for i, r := range rows {
			nv, err := rms.Normalize(r)
			if err != nil {
				return nil, err
			}
			out[i] = make([]float32, len(nv))
			for j, v := range nv {
				out[i][j] = float32(v)
			}
		}
		return out, nil
	}
}
