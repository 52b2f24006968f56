package tolaria

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"time"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria/aggregation"
	"github.com/esper-go/esper/tolaria/rollback"
)

// Batches is where the trainer reads data: one pass over an epoch's
// batches, each (x, y) pair — images F32 [B, C, H, W] and labels I64 [B]
// — valid until the loop body returns. A *data.Loader is one.
type Batches interface {
	Batches(epoch int) iter.Seq2[*tensor.Tensor, *tensor.Tensor]
}

// InputSource is implemented by a Batches source that delivers its
// batches on a device itself — a *data.Loader with LoaderOptions.Device
// (copied one batch ahead, through pinned staging where the backend has
// it, or from a Resident dataset). The trainer then copies nothing; it
// refuses a source on a device other than the CPU and the model's, and
// reads the source's figures for its telemetry: Pinned for
// tolaria.train.pin_memory (the training source's), CopyTime for
// tolaria.h2d_copy_ms.
type InputSource interface {
	// Device is where the batches are delivered.
	Device() tensor.Device
	// Pinned reports whether they come through pinned buffers on a
	// staging stream.
	Pinned() bool
	// CopyTime is the time the source has spent on host-to-device
	// copies so far, cumulative (the trainer reports each epoch's share).
	CopyTime() time.Duration
}

// TrainerOptions configures a Trainer. Model, Train, Val and Epochs are
// required; every other zero value is the documented default.
type TrainerOptions struct {
	// Model is the host with its slots. The trainer trains it on its
	// device (nn.Device; move it with nn.To before building the trainer):
	// batches are copied there, the loss and accuracy accumulate there —
	// both passes' in one device buffer, zeroed with one Fill per epoch —
	// and are read back in one copy per epoch (the training and
	// validation passes together) plus one per counterfactual validation
	// pass, and tolaria.host_syncs reports each epoch's device-to-host
	// reads.
	Model *kasmina.MorphogeneticModel
	// Train and Val are the training and validation batches. Training
	// batches should all have the same size (drop the last partial
	// batch): a captured step re-captures for every new shape. Batches
	// on the CPU are copied to the model's device, one explicit copy per
	// tensor and batch; a source that delivers them on the model's device
	// itself (InputSource: a *data.Loader with LoaderOptions.Device, and
	// Pinned or Resident) spares those copies. Either way the epoch's
	// copy time is reported (EpochReport.H2DCopy, tolaria.h2d_copy_ms).
	Train, Val Batches
	// Epochs is the number of epochs Fit runs, from 1 to MaxEpochs.
	Epochs int
	// Controller decides each epoch's lifecycle operation (a Tamiyo
	// controller); nil trains the host and its seeds without decisions.
	Controller Controller

	// HostLR, HostMomentum and HostWeightDecay configure the host's SGD;
	// zero means leyline.DefaultHostLR (0.01), 0.9 and 5e-4 (G2 per-batch
	// step). A negative
	// HostMomentum or HostWeightDecay means none.
	HostLR, HostMomentum, HostWeightDecay float64
	// HostSchedule, when set, sets the host's learning rate at the start
	// of every epoch e to HostSchedule.LR(e) (HostLR then only seeds the
	// optimizer). Schedules are closed forms of the epoch, so a resumed
	// run follows the same rates; the rate lives on the device, so
	// changing it does not re-capture the train step.
	HostSchedule optim.Schedule
	// SeedLR and SeedMomentum configure each slot's SGD, created when the
	// slot first holds a seed; zero means leyline.DefaultSeedLR (0.01) and
	// 0.9.
	SeedLR, SeedMomentum float64
	// MaxGradNorm clips the host's and each seed's gradients separately;
	// zero means 1.0, negative disables clipping. NaN and ±Inf are
	// errors.
	MaxGradNorm float64

	// Capture runs the train step captured after CaptureWarmup eager
	// steps (default 1), re-capturing whenever the parameter set, a seed's
	// stage or alpha, or the batch shape changes. Validation batches
	// (and the counterfactual passes) are captured the same way, each
	// graph adding to a device-resident loss sum and correct count read
	// once per evaluation. When Train and Val are both FixedBatches (a
	// *Fixed: data on the device, the same views every epoch), the whole
	// epoch is captured instead — the metrics' zeroing, every step and
	// every validation batch, up to 64 batches — and replayed with one
	// launch, unless the epoch needs host work between its steps
	// (GradientTelemetryStride, OnStep, a PCGrad combination); see
	// EpochReport.EpochCaptured. When Val alone is FixedBatches, each
	// validation pass (the counterfactual ones too) is one graph. A
	// capture failure falls back to eager,
	// counted in Summary.CaptureFallbacks and reported once
	// (tolaria.compile_fallback).
	Capture       bool
	CaptureWarmup int

	// GradientTelemetryStride measures the seeds' gradient health every
	// that many steps (outside any captured region): kasmina's gradient
	// telemetry and, unless the step combined gradients itself, the
	// per-seed aggregation metrics. Zero means 10, negative never. On a
	// device the norms are computed at the step and read with the
	// epoch's accumulators, in its one host sync, under fp16 with the
	// scaler's found-inf flag; two or more aggregation participants are
	// observed at the step on the device, their sums read with the
	// epoch's too (under fp16 after a found-inf read at the step).
	// Read with the epoch's accumulators, the seeds' telemetry and the
	// aggregation's observation are applied at that read, in step order:
	// an OnStep callback then sees the seeds' telemetry as the previous
	// epoch left it.
	GradientTelemetryStride int

	// PCGrad combines the seeds' gradients with PCGrad (the hardened G1
	// algorithm) on every step where at least two seeds take part in
	// aggregation (TRAINING, BLENDING or HOLDING with trainable
	// parameters): after backward and before clipping, the gradient is
	// split per seed by the seed masks, the host's part redistributed by
	// kasmina's attribution, conflicting vectors projected, and their sum
	// written back. Those steps draw their projection order from the
	// host RNG, so they run eagerly even with Capture; steps with fewer
	// than two seeds keep their captured graph. Default off (G1
	// TOLARIA_PCGRAD_ENABLED). The per-seed metrics (tolaria.grad_agg.*)
	// are kept either way. On the cpu the combination works on host
	// vectors with float64 sums; on a device through backend ops on
	// device buffers, with no host read per step (the epoch's aggregation
	// figures come with the epoch's one read; under fp16 a combining step
	// reads the scaler's found-inf flag first) — the two agree within
	// float32 rounding.
	PCGrad bool
	// Seed seeds the trainer's own randomness: PCGrad's projection
	// order. Zero is a valid seed.
	Seed uint64

	// AMP selects mixed precision: "" (AMPOff, fp32), "bf16" (AMPBF16,
	// autocast without loss scaling) or "fp16" (AMPFP16, autocast with a
	// GradScaler whose state checkpoints carry). Both keep the step
	// capturable.
	AMP AMPMode
	// TF32 lets F32 matmuls and convolutions use TF32 during the
	// trainer's epochs (kernels.SetMatmulPrecision(High)); a no-op on the
	// CPU backend, which always computes in fp32.
	TF32 bool

	// Counterfactuals, when set, measures the BLENDING and HOLDING
	// seeds' counterfactual accuracies in place of the trainer's own
	// per-seed validation passes (see CounterfactualFunc): a vectorised
	// environment's fused validation evaluates them together with its
	// other alpha configurations in one pass. Nil means the trainer's
	// passes.
	Counterfactuals CounterfactualFunc

	// EpochRead, when set, makes the epoch's one read of its
	// accumulators (and of the gradient telemetry's pending norms): it
	// gets the device tensors and returns their host copies, in order,
	// as tensor.ToHostMany does. A vectorised loop supplies it to read
	// several environments' epochs in one host sync: its function may
	// block until the loop has gathered them (simic.VecEnv). It is called
	// from RunEpoch, outside any captured region; other trainers may run
	// while it waits, and the trainer sets its matmul precision again
	// after it. Nil means tensor.ToHostMany.
	EpochRead func(ts []*tensor.Tensor) ([]*tensor.Tensor, error)

	// Deadlines bound the controller's decision and its application.
	Deadlines DeadlineOptions
	// Governor, when set, watches the validation loss and rolls back on
	// a panic (see Governor); nil disables it.
	Governor *GovernorOptions
	// Checkpoints, when set, receives a checkpoint after every epoch, and
	// Resume continues from its latest one. It is also the slow rollback
	// tier (RollbackOnFailure).
	Checkpoints *rollback.Store
	// BeforeCheckpoint, when set, is called with the epoch's index after
	// the epoch's events were sent and before its checkpoint is written.
	// The documents it returns join the checkpoint's Meta.Extra (the keys
	// "trainer" and "controller" are the trainer's own). esper train
	// flushes its telemetry there, so that the event log is never behind
	// a checkpoint, and stores the run's configuration and the log's
	// length. An error fails the epoch, as a failed write would.
	BeforeCheckpoint func(e int) (map[string]json.RawMessage, error)

	// EpochBudget fails an epoch whose wall time (training, validation,
	// counterfactuals and the decision) exceeds it: reason "epoch_budget"
	// and the event tolaria.epoch_budget_exceeded (G1 epoch_budget_ms).
	// Zero means no budget; negative is an error.
	EpochBudget time.Duration
	// Breaker configures the epoch circuit breaker: every failed epoch
	// records a failure, every successful one a success, and while it is
	// OPEN epochs run in conservative mode and fail with "breaker_open".
	// The zero value is G1's trainer breaker: 3 failures open it for 60 s,
	// and 1 success in HALF_OPEN closes it (SuccessThreshold zero means 1
	// here, not NewBreaker's 2). Sink nil means the trainer's Sink.
	Breaker BreakerOptions
	// FastRollbackMB enables the fast rollback tier, an in-memory LRU of
	// the trainer's State after each successful epoch (keyed by epoch),
	// with this capacity in MiB. Zero disables it (G1 TOLARIA_ROLLBACK_*
	// is off by default); rollback.DefaultFastCapMB is G1's capacity
	// (TOLARIA_ROLLBACK_FAST_CAP_MB 32). Negative is an error. A State
	// larger than the capacity is not cached.
	FastRollbackMB int
	// RollbackOnFailure restores, after a failed epoch, the nearest
	// snapshot at or before the previous epoch: the fast tier's, else the
	// latest checkpoint of Checkpoints read under RollbackDeadline. It
	// does nothing without either tier, or for a failure in the first
	// epoch. Default off (G1 TOLARIA_ROLLBACK_ENABLED false).
	RollbackOnFailure bool
	// RollbackDeadline bounds the checkpoint read of a rollback; zero
	// means rollback.DefaultDeadline (250 ms, G1
	// TOLARIA_ROLLBACK_DEADLINE_MS); negative is an error.
	RollbackDeadline time.Duration

	// Sink receives the trainer's telemetry; nil sends none. Every epoch
	// sends EPOCH_COMPLETED and a METRICS event with the epoch's training
	// figures; each counter, state and latency of the deadlines, failures,
	// breaker and rollback, and the gradient-aggregation figures as a
	// block, join it in the first epoch and whenever they change (a
	// backend that keeps the last value, as Prometheus does, always shows
	// them current).
	Sink EventSink
	// EnvID tags the telemetry (Simic's environment index); zero is fine
	// for a single run.
	EnvID int
	// History bounds the epoch reports Summary keeps to the latest
	// History epochs, in a ring allocated once; zero keeps them all. Long
	// runs (thousands of short epochs, as in a vectorised environment or
	// a benchmark) should set it, or the reports grow without bound.
	// Negative is an error.
	History int

	// OnStep, when set, is called after every training step (progress
	// bars); it must be quick.
	OnStep func(StepInfo)
}

// CounterfactualFunc measures the counterfactual accuracies of epoch e
// after its validation (accuracy valAcc, percent): for each of slots
// (seeds BLENDING or HOLDING with alpha > 0, in model order), the
// validation accuracy with that seed's alpha forced to 0 and every other
// seed as it is. It returns them by slot id; a slot it leaves out is
// measured by the trainer's own validation pass. It is called every
// epoch, with or without slots, so that it can evaluate the epoch's other
// alpha configurations in the same pass; the model must be left as it
// was found. An error fails the epoch.
type CounterfactualFunc func(e int, valAcc float64, slots []*kasmina.Slot) (map[string]float64, error)

// StepInfo describes one finished training step.
type StepInfo struct {
	Epoch, Step int
	Latency     time.Duration
}

// EpochReport is what one epoch did.
type EpochReport struct {
	// Epoch is the epoch's index, RunEpoch's e, from 0; its number, in
	// events, checkpoint names and on the console, is Epoch+1.
	Epoch              int
	TrainLoss, ValLoss float64
	// TrainAccuracy and ValAccuracy are percentages.
	TrainAccuracy, ValAccuracy float64
	Steps                      int
	Duration                   time.Duration
	// StepLatency summarises the training steps' wall times.
	StepP50, StepP95 time.Duration
	// Decision is the controller's decision (WAIT without a controller)
	// and Applied tells whether it took effect.
	Decision leyline.Decision
	Applied  ApplyStatus
	// ApplyReason says why Kasmina declined the decision when Applied is
	// ApplyRejected: the failed gate and its checks ("G2 failed:
	// insufficient_epochs_in_stage"), a busy or empty slot, a transition
	// the seed's stage does not allow.
	ApplyReason string
	// Outcome is how the decision was reached (ok, skipped in
	// conservative mode, timeout, error).
	Outcome OutcomeStatus
	// RolledBack reports a governor rollback this epoch, and
	// PanicReason the governor's reason (a leyline.PanicReason
	// constant; "" without a rollback).
	RolledBack  bool
	PanicReason string
	// Failed reports a failed epoch (esper-reference §3.1.6) and
	// FailureReason why: FailureBreakerOpen, FailureEpochBudget,
	// FailureTamiyoTimeout or FailureKasminaTimeout, the first that
	// applies. The losses and accuracies are the failed epoch's.
	Failed        bool
	FailureReason string
	// RestoredFrom is the epoch whose state a failure rollback restored
	// (RollbackOnFailure), -1 when none was; RestoredFast tells whether
	// it came from the fast tier rather than a checkpoint.
	RestoredFrom int
	RestoredFast bool
	// Seeds are the seeds after the epoch's decision (after the failure
	// rollback when RestoredFrom ≥ 0).
	Seeds []leyline.SeedReport
	// Captured reports whether the epoch's steps ran captured, and
	// EpochCaptured whether the whole epoch — its steps and its
	// validation batches — was replayed as one graph (FixedBatches);
	// the steps are then not timed one by one, and StepP50 and StepP95
	// are zero.
	Captured, EpochCaptured bool
	// HostSyncs is the number of host syncs of the model's device during
	// the epoch (tensor.HostSyncs before and after; tolaria.host_syncs):
	// the device-to-host reads the epoch waited for. Always 0 on the cpu.
	HostSyncs uint64
	// H2DCopy is the time the epoch's input (its training, validation
	// and counterfactual passes) spent on host-to-device copies
	// (tolaria.h2d_copy_ms): the trainer's own copies of CPU batches, and
	// the CopyTime of InputSource sources — the wall time of synchronous
	// copies, or with pinned staging the host time of the staging calls
	// (the transfers run behind the steps and are not in it). Zero on
	// the cpu.
	H2DCopy time.Duration

	// ConflictRatio is the epoch's gradient conflict ratio
	// (tolaria.grad_agg.conflict_ratio): PCGrad's conflicting pairs over
	// max(1, participants − 1).
	ConflictRatio float64
	// TeacherShare is tolaria.grad_agg.teacher_share, the mean L2 norm of
	// the host's (teacher's) gradient that was redistributed over the
	// seeds (a norm, despite the G1 name).
	TeacherShare float64
	// PCGradApplied reports whether PCGrad projected any gradient this
	// epoch (tolaria.grad_agg.pcgrad_applied: a conflict was found).
	PCGradApplied bool
	// AggregatedSteps counts the steps whose gradient went through the
	// PCGrad combination (tolaria.grad_agg.microbatches_total).
	AggregatedSteps int
}

// Summary is what Fit did.
type Summary struct {
	// Epochs are the epochs' reports, oldest first: all of them, or the
	// latest TrainerOptions.History.
	Epochs []EpochReport
	// Germinated, Fossilized and Pruned count lifecycle events over the
	// run.
	Germinated, Fossilized, Pruned int
	// CaptureFallbacks counts captured steps that fell back to eager.
	CaptureFallbacks int
}

// Final returns the last epoch's report (zero when no epoch ran).
func (s Summary) Final() EpochReport {
	if len(s.Epochs) == 0 {
		return EpochReport{}
	}
	return s.Epochs[len(s.Epochs)-1]
}

// Trainer runs Tolaria's epoch loop: train the host and its seeds, validate
// in inference mode, measure each blending or holding seed's
// counterfactual contribution, let the controller decide under a deadline,
// apply the decision, tick the slots, and checkpoint.
type Trainer struct {
	o     TrainerOptions
	model *kasmina.MorphogeneticModel
	// dev is the model's device (nn.Device): batches are copied there,
	// the metric accumulators live there.
	dev tensor.Device
	// sources are the distinct InputSource data sources (Train, Val);
	// copyTime is the time the trainer spent copying batches itself.
	sources  []InputSource
	copyTime time.Duration
	opt      *optimizers
	// met holds the training and validation passes' accumulators, in
	// one device buffer (one Fill and one read per epoch).
	met   *metricsBuf
	step  *stepRunner
	eval  *evalRunner
	epoch *epochGraph // nil unless Capture with fixed Train and Val
	agg   *gradAgg
	prec  *precision
	// pendingTel are the epoch's gradient telemetry steps whose norms are
	// on the device, read with the epoch's metrics (readEpoch).
	pendingTel []pendingTelemetry
	aggReport  aggregation.EpochReport // the current epoch's, for emitEpoch
	deadlines  *Deadlines
	governor   *Governor
	breaker    *Breaker
	rollback   *rollback.TwoTier
	failed     int // epochs failed (tolaria.epochs.failed)
	// rollbacksInRow counts the governor's rollbacks since the last
	// healthy epoch; lastGood is the number of the epoch of the latest
	// checkpoint written for a healthy epoch, or resumed from (0: none).
	rollbacksInRow, lastGood int
	start                    int     // first epoch Fit runs (after Resume)
	summary                  Summary // Epochs is a ring starting at histHead when History is set
	histHead                 int
	lastSeeds                map[string]leyline.SeedStage // seed id → stage, for the counts
	// cfSlots is measureCounterfactuals' scratch; ablations counts its
	// validation passes in the latest epoch.
	cfSlots   []*kasmina.Slot
	ablations int
	// status and changed are emitEpoch's scratch: the deadline and
	// failure metrics, and those of them to send; sentStatus and sentAgg
	// are the values of those and of the aggregation's as last sent.
	status, changed, sentStatus, sentAgg []leyline.Metric
}

// ErrOptions is wrapped by NewTrainer's option errors.
var ErrOptions = errors.New("tolaria: invalid trainer options")

// MaxEpochs bounds epoch counts and numbers everywhere the trainer takes
// one: TrainerOptions.Epochs, RunEpoch's index and the epoch a checkpoint
// holds. No run comes near it; a larger number is a mistake or a damaged
// file, and refusing it keeps every epoch+1 and every loop over epochs
// far from integer overflow.
const MaxEpochs = 1<<31 - 1

// NewTrainer validates o and builds the optimizers.
func NewTrainer(o TrainerOptions) (*Trainer, error) {
	switch {
	case o.Model == nil:
		return nil, fmt.Errorf("%w: Model is required", ErrOptions)
	case o.Train == nil || o.Val == nil:
		return nil, fmt.Errorf("%w: Train and Val batches are required", ErrOptions)
	case o.Epochs <= 0 || o.Epochs > MaxEpochs:
		return nil, fmt.Errorf("%w: Epochs %d must be in [1, %d]", ErrOptions, o.Epochs, MaxEpochs)
	case math.IsNaN(o.MaxGradNorm) || math.IsInf(o.MaxGradNorm, 0):
		return nil, fmt.Errorf("%w: MaxGradNorm %v must be finite (zero means 1.0, negative disables clipping)", ErrOptions, o.MaxGradNorm)
	case o.History < 0:
		return nil, fmt.Errorf("%w: History %d must be ≥ 0", ErrOptions, o.History)
	}
	for name, v := range map[string]float64{"HostLR": o.HostLR, "HostMomentum": o.HostMomentum, "HostWeightDecay": o.HostWeightDecay, "SeedLR": o.SeedLR, "SeedMomentum": o.SeedMomentum} {
		negOK := name == "HostMomentum" || name == "HostWeightDecay"
		if (v < 0 && !negOK) || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: %s %v must be finite and ≥ 0", ErrOptions, name, v)
		}
	}
	if o.HostSchedule != nil {
		if err := optim.ValidateSchedule(o.HostSchedule); err != nil {
			return nil, fmt.Errorf("%w: HostSchedule: %v", ErrOptions, err)
		}
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.HostLR, leyline.DefaultHostLR)
	def(&o.HostMomentum, 0.9)
	def(&o.HostWeightDecay, 5e-4)
	def(&o.SeedLR, leyline.DefaultSeedLR)
	def(&o.SeedMomentum, 0.9)
	def(&o.MaxGradNorm, 1.0)
	for _, v := range []*float64{&o.HostMomentum, &o.HostWeightDecay} {
		if *v < 0 {
			*v = 0
		}
	}
	if o.CaptureWarmup <= 0 {
		o.CaptureWarmup = 1
	}
	if o.GradientTelemetryStride == 0 {
		o.GradientTelemetryStride = 10
	}
	dev, err := nn.Device(o.Model)
	if err != nil {
		return nil, fmt.Errorf("%w: Model: %v", ErrOptions, err)
	}
	sources, err := inputSources(dev, o.Train, o.Val)
	if err != nil {
		return nil, err
	}
	dl, err := NewDeadlines(DeadlineOptions{Controller: o.Deadlines.Controller, Apply: o.Deadlines.Apply, Sink: o.Sink})
	if err != nil {
		return nil, err
	}
	t := &Trainer{o: o, model: o.Model, dev: dev, sources: sources, deadlines: dl, lastSeeds: map[string]leyline.SeedStage{}}
	if o.History > 0 {
		t.summary.Epochs = make([]EpochReport, 0, o.History)
	}
	if err := t.newFailureHandling(o); err != nil {
		return nil, err
	}
	t.opt, err = newOptimizers(o)
	if err != nil {
		return nil, err
	}
	if t.prec, err = newPrecision(o.AMP, t.opt.host.Arena().Device()); err != nil {
		return nil, err
	}
	if t.agg, err = newGradAgg(o); err != nil {
		return nil, err
	}
	t.met = newMetricsBuf(dev)
	t.step = newStepRunner(t)
	t.eval = newEvalRunner(t)
	t.epoch = newEpochGraph(t)
	if o.Governor != nil {
		g := *o.Governor
		if g.Sink == nil {
			g.Sink = o.Sink
		}
		user := g.OnRollback
		g.OnRollback = func(r RollbackReport) {
			t.opt.reset()
			if user != nil {
				user(r)
			}
		}
		if t.governor, err = NewGovernor(o.Model, g); err != nil {
			return nil, err
		}
	}
	t.noteSeeds()
	return t, nil
}

// Deadlines returns the controller and apply deadlines (their metrics and
// conservative mode).
func (t *Trainer) Deadlines() *Deadlines { return t.deadlines }

// Governor returns the governor, or nil when disabled.
func (t *Trainer) Governor() *Governor { return t.governor }

// StartEpoch is the epoch Fit starts at: 0, or the one after the
// checkpoint Resume loaded.
func (t *Trainer) StartEpoch() int { return t.start }

// Fit runs the epochs from StartEpoch to Epochs−1 and returns what they
// did. It stops early, returning ctx's error with the epochs completed,
// when ctx ends, and with a *DivergenceError (errors.Is(err,
// ErrDiverged)) when training diverged beyond what the governor repairs
// (see RunEpoch); a stray panic inside an epoch becomes an error.
func (t *Trainer) Fit(ctx context.Context) (Summary, error) {
	for e := t.start; e < t.o.Epochs; e++ {
		if err := ctx.Err(); err != nil {
			return t.Summary(), err
		}
		if _, err := t.RunEpoch(ctx, e); err != nil {
			return t.Summary(), err
		}
	}
	return t.Summary(), nil
}

// record keeps r in the summary's epoch reports (see History).
func (t *Trainer) record(r EpochReport) {
	if h := t.o.History; h == 0 || len(t.summary.Epochs) < h {
		t.summary.Epochs = append(t.summary.Epochs, r)
		return
	}
	t.summary.Epochs[t.histHead] = r
	t.histHead = (t.histHead + 1) % t.o.History
}

// Summary returns what the epochs run so far did (every RunEpoch counts,
// whether called by Fit or directly).
func (t *Trainer) Summary() Summary {
	s := t.summary
	s.Epochs = make([]EpochReport, 0, len(t.summary.Epochs))
	s.Epochs = append(s.Epochs, t.summary.Epochs[t.histHead:]...)
	s.Epochs = append(s.Epochs, t.summary.Epochs[:t.histHead]...)
	return s
}

// RunEpoch runs epoch e: training steps, validation, counterfactuals,
// the governor, the controller's decision, the slots' epoch tick, the
// failure handling, telemetry and the checkpoint.
//
// Failure handling (esper-reference §3.1.6, without the emergency
// levels): the epoch fails when the breaker was OPEN at its start (it
// then runs in conservative mode, skipping the controller), else when it
// exceeded EpochBudget, else when the controller or the apply missed its
// deadline. A failure counts tolaria.epochs.failed, records a breaker
// failure, rolls back when RollbackOnFailure is set (see
// TrainerOptions.RollbackOnFailure) and turns conservative mode on, so
// that the next epoch skips the controller; a success records a breaker
// success and turns conservative mode off. Only a successful epoch's
// state enters the fast rollback tier; every epoch is checkpointed (a
// failed one rolled back with the restored state, which is what the next
// epoch starts from) — except an epoch that diverged.
//
// Divergence (see divergence.go): an epoch whose validation loss is not
// finite, or that the governor does not accept, is neither checkpointed
// nor snapshotted; the governor rolls back on a panic, and the rollback
// after MaxRollbacks in a row (or, without a governor, the first
// non-finite validation loss) ends the run: RunEpoch returns the epoch's
// report with a *DivergenceError (errors.Is(err, ErrDiverged)), the
// epoch recorded in Summary as usual.
func (t *Trainer) RunEpoch(ctx context.Context, e int) (r EpochReport, err error) {
	if e < 0 || e >= MaxEpochs {
		return EpochReport{Epoch: e, RestoredFrom: -1}, fmt.Errorf("tolaria: RunEpoch: epoch index %d is out of range [0, %d)", e, MaxEpochs)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tolaria: epoch %d: %v", e+1, p)
		}
	}()
	start := time.Now()
	syncs0 := tensor.HostSyncs(t.dev)
	copy0 := t.inputCopyTime()
	r.Epoch, r.RestoredFrom = e, -1
	allowed := t.breaker.Allow()
	if !allowed {
		t.deadlines.EnterConservative(FailureBreakerOpen)
	}
	defer t.setMatmulPrecision()()
	if err := t.opt.sync(t.model); err != nil {
		return r, err
	}
	if t.o.HostSchedule != nil {
		optim.Apply(t.opt.host, t.o.HostSchedule, e)
	}
	if d, ok := t.o.Controller.(Drainer); ok {
		d.Drain() // a forward abandoned at the last deadline must not overlap training
	}
	t.model.SetTraining(true)
	t.agg.beginEpoch()
	clear(t.pendingTel) // an earlier epoch that failed before its read
	t.pendingTel = t.pendingTel[:0]
	samples := 0
	var train [2]float64
	if t.epoch.collect(e) {
		if samples, train, err = t.epoch.run(ctx, e, &r); err != nil {
			return r, err
		}
	} else {
		if r.Steps, samples, err = t.trainEpoch(ctx, e, &r); err != nil {
			return r, err
		}
		// The validation's read also brings the telemetry's norms, which
		// the aggregation's observations need: finalize after it.
		if r.ValLoss, r.ValAccuracy, train, err = t.evaluateWith(e, true); err != nil {
			return r, err
		}
	}
	t.aggReport = t.agg.finalize(&r)
	r.TrainLoss, r.TrainAccuracy = train[0]/float64(r.Steps), 100*train[1]/float64(samples)
	if err := t.measureCounterfactuals(e, r.ValAccuracy); err != nil {
		return r, fmt.Errorf("tolaria: epoch %d: counterfactuals: %w", e+1, err)
	}
	for _, s := range t.opt.slots {
		if s.State() != nil && leyline.IsActiveStage(s.Stage()) {
			s.RecordAccuracy(r.ValAccuracy)
		}
	}

	healthy, diverged := t.watch(e, &r)
	if diverged != nil && !errors.Is(diverged, ErrDiverged) {
		return r, diverged
	}

	r.Decision, r.Outcome, r.Applied = leyline.Wait("no controller"), OutcomeSkipped, ApplyNoop
	stepReason := ""
	if t.o.Controller != nil && !r.RolledBack && diverged == nil {
		r.Decision, r.Outcome, r.Applied, r.ApplyReason, stepReason = t.decide(ctx, e, r)
	}
	t.model.StepEpoch()
	if err := t.opt.sync(t.model); err != nil {
		return r, err
	}
	r.Seeds = seedReports(t.opt.slots)
	t.countLifecycle(r.Seeds)
	r.Duration = time.Since(start)
	r.HostSyncs = tensor.HostSyncs(t.dev) - syncs0
	r.H2DCopy = t.inputCopyTime() - copy0
	if r.FailureReason = t.failureReason(allowed, r.Duration, stepReason); r.FailureReason != "" {
		r.Failed = true
		if err := t.failEpoch(ctx, &r); err != nil {
			return r, err
		}
	} else {
		t.succeedEpoch()
	}
	t.emitEpoch(r)
	t.record(r)
	snapshot := healthy && !r.Failed && t.rollback.Fast != nil
	if (healthy && t.o.Checkpoints != nil) || snapshot {
		st, err := t.State(e)
		if err != nil {
			return r, fmt.Errorf("tolaria: epoch %d: state: %w", e+1, err)
		}
		if t.o.Checkpoints != nil {
			if err := t.beforeCheckpoint(e, &st); err != nil {
				return r, fmt.Errorf("tolaria: epoch %d: before the checkpoint: %w", e+1, err)
			}
			if err := t.o.Checkpoints.Write(e+1, st); err != nil {
				return r, fmt.Errorf("tolaria: epoch %d: checkpoint: %w", e+1, err)
			}
			t.lastGood = e + 1
		}
		if snapshot {
			if err := t.snapshotFast(e, st); err != nil {
				return r, fmt.Errorf("tolaria: epoch %d: fast rollback snapshot: %w", e+1, err)
			}
		}
	}
	return r, diverged
}

// emitDecision sends the epoch's structural decision (any but WAIT) as
// MORPHOLOGY_CAUSAL_LOG: the operation, its slot and blueprint, the
// controller's reason (with Kasmina's when it refused), whether it was
// carried out, and the validation accuracy it was decided on — the
// decision log of dashboards and causal analysis.
func (t *Trainer) emitDecision(r EpochReport) {
	d := r.Decision
	if d.Op == leyline.OpWait || r.RolledBack {
		return
	}
	reason := d.Reason
	if r.Applied == ApplyRejected && r.ApplyReason != "" {
		reason += " (refused: " + r.ApplyReason + ")"
	}
	acc := r.ValAccuracy
	p := &leyline.MorphologyCausalLogPayload{
		EnvID: t.o.EnvID, Epoch: r.Epoch + 1, Op: d.Op.String(), Success: r.Applied == ApplyApplied,
		SlotID: d.SlotID, Reason: reason, AccuracyBefore: &acc,
	}
	if d.Op == leyline.OpGerminate {
		p.BlueprintID = d.Blueprint.String()
	}
	ev := leyline.NewEvent(leyline.EventMorphologyCausalLog, p)
	epoch := r.Epoch + 1
	ev.Epoch = &epoch
	ev.SlotID = d.SlotID
	t.o.Sink.Emit(ev)
}

// beforeCheckpoint calls BeforeCheckpoint and adds its documents to st.
func (t *Trainer) beforeCheckpoint(e int, st *rollback.State) error {
	if t.o.BeforeCheckpoint == nil {
		return nil
	}
	extra, err := t.o.BeforeCheckpoint(e)
	if err != nil {
		return err
	}
	for k, v := range extra {
		if k == "trainer" || k == "controller" {
			return fmt.Errorf("BeforeCheckpoint returned the reserved key %q", k)
		}
		st.Meta.Extra[k] = v
	}
	return nil
}

// decide asks the controller under its deadline and applies the decision
// under the apply deadline. A timed-out or failed decision is WAIT; a
// late decision is discarded by Deadlines and never applied. rejected is
// why Kasmina declined the decision (ApplyRejected), "" otherwise;
// reason is the epoch failure a deadline miss causes
// (FailureTamiyoTimeout or FailureKasminaTimeout), "" otherwise.
// Conservative mode, which skips the controller, is cleared by RunEpoch
// after a successful epoch.
func (t *Trainer) decide(ctx context.Context, e int, r EpochReport) (_ leyline.Decision, _ OutcomeStatus, _ ApplyStatus, rejected, reason string) {
	st := t.epochState(e, r)
	d, out := t.deadlines.Decide(ctx, t.o.Controller, st)
	if out.Status != OutcomeOK {
		if out.Status == OutcomeTimeout {
			reason = FailureTamiyoTimeout
		}
		return d, out.Status, ApplyNoop, "", reason
	}
	var applied ApplyResult
	aout := t.deadlines.Apply(ctx, func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := ApplyDecision(t.model, d, ApplyOptions{})
		applied = res
		return err
	})
	if aout.Status != OutcomeOK {
		if aout.Status == OutcomeTimeout {
			reason = FailureKasminaTimeout
		}
		return d, out.Status, ApplyNoop, "", reason
	}
	return d, out.Status, applied.Status, applied.Reason, ""
}

// epochState is the controller's view of the epoch.
func (t *Trainer) epochState(e int, r EpochReport) leyline.EpochState {
	seeds := seedReports(t.opt.slots)
	avail := 0
	for _, s := range t.opt.slots {
		if s.State() == nil {
			avail++
		}
	}
	ids := t.model.SlotIDs()
	leyline.SortSlotIDs(ids)
	cfg, _ := leyline.NewSlotConfig(ids...)
	var active []string
	for _, s := range seeds {
		if !leyline.IsFailureStage(s.Stage) {
			active = append(active, s.SeedID)
		}
	}
	return leyline.EpochState{
		Signals: leyline.TrainingSignals{
			Metrics: leyline.TrainingMetrics{
				Epoch: e, GlobalStep: t.step.globalStep,
				TrainLoss: r.TrainLoss, ValLoss: r.ValLoss,
				TrainAccuracy: r.TrainAccuracy, ValAccuracy: r.ValAccuracy,
			},
			ActiveSeeds:    active,
			AvailableSlots: avail,
		},
		Seeds:    seeds,
		Slots:    cfg,
		Topology: t.model.Host().Topology(),
	}
}

// SeedReports describes every seed of m, in slot order, for controllers
// and reports.
func SeedReports(m *kasmina.MorphogeneticModel) []leyline.SeedReport {
	return seedReports(m.Slots())
}

// seedReports is SeedReports over a model's slots (nil when no slot
// holds a seed).
func seedReports(slots []*kasmina.Slot) []leyline.SeedReport {
	var out []leyline.SeedReport
	for _, s := range slots {
		st := s.State()
		if st == nil {
			continue
		}
		r := leyline.SeedReport{
			SeedID: st.SeedID, SlotID: st.SlotID, BlueprintID: st.BlueprintID,
			Stage: st.Stage, Alpha: s.Alpha(),
			EpochsInStage:              st.Metrics.EpochsInCurrentStage,
			EpochsTotal:                st.Metrics.EpochsTotal,
			ImprovementSinceStageStart: st.Metrics.ImprovementSinceStageStart(),
			TotalImprovement:           st.Metrics.TotalImprovement(),
		}
		if c := st.Metrics.CounterfactualContribution; c != nil {
			v := *c
			r.Counterfactual = &v
		}
		if ac := st.AlphaController; ac != nil {
			r.AlphaTarget, r.AlphaMode = ac.Target, ac.Mode
		}
		out = append(out, r)
	}
	return out
}

// noteSeeds records the current seeds for lifecycle counting.
func (t *Trainer) noteSeeds() {
	for _, r := range seedReports(t.opt.slots) {
		t.lastSeeds[r.SeedID] = r.Stage
	}
}

// countLifecycle compares the seeds with the previous epoch's: a new seed
// id was germinated, a seed reaching FOSSILIZED was fossilized, a seed
// reaching a failure stage (or vanishing) was pruned.
func (t *Trainer) countLifecycle(seeds []leyline.SeedReport) {
	if len(seeds) == 0 && len(t.lastSeeds) == 0 {
		return // no seed then or now: nothing to count
	}
	now := make(map[string]leyline.SeedStage, len(seeds))
	for _, s := range seeds {
		now[s.SeedID] = s.Stage
		prev, seen := t.lastSeeds[s.SeedID]
		switch {
		case !seen:
			t.summary.Germinated++
			if leyline.IsFailureStage(s.Stage) {
				t.summary.Pruned++
			}
		case s.Stage == leyline.StageFossilized && prev != leyline.StageFossilized:
			t.summary.Fossilized++
		case leyline.IsFailureStage(s.Stage) && !leyline.IsFailureStage(prev):
			t.summary.Pruned++
		}
	}
	for id, prev := range t.lastSeeds {
		if _, ok := now[id]; !ok && !leyline.IsFailureStage(prev) && prev != leyline.StageFossilized {
			t.summary.Pruned++
		}
	}
	t.lastSeeds = now
}

// measureCounterfactuals records, for every BLENDING or HOLDING seed, the
// validation accuracy lost when its alpha is forced to 0: measured by
// TrainerOptions.Counterfactuals where it provides it, else by one more
// validation pass with the alpha forced. A seed whose alpha is already 0
// needs no pass (forcing changes nothing: it loses nothing).
func (t *Trainer) measureCounterfactuals(e int, valAcc float64) error {
	want := t.cfSlots[:0]
	t.ablations = 0
	for _, s := range t.opt.slots {
		if s.State() == nil {
			continue
		}
		switch s.Stage() {
		case leyline.StageBlending, leyline.StageHolding:
		default:
			continue
		}
		if s.Alpha() == 0 {
			if !math.IsNaN(valAcc) {
				s.State().Metrics.RecordCounterfactual(0)
			}
			continue
		}
		want = append(want, s)
	}
	t.cfSlots = want
	var offs map[string]float64
	if t.o.Counterfactuals != nil {
		var err error
		if offs, err = t.o.Counterfactuals(e, valAcc, want); err != nil {
			return err
		}
	}
	for _, s := range want {
		off, ok := offs[s.ID()]
		if !ok {
			var err error
			s.ForceAlpha(0, func() { _, off, err = t.evaluate(e) })
			if err != nil {
				return err
			}
			t.ablations++
		}
		if !math.IsNaN(off) {
			s.State().Metrics.RecordCounterfactual(valAcc - off)
		}
	}
	return nil
}

// AblationPasses is the number of validation passes the latest epoch ran
// to measure counterfactual accuracies (those TrainerOptions.Counterfactuals
// did not provide). Read it between epochs, or from the controller.
func (t *Trainer) AblationPasses() int { return t.ablations }

// epochEvents holds what the epoch's two events point to, so that
// emitEpoch allocates it once: the payloads and the optional fields.
// Each event gets its own copy of the epoch.
type epochEvents struct {
	done                 leyline.EpochCompletedPayload
	metrics              leyline.MetricsPayload
	trainLoss, trainAcc  float64
	doneEpoch, metsEpoch int
}

// numEpochMetrics is the number of tolaria.* metrics emitEpoch sends
// before the deadlines' and the aggregation's.
const numEpochMetrics = 21

// sameMetrics reports whether a and b hold the same metrics in the same
// order: names, units, attributes, and values bit for bit (a NaN equals
// a NaN).
func sameMetrics(a, b []leyline.Metric) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Name != y.Name || x.Unit != y.Unit || math.Float64bits(x.Value) != math.Float64bits(y.Value) || !maps.Equal(x.Attributes, y.Attributes) {
			return false
		}
	}
	return true
}

// emitEpoch sends EPOCH_COMPLETED and the epoch's metrics: every epoch
// the training and validation figures (losses, accuracies, latency,
// seeds, capture, AMP, TF32, foreach), and the deadline, failure and
// aggregation figures when they changed (see above).
func (t *Trainer) emitEpoch(r EpochReport) {
	if t.o.Sink == nil {
		return
	}
	// Events number epochs from 1, as people do (r.Epoch is the index).
	p := &epochEvents{trainLoss: r.TrainLoss, trainAcc: r.TrainAccuracy, doneEpoch: r.Epoch + 1, metsEpoch: r.Epoch + 1}
	p.done = leyline.EpochCompletedPayload{
		EnvID: t.o.EnvID, ValAccuracy: r.ValAccuracy, ValLoss: r.ValLoss, InnerEpoch: r.Epoch + 1,
		TrainLoss: &p.trainLoss, TrainAccuracy: &p.trainAcc,
	}
	ev := leyline.NewEvent(leyline.EventEpochCompleted, &p.done)
	ev.Epoch = &p.doneEpoch
	t.o.Sink.Emit(ev)
	t.emitDecision(r)

	active := 0
	for _, s := range r.Seeds {
		if leyline.IsActiveStage(s.Stage) {
			active++
		}
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	// Every event gets its own slice (backends keep them), sized once.
	// The deadline, failure, breaker and rollback figures (counters,
	// states, the last decision's latency) are each sent when it differs
	// from the value last sent, and the aggregation's as a block when any
	// of it changed; all of them in the first epoch a trainer reports.
	t.status = t.failureMetrics(t.deadlines.appendMetrics(t.status[:0]))
	first := len(t.sentStatus) != len(t.status)
	t.changed = t.changed[:0]
	for i := range t.status {
		if first || !sameMetrics(t.status[i:i+1], t.sentStatus[i:i+1]) {
			t.changed = append(t.changed, t.status[i])
		}
	}
	t.sentStatus = append(t.sentStatus[:0], t.status...)
	sendAgg := t.sentAgg == nil || !sameMetrics(t.aggReport.Metrics, t.sentAgg)
	n := numEpochMetrics + len(t.changed)
	if sendAgg {
		n += len(t.aggReport.Metrics)
	}
	cs := t.captureStats()
	metrics := make([]leyline.Metric, 0, n)
	metrics = append(metrics,
		leyline.Metric{Name: leyline.MetricTolariaTrainingLoss, Value: r.TrainLoss},
		leyline.Metric{Name: leyline.MetricTolariaTrainingAccuracy, Value: r.TrainAccuracy, Unit: "percent"},
		leyline.Metric{Name: leyline.MetricTolariaValidationLoss, Value: r.ValLoss},
		leyline.Metric{Name: leyline.MetricTolariaValidationAccuracy, Value: r.ValAccuracy, Unit: "percent"},
		leyline.Metric{Name: leyline.MetricTolariaTrainingLatencyMs, Value: float64(r.Duration.Microseconds()) / 1e3, Unit: "ms"},
		leyline.Metric{Name: leyline.MetricTolariaSeedsActive, Value: float64(active)},
		leyline.Metric{Name: leyline.MetricTolariaEpochsTotal, Value: float64(r.Epoch + 1)},
		leyline.Metric{Name: leyline.MetricTolariaTrainCompileEnabled, Value: b2f(t.o.Capture)},
		leyline.Metric{Name: leyline.MetricTolariaCompileEnabled, Value: b2f(r.Captured)},
		leyline.Metric{Name: leyline.MetricTolariaCompileFallback, Value: float64(t.summary.CaptureFallbacks)},
		leyline.Metric{Name: leyline.MetricTolariaModeConservative, Value: b2f(t.deadlines.Conservative())},
		leyline.Metric{Name: leyline.MetricTolariaTrainAMPEnabled, Value: b2f(t.prec.enabled())},
		leyline.Metric{Name: leyline.MetricTolariaTrainTF32Enabled, Value: b2f(t.o.TF32)},
		// The optimizers step their flat arenas with one fused kernel
		// each: always foreach.
		leyline.Metric{Name: leyline.MetricTolariaTrainForeachEnabled, Value: 1},
		leyline.Metric{Name: leyline.MetricTolariaHostSyncs, Value: float64(r.HostSyncs)},
		leyline.Metric{Name: leyline.MetricTolariaTrainPinMemory, Value: b2f(t.pinnedInput())},
		// In nanoseconds over 1e6: a copy of a tiny batch takes less
		// than the microsecond the other latencies are counted in.
		leyline.Metric{Name: leyline.MetricTolariaH2DCopyMs, Value: float64(r.H2DCopy.Nanoseconds()) / 1e6, Unit: "ms"},
		// In Go a captured step is both the "compiled" step and the
		// device graph: the graph figures are those of the captures.
		leyline.Metric{Name: leyline.MetricTolariaTrainGraphEnabled, Value: b2f(t.o.Capture)},
		leyline.Metric{Name: leyline.MetricTolariaGraphFallback, Value: float64(t.summary.CaptureFallbacks)},
		leyline.Metric{Name: leyline.MetricTolariaGraphCaptureMs, Value: float64(cs.CaptureTime.Microseconds()) / 1e3, Unit: "ms"},
		leyline.Metric{Name: leyline.MetricTolariaGraphReplaysTotal, Value: float64(cs.Replays)},
	)
	metrics = append(metrics, t.changed...)
	if sendAgg {
		metrics = append(metrics, t.aggReport.Metrics...)
		t.sentAgg = append(make([]leyline.Metric, 0, len(t.aggReport.Metrics)), t.aggReport.Metrics...)
	}
	p.metrics = leyline.MetricsPayload{Source: "tolaria", Metrics: metrics}
	mev := leyline.NewEvent(leyline.EventMetrics, &p.metrics)
	mev.Epoch = &p.metsEpoch
	t.o.Sink.Emit(mev)
	t.emitAggWarnings(r.Epoch+1, t.aggReport.Events)
}

// GraphNodes returns the launch counts (CUDA graph nodes on CUDA) of
// the latest captured training step and validation graph; 0 for one not
// captured (yet, or without TrainerOptions.Capture). An epoch replays
// the step once per training batch; the validation graph is a whole
// validation pass where the validation data are fixed views on the
// device (replayed once per pass), else a batch (once per batch).
func (t *Trainer) GraphNodes() (step, validation int) {
	if c := t.step.captured; c != nil {
		step = c.Launches()
	}
	if c := t.eval.pass; c != nil && c.Launches() > 0 {
		validation = c.Launches()
	} else if c := t.eval.captured; c != nil {
		validation = c.Launches()
	}
	return step, validation
}

// EpochGraphNodes returns the launch count (CUDA graph nodes on CUDA)
// of the latest epoch captured whole (EpochReport.EpochCaptured), which
// an epoch replays once; 0 when none was captured.
func (t *Trainer) EpochGraphNodes() int {
	if t.epoch == nil {
		return 0
	}
	return t.epoch.captured.Launches()
}

// Close frees the graphs of the trainer's captured regions now (its
// training step, validation batch and pass, and whole epoch: on CUDA the
// driver graphs, whose device memory then returns to the allocator's
// cache once the collector has freed its tensors; autograd.Captured.Close)
// instead of when the Go collector finds them. Call it when the trainer
// is done (an environment's episode ended), never while an epoch runs; a
// later epoch would capture again. The capture figures stay (CaptureStats). It returns the first
// error a graph's Close gave.
func (t *Trainer) Close() error {
	var first error
	for _, c := range t.captured() {
		if c == nil {
			continue
		}
		if err := c.Close(); err != nil && first == nil {
			first = fmt.Errorf("tolaria: %w", err)
		}
	}
	return first
}

// captured are the trainer's captured regions (nil where there is none).
func (t *Trainer) captured() [4]*autograd.Captured {
	all := [4]*autograd.Captured{t.step.captured, t.eval.captured, t.eval.pass}
	if t.epoch != nil {
		all[3] = t.epoch.captured
	}
	return all
}

// CaptureStats returns the trainer's capture figures so far: the sums
// over its captured training step, validation batch, validation pass and
// whole epoch (captures, replays, eager calls, cached graphs and the
// time spent capturing; all zero without TrainerOptions.Capture). A
// capture happens for each new shape or guard (a germination, a stage
// change), after an eager warm-up call.
func (t *Trainer) CaptureStats() autograd.CaptureStats { return t.captureStats() }

// captureStats sums the train step's and the evaluation's capture
// figures (both zero without TrainerOptions.Capture).
func (t *Trainer) captureStats() autograd.CaptureStats {
	var s autograd.CaptureStats
	for _, c := range t.captured() {
		if c == nil {
			continue
		}
		cs := c.Stats()
		s.Captures += cs.Captures
		s.Replays += cs.Replays
		s.EagerCalls += cs.EagerCalls
		s.CachedGraphs += cs.CachedGraphs
		s.CaptureTime += cs.CaptureTime
	}
	return s
}
