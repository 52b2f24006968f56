package tolaria

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tolaria/rollback"
)

// TestEpochNumbersStartAtOne: what people see numbers epochs from 1 —
// the checkpoint after the second epoch is ckpt-epoch-2 (its WAL and
// metadata say 2), the epoch events say "epoch":2 and "inner_epoch":2 —
// while RunEpoch's index and EpochReport.Epoch stay 0-based. A checkpoint
// written before (which numbered epochs from 0) still resumes at the
// right epoch.
func TestEpochNumbersStartAtOne(t *testing.T) {
	dir := t.TempDir()
	rec := &recorder{}
	o := crashOptions(t, dir)
	o.Epochs, o.Sink = 2, rec
	tr, err := NewTrainer(o)
	require.NoError(t, err)
	sum, err := tr.Fit(context.Background())
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, []int{sum.Epochs[0].Epoch, sum.Epochs[1].Epoch}, "reports keep the index")

	files, err := filepath.Glob(filepath.Join(dir, "ckpt-epoch-*.safetensors"))
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, "ckpt-epoch-1.safetensors"), filepath.Join(dir, "ckpt-epoch-2.safetensors")}, files)
	st, e, err := o.Checkpoints.Latest()
	require.NoError(t, err)
	require.Equal(t, 2, e)
	require.Equal(t, 2, st.Meta.Epoch)
	n, err := EpochsDone(st)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	var done, metrics []int
	for _, ev := range rec.all() {
		switch {
		case ev.Type == leyline.EventEpochCompleted:
			done = append(done, *ev.Epoch)
			require.Equal(t, *ev.Epoch, ev.Data.(*leyline.EpochCompletedPayload).InnerEpoch)
		case ev.Type == leyline.EventMetrics && ev.Message == "" && ev.Epoch != nil:
			metrics = append(metrics, *ev.Epoch)
		}
	}
	require.Equal(t, []int{1, 2}, done)
	require.Equal(t, []int{1, 2}, metrics)

	next, err := mustTrainer(t, crashOptions(t, dir)).Resume()
	require.NoError(t, err)
	require.Equal(t, 2, next, "two epochs done: the next index is 2")

	// The same state as an older esper wrote it: Meta.Epoch and the file
	// name hold the index (1), and the trainer state has no OneBased.
	old := t.TempDir()
	var tm map[string]any
	require.NoError(t, json.Unmarshal(st.Meta.Extra["trainer"], &tm))
	delete(tm, "OneBased")
	raw, err := json.Marshal(tm)
	require.NoError(t, err)
	st.Meta.Extra["trainer"], st.Meta.Epoch = raw, 1
	store, err := rollback.Open(old, rollback.StoreOptions{})
	require.NoError(t, err)
	require.NoError(t, store.Write(1, st))
	next, err = mustTrainer(t, crashOptions(t, old)).Resume()
	require.NoError(t, err)
	require.Equal(t, 2, next, "an older ckpt-epoch-1 is the state after the second epoch")
}

func mustTrainer(t *testing.T, o TrainerOptions) *Trainer {
	t.Helper()
	tr, err := NewTrainer(o)
	require.NoError(t, err)
	return tr
}

// TestResumedSummaryCoversTheRun: a checkpoint keeps the epoch reports, so
// that a trainer resumed from it — even after the run's last epoch, with
// nothing left to run — reports the whole run: the same epochs, figures,
// decisions and seeds as the trainer that wrote it, and the same counters.
func TestResumedSummaryCoversTheRun(t *testing.T) {
	dir := t.TempDir()
	o := crashOptions(t, dir)
	o.Epochs = 3
	tr := mustTrainer(t, o)
	want, err := tr.Fit(context.Background())
	require.NoError(t, err)
	require.Len(t, want.Epochs, 3)
	require.NotEmpty(t, want.Final().Seeds, "the scripted controller germinates")

	o = crashOptions(t, dir)
	o.Epochs = 3
	resumed := mustTrainer(t, o)
	next, err := resumed.Resume()
	require.NoError(t, err)
	require.Equal(t, 3, next, "nothing left to run")
	got, err := resumed.Fit(context.Background())
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, want.Final().ValAccuracy, got.Final().ValAccuracy)

	// With History set, the latest History reports come back.
	o = crashOptions(t, dir)
	o.Epochs, o.History = 3, 2
	short := mustTrainer(t, o)
	_, err = short.Resume()
	require.NoError(t, err)
	require.Equal(t, want.Epochs[1:], short.Summary().Epochs)
}

// TestEpochRecordRoundTrip: a report's non-finite figures (a diverged
// loss) survive the checkpoint's JSON.
func TestEpochRecordRoundTrip(t *testing.T) {
	c := math.Inf(-1)
	r := EpochReport{
		Epoch: 4, TrainLoss: math.NaN(), ValLoss: math.Inf(1), ValAccuracy: 12.5, Duration: 3 * time.Millisecond,
		Decision: leyline.Decision{Op: leyline.OpGerminate, SlotID: "r0c1", Reason: "plateau", Confidence: math.NaN()},
		Seeds:    []leyline.SeedReport{{SeedID: "s", SlotID: "r0c1", Stage: leyline.StageBlending, Alpha: 0.5, Counterfactual: &c}},
		Failed:   true, FailureReason: FailureEpochBudget, RestoredFrom: 2,
	}
	b, err := json.Marshal(newEpochRecord(r))
	require.NoError(t, err)
	require.Contains(t, string(b), `"Epoch":5`, "stored with the epoch's number")
	var back epochRecord
	require.NoError(t, json.Unmarshal(b, &back))
	got := back.report()
	require.True(t, math.IsNaN(got.TrainLoss) && math.IsInf(got.ValLoss, 1) && math.IsNaN(got.Decision.Confidence))
	require.True(t, math.IsInf(*got.Seeds[0].Counterfactual, -1))
	got.TrainLoss, got.Decision.Confidence, r.TrainLoss, r.Decision.Confidence = 0, 0, 0, 0
	require.Equal(t, r, got)
}

// TestBeforeCheckpointExtendsTheCheckpoint: BeforeCheckpoint runs after
// the epoch's events and before its checkpoint, whose Meta.Extra carries
// what it returns; the trainer's own keys are refused.
func TestBeforeCheckpointExtendsTheCheckpoint(t *testing.T) {
	dir := t.TempDir()
	rec := &recorder{}
	o := crashOptions(t, dir)
	o.Epochs, o.Sink = 2, rec
	var seen []int
	o.BeforeCheckpoint = func(e int) (map[string]json.RawMessage, error) {
		require.Equal(t, e+1, rec.count(leyline.EventEpochCompleted), "the epoch's events come first")
		seen = append(seen, e)
		return map[string]json.RawMessage{"app": json.RawMessage(fmt.Sprintf(`{"epoch":%d}`, e+1))}, nil
	}
	_, err := mustTrainer(t, o).Fit(context.Background())
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, seen)
	st, _, err := o.Checkpoints.Latest()
	require.NoError(t, err)
	require.JSONEq(t, `{"epoch":2}`, string(st.Meta.Extra["app"]))

	o = crashOptions(t, t.TempDir())
	o.BeforeCheckpoint = func(int) (map[string]json.RawMessage, error) {
		return map[string]json.RawMessage{"trainer": json.RawMessage(`{}`)}, nil
	}
	_, err = mustTrainer(t, o).RunEpoch(context.Background(), 0)
	require.ErrorContains(t, err, "reserved key")
	o.BeforeCheckpoint = func(int) (map[string]json.RawMessage, error) { return nil, errors.New("disk full") }
	_, err = mustTrainer(t, o).RunEpoch(context.Background(), 0)
	require.ErrorContains(t, err, "disk full")
}
