package cuda

import (
	"regexp"
	"strconv"
	"testing"
)

// ptxLaunchBounds returns the .maxntid and .minnctapersm kernel's entry
// in ptx/file declares (0 where it declares none).
func ptxLaunchBounds(t *testing.T, file, kernel string) (maxThreads, minBlocks int) {
	t.Helper()
	m := regexp.MustCompile(`\.entry ` + kernel + `\([^)]*\)\s*((?:\.\w+[^\n]*\n\s*)*)\{`).FindSubmatch(readPTX(t, file))
	if m == nil {
		t.Fatalf("%s: no entry in ptx/%s", kernel, file)
	}
	dirs := string(m[1])
	if s := regexp.MustCompile(`\.maxntid (\d+)`).FindStringSubmatch(dirs); s != nil {
		maxThreads, _ = strconv.Atoi(s[1])
	}
	if s := regexp.MustCompile(`\.minnctapersm (\d+)`).FindStringSubmatch(dirs); s != nil {
		minBlocks, _ = strconv.Atoi(s[1])
	}
	return maxThreads, minBlocks
}

// TestGATLaunchWithinBounds: gat_mean_f32 is compiled for the blocks its
// launches use (a launch of more threads than .maxntid fails), and
// W2's batch-64 launch fits one wave of 132 multiprocessors at the
// declared occupancy; gatThreads stays within [32, gatMaxThreads] and a
// warp per head or a thread per accumulator, whichever is more.
func TestGATLaunchWithinBounds(t *testing.T) {
	maxT, minB := ptxLaunchBounds(t, "graph.ptx", "gat_mean_f32")
	if maxT != gatMaxThreads || minB != gatMinBlocks {
		t.Fatalf("gat_mean_f32 is compiled for %d threads, %d blocks a multiprocessor; the Go side launches up to %d and counts on %d",
			maxT, minB, gatMaxThreads, gatMinBlocks)
	}
	// W2 at batch 64: 192 destination nodes, 4 relations a launch.
	if blocks := 192 * 4; blocks > 132*gatMinBlocks {
		t.Errorf("%d blocks exceed one wave of %d", blocks, 132*gatMinBlocks)
	}
	for _, c := range []struct{ heads, ch, want int }{
		{4, 128, 128}, {1, 8, 32}, {2, 16, 64}, {8, 4, 128}, {1, 1, 32}, {3, 20, 96},
	} {
		if got := gatThreads(c.heads, c.ch); got != c.want {
			t.Errorf("gatThreads(%d, %d) = %d, want %d", c.heads, c.ch, got, c.want)
		}
	}
	// The warp kernels: blocks of gwThreads, gwMinBlocks a
	// multiprocessor; W2's batch-64 joined launch (192 slot nodes, 10
	// relations along y) in one wave, and no more blocks than nodes
	// need.
	for _, k := range []string{"gat_mean_warp_f32", "gat_mean_join_warp_f32"} {
		if maxT, minB := ptxLaunchBounds(t, "graph.ptx", k); maxT != gwThreads || minB != gwMinBlocks {
			t.Fatalf("%s is compiled for %d threads, %d blocks a multiprocessor; the Go side launches %d and counts on %d",
				k, maxT, minB, gwThreads, gwMinBlocks)
		}
	}
	if blocks := gatWarpBlocks(192) * 10; blocks > 132*gwMinBlocks {
		t.Errorf("the warp kernels' %d blocks exceed one wave of %d", blocks, 132*gwMinBlocks)
	}
	for _, c := range []struct{ nd, want int64 }{{1, 1}, {4, 1}, {5, 2}, {192, 48}, {4 * gatMaxBlocks, gatMaxBlocks}, {4*gatMaxBlocks + 1, gatMaxBlocks}} {
		if got := gatWarpBlocks(c.nd); int64(got) != c.want {
			t.Errorf("gatWarpBlocks(%d) = %d, want %d", c.nd, got, c.want)
		}
	}
	for _, c := range []struct {
		heads, ch, f int
		fits         bool
	}{{4, 128, 3, true}, {1, 1, 0, true}, {2, 5, 4, true}, {5, 8, 3, false}, {4, 129, 3, false}, {6, 40, 3, false},
		{0, 8, 3, false}, {4, 128, 5, false}} {
		if got := gatWarpFits(c.heads, c.ch, c.f); got != c.fits {
			t.Errorf("gatWarpFits(%d, %d, %d) = %v, want %v", c.heads, c.ch, c.f, got, c.fits)
		}
	}
	// gat_aggregate_f32 declares no bound (any block up to 1024 runs).
	if maxT, _ := ptxLaunchBounds(t, "graph.ptx", "gat_aggregate_f32"); maxT != 0 && maxT < gatMaxThreads {
		t.Errorf("gat_aggregate_f32 is compiled for %d threads, launched with up to %d", maxT, gatMaxThreads)
	}
}
