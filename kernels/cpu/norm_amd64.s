//go:build amd64 && !purego

#include "textflag.h"

// The batch-norm and ReLU row kernels of norm_amd64.go. n is a positive
// multiple of 8 in each; sums accumulate in float64 (each float32 widened
// exactly) in four 4-lane accumulators, added pairwise at the end.

// func sumAVX2(x *float32, n int) float64
TEXT ·sumAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	CMPQ CX, $16
	JLT  sum8

sum16:
	VCVTPS2PD 0(SI), Y4
	VCVTPS2PD 16(SI), Y5
	VCVTPS2PD 32(SI), Y6
	VCVTPS2PD 48(SI), Y7
	VADDPD Y4, Y0, Y0
	VADDPD Y5, Y1, Y1
	VADDPD Y6, Y2, Y2
	VADDPD Y7, Y3, Y3
	ADDQ $64, SI
	SUBQ $16, CX
	CMPQ CX, $16
	JGE  sum16

sum8:
	TESTQ CX, CX
	JZ    sumdone
	VCVTPS2PD 0(SI), Y4
	VCVTPS2PD 16(SI), Y5
	VADDPD Y4, Y0, Y0
	VADDPD Y5, Y1, Y1

sumdone:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VUNPCKHPD X0, X0, X1
	VADDSD X1, X0, X0
	VMOVSD X0, ret+16(FP)
	VZEROUPPER
	RET

// func sqDevAVX2(x *float32, n int, mu float64) float64
//
// Σ (x[i] − mu)², in float64.
TEXT ·sqDevAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD mu+16(FP), Y15
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	CMPQ CX, $16
	JLT  sq8

sq16:
	VCVTPS2PD 0(SI), Y4
	VCVTPS2PD 16(SI), Y5
	VCVTPS2PD 32(SI), Y6
	VCVTPS2PD 48(SI), Y7
	VSUBPD Y15, Y4, Y4
	VSUBPD Y15, Y5, Y5
	VSUBPD Y15, Y6, Y6
	VSUBPD Y15, Y7, Y7
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1
	VFMADD231PD Y6, Y6, Y2
	VFMADD231PD Y7, Y7, Y3
	ADDQ $64, SI
	SUBQ $16, CX
	CMPQ CX, $16
	JGE  sq16

sq8:
	TESTQ CX, CX
	JZ    sqdone
	VCVTPS2PD 0(SI), Y4
	VCVTPS2PD 16(SI), Y5
	VSUBPD Y15, Y4, Y4
	VSUBPD Y15, Y5, Y5
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1

sqdone:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VUNPCKHPD X0, X0, X1
	VADDSD X1, X0, X0
	VMOVSD X0, ret+24(FP)
	VZEROUPPER
	RET

// RELUMASK zeroes the elements of dy in Y4 (eight, from byte offset off)
// where the forward's output before its ReLU, (x − mu)·a + b with x at
// off(DI), is not > 0 (mu, a, b in Y13, Y12, Y11; Y14 zero; Y5 scratch).
#define RELUMASK(off) \
	VMOVUPS     off(DI), Y5; \
	VSUBPS      Y13, Y5, Y5; \
	VFMADD213PS Y11, Y12, Y5; \
	VCMPPS      $0x1E, Y14, Y5, Y5; \
	VANDPS      Y5, Y4, Y4

// GRADSUMS adds the eight dy in Y4 (float32) to gradSumsAVX2's sums as
// float64: the low four to sg0, the high four to sg1, and dy·(x − mu)
// with x at byte offset off of DI (mu in Y15) to sd0 and sd1. Y5, Y6 are
// scratch.
#define GRADSUMS(off, sg0, sg1, sd0, sd1) \
	VEXTRACTF128 $1, Y4, X6; \
	VCVTPS2PD    X4, Y4; \
	VCVTPS2PD    X6, Y6; \
	VADDPD       Y4, sg0, sg0; \
	VADDPD       Y6, sg1, sg1; \
	VCVTPS2PD    off(DI), Y5; \
	VSUBPD       Y15, Y5, Y5; \
	VFMADD231PD  Y4, Y5, sd0; \
	VCVTPS2PD    off+16(DI), Y5; \
	VSUBPD       Y15, Y5, Y5; \
	VFMADD231PD  Y6, Y5, sd1

// func gradSumsAVX2(dy, x, y *float32, n int, mu float64) (sg, sgd float64)
//
// Σ dy[i] and Σ dy[i]·(x[i] − mu) in float64, where dy[i] counts only where
// y[i] > 0 when y is not nil (a ReLU after the batch norm).
TEXT ·gradSumsAVX2(SB), NOSPLIT, $0-64
	MOVQ dy+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VBROADCASTSD mu+24(FP), Y15
	VBROADCASTSS mu32+32(FP), Y13
	VBROADCASTSS a+36(FP), Y12
	VBROADCASTSS b+40(FP), Y11
	MOVBQZX relu+44(FP), R8
	VXORPS Y14, Y14, Y14
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y7, Y7, Y7
	VXORPD Y8, Y8, Y8
	VXORPD Y9, Y9, Y9
	VXORPD Y10, Y10, Y10
	// Sixteen elements a step, each of the eight float64 accumulators
	// (Σ dy in Y0, Y2, Y7, Y8; Σ dy·(x − mu) in Y1, Y3, Y9, Y10) taking
	// one addition, so that their latency chains overlap; then at most
	// one step of eight.
	TESTQ R8, R8
	JNZ   gsmasked

gsplain:
	CMPQ CX, $16
	JLT  gsplain8
	VMOVUPS 0(SI), Y4
	GRADSUMS(0, Y0, Y2, Y1, Y3)
	VMOVUPS 32(SI), Y4
	GRADSUMS(32, Y7, Y8, Y9, Y10)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  gsplain

gsplain8:
	TESTQ CX, CX
	JZ    gsdone
	VMOVUPS 0(SI), Y4
	GRADSUMS(0, Y0, Y2, Y1, Y3)
	JMP   gsdone

gsmasked:
	CMPQ CX, $16
	JLT  gsmasked8
	VMOVUPS 0(SI), Y4
	RELUMASK(0)
	GRADSUMS(0, Y0, Y2, Y1, Y3)
	VMOVUPS 32(SI), Y4
	RELUMASK(32)
	GRADSUMS(32, Y7, Y8, Y9, Y10)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  gsmasked

gsmasked8:
	TESTQ CX, CX
	JZ    gsdone
	VMOVUPS 0(SI), Y4
	RELUMASK(0)
	GRADSUMS(0, Y0, Y2, Y1, Y3)

gsdone:
	VADDPD Y2, Y0, Y0
	VADDPD Y8, Y7, Y7
	VADDPD Y7, Y0, Y0
	VADDPD Y3, Y1, Y1
	VADDPD Y10, Y9, Y9
	VADDPD Y9, Y1, Y1
	VEXTRACTF128 $1, Y0, X2
	VADDPD X2, X0, X0
	VUNPCKHPD X0, X0, X2
	VADDSD X2, X0, X0
	VMOVSD X0, sg+48(FP)
	VEXTRACTF128 $1, Y1, X3
	VADDPD X3, X1, X1
	VUNPCKHPD X1, X1, X3
	VADDSD X3, X1, X1
	VMOVSD X1, sgd+56(FP)
	VZEROUPPER
	RET

// func affineActAVX2(y, x *float32, n int, mu, a, b float32, relu bool)
//
// y[i] = (x[i] − mu)·a + b, then max(·, +0) keeping NaN when relu.
TEXT ·affineActAVX2(SB), NOSPLIT, $0-37
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS mu+24(FP), Y12
	VBROADCASTSS a+28(FP), Y15
	VBROADCASTSS b+32(FP), Y14
	VXORPS Y13, Y13, Y13
	MOVBLZX relu+36(FP), AX

afloop:
	VMOVUPS 0(SI), Y0
	VSUBPS  Y12, Y0, Y0      // x − mu
	VFMADD213PS Y14, Y15, Y0 // ·a + b
	TESTQ AX, AX
	JZ    afstore
	VMAXPS Y13, Y0, Y1       // max(v, +0): +0 for −0, +0 for NaN
	VCMPPS $0x03, Y0, Y0, Y2 // NaN lanes (unordered)
	VBLENDVPS Y2, Y0, Y1, Y0 // NaN kept

afstore:
	VMOVUPS Y0, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  afloop
	VZEROUPPER
	RET

// func bnDxAVX2(dx, dy, x, y *float32, n int, mu, c1, c2, c0 float32)
//
// dx[i] = c0 + c1·dy[i] + c2·(x[i] − mu), with dy[i] taken as +0 where
// y[i] > 0 fails when y is not nil.
TEXT ·bnDxAVX2(SB), NOSPLIT, $0-57
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS mu+32(FP), Y15
	VBROADCASTSS c1+36(FP), Y14
	VBROADCASTSS c2+40(FP), Y13
	VBROADCASTSS c0+44(FP), Y12
	VBROADCASTSS a+48(FP), Y10
	VBROADCASTSS b+52(FP), Y9
	MOVBQZX relu+56(FP), R8
	VXORPS Y11, Y11, Y11

dxloop:
	VMOVUPS 0(SI), Y0
	VMOVUPS 0(DX), Y1
	VSUBPS Y15, Y1, Y1       // x − mu
	TESTQ R8, R8
	JZ    dxnomask
	VMOVAPS Y1, Y2
	VFMADD213PS Y9, Y10, Y2  // ·a + b: the forward's output before its ReLU
	VCMPPS  $0x1E, Y11, Y2, Y2
	VANDPS Y2, Y0, Y0

dxnomask:
	VMOVAPS Y12, Y3
	VFMADD231PS Y14, Y0, Y3  // c0 + c1·g
	VFMADD231PS Y13, Y1, Y3  // + c2·(x − mu)
	VMOVUPS Y3, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  dxloop
	VZEROUPPER
	RET

// func reluBwdAVX2(dx, dy, x *float32, n int)
//
// dx[i] = dy[i] where x[i] > 0, else +0.
TEXT ·reluBwdAVX2(SB), NOSPLIT, $0-32
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ n+24(FP), CX
	VXORPS Y15, Y15, Y15

rbloop:
	VMOVUPS 0(DX), Y0
	VCMPPS  $0x1E, Y15, Y0, Y0
	VANDPS 0(SI), Y0, Y0
	VMOVUPS Y0, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  rbloop
	VZEROUPPER
	RET
