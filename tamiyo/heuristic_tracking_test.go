package tamiyo

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

// rawEpoch is an epoch as a trainer reports it: raw figures only, no
// derived signal. The loss is flat and the accuracy stays put, so a
// tracker sees the host stable and on a plateau from the first epochs.
func rawEpoch(e int, seeds ...leyline.SeedReport) leyline.EpochState {
	s := epochState(e, 0, false, seeds...)
	s.Signals.Metrics = leyline.TrainingMetrics{Epoch: e, GlobalStep: 10 * e, TrainLoss: 1, ValLoss: 1, TrainAccuracy: 50, ValAccuracy: 50}
	return s
}

// TestHeuristicTracksRawSignals: a bare NewHeuristic, given what a
// trainer passes, derives its signals and germinates once the host has
// stabilised and plateaued (it used to wait for a stabilisation nobody
// reported, forever).
func TestHeuristicTracksRawSignals(t *testing.T) {
	h := newHeuristic(t, HeuristicOptions{})
	var d leyline.Decision
	for e := 0; e < 12 && d.Op != leyline.OpGerminate; e++ {
		var err error
		d, err = h.EvaluateEpoch(context.Background(), rawEpoch(e))
		require.NoError(t, err)
		if d.Op == leyline.OpGerminate {
			require.GreaterOrEqual(t, e, 5, "no germination before epoch 5")
		}
	}
	require.Equal(t, leyline.OpGerminate, d.Op, d.String())
	require.Equal(t, "r0c0", d.SlotID)

	// Reset forgets the tracked epochs too: the host is not stable yet.
	h.Reset()
	d, err := h.EvaluateEpoch(context.Background(), rawEpoch(20))
	require.NoError(t, err)
	require.Equal(t, leyline.OpWait, d.Op, d.String())
}

// TestHeuristicStateCarriesTracker: a self-tracking heuristic's state
// holds its tracker, so a restored one decides as the original would; a
// state with or without a tracker is refused by a heuristic of the other
// kind.
func TestHeuristicStateCarriesTracker(t *testing.T) {
	h := newHeuristic(t, HeuristicOptions{})
	for e := range 4 {
		_, err := h.EvaluateEpoch(context.Background(), rawEpoch(e))
		require.NoError(t, err)
	}
	raw, err := h.MarshalState()
	require.NoError(t, err)
	var j map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &j))
	require.Contains(t, j, "tracker")

	got := newHeuristic(t, HeuristicOptions{})
	require.NoError(t, got.UnmarshalState(raw))
	for e := 4; e < 8; e++ {
		want, err := h.EvaluateEpoch(context.Background(), rawEpoch(e))
		require.NoError(t, err)
		d, err := got.EvaluateEpoch(context.Background(), rawEpoch(e))
		require.NoError(t, err)
		require.Equal(t, want, d, "epoch %d", e)
	}

	wrapped := newHeuristic(t, HeuristicOptions{})
	_, err = NewTracked(wrapped, TrackerOptions{})
	require.NoError(t, err)
	err = wrapped.UnmarshalState(raw)
	require.ErrorIs(t, err, ErrState)
	assert.Contains(t, err.Error(), "derived by a Tracked")
	inner, err := wrapped.MarshalState()
	require.NoError(t, err)
	err = got.UnmarshalState(inner)
	require.ErrorIs(t, err, ErrState)
	assert.Contains(t, err.Error(), `missing field "tracker"`)
}

// TestTrackedTakesOverTracking: in a Tracked the heuristic decides from
// the Tracked's signals (its TrackerOptions apply) and its state has no
// tracker of its own.
func TestTrackedTakesOverTracking(t *testing.T) {
	h := newHeuristic(t, HeuristicOptions{})
	c, err := NewTracked(h, TrackerOptions{PlateauThresholdPct: -1}) // no epoch ever counts towards a plateau
	require.NoError(t, err)
	for e := range 12 {
		d, err := c.EvaluateEpoch(context.Background(), rawEpoch(e))
		require.NoError(t, err)
		require.Equal(t, leyline.OpWait, d.Op, "epoch %d: %v", e, d)
	}
	raw, err := h.MarshalState()
	require.NoError(t, err)
	assert.NotContains(t, string(raw), `"tracker"`)
}
