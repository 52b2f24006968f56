// Package tamiyo is Esper's strategic controller: once per epoch it reads
// the host's training signals and the seeds' reports and decides what to
// do to the seed slots (germinate, advance, fossilize, prune or wait).
//
// A controller is anything that implements Controller; the trainer
// (tolaria) calls EvaluateEpoch under a deadline and applies the returned
// leyline.Decision. This package provides the rule-based controller of
// the second-generation Python Esper (esper-reference.md §4.1):
//
//   - SignalTracker turns each epoch's losses and accuracies into
//     leyline.TrainingSignals: deltas, the plateau counter, the latched
//     host-stabilisation flag, bounded histories and a summary of the most
//     advanced seed.
//   - Heuristic decides from those signals: germinate on a plateau once
//     the host has stabilised, advance seeds through TRAINING and
//     BLENDING, fossilize a HOLDING seed whose counterfactual contribution
//     earns it, prune a failing one, and keep an embargo and per-blueprint
//     penalties after a prune. NewHeuristic's Heuristic keeps a
//     SignalTracker of its own, so a trainer, which passes each epoch's
//     raw figures, can use it as it is; Tracked wraps any controller with
//     a tracker (other TrackerOptions, or the GNN Service).
//
// The learned controller is a heterogeneous graph neural network over the
// same action space (ESPER.md §Tamiyo):
//
//   - BuildGraph turns one environment's typed state (Obs V3 input, host
//     blocks, slot timeline) into a Graph of global, slot and layer nodes
//     with the relations of ESPER.md and per-family feature Coverage;
//     BatchGraphs joins many into one with offset indices.
//   - Policy is the network: per-type encoders, two GraphSAGE and two GAT
//     layers, the factored action heads with the slot head as a pointer
//     over slot nodes (any slot count), and a value head.
//   - Policy.Act samples masked, floored, canonicalised actions for a
//     batch; Policy.Evaluate recomputes their log-probabilities and
//     normalised entropies differentiably for PPO. MaskedCategorical is
//     the same masked, floored distribution for one row of host logits
//     (ProbabilityFloorPerHead holds the G2 floors).
//
// The inference service makes the policy a Controller:
//
//   - Inference runs the policy's forward for action selection, captured
//     and replayed per graph shape (autograd.Capture) with an eager
//     fallback when a capture fails.
//   - Service implements Controller: EvaluateEpoch builds the graph and
//     masks of the epoch's state, runs the policy under a deadline
//     (missing it gives WAIT and an error wrapping ErrInferenceTimeout),
//     samples (or takes the most probable) masked action, maps it to a
//     leyline.Decision and emits the tamiyo.gnn.* telemetry.
//   - SavePolicy and LoadPolicy checkpoint a policy as safetensors with
//     a JSON header (schema version, options, slot configuration,
//     checksum); a mismatch is refused (ErrCheckpointMismatch), a corrupt
//     file too (ErrCheckpointCorrupt).
//
// A policy runs on any device (PolicyOptions.Device, Policy.To), and Act,
// Evaluate, Inference and Service with it, bitwise as on the CPU: each
// call puts its graph there in two copies (one host buffer of float
// features, one of indices, the tensors views of their device copies) and
// reads back once — Act's and a decision's logits and values together
// (one host sync), Evaluate's floored heads' masked logits together (one),
// SavePolicy's parameters together (one).
//
// Neither type is tied to a trainer: both are plain state machines driven
// by the caller, deterministic for the same inputs. Their state (and a
// Tracked's) can be saved with MarshalState and restored with
// UnmarshalState, so that a trainer's checkpoint carries it and a resumed
// run decides as an uninterrupted one would (see StateVersion).
package tamiyo
