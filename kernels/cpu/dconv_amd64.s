//go:build amd64 && !purego

#include "textflag.h"
#include "tile_amd64.h"

// The arguments both direct-convolution kernels take: CX the k count,
// SI the packed A panel, R9 the padded input, DI the offset table, DX the
// tile of C and BX its row stride in bytes.
#define DCONV_ARGS \
	MOVQ kb+0(FP), CX; \
	MOVQ pa+8(FP), SI; \
	MOVQ xq+16(FP), R9; \
	MOVQ offs+24(FP), DI; \
	MOVQ c+32(FP), DX; \
	MOVQ ldc+40(FP), BX; \
	SHLQ $2, BX

// The B row of step p: the 32 floats at the input plus the step's offset,
// into Z0 and Z1.
#define LOAD_B_ROW \
	MOVQ    (DI), R10; \
	VMOVUPS (R9)(R10*4), Z0; \
	VMOVUPS 64(R9)(R10*4), Z1

// func sconv12x32AVX512(kb int, pa, xq *float32, offs *int, c *float32, ldc int, add bool)
//
// The direct-convolution micro-kernel: sgemm12x32AVX512 with the B row of
// step p read straight from the (zero-padded) input, 32 consecutive
// floats at xq + offs[p], instead of from a packed panel. Same order of
// operations per element: accumulators Z4..Z27 (row i in Z(4+2i),
// Z(5+2i)) start at zero, take one FMA per p in order, and are added to
// C once at the end (stored in C when add is false).
TEXT ·sconv12x32AVX512(SB), NOSPLIT, $0-49
	DCONV_ARGS
	ZEROTILE12
	TESTQ CX, CX
	JZ    store

loop:
	LOAD_B_ROW
	FMATILE12
	ADDQ $48, SI
	ADDQ $8, DI
	DECQ CX
	JNZ  loop

store:
	MOVBQZX add+48(FP), AX
	TESTQ   AX, AX
	JZ      assign
	ADDTILE12
	VZEROUPPER
	RET

assign:
	SETTILE12
	VZEROUPPER
	RET

// func sconv8x32AVX512(kb int, pa, xq *float32, offs *int, c *float32, ldc int, add bool)
//
// sconv12x32AVX512 for an 8×32 tile (an 8-row A panel): for convolutions
// of 8 or 16 output channels, which 12-row tiles would fill to two
// thirds. Accumulators Z4..Z19 (row i in Z(4+2i), Z(5+2i)), same order of
// operations per element.
TEXT ·sconv8x32AVX512(SB), NOSPLIT, $0-49
	DCONV_ARGS
	ZEROTILE8
	TESTQ CX, CX
	JZ    store8

loop8:
	LOAD_B_ROW
	FMATILE8
	ADDQ $32, SI
	ADDQ $8, DI
	DECQ CX
	JNZ  loop8

store8:
	MOVBQZX add+48(FP), AX
	TESTQ   AX, AX
	JZ      assign8
	ADDTILE8
	VZEROUPPER
	RET

assign8:
	SETTILE8
	VZEROUPPER
	RET
