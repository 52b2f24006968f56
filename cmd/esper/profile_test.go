package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCPUProfileEnv: ESPER_CPUPROFILE writes a CPU profile of the
// command (a gzipped protobuf, as go tool pprof reads), and a path that
// cannot be created is one line and exit 1 before the command runs.
func TestCPUProfileEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	t.Setenv("ESPER_CPUPROFILE", path)
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"version"}, &out, &errb), errb.String())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(b), 2)
	require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "gzip magic")

	t.Setenv("ESPER_CPUPROFILE", filepath.Join(t.TempDir(), "missing", "cpu.prof"))
	out.Reset()
	errb.Reset()
	require.Equal(t, 1, run([]string{"version"}, &out, &errb))
	require.Contains(t, errb.String(), "ESPER_CPUPROFILE")
	require.Empty(t, out.String(), "the command did not run")
}
