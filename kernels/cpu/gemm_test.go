package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// gemmPaths runs f once with each assembly micro-kernel the CPU supports,
// once with the pure-Go one and once with the unpacked loops of
// gemmDirect, each on every problem size.
func gemmPaths(t *testing.T, f func(t *testing.T)) {
	prev := ForcePureGoGEMM(true)
	small := gemmSmall
	gemmSmall = 0
	t.Run(GEMMKernel(), f)
	gemmSmall = math.MaxInt
	t.Run("direct", f)
	gemmSmall = small
	ForcePureGoGEMM(false)
	defer ForcePureGoGEMM(prev)
	for _, k := range sgemmKernels {
		withSgemm(k, func() { t.Run(GEMMKernel(), f) })
	}
}

// withSgemm runs f with k as the float32 assembly kernel, on every
// problem size and row count (gemmSmall and gemmSmallRows 0).
func withSgemm(k sgemmKernel, f func()) {
	saved, small, rows := sgemmAsm, gemmSmall, gemmSmallRows
	sgemmAsm, gemmSmall, gemmSmallRows = k, 0, 0
	defer func() { sgemmAsm, gemmSmall, gemmSmallRows = saved, small, rows }()
	f()
}

// checkGemm32 runs the float32 gemm on one problem with padded leading
// dimensions and compares it with a float64 reference, with a tolerance
// scaled by k and by Σ|a||b| (+|c0| when accumulating). Elements of C
// outside the m×n tile must be left untouched.
func checkGemm32(t *testing.T, rng *rand.Rand, m, n, k int, ta, tb, acc bool) {
	t.Helper()
	ar, ac := m, k
	if ta {
		ar, ac = k, m
	}
	br, bc := k, n
	if tb {
		br, bc = n, k
	}
	lda, ldb, ldc := ac+rng.IntN(3), bc+rng.IntN(3), n+rng.IntN(3)
	fill := func(rows, ld int) []float32 {
		x := make([]float32, max(rows*ld, 1))
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	a, b, c := fill(ar, lda), fill(br, ldb), fill(m, ldc)
	c0 := append([]float32(nil), c...)
	sc := newGemmScratch[float32](m, n, k)
	defer sc.free()
	gemm(m, n, k, a, lda, ta, b, ldb, tb, c, ldc, acc, sc)
	for i := 0; i < m; i++ {
		for j := 0; j < ldc; j++ {
			got := c[i*ldc+j]
			if j >= n {
				if got != c0[i*ldc+j] {
					t.Fatalf("%dx%dx%d ta=%v tb=%v acc=%v: C[%d,%d] outside the tile changed", m, n, k, ta, tb, acc, i, j)
				}
				continue
			}
			var want, scale float64
			if acc {
				want, scale = float64(c0[i*ldc+j]), math.Abs(float64(c0[i*ldc+j]))
			}
			for p := 0; p < k; p++ {
				var x, y float64
				if ta {
					x = float64(a[p*lda+i])
				} else {
					x = float64(a[i*lda+p])
				}
				if tb {
					y = float64(b[j*ldb+p])
				} else {
					y = float64(b[p*ldb+j])
				}
				want += x * y
				scale += math.Abs(x * y)
			}
			if d := math.Abs(float64(got) - want); d > 1.2e-7*float64(k+2)*scale+1e-30 {
				t.Fatalf("%dx%dx%d ta=%v tb=%v acc=%v: C[%d,%d] = %v, want %v (|diff| %g, scale %g)",
					m, n, k, ta, tb, acc, i, j, got, want, d, scale)
			}
		}
	}
}

// TestGemmEdges covers every edge remainder of the micro-tiles (m, n, k in
// 1..33), both transpositions, accumulate on and off, on both kernels.
func TestGemmEdges(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		ks := []int{1, 2, 3, 5, 8, 17, 33}
		if testing.Short() {
			ks = []int{1, 5, 33}
		}
		for m := 1; m <= 33; m++ {
			for n := 1; n <= 33; n++ {
				for _, k := range ks {
					tr := rng.IntN(4)
					checkGemm32(t, rng, m, n, k, tr&1 != 0, tr&2 != 0, rng.IntN(2) == 0)
				}
			}
		}
		for k := 1; k <= 33; k++ {
			for _, mn := range [][2]int{{1, 1}, {6, 16}, {7, 17}, {13, 33}} {
				for tr := 0; tr < 8; tr++ {
					checkGemm32(t, rng, mn[0], mn[1], k, tr&1 != 0, tr&2 != 0, tr&4 != 0)
				}
			}
		}
	})
}

// TestGemmLarge crosses every blocking boundary (gemmMC, gemmKC, gemmNC).
func TestGemmLarge(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, s := range [][3]int{{97, 33, 257}, {200, 530, 300}, {64, gemmNC + 6, 40}, {193, 65, gemmKC + 88}, {12, 32, gemmKC + 1}} {
			for tr := 0; tr < 8; tr++ {
				checkGemm32(t, rng, s[0], s[1], s[2], tr&1 != 0, tr&2 != 0, tr&4 != 0)
			}
		}
	})
}

// TestGemmAsmMatchesPureGo compares the two kernels directly through
// MatMul-sized problems: they differ only by FMA rounding.
func TestGemmAsmMatchesPureGo(t *testing.T) {
	if sgemmAsm.fn == nil {
		t.Skip("no assembly GEMM kernel on this build/CPU")
	}
	for _, kern := range sgemmKernels {
		withSgemm(kern, func() { asmMatchesPureGo(t) })
	}
}

func asmMatchesPureGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range [][3]int{{1, 1, 1}, {6, 16, 7}, {31, 45, 29}, {128, 96, 300}} {
		m, n, k := s[0], s[1], s[2]
		a, b := normals32(rng, m*k), normals32(rng, k*n)
		run := func(pure bool) []float32 {
			defer ForcePureGoGEMM(ForcePureGoGEMM(pure))
			c := make([]float32, m*n)
			sc := newGemmScratch[float32](m, n, k)
			defer sc.free()
			gemm(m, n, k, a, k, false, b, n, false, c, n, false, sc)
			return c
		}
		asm, ref := run(false), run(true)
		for i := range asm {
			if d := math.Abs(float64(asm[i] - ref[i])); d > 1e-5*float64(k)*(1+math.Abs(float64(ref[i]))) {
				t.Fatalf("%s %v: element %d: asm %v, pure-Go %v", GEMMKernel(), s, i, asm[i], ref[i])
			}
		}
	}
}

// TestMatMulConvBothKernels reruns the MatMul and convolution tests on the
// pure-Go kernel and on every supported assembly kernel other than the
// default (which the plain runs use).
func TestMatMulConvBothKernels(t *testing.T) {
	if sgemmAsm.fn == nil {
		t.Skip("no assembly GEMM kernel: the plain tests already use pure Go")
	}
	defer ForcePureGoGEMM(ForcePureGoGEMM(true))
	tests := map[string]func(*testing.T){
		"MatMul": TestMatMul, "MatMulDeterministic": TestMatMulDeterministic,
		"Conv2d": TestConv2d, "Conv2dBackwardWeightDeterministic": TestConv2dBackwardWeightDeterministic,
	}
	for name, f := range tests {
		t.Run(fmt.Sprint(name, "/purego"), f)
	}
	ForcePureGoGEMM(false)
	for _, k := range sgemmKernels[1:] {
		withSgemm(k, func() {
			for name, f := range tests {
				t.Run(fmt.Sprint(name, "/", k.name), f)
			}
		})
	}
}

// TestGemmDirectFewRows: the direct path's A·Bᵀ for a few rows (four
// rows per pass with AVX-512, then two, then one) adds the product to C
// within float32 rounding of a float64 reference, for ragged row and
// column counts and depths around the 16-lane chunks.
func TestGemmDirectFewRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, m := range []int{1, 2, 3, 4, 5, 6, 7, 8} {
		for _, n := range []int{3, 4, 5, 17, 64} {
			for _, k := range []int{15, 16, 17, 100, 256} {
				lda, ldb, ldc := k+3, k+1, n+2
				a, b, c := normals32(rng, m*lda), normals32(rng, n*ldb), normals32(rng, m*ldc)
				want := make([]float64, len(c))
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						s := float64(c[i*ldc+j])
						for p := 0; p < k; p++ {
							s += float64(a[i*lda+p]) * float64(b[j*ldb+p])
						}
						want[i*ldc+j] = s
					}
				}
				pad := append([]float32(nil), c...)
				gemmDirectF32(m, n, k, a, lda, false, b, ldb, true, c, ldc)
				for i := 0; i < m; i++ {
					for j := 0; j < ldc; j++ {
						got := float64(c[i*ldc+j])
						if j >= n {
							if c[i*ldc+j] != pad[i*ldc+j] {
								t.Fatalf("m=%d n=%d k=%d: column %d past n written", m, n, k, j)
							}
							continue
						}
						if d := math.Abs(got - want[i*ldc+j]); d > 1e-4*(1+math.Abs(want[i*ldc+j])) {
							t.Fatalf("m=%d n=%d k=%d: c[%d,%d] = %v, want %v", m, n, k, i, j, got, want[i*ldc+j])
						}
					}
				}
			}
		}
	}
}

// normals32 returns n standard normal float32 values from rng.
func normals32(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}
