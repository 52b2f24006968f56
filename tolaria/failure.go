package tolaria

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tolaria/rollback"
)

// Epoch failure reasons (EpochReport.FailureReason), in the priority
// order RunEpoch checks them (esper-reference §3.1.6).
const (
	// FailureBreakerOpen: the trainer's circuit breaker was OPEN when the
	// epoch started (the epoch ran in conservative mode).
	FailureBreakerOpen = "breaker_open"
	// FailureEpochBudget: the epoch took longer than
	// TrainerOptions.EpochBudget.
	FailureEpochBudget = "epoch_budget"
	// FailureTamiyoTimeout: the controller missed its deadline.
	FailureTamiyoTimeout = "tamiyo_timeout"
	// FailureKasminaTimeout: applying the decision missed its deadline.
	FailureKasminaTimeout = "kasmina_timeout"
)

// EventEpochBudgetExceeded is the Message prefix of the METRICS event
// (WARNING) sent when an epoch exceeds TrainerOptions.EpochBudget.
const EventEpochBudgetExceeded = "tolaria.epoch_budget_exceeded"

// newFailureHandling validates the failure options of o and builds the
// breaker and the rollback tiers into t.
func (t *Trainer) newFailureHandling(o TrainerOptions) error {
	switch {
	case o.EpochBudget < 0:
		return fmt.Errorf("%w: EpochBudget %v must be ≥ 0", ErrOptions, o.EpochBudget)
	case o.FastRollbackMB < 0:
		return fmt.Errorf("%w: FastRollbackMB %d must be ≥ 0", ErrOptions, o.FastRollbackMB)
	case o.RollbackDeadline < 0:
		return fmt.Errorf("%w: RollbackDeadline %v must be ≥ 0", ErrOptions, o.RollbackDeadline)
	}
	bo := o.Breaker
	if bo.SuccessThreshold == 0 {
		bo.SuccessThreshold = 1 // G1 trainer config
	}
	if bo.Sink == nil {
		bo.Sink = o.Sink
	}
	b, err := NewBreaker(bo)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	t.breaker = b
	tt := &rollback.TwoTier{Store: o.Checkpoints, Deadline: o.RollbackDeadline}
	if tt.Deadline == 0 {
		tt.Deadline = rollback.DefaultDeadline
	}
	if o.FastRollbackMB > 0 {
		if tt.Fast, err = rollback.NewFastCache(rollback.FastOptions{CapMB: o.FastRollbackMB}); err != nil {
			return fmt.Errorf("%w: %w", ErrOptions, err)
		}
	}
	t.rollback = tt
	return nil
}

// Breaker returns the trainer's epoch circuit breaker.
func (t *Trainer) Breaker() *Breaker { return t.breaker }

// Rollback returns the trainer's two rollback tiers: Fast is nil unless
// TrainerOptions.FastRollbackMB > 0, Store is TrainerOptions.Checkpoints.
// Its Metrics are the tolaria.rollback.* figures of the epoch event.
func (t *Trainer) Rollback() *rollback.TwoTier { return t.rollback }

// EpochsFailed returns how many epochs failed so far (a resumed run
// counts the checkpointed run's failures too).
func (t *Trainer) EpochsFailed() int { return t.failed }

// failureReason returns the epoch's failure reason, "" for a success:
// an open breaker, then the epoch budget, then a deadline miss this
// epoch (stepReason).
func (t *Trainer) failureReason(allowed bool, d time.Duration, stepReason string) string {
	switch {
	case !allowed:
		return FailureBreakerOpen
	case t.o.EpochBudget > 0 && d > t.o.EpochBudget:
		return FailureEpochBudget
	}
	return stepReason
}

// failEpoch handles a failed epoch (esper-reference §3.1.6, without the
// emergency levels): tolaria.epochs.failed++, a breaker failure (except
// for breaker_open itself, which would otherwise keep the breaker open
// for as long as epochs are shorter than its timeout), the optional
// rollback, and conservative mode on.
func (t *Trainer) failEpoch(ctx context.Context, r *EpochReport) error {
	t.failed++
	if r.FailureReason == FailureEpochBudget {
		t.deadlines.emit(EventEpochBudgetExceeded, leyline.SeverityWarning,
			fmt.Sprintf("epoch %d took %v, budget %v", r.Epoch+1, r.Duration, t.o.EpochBudget), t.failureMetrics(nil))
	}
	if r.FailureReason != FailureBreakerOpen {
		t.breaker.RecordFailure()
	}
	if err := t.rollbackAfter(ctx, r); err != nil {
		return err
	}
	t.deadlines.EnterConservative(r.FailureReason)
	return nil
}

// rollbackAfter restores, when RollbackOnFailure is set and a tier is
// configured, the nearest snapshot at or before the previous epoch: the
// fast tier's, else the latest checkpoint read under RollbackDeadline.
// A restore that finds nothing, misses its deadline or reads a corrupt
// checkpoint is counted (tolaria.rollback.*) and training goes on from
// the failed epoch's state; the last two also send
// tolaria.rollback.restore_failed (CRITICAL). An error is returned only
// when a state was found but could not be loaded, which leaves the
// trainer in an unknown state.
func (t *Trainer) rollbackAfter(ctx context.Context, r *EpochReport) error {
	tt := t.rollback
	prev := r.Epoch - 1
	if !t.o.RollbackOnFailure || (tt.Fast == nil && tt.Store == nil) || prev < 0 {
		return nil // nothing configured, or nothing before the first epoch
	}
	res, st, err := tt.Restore(ctx, int64(prev))
	from := int(res.Step)
	if err == nil && !res.UsedFast {
		// The store numbers checkpoints from 1 (see State); the fast
		// tier and RestoredFrom use the epoch's index.
		if from, err = stateEpoch(st); err == nil && from > prev {
			err = fmt.Errorf("rollback: latest checkpoint is of epoch %d, not before the failed epoch %d", from+1, r.Epoch+1)
		}
	}
	if err != nil {
		if !errors.Is(err, rollback.ErrNoSnapshot) {
			t.deadlines.emit(rollback.EventRestoreFailed, leyline.SeverityCritical,
				fmt.Sprintf("epoch %d (%s): %v", r.Epoch+1, r.FailureReason, err), t.failureMetrics(nil))
		}
		return nil
	}
	if err := t.loadState(st, true); err != nil {
		return fmt.Errorf("tolaria: epoch %d: rollback to epoch %d: %w", r.Epoch+1, from+1, err)
	}
	r.RestoredFrom, r.RestoredFast = from, res.UsedFast
	r.Seeds = seedReports(t.opt.slots)
	return nil
}

// succeedEpoch records a successful epoch: a breaker success, and
// conservative mode off.
func (t *Trainer) succeedEpoch() {
	t.breaker.RecordSuccess()
	t.deadlines.ClearConservative()
}

// snapshotFast puts st into the fast tier as epoch e's snapshot. A state
// larger than the whole tier is skipped (the tier then misses and the
// checkpoint tier, if any, answers).
func (t *Trainer) snapshotFast(e int, st rollback.State) error {
	if err := t.rollback.Fast.Put(int64(e), st); err != nil && !errors.Is(err, rollback.ErrTooLarge) {
		return err
	}
	return nil
}

// failureMetrics appends tolaria.epochs.failed, tolaria.breaker.state and
// the tolaria.rollback.* figures to dst.
func (t *Trainer) failureMetrics(dst []leyline.Metric) []leyline.Metric {
	dst = append(dst, leyline.Metric{Name: leyline.MetricTolariaEpochsFailed, Value: float64(t.failed), Unit: "count"})
	dst = t.breaker.AppendMetrics(dst)
	return t.rollback.AppendMetrics(dst)
}
