package cpu

import "math"

// Vectorised float32 exponential for the softmax-family kernels, whose
// small rows spend most of their time in math.Exp. The algorithm is
// Cephes' expf: x = n·ln2 + r with n = ⌊x·log2e + ½⌋ and ln2 split in two
// for an exact r, a degree-5 polynomial for e^r, and 2^n built in the
// exponent bits. It is accurate to about 1 ulp of float32 (tested
// against math.Exp).

// Domain of expF32: inputs above expHi are clamped to it; results for
// inputs below expLo (e^expLo is float32's smallest normal) are 0.
const (
	expHi = 88.3762626647949
	expLo = -87.33654475
)

// expConsts are expF32's constants, each repeated across 8 lanes, in the
// order the assembly kernel reads them.
var expConsts = func() (c [14][8]float32) {
	vals := [...]float32{
		expHi, expLo, math.Log2E, 0.5,
		0.693359375, -2.12194440e-4, // ln2 = C1 + C2 (C1 exact in 9 bits)
		1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1,
		1,
		math.Float32frombits(127), // the int32 127
	}
	fillLanes(c[:], vals[:])
	return c
}()

// fillLanes sets every lane of row i of a kernel's constant table to
// vals[i].
func fillLanes(rows [][8]float32, vals []float32) {
	for i, v := range vals {
		for j := range rows[i] {
			rows[i][j] = v
		}
	}
}

// expF32 sets dst[i] = e^src[i] for every i < len(src) (len(dst) ≥
// len(src)): inputs must not be NaN; those above expHi are clamped to it,
// and results under float32's smallest normal flush to 0. It uses the
// assembly kernel where the CPU has one; expF32Go is the same algorithm
// in Go (its results may differ from the kernel's in the last bit: the
// kernel fuses multiply-adds).
func expF32(dst, src []float32) {
	if !vexpAsm {
		expF32Go(dst, src)
		return
	}
	lanes8(laneExp, dst, src)
}

// The eight-lane float32 kernels that lanes8 runs.
const (
	laneExp  = iota // vexpAVX2
	laneGelu        // geluAVX2 (gelu.go)
)

// lanes8 runs the eight-lane kernel k over src into dst (len(dst) ≥
// len(src); dst may be src): the whole multiple of 8 in one call, the
// last len mod 8 values through a padded copy (the kernels read and
// write whole vectors). It needs the kernels (vexpAsm).
func lanes8(k int, dst, src []float32) {
	n := len(src)
	if n == 0 {
		return
	}
	_ = dst[n-1]
	full := n &^ 7
	if full > 0 {
		lane8Call(k, &dst[0], &src[0], full)
	}
	if full < n {
		var t [8]float32
		copy(t[:], src[full:])
		lane8Call(k, &t[0], &t[0], 8)
		copy(dst[full:n], t[:n-full])
	}
}

// lane8Call calls kernel k on n values (a multiple of 8). A switch, not
// a function value: the kernels do not keep their pointers, and lanes8's
// padded copy then stays on the stack.
func lane8Call(k int, d, s *float32, n int) {
	switch k {
	case laneExp:
		vexpAVX2(d, s, n, &expConsts)
	case laneGelu:
		geluAVX2(d, s, n, &geluConsts, &expConsts)
	default:
		panic("cpu: unknown eight-lane kernel")
	}
}

// expF32Go is expF32's algorithm in Go, the fallback where no assembly
// kernel runs.
func expF32Go(dst, src []float32) {
	for i, x := range src {
		dst[i] = expOneF32(x)
	}
}

// expOneF32 is expF32's algorithm on one value, in Go.
func expOneF32(x float32) float32 {
	if x < expLo {
		return 0
	}
	x = min(x, expHi)
	fx := float32(math.Floor(float64(x*math.Log2E + 0.5)))
	r := x - fx*0.693359375
	r -= fx * -2.12194440e-4
	z := r * r
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*z + r + 1
	return p * math.Float32frombits(uint32(int32(fx)+127)<<23)
}
