package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzTinyGEMM checks matmulSmall's AVX-512 float32 path (sgemmTiny for
// A·B and Aᵀ·B, sdot4x4 blocks for A·Bᵀ) against float64 sums on random
// shapes up to 40 with ragged edges: a row count that is not a multiple
// of 4, more than 16 columns, k that is not a multiple of 16, a bias or
// none, batched and broadcast operands. Each element must be within
// 2.4e-7·(k+2) of Σ|a||b|+|bias|. The seed corpus runs in every `go test`;
// without the kernels (purego, no AVX-512) the path reports false and
// the test says so.
func FuzzTinyGEMM(f *testing.F) {
	for _, s := range [][3]int{{4, 4, 16}, {4, 16, 4}, {1, 1, 1}, {5, 17, 3}, {8, 12, 33}, {7, 40, 40}, {16, 8, 17}} {
		for fl := 0; fl < 32; fl += 3 {
			f.Add(uint64(s[0]+7*s[2]+fl), s[0], s[1], s[2], uint8(fl))
		}
	}
	f.Fuzz(func(t *testing.T, seed uint64, m, n, k int, flags uint8) {
		if m <= 0 || n <= 0 || k <= 0 || m > 40 || n > 40 || k > 40 {
			t.Skip("shape outside 1..40")
		}
		ta, tb, withBias := flags&1 != 0, flags&2 != 0, flags&4 != 0
		batch, bcA, bcB := 1, false, false
		if flags&8 != 0 {
			batch, bcA, bcB = 2, true, flags&16 != 0
		}
		rng := rand.New(rand.NewPCG(seed, 11))
		fill := func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			return x
		}
		nA, nB := 1, 1
		if bcA {
			nA = batch
		}
		if bcB {
			nB = batch
		}
		a, b := fill(nA*m*k), fill(nB*k*n)
		var bias []float32
		if withBias {
			bias = fill(n)
		}
		c := fill(batch * m * n) // stale values must be overwritten
		if !matmulTinyF32(a, b, bias, c, batch, bcA, bcB, m, n, k, ta, tb, false) {
			if tinyAsm && k > 0 && !(tb && (ta || m%4 != 0 || n%4 != 0)) {
				t.Fatalf("matmulTinyF32 declined %dx%dx%d ta=%v tb=%v", m, n, k, ta, tb)
			}
			t.Skip("no AVX-512 tiny kernel for this product")
		}
		// The float64 products and, for the tolerance, Σ|a||b| (+|bias|).
		a64, b64 := make([]float64, len(a)), make([]float64, len(b))
		abs64 := func(dst []float64, src []float32) []float64 {
			for i, v := range src {
				dst[i] = math.Abs(float64(v))
			}
			return dst
		}
		want := refMatMul(toF64(a), toF64(b), batch, bcA, bcB, m, n, k, ta, tb)
		scale := refMatMul(abs64(a64, a), abs64(b64, b), batch, bcA, bcB, m, n, k, ta, tb)
		for o := range want {
			if bias != nil {
				want[o] += float64(bias[o%n])
				scale[o] += math.Abs(float64(bias[o%n]))
			}
			if d := math.Abs(float64(c[o]) - want[o]); d > 2.4e-7*float64(k+2)*scale[o]+1e-30 {
				t.Fatalf("%dx%dx%d batch %d ta=%v tb=%v bias=%v: C[%d] = %v, want %v", m, n, k, batch, ta, tb, withBias, o, c[o], want[o])
			}
		}
	})
}

// TestRowExps: the softmax statistics of rows of 1..20 columns (the
// AVX-512 kernel up to 16, expBlockF32 beyond) in buffers that end with
// the last row, so that the last rows take the end-aligned and the stack
// copy paths: maxima exact, exponentials within 2 ulp of math.Exp, sums
// within 1e-6; a row holding a NaN reports a NaN maximum and an infinite
// one a non-finite maximum, without disturbing the other rows.
func TestRowExps(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for c := 1; c <= 20; c++ {
		for n := 1; n <= 7; n++ {
			xs := make([]float32, n*c)
			for i := range xs {
				xs[i] = float32(rng.NormFloat64() * 3)
			}
			bad := -1
			if n > 2 {
				bad = rng.IntN(n)
				xs[bad*c+rng.IntN(c)] = float32(math.NaN())
			}
			inf := -1
			if n > 3 {
				inf = (bad + 1) % n
				xs[inf*c+rng.IntN(c)] = float32(math.Inf(1))
			}
			z := make([]float32, n*c)
			maxes := make([]float32, n)
			ses := make([]float64, n)
			rowExps(xs, c, 0, n, z, maxes, ses)
			for i := 0; i < n; i++ {
				row := xs[i*c : (i+1)*c]
				switch i {
				case bad:
					require.True(t, math.IsNaN(float64(maxes[i])), "c=%d n=%d row %d: NaN row max %v", c, n, i, maxes[i])
					continue
				case inf:
					require.False(t, finite32(maxes[i]), "c=%d n=%d row %d: Inf row max %v", c, n, i, maxes[i])
					continue
				}
				m := float32(math.Inf(-1))
				for _, v := range row {
					m = max(m, v)
				}
				require.Equal(t, m, maxes[i], "c=%d n=%d row %d max", c, n, i)
				var se float64
				for j, v := range row {
					want := math.Exp(float64(v - m))
					got := float64(z[i*c+j])
					require.InDelta(t, want, got, 2.4e-7*want+1e-37, "c=%d n=%d row %d col %d", c, n, i, j)
					se += got
				}
				require.InDelta(t, se, ses[i], 1e-6*se, "c=%d n=%d row %d sum", c, n, i)
			}
		}
	}
}

// TestCopyRows: strided row copies of every width up to 70 (the kernel's
// full moves, its tail mask, and the memmove fallback past 64) leave the
// bytes between rows and after the last one alone.
func TestCopyRows(t *testing.T) {
	for w := 1; w <= 70; w++ {
		for _, rows := range []int{1, 3} {
			lds, ldd := w+3, w+5
			src := make([]float32, rows*lds)
			for i := range src {
				src[i] = float32(i + 1)
			}
			dst := make([]float32, rows*ldd+20)
			for i := range dst {
				dst[i] = -1
			}
			copyRows(dst, ldd, src, lds, rows, w)
			for i, v := range dst {
				r, c := i/ldd, i%ldd
				want := float32(-1)
				if r < rows && c < w {
					want = src[r*lds+c]
				}
				require.Equal(t, want, v, "w=%d rows=%d dst[%d]", w, rows, i)
			}
		}
	}
}

// toF64 widens a float32 slice.
func toF64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
