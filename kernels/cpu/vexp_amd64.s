//go:build amd64 && !purego

#include "textflag.h"

// func vexpAVX2(dst, src *float32, n int, c *[14][8]float32)
//
// Eight lanes per iteration of Cephes' expf (see vexp.go). c holds, 32
// bytes each: hi, lo, log2e, 0.5, C1, C2, p0..p5, 1, and the int32 127.
TEXT ·vexpAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), R8
	SHRQ $3, CX
	JZ   done

loop:
	VMOVUPS (SI), Y6                // the input
	VMINPS  0(R8), Y6, Y0           // x = min(x, hi)
	VMAXPS  32(R8), Y0, Y0          // x = max(x, lo)
	VMULPS  64(R8), Y0, Y1          // x·log2e
	VADDPS  96(R8), Y1, Y1          // + 0.5
	VROUNDPS $1, Y1, Y1             // fx = floor(...)
	VMOVAPS Y0, Y2
	VFNMADD231PS 128(R8), Y1, Y2    // r = x − fx·C1
	VFNMADD231PS 160(R8), Y1, Y2    // r −= fx·C2
	VMULPS  Y2, Y2, Y3              // z = r²
	VMOVUPS 192(R8), Y4             // p = p0
	VFMADD213PS 224(R8), Y2, Y4     // p = p·r + p1
	VFMADD213PS 256(R8), Y2, Y4     // p = p·r + p2
	VFMADD213PS 288(R8), Y2, Y4     // p = p·r + p3
	VFMADD213PS 320(R8), Y2, Y4     // p = p·r + p4
	VFMADD213PS 352(R8), Y2, Y4     // p = p·r + p5
	VFMADD213PS Y2, Y3, Y4          // p = p·z + r
	VADDPS  384(R8), Y4, Y4         // p += 1
	VCVTTPS2DQ Y1, Y5               // n = int(fx), exact
	VPADDD  416(R8), Y5, Y5         // n + 127
	VPSLLD  $23, Y5, Y5             // 2^n
	VMULPS  Y5, Y4, Y4              // p·2^n
	VCMPPS  $0x1D, 32(R8), Y6, Y7   // input ≥ lo (GE, ordered)
	VANDPS  Y7, Y4, Y4              // else 0
	VMOVUPS Y4, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     loop

done:
	VZEROUPPER
	RET
