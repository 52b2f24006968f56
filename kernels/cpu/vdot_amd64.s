//go:build amd64 && !purego

#include "textflag.h"

// func dotAVX2(a, b *float32, n int) float32
//
// Σ a[i]·b[i] for i < n (n a positive multiple of 8): four 8-lane
// accumulators over blocks of 32, then one over the remaining blocks of
// 8, summed lane-wise at the end.
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ CX, $32
	JLT  tail8

loop32:
	VMOVUPS 0(SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS 0(DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	CMPQ CX, $32
	JGE  loop32

tail8:
	TESTQ CX, CX
	JZ    sum

loop8:
	VMOVUPS 0(SI), Y4
	VFMADD231PS 0(DI), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  loop8

sum:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X1, X1
	VADDPS X1, X0, X0
	VMOVSHDUP X0, X1
	VADDSS X1, X0, X0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyAVX2(alpha float32, x, y *float32, n int)
//
// y[i] += alpha·x[i] for i < n (n a positive multiple of 8).
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	VBROADCASTSS alpha+0(FP), Y0
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	CMPQ CX, $32
	JLT  atail8

aloop32:
	VMOVUPS 0(DI), Y1
	VMOVUPS 32(DI), Y2
	VMOVUPS 64(DI), Y3
	VMOVUPS 96(DI), Y4
	VFMADD231PS 0(SI), Y0, Y1
	VFMADD231PS 32(SI), Y0, Y2
	VFMADD231PS 64(SI), Y0, Y3
	VFMADD231PS 96(SI), Y0, Y4
	VMOVUPS Y1, 0(DI)
	VMOVUPS Y2, 32(DI)
	VMOVUPS Y3, 64(DI)
	VMOVUPS Y4, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	CMPQ CX, $32
	JGE  aloop32

atail8:
	TESTQ CX, CX
	JZ    adone

aloop8:
	VMOVUPS 0(DI), Y1
	VFMADD231PS 0(SI), Y0, Y1
	VMOVUPS Y1, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  aloop8

adone:
	VZEROUPPER
	RET

// func dot4AVX2(a, b *float32, ldb, n int, out *[4]float32)
//
// out[r] = Σ a[i]·b[r·ldb + i] for r < 4, i < n (n a positive multiple
// of 8): one load of a serves four rows of b, one accumulator per row.
TEXT ·dot4AVX2(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ ldb+16(FP), BX
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	SHLQ $2, BX
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX

loop4r:
	VMOVUPS (SI)(AX*4), Y4
	VFMADD231PS (DI)(AX*4), Y4, Y0
	VFMADD231PS (R8)(AX*4), Y4, Y1
	VFMADD231PS (R9)(AX*4), Y4, Y2
	VFMADD231PS (R10)(AX*4), Y4, Y3
	ADDQ $8, AX
	CMPQ AX, CX
	JLT  loop4r

	// Horizontal sums: pairwise adds bring row r's total to lane r.
	VHADDPS Y1, Y0, Y0 // r0 r0 r1 r1 | r0 r0 r1 r1 (per 128-bit lane)
	VHADDPS Y3, Y2, Y2 // r2 r2 r3 r3 | ...
	VHADDPS Y2, Y0, Y0 // r0 r1 r2 r3 | r0 r1 r2 r3
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DX)
	VZEROUPPER
	RET

// func dot2x4AVX2(a *float32, lda int, b *float32, ldb, n int, out *[8]float32)
//
// out[4i+r] = Σ a[i·lda+p]·b[r·ldb+p] for rows i < 2, r < 4, p < n (n a
// positive multiple of 8): dot4AVX2 for two rows of a at once, so each
// load of b feeds two FMAs (6 loads per 8 FMAs instead of 5 per 4).
TEXT ·dot2x4AVX2(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ lda+8(FP), R11
	MOVQ b+16(FP), DI
	MOVQ ldb+24(FP), BX
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DX
	SHLQ $2, BX
	SHLQ $2, R11
	LEAQ (SI)(R11*1), R11
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX

loop2x4:
	VMOVUPS (SI)(AX*4), Y8
	VMOVUPS (R11)(AX*4), Y9
	VMOVUPS (DI)(AX*4), Y10
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y10, Y9, Y4
	VMOVUPS (R8)(AX*4), Y11
	VFMADD231PS Y11, Y8, Y1
	VFMADD231PS Y11, Y9, Y5
	VMOVUPS (R9)(AX*4), Y12
	VFMADD231PS Y12, Y8, Y2
	VFMADD231PS Y12, Y9, Y6
	VMOVUPS (R10)(AX*4), Y13
	VFMADD231PS Y13, Y8, Y3
	VFMADD231PS Y13, Y9, Y7
	ADDQ $8, AX
	CMPQ AX, CX
	JLT  loop2x4

	// Horizontal sums as in dot4AVX2, one row of a at a time.
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DX)
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS X5, X4, X4
	VMOVUPS X4, 16(DX)
	VZEROUPPER
	RET

// func sum4AVX2(x *float32, n int, out *[4]float64)
//
// out[l] = Σ x[4i+l] over i < n/4 (n a positive multiple of 4), each
// lane summed in float64 in order: sum4's four accumulators, one vector.
TEXT ·sum4AVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ out+16(FP), DI
	SHRQ $2, CX
	VXORPD Y0, Y0, Y0

loop:
	VCVTPS2PD (SI), Y1
	VADDPD    Y1, Y0, Y0
	ADDQ      $16, SI
	DECQ      CX
	JNZ       loop
	VMOVUPD   Y0, (DI)
	VZEROUPPER
	RET

// func prefetchLines(p unsafe.Pointer, n int)
//
// Fetches the n cache lines from p on into L1 (prefetches never fault).
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ  p+0(FP), AX
	MOVQ  n+8(FP), CX
	TESTQ CX, CX
	JLE   pdone

ploop:
	PREFETCHT0 (AX)
	ADDQ       $64, AX
	DECQ       CX
	JNZ        ploop

pdone:
	RET
