package tamiyo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

// TestTrackedDerivesSignals: raw epoch figures in, a germination out once
// the tracker has seen the host stabilise and plateau, as the heuristic
// alone would decide from hand-made signals.
func TestTrackedDerivesSignals(t *testing.T) {
	h, err := NewHeuristic(HeuristicOptions{})
	require.NoError(t, err)
	c, err := NewTracked(h, TrackerOptions{})
	require.NoError(t, err)
	slots := leyline.DefaultSlotConfig()
	var d leyline.Decision
	for e := 0; e < 12; e++ {
		// The loss flattens at once and accuracy stays put: stable and on
		// a plateau from the first epochs.
		s := leyline.EpochState{
			Signals: leyline.TrainingSignals{
				Metrics:        leyline.TrainingMetrics{Epoch: e, TrainLoss: 1.0, ValLoss: 1.0, ValAccuracy: 50, TrainAccuracy: 50},
				AvailableSlots: 3,
			},
			Slots: slots, Topology: leyline.TopologyCNN,
		}
		d, err = c.EvaluateEpoch(context.Background(), s)
		require.NoError(t, err)
		if d.Op == leyline.OpGerminate {
			require.GreaterOrEqual(t, e, 5, "no germination before epoch 5")
			require.Equal(t, "r0c0", d.SlotID)
			break
		}
	}
	require.Equal(t, leyline.OpGerminate, d.Op, "the tracker's plateau and stabilisation reached the heuristic")
	require.True(t, c.Tracker().IsStabilized())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.EvaluateEpoch(ctx, leyline.EpochState{Slots: slots, Topology: leyline.TopologyCNN})
	require.ErrorIs(t, err, context.Canceled)
	_, err = NewTracked(nil, TrackerOptions{})
	require.Error(t, err)
}

// drainable is a controller with a Drain method, for TestTrackedForwardsDrain.
type drainable struct {
	Controller
	drained int
}

func (d *drainable) Drain() { d.drained++ }

// TestTrackedForwardsDrain: Tracked passes Drain to the controller it
// wraps (the trainer drains Tracked, not the Service inside it), and does
// nothing for one without Drain.
func TestTrackedForwardsDrain(t *testing.T) {
	h, err := NewHeuristic(HeuristicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inner := &drainable{Controller: h}
	tr, err := NewTracked(inner, TrackerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr.Drain()
	tr.Drain()
	if inner.drained != 2 {
		t.Fatalf("drained %d times, want 2", inner.drained)
	}
	plain, err := NewTracked(h, TrackerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plain.Drain()
}
