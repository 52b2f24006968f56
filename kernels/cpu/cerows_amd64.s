//go:build amd64 && !purego

#include "textflag.h"

// func rowExpsAVX512(x *float32, c, n int, mask uint16, k *[14][8]float32, maxes *float32, ses *float64, e *float32)
//
// For each of n rows of c ≤ 16 columns (the mask's lanes) at x: the
// row's maximum to maxes (NaN for a row holding a NaN, whose other
// outputs are left alone), e^(x−max) to the row of e unless e is nil
// (expF32's algorithm on 16 lanes, with k its constants), and the sum of those exponentials
// in float64 to ses. Masked-off lanes read as −Inf for the maximum and
// count as 0 in the sum. Rows of 4, 8 or 16 columns (c in bytes 16, 32,
// 64; mask all of them) load and store exactly the row, the others
// through the mask's 16-lane window.
TEXT ·rowExpsAVX512(SB), NOSPLIT, $0-64
	MOVQ  x+0(FP), SI
	MOVQ  c+8(FP), R9
	SHLQ  $2, R9
	MOVQ  n+16(FP), CX
	KMOVW mask+24(FP), K1
	KNOTW K1, K4
	MOVQ  k+32(FP), R8
	MOVQ  maxes+40(FP), R10
	MOVQ  ses+48(FP), R11
	MOVQ  e+56(FP), DI
	VBROADCASTSS 0(R8), Z16   // hi
	VBROADCASTSS 32(R8), Z17  // lo
	VBROADCASTSS 64(R8), Z18  // log2e
	VBROADCASTSS 96(R8), Z19  // 0.5
	VBROADCASTSS 128(R8), Z20 // C1
	VBROADCASTSS 160(R8), Z21 // C2
	VBROADCASTSS 192(R8), Z22 // p0
	VBROADCASTSS 224(R8), Z23 // p1
	VBROADCASTSS 256(R8), Z24 // p2
	VBROADCASTSS 288(R8), Z25 // p3
	VBROADCASTSS 320(R8), Z26 // p4
	VBROADCASTSS 352(R8), Z27 // p5
	VBROADCASTSS 384(R8), Z28 // 1
	VPBROADCASTD 416(R8), Z29 // 127
	MOVL         $0xFF800000, AX
	VPBROADCASTD AX, Z30      // −Inf
	TESTQ        CX, CX
	JLE          done

row:
	CMPQ     R9, $16
	JEQ      load4
	CMPQ     R9, $32
	JEQ      load8
	CMPQ     R9, $64
	JEQ      load16
	VMOVAPS  Z30, Z0
	VMOVUPS  (SI), K1, Z0
	JMP      loaded

load4: // rows of 4, 8 or 16: a load of exactly the row (forwarded from a
	// store of the row), −Inf above it
	VMOVUPS (SI), X0
	VMOVAPS Z30, K4, Z0
	JMP     loaded

load8:
	VMOVUPS (SI), Y0
	VMOVAPS Z30, K4, Z0
	JMP     loaded

load16:
	VMOVUPS (SI), Z0

loaded:
	VCMPPS   $3, Z0, Z0, K2 // unordered: the NaN lanes
	KORTESTW K2, K2
	JNZ      nan

	// The maximum, in every lane.
	VSHUFF32X4 $0x4E, Z0, Z0, Z1
	VMAXPS     Z1, Z0, Z1
	VSHUFF32X4 $0xB1, Z1, Z1, Z2
	VMAXPS     Z2, Z1, Z1
	VPERMILPS  $0x4E, Z1, Z2
	VMAXPS     Z2, Z1, Z1
	VPERMILPS  $0xB1, Z1, Z2
	VMAXPS     Z2, Z1, Z1
	VMOVSS     X1, (R10)
	VSUBPS.Z   Z1, Z0, K1, Z6 // x − max; 0 off the mask (−Inf would make
	                          // denormal products there, and slow assists)

	// e^(x−max) as expF32 computes it.
	VMINPS       Z16, Z6, Z0
	VMAXPS       Z17, Z0, Z0
	VMULPS       Z18, Z0, Z1
	VADDPS       Z19, Z1, Z1
	VRNDSCALEPS  $1, Z1, Z1   // fx = floor(x·log2e + ½)
	VMOVAPS      Z0, Z2
	VFNMADD231PS Z20, Z1, Z2  // r = x − fx·C1
	VFNMADD231PS Z21, Z1, Z2  // r −= fx·C2
	VMULPS       Z2, Z2, Z3   // r²
	VMOVAPS      Z22, Z4
	VFMADD213PS  Z23, Z2, Z4
	VFMADD213PS  Z24, Z2, Z4
	VFMADD213PS  Z25, Z2, Z4
	VFMADD213PS  Z26, Z2, Z4
	VFMADD213PS  Z27, Z2, Z4
	VFMADD213PS  Z2, Z3, Z4   // p·r² + r
	VADDPS       Z28, Z4, Z4  // + 1
	VCVTTPS2DQ   Z1, Z5
	VPADDD       Z29, Z5, Z5
	VPSLLD       $23, Z5, Z5  // 2^fx
	VMULPS       Z5, Z4, Z4
	VCMPPS       $0x1D, Z17, Z6, K1, K3 // x−max ≥ lo, on the mask
	VMOVAPS.Z    Z4, K3, Z4
	TESTQ        DI, DI
	JZ           sum
	CMPQ         R9, $16
	JEQ          store4
	CMPQ         R9, $32
	JEQ          store8
	VMOVUPS      Z4, K1, (DI) // 16 columns: the full mask
	ADDQ         R9, DI
	JMP          sum

store4:
	VMOVUPS X4, (DI)
	ADDQ    R9, DI
	JMP     sum

store8:
	VMOVUPS Y4, (DI)
	ADDQ    R9, DI

sum:

	// Σ in float64.
	VEXTRACTF64X4 $1, Z4, Y5
	VCVTPS2PD     Y4, Z6
	VCVTPS2PD     Y5, Z7
	VADDPD        Z7, Z6, Z6
	VEXTRACTF64X4 $1, Z6, Y7
	VADDPD        Y7, Y6, Y6
	VEXTRACTF128  $1, Y6, X7
	VADDPD        X7, X6, X6
	VPERMILPD     $1, X6, X7
	VADDSD        X7, X6, X6
	VMOVSD        X6, (R11)

next:
	ADDQ R9, SI
	ADDQ $4, R10
	ADDQ $8, R11
	DECQ CX
	JNZ  row

done:
	VZEROUPPER
	RET

nan:
	MOVL  $0x7FC00000, (R10)
	TESTQ DI, DI
	JZ    next
	ADDQ  R9, DI
	JMP   next
