package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// gemmOut runs the float32 gemm once on fresh random operands drawn from
// seed (the same for every call with that seed) and returns C and the
// scale Σ|a||b| of each element, for comparing paths.
func gemmOut(seed uint64, m, n, k int, ta, tb, acc bool) (c, scale []float32) {
	rng := rand.New(rand.NewPCG(seed, 7))
	lda, ldb, ldc := k, n, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	rowsA, rowsB := m, k
	if ta {
		rowsA = k
	}
	if tb {
		rowsB = n
	}
	fill := func(n int) []float32 {
		x := make([]float32, max(n, 1))
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	a, b, c := fill(rowsA*lda), fill(rowsB*ldb), fill(m*ldc)
	scale = make([]float32, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			s := math.Abs(float64(c[i*ldc+j]))
			for p := 0; p < k; p++ {
				var x, y float32
				if ta {
					x = a[p*lda+i]
				} else {
					x = a[i*lda+p]
				}
				if tb {
					y = b[j*ldb+p]
				} else {
					y = b[p*ldb+j]
				}
				s += math.Abs(float64(x) * float64(y))
			}
			scale[i*n+j] = float32(s)
		}
	}
	sc := newGemmScratch[float32](m, n, k)
	defer sc.free()
	gemm(m, n, k, a, lda, ta, b, ldb, tb, c, ldc, acc, sc)
	return c, scale
}

// FuzzGEMM checks every float32 micro-kernel the CPU supports, and the
// unpacked small-product loops, against the pure-Go micro-kernel (the
// oracle) on random shapes up to 80 with ragged edges, both
// transpositions and accumulation: each element within 2.4e-7·(k+2) of
// Σ|a||b| of the oracle's. The seed corpus runs in every `go test`.
func FuzzGEMM(f *testing.F) {
	for _, s := range [][3]int{{1, 1, 1}, {6, 16, 9}, {7, 17, 3}, {13, 33, 40}, {12, 32, 1}, {80, 5, 80}, {4, 4, 16}} {
		for tr := 0; tr < 8; tr++ {
			f.Add(uint64(s[0]*s[1]+tr), s[0], s[1], s[2], uint8(tr))
		}
	}
	f.Fuzz(func(t *testing.T, seed uint64, m, n, k int, flags uint8) {
		if m <= 0 || n <= 0 || k <= 0 || m > 80 || n > 80 || k > 80 {
			t.Skip("shape outside 1..80")
		}
		ta, tb, acc := flags&1 != 0, flags&2 != 0, flags&4 != 0
		prev := ForcePureGoGEMM(true)
		small := gemmSmall
		gemmSmall = 0
		want, scale := gemmOut(seed, m, n, k, ta, tb, acc)
		gemmSmall = math.MaxInt
		direct, _ := gemmOut(seed, m, n, k, ta, tb, acc)
		gemmSmall = small
		ForcePureGoGEMM(false)
		defer ForcePureGoGEMM(prev)
		paths := map[string][]float32{"direct": direct}
		for _, kern := range sgemmKernels {
			withSgemm(kern, func() { paths[kern.name], _ = gemmOut(seed, m, n, k, ta, tb, acc) })
		}
		tol := 2.4e-7 * float64(k+2)
		for name, got := range paths {
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					g, w := got[i*n+j], want[i*n+j]
					if d := math.Abs(float64(g) - float64(w)); d > tol*float64(scale[i*n+j])+1e-30 {
						t.Fatalf("%s %dx%dx%d ta=%v tb=%v acc=%v: C[%d,%d] = %v, oracle %v", name, m, n, k, ta, tb, acc, i, j, g, w)
					}
				}
			}
		}
	})
}
