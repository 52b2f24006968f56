package tolaria

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria/rollback"
)

// What the trainer does when training diverges.
//
// An epoch is healthy when its validation loss is finite and, with a
// governor, the governor accepted it: no panic, no anomaly pending (see
// Governor.CheckVitalSigns). Only a healthy epoch is checkpointed, enters
// the fast rollback tier, or refreshes the governor's snapshot, so that
// the state of a diverged epoch (NaN weights, or a loss of 1e30) is never
// saved, resumed, or rolled back to.
//
// With a governor, an epoch whose loss makes it panic is rolled back to
// its snapshot. A rollback that follows MaxRollbacks others with no
// healthy epoch between them is the last: RunEpoch (and so Fit) returns
// a *DivergenceError, after rolling the model back once more, so that it
// holds the snapshot. Without a governor there is nothing to roll back
// to, and the first epoch whose validation loss is not finite fails so.

// ErrDiverged is wrapped by the error RunEpoch and Fit return when
// training diverged (a *DivergenceError, which says where and what is
// left); check with errors.Is.
var ErrDiverged = errors.New("tolaria: training diverged")

// DivergenceError reports a run that diverged beyond repair.
type DivergenceError struct {
	// Epoch is the number (from 1) of the epoch that diverged last, and
	// ValLoss its validation loss.
	Epoch   int
	ValLoss float64
	// Reason is the governor's panic reason (a leyline.PanicReason
	// constant), "" without a governor.
	Reason string
	// Rollbacks counts the rollbacks in a row that did not help, this
	// epoch's included (the governor's MaxRollbacks + 1); 0 without a
	// governor.
	Rollbacks int
	// Governor tells whether a governor watched the run; the model then
	// holds its snapshot, restored by the last rollback.
	Governor bool
	// Checkpoint is the last good checkpoint: the latest one written for
	// a healthy epoch (without a governor: one whose validation loss was
	// finite), or the one the run resumed from; "" when there is none.
	// CheckpointEpoch is its epoch number.
	Checkpoint      string
	CheckpointEpoch int
	// Checkpoints tells whether the run kept checkpoints at all.
	Checkpoints bool
}

func (e *DivergenceError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tolaria: training diverged at epoch %d: validation loss %v", e.Epoch, e.ValLoss)
	if e.Governor {
		n := e.Rollbacks - 1
		fmt.Fprintf(&b, " (%s), after %d rollback", e.Reason, n)
		if n != 1 {
			b.WriteString("s")
		}
		b.WriteString(" in a row")
	} else {
		b.WriteString(", and no governor watches the run to roll it back (TrainerOptions.Governor)")
	}
	switch {
	case e.Checkpoint != "" && e.Governor:
		fmt.Fprintf(&b, "; the last good checkpoint is %s (epoch %d)", e.Checkpoint, e.CheckpointEpoch)
	case e.Checkpoint != "":
		// No governor judged it: its loss was finite, maybe no more.
		fmt.Fprintf(&b, "; the last checkpoint with a finite loss is %s (epoch %d)", e.Checkpoint, e.CheckpointEpoch)
	case e.Checkpoints:
		b.WriteString("; no epoch was good enough to checkpoint")
	default:
		b.WriteString("; no checkpoints were kept (TrainerOptions.Checkpoints)")
	}
	return b.String()
}

// Unwrap returns ErrDiverged.
func (e *DivergenceError) Unwrap() error { return ErrDiverged }

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// watch runs the governor over epoch e's report r (filled up to its
// validation) and returns whether the epoch is healthy, and the error
// that ends the run when it diverged beyond repair.
func (t *Trainer) watch(e int, r *EpochReport) (healthy bool, diverged error) {
	g := t.governor
	if g == nil {
		if finite(r.ValLoss) {
			return true, nil
		}
		return false, t.divergence(r, "")
	}
	panicked, reason := g.CheckVitalSigns(r.ValLoss)
	if !panicked {
		if g.Pending() {
			return false, nil // an anomaly, not yet a panic
		}
		t.rollbacksInRow = 0
		if e%5 == 0 {
			if err := g.Snapshot(); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	if _, err := g.ExecuteRollback(t.o.EnvID, t.dev.String()); err != nil {
		return false, fmt.Errorf("tolaria: epoch %d: rollback: %w", e+1, err)
	}
	r.RolledBack, r.PanicReason = true, reason
	t.rollbacksInRow++
	if t.rollbacksInRow > g.Options().MaxRollbacks {
		return false, t.divergence(r, reason)
	}
	return false, nil
}

// divergence builds the error that ends a diverged run, and sends it as
// a NUMERICAL_INSTABILITY_DETECTED event (CRITICAL).
func (t *Trainer) divergence(r *EpochReport, reason string) error {
	err := &DivergenceError{
		Epoch: r.Epoch + 1, ValLoss: r.ValLoss, Reason: reason, Rollbacks: t.rollbacksInRow,
		Governor: t.governor != nil, Checkpoints: t.o.Checkpoints != nil,
	}
	if t.lastGood > 0 && t.o.Checkpoints != nil {
		err.Checkpoint, err.CheckpointEpoch = t.o.Checkpoints.Path(t.lastGood), t.lastGood
	}
	if t.o.Sink != nil {
		stats := map[string]float64{"rollbacks": float64(err.Rollbacks)}
		if finite(r.ValLoss) {
			stats["val_loss"] = r.ValLoss
		}
		ev := leyline.NewEvent(leyline.EventNumericalInstabilityDetected, &leyline.AnomalyDetectedPayload{
			AnomalyType: "divergence", InnerEpoch: r.Epoch + 1, Detail: err.Error(), Stats: stats,
		})
		ev.Severity, ev.Epoch, ev.Message = leyline.SeverityCritical, leyline.IntPtr(r.Epoch+1), err.Error()
		safeEmit(t.o.Sink, ev)
	}
	return err
}

// checkFinite refuses a checkpoint whose weights, buffers or optimizer
// state hold NaN or ±Inf: a diverged run wrote it (before the trainer
// stopped checkpointing diverged epochs), and training on from it would
// only produce NaN. st's tensors must be host tensors: ResumeFrom brings
// a State on a device over first (stateOnHost).
func checkFinite(st rollback.State) error {
	for _, name := range slices.Sorted(maps.Keys(st.Tensors)) {
		x := st.Tensors[name]
		if !strings.HasPrefix(name, rollback.PrefixModel) && !strings.HasPrefix(name, rollback.PrefixSlots) && !strings.HasPrefix(name, rollback.PrefixOptim) {
			continue
		}
		bad, at := 0.0, -1
		switch x.DType() {
		case tensor.F32:
			for i, v := range x.Contiguous().F32() {
				if f := float64(v); !finite(f) {
					bad, at = f, i
					break
				}
			}
		case tensor.F64:
			for i, v := range x.Contiguous().F64() {
				if !finite(v) {
					bad, at = v, i
					break
				}
			}
		}
		if at >= 0 {
			return fmt.Errorf("checkpoint tensor %s holds %v (element %d): the run had diverged when it was written; resume from an earlier checkpoint", name, bad, at)
		}
	}
	return nil
}
