package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tamiyo"
)

// smallPolicyFile saves a narrow, freshly initialised policy for slots.
func smallPolicyFile(t *testing.T, slots ...string) string {
	t.Helper()
	p, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Hidden: 16, GATHidden: 8, GATHeads: 2, HeadHidden: 8, Seed: 4})
	require.NoError(t, err)
	cfg, err := leyline.NewSlotConfig(slots...)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "policy.safetensors")
	require.NoError(t, tamiyo.SavePolicy(path, p, cfg))
	return path
}

// TestTrainGNNController: esper train --controller gnn --policy FILE
// trains under the learned policy and records its telemetry; a policy
// written for other slots is refused.
func TestTrainGNNController(t *testing.T) {
	dir := t.TempDir()
	policy := smallPolicyFile(t, "r0c0", "r0c1") // the synthetic task's 2-block host
	var out, errb bytes.Buffer
	code := run([]string{"train", "--controller", "gnn", "--policy", policy, "--policy-sample",
		"--train-size", "128", "--test-size", "64", "--epochs", "2", "--batch", "64",
		"--base-channels", "2", "--baseline=false", "--run-dir", dir}, &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	require.Contains(t, out.String(), "controller gnn")
	require.Contains(t, out.String(), "epoch   2/2")
	runs, err := filepath.Glob(filepath.Join(dir, "telemetry_*", "events.jsonl"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	events, err := os.ReadFile(runs[0])
	require.NoError(t, err)
	for _, name := range []string{"tamiyo.gnn.inference.latency_ms", "tamiyo.gnn.compile_enabled", "tamiyo.gnn.feature_coverage"} {
		require.True(t, strings.Contains(string(events), name), "no %s in the telemetry", name)
	}

	wrong := smallPolicyFile(t, "r0c0", "r0c1", "r0c2")
	out.Reset()
	errb.Reset()
	code = run([]string{"train", "--controller", "gnn", "--policy", wrong, "--epochs", "1", "--quiet", "--run-dir", dir}, &out, &errb)
	require.Equal(t, 1, code)
	require.Contains(t, errb.String(), "written for slots [r0c0 r0c1 r0c2]")
}
