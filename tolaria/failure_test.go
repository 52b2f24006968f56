package tolaria

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tolaria/rollback"
)

// lastEpochMetrics returns the current value of every metric the
// trainer's epoch METRICS events (those without a message) have sent, by
// name.
func lastEpochMetrics(t *testing.T, rec *recorder) map[string]float64 {
	t.Helper()
	// Figures that did not change are not resent: fold every epoch
	// METRICS event in order, the latest value winning, as a backend
	// keeping the last value (Prometheus) sees them.
	var out map[string]float64
	for _, e := range rec.all() {
		if p, ok := e.Data.(*leyline.MetricsPayload); ok && e.Type == leyline.EventMetrics && e.Message == "" && p.Source == "tolaria" {
			if out == nil {
				out = map[string]float64{}
			}
			for _, m := range p.Metrics {
				out[m.Name] = m.Value
			}
		}
	}
	if out == nil {
		t.Fatal("no epoch METRICS event")
	}
	return out
}

// requireSameState checks that now is bit-for-bit the state want:
// tensors (host, seeds, optimizers), step counter and slot documents.
func requireSameState(t *testing.T, want, now rollback.State) {
	t.Helper()
	sameBits(t, want.Tensors, now.Tensors)
	require.Equal(t, want.Meta.GlobalStep, now.Meta.GlobalStep)
	require.Equal(t, len(want.Meta.Slots), len(now.Meta.Slots))
	for id, doc := range want.Meta.Slots {
		require.JSONEq(t, string(doc), string(now.Meta.Slots[id]), "slot %s", id)
	}
}

func failureOptions(t *testing.T, rec *recorder) TrainerOptions {
	return TrainerOptions{
		Model: trainerModel(t), Train: toyData(t, 1, 3, 8), Val: toyData(t, 2, 1, 8), Epochs: 8,
		Controller: script, Sink: rec,
	}
}

// TestEpochBudgetRollsBackFromFastTier: with a 1 ns budget an epoch
// fails with "epoch_budget", counts tolaria.epochs.failed, enters
// conservative mode and restores the previous successful epoch's state
// bit-exactly from the fast tier (a hit); only successful epochs are
// snapshotted, and a successful epoch leaves conservative mode.
func TestEpochBudgetRollsBackFromFastTier(t *testing.T) {
	rec := &recorder{}
	o := failureOptions(t, rec)
	o.FastRollbackMB, o.RollbackOnFailure = 4, true
	tr, err := NewTrainer(o)
	require.NoError(t, err)
	ctx := context.Background()

	r0, err := tr.RunEpoch(ctx, 0)
	require.NoError(t, err)
	require.False(t, r0.Failed)
	require.Equal(t, -1, r0.RestoredFrom)
	st0, err := tr.State(0)
	require.NoError(t, err)
	require.NotEmpty(t, st0.Sub(optimSlotPrefix), "the scripted seed germinated at epoch 0 has an optimizer")
	require.Equal(t, []int64{0}, tr.Rollback().Fast.Steps())

	tr.o.EpochBudget = time.Nanosecond
	r1, err := tr.RunEpoch(ctx, 1)
	require.NoError(t, err)
	require.True(t, r1.Failed)
	require.Equal(t, FailureEpochBudget, r1.FailureReason)
	require.Equal(t, 0, r1.RestoredFrom)
	require.True(t, r1.RestoredFast)
	require.True(t, tr.Deadlines().Conservative())
	now, err := tr.State(1)
	require.NoError(t, err)
	requireSameState(t, st0, now)
	s, _ := tr.model.Slot("r0c1")
	require.Equal(t, leyline.StageGerminated, s.Stage(), "epoch 1's ADVANCE was rolled back")
	require.Len(t, rec.named(EventEpochBudgetExceeded), 1)

	m := lastEpochMetrics(t, rec)
	require.Equal(t, 1.0, m[leyline.MetricTolariaEpochsFailed])
	require.Equal(t, 2.0, m[leyline.MetricTolariaEpochsTotal])
	require.Equal(t, r1.ValLoss, m[leyline.MetricTolariaValidationLoss])
	require.Equal(t, r1.ValAccuracy, m[leyline.MetricTolariaValidationAccuracy])
	require.Equal(t, 1.0, m[leyline.MetricTolariaRollbackFastHitsTotal])
	require.Equal(t, 0.0, m[leyline.MetricTolariaRollbackFastMissesTotal])
	require.Equal(t, 1.0, m[leyline.MetricTolariaRollbackSnapshotsTotal], "the failed epoch is not snapshotted")
	require.Equal(t, 0.0, m[leyline.MetricTolariaRollbackFailuresTotal])
	require.Greater(t, m[leyline.MetricTolariaRollbackFastSizeBytes], 0.0)
	require.Equal(t, float64(BreakerClosed), m[leyline.MetricTolariaBreakerState])
	require.Equal(t, 1.0, m[leyline.MetricTolariaModeConservative])

	// Still over budget: conservative mode skips the controller, and the
	// nearest snapshot ≤ epoch 1 is still epoch 0's.
	r2, err := tr.RunEpoch(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, FailureEpochBudget, r2.FailureReason)
	require.Equal(t, OutcomeSkipped, r2.Outcome)
	require.Equal(t, 0, r2.RestoredFrom)
	now, err = tr.State(2)
	require.NoError(t, err)
	requireSameState(t, st0, now)
	require.Equal(t, 2.0, lastEpochMetrics(t, rec)[leyline.MetricTolariaRollbackFastHitsTotal])

	// Back within budget: the epoch succeeds, conservative mode ends and
	// the breaker's failure count is cleared.
	tr.o.EpochBudget = 0
	r3, err := tr.RunEpoch(ctx, 3)
	require.NoError(t, err)
	require.False(t, r3.Failed)
	require.Empty(t, r3.FailureReason)
	require.Equal(t, -1, r3.RestoredFrom)
	require.False(t, tr.Deadlines().Conservative())
	require.Zero(t, tr.Breaker().Failures())
	require.Equal(t, 2, tr.EpochsFailed())
	require.ElementsMatch(t, []int64{0, 3}, tr.Rollback().Fast.Steps())
	require.Equal(t, 2.0, lastEpochMetrics(t, rec)[leyline.MetricTolariaEpochsFailed])
}

// TestEpochBudgetRollsBackFromCheckpoint: without a fast tier, the
// latest checkpoint restores the previous epoch's state bit-exactly, and
// the failed epoch's checkpoint holds the restored state (the state the
// next epoch starts from).
func TestEpochBudgetRollsBackFromCheckpoint(t *testing.T) {
	rec := &recorder{}
	o := failureOptions(t, rec)
	store, err := rollback.Open(t.TempDir(), rollback.StoreOptions{})
	require.NoError(t, err)
	o.Checkpoints, o.RollbackOnFailure = store, true
	tr, err := NewTrainer(o)
	require.NoError(t, err)
	require.Nil(t, tr.Rollback().Fast)
	ctx := context.Background()

	_, err = tr.RunEpoch(ctx, 0)
	require.NoError(t, err)
	st0, err := tr.State(0)
	require.NoError(t, err)

	tr.o.EpochBudget = time.Nanosecond
	r1, err := tr.RunEpoch(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, FailureEpochBudget, r1.FailureReason)
	require.Equal(t, 0, r1.RestoredFrom)
	require.False(t, r1.RestoredFast)
	now, err := tr.State(1)
	require.NoError(t, err)
	requireSameState(t, st0, now)

	m := lastEpochMetrics(t, rec)
	require.Equal(t, 1.0, m[leyline.MetricTolariaEpochsFailed])
	require.Zero(t, m[leyline.MetricTolariaRollbackFastHitsTotal])
	require.Zero(t, m[leyline.MetricTolariaRollbackFailuresTotal])
	require.Zero(t, m[leyline.MetricTolariaRollbackDeadlineExceededTotal])

	ck, e, err := store.Latest()
	require.NoError(t, err)
	require.Equal(t, 2, e, "the second epoch's checkpoint (ckpt-epoch-2)")
	requireSameState(t, st0, ck)
}

// TestBreakerOpensAfterThreeFailedEpochs: three failed epochs open the
// breaker, the next epochs fail with "breaker_open" (without extending
// its window), and once the window has passed a successful epoch closes
// it again. Nothing is restored: no snapshot precedes the failures.
func TestBreakerOpensAfterThreeFailedEpochs(t *testing.T) {
	rec := &recorder{}
	o := failureOptions(t, rec)
	now := time.Unix(1000, 0)
	o.Breaker = BreakerOptions{Now: func() time.Time { return now }}
	o.EpochBudget, o.FastRollbackMB, o.RollbackOnFailure = time.Nanosecond, 1, true
	tr, err := NewTrainer(o)
	require.NoError(t, err)
	require.Equal(t, 1, tr.Breaker().Options().SuccessThreshold, "the trainer's breaker closes after one success")
	ctx := context.Background()

	for e := 0; e < 3; e++ {
		r, err := tr.RunEpoch(ctx, e)
		require.NoError(t, err)
		require.Equal(t, FailureEpochBudget, r.FailureReason, "epoch %d", e)
		require.Equal(t, -1, r.RestoredFrom, "epoch %d: no successful epoch to restore", e)
	}
	require.Equal(t, BreakerOpen, tr.Breaker().State())
	require.Len(t, rec.named(EventBreakerOpened), 1)

	for e := 3; e < 5; e++ {
		r, err := tr.RunEpoch(ctx, e)
		require.NoError(t, err)
		require.True(t, r.Failed)
		require.Equal(t, FailureBreakerOpen, r.FailureReason, "epoch %d: the open breaker comes first", e)
		require.Equal(t, OutcomeSkipped, r.Outcome, "an open breaker runs the epoch conservatively")
	}
	m := lastEpochMetrics(t, rec)
	require.Equal(t, 5.0, m[leyline.MetricTolariaEpochsFailed])
	require.Equal(t, float64(BreakerOpen), m[leyline.MetricTolariaBreakerState])
	require.Equal(t, 4.0, m[leyline.MetricTolariaRollbackFastMissesTotal], "epochs 1-4 looked for a snapshot")
	require.Zero(t, m[leyline.MetricTolariaRollbackFastHitsTotal])
	require.Empty(t, rec.named(rollback.EventRestoreFailed), "finding nothing is not a failed restore")

	// The window counts from the third real failure: breaker_open
	// epochs do not extend it.
	now = now.Add(DefaultBreakerTimeout)
	tr.o.EpochBudget = 0
	r, err := tr.RunEpoch(ctx, 5)
	require.NoError(t, err)
	require.False(t, r.Failed)
	require.Equal(t, BreakerClosed, tr.Breaker().State())
	require.False(t, tr.Deadlines().Conservative())
	require.Equal(t, float64(BreakerClosed), lastEpochMetrics(t, rec)[leyline.MetricTolariaBreakerState])
}

// TestEpochSuccessResetsBreakerCount: a successful epoch clears the
// failures counted so far, so two failures, a success and two more
// failures leave the breaker CLOSED.
func TestEpochSuccessResetsBreakerCount(t *testing.T) {
	o := failureOptions(t, nil)
	o.Sink = nil
	tr, err := NewTrainer(o)
	require.NoError(t, err)
	ctx := context.Background()
	run := func(e int, budget time.Duration) EpochReport {
		tr.o.EpochBudget = budget
		r, err := tr.RunEpoch(ctx, e)
		require.NoError(t, err)
		return r
	}
	require.True(t, run(0, time.Nanosecond).Failed)
	require.True(t, run(1, time.Nanosecond).Failed)
	require.Equal(t, 2, tr.Breaker().Failures())
	require.False(t, run(2, 0).Failed)
	require.Zero(t, tr.Breaker().Failures())
	require.True(t, run(3, time.Nanosecond).Failed)
	require.True(t, run(4, time.Nanosecond).Failed)
	require.Equal(t, BreakerClosed, tr.Breaker().State())
	require.Equal(t, 4, tr.EpochsFailed())
	for _, r := range tr.Summary().Epochs {
		require.Equal(t, -1, r.RestoredFrom, "no rollback without RollbackOnFailure")
	}
}

// TestEpochsFailedSurvivesResume: tolaria.epochs.failed is part of the
// checkpoint, so a resumed run keeps counting.
func TestEpochsFailedSurvivesResume(t *testing.T) {
	dir := t.TempDir()
	open := func() TrainerOptions {
		store, err := rollback.Open(dir, rollback.StoreOptions{})
		require.NoError(t, err)
		o := failureOptions(t, nil)
		o.Sink, o.Checkpoints, o.EpochBudget = nil, store, time.Nanosecond
		return o
	}
	tr, err := NewTrainer(open())
	require.NoError(t, err)
	_, err = tr.RunEpoch(context.Background(), 0)
	require.NoError(t, err)
	require.Equal(t, 1, tr.EpochsFailed())
	again, err := NewTrainer(open())
	require.NoError(t, err)
	_, err = again.Resume()
	require.NoError(t, err)
	require.Equal(t, 1, again.EpochsFailed())
	require.True(t, again.Deadlines().Conservative(), "the failed epoch left conservative mode on")
}

func TestFailureOptionsRejected(t *testing.T) {
	for _, mod := range []func(*TrainerOptions){
		func(o *TrainerOptions) { o.EpochBudget = -1 },
		func(o *TrainerOptions) { o.FastRollbackMB = -1 },
		func(o *TrainerOptions) { o.RollbackDeadline = -1 },
		func(o *TrainerOptions) { o.Breaker.FailureThreshold = -1 },
	} {
		o := failureOptions(t, nil)
		mod(&o)
		_, err := NewTrainer(o)
		require.ErrorIs(t, err, ErrOptions)
	}
	tr, err := NewTrainer(failureOptions(t, nil))
	require.NoError(t, err)
	require.Equal(t, rollback.DefaultDeadline, tr.Rollback().Deadline)
	require.Equal(t, DefaultBreakerFailureThreshold, tr.Breaker().Options().FailureThreshold)
}

// TestRolledBackRunMatchesSkippedEpoch: with captured steps, a run whose
// epoch 1 fails and is rolled back, then trains epoch 2, ends bitwise
// where a run that skips epoch 1 ends: the restore invalidates nothing
// the captured graph relies on.
func TestRolledBackRunMatchesSkippedEpoch(t *testing.T) {
	run := func(fail bool) map[string][]float32 {
		m := trainerModel(t)
		germinate(t, m, "r0c1")
		tr, err := NewTrainer(TrainerOptions{
			Model: m, Train: toyData(t, 1, 3, 8), Val: toyData(t, 2, 1, 8), Epochs: 3,
			Capture: true, FastRollbackMB: 4, RollbackOnFailure: true,
		})
		require.NoError(t, err)
		ctx := context.Background()
		_, err = tr.RunEpoch(ctx, 0)
		require.NoError(t, err)
		if fail {
			tr.o.EpochBudget = time.Nanosecond
			r, err := tr.RunEpoch(ctx, 1)
			require.NoError(t, err)
			require.Equal(t, 0, r.RestoredFrom)
			tr.o.EpochBudget = 0
		}
		r, err := tr.RunEpoch(ctx, 2)
		require.NoError(t, err)
		require.True(t, r.Captured)
		require.Zero(t, tr.Summary().CaptureFallbacks)
		return params(t, m)
	}
	want, got := run(false), run(true)
	require.Equal(t, len(want), len(got))
	for name, v := range want {
		require.Equal(t, v, got[name], "parameter %s", name)
	}
}
