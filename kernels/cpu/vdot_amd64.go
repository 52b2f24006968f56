//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

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
