package tolaria

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// Governor defaults (esper-reference §3.2 TolariaGovernor).
const (
	// DefaultSensitivity is how many population standard deviations
	// above the average loss an anomaly must be (G2 sensitivity 6.0).
	DefaultSensitivity = 6.0
	// DefaultMultiplier is how many times the average loss an anomaly
	// must be (G2 multiplier 3.0).
	DefaultMultiplier = 3.0
	// DefaultAbsoluteThreshold is the loss an anomaly must exceed (G2
	// absolute_threshold 12.0).
	DefaultAbsoluteThreshold = 12.0
	// DefaultDeathPenalty is the magnitude of the punishment reward
	// after a rollback (G2 death_penalty 10.0).
	DefaultDeathPenalty = 10.0
	// DefaultHistoryWindow is how many recent losses the governor keeps
	// (G2 history_window 20).
	DefaultHistoryWindow = 20
	// MinHistoryWindow is the smallest history window allowed, and the
	// number of samples needed before any statistical panic (G2: the
	// governor never panics on fewer than 10 samples).
	MinHistoryWindow = 10
	// DefaultMinPanics is how many consecutive anomalies trigger a
	// panic (G2 min_panics_before_rollback 3).
	DefaultMinPanics = 3
	// DefaultMaxRollbacks is how many rollbacks in a row, with no
	// accepted epoch between them, a Trainer tries before it gives up
	// with ErrDiverged. Not in G2, whose environments roll back for as
	// long as an episode lasts; a run that diverges again from the
	// same snapshot three times will not get better by a fourth try.
	DefaultMaxRollbacks = 3
	// DefaultClasses is the class count whose ln is the random-guess
	// loss when neither is given (G2 random_guess_loss = ln(10)).
	DefaultClasses = 10
	// LobotomyAverageFraction: a lobotomy needs the average loss below
	// this fraction of the random-guess loss (G2 0.6).
	LobotomyAverageFraction = 0.6
	// LobotomyTolerance: a lobotomy needs the loss within this fraction
	// of the random-guess loss of it (G2 0.065: ≈0.15 for CIFAR-10,
	// ≈0.70 for TinyStories).
	LobotomyTolerance = 0.065
)

// RollbackReason is RollbackReport.Reason (G2 "Structural Collapse").
const RollbackReason = "Structural Collapse"

// EventSink receives telemetry events; nissa.Hub implements it.
type EventSink interface {
	Emit(leyline.TelemetryEvent)
}

// GovernorOptions configure a Governor. The zero value is the G2
// governor for a 10-class task with no telemetry.
type GovernorOptions struct {
	// Sensitivity in standard deviations; zero means
	// DefaultSensitivity. Must not be negative.
	Sensitivity float64
	// Multiplier of the average loss; zero means DefaultMultiplier.
	// Must not be negative.
	Multiplier float64
	// AbsoluteThreshold on the loss; zero means
	// DefaultAbsoluteThreshold. Must not be negative.
	AbsoluteThreshold float64
	// DeathPenalty; zero means DefaultDeathPenalty. PunishmentReward is
	// its negation. Must not be negative.
	DeathPenalty float64
	// HistoryWindow is how many losses to keep; zero means
	// DefaultHistoryWindow, below MinHistoryWindow is an error.
	HistoryWindow int
	// MinPanics is how many consecutive anomalies make a panic; zero
	// means DefaultMinPanics. Must not be negative.
	MinPanics int
	// MaxRollbacks is how many rollbacks in a row (with no accepted
	// epoch between them) a Trainer tries before RunEpoch fails with
	// ErrDiverged; zero means DefaultMaxRollbacks. Must not be negative.
	// The Governor itself does not count rollbacks.
	MaxRollbacks int
	// RandomGuessLoss is the loss of a uniform guess; zero means
	// ln(Classes). Must be finite and not negative.
	RandomGuessLoss float64
	// Classes of the task, used for RandomGuessLoss; zero means
	// DefaultClasses, otherwise at least 2.
	Classes int
	// Sink receives the GOVERNOR_ROLLBACK event; nil means none. A sink
	// that panics does not abort a rollback.
	Sink EventSink
	// OnRollback, when set, runs at the end of every successful
	// ExecuteRollback with its report. Use it to clear the optimizers'
	// state (see ClearOptimizerState): momentum buffers survive the
	// in-place restore of the weights, and pruned seeds' parameters are
	// gone, so optimizer arenas over them must be rebuilt (the model's
	// Version has changed).
	OnRollback func(RollbackReport)
}

func (o GovernorOptions) withDefaults() (GovernorOptions, error) {
	for _, f := range []struct {
		name string
		v    float64
	}{{"Sensitivity", o.Sensitivity}, {"Multiplier", o.Multiplier}, {"AbsoluteThreshold", o.AbsoluteThreshold},
		{"DeathPenalty", o.DeathPenalty}, {"RandomGuessLoss", o.RandomGuessLoss}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return o, fmt.Errorf("tolaria: NewGovernor: %s = %v must be finite and ≥ 0", f.name, f.v)
		}
	}
	if o.HistoryWindow == 0 {
		o.HistoryWindow = DefaultHistoryWindow
	}
	if o.HistoryWindow < MinHistoryWindow {
		return o, fmt.Errorf("tolaria: NewGovernor: HistoryWindow %d is below the minimum %d", o.HistoryWindow, MinHistoryWindow)
	}
	if o.MinPanics < 0 {
		return o, fmt.Errorf("tolaria: NewGovernor: MinPanics %d must be ≥ 0", o.MinPanics)
	}
	if o.MaxRollbacks < 0 {
		return o, fmt.Errorf("tolaria: NewGovernor: MaxRollbacks %d must be ≥ 0", o.MaxRollbacks)
	}
	if o.Classes < 0 || o.Classes == 1 {
		return o, fmt.Errorf("tolaria: NewGovernor: Classes %d must be ≥ 2 (or 0 for %d)", o.Classes, DefaultClasses)
	}
	if o.Sensitivity == 0 {
		o.Sensitivity = DefaultSensitivity
	}
	if o.Multiplier == 0 {
		o.Multiplier = DefaultMultiplier
	}
	if o.AbsoluteThreshold == 0 {
		o.AbsoluteThreshold = DefaultAbsoluteThreshold
	}
	if o.DeathPenalty == 0 {
		o.DeathPenalty = DefaultDeathPenalty
	}
	if o.MinPanics == 0 {
		o.MinPanics = DefaultMinPanics
	}
	if o.MaxRollbacks == 0 {
		o.MaxRollbacks = DefaultMaxRollbacks
	}
	if o.Classes == 0 {
		o.Classes = DefaultClasses
	}
	if o.RandomGuessLoss == 0 {
		o.RandomGuessLoss = math.Log(float64(o.Classes))
	}
	return o, nil
}

// Governor is the G2 training governor (esper-reference §3.2): it
// watches the loss for catastrophic failure (NaN/Inf, a divergence spike,
// a collapse to random guessing), keeps a snapshot of the last good state
// of the host and its fossilized seeds, and rolls back to it, pruning
// every live seed, when it panics.
//
// A Governor is not safe for concurrent use; the goroutine that trains
// the model drives it.
type Governor struct {
	model *kasmina.MorphogeneticModel
	opts  GovernorOptions

	history []float64
	// consecutive counts anomalies in a row; pending is set by any
	// panic-worthy observation until a normal loss or a rollback.
	consecutive int
	pending     bool
	panicReason string
	panicLoss   float64

	snap governorSnapshot
}

// governorSnapshot is the last good state: the host's parameters and
// buffers and the checkpoints of the slots that held a FOSSILIZED seed.
type governorSnapshot struct {
	host  map[string]*tensor.Tensor
	slots map[string]kasmina.SlotCheckpoint
}

// NewGovernor returns a governor over model and takes the initial
// snapshot. A nil model or invalid options are an error.
func NewGovernor(model *kasmina.MorphogeneticModel, o GovernorOptions) (*Governor, error) {
	if model == nil {
		return nil, errors.New("tolaria: NewGovernor: nil model")
	}
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Governor{model: model, opts: o, panicLoss: math.NaN()}
	if err := g.Snapshot(); err != nil {
		return nil, err
	}
	return g, nil
}

// Options returns the options with their defaults filled in.
func (g *Governor) Options() GovernorOptions { return g.opts }

// Snapshot records the current state as the last good one: independent
// copies of the host's parameters and buffers, and the state of every
// slot holding a FOSSILIZED seed. Live seeds that are not fossilized
// (GERMINATED through HOLDING) and empty or pruned slots are left out,
// so a rollback never resurrects an experiment in progress.
func (g *Governor) Snapshot() error {
	host := nn.StateDict(g.model.Host())
	slots := map[string]kasmina.SlotCheckpoint{}
	for _, s := range g.model.Slots() {
		if s.Stage() != leyline.StageFossilized {
			continue
		}
		ck, err := s.SaveState()
		if err != nil {
			return fmt.Errorf("tolaria: governor snapshot: %w", err)
		}
		slots[s.ID()] = ck
	}
	g.snap = governorSnapshot{host: host, slots: slots}
	return nil
}

// SnapshotSlots returns the ids of the slots in the snapshot (those that
// held a FOSSILIZED seed when it was taken), sorted.
func (g *Governor) SnapshotSlots() []string {
	out := make([]string, 0, len(g.snap.slots))
	for id := range g.snap.slots {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// CheckVitalSigns inspects one loss (the validation loss of an epoch)
// and reports whether the governor panics, with the reason (one of the
// leyline.PanicReason constants; "" when it does not panic):
//
//  1. NaN or ±Inf panics at once ("governor_nan"); the consecutive
//     counter is untouched and the loss is not recorded.
//  2. With at least MinHistoryWindow losses recorded, a loss within
//     LobotomyTolerance·L of the random-guess loss L, after an average
//     below LobotomyAverageFraction·L, panics at once
//     ("governor_lobotomy"): the model collapsed to guessing.
//  3. With fewer than MinHistoryWindow losses, the loss is recorded and
//     there is no panic — unless it is absurd: above AbsoluteThreshold
//     AND above Multiplier times the larger of the random-guess loss
//     and the average so far. That is an anomaly (see 4), so that a run
//     that diverges from its first epoch (a learning rate far too
//     high: a first loss of 4e30) never becomes the baseline the
//     statistics and the snapshots start from. G2 records anything
//     here; its rule 4 needs the baseline to be sane.
//  4. A loss is an anomaly when it exceeds AbsoluteThreshold AND the
//     average plus Sensitivity population standard deviations AND
//     Multiplier times the average. An anomaly is not recorded; it
//     counts up the consecutive anomalies and panics
//     ("governor_divergence") once there are MinPanics in a row. Any
//     other loss is recorded and resets the count.
//
// Pending reports whether the latest loss was an anomaly not yet acted
// on.
func (g *Governor) CheckVitalSigns(loss float64) (panicked bool, reason string) {
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		g.setPanic(leyline.PanicReasonNaN, loss)
		return true, leyline.PanicReasonNaN
	}
	if len(g.history) >= MinHistoryWindow {
		avg, _ := g.stats()
		l := g.opts.RandomGuessLoss
		if avg < LobotomyAverageFraction*l && math.Abs(loss-l) < LobotomyTolerance*l {
			g.setPanic(leyline.PanicReasonLobotomy, loss)
			return true, leyline.PanicReasonLobotomy
		}
	}
	var anomaly bool
	if len(g.history) < MinHistoryWindow {
		ref := g.opts.RandomGuessLoss
		if avg, _ := g.stats(); len(g.history) > 0 && avg > ref {
			ref = avg
		}
		anomaly = loss > g.opts.AbsoluteThreshold && loss > g.opts.Multiplier*ref
	} else {
		avg, sd := g.stats()
		anomaly = loss > g.opts.AbsoluteThreshold && loss > avg+g.opts.Sensitivity*sd && loss > g.opts.Multiplier*avg
	}
	if anomaly {
		g.consecutive++
		g.setPanic(leyline.PanicReasonDivergence, loss)
		if g.consecutive >= g.opts.MinPanics {
			return true, leyline.PanicReasonDivergence
		}
		return false, ""
	}
	g.record(loss)
	g.clearPanic()
	return false, ""
}

// Pending reports whether the governor holds a panic-worthy observation
// not yet acted on: the latest loss was an anomaly (below MinPanics in a
// row) or a panic that no rollback has followed. A Trainer neither
// checkpoints nor snapshots such an epoch.
func (g *Governor) Pending() bool { return g.pending }

// record appends loss to the history, keeping the last HistoryWindow.
func (g *Governor) record(loss float64) {
	g.history = append(g.history, loss)
	if n := len(g.history) - g.opts.HistoryWindow; n > 0 {
		g.history = append(g.history[:0], g.history[n:]...)
	}
}

// stats returns the mean and population standard deviation of the
// history (NaN, NaN when it is empty).
func (g *Governor) stats() (mean, sd float64) {
	if len(g.history) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, v := range g.history {
		mean += v
	}
	mean /= float64(len(g.history))
	var ss float64
	for _, v := range g.history {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / float64(len(g.history)))
}

func (g *Governor) setPanic(reason string, loss float64) {
	g.pending, g.panicReason, g.panicLoss = true, reason, loss
}

func (g *Governor) clearPanic() {
	g.consecutive, g.pending, g.panicReason, g.panicLoss = 0, false, "", math.NaN()
}

// ConsecutivePanics returns the number of anomalies in a row.
func (g *Governor) ConsecutivePanics() int { return g.consecutive }

// History returns a copy of the recorded losses, oldest first.
func (g *Governor) History() []float64 { return append([]float64(nil), g.history...) }

// PunishmentReward is the reward an environment gets for the epoch that
// needed a rollback: −DeathPenalty (−10 by default).
func (g *Governor) PunishmentReward() float64 { return -g.opts.DeathPenalty }

// Reset forgets the loss history and any panic, and takes a fresh
// snapshot (the start of a new episode).
func (g *Governor) Reset() error {
	g.history = g.history[:0]
	g.clearPanic()
	return g.Snapshot()
}

// RollbackReport describes a rollback (G2 GovernorReport).
type RollbackReport struct {
	// Reason is RollbackReason ("Structural Collapse").
	Reason string
	// PanicReason is the leyline.PanicReason of the panic that led to
	// the rollback, or PanicReasonRollback when none was pending.
	PanicReason string
	// EnvID and Device identify the environment, as given.
	EnvID  int
	Device string
	// LossAtPanic is the loss that caused the panic; NaN when none was
	// pending (or the loss itself was NaN).
	LossAtPanic float64
	// LossThreshold is the history's average plus Sensitivity standard
	// deviations (avg + 6σ); NaN with no history.
	LossThreshold float64
	// ConsecutivePanics is the governor's count after the rollback: 0,
	// as in G2. PanicsAtRollback is the count before it was reset.
	ConsecutivePanics int
	PanicsAtRollback  int
	// RollbackOccurred is true for a completed rollback.
	RollbackOccurred bool
	// PrunedSlots are the slots whose live seeds were pruned;
	// RestoredSlots those whose fossilized seed was restored, both in
	// timeline order.
	PrunedSlots   []string
	RestoredSlots []string
	// MissingSlots are snapshot slots the model no longer has, skipped
	// (slot mismatches are tolerated); SlotErrors describe snapshot
	// slots that failed to load, also skipped.
	MissingSlots []string
	SlotErrors   []string
	// TelemetryError describes a failure of the sink, which did not stop
	// the rollback; "" when the event was handed over.
	TelemetryError string
}

// ExecuteRollback restores the last snapshot (esper-reference §3.2
// execute_rollback):
//
//   - The host's parameters and buffers get the snapshot's values bit
//     for bit, in place (the tensors keep their identity). A host whose
//     parameter or buffer names no longer match the snapshot is an
//     error, and nothing is changed.
//   - Every live seed that is not FOSSILIZED is pruned with the panic
//     reason and initiator "governor".
//   - Every slot that held a FOSSILIZED seed in the snapshot is restored
//     from it. Slot mismatches are tolerated: a snapshot slot the model
//     lacks, or one that fails to load, is reported and skipped. A seed
//     fossilized after the snapshot cannot be pruned and stays as it is.
//   - Exactly one GOVERNOR_ROLLBACK event goes to the sink; a sink that
//     panics is reported in TelemetryError and does not abort anything.
//   - The panic state is reset (the loss history is kept), and
//     OnRollback runs.
//
// The caller must clear its optimizers' state (see OnRollback and
// ClearOptimizerState) and rebuild optimizer arenas over seed
// parameters, since the model's Version changed.
func (g *Governor) ExecuteRollback(envID int, device string) (RollbackReport, error) {
	reason := g.panicReason
	if !g.pending || reason == "" {
		reason = leyline.PanicReasonRollback
	}
	if err := nn.LoadStateDict(g.model.Host(), g.snap.host, true); err != nil {
		var sde *nn.StateDictError
		if errors.As(err, &sde) && (len(sde.Missing) > 0 || len(sde.Unexpected) > 0) {
			return RollbackReport{}, fmt.Errorf("tolaria: governor rollback: host does not match the snapshot (missing %q, unexpected %q): %w", sde.Missing, sde.Unexpected, err)
		}
		return RollbackReport{}, fmt.Errorf("tolaria: governor rollback: %w", err)
	}
	avg, sd := g.stats()
	rep := RollbackReport{
		Reason:           RollbackReason,
		PanicReason:      reason,
		EnvID:            envID,
		Device:           device,
		LossAtPanic:      math.NaN(),
		LossThreshold:    avg + g.opts.Sensitivity*sd,
		PanicsAtRollback: g.consecutive,
		RollbackOccurred: true,
	}
	if g.pending {
		rep.LossAtPanic = g.panicLoss
	}
	for _, s := range g.model.Slots() {
		if s.Prune(reason, kasmina.InitiatorGovernor) {
			rep.PrunedSlots = append(rep.PrunedSlots, s.ID())
		}
	}
	for _, id := range g.SnapshotSlots() {
		s, err := g.model.Slot(id)
		if err != nil {
			rep.MissingSlots = append(rep.MissingSlots, id)
			continue
		}
		if err := s.LoadState(g.snap.slots[id]); err != nil {
			rep.SlotErrors = append(rep.SlotErrors, err.Error())
			continue
		}
		rep.RestoredSlots = append(rep.RestoredSlots, id)
	}
	rep.TelemetryError = g.emitRollback(rep)
	g.clearPanic()
	rep.ConsecutivePanics = g.consecutive
	if g.opts.OnRollback != nil {
		g.opts.OnRollback(rep)
	}
	return rep, nil
}

// emitRollback hands the GOVERNOR_ROLLBACK event to the sink, turning a
// panic in it into a description.
func (g *Governor) emitRollback(rep RollbackReport) (failure string) {
	if g.opts.Sink == nil {
		return ""
	}
	var lossAt, threshold *float64
	if !math.IsNaN(rep.LossAtPanic) && !math.IsInf(rep.LossAtPanic, 0) {
		v := rep.LossAtPanic
		lossAt = &v
	}
	if !math.IsNaN(rep.LossThreshold) && !math.IsInf(rep.LossThreshold, 0) {
		v := rep.LossThreshold
		threshold = &v
	}
	panics := rep.PanicsAtRollback
	ev := leyline.NewEvent(leyline.EventGovernorRollback, &leyline.GovernorRollbackPayload{
		EnvID: rep.EnvID, Device: rep.Device, Reason: rep.Reason,
		LossAtPanic: lossAt, LossThreshold: threshold, ConsecutivePanics: &panics,
		PanicReason: rep.PanicReason, MissingKeys: prefixed("seed_slots.", rep.MissingSlots),
	})
	ev.Severity = leyline.SeverityError
	ev.Message = fmt.Sprintf("governor rollback (%s): pruned %v, restored %v", rep.PanicReason, rep.PrunedSlots, rep.RestoredSlots)
	return safeEmit(g.opts.Sink, ev)
}

func prefixed(p string, ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = p + id
	}
	return out
}

// safeEmit hands ev to sink; a panicking sink is reported, not
// propagated, because telemetry must never break training.
func safeEmit(sink EventSink, ev leyline.TelemetryEvent) (failure string) {
	if sink == nil {
		return ""
	}
	defer func() {
		if r := recover(); r != nil {
			failure = fmt.Sprintf("telemetry sink panicked: %v", r)
		}
	}()
	sink.Emit(ev)
	return ""
}

// StateResetter is an optimizer whose state (step count, momentum) can be
// forgotten; every optim optimizer is one.
type StateResetter interface {
	ResetState()
}

// ClearOptimizerState resets every given optimizer's state, skipping nil
// ones. Call it after a rollback (for instance from
// GovernorOptions.OnRollback): restoring weights in place leaves momentum
// buffers as they were, and stale momentum would push the restored model
// straight back toward the collapse.
func ClearOptimizerState(opts ...StateResetter) {
	for _, o := range opts {
		if o != nil {
			o.ResetState()
		}
	}
}

// PreflightContext is what Preflight knows beyond the decision and the
// model.
type PreflightContext struct {
	// ValLoss and ValAccuracy are the latest validation figures; both
	// must be finite.
	ValLoss     float64
	ValAccuracy float64
	// CooldownEpochs left before the next mutation; negative is vetoed.
	CooldownEpochs int
	// MaxSeeds caps the live seeds; zero means no cap.
	MaxSeeds int
}

// Preflight blocking factors (PreflightVerdict.BlockedFactor).
const (
	BlockedOp            = "op"
	BlockedValLoss       = "val_loss_finite"
	BlockedValAccuracy   = "val_accuracy_finite"
	BlockedCooldown      = "cooldown"
	BlockedMaxSeeds      = "max_seeds"
	BlockedSlot          = "slot"
	BlockedBlueprint     = "blueprint"
	BlockedSlotOccupied  = "slot_occupied"
	BlockedAlphaTarget   = "alpha_target"
	BlockedAlphaSchedule = "alpha_speed_curve"
)

// HealthSnapshot is the governor's view of the run when a verdict is
// given.
type HealthSnapshot struct {
	ValLoss           float64
	ValAccuracy       float64
	LiveSeeds         int
	MaxSeeds          int
	ConsecutivePanics int
	HistoryLen        int
	// AverageLoss is the mean of the loss history; NaN when empty.
	AverageLoss float64
}

// PreflightVerdict is Preflight's answer.
type PreflightVerdict struct {
	Approved bool
	// Reason explains a veto ("approved" otherwise).
	Reason string
	// BlockedFactor is one of the Blocked constants; "" when approved.
	BlockedFactor string
	Health        HealthSnapshot
}

// Preflight vets a lifecycle mutation before it is executed (G2
// preflight_lifecycle_mutation). WAIT is always approved. Any other op is
// vetoed, in this order, for: a non-finite validation loss or accuracy;
// a negative cooldown; more live seeds (any stage from GERMINATED to
// FOSSILIZED) than MaxSeeds when MaxSeeds > 0; a slot the model does not
// have; GERMINATE without a valid blueprint or into a slot that holds
// anything (a seed, or a pruned one still embargoed); SET_ALPHA_TARGET
// without a valid target; SET_ALPHA_TARGET or PRUNE without a valid speed
// and curve. Otherwise it is approved.
//
// Decision heads are values, so "without" means out of range: the zero
// blueprint is NOOP, a real catalog entry.
func (g *Governor) Preflight(d leyline.Decision, c PreflightContext) PreflightVerdict {
	avg, _ := g.stats()
	live := liveSeeds(g.model)
	v := PreflightVerdict{Health: HealthSnapshot{
		ValLoss: c.ValLoss, ValAccuracy: c.ValAccuracy, LiveSeeds: live, MaxSeeds: c.MaxSeeds,
		ConsecutivePanics: g.consecutive, HistoryLen: len(g.history), AverageLoss: avg,
	}}
	veto := func(factor, format string, args ...any) PreflightVerdict {
		v.BlockedFactor, v.Reason = factor, fmt.Sprintf(format, args...)
		return v
	}
	if d.Op == leyline.OpWait {
		v.Approved, v.Reason = true, "approved"
		return v
	}
	switch {
	case math.IsNaN(c.ValLoss) || math.IsInf(c.ValLoss, 0):
		return veto(BlockedValLoss, "validation loss %v is not finite", c.ValLoss)
	case math.IsNaN(c.ValAccuracy) || math.IsInf(c.ValAccuracy, 0):
		return veto(BlockedValAccuracy, "validation accuracy %v is not finite", c.ValAccuracy)
	case c.CooldownEpochs < 0:
		return veto(BlockedCooldown, "negative cooldown %d", c.CooldownEpochs)
	case c.MaxSeeds > 0 && live > c.MaxSeeds:
		return veto(BlockedMaxSeeds, "%d live seeds exceed the cap of %d", live, c.MaxSeeds)
	case !d.Op.Valid():
		return veto(BlockedOp, "unknown op %v", d.Op)
	}
	s, err := g.model.Slot(d.SlotID)
	if err != nil {
		return veto(BlockedSlot, "%v", err)
	}
	switch d.Op {
	case leyline.OpGerminate:
		if !d.Blueprint.Valid() {
			return veto(BlockedBlueprint, "GERMINATE without a blueprint (%v)", d.Blueprint)
		}
		if s.State() != nil {
			return veto(BlockedSlotOccupied, "GERMINATE into slot %s, which holds seed %q in %v", s.ID(), s.State().SeedID, s.Stage())
		}
	case leyline.OpSetAlphaTarget:
		if !d.AlphaTarget.Valid() {
			return veto(BlockedAlphaTarget, "SET_ALPHA_TARGET without a target (%v)", d.AlphaTarget)
		}
	}
	if (d.Op == leyline.OpSetAlphaTarget || d.Op == leyline.OpPrune) && (!d.AlphaSpeed.Valid() || !d.AlphaCurve.Valid()) {
		return veto(BlockedAlphaSchedule, "%v without a speed and curve (%v, %v)", d.Op, d.AlphaSpeed, d.AlphaCurve)
	}
	v.Approved, v.Reason = true, "approved"
	return v
}

// liveSeeds counts the slots holding a seed that is not on the failure
// path (GERMINATED through FOSSILIZED).
func liveSeeds(m *kasmina.MorphogeneticModel) int {
	n := 0
	for _, s := range m.Slots() {
		if s.State() != nil && !leyline.IsFailureStage(s.Stage()) {
			n++
		}
	}
	return n
}
