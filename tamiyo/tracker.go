package tamiyo

import (
	"errors"
	"fmt"
	"math"

	"github.com/esper-go/esper/leyline"
)

// SignalTracker defaults (esper-reference.md §4.1, G2 SignalTracker). The
// stabilisation threshold and epoch count are leyline's
// StabilizationThreshold (0.03) and StabilizationEpochs (3).
const (
	// DefaultPlateauThresholdPct is the accuracy gain (points, 0–100
	// scale) below which an epoch counts towards a plateau.
	DefaultPlateauThresholdPct = 0.5 // G2 SignalTracker plateau_threshold_pct
	// DefaultHistoryWindow is how many validation losses and accuracies
	// the tracker remembers.
	DefaultHistoryWindow = 10 // G2 SignalTracker history_window
	// DefaultRegressionThreshold is the relative loss regression up to
	// which an epoch still counts as stable.
	DefaultRegressionThreshold = 0.05 // G2 SignalTracker regression_threshold
)

// minStabilizationLoss is the previous loss at or below which the
// relative improvement is not computed (it would be dominated by noise):
// such an epoch neither counts as stable nor resets the count.
const minStabilizationLoss = 1e-8 // G2 SignalTracker EPS

// EventSink receives telemetry events. nissa.Hub implements it.
type EventSink interface {
	Emit(leyline.TelemetryEvent)
}

// TrackerOptions configure a SignalTracker. The zero value gives the
// reference's defaults.
type TrackerOptions struct {
	// PlateauThresholdPct is the validation accuracy gain (points) an
	// epoch needs to reset the plateau counter; 0 means
	// DefaultPlateauThresholdPct (0.5). It must be finite.
	PlateauThresholdPct float64
	// HistoryWindow bounds the loss and accuracy histories; 0 means
	// DefaultHistoryWindow (10). Negative is an error.
	HistoryWindow int
	// StabilizationThreshold is the relative loss improvement below which
	// an epoch counts as stable; 0 means leyline.StabilizationThreshold
	// (0.03). It must be finite and non-negative.
	StabilizationThreshold float64
	// StabilizationEpochs is the number of consecutive stable epochs that
	// latch host stabilisation; 0 means leyline.StabilizationEpochs (3).
	// A negative value is the reference's stabilization_epochs = 0: the
	// host counts as stabilised from the start (and no TAMIYO_INITIATED
	// event is emitted, since nothing latches).
	StabilizationEpochs int
	// RegressionThreshold is the relative loss regression up to which an
	// epoch still counts as stable (a larger one resets the count); 0
	// means DefaultRegressionThreshold (0.05). It must be finite and
	// non-negative.
	RegressionThreshold float64
	// EnvID identifies the environment in the TAMIYO_INITIATED payload.
	EnvID int
	// Sink, when not nil, receives TAMIYO_INITIATED (with a
	// leyline.TamiyoInitiatedPayload) from the Update that latches host
	// stabilisation. Peek never emits.
	Sink EventSink
}

func (o TrackerOptions) withDefaults() (TrackerOptions, error) {
	if o.PlateauThresholdPct == 0 {
		o.PlateauThresholdPct = DefaultPlateauThresholdPct
	}
	if o.HistoryWindow == 0 {
		o.HistoryWindow = DefaultHistoryWindow
	}
	if o.StabilizationThreshold == 0 {
		o.StabilizationThreshold = leyline.StabilizationThreshold
	}
	switch {
	case o.StabilizationEpochs == 0:
		o.StabilizationEpochs = leyline.StabilizationEpochs
	case o.StabilizationEpochs < 0:
		o.StabilizationEpochs = 0
	}
	if o.RegressionThreshold == 0 {
		o.RegressionThreshold = DefaultRegressionThreshold
	}
	for _, f := range []struct {
		name        string
		v           float64
		nonNegative bool
	}{
		{"PlateauThresholdPct", o.PlateauThresholdPct, false},
		{"StabilizationThreshold", o.StabilizationThreshold, true},
		{"RegressionThreshold", o.RegressionThreshold, true},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return o, fmt.Errorf("tamiyo: TrackerOptions.%s = %v must be finite", f.name, f.v)
		}
		if f.nonNegative && f.v < 0 {
			return o, fmt.Errorf("tamiyo: TrackerOptions.%s = %v must not be negative", f.name, f.v)
		}
	}
	if o.HistoryWindow < 0 {
		return o, fmt.Errorf("tamiyo: TrackerOptions.HistoryWindow = %d must not be negative", o.HistoryWindow)
	}
	return o, nil
}

// EpochResult is what one epoch of training produced, as the tracker
// reads it. Accuracies are on the 0–100 scale.
type EpochResult struct {
	// Epoch is the epoch's index, from 0; events show it as Epoch+1,
	// the epoch's number.
	Epoch         int
	GlobalStep    int
	TrainLoss     float64
	TrainAccuracy float64
	ValLoss       float64
	ValAccuracy   float64
	// Seeds are the slots' seeds. Reports in stage DORMANT or UNKNOWN
	// describe an empty slot and are ignored; every other report needs a
	// non-empty SeedID, unique among them, and a valid stage.
	Seeds []leyline.SeedReport
	// AvailableSlots is the number of enabled slots without a seed; it
	// must not be negative.
	AvailableSlots int
}

// SignalTracker keeps running statistics of a host's training and turns
// each epoch's figures into leyline.TrainingSignals (esper-reference.md
// §4.1):
//
//   - LossDelta = previous − current validation loss (the previous loss
//     starts at +Inf), AccuracyDelta = current − previous validation
//     accuracy (the previous accuracy starts at 0).
//   - PlateauEpochs counts consecutive epochs whose AccuracyDelta is
//     below PlateauThresholdPct.
//   - HostStabilized latches: while not yet stabilised and the previous
//     loss is finite and above 1e-8, rel = LossDelta / previous loss; the
//     epoch is stable iff −RegressionThreshold < rel <
//     StabilizationThreshold (a small improvement or a small regression),
//     otherwise the stable count resets. StabilizationEpochs stable
//     epochs in a row set HostStabilized to 1 for good (until Reset).
//   - Histories hold the last HistoryWindow validation losses and
//     accuracies; the signals carry the last leyline.SignalHistoryLength.
//     BestValAccuracy is the running maximum (from 0); BestValLoss the
//     minimum of the loss window (NaN losses skipped).
//   - The summary seed is the maximum by (stage value, alpha, −counterfactual
//     with +Inf for an unmeasured one, seed id): the most advanced seed,
//     and among equals the one whose measured contribution is the most
//     negative, so a harmful seed is the one summarised.
//
// A SignalTracker is not safe for concurrent use.
type SignalTracker struct {
	opts TrackerOptions
	st   trackerState
}

// trackerState is everything Update changes, kept apart so that Peek can
// compute the next state without committing it.
type trackerState struct {
	losses, accuracies []float64
	bestAccuracy       float64
	plateau            int
	stabilized         bool
	stableCount        int
	prevLoss, prevAcc  float64
}

// NewSignalTracker returns a tracker with opts' defaults applied; invalid
// options are an error.
func NewSignalTracker(opts TrackerOptions) (*SignalTracker, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &SignalTracker{opts: o}
	t.Reset()
	return t, nil
}

// Options returns the tracker's options with defaults applied.
func (t *SignalTracker) Options() TrackerOptions { return t.opts }

// Reset forgets every epoch: empty histories, best accuracy 0, previous
// loss +Inf, no plateau, and stabilisation un-latched (unless
// StabilizationEpochs disables it).
func (t *SignalTracker) Reset() {
	t.st = trackerState{
		bestAccuracy: 0,
		prevLoss:     math.Inf(1),
		prevAcc:      0,
		stabilized:   t.opts.StabilizationEpochs == 0,
	}
}

// IsStabilized reports whether host stabilisation has latched.
func (t *SignalTracker) IsStabilized() bool { return t.st.stabilized }

// Update records one epoch and returns the signals for it. It fails,
// without changing the tracker, on a negative AvailableSlots or a bad
// seed report (empty or duplicate id, invalid stage).
func (t *SignalTracker) Update(r EpochResult) (leyline.TrainingSignals, error) {
	sig, next, latched, err := t.step(r)
	if err != nil {
		return leyline.TrainingSignals{}, err
	}
	t.st = next
	if latched && t.opts.Sink != nil {
		t.opts.Sink.Emit(t.initiatedEvent(r, next.stableCount))
	}
	return sig, nil
}

// Peek returns exactly what Update(r) would return, without changing the
// tracker or emitting anything: for evaluating a hypothetical epoch.
func (t *SignalTracker) Peek(r EpochResult) (leyline.TrainingSignals, error) {
	sig, _, _, err := t.step(r)
	return sig, err
}

// StableValAccuracy returns the minimum of the last k validation
// accuracies (all of them when fewer were recorded): a pessimistic
// recent accuracy. k ≤ 0 or an empty history is an error.
func (t *SignalTracker) StableValAccuracy(k int) (float64, error) {
	if k <= 0 {
		return 0, fmt.Errorf("tamiyo: StableValAccuracy: k = %d must be positive", k)
	}
	h := t.st.accuracies
	if len(h) == 0 {
		return 0, errors.New("tamiyo: StableValAccuracy: no accuracy recorded yet")
	}
	if k < len(h) {
		h = h[len(h)-k:]
	}
	m := h[0]
	for _, v := range h[1:] {
		m = math.Min(m, v)
	}
	return m, nil
}

// step computes the signals for r and the state after it. latched
// reports that this epoch latched stabilisation.
func (t *SignalTracker) step(r EpochResult) (sig leyline.TrainingSignals, next trackerState, latched bool, err error) {
	if r.AvailableSlots < 0 {
		return sig, next, false, fmt.Errorf("tamiyo: SignalTracker: AvailableSlots = %d must not be negative", r.AvailableSlots)
	}
	seeds, err := presentSeeds(r.Seeds)
	if err != nil {
		return sig, next, false, fmt.Errorf("tamiyo: SignalTracker: %w", err)
	}
	cur := t.st
	next = cur
	lossDelta := cur.prevLoss - r.ValLoss
	accDelta := r.ValAccuracy - cur.prevAcc

	if accDelta < t.opts.PlateauThresholdPct {
		next.plateau++
	} else {
		next.plateau = 0
	}

	finitePrev := !math.IsInf(cur.prevLoss, 0) && !math.IsNaN(cur.prevLoss)
	if !cur.stabilized && finitePrev && cur.prevLoss > minStabilizationLoss {
		rel := lossDelta / cur.prevLoss
		if rel > -t.opts.RegressionThreshold && rel < t.opts.StabilizationThreshold {
			next.stableCount++
			if next.stableCount >= t.opts.StabilizationEpochs {
				next.stabilized = true
				latched = true
			}
		} else {
			next.stableCount = 0
		}
	}

	if r.ValAccuracy > next.bestAccuracy {
		next.bestAccuracy = r.ValAccuracy
	}
	next.losses = pushBounded(cur.losses, r.ValLoss, t.opts.HistoryWindow)
	next.accuracies = pushBounded(cur.accuracies, r.ValAccuracy, t.opts.HistoryWindow)
	next.prevLoss = r.ValLoss
	next.prevAcc = r.ValAccuracy

	stabilized := 0
	if next.stabilized {
		stabilized = 1
	}
	sig = leyline.TrainingSignals{
		Metrics: leyline.TrainingMetrics{
			Epoch:           r.Epoch,
			GlobalStep:      r.GlobalStep,
			TrainLoss:       r.TrainLoss,
			ValLoss:         r.ValLoss,
			LossDelta:       lossDelta,
			TrainAccuracy:   r.TrainAccuracy,
			ValAccuracy:     r.ValAccuracy,
			AccuracyDelta:   accDelta,
			PlateauEpochs:   next.plateau,
			HostStabilized:  stabilized,
			BestValAccuracy: next.bestAccuracy,
			BestValLoss:     minSkippingNaN(next.losses),
		},
		ActiveSeeds:     make([]string, 0, len(seeds)),
		AvailableSlots:  r.AvailableSlots,
		LossHistory:     leyline.RecentHistory(next.losses),
		AccuracyHistory: leyline.RecentHistory(next.accuracies),
	}
	for _, s := range seeds {
		sig.ActiveSeeds = append(sig.ActiveSeeds, s.SeedID)
	}
	if len(seeds) > 0 {
		best := seeds[0]
		for _, s := range seeds[1:] {
			if summaryLess(best, s) {
				best = s
			}
		}
		sig.SummarySeedID = best.SeedID
		sig.SummarySeedStage = best.Stage
		sig.SummarySeedEpochsInStage = best.EpochsInStage
		sig.SummarySeedAlpha = best.Alpha
		sig.SummarySeedImprovement = best.ImprovementSinceStageStart
	}
	return sig, next, latched, nil
}

func (t *SignalTracker) initiatedEvent(r EpochResult, stableCount int) leyline.TelemetryEvent {
	ev := leyline.NewEvent(leyline.EventTamiyoInitiated, &leyline.TamiyoInitiatedPayload{
		EnvID:               t.opts.EnvID,
		Epoch:               r.Epoch + 1, // events number epochs from 1
		StableCount:         stableCount,
		StabilizationEpochs: t.opts.StabilizationEpochs,
		ValLoss:             r.ValLoss,
	})
	epoch := r.Epoch + 1
	ev.Epoch = &epoch
	ev.Message = fmt.Sprintf("Host stabilized - germination now allowed (env_id=%d, stable_count=%d, stabilization_epochs=%d, val_loss=%.4f)",
		t.opts.EnvID, stableCount, t.opts.StabilizationEpochs, r.ValLoss)
	return ev
}

// presentSeeds returns the reports that describe a seed (not DORMANT or
// UNKNOWN, which mean an empty slot), checking their ids and stages.
func presentSeeds(reports []leyline.SeedReport) ([]leyline.SeedReport, error) {
	out := make([]leyline.SeedReport, 0, len(reports))
	seen := make(map[string]bool, len(reports))
	for i, s := range reports {
		if !s.Stage.Valid() {
			return nil, fmt.Errorf("seed report %d (%q): %w: %v", i, s.SeedID, leyline.ErrInvalidStage, s.Stage)
		}
		if isEmptySlotStage(s.Stage) {
			continue
		}
		if s.SeedID == "" {
			return nil, fmt.Errorf("seed report %d (slot %q, %v) has no seed id", i, s.SlotID, s.Stage)
		}
		if seen[s.SeedID] {
			return nil, fmt.Errorf("duplicate seed id %q in seed reports", s.SeedID)
		}
		seen[s.SeedID] = true
		out = append(out, s)
	}
	return out, nil
}

// isEmptySlotStage reports whether a report in stage s stands for an empty
// slot rather than a seed.
func isEmptySlotStage(s leyline.SeedStage) bool {
	return s == leyline.StageDormant || s == leyline.StageUnknown
}

// summaryLess orders seeds by (stage, alpha, −counterfactual, seed id),
// an unmeasured counterfactual counting as +Inf.
func summaryLess(a, b leyline.SeedReport) bool {
	if a.Stage != b.Stage {
		return a.Stage < b.Stage
	}
	if a.Alpha != b.Alpha {
		return a.Alpha < b.Alpha
	}
	na, nb := -counterfactualOrInf(a), -counterfactualOrInf(b)
	if na != nb {
		return na < nb
	}
	return a.SeedID < b.SeedID
}

func counterfactualOrInf(s leyline.SeedReport) float64 {
	if s.Counterfactual == nil {
		return math.Inf(1)
	}
	return *s.Counterfactual
}

// pushBounded returns a new slice holding h's last n−1 values and v.
func pushBounded(h []float64, v float64, n int) []float64 {
	if len(h) >= n {
		h = h[len(h)-n+1:]
	}
	out := make([]float64, 0, len(h)+1)
	return append(append(out, h...), v)
}

// minSkippingNaN returns the smallest non-NaN value of h, NaN when there
// is none and +Inf for an empty h.
func minSkippingNaN(h []float64) float64 {
	m, found := math.Inf(1), false
	for _, v := range h {
		if math.IsNaN(v) {
			continue
		}
		found = true
		m = math.Min(m, v)
	}
	if !found && len(h) > 0 {
		return math.NaN()
	}
	return m
}
