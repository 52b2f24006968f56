package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchW4WritesReport runs a tiny W4 through `esper bench` and checks
// the table and the report's figures.
func TestBenchW4WritesReport(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--workload", "W4", "--envs", "2", "--base-channels", "2", "--train-size", "32", "--val-size", "16",
		"--batch", "16", "--max-epochs", "2", "--steps", "2", "--warmup", "1", "--ppo-rounds", "1", "--json", dir}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "esper bare (per step)")
	require.Contains(t, out.String(), "esper ppo (per round)")
	require.Contains(t, out.String(), "bare loop: 100% (2/2)")
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
