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

// The window constants both pool kernels share, from their common
// arguments (base, w, wo, maskOut at the same frame offsets): R14 the
// running flat index base, Z23 the 32 inputs a block advances, Z24..Z26
// the offsets 1, w and w+1 of a window's b, c and d, R13 the input (dx)
// row stride and R15 the output (dy, idx) row stride in bytes, K5 the
// tail's outputs.
#define WINDOW_CONSTS \
	MOVL base+32(FP), R14; \
	MOVL $32, AX; \
	VPBROADCASTD AX, Z23; \
	MOVL $1, AX; \
	VPBROADCASTD AX, Z24; \
	MOVL w+36(FP), AX; \
	VPBROADCASTD AX, Z25; \
	VPADDD Z24, Z25, Z26; \
	MOVLQSX w+36(FP), R13; \
	SHLQ $2, R13; \
	MOVQ wo+64(FP), R15; \
	SHLQ $2, R15; \
	KMOVW maskOut+48(FP), K5

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
	WINDOW_CONSTS
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

// Spreads the 16 gradients of Z0 by their window offsets Z1 (idx −
// (base + 2j)) into the 2×2 windows: Z2:Z3 the 32 values of the upper
// input row (offset 0 at even, 1 at odd positions), Z4:Z5 of the lower
// one (w, w+1), zero elsewhere; K6 the lanes whose offset was one of the
// four. Z27 and Z28 hold the interleaving indices, Z24..Z26 the offsets
// 1, w and w+1.
#define SPREAD16 \
	VPXORD    Z9, Z9, Z9; \
	VPCMPEQD  Z9, Z1, K1; \
	VPCMPEQD  Z24, Z1, K2; \
	VPCMPEQD  Z25, Z1, K3; \
	VPCMPEQD  Z26, Z1, K4; \
	KORW      K1, K2, K6; \
	KORW      K3, K6, K6; \
	KORW      K4, K6, K6; \
	VMOVAPS.Z Z0, K1, Z10; \
	VMOVAPS.Z Z0, K2, Z11; \
	VMOVAPS.Z Z0, K3, Z12; \
	VMOVAPS.Z Z0, K4, Z13; \
	VMOVAPS   Z10, Z2; \
	VPERMT2PS Z11, Z27, Z2; \
	VMOVAPS   Z10, Z3; \
	VPERMT2PS Z11, Z28, Z3; \
	VMOVAPS   Z12, Z4; \
	VPERMT2PS Z13, Z27, Z4; \
	VMOVAPS   Z12, Z5; \
	VPERMT2PS Z13, Z28, Z5

// func maxPoolBwd2x2AVX512(dx, dy *float32, idx *int32, blocks int, base, w int32, tab *[4][16]int32, maskOut, maskA, maskB uint16, rows, wo int) (ok bool)
//
// The backward of maxPool2x2AVX512 over rows output rows: every element
// of the input rows 2·oh and 2·oh+1 under the windows (the first 2·wo
// columns; dx rows w wide) is written, the gradient dy of an output at
// the offset its index idx names and zero elsewhere, so dx needs no
// clearing. tab holds the even and odd lane indices and the two
// interleaving index vectors. ok is false when some index lies outside
// its own window (not an index of this pool's forward); dx is then
// partly written and the caller must redo it.
TEXT ·maxPoolBwd2x2AVX512(SB), NOSPLIT, $0-73
	MOVQ dx+0(FP), R10
	MOVQ dy+8(FP), R11
	MOVQ idx+16(FP), R12
	MOVQ tab+40(FP), R8
	VMOVDQU32 0(R8), Z20           // even lanes
	VMOVDQU32 128(R8), Z27         // interleave, low half
	VMOVDQU32 192(R8), Z28         // interleave, high half
	WINDOW_CONSTS
	MOVQ rows+56(FP), BX
	TESTQ BX, BX
	JLE   bdone

brow:
	MOVQ R10, DI
	LEAQ (R10)(R13*1), DX
	MOVQ R11, SI
	MOVQ R12, R9
	VPBROADCASTD R14, Z22
	VPADDD Z20, Z22, Z22           // base + 2·oh·w + 2·j
	MOVQ blocks+24(FP), CX
	TESTQ CX, CX
	JZ    btail

bloop:
	VMOVUPS   0(SI), Z0
	VMOVDQU32 0(R9), Z1
	VPSUBD    Z22, Z1, Z1
	SPREAD16
	KORTESTW  K6, K6
	JNC       bbad
	VMOVUPS   Z2, 0(DI)
	VMOVUPS   Z3, 64(DI)
	VMOVUPS   Z4, 0(DX)
	VMOVUPS   Z5, 64(DX)
	VPADDD    Z23, Z22, Z22
	ADDQ      $64, SI
	ADDQ      $64, R9
	ADDQ      $128, DI
	ADDQ      $128, DX
	DECQ      CX
	JNZ       bloop

btail:
	KORTESTW K5, K5
	JZ       bnext
	VMOVUPS.Z   0(SI), K5, Z0
	VMOVDQU32.Z 0(R9), K5, Z1
	VPSUBD      Z22, Z1, Z1
	SPREAD16
	KANDW       K5, K6, K6
	KXORW       K5, K6, K6
	KORTESTW    K6, K6
	JNZ         bbad
	KMOVW       maskA+50(FP), K3
	KMOVW       maskB+52(FP), K4
	VMOVUPS     Z2, K3, 0(DI)
	VMOVUPS     Z3, K4, 64(DI)
	VMOVUPS     Z4, K3, 0(DX)
	VMOVUPS     Z5, K4, 64(DX)

bnext:
	ADDQ R15, R11
	ADDQ R15, R12
	LEAQ (R10)(R13*2), R10
	MOVL w+36(FP), AX
	LEAL (R14)(AX*2), R14
	DECQ BX
	JNZ  brow

bdone:
	MOVB $1, ok+72(FP)
	VZEROUPPER
	RET

bbad:
	MOVB $0, ok+72(FP)
	VZEROUPPER
	RET
