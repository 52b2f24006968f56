package tolaria

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

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
