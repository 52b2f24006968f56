package cpu

import "github.com/esper-go/esper/tensor"

// The GEMM used by MatMul and the convolutions: Goto-style blocking with
// packed panels and a register-blocked mr×nr micro-kernel (microKernel,
// the piece a Go-assembly version replaces). Every element of C is
// accumulated in a fixed order — k blocks of gemmKC in order, each summed
// in registers from p = 0 up — so the result does not depend on how the
// caller splits rows among workers.

const (
	gemmMR = 4   // rows of the micro-tile
	gemmNR = 4   // columns of the micro-tile
	gemmKC = 256 // depth of a packed block
	gemmMC = 64  // rows of a packed A block
	gemmNC = 512 // columns of a packed B block
)

// gemmScratch is the packing space one serial GEMM needs.
type gemmScratch[F tensor.Float] struct{ a, b []F }

// newGemmScratch sizes packing space for problems up to m×n×k.
func newGemmScratch[F tensor.Float](m, n, k int) gemmScratch[F] {
	kc := min(gemmKC, k)
	mc := roundUp(min(gemmMC, m), gemmMR)
	nc := roundUp(min(gemmNC, n), gemmNR)
	return gemmScratch[F]{a: getBuf[F](mc * kc), b: getBuf[F](kc * nc)}
}

// free returns the packing space to the pools.
func (sc gemmScratch[F]) free() {
	putBuf(sc.a)
	putBuf(sc.b)
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// gemm computes C = op(A)·op(B) (or C += when accumulate) for row-major
// A, B, C with leading dimensions lda, ldb, ldc. op(A) is m×k: A[i*lda+p],
// or A[p*lda+i] when transA. op(B) is k×n: B[p*ldb+j], or B[j*ldb+p] when
// transB. It runs on the calling goroutine with the given scratch.
func gemm[F tensor.Float](m, n, k int, a []F, lda int, transA bool, b []F, ldb int, transB bool, c []F, ldc int, accumulate bool, sc gemmScratch[F]) {
	if m == 0 || n == 0 {
		return
	}
	if !accumulate {
		for i := 0; i < m; i++ {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				row[j] = 0
			}
		}
	}
	if k == 0 {
		return
	}
	for jc := 0; jc < n; jc += gemmNC {
		nb := min(gemmNC, n-jc)
		for pc := 0; pc < k; pc += gemmKC {
			kb := min(gemmKC, k-pc)
			packB(sc.b, b, ldb, transB, pc, jc, kb, nb)
			for ic := 0; ic < m; ic += gemmMC {
				mb := min(gemmMC, m-ic)
				packA(sc.a, a, lda, transA, ic, pc, mb, kb)
				for jr := 0; jr < nb; jr += gemmNR {
					pb := sc.b[jr*kb : (jr+gemmNR)*kb]
					nr := min(gemmNR, nb-jr)
					for ir := 0; ir < mb; ir += gemmMR {
						pa := sc.a[ir*kb : (ir+gemmMR)*kb]
						microKernel(kb, pa, pb, c, (ic+ir)*ldc+jc+jr, ldc, min(gemmMR, mb-ir), nr)
					}
				}
			}
		}
	}
}

// packA copies the mb×kb block of op(A) at (ic, pc) into panels of gemmMR
// rows: panel r holds, for each p, the gemmMR values of rows r·MR.. (zero
// beyond mb).
func packA[F tensor.Float](dst, a []F, lda int, trans bool, ic, pc, mb, kb int) {
	for ir := 0; ir < mb; ir += gemmMR {
		pan := dst[ir*kb : (ir+gemmMR)*kb]
		rows := min(gemmMR, mb-ir)
		if trans {
			for p := 0; p < kb; p++ {
				src := a[(pc+p)*lda+ic+ir:]
				q := pan[p*gemmMR : p*gemmMR+gemmMR]
				if rows == gemmMR {
					q[0], q[1], q[2], q[3] = src[0], src[1], src[2], src[3]
				} else {
					for r := 0; r < gemmMR; r++ {
						if r < rows {
							q[r] = src[r]
						} else {
							q[r] = 0
						}
					}
				}
			}
			continue
		}
		for r := 0; r < gemmMR; r++ {
			if r >= rows {
				for p := 0; p < kb; p++ {
					pan[p*gemmMR+r] = 0
				}
				continue
			}
			src := a[(ic+ir+r)*lda+pc : (ic+ir+r)*lda+pc+kb]
			for p, v := range src {
				pan[p*gemmMR+r] = v
			}
		}
	}
}

// packB copies the kb×nb block of op(B) at (pc, jc) into panels of gemmNR
// columns (zero beyond nb).
func packB[F tensor.Float](dst, b []F, ldb int, trans bool, pc, jc, kb, nb int) {
	for jr := 0; jr < nb; jr += gemmNR {
		pan := dst[jr*kb : (jr+gemmNR)*kb]
		cols := min(gemmNR, nb-jr)
		if !trans {
			for p := 0; p < kb; p++ {
				src := b[(pc+p)*ldb+jc+jr:]
				q := pan[p*gemmNR : p*gemmNR+gemmNR]
				if cols == gemmNR {
					q[0], q[1], q[2], q[3] = src[0], src[1], src[2], src[3]
				} else {
					for j := 0; j < gemmNR; j++ {
						if j < cols {
							q[j] = src[j]
						} else {
							q[j] = 0
						}
					}
				}
			}
			continue
		}
		for j := 0; j < gemmNR; j++ {
			if j >= cols {
				for p := 0; p < kb; p++ {
					pan[p*gemmNR+j] = 0
				}
				continue
			}
			src := b[(jc+jr+j)*ldb+pc : (jc+jr+j)*ldb+pc+kb]
			for p, v := range src {
				pan[p*gemmNR+j] = v
			}
		}
	}
}

// microKernel adds the product of an MR×kb packed A panel and a kb×NR
// packed B panel to the mr×nr tile of C at ci.
func microKernel[F tensor.Float](kb int, pa, pb []F, c []F, ci, ldc, mr, nr int) {
	var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33 F
	pa = pa[:kb*gemmMR]
	pb = pb[:kb*gemmNR]
	for p := 0; p < len(pa); p += 4 {
		a := pa[p : p+4 : p+4]
		b := pb[p : p+4 : p+4]
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	if mr == 4 && nr == 4 {
		r := c[ci : ci+4 : ci+4]
		r[0] += c00
		r[1] += c01
		r[2] += c02
		r[3] += c03
		r = c[ci+ldc : ci+ldc+4 : ci+ldc+4]
		r[0] += c10
		r[1] += c11
		r[2] += c12
		r[3] += c13
		r = c[ci+2*ldc : ci+2*ldc+4 : ci+2*ldc+4]
		r[0] += c20
		r[1] += c21
		r[2] += c22
		r[3] += c23
		r = c[ci+3*ldc : ci+3*ldc+4 : ci+3*ldc+4]
		r[0] += c30
		r[1] += c31
		r[2] += c32
		r[3] += c33
		return
	}
	t := [16]F{c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33}
	for i := 0; i < mr; i++ {
		for j := 0; j < nr; j++ {
			c[ci+i*ldc+j] += t[i*4+j]
		}
	}
}
