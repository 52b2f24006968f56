//go:build amd64 && !purego

#include "textflag.h"

// Steps one candidate into the running maximum Z4 and its offset Z8: a
// candidate replaces the maximum when it is greater, or a NaN, while the
// maximum is not yet a NaN (so ties and later NaNs keep the first).
#define STEP(cand, offv) \
	VCMPPS $0x07, Z4, Z4, K2; \
	VCMPPS $0x16, Z4, cand, K2, K1; \
	VMOVAPS cand, K1, Z4; \
	VMOVDQA32 offv, K1, Z8

// Pools 16 outputs from the rows at SI and DX (32 inputs each, loaded
// into Z0:Z1 and Z2:Z3 by the caller): Z4 the maxima, Z8 their offsets
// (0, 1, w, w+1) within the 2×2 window.
#define POOL16 \
	VMOVAPS   Z0, Z4; \
	VPERMT2PS Z1, Z20, Z4; \
	VMOVAPS   Z0, Z5; \
	VPERMT2PS Z1, Z21, Z5; \
	VMOVAPS   Z2, Z6; \
	VPERMT2PS Z3, Z20, Z6; \
	VMOVAPS   Z2, Z7; \
	VPERMT2PS Z3, Z21, Z7; \
	VPXORD    Z8, Z8, Z8; \
	STEP(Z5, Z24); \
	STEP(Z6, Z25); \
	STEP(Z7, Z26)

// func maxPool2x2AVX512(y *float32, idx *int32, x *float32, blocks int, base, w int32, tab *[2][16]int32, maskOut, maskA, maskB uint16, rows, wo int)
//
// The 2×2, stride-2 max pool of rows output rows of wo outputs (a plane,
// or part of one): per row 16·blocks outputs, then the outputs of
// maskOut (a tail of fewer than 16, its inputs under maskA and maskB),
// from the input rows 2·oh and 2·oh+1 of x (w floats wide, two inputs
// per output). y gets the maxima (rows of wo); idx (unless nil) the flat
// input index base + 2·oh·w + 2·j + offset of output j's maximum (base
// the index of x's first element in its plane). tab holds the even and
// the odd lane indices 0, 2, …, 30 and 1, 3, …, 31.
TEXT ·maxPool2x2AVX512(SB), NOSPLIT, $0-72
	MOVQ y+0(FP), R10
	MOVQ idx+8(FP), R11
	MOVQ x+16(FP), R12
	MOVQ tab+40(FP), R8
	VMOVDQU32 0(R8), Z20           // even lanes
	VMOVDQU32 64(R8), Z21          // odd lanes
	MOVL base+32(FP), R14
	MOVL $32, AX
	VPBROADCASTD AX, Z23           // 32 inputs per block
	MOVL $1, AX
	VPBROADCASTD AX, Z24           // offset of b
	MOVL w+36(FP), AX
	VPBROADCASTD AX, Z25           // offset of c
	VPADDD Z24, Z25, Z26           // offset of d
	MOVLQSX w+36(FP), R13
	SHLQ $2, R13                   // input row stride in bytes
	MOVQ wo+64(FP), R15
	SHLQ $2, R15                   // output row stride in bytes
	KMOVW maskOut+48(FP), K5
	KMOVW maskA+50(FP), K3
	KMOVW maskB+52(FP), K4
	MOVQ rows+56(FP), BX
	TESTQ BX, BX
	JLE   done

row:
	MOVQ R10, DI
	MOVQ R11, R9
	MOVQ R12, SI
	LEAQ (R12)(R13*1), DX
	VPBROADCASTD R14, Z22
	VPADDD Z20, Z22, Z22           // base + 2·oh·w + 2·j
	MOVQ blocks+24(FP), CX
	TESTQ CX, CX
	JZ    tail

loop:
	VMOVUPS 0(SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 0(DX), Z2
	VMOVUPS 64(DX), Z3
	POOL16
	VMOVUPS Z4, 0(DI)
	TESTQ R9, R9
	JZ    noidx
	VPADDD Z22, Z8, Z8
	VMOVDQU32 Z8, 0(R9)
	ADDQ $64, R9

noidx:
	VPADDD Z23, Z22, Z22
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $64, DI
	DECQ CX
	JNZ  loop

tail:
	KORTESTW K5, K5
	JZ    next
	VMOVUPS.Z 0(SI), K3, Z0
	VMOVUPS.Z 64(SI), K4, Z1
	VMOVUPS.Z 0(DX), K3, Z2
	VMOVUPS.Z 64(DX), K4, Z3
	POOL16
	VMOVUPS Z4, K5, 0(DI)
	TESTQ R9, R9
	JZ    next
	VPADDD Z22, Z8, Z8
	VMOVDQU32 Z8, K5, 0(R9)

next:
	ADDQ  R15, R10
	TESTQ R11, R11
	JZ    nextx
	ADDQ  R15, R11

nextx:
	LEAQ (R12)(R13*2), R12
	MOVL w+36(FP), AX
	LEAL (R14)(AX*2), R14
	DECQ BX
	JNZ  row

done:
	VZEROUPPER
	RET
