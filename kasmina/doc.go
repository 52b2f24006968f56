// Package kasmina grows neural networks while they train: it equips a
// host network with seed slots, germinates seed modules from the
// blueprint catalog into them, and manages each seed's life (esper-
// reference §2, the second-generation SeedSlot, plus the first
// generation's attribution and seed-state export).
//
// A Host (CNNHost, MLPHost) is a network cut into segments at named slots
// ("r0c1"); MorphogeneticModel runs it segment by segment and lets each
// Slot blend its seed's output into the activation:
//
//	DORMANT → GERMINATED → TRAINING → BLENDING → HOLDING → FOSSILIZED
//	                 ↘          ↘          ↘          ↘
//	                  PRUNED → EMBARGOED → RESETTING → (empty)
//
// Each forward stage is guarded by a quality gate (G0, G1, G2, G3, G5).
// A TRAINING seed learns in isolation: its input is detached from the
// host graph and, at alpha 0, a straight-through blend keeps the output
// exactly the host's while the seed still receives gradient. BLENDING
// ramps alpha along an eased curve (AlphaController) with one of the
// blend algorithms ADD, MULTIPLY or GATE; HOLDING keeps alpha at 1 until
// the policy fossilizes the seed (it then stays in the network) or prunes
// it (the slot is embargoed for a few epochs, then emptied).
//
// Telemetry goes to an EventSink (nissa.Hub implements it) as leyline
// events with typed payloads. The model exposes its parameter ownership
// (host or seed id) and a Version that changes with its parameter set,
// for optimizers, captured steps and Tolaria's per-seed gradient
// handling.
//
// A model lives on the device of its host: move the host (or the model)
// with nn.To and every seed and gate is created there (built on the CPU,
// then moved in one host-to-device copy); forward and backward passes
// read nothing back. Gradient telemetry (CaptureGradientTelemetry) and
// SaveState read device tensors back in one host sync per slot that
// holds a seed.
//
// Nothing here is safe for concurrent use; one goroutine drives a model.
package kasmina
