package simic

import (
	"errors"
	"fmt"
	"slices"

	"github.com/esper-go/esper/tensor"
)

// EnvSpec describes an environment's factored discrete action: one
// categorical head per entry of HeadSizes (CartPole has one head of 2
// options; Tamiyo's lifecycle action has 8 heads).
type EnvSpec struct {
	// HeadSizes is the number of options per head (each > 0).
	HeadSizes []int
	// HeadNames optionally names the heads for reports; nil means
	// "head0", "head1", ...
	HeadNames []string
}

// Validate checks the spec.
func (s EnvSpec) Validate() error {
	if len(s.HeadSizes) == 0 {
		return errors.New("simic: EnvSpec has no action heads")
	}
	for h, n := range s.HeadSizes {
		if n <= 0 {
			return fmt.Errorf("simic: EnvSpec head %d has %d options", h, n)
		}
	}
	if s.HeadNames != nil && len(s.HeadNames) != len(s.HeadSizes) {
		return fmt.Errorf("simic: EnvSpec has %d head names for %d heads", len(s.HeadNames), len(s.HeadSizes))
	}
	return nil
}

// HeadName returns head h's name.
func (s EnvSpec) HeadName(h int) string {
	if s.HeadNames != nil {
		return s.HeadNames[h]
	}
	return fmt.Sprintf("head%d", h)
}

// Masks are one environment's action masks: Masks[h][i] reports whether
// option i of head h may be taken. A nil Masks, or a nil row, means every
// option of that head is valid.
type Masks [][]bool

// valid reports whether option i of head h is allowed.
func (m Masks) valid(h, i int) bool {
	if m == nil || m[h] == nil {
		return true
	}
	return m[h][i]
}

// numValid counts head h's valid options among n.
func (m Masks) numValid(h, n int) int {
	if m == nil || m[h] == nil {
		return n
	}
	c := 0
	for _, v := range m[h] {
		if v {
			c++
		}
	}
	return c
}

// check verifies m against spec: a row per head of the head's size with
// at least one valid option.
func (m Masks) check(spec EnvSpec) error {
	if m == nil {
		return nil
	}
	if len(m) != len(spec.HeadSizes) {
		return fmt.Errorf("simic: %d mask rows for %d heads", len(m), len(spec.HeadSizes))
	}
	for h, row := range m {
		if row == nil {
			continue
		}
		if len(row) != spec.HeadSizes[h] {
			return fmt.Errorf("simic: mask of head %s has %d entries, want %d", spec.HeadName(h), len(row), spec.HeadSizes[h])
		}
		if m.numValid(h, len(row)) == 0 {
			return fmt.Errorf("simic: %w: head %s has no valid option", ErrNoValidAction, spec.HeadName(h))
		}
	}
	return nil
}

// clone deep-copies m.
func (m Masks) clone() Masks {
	if m == nil {
		return nil
	}
	out := make(Masks, len(m))
	for h, row := range m {
		if row != nil {
			out[h] = append([]bool(nil), row...)
		}
	}
	return out
}

// ErrNoValidAction is wrapped when a mask leaves a head with no option.
var ErrNoValidAction = errors.New("no valid action")

// StepResult is what one environment step returns.
type StepResult[O any] struct {
	// Obs is the observation after the step (the final observation when
	// the episode ended).
	Obs O
	// Reward for the step.
	Reward float64
	// Terminated reports a terminal state: no bootstrap beyond it.
	Terminated bool
	// Truncated reports that the episode was cut (a time limit) in a
	// non-terminal state: the return is bootstrapped with V(Obs).
	Truncated bool
	// Rollback reports that the environment's governor rolled its model
	// back during the step. The trainer then marks the environment's
	// rollout since its last episode boundary terminal, with Reward as
	// the penalty and the earlier rewards forfeited
	// (Buffer.MarkTerminalWithPenalty); the episode itself goes on from
	// Obs.
	Rollback bool
}

// Env is one environment with observations of type O and a factored
// discrete action. Implementations seed themselves at construction so
// that a run is reproducible.
type Env[O any] interface {
	// Spec describes the action heads; it must not change.
	Spec() EnvSpec
	// Reset starts a new episode and returns its first observation.
	Reset() (O, error)
	// Step applies action (one option index per head).
	Step(action []int) (StepResult[O], error)
	// ActionMasks returns the masks for the current state (nil when
	// every action is always valid).
	ActionMasks() Masks
}

// SplitStepper is an Env whose step reads its device state once, in the
// middle (EsperEnv: the epoch's accumulators): StepStart runs the step up
// to that read and returns the device tensors it wants (nil: none this
// time), StepFinish takes their host copies, in order (or the read's
// error), and completes the step. Between the two the environment holds
// still. VecEnv.Step reads the tensors of all its environments that are
// SplitSteppers together, one host sync per device for the lock-step
// step instead of one per environment.
type SplitStepper[O any] interface {
	StepStart(action []int) ([]*tensor.Tensor, error)
	StepFinish(hosts []*tensor.Tensor, readErr error) (StepResult[O], error)
}

// VecEnv steps n environments in lock-step and resets each one as soon
// as its episode ends, so every call returns one observation per
// environment.
type VecEnv[O any] struct {
	envs []Env[O]
	spec EnvSpec
	obs  []O
	// per-env running episode statistics
	epReturn []float64
	epLen    []int
	// readSyncs are the host syncs of the batched reads Step made.
	readSyncs uint64
}

// ReadSyncs returns the host syncs of the reads VecEnv.Step made for its
// SplitStepper environments, all of them together, so far (summed over
// devices): the part of the environments' syncs no single environment's
// step counts.
func (v *VecEnv[O]) ReadSyncs() uint64 { return v.readSyncs }

// VecStep is VecEnv.Step's result, one entry per environment.
type VecStep[O any] struct {
	// Obs are the observations the next action is chosen from (the first
	// observation of a new episode where one ended).
	Obs []O
	// FinalObs holds, where an episode ended, its last observation (the
	// bootstrap state of a truncation); zero elsewhere.
	FinalObs []O
	// Rewards, Terminated and Truncated are the step's results.
	Rewards               []float64
	Terminated, Truncated []bool
	// Rollback flags the environments whose governor rolled back (see
	// StepResult.Rollback).
	Rollback []bool
	// Episodes lists the episodes that ended on this step.
	Episodes []Episode
}

// Episode summarises a finished episode.
type Episode struct {
	// Env is the environment's index.
	Env int
	// Return is the undiscounted sum of raw rewards.
	Return float64
	// Length is the number of steps.
	Length int
	// Truncated reports a time-limit end rather than a terminal state.
	Truncated bool
}

// NewVecEnv builds n environments with make(i) (i = 0..n−1; seed each
// from i) and resets them all.
func NewVecEnv[O any](n int, make func(i int) (Env[O], error)) (*VecEnv[O], error) {
	if n <= 0 {
		return nil, fmt.Errorf("simic: NewVecEnv: %d environments", n)
	}
	v := &VecEnv[O]{envs: newSlice[Env[O]](n), obs: newSlice[O](n), epReturn: newSlice[float64](n), epLen: newSlice[int](n)}
	for i := range v.envs {
		e, err := make(i)
		if err != nil {
			return nil, fmt.Errorf("simic: NewVecEnv: env %d: %w", i, err)
		}
		if e == nil {
			return nil, fmt.Errorf("simic: NewVecEnv: env %d is nil", i)
		}
		if err := e.Spec().Validate(); err != nil {
			return nil, fmt.Errorf("simic: NewVecEnv: env %d: %w", i, err)
		}
		if i == 0 {
			v.spec = e.Spec()
		} else if !slices.Equal(v.spec.HeadSizes, e.Spec().HeadSizes) {
			return nil, fmt.Errorf("simic: NewVecEnv: env %d has heads %v, env 0 has %v", i, e.Spec().HeadSizes, v.spec.HeadSizes)
		}
		v.envs[i] = e
		if v.obs[i], err = e.Reset(); err != nil {
			return nil, fmt.Errorf("simic: NewVecEnv: env %d reset: %w", i, err)
		}
	}
	return v, nil
}

func newSlice[T any](n int) []T { return make([]T, n) }

// Len is the number of environments.
func (v *VecEnv[O]) Len() int { return len(v.envs) }

// Spec is the shared action spec.
func (v *VecEnv[O]) Spec() EnvSpec { return v.spec }

// Obs returns the current observation of every environment.
func (v *VecEnv[O]) Obs() []O { return append([]O(nil), v.obs...) }

// ActionMasks returns the current masks of every environment.
func (v *VecEnv[O]) ActionMasks() []Masks {
	out := make([]Masks, len(v.envs))
	for i, e := range v.envs {
		out[i] = e.ActionMasks()
	}
	return out
}

// ResetUnfinished resets the environments that are inside an episode
// (that took a step since their last reset), dropping their unfinished
// episodes unreported, and returns their indices in order. Afterwards
// every environment stands at the start of an episode.
func (v *VecEnv[O]) ResetUnfinished() ([]int, error) {
	var idx []int
	for i, e := range v.envs {
		if v.epLen[i] == 0 {
			continue
		}
		o, err := e.Reset()
		if err != nil {
			return idx, fmt.Errorf("simic: VecEnv.ResetUnfinished: env %d reset: %w", i, err)
		}
		v.obs[i] = o
		v.epReturn[i], v.epLen[i] = 0, 0
		idx = append(idx, i)
	}
	return idx, nil
}

// stepAll steps every environment on its action, in order: a
// SplitStepper through StepStart, then, once all have started, one
// tensor.ToHostMany per device of every read they asked for, then
// StepFinish in order (a read's error goes to the environments that
// asked for one); any other Env through Step. The environments run one at
// a time (a SplitStepper holds still between its halves). When a step
// fails, the environments already started still get their reads and
// finish their steps, as they would have before it, and the error is
// returned.
func (v *VecEnv[O]) stepAll(actions [][]int) ([]StepResult[O], error) {
	n := len(v.envs)
	results := make([]StepResult[O], n)
	reads := make([][]*tensor.Tensor, n)
	started := make([]bool, n)
	finish := func() error {
		hosts, readErr := v.readAll(reads)
		var first error
		for i, e := range v.envs {
			if !started[i] {
				continue
			}
			var err error
			if reads[i] != nil {
				err = readErr
			}
			r, err := e.(SplitStepper[O]).StepFinish(hosts[i], err)
			if err != nil && first == nil {
				first = fmt.Errorf("simic: VecEnv.Step: env %d: %w", i, err)
			}
			results[i] = r
		}
		return first
	}
	for i, e := range v.envs {
		var err error
		if sp, ok := e.(SplitStepper[O]); ok {
			reads[i], err = sp.StepStart(actions[i])
			started[i] = err == nil
		} else {
			results[i], err = e.Step(actions[i])
		}
		if err != nil {
			_ = finish()
			return nil, fmt.Errorf("simic: VecEnv.Step: env %d: %w", i, err)
		}
	}
	return results, finish()
}

// readAll copies reads[i] (nil: none) to the host for every i with one
// tensor.ToHostMany per device, and returns the host copies in the same
// layout (nil where reads[i] is nil).
func (v *VecEnv[O]) readAll(reads [][]*tensor.Tensor) ([][]*tensor.Tensor, error) {
	hosts := make([][]*tensor.Tensor, len(reads))
	var devs []tensor.Device
	for _, ts := range reads {
		for _, t := range ts {
			if t != nil && !slices.Contains(devs, t.Device()) {
				devs = append(devs, t.Device())
			}
		}
	}
	for i, ts := range reads {
		if ts != nil {
			hosts[i] = make([]*tensor.Tensor, len(ts))
		}
	}
	for _, d := range devs {
		var on []*tensor.Tensor
		type at struct{ i, k int }
		var where []at
		for i, ts := range reads {
			for k, t := range ts {
				if t != nil && t.Device() == d {
					on, where = append(on, t), append(where, at{i, k})
				}
			}
		}
		s0 := tensor.HostSyncs(d)
		got, err := tensor.ToHostMany(on)
		v.readSyncs += tensor.HostSyncs(d) - s0
		if err != nil {
			return hosts, err
		}
		for j, w := range where {
			hosts[w.i][w.k] = got[j]
		}
	}
	return hosts, nil
}

// Step applies actions[i] to environment i, resets the environments
// whose episode ended, and returns the results.
func (v *VecEnv[O]) Step(actions [][]int) (*VecStep[O], error) {
	n := len(v.envs)
	if len(actions) != n {
		return nil, fmt.Errorf("simic: VecEnv.Step: %d actions for %d environments", len(actions), n)
	}
	s := &VecStep[O]{
		Obs: make([]O, n), FinalObs: make([]O, n), Rewards: make([]float64, n),
		Terminated: make([]bool, n), Truncated: make([]bool, n), Rollback: make([]bool, n),
	}
	for i := range v.envs {
		if len(actions[i]) != len(v.spec.HeadSizes) {
			return nil, fmt.Errorf("simic: VecEnv.Step: env %d: action has %d heads, want %d", i, len(actions[i]), len(v.spec.HeadSizes))
		}
	}
	results, err := v.stepAll(actions)
	if err != nil {
		return nil, err
	}
	for i, e := range v.envs {
		r := results[i]
		s.Rewards[i], s.Terminated[i], s.Truncated[i], s.Rollback[i] = r.Reward, r.Terminated, r.Truncated, r.Rollback
		v.epReturn[i] += r.Reward
		v.epLen[i]++
		s.Obs[i] = r.Obs
		if r.Terminated || r.Truncated {
			s.FinalObs[i] = r.Obs
			s.Episodes = append(s.Episodes, Episode{Env: i, Return: v.epReturn[i], Length: v.epLen[i], Truncated: !r.Terminated})
			v.epReturn[i], v.epLen[i] = 0, 0
			if s.Obs[i], err = e.Reset(); err != nil {
				return nil, fmt.Errorf("simic: VecEnv.Step: env %d reset: %w", i, err)
			}
		}
	}
	copy(v.obs, s.Obs)
	return s, nil
}
