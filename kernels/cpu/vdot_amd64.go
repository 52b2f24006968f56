//go:build amd64 && !purego

package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// vdotAsm reports whether dotF32 and axpyF32 run the AVX2+FMA kernels.
var vdotAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dotAVX2 returns Σ a[i]·b[i] for i < n (n a positive multiple of 8).
//
//go:noescape
func dotAVX2(a, b *float32, n int) float32

// axpyAVX2 adds alpha·x[i] to y[i] for i < n (n a positive multiple of 8).
//
//go:noescape
func axpyAVX2(alpha float32, x, y *float32, n int)

// dot4AVX2 sets out[r] = Σ a[i]·b[r·ldb+i] for r < 4, i < n (n a
// positive multiple of 8).
//
//go:noescape
func dot4AVX2(a, b *float32, ldb, n int, out *[4]float32)

// dot4F32 sets out[r] to the dot product of a with the row b[r·ldb:] of
// length len(a), for r < 4: a's loads shared by four rows of b.
func dot4F32(a, b []float32, ldb int, out *[4]float32) {
	n := len(a)
	_ = b[3*ldb+n-1]
	n8 := n &^ 7
	if vdotAsm && n8 > 0 {
		dot4AVX2(&a[0], &b[0], ldb, n8, out)
	} else {
		n8 = 0
		*out = [4]float32{}
	}
	for r := range out {
		row := b[r*ldb+n8 : r*ldb+n]
		for i, v := range a[n8:] {
			out[r] += v * row[i]
		}
	}
}

// dotF32 returns Σ a[i]·b[i] over len(a) (b at least as long): eight
// lanes at a time in four accumulators, the last len(a) mod 8 in Go.
func dotF32(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s float32
	n8 := n &^ 7
	if vdotAsm && n8 > 0 {
		s = dotAVX2(&a[0], &b[0], n8)
	} else {
		n8 = 0
	}
	for i := n8; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

// axpyF32 adds alpha·x[i] to y[i] over len(x) (y at least as long).
func axpyF32(alpha float32, x, y []float32) {
	n := len(x)
	y = y[:n]
	n8 := n &^ 7
	if vdotAsm && n8 > 0 {
		axpyAVX2(alpha, &x[0], &y[0], n8)
	} else {
		n8 = 0
	}
	for i := n8; i < n; i++ {
		y[i] += alpha * x[i]
	}
}

// dot2x4AVX2 sets out[4i+r] = Σ a[i·lda+p]·b[r·ldb+p] for i < 2, r < 4,
// p < n (n a positive multiple of 8).
//
//go:noescape
func dot2x4AVX2(a *float32, lda int, b *float32, ldb, n int, out *[8]float32)

// dot2x4F32 sets out[4i+r] to the dot product of a[i·lda:][:n] with
// b[r·ldb:][:n] for i < 2, r < 4: dot4F32 for two rows of a at once,
// each row's sum formed exactly as dot4F32 forms it.
func dot2x4F32(a []float32, lda, n int, b []float32, ldb int, out *[8]float32) {
	_, _ = a[lda+n-1], b[3*ldb+n-1]
	n8 := n &^ 7
	if vdotAsm && n8 > 0 {
		dot2x4AVX2(&a[0], lda, &b[0], ldb, n8, out)
	} else {
		n8 = 0
		*out = [8]float32{}
	}
	for i := 0; i < 2; i++ {
		ai := a[i*lda+n8 : i*lda+n]
		for r := 0; r < 4; r++ {
			row := b[r*ldb+n8 : r*ldb+n]
			for p, v := range ai {
				out[4*i+r] += v * row[p]
			}
		}
	}
}

// sum4AVX2 sets out[l] to Σ x[4i+l] over i < n/4 (n a positive multiple
// of 4), in float64, each lane in order (sum4's accumulators).
//
//go:noescape
func sum4AVX2(x *float32, n int, out *[4]float64)

// prefetchLines fetches the n cache lines from p on into cache; p need
// not point at readable memory (prefetches never fault).
//
//go:noescape
func prefetchLines(p unsafe.Pointer, n int)
