//go:build amd64 && !purego

#include "textflag.h"
#include "exp_amd64.h"

// func geluAVX2(dst, src *float32, n int, k *[18][8]float32, e *[14][8]float32)
//
// Eight lanes per iteration of geluErfF32's algorithm (see gelu.go). k
// holds, 32 bytes each: 14, −14, ¼, 1, ½, −½, R's coefficients c0..c10
// and the mask 0x7fffffff; e is expConsts (for EXPPS, exp_amd64.h).
TEXT ·geluAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), R9
	MOVQ e+32(FP), R8
	SHRQ $3, CX
	JZ   done

loop:
	VMOVUPS (SI), Y15               // x
	VMINPS  0(R9), Y15, Y0          // xc = min(x, 14)
	VMAXPS  32(R9), Y0, Y0          // xc = max(xc, −14)
	VANDPS  544(R9), Y0, Y1         // |xc|
	VMULPS  64(R9), Y1, Y1          // |xc|/4
	VADDPS  96(R9), Y1, Y1          // + 1
	VMOVUPS 96(R9), Y2
	VDIVPS  Y1, Y2, Y1              // u = 1/(1 + |xc|/4)
	VSUBPS  128(R9), Y1, Y1         // v = u − ½
	VMOVUPS 192(R9), Y2             // R = c0
	VFMADD213PS 224(R9), Y1, Y2     // R = R·v + c1
	VFMADD213PS 256(R9), Y1, Y2
	VFMADD213PS 288(R9), Y1, Y2
	VFMADD213PS 320(R9), Y1, Y2
	VFMADD213PS 352(R9), Y1, Y2
	VFMADD213PS 384(R9), Y1, Y2
	VFMADD213PS 416(R9), Y1, Y2
	VFMADD213PS 448(R9), Y1, Y2
	VFMADD213PS 480(R9), Y1, Y2
	VFMADD213PS 512(R9), Y1, Y2     // R = R·v + c10
	VMULPS  Y0, Y0, Y3              // hi = xc² rounded
	VMOVAPS Y3, Y4
	VFMSUB231PS Y0, Y0, Y4          // lo = xc² − hi, exact
	VMULPS  128(R9), Y4, Y4         // lo/2
	VMOVUPS 96(R9), Y5
	VSUBPS  Y4, Y5, Y4              // 1 − lo/2: e^(−lo/2) to first order
	VMULPS  160(R9), Y3, Y3         // y = −hi/2

	EXPPS(R8, Y3, Y7, Y8, Y9, Y10, Y11, Y12, Y6) // e^y

	VMULPS  Y4, Y6, Y6              // e^(−x²/2)
	VMULPS  Y2, Y6, Y6              // erfc(|x|/√2)
	VMULPS  128(R9), Y6, Y6         // h = erfc/2
	VMOVUPS 96(R9), Y7
	VSUBPS  Y6, Y7, Y7              // 1 − h
	VXORPS  Y8, Y8, Y8
	VCMPPS  $1, Y8, Y15, Y9         // x < 0
	VBLENDVPS Y9, Y6, Y7, Y10       // Φ(x): h where x < 0, else 1 − h
	VMULPS  Y10, Y15, Y10           // x·Φ(x)
	VMOVUPS Y10, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     loop

done:
	VZEROUPPER
	RET
