package cuda

import (
	"bytes"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCubinsMatchPTX: every PTX module has an sm_90 cubin assembled from
// its current bytes (cubin/SOURCES, checked again at Open), each unpacks
// to an ELF image naming every kernel of its PTX, and no cubin lacks its
// PTX module. It runs without the cuda tag and without ptxas (CI),
// reading only the files: a PTX regenerated without its cubins fails
// here (run make ptx, which writes both).
func TestCubinsMatchPTX(t *testing.T) {
	skipAwayFromSources(t)
	sources, err := cubinSources()
	require.NoError(t, err)
	ptxs, err := filepath.Glob("ptx/*.ptx")
	require.NoError(t, err)
	require.NotEmpty(t, ptxs)
	modules := map[string]bool{}
	for _, p := range ptxs {
		mod := strings.TrimSuffix(filepath.Base(p), ".ptx")
		modules[mod] = true
		src, err := os.ReadFile(p)
		require.NoError(t, err)
		image, why := cubinFor(sources, "sm_90", mod, src)
		if image == nil {
			t.Errorf("module %s: %s", mod, why)
			continue
		}
		for _, k := range kernelNames(string(src)) {
			if !bytes.Contains(image, []byte(k)) {
				t.Errorf("module %s: kernel %s is not in its sm_90 cubin", mod, k)
			}
		}
	}
	gzs, err := fs.Glob(cubinFiles, "cubin/*.cubin.gz")
	require.NoError(t, err)
	for _, g := range gzs {
		mod, _, _ := strings.Cut(path.Base(g), ".")
		if !modules[mod] {
			t.Errorf("%s has no PTX module (delete it, or run make ptx)", g)
		}
	}
	for key := range sources {
		if _, mod, _ := strings.Cut(key, " "); !modules[mod] {
			t.Errorf("cubin/SOURCES lists %q, which has no PTX module", key)
		}
	}
}

// TestCubinForRefuses: a cubin is used only for its own architecture and
// for the PTX it was assembled from.
func TestCubinForRefuses(t *testing.T) {
	skipAwayFromSources(t)
	sources, err := cubinSources()
	require.NoError(t, err)
	src, err := os.ReadFile("ptx/random.ptx")
	require.NoError(t, err)
	image, why := cubinFor(sources, "sm_86", "random", src)
	require.Nil(t, image)
	require.Contains(t, why, "no sm_86 cubin")
	edited := append(append([]byte(nil), src...), '\n')
	image, why = cubinFor(sources, "sm_90", "random", edited)
	require.Nil(t, image)
	require.Contains(t, why, "older than its PTX")
	_, err = parseCubinSources([]byte("# a comment\nsm_90 random abc\n"))
	require.ErrorContains(t, err, "line 2")
}

// TestCodeSummary: KernelCode's text for all cubins, all PTX for one
// reason, and a mix.
func TestCodeSummary(t *testing.T) {
	require.Equal(t, "13 modules from sm_90 cubins", codeSummary("sm_90", 13, nil))
	require.Equal(t, "2 modules from PTX compiled by the driver (no sm_86 cubin)",
		codeSummary("sm_86", 0, []ptxModule{{"conv", "no sm_86 cubin"}, {"graph", "no sm_86 cubin"}}))
	require.Equal(t, "12 modules from sm_90 cubins, 1 from PTX compiled by the driver: graph (the driver refused its sm_90 cubin: x)",
		codeSummary("sm_90", 12, []ptxModule{{"graph", "the driver refused its sm_90 cubin: x"}}))
}

// skipAwayFromSources skips a test that reads ptx/ in a GPU bundle's
// test binary run away from the sources (which CI checks).
func skipAwayFromSources(t *testing.T) {
	if _, err := os.Stat("ptx"); os.IsNotExist(err) && os.Getenv("ESPER_GPU_BUNDLE") != "" {
		t.Skip("no ptx/ beside the GPU bundle's test binary")
	}
}
