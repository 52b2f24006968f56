package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGPURunScriptParses: gpu_run.sh (the bundle's run.sh) parses with
// bash -n, its profile phase's summariser is beside it and the phase has
// a short run for each workload it profiles: the script runs only on a
// GPU machine, where a syntax error would cost a device session. Runs
// without the cuda tag (CI); skipped from a GPU bundle, away from the
// sources.
func TestGPURunScriptParses(t *testing.T) {
	if _, err := os.Stat("gpu_run.sh"); os.IsNotExist(err) && os.Getenv("ESPER_GPU_BUNDLE") != "" {
		t.Skip("no gpu_run.sh beside the GPU bundle's test binary")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	out, err := exec.Command(bash, "-n", "gpu_run.sh").CombinedOutput()
	require.NoError(t, err, "bash -n gpu_run.sh: %s", out)
	src, err := os.ReadFile("gpu_run.sh")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(".", "ncu_top.py"))
	require.NoError(t, err, "the profile phase's summariser")
	for _, w := range []string{"w1) args=", "w2) args=", "w4) args=", "w5) args="} {
		require.True(t, strings.Contains(string(src), w), "the profile phase has no short run for %s", w)
	}
}
