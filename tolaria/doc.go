// Package tolaria trains morphogenetic models: it is where the epoch loop
// meets the safety machinery that keeps a growing network alive
// (esper-reference §3, ARCHITECTURE.md).
//
// The Trainer runs the epoch loop: training steps (captured and replayed
// with Capture, eager fallback reported once), mixed precision (AMP bf16
// autocast, or fp16 autocast with a device-resident GradScaler; TF32),
// gradient aggregation over the seeds (PCGrad through package
// aggregation, with per-seed tolaria.grad_agg.* metrics every epoch),
// validation in inference mode, counterfactuals, the controller's
// decision under a deadline, and checkpoints that resume bitwise.
//
// The Trainer trains the model on its device (nn.Device; move it with
// nn.To first): batches are copied there — by the trainer, one explicit
// copy per tensor, unless the data source delivers them there itself
// (InputSource: a data.Loader with LoaderOptions.Device, copying one
// batch ahead through pinned staging on CUDA, or from a dataset Resident
// on the device), the epoch's copy time reported as tolaria.h2d_copy_ms
// and the staging as tolaria.train.pin_memory — the loss and accuracy
// accumulate there and are read back together once per epoch, and every
// other device-to-host read is an explicit copy — the
// gradient telemetry and the per-seed aggregation metrics (one gathered
// copy each, every GradientTelemetryStride steps), fp16's found-inf flag
// on those steps, checkpoints and snapshots. EpochReport.HostSyncs and
// tolaria.host_syncs count them per epoch (tensor.HostSyncs); on the
// strict "sim" device a run is bitwise the CPU's. On a device PCGrad
// combines the seeds' gradients there (package aggregation's device
// path), agreeing with the CPU's host combination within float32
// rounding. Batches that a data.Loader delivers on the model's device
// (LoaderOptions.Device, Pinned, Resident) are not copied again; the
// input copies' time is tolaria.h2d_copy_ms.
//
// It is built on:
//
//   - Governor: the G2 training governor. CheckVitalSigns watches the
//     validation loss for NaN/Inf, divergence spikes and collapse to
//     random guessing; ExecuteRollback restores the last snapshot of the
//     host and its fossilized seeds, prunes every live seed and emits one
//     GOVERNOR_ROLLBACK event; Preflight vets lifecycle mutations.
//   - Deadlines: the controller (Tamiyo) decision and the Kasmina apply
//     each run under a deadline; a miss is counted (tolaria.timeout.*),
//     reported, and switches to conservative mode (WAIT), and a late
//     result is discarded, never applied.
//   - Breaker: the CLOSED / OPEN / HALF_OPEN circuit breaker behind the
//     trainer's failed-epoch handling (tolaria.breaker.state): an epoch
//     fails on an open breaker, an exceeded EpochBudget or a deadline
//     miss, turns conservative mode on and, with RollbackOnFailure,
//     restores the previous epoch's state from the two rollback tiers
//     (package rollback: the in-memory fast tier, FastRollbackMB, then
//     the checkpoints; tolaria.rollback.*).
//   - ApplyDecision: carries a leyline.Decision out on a
//     kasmina.MorphogeneticModel.
//   - ParseDevice (deprecated): tensor.ParseDevice's syntax rules;
//     whether a device exists is kernels/device.Open's question.
//
// Tolaria never makes policy decisions: those come from a Controller
// (Tamiyo), which this package sees only through its own small interface.
package tolaria
