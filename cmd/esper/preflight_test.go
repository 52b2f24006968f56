package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// unwritable returns a path that cannot be created or written in, as a
// read-only directory would refuse it: a path under a regular file (tests
// may run as root, whom permissions do not stop).
func unwritable(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	return filepath.Join(f, "x")
}

// TestPPOChecksOutputsFirst: an output esper ppo cannot write is one
// error line naming its flag, before any round is run.
func TestPPOChecksOutputsFirst(t *testing.T) {
	dir := t.TempDir()
	bad := unwritable(t)
	for _, tc := range []struct {
		flags []string
		msg   string
	}{
		{[]string{"--out", filepath.Join(bad, "p.safetensors")}, "--out " + filepath.Join(bad, "p.safetensors") + ": cannot write in " + bad},
		{[]string{"--out", dir}, "is a directory"},
		{[]string{"--checkpoint", bad}, "--checkpoint " + bad + ": cannot create the directory"},
		{[]string{"--checkpoint", filepath.Join(dir, "missing"), "--resume"}, "--checkpoint"},
		{[]string{"--run-dir", bad}, "--run-dir " + bad},
	} {
		var out, errb bytes.Buffer
		args := append(tinyPPO(dir, "--rounds", "1"), tc.flags...)
		require.Equal(t, 1, run(args, &out, &errb), "%v: %s", tc.flags, out.String())
		require.Empty(t, out.String(), "%v: work done before the error", tc.flags)
		require.Contains(t, errb.String(), tc.msg, "%v", tc.flags)
		require.Equal(t, 1, strings.Count(errb.String(), "\n"), "%v: %q is not one line", tc.flags, errb.String())
	}
	require.NoDirExists(t, filepath.Join(dir, "missing"), "a resume must not create its checkpoint directory")
}

// TestBenchChecksOutputsFirst: esper bench refuses a --json directory it
// cannot write and a --peer-dir without the workloads' peer scripts
// (--compare pytorch) before it measures anything.
func TestBenchChecksOutputsFirst(t *testing.T) {
	bad := unwritable(t)
	peers := t.TempDir()
	for _, f := range []string{"w1_tolaria_ref.py", "peer_common.py"} {
		require.NoError(t, os.WriteFile(filepath.Join(peers, f), nil, 0o644))
	}
	missing := filepath.Join(t.TempDir(), "no-peers")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--workload", "W3", "--requests", "4", "--concurrency", "1", "--json", bad}, "--json " + bad + ": cannot create the directory: not a directory"},
		{[]string{"--workload", "all", "--json", bad}, "--json"},
		{[]string{"--workload", "W1", "--epochs", "2", "--warmup", "1", "--compare", "pytorch", "--peer-dir", missing},
			"the W1 peer needs " + filepath.Join(missing, "w1_tolaria_ref.py") + ": no such file or directory"},
		{[]string{"--workload", "all", "--compare", "pytorch", "--peer-dir", peers}, "the W2 peer needs " + filepath.Join(peers, "w2_gnn.py")},
		{[]string{"--workload", "W5", "--compare", "pytorch", "--peer-dir", peers}, "w5_host_train.py"},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 1, run(append([]string{"bench"}, tc.args...), &out, &errb), "%v: %s", tc.args, out.String())
		require.Empty(t, out.String(), "%v: work done before the error", tc.args)
		require.Contains(t, errb.String(), tc.msg, "%v", tc.args)
		require.Equal(t, 1, strings.Count(errb.String(), "\n"), "%v: %q is not one line", tc.args, errb.String())
	}
	// Scripts present: the check lets the workload run (W3 has no peer).
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"bench", "--workload", "W3", "--requests", "4", "--concurrency", "1", "--compare", "pytorch", "--peer-dir", peers}, &out, &errb), errb.String())
}
