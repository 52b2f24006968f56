package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDotAxpyF32: the vector dot product and axpy agree with float64
// references on every length from 0 to 70 (blocks of 32, of 8, and the
// scalar tail), at offsets that misalign the operands.
func TestDotAxpyF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 70; n++ {
		for _, off := range []int{0, 1, 3} {
			a := make([]float32, n+off)
			b := make([]float32, n+off)
			y := make([]float32, n+off)
			for i := range a {
				a[i], b[i], y[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			av, bv, yv := a[off:], b[off:], y[off:]
			var want, mag float64
			for i := range av {
				want += float64(av[i]) * float64(bv[i])
				mag += math.Abs(float64(av[i]) * float64(bv[i]))
			}
			if got := float64(dotF32(av, bv)); math.Abs(got-want) > 1e-6*(mag+1) {
				t.Fatalf("dot n=%d off=%d: %v, want %v", n, off, got, want)
			}
			const alpha = 0.75
			wantY := make([]float64, n)
			for i := range yv {
				wantY[i] = float64(yv[i]) + alpha*float64(av[i])
			}
			axpyF32(alpha, av, yv)
			for i := range yv {
				if math.Abs(float64(yv[i])-wantY[i]) > 1e-6*(math.Abs(wantY[i])+1) {
					t.Fatalf("axpy n=%d off=%d: y[%d] = %v, want %v", n, off, i, yv[i], wantY[i])
				}
			}
		}
	}
}
