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

// maxPool2x2AVX512 pools one output row of a 2×2, stride-2 max pool: see
// pool_amd64.s.
//
//go:noescape
func maxPool2x2AVX512(y *float32, idx *int32, r0, r1 *float32, blocks int, base, w int32, tab *[2][16]int32, maskOut, maskA, maskB uint16)

// maxPool2x2Row pools n outputs of one row from input rows r0 and r1
// (2n elements each) into y, and the flat input indices base + 2j +
// offset of the maxima into idx unless it is nil (w the input width).
func maxPool2x2Row(y []float32, idx []int32, r0, r1 []float32, n, base, w int) {
	_, _, _ = y[n-1], r0[2*n-1], r1[2*n-1]
	var ip *int32
	if idx != nil {
		_ = idx[n-1]
		ip = &idx[0]
	}
	// The tail's t < 16 outputs and 2t inputs a row (uint16(1)<<16 is
	// 0, so a full mask comes out as 0xffff).
	t := n & 15
	maskA, maskB := uint16(1)<<min(2*t, 16)-1, uint16(0)
	if 2*t > 16 {
		maskB = uint16(1)<<(2*t-16) - 1
	}
	maxPool2x2AVX512(&y[0], ip, &r0[0], &r1[0], n>>4, int32(base), int32(w), &poolLanes, uint16(1)<<t-1, maskA, maskB)
}
