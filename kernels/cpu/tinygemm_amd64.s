//go:build amd64 && !purego

#include "textflag.h"

// Adds the row of B in Z4 times A(i..i+3, p), broadcast from memory at AX,
// AX+ai, R15 and R15+ai, to the accumulators Z0..Z3, then steps A and B
// to the next p.
#define FMA4 \
	VFMADD231PS.BCST (AX), Z4, Z0; \
	VFMADD231PS.BCST (AX)(R10*1), Z4, Z1; \
	VFMADD231PS.BCST (R15), Z4, Z2; \
	VFMADD231PS.BCST (R15)(R10*1), Z4, Z3; \
	ADDQ R11, AX; \
	ADDQ R11, R15; \
	ADDQ R12, BX

// FMA4 for one row.
#define FMA1 \
	VFMADD231PS.BCST (AX), Z4, Z0; \
	ADDQ R11, AX; \
	ADDQ R12, BX

// Loads the masked row of B at BX into Z4.
#define LOADB \
	VMOVUPS.Z (BX), K1, Z4

// func sgemmTinyAVX512(m, k int, a *float32, ai, ap int, b *float32, ldb int, init *float32, is int, c *float32, ldc int, mask uint16)
//
// Row i of C (the mask's n ≤ 16 columns) is Σ_p A(i,p)·B(p,:) plus the
// row at init (added last; nothing when init is nil), one FMA per p with A(i,p)
// broadcast from memory and B(p,:) the row at b+p·ldb. Rows go four at a
// time, so that four independent FMA chains hide the latency, then one
// at a time. Every stride is in bytes; masked-off lanes are neither
// loaded nor stored.
TEXT ·sgemmTinyAVX512(SB), NOSPLIT, $0-90
	MOVQ  m+0(FP), R8
	MOVQ  k+8(FP), R9
	MOVQ  a+16(FP), SI
	MOVQ  ai+24(FP), R10
	MOVQ  ap+32(FP), R11
	MOVQ  b+40(FP), DX
	MOVQ  ldb+48(FP), R12
	MOVQ  init+56(FP), R13
	MOVQ  is+64(FP), R14
	MOVQ  c+72(FP), DI
	KMOVW mask+88(FP), K1

four:
	CMPQ   R8, $4
	JLT    one
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	MOVQ SI, AX
	LEAQ (SI)(R10*2), R15
	MOVQ DX, BX
	MOVQ R9, CX

inner4:
	LOADB
	FMA4
	DECQ CX
	JNZ  inner4

	TESTQ     R13, R13
	JZ        store4
	VADDPS.Z  (R13), Z0, K1, Z0
	VADDPS.Z  (R13)(R14*1), Z1, K1, Z1
	LEAQ      (R13)(R14*2), BX
	VADDPS.Z  (BX), Z2, K1, Z2
	VADDPS.Z  (BX)(R14*1), Z3, K1, Z3
	LEAQ      (BX)(R14*2), R13

store4:
	MOVQ    ldc+80(FP), CX
	VMOVUPS Z0, K1, (DI)
	VMOVUPS Z1, K1, (DI)(CX*1)
	LEAQ    (DI)(CX*2), BX
	VMOVUPS Z2, K1, (BX)
	VMOVUPS Z3, K1, (BX)(CX*1)
	LEAQ    (BX)(CX*2), DI
	LEAQ    (SI)(R10*4), SI
	SUBQ    $4, R8
	JMP     four

one:
	TESTQ R8, R8
	JLE   done
	VXORPS Z0, Z0, Z0
	MOVQ SI, AX
	MOVQ DX, BX
	MOVQ R9, CX

inner1:
	LOADB
	FMA1
	DECQ CX
	JNZ  inner1

	TESTQ    R13, R13
	JZ       store1
	VADDPS.Z (R13), Z0, K1, Z0
	ADDQ     R14, R13

store1:
	VMOVUPS Z0, K1, (DI)
	ADDQ    ldc+80(FP), DI
	ADDQ    R10, SI
	DECQ    R8
	JMP     one

done:
	VZEROUPPER
	RET

// Adds the products of the A rows Z16..Z19 and the B rows Z20..Z23 to
// the accumulators: Z(4j+i) for row i of A and row j of B.
#define DOT16 \
	VFMADD231PS Z20, Z16, Z0; \
	VFMADD231PS Z20, Z17, Z1; \
	VFMADD231PS Z20, Z18, Z2; \
	VFMADD231PS Z20, Z19, Z3; \
	VFMADD231PS Z21, Z16, Z4; \
	VFMADD231PS Z21, Z17, Z5; \
	VFMADD231PS Z21, Z18, Z6; \
	VFMADD231PS Z21, Z19, Z7; \
	VFMADD231PS Z22, Z16, Z8; \
	VFMADD231PS Z22, Z17, Z9; \
	VFMADD231PS Z22, Z18, Z10; \
	VFMADD231PS Z22, Z19, Z11; \
	VFMADD231PS Z23, Z16, Z12; \
	VFMADD231PS Z23, Z17, Z13; \
	VFMADD231PS Z23, Z18, Z14; \
	VFMADD231PS Z23, Z19, Z15

// Folds two accumulators into one: the 128-bit lanes of x pick, with
// imm0 and imm1, halves of x and y that are then added (VSHUFF32X4
// across lanes, VSHUFPS within them).
#define FOLD(op, imm0, imm1, y, x) \
	op imm0, y, x, Z24; \
	op imm1, y, x, Z25; \
	VADDPS Z25, Z24, x

// Folds the sixteen accumulators of DOT16 into Z0, element 4i+j the sum
// of Z(4j+i): pairs (lanes 0,1 the halves' sums of the first, 2,3 of the
// second), then quads (lane r four partial sums of accumulator 4q+r),
// then within the lanes two partial sums and one.
#define FOLD16 \
	FOLD(VSHUFF32X4, $0x44, $0xEE, Z1, Z0); \
	FOLD(VSHUFF32X4, $0x44, $0xEE, Z3, Z2); \
	FOLD(VSHUFF32X4, $0x44, $0xEE, Z5, Z4); \
	FOLD(VSHUFF32X4, $0x44, $0xEE, Z7, Z6); \
	FOLD(VSHUFF32X4, $0x44, $0xEE, Z9, Z8); \
	FOLD(VSHUFF32X4, $0x44, $0xEE, Z11, Z10); \
	FOLD(VSHUFF32X4, $0x44, $0xEE, Z13, Z12); \
	FOLD(VSHUFF32X4, $0x44, $0xEE, Z15, Z14); \
	FOLD(VSHUFF32X4, $0x88, $0xDD, Z2, Z0); \
	FOLD(VSHUFF32X4, $0x88, $0xDD, Z6, Z4); \
	FOLD(VSHUFF32X4, $0x88, $0xDD, Z10, Z8); \
	FOLD(VSHUFF32X4, $0x88, $0xDD, Z14, Z12); \
	FOLD(VSHUFPS, $0x44, $0xEE, Z4, Z0); \
	FOLD(VSHUFPS, $0x44, $0xEE, Z12, Z8); \
	FOLD(VSHUFPS, $0x88, $0xDD, Z8, Z0)

// Zeroes the accumulators Z0..Z15.
#define ZERO16 \
	VXORPS Z0, Z0, Z0; \
	VXORPS Z1, Z1, Z1; \
	VXORPS Z2, Z2, Z2; \
	VXORPS Z3, Z3, Z3; \
	VXORPS Z4, Z4, Z4; \
	VXORPS Z5, Z5, Z5; \
	VXORPS Z6, Z6, Z6; \
	VXORPS Z7, Z7, Z7; \
	VXORPS Z8, Z8, Z8; \
	VXORPS Z9, Z9, Z9; \
	VXORPS Z10, Z10, Z10; \
	VXORPS Z11, Z11, Z11; \
	VXORPS Z12, Z12, Z12; \
	VXORPS Z13, Z13, Z13; \
	VXORPS Z14, Z14, Z14; \
	VXORPS Z15, Z15, Z15

// func sdot4x4AVX512(a *float32, lda int, b *float32, ldb, kc int, tail uint16, bias, c *float32, ldc int)
//
// C[i][j] = Σ_p a[i·lda+p]·b[j·ldb+p] (+ bias[j] unless bias is nil)
// for i, j < 4 over kc chunks of 16 p, then the tail chunk's masked p (no
// tail when the mask is 0): the sixteen dot products of four rows of A
// with four rows of B (strides in bytes). The accumulators are folded
// into one vector in four rounds of shuffles and adds; the bias is added
// to the finished sums and each row of C is written with one 16-byte
// store (which a following load of the row can take from the store
// buffer).
TEXT ·sdot4x4AVX512(SB), NOSPLIT, $0-72
	MOVQ  a+0(FP), SI
	MOVQ  lda+8(FP), R8
	MOVQ  b+16(FP), DX
	MOVQ  ldb+24(FP), R9
	MOVQ  kc+32(FP), CX
	KMOVW tail+40(FP), K1
	LEAQ  (SI)(R8*2), R10
	LEAQ  (DX)(R9*2), R11
	ZERO16
	TESTQ CX, CX
	JZ    tail

full:
	VMOVUPS (SI), Z16
	VMOVUPS (SI)(R8*1), Z17
	VMOVUPS (R10), Z18
	VMOVUPS (R10)(R8*1), Z19
	VMOVUPS (DX), Z20
	VMOVUPS (DX)(R9*1), Z21
	VMOVUPS (R11), Z22
	VMOVUPS (R11)(R9*1), Z23
	DOT16
	ADDQ $64, SI
	ADDQ $64, R10
	ADDQ $64, DX
	ADDQ $64, R11
	DECQ CX
	JNZ  full

tail:
	KORTESTW K1, K1
	JZ       fold
	VMOVUPS.Z (SI), K1, Z16
	VMOVUPS.Z (SI)(R8*1), K1, Z17
	VMOVUPS.Z (R10), K1, Z18
	VMOVUPS.Z (R10)(R8*1), K1, Z19
	VMOVUPS.Z (DX), K1, Z20
	VMOVUPS.Z (DX)(R9*1), K1, Z21
	VMOVUPS.Z (R11), K1, Z22
	VMOVUPS.Z (R11)(R9*1), K1, Z23
	DOT16

fold:
	FOLD16
	MOVQ  bias+48(FP), AX
	TESTQ AX, AX
	JZ    rows
	VBROADCASTF32X4 (AX), Z1
	VADDPS          Z1, Z0, Z0

rows:
	MOVQ          c+56(FP), DI
	MOVQ          ldc+64(FP), BX
	VMOVUPS       X0, (DI)
	VEXTRACTF32X4 $1, Z0, (DI)(BX*1)
	LEAQ          (DI)(BX*2), DI
	VEXTRACTF32X4 $2, Z0, (DI)
	VEXTRACTF32X4 $3, Z0, (DI)(BX*1)
	VZEROUPPER
	RET

// func sdotOffs4x4AVX512(a *float32, lda int, b *float32, boffs *[4]int, kc int, tail uint16, ns int, sa, sb int, out *[16]float32)
//
// sdot4x4AVX512 summed over ns samples, with the four B rows at arbitrary
// byte offsets boffs from b: out[4i+j] = Σ_s Σ_p A_s(i,p)·B_s(j,p) with
// A_s row i at a + s·sa + i·lda and B_s row j at b + s·sb + boffs[j], p
// over kc chunks of 16 and the tail's masked lanes. The direct weight
// gradient of a convolution: rows of the output gradient against the
// shifted rows of the padded input.
TEXT ·sdotOffs4x4AVX512(SB), NOSPLIT, $0-80
	MOVQ  a+0(FP), AX
	MOVQ  lda+8(FP), R8
	MOVQ  b+16(FP), BX
	MOVQ  boffs+24(FP), DI
	MOVQ  kc+32(FP), DX
	KMOVW tail+40(FP), K1
	MOVQ  ns+48(FP), R14
	ZERO16
	TESTQ R14, R14
	JLE   ofold

sample:
	MOVQ AX, SI
	LEAQ (AX)(R8*2), R9
	MOVQ BX, R10
	ADDQ 0(DI), R10
	MOVQ BX, R11
	ADDQ 8(DI), R11
	MOVQ BX, R12
	ADDQ 16(DI), R12
	MOVQ BX, R13
	ADDQ 24(DI), R13
	MOVQ DX, CX
	TESTQ CX, CX
	JZ    otail

ofull:
	VMOVUPS (SI), Z16
	VMOVUPS (SI)(R8*1), Z17
	VMOVUPS (R9), Z18
	VMOVUPS (R9)(R8*1), Z19
	VMOVUPS (R10), Z20
	VMOVUPS (R11), Z21
	VMOVUPS (R12), Z22
	VMOVUPS (R13), Z23
	DOT16
	ADDQ $64, SI
	ADDQ $64, R9
	ADDQ $64, R10
	ADDQ $64, R11
	ADDQ $64, R12
	ADDQ $64, R13
	DECQ CX
	JNZ  ofull

otail:
	KORTESTW K1, K1
	JZ       onext
	VMOVUPS.Z (SI), K1, Z16
	VMOVUPS.Z (SI)(R8*1), K1, Z17
	VMOVUPS.Z (R9), K1, Z18
	VMOVUPS.Z (R9)(R8*1), K1, Z19
	VMOVUPS.Z (R10), K1, Z20
	VMOVUPS.Z (R11), K1, Z21
	VMOVUPS.Z (R12), K1, Z22
	VMOVUPS.Z (R13), K1, Z23
	DOT16

onext:
	ADDQ sa+56(FP), AX
	ADDQ sb+64(FP), BX
	DECQ R14
	JNZ  sample

ofold:
	FOLD16
	MOVQ    out+72(FP), DI
	VMOVUPS Z0, (DI)
	VZEROUPPER
	RET

// func copyRowsAVX512(dst, src *float32, rows, w, ldd, lds int, tail uint16)
//
// Copies rows of w floats from src (a row every lds bytes) to dst (every
// ldd bytes), for the short rows of convolution planes (3 to 30 floats),
// where a memmove call per row costs more than the copy. A row of w ≥ 16
// moves 16 floats at a time and ends with the 16 that end the row
// (overlapping the previous move, as memmove does: masked stores that
// straddle cache lines are slow); 8 ≤ w < 16 and 4 ≤ w < 8 move two
// overlapping 8 or 4; only w < 4 takes the tail mask.
TEXT ·copyRowsAVX512(SB), NOSPLIT, $0-50
	MOVQ  dst+0(FP), DI
	MOVQ  src+8(FP), SI
	MOVQ  rows+16(FP), R8
	MOVQ  w+24(FP), R9
	MOVQ  ldd+32(FP), R10
	MOVQ  lds+40(FP), R11
	KMOVW tail+48(FP), K1
	TESTQ R8, R8
	JLE   cdone
	LEAQ  -64(R9*4), R12 // offset of the last 16 floats
	LEAQ  -32(R9*4), R13 // of the last 8
	LEAQ  -16(R9*4), R14 // of the last 4
	CMPQ  R9, $16
	JGE   c16
	CMPQ  R9, $8
	JGE   c8
	CMPQ  R9, $4
	JGE   c4

cmask:
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS   Z0, K1, (DI)
	ADDQ      R10, DI
	ADDQ      R11, SI
	DECQ      R8
	JNZ       cmask
	JMP       cdone

c4:
	VMOVUPS (SI), X0
	VMOVUPS (SI)(R14*1), X1
	VMOVUPS X0, (DI)
	VMOVUPS X1, (DI)(R14*1)
	ADDQ    R10, DI
	ADDQ    R11, SI
	DECQ    R8
	JNZ     c4
	JMP     cdone

c8:
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R13*1), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, (DI)(R13*1)
	ADDQ    R10, DI
	ADDQ    R11, SI
	DECQ    R8
	JNZ     c8
	JMP     cdone

c16:
	MOVQ R9, R15
	SHRQ $4, R15

crow:
	MOVQ DI, AX
	MOVQ SI, BX
	MOVQ R15, CX

cfull:
	VMOVUPS (BX), Z0
	VMOVUPS Z0, (AX)
	ADDQ    $64, AX
	ADDQ    $64, BX
	DECQ    CX
	JNZ     cfull
	VMOVUPS (SI)(R12*1), Z1
	VMOVUPS Z1, (DI)(R12*1)
	ADDQ    R10, DI
	ADDQ    R11, SI
	DECQ    R8
	JNZ     crow

cdone:
	VZEROUPPER
	RET
