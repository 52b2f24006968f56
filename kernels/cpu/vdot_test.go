package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
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

// TestDot4F32: four dot products sharing a agree with float64 references
// for lengths 0 to 70 and a row stride longer than the rows.
func TestDot4F32(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n <= 70; n++ {
		ldb := n + 5
		a := make([]float32, n)
		b := make([]float32, 4*ldb)
		for i := range a {
			a[i] = float32(rng.NormFloat64())
		}
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		var out [4]float32
		dot4F32(a, b, ldb, &out)
		for r := range out {
			var want, mag float64
			for i := range a {
				want += float64(a[i]) * float64(b[r*ldb+i])
				mag += math.Abs(float64(a[i]) * float64(b[r*ldb+i]))
			}
			if math.Abs(float64(out[r])-want) > 1e-6*(mag+1) {
				t.Fatalf("n=%d row %d: %v, want %v", n, r, out[r], want)
			}
		}
	}
}

// TestDot2x4: dot2x4F32 gives, bit for bit, the two dot4F32 results of
// its two rows of a, for every length from 1 to 40.
func TestDot2x4(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for n := 1; n <= 40; n++ {
		lda, ldb := n+3, n+5
		a, b := make([]float32, 2*lda), make([]float32, 4*ldb)
		for i := range a {
			a[i] = float32(rng.NormFloat64())
		}
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		var got [8]float32
		dot2x4F32(a, lda, n, b, ldb, &got)
		for i := 0; i < 2; i++ {
			var want [4]float32
			dot4F32(a[i*lda:i*lda+n], b, ldb, &want)
			for r := range want {
				if math.Float32bits(got[4*i+r]) != math.Float32bits(want[r]) {
					t.Fatalf("n=%d row %d col %d: %v, want %v", n, i, r, got[4*i+r], want[r])
				}
			}
		}
	}
}

// TestSum4Kernel: sum4 on float32 (through sum4AVX2 where it runs) gives
// bitwise the scalar four-accumulator sum, for lengths around the
// kernel's 4-element steps, with large and small magnitudes mixed so
// that the order of the additions shows, and infinities and NaN.
func TestSum4Kernel(t *testing.T) {
	scalar := func(xs []float32) float64 {
		var a [4]float64
		j := 0
		for ; j+4 <= len(xs); j += 4 {
			for l := range a {
				a[l] += float64(xs[j+l])
			}
		}
		for ; j < len(xs); j++ {
			a[0] += float64(xs[j])
		}
		return (a[0] + a[1]) + (a[2] + a[3])
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 3, 4, 7, 8, 9, 12, 13, 127, 128, 1000, 4099} {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(16)-8)))
		}
		require.Equal(t, math.Float64bits(scalar(xs)), math.Float64bits(sum4(xs)), "n = %d", n)
	}
	xs := []float32{1, 2, float32(math.Inf(1)), 4, 5, 6, 7, 8, 9}
	require.True(t, math.IsInf(sum4(xs), 1))
	xs[5] = float32(math.NaN())
	require.True(t, math.IsNaN(sum4(xs)))
}
