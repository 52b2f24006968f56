package cpu

import "math"

// Vectorised float32 GELU (the erf form, x·Φ(x) with Φ the standard
// normal distribution function), for the policy network's encoders and
// heads, whose GELUs spent more time in math.Erf than the products
// before them. The algorithm, with z = |x|/√2:
//
//	erfc(z) = e^(−x²/2) · R(u),  u = 1/(1 + |x|/4),
//
// R a degree-10 polynomial in u − ½ fitted (weighted least squares on
// Chebyshev nodes, against a 40-digit erfc: testdata/gelu_fit.py) to
// e^(z²)·erfc(z) over |x| ≤ 14, relative error 8e-8 with its float32
// coefficients; x² is split into a float32 part and its
// exact remainder, so the exponential sees the exact argument to first
// order. Then Φ(x) = ½·erfc(z) for x < 0, else 1 − ½·erfc(z). Computed
// in float32 throughout, the result is within 5e-7 of x·Φ(x) relative
// (tested): unlike ½·x·(1 + erf(x/√2)) it keeps its relative accuracy
// in the negative tail, where 1 + erf cancels (in float64 that form is
// off by 2% at x = −8 and gives 0 from x = −8.4 on). x is clamped to ±14 inside Φ, where e^(−x²/2)
// has underflowed: GELU(−∞) is NaN (−∞·0, as in PyTorch), GELU(+∞) = +∞,
// and NaN stays NaN.

// geluConsts are the constants of geluAVX2, each repeated across 8
// lanes, in the order the kernel reads them: the clamp 14 and −14, ¼,
// 1, ½, −½, R's coefficients from the highest degree down, and the
// mask of all bits but the sign.
var geluConsts = func() (c [18][8]float32) {
	vals := [...]float32{14, -14, 0.25, 1, 0.5, -0.5,
		0.022533923387527466, 0.0501326322555542, -0.0889596939086914, -0.164652481675148,
		0.0644245594739914, 0.5435738563537598, 0.987693727016449, 1.1473166942596436,
		0.9950337409973145, 0.6815909147262573, 0.18882128596305847,
		math.Float32frombits(0x7fffffff),
	}
	fillLanes(c[:], vals[:])
	return c
}()

// geluErfF32 sets dst[i] = GELU(src[i]) (the erf form) for every i <
// len(src) (len(dst) ≥ len(src); dst may be src), with the AVX2+FMA
// kernel where the CPU has one, else geluErfF32Go (whose results may
// differ from the kernel's in the last bits: the kernel fuses
// multiply-adds).
func geluErfF32(dst, src []float32) {
	if !vexpAsm {
		geluErfF32Go(dst, src)
		return
	}
	lanes8(laneGelu, dst, src)
}

// geluErfF32Go is geluErfF32's algorithm in Go, the fallback where no
// assembly kernel runs.
func geluErfF32Go(dst, src []float32) {
	for i, x := range src {
		xc := min(max(x, -14), 14) // NaN: max and min keep it; see below
		if xc != xc {
			dst[i] = x
			continue
		}
		u := 1 / (0.25*float32(math.Abs(float64(xc))) + 1)
		v := u - 0.5
		r := geluConsts[6][0]
		for _, c := range geluConsts[7:17] {
			r = r*v + c[0]
		}
		hi := xc * xc
		lo := float32(float64(xc)*float64(xc) - float64(hi)) // exact: x² − hi
		h := expOneF32(-0.5*hi) * (1 - 0.5*lo) * r * 0.5
		if x < 0 {
			dst[i] = x * h
		} else {
			dst[i] = x * (1 - h)
		}
	}
}
