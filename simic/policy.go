package simic

import (
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
)

// Policy is the actor-critic PPO trains. It sees a batch of observations
// at a time (one per environment in a rollout, a minibatch in an update).
//
// Tamiyo's graph policy fits through a thin adapter: Act merges the
// per-environment graphs into one batched graph and calls
// tamiyo.Policy.Act (its ActResult's Actions, LogProbs and Values map
// one-to-one onto ActOutput); Evaluate calls tamiyo.Policy.Evaluate,
// whose per-head LogProbs, normalised Entropies and Value are the
// Evaluation fields; Values runs the network for V(s) only. The adapter
// keeps the leyline.ActionMasks per step inside its observation type and
// passes nil Masks to simic, or converts them to Masks.
type Policy[O any] interface {
	// Act chooses one action per observation without recording
	// gradients: sampled from the masked distributions, or the most
	// probable option of every head when deterministic. masks has one
	// entry per observation (nil entries allow everything).
	Act(obs []O, masks []Masks, rng *rand.Rand, deterministic bool) (*ActOutput, error)
	// Evaluate recomputes, differentiably (when grad mode is on), the
	// log-probabilities and normalised entropies of actions under masks,
	// and the values, for a minibatch.
	Evaluate(obs []O, masks []Masks, actions [][]int) (*Evaluation, error)
	// Values returns V(s) per observation without recording gradients
	// (the truncation bootstrap).
	Values(obs []O) ([]float64, error)
	// Parameters are the trainable parameters (one optimizer over all).
	Parameters() []*autograd.Var
}

// ActOutput is Policy.Act's result for B observations.
type ActOutput struct {
	// Actions[b][h] is the option chosen on head h.
	Actions [][]int
	// LogProbs[b][h] is its log-probability.
	LogProbs [][]float64
	// Values[b] is V(s) in the critic's (normalised) units.
	Values []float64
}

// Evaluation is Policy.Evaluate's result: differentiable tensors for the
// PPO loss.
type Evaluation struct {
	// LogProbs[h] is [B]: log-probability of each action on head h.
	LogProbs []*autograd.Var
	// Entropies[h] is [B]: head h's entropy divided by ln(number of valid
	// options), in [0, 1]; 0 where one option is valid.
	Entropies []*autograd.Var
	// Value is V(s), [B], in the critic's (normalised) units.
	Value *autograd.Var
	// LogProbsAll and EntropiesAll, when not nil, are LogProbs and
	// Entropies as the rows of one [H, B] tensor each (LogProbs[h] being
	// row h): the PPO loss then takes every head at once without
	// stacking them.
	LogProbsAll, EntropiesAll *autograd.Var
}
