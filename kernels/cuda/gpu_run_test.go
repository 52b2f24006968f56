package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels/backendtest"
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

// TestGPURunNewestNamesExist: every alternative of gpu_run.sh's
// newest_conformance names a subtest of the conformance suite
// (backendtest.CaseNames: methods joined by "+") and every one of
// newest_tests a test function of this package, so that the run of the
// newest code first cannot skip a test quietly (a -test.run pattern
// that matches nothing runs nothing and passes).
func TestGPURunNewestNamesExist(t *testing.T) {
	if _, err := os.Stat("gpu_run.sh"); os.IsNotExist(err) && os.Getenv("ESPER_GPU_BUNDLE") != "" {
		t.Skip("no gpu_run.sh beside the GPU bundle's test binary")
	}
	src, err := os.ReadFile("gpu_run.sh")
	require.NoError(t, err)
	alternatives := func(v string) []string {
		m := regexp.MustCompile(v + `='\^\((.*)\)\$'`).FindSubmatch(src)
		require.NotNil(t, m, "gpu_run.sh sets %s to '^(a|b|...)$'", v)
		return strings.Split(string(m[1]), "|")
	}
	names := backendtest.CaseNames()
	for _, alt := range alternatives("newest_conformance") {
		re := regexp.MustCompile("^" + alt + "$")
		found := false
		for _, n := range names {
			found = found || re.MatchString(n)
		}
		require.True(t, found, "newest_conformance's %q matches no conformance subtest (names: methods joined by +)", alt)
	}
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	var all []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		all = append(all, b...)
	}
	for _, name := range alternatives("newest_tests") {
		found := regexp.MustCompile(`(?m)^func ` + name + `\(t \*testing\.T\)`).Match(all)
		require.True(t, found, "newest_tests' %s is no test of kernels/cuda", name)
	}
}
