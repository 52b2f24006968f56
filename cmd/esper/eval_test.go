package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tamiyo"
)

// TestEvalBadInputIsOneLine: a missing policy, an empty seed range, a
// policy for another slot count and an unknown controller are one error
// line each, before any training.
func TestEvalBadInputIsOneLine(t *testing.T) {
	p, err := tamiyo.NewPolicy(tamiyo.PolicyOptions{Hidden: 8, GATHidden: 8, GATHeads: 1, HeadHidden: 8})
	require.NoError(t, err)
	slots, err := leyline.NewSlotConfig("r0c0", "r0c1", "r0c2")
	require.NoError(t, err)
	three := filepath.Join(t.TempDir(), "three.safetensors")
	require.NoError(t, tamiyo.SavePolicy(three, p, slots))
	out := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--controllers", "gnn:missing.safetensors"}, "missing.safetensors"},
		{[]string{"--seeds", "120-101"}, "empty"},
		{[]string{"--seeds", ""}, "no seed"},
		{[]string{"--controllers", "gnn:" + three}, "slots"},
		{[]string{"--controllers", "rules"}, "want heuristic, none"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"eval", "--out", out}, tc.args...), &stdout, &stderr)
		assert.Equal(t, 1, code, tc.args)
		msg := strings.TrimSpace(stderr.String())
		assert.Contains(t, msg, tc.want, tc.args)
		assert.NotContains(t, msg, "\n", "one line: %q", msg)
		assert.NotContains(t, stdout.String(), "[1/", "nothing trained")
	}
}

// TestEvalWritesTable runs a small evaluation end to end.
func TestEvalWritesTable(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: trains four small runs")
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run([]string{"eval", "--seeds", "5-6", "--epochs", "12", "--train-size", "512", "--test-size", "100", "--out", out}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	s := stdout.String()
	assert.Contains(t, s, "[4/4]")
	assert.Contains(t, s, "heuristic − none")
	for _, f := range []string{"eval.json", "eval.png"} {
		st, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err)
		assert.Greater(t, st.Size(), int64(100))
	}
}
