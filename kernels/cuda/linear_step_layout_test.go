package cuda

import (
	"math"
	"testing"
)

// TestLinearCESGDMatchesThePTX: struct LinearCESGD's byte size in the
// compiled kernel is the Go block's, and each field lands in the word
// the struct's order puts it.
func TestLinearCESGDMatchesThePTX(t *testing.T) {
	n, ok := ptxStructParam(readPTX(t, "softmax.ptx"), "linear_ce_sgd_f32")
	if !ok {
		t.Fatal("no linear_ce_sgd_f32 entry with one by-value parameter in ptx/softmax.ptx")
	}
	if n != 8*linearCESGDWords {
		t.Fatalf("the PTX's parameter is %d bytes, the Go block %d", n, 8*linearCESGDWords)
	}
	a := linearCESGDArgs{linearCESmallArgs: linearCESmallArgs{logits: 1, loss: 2, x: 3, w: 4, b: 5, t: 6, m: 7, n: 8, k: 9,
		eps: 0.25, flags: 5, ignore: -100, lsum: 12, acc: 13, dx: 14},
		gw: 15, gb: 16, p: 17, g: 18, mom: 19, hyper: 20, mu: 0.9, damp: 1, wd: 0.5, nesterov: 1, maximize: 0, zero: 1, np: 68}
	w := a.words()
	if len(w) != linearCESGDWords {
		t.Fatalf("%d words, want %d", len(w), linearCESGDWords)
	}
	f := func(v float32) uint64 { return uint64(math.Float32bits(v)) }
	want := map[int]uint64{0: 1, 5: 6, 6: 7, 8: 9, 9: f(0.25) | 5<<32, 10: uint64(0xffffffffffffff9c), 11: 12, 15: 16,
		16: 17, 19: 20, 20: f(0.9) | f(1)<<32, 21: f(0.5) | 1<<32, 22: 1 << 32, 23: 68}
	for i, v := range want {
		if w[i] != v {
			t.Errorf("word %d = %#x, want %#x", i, w[i], v)
		}
	}
}
