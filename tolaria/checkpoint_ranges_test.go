package tolaria

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tolaria/rollback"
)

// trainedCheckpoint runs one epoch with checkpoints in dir and returns
// the checkpoint it wrote.
func trainedCheckpoint(t *testing.T, dir string) rollback.State {
	t.Helper()
	o := crashOptions(t, dir)
	o.Epochs = 1
	_, err := mustTrainer(t, o).Fit(context.Background())
	require.NoError(t, err)
	st, _, err := o.Checkpoints.Latest()
	require.NoError(t, err)
	return st
}

// withTrainer returns a copy of st whose trainer document was edited by
// edit (on its generic JSON form).
func withTrainer(t *testing.T, st rollback.State, edit func(tm map[string]any)) rollback.State {
	t.Helper()
	var tm map[string]any
	require.NoError(t, json.Unmarshal(st.Meta.Extra["trainer"], &tm))
	edit(tm)
	raw, err := json.Marshal(tm)
	require.NoError(t, err)
	out := st
	out.Meta.Extra = map[string]json.RawMessage{}
	for k, v := range st.Meta.Extra {
		out.Meta.Extra[k] = v
	}
	out.Meta.Extra["trainer"] = raw
	return out
}

// TestCheckpointEpochOverflowIsRefused (issue 20, point 5): a checkpoint
// of epoch 2^63−1 with valid checksums used to resume "from the
// checkpoint of epoch -9223372036854775808" (an older-format checkpoint,
// whose epoch+1 overflows) or after 2^63−1 epochs. Both are refused,
// naming the field, by EpochsDone, Resume and ResumeFrom.
func TestCheckpointEpochOverflowIsRefused(t *testing.T) {
	st := trainedCheckpoint(t, t.TempDir())
	for name, s := range map[string]rollback.State{
		"numbered from 1":                st,
		"numbered from 0 (older format)": withTrainer(t, st, func(tm map[string]any) { delete(tm, "OneBased") }),
	} {
		t.Run(name, func(t *testing.T) {
			s.Meta.Epoch = math.MaxInt
			dir := t.TempDir()
			store, err := rollback.Open(dir, rollback.StoreOptions{})
			require.NoError(t, err)
			require.NoError(t, store.Write(math.MaxInt, s), "checksums and all, as a writer could sign it")

			_, err = EpochsDone(s)
			require.ErrorContains(t, err, "checkpoint field epoch = 9223372036854775807 is out of range")
			o := crashOptions(t, dir)
			tr := mustTrainer(t, o)
			_, err = tr.Resume()
			require.ErrorContains(t, err, "checkpoint field epoch = 9223372036854775807")
			require.ErrorContains(t, err, "ckpt-epoch-9223372036854775807.safetensors")
			_, err = tr.ResumeFrom(s)
			require.ErrorContains(t, err, "checkpoint field epoch")
			require.Zero(t, tr.StartEpoch(), "nothing was loaded")
		})
	}
}

// TestCheckpointFieldRanges (issue 20, point 5): every number of the
// trainer's state in a checkpoint is checked before it is used, and the
// refusal names the field.
func TestCheckpointFieldRanges(t *testing.T) {
	st := trainedCheckpoint(t, t.TempDir())
	history := func(field string, v any) func(map[string]any) {
		return func(tm map[string]any) { tm["History"].([]any)[0].(map[string]any)[field] = v }
	}
	for _, c := range []struct {
		name  string
		edit  func(map[string]any)
		meta  func(*rollback.Meta)
		field string
	}{
		{name: "epoch 0", meta: func(m *rollback.Meta) { m.Epoch = 0 }, field: "checkpoint field epoch = 0"},
		{name: "epoch beyond MaxEpochs", meta: func(m *rollback.Meta) { m.Epoch = MaxEpochs + 1 }, field: "checkpoint field epoch = 2147483648"},
		{name: "negative global step", meta: func(m *rollback.Meta) { m.GlobalStep = -1 }, field: "checkpoint field global_step = -1"},
		{name: "global step beyond 2^53", meta: func(m *rollback.Meta) { m.GlobalStep = math.MaxInt64 }, field: "checkpoint field global_step"},
		{name: "negative germinated", edit: func(tm map[string]any) { tm["Germinated"] = -1 }, field: "trainer.Germinated = -1"},
		{name: "negative failed epochs", edit: func(tm map[string]any) { tm["EpochsFailed"] = -7 }, field: "trainer.EpochsFailed = -7"},
		{name: "huge capture fallbacks", edit: func(tm map[string]any) { tm["CaptureFallbacks"] = math.MaxInt64 }, field: "trainer.CaptureFallbacks"},
		{name: "history epoch 0", edit: history("Epoch", 0), field: "trainer.History[0].Epoch = 0"},
		{name: "history negative steps", edit: history("Steps", -3), field: "trainer.History[0].Steps = -3"},
		{name: "history negative duration", edit: history("Duration", -1), field: "trainer.History[0].Duration"},
		{name: "history accuracy above 100", edit: history("ValAccuracy", 250), field: "trainer.History[0].ValAccuracy = 250"},
		{name: "history negative loss", edit: history("TrainLoss", -2), field: "trainer.History[0].TrainLoss = -2"},
		{name: "history restored from the future", edit: history("RestoredFrom", 5), field: "trainer.History[0].RestoredFrom = 5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := st
			if c.edit != nil {
				s = withTrainer(t, st, c.edit)
			}
			if c.meta != nil {
				c.meta(&s.Meta)
			}
			_, err := EpochsDone(s)
			require.ErrorContains(t, err, c.field)
			tr := mustTrainer(t, crashOptions(t, t.TempDir()))
			_, err = tr.ResumeFrom(s)
			require.ErrorContains(t, err, c.field)
			require.ErrorContains(t, tr.LoadState(s), c.field)
		})
	}
	// The unedited checkpoint passes.
	n, err := EpochsDone(st)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// TestResumeRefusesAMislabelledCheckpoint: a checkpoint whose metadata
// holds another epoch than its name and WAL record is refused by Resume.
func TestResumeRefusesAMislabelledCheckpoint(t *testing.T) {
	st := trainedCheckpoint(t, t.TempDir())
	dir := t.TempDir()
	store, err := rollback.Open(dir, rollback.StoreOptions{})
	require.NoError(t, err)
	st.Meta.Epoch = 1000
	require.NoError(t, store.Write(3, st))
	_, err = mustTrainer(t, crashOptions(t, dir)).Resume()
	require.ErrorContains(t, err, "ckpt-epoch-3.safetensors: checkpoint field epoch = 1000, but the checkpoint is of epoch 3")
}
