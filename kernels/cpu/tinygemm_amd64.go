//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// tinyAsm reports whether sgemmTiny runs the AVX-512 kernel.
var tinyAsm = cpu.X86.HasAVX512F && useAVX512

// sgemmTinyAVX512 is the kernel behind sgemmTiny for one chunk of up to
// 16 columns (mask has one bit per column); strides are in bytes.
//
//go:noescape
func sgemmTinyAVX512(m, k int, a *float32, ai, ap int, b *float32, ldb int, init *float32, is int, c *float32, ldc int, mask uint16)

// sdot4x4AVX512 is the kernel behind sdot4x4: kc full chunks of 16 and a
// tail mask (strides in bytes).
//
//go:noescape
func sdot4x4AVX512(a *float32, lda int, b *float32, ldb, kc int, tail uint16, bias, c *float32, ldc int)

// sgemmTinyChunk runs the kernel on columns j0..j0+n−1 (n ≤ 16) after the
// caller's bounds checks.
func sgemmTinyChunk(m, n, k int, a []float32, ai, ap int, b []float32, ldb int, init []float32, is int, c []float32, ldc, j0 int) {
	var ip *float32
	if init != nil {
		ip = &init[j0]
	}
	sgemmTinyAVX512(m, k, &a[0], 4*ai, 4*ap, &b[j0], 4*ldb, ip, 4*is, &c[j0], 4*ldc, uint16(1)<<n-1)
}

// sdot4x4Kernel runs the kernel after the caller's bounds checks.
func sdot4x4Kernel(a []float32, lda int, b []float32, ldb, k int, bias, c []float32, ldc int) {
	var bp *float32
	if bias != nil {
		bp = &bias[0]
	}
	sdot4x4AVX512(&a[0], 4*lda, &b[0], 4*ldb, k/16, uint16(1)<<(k%16)-1, bp, &c[0], 4*ldc)
}

// rowExpsAVX512 is the kernel behind rowExps for rows of at most 16
// columns (mask has one bit per column).
//
//go:noescape
func rowExpsAVX512(x *float32, c, n int, mask uint16, k *[14][8]float32, maxes *float32, ses *float64, e *float32)

// rowExpsKernel runs the kernel on n rows of c columns starting at xs[0]
// and, unless e is nil, e[0], with the lanes in mask, after the caller's
// bounds checks.
func rowExpsKernel(xs []float32, c, n int, mask uint16, e, maxes []float32, ses []float64) {
	var ep *float32
	if e != nil {
		ep = &e[0]
	}
	rowExpsAVX512(&xs[0], c, n, mask, &expConsts, &maxes[0], &ses[0], ep)
}

// sdotOffs4x4AVX512 is the kernel behind dwgrad's dot blocks (strides and
// offsets in bytes).
//
//go:noescape
func sdotOffs4x4AVX512(a *float32, lda int, b *float32, boffs *[4]int, kc int, tail uint16, ns int, sa, sb int, out *[16]float32)

// sdotOffs4x4Kernel runs sdotOffs4x4AVX512 with element strides (the
// caller checks the bounds): rows of a every lda, samples of a every sa
// and of b every sb, the B rows at the byte offsets boffs.
func sdotOffs4x4Kernel(a *float32, lda int, b *float32, boffs *[4]int, kc int, tail uint16, ns, sa, sb int, out *[16]float32) {
	sdotOffs4x4AVX512(a, 4*lda, b, boffs, kc, tail, ns, 4*sa, 4*sb, out)
}

// copyRowsAVX512 is the kernel behind copyRows (strides in bytes).
//
//go:noescape
func copyRowsAVX512(dst, src *float32, rows, w, ldd, lds int, tail uint16)

func copyRowsKernel(dst []float32, ldd int, src []float32, lds, rows, w int) {
	copyRowsAVX512(&dst[0], &src[0], rows, w, 4*ldd, 4*lds, uint16(1)<<(w%16)-1)
}
