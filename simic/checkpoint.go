package simic

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// pcgSalt is the second PCG word of a seed's generator, as tensor.NewRNG
// derives it, so that a PPO draws the stream tensor.NewRNG(seed) would.
const pcgSalt = 0x9e3779b97f4a7c15

// newPCG is tensor.NewRNG's source, kept so that its state can be saved.
func newPCG(seed uint64) *rand.PCG { return rand.NewPCG(seed, seed^pcgSalt) }

// ErrTrainerState is wrapped when a TrainerState cannot be loaded.
var ErrTrainerState = errors.New("invalid trainer state")

// TrainerState is what a Trainer carries from one iteration to the next
// besides the policy's parameters and the optimizer's state
// (PPO.Optimizer().StateDict()): the counters, the sampling generator and
// the normalisers. Its JSON form round-trips exactly.
//
// Together with those two it is the whole checkpoint of a run whose
// trainer has TrainerOptions.EpisodicRollouts: between iterations every
// environment then stands at the start of an episode, so an environment
// needs to be rebuilt only from what it seeds its episodes with (an
// EsperEnv from its Episode, see EsperEnvOptions.FirstEpisode), and a
// trainer restored from the checkpoint continues bit for bit where the
// saved one would have. State the trainer does not own is the caller's to
// save: an ObsTransform's (a VectorObsNormalizer's RunningMeanStd, which
// NewTrainer also updates with the first observations) and a policy's
// own randomness (dropout).
type TrainerState struct {
	// EnvSteps is Trainer.EnvSteps.
	EnvSteps int `json:"env_steps"`
	// Updates is PPO.Updates; Skips the updates skipped in a row (see
	// MaxConsecutiveSkips).
	Updates int `json:"updates"`
	Skips   int `json:"skips"`
	// Rand is the state of PPO's generator (action sampling, minibatch
	// shuffles) in math/rand/v2's PCG binary form.
	Rand []byte `json:"rand"`
	// ValueNorm is the value normaliser's state; RewardNorm the reward
	// normaliser's (nil when the trainer does not normalise rewards).
	ValueNorm  NormState  `json:"value_norm"`
	RewardNorm *NormState `json:"reward_norm,omitempty"`
}

// State returns the trainer's state for a checkpoint. Take it between
// iterations (not during Collect).
func (t *Trainer[O]) State() (TrainerState, error) {
	p := t.ppo
	rs, err := p.pcg.MarshalBinary()
	if err != nil {
		return TrainerState{}, fmt.Errorf("simic: Trainer.State: %w", err)
	}
	s := TrainerState{EnvSteps: t.envSteps, Updates: p.updates, Skips: p.skips, Rand: rs, ValueNorm: p.valueNorm.State()}
	if t.rewardNorm != nil {
		rn := t.rewardNorm.State()
		s.RewardNorm = &rn
	}
	return s, nil
}

// LoadState restores a state saved by State into a trainer built with the
// same options (the policy's parameters and the optimizer's state are
// restored separately). It checks the whole state first: nothing changes
// on error.
func (t *Trainer[O]) LoadState(s TrainerState) error {
	p := t.ppo
	switch {
	case s.EnvSteps < 0 || s.Updates < 0 || s.Skips < 0:
		return fmt.Errorf("simic: %w: negative counter in env steps %d, updates %d, skips %d", ErrTrainerState, s.EnvSteps, s.Updates, s.Skips)
	case (s.RewardNorm != nil) != (t.rewardNorm != nil):
		return fmt.Errorf("simic: %w: reward normaliser state present %v, trainer normalises rewards %v", ErrTrainerState, s.RewardNorm != nil, t.rewardNorm != nil)
	}
	pcg := new(rand.PCG)
	if err := pcg.UnmarshalBinary(s.Rand); err != nil {
		return fmt.Errorf("simic: %w: generator: %v", ErrTrainerState, err)
	}
	vn, err := NewValueNormalizer(p.opts.ValueNorm)
	if err != nil {
		return err
	}
	if err := vn.LoadState(s.ValueNorm); err != nil {
		return fmt.Errorf("simic: %w: value normaliser: %w", ErrTrainerState, err)
	}
	var rn *RewardNormalizer
	if s.RewardNorm != nil {
		if rn, err = NewRewardNormalizer(t.opts.RewardNorm); err != nil {
			return err
		}
		if err := rn.LoadState(*s.RewardNorm); err != nil {
			return fmt.Errorf("simic: %w: reward normaliser: %w", ErrTrainerState, err)
		}
	}
	// The PPO's *rand.Rand keeps no state of its own: restoring its
	// source restores the stream.
	*p.pcg = *pcg
	*p.valueNorm = *vn
	if rn != nil {
		*t.rewardNorm = *rn
	}
	t.envSteps, p.updates, p.skips = s.EnvSteps, s.Updates, s.Skips
	return nil
}
