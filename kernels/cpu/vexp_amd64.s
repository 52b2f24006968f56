//go:build amd64 && !purego

#include "textflag.h"
#include "exp_amd64.h"

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
	VMOVUPS (SI), Y6 // the input
	EXPPS(R8, Y6, Y0, Y1, Y2, Y3, Y4, Y5, Y4)
	VMOVUPS Y4, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     loop

done:
	VZEROUPPER
	RET
