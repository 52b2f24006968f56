package rollback

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/esper-go/esper/leyline"
)

// DefaultDeadline bounds the slow tier when TwoTier.Deadline is zero (G1
// TOLARIA_ROLLBACK_DEADLINE_MS).
const DefaultDeadline = 250 * time.Millisecond

// ErrDeadlineExceeded is returned by TwoTier.Restore when the checkpoint
// read did not finish within the deadline. The trainer reacts to it (G1:
// L4 halt "rollback_deadline" when configured).
var ErrDeadlineExceeded = errors.New("rollback: deadline_exceeded")

// ErrNoSnapshot is returned by TwoTier.Restore when the fast tier misses
// and there is no slow tier.
var ErrNoSnapshot = errors.New("rollback: no snapshot at or before the step and no checkpoint store")

// TwoTier is G1's two-tier rollback: the latest in-memory snapshot at or
// before the failing step, else the last checkpoint read under a
// deadline. Either tier may be nil. Set the fields before the first
// Restore and leave them alone afterwards; Restore and Metrics are safe
// for concurrent use.
type TwoTier struct {
	// Fast is the in-memory tier.
	Fast *FastCache
	// Store is the checkpoint tier.
	Store *Store
	// Deadline bounds the checkpoint read; 0 means DefaultDeadline.
	Deadline time.Duration

	mu        sync.Mutex
	failures  uint64
	deadlines uint64
	lastMs    float64
}

// Result describes one Restore.
type Result struct {
	// UsedFast is set when the state came from the fast tier.
	UsedFast bool
	// Hit is set when a state was restored by either tier; false with an
	// error otherwise.
	Hit bool
	// Step is the fast snapshot's step (UsedFast), Epoch the checkpoint's
	// epoch (a slow hit).
	Step  int64
	Epoch int
	// Latency is the wall time of the whole Restore.
	Latency time.Duration
}

// Restore finds the state to roll back to for a failure at step: a copy
// of the fast tier's latest snapshot ≤ step, else the store's latest
// checkpoint, read and verified in a goroutine so that a hung disk cannot
// stall the trainer past the deadline. On timeout it returns
// ErrDeadlineExceeded (the read finishes in the background and is
// discarded); when ctx ends first it returns ctx's error. Every error is
// counted in failures_total, a deadline also in deadline_exceeded_total.
// Applying the state to the model and optimizer is the caller's job
// (State.ApplyModule, State.ApplyOptimizer).
func (tt *TwoTier) Restore(ctx context.Context, step int64) (Result, State, error) {
	start := time.Now()
	res, s, err := tt.restore(ctx, step)
	res.Latency = time.Since(start)
	tt.mu.Lock()
	tt.lastMs = float64(res.Latency) / float64(time.Millisecond)
	if err != nil {
		tt.failures++
		if errors.Is(err, ErrDeadlineExceeded) {
			tt.deadlines++
		}
	}
	tt.mu.Unlock()
	return res, s, err
}

func (tt *TwoTier) restore(ctx context.Context, step int64) (Result, State, error) {
	if tt.Fast != nil {
		if s, at, ok := tt.Fast.Nearest(step); ok {
			return Result{UsedFast: true, Hit: true, Step: at}, s, nil
		}
	}
	if tt.Store == nil {
		return Result{}, State{}, fmt.Errorf("%w (step %d)", ErrNoSnapshot, step)
	}
	d := tt.Deadline
	if d <= 0 {
		d = DefaultDeadline
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()

	type loaded struct {
		s     State
		epoch int
		err   error
	}
	done := make(chan loaded, 1) // buffered: a late reader never blocks
	go func() {
		s, e, err := tt.Store.Latest()
		done <- loaded{s, e, err}
	}()
	select {
	case l := <-done:
		if l.err != nil {
			return Result{}, State{}, l.err
		}
		return Result{Hit: true, Epoch: l.epoch}, l.s, nil
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return Result{}, State{}, fmt.Errorf("%w: checkpoint read of %s took longer than %v", ErrDeadlineExceeded, tt.Store.Dir(), d)
		}
		return Result{}, State{}, fmt.Errorf("rollback: restore: %w", context.Cause(ctx))
	}
}

// EventRestoreFailed is the event name the trainer emits (CRITICAL)
// when a restore fails verification (esper-reference §3.1.6; leyline has
// no constant for it yet).
const EventRestoreFailed = "tolaria.rollback.restore_failed"

// Metrics returns the tolaria.rollback.* metrics: the fast tier's size,
// snapshot count and hit/miss counters (zero without a fast tier), the
// failure and deadline counters and the latency of the last Restore.
func (tt *TwoTier) Metrics() []leyline.Metric { return tt.AppendMetrics(nil) }

// AppendMetrics appends Metrics' figures to dst.
func (tt *TwoTier) AppendMetrics(dst []leyline.Metric) []leyline.Metric {
	var fs FastStats
	if tt.Fast != nil {
		fs = tt.Fast.Stats()
	}
	tt.mu.Lock()
	failures, deadlines, lastMs := tt.failures, tt.deadlines, tt.lastMs
	tt.mu.Unlock()
	return append(dst,
		leyline.Metric{Name: leyline.MetricTolariaRollbackFastSizeBytes, Value: float64(fs.SizeBytes), Unit: "bytes"},
		leyline.Metric{Name: leyline.MetricTolariaRollbackSnapshotsTotal, Value: float64(fs.SnapshotsTotal)},
		leyline.Metric{Name: leyline.MetricTolariaRollbackFailuresTotal, Value: float64(failures)},
		leyline.Metric{Name: leyline.MetricTolariaRollbackFastHitsTotal, Value: float64(fs.Hits)},
		leyline.Metric{Name: leyline.MetricTolariaRollbackFastMissesTotal, Value: float64(fs.Misses)},
		leyline.Metric{Name: leyline.MetricTolariaRollbackRestoreLatencyMs, Value: lastMs, Unit: "ms"},
		leyline.Metric{Name: leyline.MetricTolariaRollbackDeadlineExceededTotal, Value: float64(deadlines)},
	)
}
