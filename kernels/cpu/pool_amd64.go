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

// poolBwdLanes holds poolLanes' even lane indices (its odd row unused)
// and the two index vectors that interleave two 16-lane vectors a, b into
// a0 b0 a1 b1 … (low half: a0..a7 with b0..b7; high: a8.. with b8..),
// for maxPoolBwd2x2AVX512.
var poolBwdLanes = func() (t [4][16]int32) {
	t[0], t[1] = poolLanes[0], poolLanes[1]
	for i := range 8 {
		t[2][2*i], t[2][2*i+1] = int32(i), int32(16+i)
		t[3][2*i], t[3][2*i+1] = int32(8+i), int32(24+i)
	}
	return t
}()

// maxPoolBwd2x2AVX512 is the backward of maxPool2x2AVX512: see
// pool_amd64.s.
//
//go:noescape
func maxPoolBwd2x2AVX512(dx, dy *float32, idx *int32, blocks int, base, w int32, tab *[4][16]int32, maskOut, maskA, maskB uint16, rows, wo int) (ok bool)

// maxPoolBwd2x2Rows writes the input rows 0..2·rows−1 (their first 2n
// columns; dx rows w wide) of a 2×2/2 max pool's input gradient from
// rows·n output gradients dy and their flat indices idx (base the index
// of dx's first element in its plane). It reports false when an index
// lies outside its window; dx is then partly written.
func maxPoolBwd2x2Rows(dx, dy []float32, idx []int32, rows, n, base, w int) bool {
	if rows <= 0 || n <= 0 {
		return true
	}
	_, _, _ = dy[rows*n-1], idx[rows*n-1], dx[(2*rows-1)*w+2*n-1]
	t := n & 15
	maskA, maskB := uint16(1)<<min(2*t, 16)-1, uint16(0)
	if 2*t > 16 {
		maskB = uint16(1)<<(2*t-16) - 1
	}
	return maxPoolBwd2x2AVX512(&dx[0], &dy[0], &idx[0], n>>4, int32(base), int32(w), &poolBwdLanes, uint16(1)<<t-1, maskA, maskB, rows, n)
}

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
