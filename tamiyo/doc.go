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
//     penalties after a prune.
//
// The learned controller, a heterogeneous graph neural network policy over
// the same action space with a batched, captured inference service,
// arrives with a later issue; it will implement Controller too, so the
// trainer can swap one for the other.
//
// Neither type is tied to a trainer: both are plain state machines driven
// by the caller, deterministic for the same inputs. Their state (and a
// Tracked's) can be saved with MarshalState and restored with
// UnmarshalState, so that a trainer's checkpoint carries it and a resumed
// run decides as an uninterrupted one would (see StateVersion).
package tamiyo
