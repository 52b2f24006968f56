package cuda

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestGraphParamBlocksMatchThePTX: the Go parameter blocks of
// gat_mean_f32 and gather_concat_f32 have the byte sizes the compiled
// kernels declare for their one parameter, so that a launch hands every
// word where the kernel reads it (checked without a GPU, on the PTX).
func TestGraphParamBlocksMatchThePTX(t *testing.T) {
	b, err := os.ReadFile("ptx/graph.ptx")
	if err != nil {
		if os.Getenv("ESPER_GPU_BUNDLE") != "" {
			t.Skip("no ptx/ beside the GPU bundle's test binary")
		}
		t.Fatal(err)
	}
	for _, k := range []struct {
		name  string
		words int
	}{{"gat_mean_f32", gatMultiWords}, {"gather_concat_f32", gatherCatWords}} {
		re := regexp.MustCompile(`\.visible \.entry ` + k.name + `\(\s*\.param \.align 8 \.b8 ` + k.name + `_param_0\[(\d+)\]\s*\)`)
		m := re.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: no entry with one by-value parameter in ptx/graph.ptx", k.name)
			continue
		}
		n, _ := strconv.Atoi(string(m[1]))
		if n != 8*k.words {
			t.Errorf("%s: the PTX's parameter is %d bytes, the Go block %d", k.name, n, 8*k.words)
		}
		if n > 4096 {
			t.Errorf("%s: %d bytes of parameters, past the driver's 4 KiB", k.name, n)
		}
	}
}

// TestGraphPacks: the words land where struct GatMulti and struct
// GatherCat (src/graph.cu) read them.
func TestGraphPacks(t *testing.T) {
	var g [gatMultiWords]uint64
	rels := []gatRel{{lds: 3, ldd: 4, f: 5}, {lds: 6, ldd: 7, f: 8}}
	for i := range rels[1].ptrs {
		rels[1].ptrs[i] = uint64(100 + i)
	}
	gatMultiPack(&g, 42, 9, 4, 128, 0.2, 0.5, 8, rels)
	want := map[int]uint64{0: 42, 1: 2, 2: 9, 3: 4, 4: 128, 5: math.Float64bits(0.2), 6: math.Float64bits(0.5), 7: 8,
		8 + 11: 3, 8 + 12: 4, 8 + 13: 5, 22: 100, 22 + 10: 110, 22 + 11: 6, 22 + 12: 7, 22 + 13: 8, 36: 0}
	for i, v := range want {
		if g[i] != v {
			t.Errorf("GatMulti word %d = %d, want %d", i, g[i], v)
		}
	}
	var c [gatherCatWords]uint64
	width := gatherCatPack(&c, 7, 11, 40, []gatherPart{{x: 1, src: 2, rowPtr: 3, order: 4, w: 16, col: 0, kind: gatherMean},
		{x: 5, w: 20, col: 16, kind: gatherCopy}, {w: 2, col: 38, kind: gatherOnes}})
	if width != 38 {
		t.Errorf("local width %d, want 38", width)
	}
	want = map[int]uint64{0: 7, 1: 11, 2: 40, 3: 38, 4: 3, 5: 1, 6: 2, 7: 3, 8: 4, 9: 16, 10: 0, 11: 0, 12: gatherMean,
		13: 5, 17: 20, 18: 16, 19: 16, 20: gatherCopy, 25: 2, 26: 38, 27: 36, 28: gatherOnes, 29: 0}
	for i, v := range want {
		if c[i] != v {
			t.Errorf("GatherCat word %d = %d, want %d", i, c[i], v)
		}
	}
}
