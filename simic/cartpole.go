package simic

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/esper-go/esper/tensor"
)

// CartPole constants: the classic-control cart-pole of Barto, Sutton and
// Anderson (1983) with the parameters and limits of Gym's CartPole-v1.
const (
	cartPoleGravity    = 9.8
	cartPoleMassCart   = 1.0
	cartPoleMassPole   = 0.1
	cartPoleTotalMass  = cartPoleMassCart + cartPoleMassPole
	cartPoleHalfLen    = 0.5 // half the pole's length
	cartPolePoleMoment = cartPoleMassPole * cartPoleHalfLen
	cartPoleForce      = 10.0
	cartPoleTau        = 0.02 // seconds per step (explicit Euler)
	// CartPoleThetaLimit is the pole angle (radians, 12°) beyond which an
	// episode terminates.
	CartPoleThetaLimit = 12 * 2 * math.Pi / 360
	// CartPoleXLimit is the cart position beyond which an episode
	// terminates.
	CartPoleXLimit = 2.4
	// CartPoleMaxSteps is the time limit (CartPole-v1: 500).
	CartPoleMaxSteps = 500
	// CartPoleObsDim is the observation length: x, ẋ, θ, θ̇.
	CartPoleObsDim = 4
)

// CartPole is the cart-pole balancing task: push the cart left (action 0)
// or right (1); reward 1 for every step, including the terminating one;
// the episode terminates when |θ| > 12° or |x| > 2.4 and is truncated
// after 500 steps. The state starts uniform in ±0.05.
type CartPole struct {
	rng   *rand.Rand
	state [4]float64
	steps int
	done  bool
}

// NewCartPole returns a CartPole seeded with seed (call Reset first).
func NewCartPole(seed uint64) *CartPole { return &CartPole{rng: tensor.NewRNG(seed), done: true} }

// Spec implements Env: one head of two options.
func (c *CartPole) Spec() EnvSpec {
	return EnvSpec{HeadSizes: []int{2}, HeadNames: []string{"push"}}
}

// ActionMasks implements Env: both pushes are always allowed.
func (c *CartPole) ActionMasks() Masks { return nil }

// State returns x, ẋ, θ, θ̇.
func (c *CartPole) State() [4]float64 { return c.state }

// SetState sets x, ẋ, θ, θ̇ and restarts the step count (for tests).
func (c *CartPole) SetState(s [4]float64) { c.state, c.steps, c.done = s, 0, false }

func (c *CartPole) obs() []float32 {
	o := make([]float32, 4)
	for i, v := range c.state {
		o[i] = float32(v)
	}
	return o
}

// Reset implements Env.
func (c *CartPole) Reset() ([]float32, error) {
	for i := range c.state {
		c.state[i] = -0.05 + 0.1*c.rng.Float64()
	}
	c.steps, c.done = 0, false
	return c.obs(), nil
}

// ErrEpisodeOver is returned by Step after the episode ended and before
// Reset.
var ErrEpisodeOver = errors.New("episode is over; call Reset")

// Step implements Env.
func (c *CartPole) Step(action []int) (StepResult[[]float32], error) {
	if c.done {
		return StepResult[[]float32]{}, fmt.Errorf("simic: CartPole: %w", ErrEpisodeOver)
	}
	if len(action) != 1 || action[0] < 0 || action[0] > 1 {
		return StepResult[[]float32]{}, fmt.Errorf("simic: CartPole: action %v (want [0] or [1])", action)
	}
	force := -cartPoleForce
	if action[0] == 1 {
		force = cartPoleForce
	}
	x, xDot, th, thDot := c.state[0], c.state[1], c.state[2], c.state[3]
	cos, sin := math.Cos(th), math.Sin(th)
	tmp := (force + cartPolePoleMoment*thDot*thDot*sin) / cartPoleTotalMass
	thAcc := (cartPoleGravity*sin - cos*tmp) /
		(cartPoleHalfLen * (4.0/3.0 - cartPoleMassPole*cos*cos/cartPoleTotalMass))
	xAcc := tmp - cartPolePoleMoment*thAcc*cos/cartPoleTotalMass
	x += cartPoleTau * xDot
	xDot += cartPoleTau * xAcc
	th += cartPoleTau * thDot
	thDot += cartPoleTau * thAcc
	c.state = [4]float64{x, xDot, th, thDot}
	c.steps++
	r := StepResult[[]float32]{Obs: c.obs(), Reward: 1}
	r.Terminated = x < -CartPoleXLimit || x > CartPoleXLimit || th < -CartPoleThetaLimit || th > CartPoleThetaLimit
	r.Truncated = !r.Terminated && c.steps >= CartPoleMaxSteps
	c.done = r.Terminated || r.Truncated
	return r, nil
}

// CartPoleOptions configure TrainCartPole; the zero value selects the
// defaults, tuned for the acceptance run (average return ≥ 475 over 100
// deterministic evaluation episodes within 500 000 environment steps).
type CartPoleOptions struct {
	// Seed seeds the environments, the policy and PPO.
	Seed uint64
	// Envs is the number of lock-step environments; 0 means 8.
	Envs int
	// Steps is the rollout length per environment; 0 means 256.
	Steps int
	// MaxEnvSteps is the training budget in environment steps; 0 means
	// 500 000.
	MaxEnvSteps int
	// PPO overrides the PPO options; the zero value means the CartPole
	// defaults (LR 1e-3 annealed linearly to 0 over the budget, γ 0.99,
	// λ 0.95, 10 epochs, minibatches of 256, entropy weight 0.001,
	// max grad norm 0.5). Seed is always set from Seed.
	PPO *PPOOptions
	// Hidden are the MLP widths; nil means DefaultMLPHidden.
	Hidden []int
	// Device is where the policy computes and PPO updates it (the CPU by
	// default; MLPPolicyOptions.Device). The environments are host
	// simulations.
	Device tensor.Device
	// EvalEvery runs a quick deterministic check (QuickEvalEpisodes
	// episodes) every EvalEvery updates; 0 means 5.
	EvalEvery int
	// QuickEvalEpisodes is the size of the quick check; 0 means 10.
	QuickEvalEpisodes int
	// EvalEpisodes is the size of the full evaluation run when the quick
	// check passes Target; 0 means 100.
	EvalEpisodes int
	// Target is the average return that ends training; 0 means 475.
	Target float64
	// Logf, if set, receives progress lines.
	Logf func(format string, args ...any)
}

// CartPoleResult reports TrainCartPole.
type CartPoleResult struct {
	// Solved reports that an evaluation reached Target.
	Solved bool
	// EnvSteps is the number of training environment steps taken.
	EnvSteps int
	// Updates is the number of PPO updates.
	Updates int
	// EvalMean is the average return of the last full evaluation
	// (EvalEpisodes episodes, deterministic, seeds disjoint from
	// training).
	EvalMean float64
	// EvalEpisodes is the number of episodes it averaged.
	EvalEpisodes int
	// EvalSteps is the number of environment steps spent in all
	// evaluations (not counted in EnvSteps).
	EvalSteps int
	// TrainReturns is the mean training-episode return per update.
	TrainReturns []float64
	// Wall is the wall-clock time.
	Wall time.Duration
	// Policy is the trained policy.
	Policy *MLPPolicy
}

// cartPoleEvalSeedBase keeps evaluation seeds apart from training seeds.
const cartPoleEvalSeedBase = 1 << 40

// TrainCartPole trains an MLPPolicy on CartPole with PPO until a full
// evaluation reaches Target or the step budget is spent (a final full
// evaluation is then run).
func TrainCartPole(o CartPoleOptions) (*CartPoleResult, error) {
	start := time.Now()
	if o.Envs == 0 {
		o.Envs = 8
	}
	if o.Steps == 0 {
		o.Steps = 256
	}
	if o.MaxEnvSteps == 0 {
		o.MaxEnvSteps = 500_000
	}
	if o.EvalEvery == 0 {
		o.EvalEvery = 5
	}
	if o.QuickEvalEpisodes == 0 {
		o.QuickEvalEpisodes = 10
	}
	if o.EvalEpisodes == 0 {
		o.EvalEpisodes = 100
	}
	if o.Target == 0 {
		o.Target = 475
	}
	if o.Envs < 0 || o.Steps < 0 || o.MaxEnvSteps < 0 || o.EvalEvery < 0 || o.QuickEvalEpisodes < 0 || o.EvalEpisodes < 0 {
		return nil, fmt.Errorf("simic: TrainCartPole: negative option in %+v", o)
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	perUpdate := o.Envs * o.Steps
	totalUpdates := max(1, o.MaxEnvSteps/perUpdate)
	var po PPOOptions
	if o.PPO != nil {
		po = *o.PPO
	} else {
		po = PPOOptions{LR: 1e-3, Gamma: 0.99, GAELambda: 0.95, Epochs: 10, MinibatchSize: 256,
			EntropyCoef: 0.001, MaxGradNorm: 0.5, TotalUpdates: totalUpdates}
	}
	po.Seed = o.Seed
	annealLR := o.PPO == nil
	spec := (&CartPole{}).Spec()
	policy, err := NewMLPPolicy(MLPPolicyOptions{ObsDim: CartPoleObsDim, Spec: spec, Hidden: o.Hidden, Seed: o.Seed + 1, Device: o.Device})
	if err != nil {
		return nil, err
	}
	agent, err := NewPPO[[]float32](policy, spec, po)
	if err != nil {
		return nil, err
	}
	vec, err := NewVecEnv(o.Envs, func(i int) (Env[[]float32], error) {
		return NewCartPole(o.Seed*1_000_003 + uint64(i) + 7), nil
	})
	if err != nil {
		return nil, err
	}
	tr, err := NewTrainer(agent, vec, TrainerOptions[[]float32]{Steps: o.Steps})
	if err != nil {
		return nil, err
	}
	res := &CartPoleResult{Policy: policy}
	evalRound := 0
	evaluate := func(n int) (*EvalResult, error) {
		base := uint64(cartPoleEvalSeedBase) + o.Seed*1_000_003 + uint64(evalRound)*10_007
		evalRound++
		er, err := EvaluatePolicy[[]float32](policy, func(i int) (Env[[]float32], error) {
			return NewCartPole(base + uint64(i)), nil
		}, n, nil)
		if err == nil {
			res.EvalSteps += er.Steps
		}
		return er, err
	}
	for tr.EnvSteps()+perUpdate <= o.MaxEnvSteps {
		if annealLR {
			frac := 1 - float64(tr.EnvSteps())/float64(o.MaxEnvSteps)
			if err := agent.SetLR(po.LR * frac); err != nil {
				return nil, err
			}
		}
		it, err := tr.Iterate()
		if err != nil {
			return nil, err
		}
		res.Updates++
		mean := math.NaN()
		if len(it.Episodes) > 0 {
			mean = 0
			for _, e := range it.Episodes {
				mean += e.Return
			}
			mean /= float64(len(it.Episodes))
		}
		res.TrainReturns = append(res.TrainReturns, mean)
		u := it.Update
		logf("update %d steps %d train-return %.1f (%d eps) kl %.4f clip %.3f ent %.3f ev %.3f epochs %d%s",
			res.Updates, it.EnvSteps, mean, len(it.Episodes), u.MaxKL, u.ClipFraction[0], u.Entropy[0], u.ExplainedVariance, u.Epochs,
			map[bool]string{true: " (KL stop)", false: ""}[u.EarlyStopped])
		if res.Updates%o.EvalEvery != 0 {
			continue
		}
		q, err := evaluate(o.QuickEvalEpisodes)
		if err != nil {
			return nil, err
		}
		logf("  quick eval (%d eps): %.1f", o.QuickEvalEpisodes, q.Mean)
		if q.Mean < o.Target {
			continue
		}
		full, err := evaluate(o.EvalEpisodes)
		if err != nil {
			return nil, err
		}
		res.EvalMean, res.EvalEpisodes = full.Mean, o.EvalEpisodes
		logf("  full eval (%d eps): %.2f", o.EvalEpisodes, full.Mean)
		if full.Mean >= o.Target {
			res.Solved = true
			break
		}
	}
	if !res.Solved {
		full, err := evaluate(o.EvalEpisodes)
		if err != nil {
			return nil, err
		}
		res.EvalMean, res.EvalEpisodes = full.Mean, o.EvalEpisodes
		res.Solved = full.Mean >= o.Target
		logf("final eval (%d eps): %.2f", o.EvalEpisodes, full.Mean)
	}
	res.EnvSteps = tr.EnvSteps()
	res.Wall = time.Since(start)
	return res, nil
}
