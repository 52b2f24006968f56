// Package simic trains policies with proximal policy optimisation (PPO):
// Esper's reinforcement-learning domain, which in the end teaches Tamiyo
// when to germinate, advance, fossilize or prune seeds.
//
// The PPO here is generic over the observation type O:
//
//   - Env is one environment with a factored (multi-head) discrete action
//     and optional per-head action masks; VecEnv steps n of them in
//     lock-step and resets finished ones.
//   - Policy is the actor-critic: Act samples actions for a batch of
//     observations without recording gradients, Evaluate recomputes
//     differentiable log-probabilities, normalised entropies and values
//     for a minibatch. MLPPolicy is a feed-forward implementation for
//     vector observations; Tamiyo's graph policy plugs in through an
//     adapter with the same two calls.
//   - Buffer is the rollout buffer [n_envs, max_steps] with rollback
//     credit (prefix forfeiture) and GAE with truncation bootstrap
//     (esper-reference.md §5.3).
//   - PPO.Update runs the clipped-surrogate update of esper-reference.md
//     §5.4: anchored reference pass, per-head causal advantage masks,
//     value loss against normalised returns, entropy bonus with per-head
//     multipliers and floors, KL early stop, gradient clipping, shuffled
//     minibatches and a finiteness gate.
//   - RunningMeanStd, RewardNormalizer and ValueNormalizer are the
//     normalisers of §5.5.
//   - Rewarder computes the per-step reward of a lifecycle decision in
//     one of three modes (§5.6): SHAPED, whose terms are reported
//     separately and sum to the total, SIMPLIFIED and SPARSE.
//   - CounterfactualEngine attributes accuracy to seeds (§5.7): the
//     configurations to evaluate come as one plan (so an environment
//     validates them in one batched pass), then exact Shapley values
//     over the full factorial for up to four seeds, seeded antithetic
//     permutation sampling above, and pairwise interactions.
//   - Trainer alternates rollouts and updates; CartPole (Gym's
//     CartPole-v1) is the validation environment and TrainCartPole the
//     acceptance run.
//   - EsperPPO is the run `esper ppo` trains: Tamiyo's policy over
//     vectorised EsperEnvs, a Round at a time. Its checkpoint
//     (SavePPOCheckpoint, LoadPPOCheckpoint, RestorePPOCheckpoint) is
//     staged and committed by its state file, so kill -9 at any point
//     leaves a whole one, and a resumed run continues bit for bit.
//
// Devices: an EsperEnv's host trains on EsperEnvOptions.Device, the
// policies compute on theirs (tamiyo.PolicyOptions.Device,
// MLPPolicyOptions.Device) and PPO.Update runs on its policy's, so a run
// is bitwise the same on the cpu and on sim, and EsperPPOOptions.Devices
// spreads the environments over several. Every read of a device is an
// explicit copy, and few: per env-epoch an environment reads its host
// once per training and validation pass (tolaria) and once for the fused
// counterfactual configurations, and builds the observation, the reward
// and the masks on the host from those reads; per lock-step step the
// batched Act reads once for every environment; per rollout the bootstrap
// values are read once per step that has any; PPO.Update reads its
// statistics once (plus what the policy's Evaluate reads: Tamiyo's
// probability floors, once per minibatch). GAE, the normalisers and the
// advantage normalisation work on those host figures.
//
// Everything random draws from generators seeded by the options, so a run
// is reproducible from its seed.
package simic
