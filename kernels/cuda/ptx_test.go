package cuda

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// ptxHeader starts the first line of every generated PTX file, followed
// by the SHA-256 of src/common.cuh and then the .cu source it was
// compiled from (written by mkptx.sh).
const ptxHeader = "// esper-src-sha256: "

// TestPTXUpToDate: every src/*.cu has a ptx/*.ptx generated from its
// current contents and the current src/common.cuh, and no PTX file lacks
// its source. It runs without
// the cuda tag and without nvcc (CI), reading only the files. A source
// edited without `make ptx` fails here.
func TestPTXUpToDate(t *testing.T) {
	if _, err := os.Stat("src"); os.IsNotExist(err) && os.Getenv("ESPER_GPU_BUNDLE") != "" {
		// A test binary of `make gpu-bundle` run on the GPU machine, away
		// from the sources: the freshness check ran where they are (CI).
		t.Skip("no src/ beside the GPU bundle's test binary")
	}
	srcs, err := filepath.Glob("src/*.cu")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no kernel sources in src/ (%v)", err)
	}
	common, err := os.ReadFile("src/common.cuh")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, src := range srcs {
		body, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(append(append([]byte(nil), common...), body...))
		name := strings.TrimSuffix(filepath.Base(src), ".cu") + ".ptx"
		want[name] = true
		f, err := os.Open(filepath.Join("ptx", name))
		if err != nil {
			t.Errorf("%s has no PTX (run make ptx): %v", src, err)
			continue
		}
		line, _ := bufio.NewReader(f).ReadString('\n')
		f.Close()
		got, ok := strings.CutPrefix(strings.TrimSpace(line), ptxHeader)
		if !ok {
			t.Errorf("ptx/%s does not start with %q (regenerate it with make ptx)", name, ptxHeader)
			continue
		}
		if got != hex.EncodeToString(sum[:]) {
			t.Errorf("ptx/%s is older than %s (run make ptx)", name, src)
		}
	}
	ptxs, _ := filepath.Glob("ptx/*.ptx")
	for _, p := range ptxs {
		if !want[filepath.Base(p)] {
			t.Errorf("%s has no source in src/ (delete it or restore its .cu)", p)
		}
	}
}

// TestPTXKernelNamesUnique: no two PTX modules define one kernel (Open
// indexes the kernels of every module by name and refuses a second
// definition), so a kernel moved between source files leaves its old one.
func TestPTXKernelNamesUnique(t *testing.T) {
	ptxs, err := filepath.Glob("ptx/*.ptx")
	if err != nil || len(ptxs) == 0 {
		t.Skipf("no PTX files beside the test (%v)", err)
	}
	seen := map[string]string{}
	for _, p := range ptxs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			for i := 0; i+1 < len(f); i++ {
				if f[i] != ".entry" {
					continue
				}
				name := strings.TrimSuffix(f[i+1], "(")
				if first, dup := seen[name]; dup {
					t.Errorf("kernel %s is defined in %s and %s", name, first, p)
				}
				seen[name] = p
				break
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("no kernel entries found in ptx/*.ptx")
	}
}

// TestPTXHalfTwins: every bf16 kernel has an fp16 twin and every fp16
// kernel a bf16 one (base_bf16 beside base_f16), so that floatKernel,
// which names either for any float kernel, never names a missing one,
// and fp16 autocast reaches every op bf16 autocast does.
func TestPTXHalfTwins(t *testing.T) {
	ptxs, err := filepath.Glob("ptx/*.ptx")
	if err != nil || len(ptxs) == 0 {
		t.Skipf("no PTX files beside the test (%v)", err)
	}
	entries := map[string]bool{}
	for _, p := range ptxs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if _, rest, ok := strings.Cut(line, ".entry "); ok {
				name, _, _ := strings.Cut(rest, "(")
				entries[strings.TrimSpace(name)] = true
			}
		}
	}
	pairs := 0
	for name := range entries {
		if base, ok := strings.CutSuffix(name, "_bf16"); ok {
			pairs++
			if !entries[base+"_f16"] {
				t.Errorf("kernel %s has no fp16 twin %s_f16", name, base)
			}
		}
		if base, ok := strings.CutSuffix(name, "_f16"); ok && !entries[base+"_bf16"] {
			t.Errorf("kernel %s has no bf16 twin %s_bf16", name, base)
		}
	}
	if pairs == 0 {
		t.Fatal("no bf16 kernels found in ptx/*.ptx")
	}
}

// TestPTXKernelsFitTheLauncher: every kernel entry in ptx/*.ptx takes at
// most maxLaunchArgs parameters, the most esper_launch (driver.go, the
// cuda build) passes: a kernel with more would compile and then panic at
// its first launch on a GPU. It runs without the cuda tag, on the PTX.
func TestPTXKernelsFitTheLauncher(t *testing.T) {
	const maxLaunchArgs = 16 // driver.go's maxArgs
	files, err := filepath.Glob("ptx/*.ptx")
	if err != nil || len(files) == 0 {
		if os.Getenv("ESPER_GPU_BUNDLE") != "" {
			t.Skip("no ptx/ beside the GPU bundle's test binary")
		}
		t.Fatalf("no PTX files (%v)", err)
	}
	entries := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var name string
		params := 0
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(line, ".visible .entry "):
				name = strings.TrimSuffix(strings.TrimPrefix(line, ".visible .entry "), "(")
				params = 0
				entries++
			case name != "" && strings.HasPrefix(line, ".param "):
				params++
			case name != "" && strings.HasPrefix(line, ")"):
				if params > maxLaunchArgs {
					t.Errorf("%s: kernel %s takes %d parameters, the launcher passes at most %d", f, name, params, maxLaunchArgs)
				}
				name = ""
			}
		}
	}
	if entries < 100 {
		t.Fatalf("found only %d kernel entries: the PTX parse is off", entries)
	}
}

// readPTX returns ptx/name's text for the tests that hold Go parameter
// blocks to the compiled kernels; beside a GPU bundle's test binary,
// where there is no ptx/, the test is skipped (CI ran it where it is).
func readPTX(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("ptx", name))
	if err != nil {
		if os.Getenv("ESPER_GPU_BUNDLE") != "" {
			t.Skip("no ptx/ beside the GPU bundle's test binary")
		}
		t.Fatal(err)
	}
	return b
}

// ptxStructParam returns the byte size of kernel's one by-value struct
// parameter in the PTX b, or false when the kernel has no such single
// parameter.
func ptxStructParam(b []byte, kernel string) (int, bool) {
	re := regexp.MustCompile(`\.visible \.entry ` + kernel + `\(\s*\.param \.align 8 \.b8 ` + kernel + `_param_0\[(\d+)\]\s*\)`)
	m := re.FindSubmatch(b)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(string(m[1]))
	return n, err == nil
}
