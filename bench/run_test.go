package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

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

// runTiny runs workload as esper bench does with c's figures, writing
// its report into a new directory, which it returns with the output.
func runTiny(t *testing.T, workload string, c Config) (dir, out string) {
	t.Helper()
	c.JSONDir = t.TempDir()
	var o, e bytes.Buffer
	require.NoError(t, Run(workload, c, &o, &e), e.String())
	return c.JSONDir, o.String()
}

func TestRunW1WritesReport(t *testing.T) {
	c := DefaultConfig()
	c.Epochs, c.Warmup = 20, 2
	dir, out := runTiny(t, "w1", c)
	require.Contains(t, out, "esper captured")
	rep := readReport(t, dir, "W1")
	res := rep["results"].(map[string]any)
	require.Contains(t, res, "eager")
	require.Contains(t, res, "captured")
	require.Contains(t, res, "trainer-eager")
	require.Contains(t, res, "trainer-captured")
	// The captured epoch allocates nothing: fewer than one allocation per
	// epoch (the process-wide counter also sees a straggling goroutine of
	// an earlier test on a loaded machine: 0.35 in one CI run).
	require.Less(t, res["captured"].(map[string]any)["allocs_per_epoch"], 1.0)
}

// TestRunW2WritesReport runs a tiny W2 (batch 1 and 2, two forwards
// each) and reads its report.
func TestRunW2WritesReport(t *testing.T) {
	c := DefaultConfig()
	c.Graphs, c.Reps, c.Warmup = 2, 2, 1
	dir, out := runTiny(t, "w2", c)
	require.Contains(t, out, "batch 2 esper captured")
	require.Contains(t, out, "captured logits equal eager")
	rep := readReport(t, dir, "W2")
	res := rep["results"].(map[string]any)
	for _, k := range []string{"batch1_eager", "batch1_captured", "batch2_eager", "batch2_captured"} {
		require.Contains(t, res, k)
	}
	require.Greater(t, rep["parameters"].(map[string]any)["flop_per_graph"].(float64), 1e7)
}

func TestRunW3WritesReport(t *testing.T) {
	c := DefaultConfig()
	c.Requests, c.Concurrency = 8, 2
	dir, out := runTiny(t, "W3", c)
	require.Contains(t, out, "the PERF.md target of 1000 µs")
	rep := readReport(t, dir, "W3")
	germ := rep["results"].(map[string]any)["germinate"].(map[string]any)
	lat := germ["latency"].(map[string]any)
	require.Equal(t, 8.0, lat["n"])
	require.Greater(t, lat["p95_us"].(float64), 0.0)
	require.Equal(t, "conv_light", germ["blueprint"])
}

// TestRunW4WritesReport runs a tiny W4 and checks the table and the
// report's figures.
func TestRunW4WritesReport(t *testing.T) {
	c := DefaultConfig()
	c.Envs, c.BaseChannels, c.TrainSize, c.ValSize = 2, 2, 32, 16
	c.Batch, c.MaxEpochs, c.Steps, c.Warmup, c.PPORounds = 16, 2, 2, 1, 1
	dir, out := runTiny(t, "W4", c)
	require.Contains(t, out, "esper bare (per step)")
	require.Contains(t, out, "esper ppo (per round)")
	require.Contains(t, out, "bare loop: 100% (2/2)")
	rep := readReport(t, dir, "W4")
	params := rep["parameters"].(map[string]any)
	require.Equal(t, 2.0, params["envs"])
	require.Equal(t, 3.0, params["slots"])
	res := rep["results"].(map[string]any)
	bare := res["bare"].(map[string]any)
	require.Equal(t, 4.0, bare["env_epochs"], "2 steps × 2 envs")
	require.Greater(t, bare["env_epochs_per_second"].(float64), 0.0)
	ppo := res["ppo"].(map[string]any)
	require.Equal(t, 4.0, ppo["env_epochs"], "1 round of 2 steps × 2 envs")
	require.Len(t, res["work"].(map[string]any)["configs"], 4)
}

func TestRunW5WritesReport(t *testing.T) {
	c := DefaultConfig()
	c.Batch, c.Steps, c.Warmup, c.EvalBatches, c.RandomData = 8, 2, 1, 2, true
	dir, out := runTiny(t, "W5", c)
	require.Contains(t, out, "train esper eager")
	require.Contains(t, out, "train esper captured")
	require.Contains(t, out, "random N(0,1)")
	rep := readReport(t, dir, "W5")
	require.Equal(t, "random-normal", rep["parameters"].(map[string]any)["data"])
	res := rep["results"].(map[string]any)
	for _, k := range []string{"train_eager", "train_captured", "eval"} {
		require.Greater(t, res[k].(map[string]any)["samples_per_second"].(float64), 0.0, k)
	}
}

func TestRunW6WritesReport(t *testing.T) {
	c := DefaultConfig()
	c.Size = 64
	dir, out := runTiny(t, "w6", c)
	require.Contains(t, out, "median GFLOP/s")
	require.Contains(t, out, "gonum")
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

func TestRunW7WritesReport(t *testing.T) {
	c := DefaultConfig()
	c.Params, c.Tensors, c.Steps, c.Warmup = 20000, 8, 3, 1
	dir, out := runTiny(t, "W7", c)
	require.Contains(t, out, "esper SGD-momentum")
	require.Contains(t, out, "esper AdamW")
	require.Contains(t, out, "copy bandwidth")
	rep := readReport(t, dir, "W7")
	res := rep["results"].(map[string]any)
	require.Equal(t, 20*20000.0, res["sgd_momentum"].(map[string]any)["bytes_per_step"])
	require.Equal(t, 28*20000.0, res["adamw"].(map[string]any)["bytes_per_step"])
	require.Equal(t, 1.0, res["adamw"].(map[string]any)["changed_fraction"])
	require.Greater(t, res["copy_gbps"].(float64), 0.0)
	require.Len(t, rep["parameters"].(map[string]any)["shapes"], 8)
}

// TestRunAllWritesEveryReport runs all at tiny sizes.
func TestRunAllWritesEveryReport(t *testing.T) {
	c := DefaultConfig()
	c.Epochs, c.Warmup, c.Requests, c.Concurrency = 10, 1, 4, 2
	c.Batch, c.Steps, c.EvalBatches, c.RandomData, c.Capture = 4, 1, 1, true, false
	c.Size, c.Reps, c.Graphs, c.Params, c.Tensors = 32, 2, 2, 4000, 4
	c.Envs, c.BaseChannels, c.TrainSize, c.ValSize, c.MaxEpochs, c.PPORounds = 2, 2, 8, 4, 2, 1
	dir, _ := runTiny(t, "all", c)
	for _, w := range []string{"W1", "W2", "W3", "W4", "W5", "W6", "W7"} {
		readReport(t, dir, w)
	}
}

// TestRunUnknownWorkload: the error lists the CPU workloads.
func TestRunUnknownWorkload(t *testing.T) {
	var out, errb bytes.Buffer
	require.ErrorContains(t, Run("W8", DefaultConfig(), &out, &errb), "W1, W2, W3, W4, W5, W6, W7, all")
}
