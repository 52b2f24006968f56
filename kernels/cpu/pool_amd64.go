//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// poolAsm reports whether float32 2×2/2 max pools run maxPool2x2AVX512.
var poolAsm = cpu.X86.HasAVX512F && useAVX512

// poolLanes holds the even and the odd lane indices of two 16-lane
// vectors, for the de-interleaving permutes of maxPool2x2AVX512.
var poolLanes = func() (t [2][16]int32) {
	for i := range 16 {
		t[0][i], t[1][i] = int32(2*i), int32(2*i+1)
	}
	return t
}()

// maxPool2x2AVX512 pools output rows of a 2×2, stride-2 max pool: see
// pool_amd64.s.
//
//go:noescape
func maxPool2x2AVX512(y *float32, idx *int32, x *float32, blocks int, base, w int32, tab *[2][16]int32, maskOut, maskA, maskB uint16, rows, wo int)

// maxPool2x2Rows pools rows output rows of n outputs each (y, and idx
// unless it is nil, hold rows·n) from the input rows 2·oh and 2·oh+1 of
// x (w wide), and records in idx the flat input indices base + 2·oh·w +
// 2j + offset of the maxima (base x's first index within its plane).
func maxPool2x2Rows(y []float32, idx []int32, x []float32, rows, n, base, w int) {
	if rows <= 0 || n <= 0 {
		return
	}
	_, _ = y[rows*n-1], x[(2*rows-1)*w+2*n-1]
	var ip *int32
	if idx != nil {
		_ = idx[rows*n-1]
		ip = &idx[0]
	}
	// The tail's t < 16 outputs and 2t inputs a row (uint16(1)<<16 is
	// 0, so a full mask comes out as 0xffff).
	t := n & 15
	maskA, maskB := uint16(1)<<min(2*t, 16)-1, uint16(0)
	if 2*t > 16 {
		maskB = uint16(1)<<(2*t-16) - 1
	}
	maxPool2x2AVX512(&y[0], ip, &x[0], n>>4, int32(base), int32(w), &poolLanes, uint16(1)<<t-1, maskA, maskB, rows, n)
}
