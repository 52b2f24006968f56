package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/simic"
)

// tinyPPO are the flags of a few-second esper ppo run.
func tinyPPO(dir string, extra ...string) []string {
	return append([]string{"ppo", "--envs", "2", "--max-epochs", "3", "--train-size", "128", "--val-size", "64", "--batch", "32",
		"--base-channels", "2", "--hidden", "16", "--gat-hidden", "8", "--gat-heads", "2", "--head-hidden", "16", "--run-dir", dir}, extra...)
}

// TestPPOWritesLoadablePolicy: a 2-round esper ppo run prints a line per
// round, writes its plots, and its policy file drives esper train
// --controller gnn.
func TestPPOWritesLoadablePolicy(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "trained.safetensors")
	var out, errb bytes.Buffer
	code := run(tinyPPO(dir, "--rounds", "2", "--out", policy), &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	require.Contains(t, out.String(), "round   1/2")
	require.Contains(t, out.String(), "round   2/2")
	require.Contains(t, out.String(), "entropy [slot")
	plots, err := filepath.Glob(filepath.Join(dir, "telemetry_*", "ppo.png"))
	require.NoError(t, err)
	require.Len(t, plots, 1)
	events, err := filepath.Glob(filepath.Join(dir, "telemetry_*", "events.jsonl"))
	require.NoError(t, err)
	require.Len(t, events, 1)
	ev, err := os.ReadFile(events[0])
	require.NoError(t, err)
	require.Contains(t, string(ev), "simic.ppo.approx_kl")

	out.Reset()
	errb.Reset()
	code = run([]string{"train", "--controller", "gnn", "--policy", policy, "--blocks", "3",
		"--train-size", "128", "--test-size", "64", "--epochs", "2", "--batch", "64",
		"--base-channels", "2", "--baseline=false", "--run-dir", dir}, &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	require.Contains(t, out.String(), "epoch   2/2")
}

// TestPPOResume: a run checkpointed after round 1 continues at round 2
// with the optimizer, normalisers and history of the checkpoint.
func TestPPOResume(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	var out, errb bytes.Buffer
	code := run(tinyPPO(dir, "--rounds", "1", "--checkpoint", ck), &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	for _, f := range []string{simic.PPOPolicyFile, simic.PPOOptimizerFile, simic.PPOStateFile} {
		require.FileExists(t, filepath.Join(ck, f))
	}

	out.Reset()
	errb.Reset()
	code = run(tinyPPO(dir, "--rounds", "2", "--checkpoint", ck, "--resume"), &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	require.Contains(t, out.String(), "resumed from "+ck+" after round 1")
	require.NotContains(t, out.String(), "round   1/2")
	require.Contains(t, out.String(), "round   2/2")
	js, err := os.ReadFile(filepath.Join(ck, simic.PPOStateFile))
	require.NoError(t, err)
	var st simic.PPOCheckpoint
	require.NoError(t, json.Unmarshal(js, &st))
	require.Equal(t, 2, st.Round)
	require.Len(t, st.History, 2)
	require.Equal(t, 2, st.Updates)
	require.Equal(t, 2*2*3, st.EnvSteps)
	require.Greater(t, st.ValueNorm.Count, int64(0))

	// A resume with other policy widths (a policy trained for another
	// architecture) is refused in one line naming both, not silently
	// reset.
	out.Reset()
	errb.Reset()
	code = run(append(tinyPPO(dir, "--rounds", "3", "--checkpoint", ck, "--resume"), "--hidden", "32"), &out, &errb)
	require.Equal(t, 1, code)
	require.Contains(t, errb.String(), "--resume")
	require.Contains(t, errb.String(), "hidden 16")
	require.Contains(t, errb.String(), "hidden 32")
	require.Equal(t, 1, strings.Count(errb.String(), "\n"), errb.String())
}
