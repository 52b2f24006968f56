package cpu

import "fmt"

// The small float32 kernels of tinygemm_amd64.s: the products of
// matmulSmall (a small model's linear layers), and copyRows, the strided
// row copy of the direct convolution's planes.

// sgemmTiny sets c[i·ldc+j] = Σ_{p<k} a[i·ai+p·ap]·b[p·ldb+j] + z_ij for
// i < m, j < n, where z_ij is init[i·is+j] (is 0 repeats one row, a
// bias; init nil adds nothing), added after the sum, as an epilogue
// would. The sum runs in p order with one fused multiply-add per term,
// 16 columns at a time in AVX-512 registers. It is part of matmulSmall's
// float32 path (see matmulTinyF32) and needs tinyAsm; k must be positive.
func sgemmTiny(m, n, k int, a []float32, ai, ap int, b []float32, ldb int, init []float32, is int, c []float32, ldc int) {
	if m <= 0 || n <= 0 {
		return
	}
	if k <= 0 || (m-1)*ai+(k-1)*ap >= len(a) || (k-1)*ldb+n > len(b) || (m-1)*ldc+n > len(c) ||
		(init != nil && (m-1)*is+n > len(init)) {
		panic(fmt.Sprintf("cpu: sgemmTiny m=%d n=%d k=%d out of range (len a %d, b %d, c %d, init %d)", m, n, k, len(a), len(b), len(c), len(init)))
	}
	for j0 := 0; j0 < n; j0 += 16 {
		sgemmTinyChunk(m, min(16, n-j0), k, a, ai, ap, b, ldb, init, is, c, ldc, j0)
	}
}

// sdot4x4 sets the 4×4 block c[i·ldc+j] = Σ_{p<k} a[i·lda+p]·b[j·ldb+p]
// (+ bias[j] unless bias is nil) for i, j < 4: the sixteen dot products
// of four rows of A with four rows of B, the block of A·Bᵀ that
// sgemmTiny cannot reach without transposing B. It needs tinyAsm; k must
// be positive.
func sdot4x4(a []float32, lda int, b []float32, ldb, k int, bias, c []float32, ldc int) {
	if k <= 0 || 3*lda+k > len(a) || 3*ldb+k > len(b) || 3*ldc+4 > len(c) || (bias != nil && len(bias) < 4) {
		panic(fmt.Sprintf("cpu: sdot4x4 k=%d out of range (len a %d lda %d, len b %d ldb %d, len c %d ldc %d)", k, len(a), lda, len(b), ldb, len(c), ldc))
	}
	sdot4x4Kernel(a, lda, b, ldb, k, bias, c, ldc)
}

// matmulTinyF32 is matmulSmall for float32 on the AVX-512 kernels, the
// bias added to each finished product (bitwise MatMul then Add).
// Without transB it runs sgemmTiny; A·Bᵀ with m and n multiples of 4
// runs in 4×4 blocks of sdot4x4. With acc (and no bias) each product is
// added to c instead, by sgemmTiny with c as its own epilogue (bitwise
// MatMul then Add); A·Bᵀ is then declined. It reports false, doing
// nothing, when the kernels are missing, k is 0, or the product is
// another transposed one.
func matmulTinyF32(av, bv, biasv, cv []float32, batch int, bcA, bcB bool, m, n, k int, transA, transB, acc bool) bool {
	if !tinyAsm || k == 0 || (transB && (acc || transA || m%4 != 0 || n%4 != 0)) || (acc && biasv != nil) {
		return false
	}
	lda, ldb := matmulLD(m, n, k, transA, transB)
	ai, ap := lda, 1
	if transA {
		ai, ap = 1, lda
	}
	for bi := 0; bi < batch; bi++ {
		ao, bo := batchOffsets(bi, m, n, k, bcA, bcB)
		if transB {
			dotBlocks(m, n, k, av[ao:], bv[bo:], biasv, cv[bi*m*n:])
			continue
		}
		c := cv[bi*m*n:]
		if acc {
			sgemmTiny(m, n, k, av[ao:], ai, ap, bv[bo:], ldb, c, n, c, n)
			continue
		}
		sgemmTiny(m, n, k, av[ao:], ai, ap, bv[bo:], ldb, biasv, 0, c, n)
	}
	return true
}

// dotBlocks sets the m×n product c = a·bᵀ (+ bias) of a (m×k) and b
// (n×k), both row-major, in 4×4 blocks (m and n multiples of 4).
func dotBlocks(m, n, k int, a, b, bias, c []float32) {
	for i := 0; i < m; i += 4 {
		for j := 0; j < n; j += 4 {
			var bj []float32
			if bias != nil {
				bj = bias[j : j+4]
			}
			sdot4x4(a[i*k:], k, b[j*k:], k, k, bj, c[i*n+j:], n)
		}
	}
}

// copyRows copies rows rows of w floats from src (a row every lds) to dst
// (a row every ldd): the strided copies of convolution planes into and
// out of their padded layout. Short rows take the AVX-512 kernel, whose
// one call replaces a memmove per row.
func copyRows(dst []float32, ldd int, src []float32, lds, rows, w int) {
	if rows <= 0 || w <= 0 {
		return
	}
	_, _ = dst[(rows-1)*ldd+w-1], src[(rows-1)*lds+w-1]
	if !tinyAsm || w > 64 {
		for r := 0; r < rows; r++ {
			copy(dst[r*ldd:r*ldd+w], src[r*lds:r*lds+w])
		}
		return
	}
	copyRowsKernel(dst, ldd, src, lds, rows, w)
}
