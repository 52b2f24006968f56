package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBenchW1WritesReport(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--workload", "w1", "--epochs", "20", "--warmup", "2", "--json", dir}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "esper captured")
	data, err := os.ReadFile(filepath.Join(dir, "W1.json"))
	require.NoError(t, err)
	var rep map[string]any
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Equal(t, "W1", rep["workload"])
	res := rep["results"].(map[string]any)
	require.Contains(t, res, "eager")
	require.Contains(t, res, "captured")
	require.Contains(t, res, "trainer-eager")
	require.Contains(t, res, "trainer-captured")
	require.Equal(t, 0.0, res["captured"].(map[string]any)["allocs_per_epoch"])
}

func TestBenchW3WritesReport(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--workload", "W3", "--requests", "8", "--concurrency", "2", "--json", dir}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "the PERF.md target of 1000 µs")
	data, err := os.ReadFile(filepath.Join(dir, "W3.json"))
	require.NoError(t, err)
	var rep map[string]any
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Equal(t, "W3", rep["workload"])
	germ := rep["results"].(map[string]any)["germinate"].(map[string]any)
	lat := germ["latency"].(map[string]any)
	require.Equal(t, 8.0, lat["n"])
	require.Greater(t, lat["p95_us"].(float64), 0.0)
	require.Equal(t, "conv_light", germ["blueprint"])
}

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
		{[]string{"bench", "--device", "tpu"}, 1, "not available"},
		{[]string{"bench", "--compare", "jax"}, 1, "unknown peer"},
		{[]string{"bench", "--bogus"}, 1, "flag provided but not defined"},
		{[]string{"train", "--epochs", "0"}, 1, "--epochs"},
		{[]string{"train", "--task", "cifar"}, 1, "unknown task"},
		{[]string{"train", "--resume"}, 1, "--resume needs --checkpoint"},
		{[]string{"train", "--controller", "mlp"}, 1, "unknown controller"},
		{[]string{"train", "--controller", "gnn"}, 1, "--controller gnn needs --policy"},
		{[]string{"train", "--policy", "p.safetensors"}, 1, "only used with --controller gnn"},
		{[]string{"train", "--controller", "gnn", "--policy", "/nonexistent.safetensors", "--epochs", "1", "--quiet", "--run-dir", "/nonexistent/runs"}, 1, "--policy"},
		{[]string{"bench", "--workload", "W2", "--graphs", "0"}, 1, "--graphs"},
		{[]string{"train", "--device", "cuda0"}, 1, "cuda0"},
		{[]string{"train", "--task", "fashion-mnist", "--data-dir", "/nonexistent"}, 1, "dataset-fashion-mnist"},
	} {
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

// readReport decodes dir/<workload>.json.
func readReport(t *testing.T, dir, workload string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, workload+".json"))
	require.NoError(t, err)
	var rep map[string]any
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Equal(t, workload, rep["workload"])
	return rep
}

func TestBenchW6WritesReport(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--workload", "w6", "--size", "64", "--json", dir}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "median GFLOP/s")
	require.Contains(t, out.String(), "gonum")
	rep := readReport(t, dir, "W6")
	require.Equal(t, 64.0, rep["parameters"].(map[string]any)["size"])
	require.Equal(t, 10.0, rep["parameters"].(map[string]any)["rounds"])
	res := rep["results"].(map[string]any)
	// Ten rounds of 20 engine products, pooled; gonum once.
	for impl, n := range map[string]float64{"esper": 200, "gonum": 20} {
		g := res[impl].(map[string]any)
		require.Greater(t, g["median_gflops"].(float64), 0.0, impl)
		require.Less(t, g["max_rel_err"].(float64), 1e-5, impl)
		require.Equal(t, n, g["latency"].(map[string]any)["n"], impl)
	}
	require.Len(t, res["esper_rounds"], 10)
	require.Greater(t, rep["ratios"].(map[string]any)["esper_vs_gonum_median"].(float64), 0.0)
}

// TestPoolW6Peers: the peer's runs pool into figures over every product,
// keep each run's own summary, and a run without latencies is an error.
func TestPoolW6Peers(t *testing.T) {
	const flop = 2e9 // 1 ms is 2000 GFLOP/s
	runs := []map[string]any{
		{"torch_version": "x", "median_gflops": 1.0, "lat_us": []any{1000.0, 4000.0, 2000.0}},
		{"torch_version": "x", "median_gflops": 2.0, "lat_us": []any{500.0, 3000.0}},
	}
	p, err := poolW6Peers(runs, flop)
	require.NoError(t, err)
	require.Equal(t, "x", p["torch_version"])
	require.Equal(t, 5, p["reps"])
	require.InDelta(t, 2000.0, p["p50_us"].(float64), 1e-9) // 500 1000 [2000] 3000 4000
	require.InDelta(t, 1000.0, p["median_gflops"].(float64), 1e-9)
	require.InDelta(t, 4000.0, p["best_gflops"].(float64), 1e-9)
	require.NotContains(t, p, "lat_us")
	sums := p["runs"].([]map[string]any)
	require.Len(t, sums, 2)
	require.Equal(t, 2.0, sums[1]["median_gflops"])
	require.NotContains(t, sums[0], "lat_us")

	_, err = poolW6Peers([]map[string]any{{"median_gflops": 1.0}}, flop)
	require.ErrorContains(t, err, "lat_us")
	_, err = poolW6Peers([]map[string]any{{"lat_us": []any{-1.0}}}, flop)
	require.ErrorContains(t, err, "bad latency")
}

func TestBenchW7WritesReport(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--workload", "W7", "--params", "20000", "--tensors", "8", "--steps", "3", "--warmup", "1", "--json", dir}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "esper SGD-momentum")
	require.Contains(t, out.String(), "esper AdamW")
	require.Contains(t, out.String(), "copy bandwidth")
	rep := readReport(t, dir, "W7")
	res := rep["results"].(map[string]any)
	require.Equal(t, 20*20000.0, res["sgd_momentum"].(map[string]any)["bytes_per_step"])
	require.Equal(t, 28*20000.0, res["adamw"].(map[string]any)["bytes_per_step"])
	require.Equal(t, 1.0, res["adamw"].(map[string]any)["changed_fraction"])
	require.Greater(t, res["copy_gbps"].(float64), 0.0)
	require.Len(t, rep["parameters"].(map[string]any)["shapes"], 8)
}

func TestBenchW5WritesReport(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--workload", "W5", "--batch", "8", "--steps", "2", "--warmup", "1", "--eval-batches", "2", "--random-data", "--json", dir}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "train esper eager")
	require.Contains(t, out.String(), "train esper captured")
	require.Contains(t, out.String(), "random N(0,1)")
	rep := readReport(t, dir, "W5")
	require.Equal(t, "random-normal", rep["parameters"].(map[string]any)["data"])
	res := rep["results"].(map[string]any)
	for _, k := range []string{"train_eager", "train_captured", "eval"} {
		require.Greater(t, res[k].(map[string]any)["samples_per_second"].(float64), 0.0, k)
	}
}

// TestBenchAllWritesEveryReport runs --workload all at tiny sizes.
func TestBenchAllWritesEveryReport(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--workload", "all", "--epochs", "10", "--warmup", "1", "--requests", "4", "--concurrency", "2",
		"--batch", "4", "--steps", "1", "--eval-batches", "1", "--random-data", "--capture=false",
		"--size", "32", "--reps", "2", "--graphs", "2", "--params", "4000", "--tensors", "4",
		"--envs", "2", "--base-channels", "2", "--train-size", "8", "--val-size", "4", "--max-epochs", "2", "--ppo-rounds", "1", "--json", dir}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	for _, w := range []string{"W1", "W2", "W3", "W4", "W5", "W6", "W7"} {
		readReport(t, dir, w)
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
