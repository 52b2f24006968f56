package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tolaria/rollback"
)

// rewriteCheckpoint loads the latest checkpoint of dir/ck, lets edit
// change it and its esper train record, and writes it back as epoch (or
// its own epoch when epoch is 0), checksums and WAL included: what a
// damaged writer or a hand could produce.
func rewriteCheckpoint(t *testing.T, dir string, epoch int, edit func(st *rollback.State, rec map[string]any)) {
	t.Helper()
	store, err := rollback.Open(filepath.Join(dir, "ck"), rollback.StoreOptions{})
	require.NoError(t, err)
	st, e, err := store.Latest()
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(st.Meta.Extra[runKey], &rec))
	edit(&st, rec)
	raw, err := json.Marshal(rec)
	require.NoError(t, err)
	st.Meta.Extra[runKey] = raw
	if epoch == 0 {
		epoch = e
	}
	require.NoError(t, store.Write(epoch, st))
}

// TestTrainResumeRefusesOutOfRangeCheckpoints (issue 20, point 5): a
// checkpoint whose checksums verify but whose numbers no run writes —
// the epoch 2^63−1, a negative events length, another record version,
// a flag value the command line would refuse — stops --resume with one
// line naming the field, before anything is trained.
func TestTrainResumeRefusesOutOfRangeCheckpoints(t *testing.T) {
	for _, c := range []struct {
		name  string
		epoch int
		edit  func(st *rollback.State, rec map[string]any)
		want  string
	}{
		{"epoch 2^63-1", math.MaxInt, func(st *rollback.State, _ map[string]any) { st.Meta.Epoch = math.MaxInt },
			"checkpoint field epoch = 9223372036854775807 is out of range"},
		{"metadata and name disagree", 0, func(st *rollback.State, _ map[string]any) { st.Meta.Epoch = 40 },
			"checkpoint field epoch = 40, but the checkpoint is of epoch 1"},
		{"negative events length", 0, func(_ *rollback.State, rec map[string]any) { rec["events_bytes"] = -5 },
			"events_bytes = -5 is out of range"},
		{"record version", 0, func(_ *rollback.State, rec map[string]any) { rec["version"] = 7 },
			"version = 7"},
		{"relative run directory", 0, func(_ *rollback.State, rec map[string]any) { rec["run_dir"] = "../../elsewhere" },
			`run_dir = "../../elsewhere" is not an absolute path`},
		{"stored batch", 0, func(_ *rollback.State, rec map[string]any) { rec["flags"].(map[string]any)["batch"] = "-1" },
			"--resume took --batch -1 from the run's configuration stored in"},
		{"stored epochs", 0, func(_ *rollback.State, rec map[string]any) { rec["flags"].(map[string]any)["epochs"] = "3000000000" },
			"--epochs 3000000000 is above the most a run may have"},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := t.TempDir()
			mustRun(t, tinyTrain(run, "--epochs", "1", "--baseline=false", "--quiet"))
			rewriteCheckpoint(t, run, c.epoch, c.edit)
			out, errs, code := runTrain(t, resumeOnly(run))
			require.Equal(t, 1, code, "%s\n%s", out, errs)
			require.Contains(t, errs, c.want)
			require.NotContains(t, out, "resumed from")
			require.NotContains(t, errs, "internal error")
		})
	}
}

// TestTrainResumeIgnoresAnAbsurdBaseline: a baseline.json whose figures
// no run produces (an accuracy of 1e308 %, a negative loss or parameter
// count) is not shown as the host-alone result: the baseline is trained
// again.
func TestTrainResumeIgnoresAnAbsurdBaseline(t *testing.T) {
	for field, v := range map[string]any{"val_accuracy": 1e308, "val_loss": -1, "parameters": -72, "epochs": 3000000000} {
		t.Run(field, func(t *testing.T) {
			dir := t.TempDir()
			mustRun(t, tinyTrain(dir, "--epochs", "1", "--quiet"))
			path := filepath.Join(dir, "ck", baselineName)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			var bf map[string]any
			require.NoError(t, json.Unmarshal(b, &bf))
			bf[field] = v
			b, err = json.Marshal(bf)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, b, 0o644))
			out := mustRun(t, resumeOnly(dir))
			require.NotContains(t, out, "as trained before")
			require.NotContains(t, summaryRow(t, out, "host alone"), "e+308")
		})
	}
}
