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

// SplitResetter is an Env whose reset reads its device state once, in
// the middle, as a SplitStepper's step does: ResetStart runs the reset up
// to that read and returns the device tensors it wants (nil: none),
// ResetFinish takes their host copies (or the read's error) and returns
// the episode's first observation. VecEnv resets its SplitResetter
// environments in the same batched reads as their steps: an episode that
// ends within StepStart (its last epoch done, nothing left to read)
// finishes its step at once and starts its reset, whose read joins the
// other environments' reads of that lock-step step.
type SplitResetter[O any] interface {
	ResetStart() ([]*tensor.Tensor, error)
	ResetFinish(hosts []*tensor.Tensor, readErr error) (O, error)
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
	}
	all := newSlice[int](n)
	for i := range all {
		all[i] = i
	}
	if _, err := v.resetAll(all, "NewVecEnv"); err != nil {
		return nil, err
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
// every environment stands at the start of an episode. SplitResetter
// environments read their first epochs together (see resetAll). On an
// error it returns the indices of the environments whose reset
// completed.
func (v *VecEnv[O]) ResetUnfinished() ([]int, error) {
	var want []int
	for i := range v.envs {
		if v.epLen[i] != 0 {
			want = append(want, i)
		}
	}
	return v.resetAll(want, "VecEnv.ResetUnfinished")
}

// resetAll resets the environments idx (ascending) and takes their first
// observations: every SplitResetter through ResetStart, then their reads
// together (one tensor.ToHostMany per device), then ResetFinish in
// order; any other Env through Reset, in its turn. It returns the
// indices whose reset completed; errors name the caller (op).
func (v *VecEnv[O]) resetAll(idx []int, op string) ([]int, error) {
	var halves []halfDone
	obs := make([]O, len(v.envs))
	var done []int
	// finish completes the started resets and records those that
	// succeeded.
	finish := func() error {
		errs := v.finishHalves(halves, nil, obs)
		var first error
		for k, h := range halves {
			if errs[k] != nil {
				if first == nil {
					first = fmt.Errorf("simic: %s: env %d reset: %w", op, h.i, errs[k])
				}
				continue
			}
			v.obs[h.i] = obs[h.i]
			v.epReturn[h.i], v.epLen[h.i] = 0, 0
			done = append(done, h.i)
		}
		slices.Sort(done)
		return first
	}
	for _, i := range idx {
		e := v.envs[i]
		if sr, ok := e.(SplitResetter[O]); ok {
			reads, err := sr.ResetStart()
			if err != nil {
				_ = finish()
				return done, fmt.Errorf("simic: %s: env %d reset: %w", op, i, err)
			}
			halves = append(halves, halfDone{i: i, reset: true, reads: reads})
			continue
		}
		o, err := e.Reset()
		if err != nil {
			_ = finish()
			return done, fmt.Errorf("simic: %s: env %d reset: %w", op, i, err)
		}
		v.obs[i] = o
		v.epReturn[i], v.epLen[i] = 0, 0
		done = append(done, i)
	}
	err := finish() // before done is read: finish appends to it
	return done, err
}

// halfDone is an environment between the halves of a split step
// (SplitStepper) or reset (SplitResetter, with reset), and the device
// tensors its read wants (nil: none).
type halfDone struct {
	i     int
	reset bool
	reads []*tensor.Tensor
}

// finishHalves reads the tensors every half-done step and reset asked
// for, with one tensor.ToHostMany per device, and completes them in
// order: a step's result goes to results[i], a reset's first
// observation to obs[i]. A read's error goes only to those that asked
// for a read. It returns each one's error (nil where it succeeded).
func (v *VecEnv[O]) finishHalves(halves []halfDone, results []StepResult[O], obs []O) []error {
	errs := make([]error, len(halves))
	if len(halves) == 0 {
		return errs
	}
	reads := make([][]*tensor.Tensor, len(halves))
	for k, h := range halves {
		reads[k] = h.reads
	}
	hosts, readErr := v.readAll(reads)
	for k, h := range halves {
		var err error
		if h.reads != nil {
			err = readErr
		}
		if h.reset {
			obs[h.i], errs[k] = v.envs[h.i].(SplitResetter[O]).ResetFinish(hosts[k], err)
		} else {
			results[h.i], errs[k] = v.envs[h.i].(SplitStepper[O]).StepFinish(hosts[k], err)
		}
	}
	return errs
}

// stepOutcome is what stepAll did for each environment: its step's
// result where stepped, and, where reset, the first observation of the
// episode it started (its reset batched with the step's reads).
type stepOutcome[O any] struct {
	results []StepResult[O]
	stepped []bool
	reset   []bool
	first   []O
}

// stepAll steps every environment on its action, in order, and starts
// the next episode of those whose episode ended where it can batch that
// reset's read. A SplitStepper steps through StepStart; one that asks for
// no read (its episode ended with the epoch the action finished, or its
// next epoch parked or ended without reading) finishes its step at once,
// and, if its episode ended and it is a SplitResetter, starts its reset.
// Once all have started, the reads they asked for are made together (one
// tensor.ToHostMany per device) and the halves finish in order. Any other
// Env steps through Step. The environments run one at a time (a split
// one holds still between its halves). When a step or reset fails, the
// environments already started still get their reads and finish, as
// they would have before it, and the error is returned with what did
// complete.
func (v *VecEnv[O]) stepAll(actions [][]int) (stepOutcome[O], error) {
	n := len(v.envs)
	out := stepOutcome[O]{results: make([]StepResult[O], n), stepped: make([]bool, n), reset: make([]bool, n), first: make([]O, n)}
	var halves []halfDone
	finish := func() error {
		var first error
		for k, err := range v.finishHalves(halves, out.results, out.first) {
			h := halves[k]
			switch {
			case err == nil && h.reset:
				out.reset[h.i] = true
			case err == nil:
				out.stepped[h.i] = true
			case first == nil && h.reset:
				first = fmt.Errorf("simic: VecEnv.Step: env %d reset: %w", h.i, err)
			case first == nil:
				first = fmt.Errorf("simic: VecEnv.Step: env %d: %w", h.i, err)
			}
		}
		halves = nil
		return first
	}
	fail := func(i int, what string, err error) (stepOutcome[O], error) {
		_ = finish()
		return out, fmt.Errorf("simic: VecEnv.Step: env %d%s: %w", i, what, err)
	}
	for i, e := range v.envs {
		sp, ok := e.(SplitStepper[O])
		if !ok {
			r, err := e.Step(actions[i])
			if err != nil {
				return fail(i, "", err)
			}
			out.results[i], out.stepped[i] = r, true
			continue
		}
		reads, err := sp.StepStart(actions[i])
		if err != nil {
			return fail(i, "", err)
		}
		if reads != nil {
			halves = append(halves, halfDone{i: i, reads: reads})
			continue
		}
		r, err := sp.StepFinish(nil, nil)
		if err != nil {
			return fail(i, "", err)
		}
		out.results[i], out.stepped[i] = r, true
		if sr, ok := e.(SplitResetter[O]); ok && (r.Terminated || r.Truncated) {
			reads, err := sr.ResetStart()
			if err != nil {
				return fail(i, " reset", err)
			}
			halves = append(halves, halfDone{i: i, reset: true, reads: reads})
		}
	}
	return out, finish()
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
// whose episode ended, and returns the results. SplitStepper and
// SplitResetter environments read their device state together: one
// batched read for the lock-step step, the first epochs of the episodes
// that ended within StepStart included; episodes that ended after that
// read (a diverged host) start together after it, in one more read.
// When an environment fails, Step returns the error with the VecStep of
// what completed: the environments whose step failed, or that never
// stepped, have zero entries, and their observation in Obs is the one
// they had. VecEnv's own state (observations, episode statistics) then
// holds what completed.
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
	out, err := v.stepAll(actions)
	var late []int // ended, not yet reset
	for i := range v.envs {
		if !out.stepped[i] {
			s.Obs[i] = v.obs[i]
			continue
		}
		r := out.results[i]
		s.Rewards[i], s.Terminated[i], s.Truncated[i], s.Rollback[i] = r.Reward, r.Terminated, r.Truncated, r.Rollback
		v.epReturn[i] += r.Reward
		v.epLen[i]++
		s.Obs[i] = r.Obs
		if r.Terminated || r.Truncated {
			s.FinalObs[i] = r.Obs
			s.Episodes = append(s.Episodes, Episode{Env: i, Return: v.epReturn[i], Length: v.epLen[i], Truncated: !r.Terminated})
			v.epReturn[i], v.epLen[i] = 0, 0
			if out.reset[i] {
				s.Obs[i] = out.first[i]
			} else {
				late = append(late, i)
			}
		}
		v.obs[i] = s.Obs[i]
	}
	if err != nil {
		return s, err
	}
	if len(late) > 0 {
		_, err = v.resetAll(late, "VecEnv.Step")
		for _, i := range late {
			s.Obs[i] = v.obs[i] // the new episode's first observation where its reset completed
		}
	}
	return s, err
}
