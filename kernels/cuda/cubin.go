package cuda

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// Ahead-of-time machine code: mkptx.sh assembles every embedded PTX
// module for the architectures most runs use (sm_90: H100, H200) into
// cubin/<module>.<arch>.cubin.gz, and lists in cubin/SOURCES the SHA-256
// of the PTX file each was assembled from. Open loads a module's cubin
// for its device's architecture where there is one and it was assembled
// from the very PTX embedded beside it; any other device, module or
// mismatch loads the PTX, which the driver compiles (13.7 s for all of
// them on a fresh H200, whose compute cache was empty). A cubin the
// driver refuses falls back to its PTX too. ESPER_CUDA_CUBIN=off loads
// PTX only (the driver's own compile, for comparison).

//go:embed cubin
var cubinFiles embed.FS

// cubinSources maps "arch module" to the SHA-256 (hex) of the PTX file
// the module's cubin for arch was assembled from (cubin/SOURCES).
func cubinSources() (map[string]string, error) {
	b, err := cubinFiles.ReadFile("cubin/SOURCES")
	if err != nil {
		return nil, err
	}
	return parseCubinSources(b)
}

// parseCubinSources reads cubin/SOURCES: '#' comments and lines of
// "arch module sha256".
func parseCubinSources(b []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || len(f[2]) != 64 {
			return nil, fmt.Errorf("cuda: cubin/SOURCES line %d: %q, want \"arch module sha256\"", n, line)
		}
		out[f[0]+" "+f[1]] = f[2]
	}
	return out, sc.Err()
}

// cubinFor returns module's cubin for arch (such as "sm_90"), unpacked,
// when there is one assembled from ptx (the module's embedded PTX file's
// bytes); nil, and why not, otherwise.
func cubinFor(sources map[string]string, arch, module string, ptx []byte) ([]byte, string) {
	want, ok := sources[arch+" "+module]
	if !ok {
		return nil, "no " + arch + " cubin"
	}
	if sum := sha256.Sum256(ptx); hex.EncodeToString(sum[:]) != want {
		return nil, "its " + arch + " cubin is older than its PTX (run make ptx)"
	}
	f, err := cubinFiles.Open("cubin/" + module + "." + arch + ".cubin.gz")
	if err != nil {
		return nil, err.Error()
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Sprintf("its %s cubin: %v", arch, err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		return nil, fmt.Sprintf("its %s cubin: %v", arch, err)
	}
	if !bytes.HasPrefix(b, []byte("\x7fELF")) {
		return nil, "its " + arch + " cubin is not an ELF image"
	}
	return b, ""
}

// ptxModule is a module loaded from PTX, and why.
type ptxModule struct{ module, why string }

// codeSummary is Device.KernelCode's text: n modules from arch cubins,
// and the modules loaded from PTX, each with why (once when all share
// it).
func codeSummary(arch string, fromCubin int, fromPTX []ptxModule) string {
	if len(fromPTX) == 0 {
		return fmt.Sprintf("%d modules from %s cubins", fromCubin, arch)
	}
	same := true
	parts := make([]string, len(fromPTX))
	for i, m := range fromPTX {
		same = same && m.why == fromPTX[0].why
		parts[i] = m.module + " (" + m.why + ")"
	}
	if fromCubin == 0 && same {
		return fmt.Sprintf("%d modules from PTX compiled by the driver (%s)", len(fromPTX), fromPTX[0].why)
	}
	return fmt.Sprintf("%d modules from %s cubins, %d from PTX compiled by the driver: %s", fromCubin, arch, len(fromPTX), strings.Join(parts, ", "))
}

// kernelNames lists the entry points (".entry name(") of a PTX module.
func kernelNames(ptx string) []string {
	var out []string
	for _, line := range strings.Split(ptx, "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == ".entry" {
				out = append(out, strings.TrimSuffix(f[i+1], "("))
				break
			}
		}
	}
	return out
}
