package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria/rollback"
)

// TestTrainDivergenceEndsTheRun (issue 20, point 6): `esper train --lr
// 1e6` used to train every epoch at NaN, save NaN checkpoints and exit 0
// (1 before the plots skipped NaN) without a word of divergence. The
// governor is on by default: each NaN epoch is rolled back (and says
// so), no NaN epoch is checkpointed, and after 3 rollbacks in a row the
// run prints the summary it has and ends with one line naming the epoch
// and what is left, exit 1. Without the governor the first NaN epoch
// ends it.
func TestTrainDivergenceEndsTheRun(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"governor", nil, "(governor_nan), after 3 rollbacks in a row; no epoch was good enough to checkpoint (a smaller --lr than 1e+06 may train)"},
		{"no governor", []string{"--governor=false"}, "no governor watches the run"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out, errs, code := runTrain(t, tinyTrain(dir, append([]string{"--lr", "1e6", "--epochs", "10"}, c.flags...)...))
			require.Equal(t, 1, code, "%s\n%s", out, errs)
			require.Equal(t, 1, strings.Count(errs, "\n"), "one line: %q", errs)
			require.Regexp(t, `^esper train: tolaria: training diverged at epoch \d+: validation loss (NaN|\+Inf)`, errs)
			require.Contains(t, errs, c.want)
			require.Regexp(t, `NaN|\+Inf`, summaryRow(t, out, "with seeds"), "the summary it has")
			require.NotContains(t, out, "host alone", "no baseline after a diverged run")
			require.Contains(t, out, "run directory:")
			if c.flags == nil {
				require.Equal(t, 4, strings.Count(out, "rolled back by the governor (governor_nan)"), out)
				ckpts, err := filepath.Glob(filepath.Join(dir, "ck", "ckpt-epoch-*"))
				require.NoError(t, err)
				require.Empty(t, ckpts, "no diverged epoch is checkpointed")
			}
			// Whatever was checkpointed is finite.
			st, err := rollback.Open(filepath.Join(dir, "ck"), rollback.StoreOptions{})
			require.NoError(t, err)
			if in, err := st.LatestIntact(); err == nil {
				for name, x := range in.State.Tensors {
					if x.DType() != tensor.F32 {
						continue
					}
					for _, v := range x.Contiguous().F32() {
						require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "%s: %s is not finite", in.Path, name)
					}
				}
			}
		})
	}
}

// TestTrainResumeRefusesANaNCheckpoint (issue 20, point 6): a checkpoint
// whose weights are NaN (an older esper saved diverged epochs) is not
// resumed: --resume stops with one line naming the tensor.
func TestTrainResumeRefusesANaNCheckpoint(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, tinyTrain(dir, "--epochs", "1", "--baseline=false", "--quiet"))
	rewriteCheckpoint(t, dir, 0, func(st *rollback.State, _ map[string]any) {
		w := st.Tensors[rollback.PrefixModel+"classifier.weight"].Clone()
		w.F32()[0] = float32(math.Inf(1))
		st.Tensors[rollback.PrefixModel+"classifier.weight"] = w
	})
	out, errs, code := runTrain(t, resumeOnly(dir, "--epochs", "2"))
	require.Equal(t, 1, code, "%s\n%s", out, errs)
	require.Contains(t, errs, "checkpoint tensor model/classifier.weight holds +Inf (element 0): the run had diverged")
	require.NotContains(t, out, "epoch   2/2")
	_, err := os.Stat(filepath.Join(dir, "ck", "ckpt-epoch-2.safetensors"))
	require.True(t, os.IsNotExist(err))
}
