package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestKernelDefinesMatchGo: the sizes a kernel's source fixes with
// #define and the Go side packs or allocates by are the same numbers.
// Most of them show in no PTX (a loop bound, an array's length), so a
// change to one side alone would pass every other test here and overrun
// a buffer on the GPU.
func TestKernelDefinesMatchGo(t *testing.T) {
	for _, c := range []struct {
		file, name string
		goValue    int
	}{
		{"graph.cu", "GAT_JOIN", gatJoin},
		{"graph.cu", "GW_HEADS", gwHeads},
		{"graph.cu", "GW_CW", gwChunks},
		{"graph.cu", "GW_WARPS", gwWarps},
		{"graph.cu", "GW_F", gwAttr},
		{"graph.cu", "GSUM_JOIN", gsumJoin},
		{"graph.cu", "RH_MAX", rhMax},
		{"graph.cu", "RH_ROWS", rhRows},
		{"graph.cu", "RH_IN", rhIn},
		{"common.cuh", "GATHER_IN_PIECES", gatherInPieces},
		{"norm.cu", "LN_IN", lnIn},
		{"matmul.cu", "GEMM_JOIN", gemmJoin},
		{"matmul.cu", "GJ_T", gemmJoinTile},
		{"matmul.cu", "GJ_SKINNY", gemmJoinSkinny},
		{"matmul.cu", "GJ_COLS", gemmJoinCols},
		{"matmul.cu", "GJ_TC", gemmJoinTileTC},
		{"norm.cu", "LN_JOIN", lnJoin},
	} {
		src, err := os.ReadFile(filepath.Join("src", c.file))
		if err != nil {
			if os.Getenv("ESPER_GPU_BUNDLE") != "" {
				t.Skip("no src/ beside the GPU bundle's test binary")
			}
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^#define ` + c.name + ` (\d+)\s*$`).FindSubmatch(src)
		if m == nil {
			t.Errorf("src/%s: no #define %s", c.file, c.name)
			continue
		}
		if v, _ := strconv.Atoi(string(m[1])); v != c.goValue {
			t.Errorf("src/%s: #define %s %d, the Go side's %d", c.file, c.name, v, c.goValue)
		}
	}
}
