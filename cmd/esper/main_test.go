package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "usage"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"bench", "--workload", "W9"}, 1, "unknown workload"},
		{[]string{"bench", "--epochs", "0"}, 1, "--epochs"},
		{[]string{"bench", "--workload", "W3", "--requests", "0"}, 1, "--requests"},
		{[]string{"bench", "--device", "tpu"}, 1, `device "tpu": malformed device name`},
		{[]string{"bench", "--device", "mps"}, 1, "not supported in the Go port"},
		{[]string{"bench", "--device", "sim", "--workload", "W5"}, 1, "--device sim:0 runs W1, W2 and W4 only"},
		{[]string{"bench", "--device", "sim:1", "--workload", "all"}, 1, "runs W1, W2 and W4 only"},
		{[]string{"bench", "--device", "sim", "--compare", "pytorch"}, 1, "--compare pytorch compares speed"},
		{[]string{"bench", "--compare", "jax"}, 1, "unknown peer"},
		{[]string{"bench", "--bogus"}, 1, "flag provided but not defined"},
		{[]string{"train", "--epochs", "0"}, 1, "--epochs"},
		{[]string{"train", "--task", "cifar"}, 1, "unknown task"},
		{[]string{"train", "--resume"}, 1, "--resume needs --checkpoint"},
		{[]string{"train", "--controller", "mlp"}, 1, "unknown controller"},
		{[]string{"train", "--controller", "gnn", "--blocks", "3", "--epochs", "1", "--quiet", "--baseline=false", "--run-dir", "RUNDIR"}, 1, "the shipped policy"},
		{[]string{"train", "--policy", "p.safetensors"}, 1, "only used with --controller gnn"},
		{[]string{"train", "--controller", "gnn", "--policy", "/nonexistent.safetensors", "--epochs", "1", "--quiet", "--run-dir", "/nonexistent/runs"}, 1, "--policy"},
		{[]string{"bench", "--workload", "W2", "--graphs", "0"}, 1, "--graphs"},
		{[]string{"train", "--device", "cuda0"}, 1, "cuda0"},
		{[]string{"train", "--device", "sim:x"}, 1, "sim:x"},
		{[]string{"train", "--device", "sim:-1"}, 1, "sim:-1"},
		{[]string{"train", "--task", "fashion-mnist", "--data-dir", "/nonexistent"}, 1, "dataset-fashion-mnist"},
	} {
		for i, a := range tc.args {
			if a == "RUNDIR" {
				tc.args[i] = t.TempDir()
			}
		}
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		require.Equal(t, tc.code, code, "%v", tc.args)
		require.Contains(t, out.String()+errb.String(), tc.msg, "%v", tc.args)
	}
}

// TestTrainSmallRun runs esper train end to end on a small synthetic
// task: epoch lines, the summary table with the baseline, and a run
// directory with the telemetry and both plots.
func TestTrainSmallRun(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"train", "--train-size", "256", "--test-size", "128", "--epochs", "2", "--batch", "64",
		"--base-channels", "2", "--run-dir", dir, "--checkpoint", filepath.Join(dir, "ck")}, &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	s := out.String()
	require.Contains(t, s, "epoch   2/2")
	require.Contains(t, s, "host alone")
	require.Contains(t, s, "points of validation accuracy over the host alone")
	runs, err := filepath.Glob(filepath.Join(dir, "telemetry_*"))
	require.NoError(t, err)
	require.Len(t, runs, 2, "one run directory for the run and one for the baseline")
	found := map[string]bool{}
	for _, r := range runs {
		for _, f := range []string{"events.jsonl", "training.png", "alpha.png"} {
			if _, err := os.Stat(filepath.Join(r, f)); err == nil {
				found[f] = true
			}
		}
	}
	require.Equal(t, map[string]bool{"events.jsonl": true, "training.png": true, "alpha.png": true}, found)
	cks, _ := filepath.Glob(filepath.Join(dir, "ck", "ckpt-epoch-*.safetensors"))
	require.NotEmpty(t, cks)

	// Resuming a finished run has nothing left to do but still reports.
	out.Reset()
	code = run([]string{"train", "--train-size", "256", "--test-size", "128", "--epochs", "2", "--batch", "64",
		"--base-channels", "2", "--quiet", "--run-dir", dir, "--checkpoint", filepath.Join(dir, "ck"), "--resume"}, &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	require.Contains(t, out.String(), "resumed from the checkpoint of epoch 2")
}

// TestTrainTaskDefaults: the task-dependent flags take the task's
// defaults unless given, and bad values are refused with a message.
func TestTrainTaskDefaults(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseTrain(nil, &errb)
	require.NoError(t, err)
	require.Equal(t, taskDefaults["synthetic"].epochs, c.epochs)
	require.Equal(t, "cosine", c.schedule)
	require.True(t, c.baseline)
	require.Equal(t, [2]int{2, 1}, [2]int{c.blocks, c.kernel})

	c, err = parseTrain([]string{"--task", "fashion-mnist"}, &errb)
	require.NoError(t, err)
	require.Equal(t, [4]int{15, 3, 16, 3}, [4]int{c.epochs, c.blocks, c.baseChannels, c.kernel})
	require.Equal(t, 0.05, c.lr)
	require.Equal(t, "cosine", c.schedule)
	require.False(t, c.baseline)

	c, err = parseTrain([]string{"--task", "fashion-mnist", "--epochs", "3", "--lr", "0.1", "--schedule", "constant", "--baseline", "--blocks", "2"}, &errb)
	require.NoError(t, err)
	require.Equal(t, [2]int{3, 2}, [2]int{c.epochs, c.blocks})
	require.Equal(t, 0.1, c.lr)
	require.Equal(t, "constant", c.schedule)
	require.True(t, c.baseline)

	for _, bad := range [][]string{
		{"--task", "cifar"}, {"--schedule", "linear"}, {"--lr", "-1"}, {"--lr", "0"}, {"--epochs", "-2"},
	} {
		_, err := parseTrain(bad, &errb)
		require.Error(t, err, "%v", bad)
	}
}

func TestBenchBadNewFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"bench", "--workload", "W6", "--size", "0"}, "--size"},
		{[]string{"bench", "--workload", "W6", "--rounds", "0"}, "--rounds"},
		{[]string{"bench", "--workload", "W7", "--params", "0"}, "--params"},
		{[]string{"bench", "--workload", "W7", "--params", "100", "--tensors", "200"}, "16 parameters per tensor"},
		{[]string{"bench", "--workload", "W5", "--batch", "0"}, "--batch"},
		{[]string{"bench", "--workload", "W8"}, "W1, W2, W3, W4, W5, W6, W7, all"},
		{[]string{"bench", "--workload", "W4", "--envs", "0"}, "--envs"},
		{[]string{"bench", "--workload", "W4", "--ppo-rounds", "-2"}, "--ppo-rounds"},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 1, run(tc.args, &out, &errb), "%v", tc.args)
		require.Contains(t, errb.String(), tc.msg, "%v", tc.args)
	}
}
