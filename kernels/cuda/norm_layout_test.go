package cuda

import (
	"math"
	"regexp"
	"strconv"
	"testing"
)

// TestBatchNormTailsMatchThePTX: batch norm's partial launches take a
// last struct argument (BnStatsTail, BnBwdTail in src/norm.cu) whose
// byte size in the PTX is that of the Go words (bnStatsTail.words,
// bnBwdTail.words), every entry point of every dtype; the words put each
// field where the struct has it. It runs without a GPU.
func TestBatchNormTailsMatchThePTX(t *testing.T) {
	b := readPTX(t, "norm.ptx")
	stats, bwd := len(bnStatsTail{}.words()), len(bnBwdTail{}.words())
	entries := map[string]int{}
	for _, dt := range []string{"f32", "bf16", "f16"} {
		entries["bn_stats_"+dt] = stats
		for _, k := range []string{"bn_bwd_sums_", "bn_bwd_sums_relu_", "bn_bwd_sums_relupool_"} {
			entries[k+dt] = bwd
		}
	}
	for name, words := range entries {
		// The entry's parameters, up to the closing parenthesis; the tail
		// is the last.
		re := regexp.MustCompile(`\.visible \.entry ` + name + `\(([^)]*)\)`)
		m := re.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: no entry in ptx/norm.ptx", name)
			continue
		}
		params := regexp.MustCompile(`\.param [^\n,]*`).FindAll(m[1], -1)
		last := string(params[len(params)-1])
		sz := regexp.MustCompile(`\.b8 \w+\[(\d+)\]`).FindStringSubmatch(last)
		if sz == nil {
			t.Errorf("%s: its last parameter %q is no struct", name, last)
			continue
		}
		if n, _ := strconv.Atoi(sz[1]); n != 8*words {
			t.Errorf("%s: the tail is %d bytes in the PTX, %d in Go", name, n, 8*words)
		}
	}
	w := bnStatsTail{mean: 1, rstd: 2, rm: 3, rv: 4, cnt: 5, momentum: 0.1, eps: 1e-5, counters: 7}.words()
	want := []uint64{1, 2, 3, 4, 5, uint64(math.Float32bits(0.1)) | uint64(math.Float32bits(1e-5))<<32, 7}
	for i := range want {
		if w[i] != want[i] {
			t.Errorf("BnStatsTail word %d = %#x, want %#x", i, w[i], want[i])
		}
	}
	w = bnBwdTail{sums: 1, dw: 2, db: 3, c: 4, acc: true, counters: 6}.words()
	for i, v := range []uint64{1, 2, 3, 4, 1, 6} {
		if w[i] != v {
			t.Errorf("BnBwdTail word %d = %d, want %d", i, w[i], v)
		}
	}
}
