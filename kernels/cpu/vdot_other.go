//go:build !amd64 || purego

package cpu

import "unsafe"

// vdotAsm is false: no vector kernels on this build.
const vdotAsm = false

// dotF32 returns Σ a[i]·b[i] over len(a) (b at least as long).
func dotF32(a, b []float32) float32 {
	b = b[:len(a)]
	var s float32
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

// axpyF32 adds alpha·x[i] to y[i] over len(x) (y at least as long).
func axpyF32(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// dot4F32 sets out[r] to the dot product of a with the row b[r·ldb:] of
// length len(a), for r < 4.
func dot4F32(a, b []float32, ldb int, out *[4]float32) {
	for r := range out {
		out[r] = dotF32(a, b[r*ldb:])
	}
}

// dot2x4F32 sets out[4i+r] to the dot product of a[i·lda:][:n] with
// b[r·ldb:][:n] for i < 2, r < 4.
func dot2x4F32(a []float32, lda, n int, b []float32, ldb int, out *[8]float32) {
	for i := 0; i < 2; i++ {
		var d [4]float32
		dot4F32(a[i*lda:i*lda+n], b, ldb, &d)
		copy(out[4*i:4*i+4], d[:])
	}
}

func sum4AVX2(x *float32, n int, out *[4]float64) {
	panic("cpu: sum4AVX2 called without an assembly kernel")
}

// prefetchLines does nothing on this build.
func prefetchLines(p unsafe.Pointer, n int) {}
