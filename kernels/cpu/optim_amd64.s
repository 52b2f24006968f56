//go:build amd64 && !purego

#include "textflag.h"

// func sgdMomAVX(p, grad, mom *float32, n int, mu, lr float32)
//
// The usual SGD-momentum step over n elements (n a multiple of 8), in the
// order and rounding of sgdPrep's Go loop: v = mu·m + g; m = v;
// p = p − lr·v (separate multiplies and adds, no fused multiply-add).
TEXT ·sgdMomAVX(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ mom+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS mu+32(FP), Y14
	VBROADCASTSS lr+36(FP), Y15
	SHRQ $3, CX
	JZ   sgddone

sgdloop:
	VMULPS  (DX), Y14, Y0   // mu·m
	VADDPS  (SI), Y0, Y0    // v = mu·m + g
	VMOVUPS Y0, (DX)        // m = v
	VMULPS  Y0, Y15, Y1     // lr·v
	VMOVUPS (DI), Y2
	VSUBPS  Y1, Y2, Y2      // p − lr·v
	VMOVUPS Y2, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	ADDQ    $32, DX
	DECQ    CX
	JNZ     sgdloop

sgddone:
	VZEROUPPER
	RET

// func adamwAVX(p, grad, mom, vel *float32, n int, c *[8]float32)
//
// The AdamW step over n elements (n a multiple of 8), in the order and
// rounding of adamwPrep's Go loop. c holds decay, β1, 1−β1, β2, 1−β2,
// sqrt(1−β2^t), eps, step size:
//   m = β1·m + (1−β1)·g;  v = β2·v + ((1−β2)·g)·g
//   p = p·decay − step·(m / (sqrt(v)/sqrt(1−β2^t) + eps))
TEXT ·adamwAVX(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ mom+16(FP), DX
	MOVQ vel+24(FP), BX
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), R8
	VBROADCASTSS 0(R8), Y8    // decay
	VBROADCASTSS 4(R8), Y9    // β1
	VBROADCASTSS 8(R8), Y10   // 1−β1
	VBROADCASTSS 12(R8), Y11  // β2
	VBROADCASTSS 16(R8), Y12  // 1−β2
	VBROADCASTSS 20(R8), Y13  // sqrt(1−β2^t)
	VBROADCASTSS 24(R8), Y14  // eps
	VBROADCASTSS 28(R8), Y15  // step size
	SHRQ $3, CX
	JZ   adamdone

adamloop:
	VMOVUPS (SI), Y0          // g
	VMULPS  (DI), Y8, Y1      // pi = p·decay
	VMULPS  (DX), Y9, Y2      // β1·m
	VMULPS  Y0, Y10, Y3       // (1−β1)·g
	VADDPS  Y3, Y2, Y2        // m
	VMOVUPS Y2, (DX)
	VMULPS  (BX), Y11, Y4     // β2·v
	VMULPS  Y0, Y12, Y5       // (1−β2)·g
	VMULPS  Y0, Y5, Y5        // ·g
	VADDPS  Y5, Y4, Y4        // v
	VMOVUPS Y4, (BX)
	VSQRTPS Y4, Y6            // sqrt(v)
	VDIVPS  Y13, Y6, Y6       // / sqrt(1−β2^t)
	VADDPS  Y14, Y6, Y6       // + eps
	VDIVPS  Y6, Y2, Y7        // m / denom
	VMULPS  Y7, Y15, Y7       // step·(...)
	VSUBPS  Y7, Y1, Y1        // pi − step·(...)
	VMOVUPS Y1, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, BX
	DECQ    CX
	JNZ     adamloop

adamdone:
	VZEROUPPER
	RET
