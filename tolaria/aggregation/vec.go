package aggregation

import "math"

// The vector kernels below are the only per-element loops of the
// package. They accumulate in float64 with four independent partial
// sums, so the result does not depend on anything but the inputs (no
// worker count, no chunking) and a 1M-element dot keeps about 1e-16
// relative error instead of float32's 1e-4.

// dot returns a·b in float64. a and b must have equal length.
func dot(a, b []float32) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += float64(a[i]) * float64(b[i])
		s1 += float64(a[i+1]) * float64(b[i+1])
		s2 += float64(a[i+2]) * float64(b[i+2])
		s3 += float64(a[i+3]) * float64(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float64(a[i]) * float64(b[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// dotNorm returns a·b and b·b in one pass over memory.
func dotNorm(a, b []float32) (ab, bb float64) {
	b = b[:len(a)]
	var d0, d1, d2, d3, n0, n1, n2, n3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		x0, x1, x2, x3 := float64(b[i]), float64(b[i+1]), float64(b[i+2]), float64(b[i+3])
		d0 += float64(a[i]) * x0
		d1 += float64(a[i+1]) * x1
		d2 += float64(a[i+2]) * x2
		d3 += float64(a[i+3]) * x3
		n0 += x0 * x0
		n1 += x1 * x1
		n2 += x2 * x2
		n3 += x3 * x3
	}
	for ; i < len(a); i++ {
		x := float64(b[i])
		d0 += float64(a[i]) * x
		n0 += x * x
	}
	return (d0 + d1) + (d2 + d3), (n0 + n1) + (n2 + n3)
}

// sumSq returns a·a in float64.
func sumSq(a []float32) float64 { return dot(a, a) }

// norm returns the L2 norm of a.
func norm(a []float32) float64 { return math.Sqrt(sumSq(a)) }

// subScaled writes dst[i] = src[i] − c·b[i], rounding once to float32.
// dst may be src.
func subScaled(dst, src, b []float32, c float64) {
	src = src[:len(dst)]
	b = b[:len(dst)]
	for i := range dst {
		dst[i] = float32(float64(src[i]) - c*float64(b[i]))
	}
}

// finite reports whether v is neither NaN nor ±Inf.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
