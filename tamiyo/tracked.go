package tamiyo

import (
	"context"
	"fmt"
	"sync"

	"github.com/esper-go/esper/leyline"
)

// Tracked is a Controller that keeps its own SignalTracker: the trainer
// passes each epoch's raw figures (s.Signals.Metrics: epoch, global step,
// losses and accuracies) and the seeds, and Tracked derives the signals
// the inner controller needs (deltas, plateau, stabilisation, histories,
// summary seed) before asking it. This is how tolaria.Trainer, which
// knows nothing of Tamiyo's tracker, drives a Service (a Heuristic
// tracks its own signals, unless wrapped in a Tracked for other
// TrackerOptions).
//
// The tracker observes every epoch it is asked about, whatever happens to
// the decision: a late decision the trainer discards still leaves the
// epoch in the history, as the epoch did happen.
type Tracked struct {
	mu      sync.Mutex
	tracker *SignalTracker
	inner   Controller
}

// NewTracked wraps inner with a tracker built from o. A *Heuristic
// inner stops tracking its own signals: the Tracked's tracker derives
// them instead (with o), and the heuristic's state no longer carries a
// tracker.
func NewTracked(inner Controller, o TrackerOptions) (*Tracked, error) {
	if inner == nil {
		return nil, fmt.Errorf("tamiyo: NewTracked: nil controller")
	}
	t, err := NewSignalTracker(o)
	if err != nil {
		return nil, err
	}
	if h, ok := inner.(*Heuristic); ok {
		h.leaveTracking()
	}
	return &Tracked{tracker: t, inner: inner}, nil
}

// Tracker returns the wrapped tracker (for inspection; not safe to use
// concurrently with EvaluateEpoch).
func (c *Tracked) Tracker() *SignalTracker { return c.tracker }

// EvaluateEpoch updates the tracker from s.Signals.Metrics, s.Seeds and
// s.Signals.AvailableSlots, replaces s.Signals with the derived signals
// and asks the inner controller.
func (c *Tracked) EvaluateEpoch(ctx context.Context, s leyline.EpochState) (leyline.Decision, error) {
	if err := ctx.Err(); err != nil {
		return leyline.Decision{}, fmt.Errorf("tamiyo: EvaluateEpoch: %w", err)
	}
	m := s.Signals.Metrics
	c.mu.Lock()
	sig, err := c.tracker.Update(EpochResult{
		Epoch: m.Epoch, GlobalStep: m.GlobalStep,
		TrainLoss: m.TrainLoss, TrainAccuracy: m.TrainAccuracy,
		ValLoss: m.ValLoss, ValAccuracy: m.ValAccuracy,
		Seeds: s.Seeds, AvailableSlots: s.Signals.AvailableSlots,
	})
	c.mu.Unlock()
	if err != nil {
		return leyline.Decision{}, fmt.Errorf("tamiyo: EvaluateEpoch: %w", err)
	}
	s.Signals = sig
	return c.inner.EvaluateEpoch(ctx, s)
}

// Drain waits for work the wrapped controller abandoned at a missed
// deadline (tolaria.Drainer), when it has any to wait for.
func (t *Tracked) Drain() {
	if d, ok := t.inner.(interface{ Drain() }); ok {
		d.Drain()
	}
}
