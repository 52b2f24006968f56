package cpu

import (
	"testing"

	"github.com/esper-go/esper/tensor"
)

func TestScratchPoolsSizeClasses(t *testing.T) {
	for _, tc := range []struct{ n, class int }{{1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {1000, 10}, {1024, 10}, {1025, 11}} {
		if got := sizeClass(tc.n); got != tc.class {
			t.Errorf("sizeClass(%d) = %d, want %d", tc.n, got, tc.class)
		}
	}
	if b := getBuf[float32](0); b != nil {
		t.Errorf("getBuf(0) = %v, want nil", b)
	}
	b := getBuf[float32](300)
	if len(b) != 300 || cap(b) != 512 {
		t.Fatalf("getBuf(300): len %d cap %d, want 300 and 512", len(b), cap(b))
	}
	// A buffer not from getBuf (capacity not a power of two) is refused.
	putBuf(make([]float32, 3))
	for i := range b {
		b[i] = 7
	}
	putBuf(b)
	// Whatever comes back for the same class has the right length and
	// capacity; the pool may or may not hand back the same buffer.
	c := getBuf[float32](257)
	if len(c) != 257 || cap(c) != 512 {
		t.Fatalf("getBuf(257): len %d cap %d, want 257 and 512", len(c), cap(c))
	}
	d := getBuf[float64](257)
	if len(d) != 257 || cap(d) != 512 {
		t.Fatalf("getBuf[float64](257): len %d cap %d", len(d), cap(d))
	}
}

// TestScratchPoolsAllocateNothingWarm: once a class has a buffer, taking
// and returning one allocates nothing (no box per putBuf), and a tiny
// float64 MatMulAdd (computed into a pooled temporary, then added)
// allocates nothing either. (Not under the race detector, whose
// sync.Pool drops a share of what it is given on purpose.)
func TestScratchPoolsAllocateNothingWarm(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	putBuf(getBuf[float32](100))
	putBuf(getBuf[float64](100))
	if a := testing.AllocsPerRun(100, func() {
		putBuf(getBuf[float32](100))
		putBuf(getBuf[float64](100))
	}); a != 0 {
		t.Errorf("getBuf then putBuf: %v allocations per run, want 0", a)
	}
	be := &Backend{}
	rng := tensor.NewRNG(1)
	x := tensor.Normal(rng, tensor.F64, 0, 1, 4, 16)
	g := tensor.Normal(rng, tensor.F64, 0, 1, 4, 4)
	dw := tensor.Zeros(tensor.F64, 4, 16)
	be.MatMulAdd(dw, g, x, true, false)
	if a := testing.AllocsPerRun(100, func() { be.MatMulAdd(dw, g, x, true, false) }); a != 0 {
		t.Errorf("tiny float64 MatMulAdd: %v allocations per run, want 0", a)
	}
}
