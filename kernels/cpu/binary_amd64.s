//go:build amd64 && !purego

#include "textflag.h"

// func binAVX2(op, mode int, d, a, b *float32, n int)
//
// d[i] = a[i] op b[i] for i < n (n a positive multiple of 8), op 0 add,
// 1 subtract, 2 multiply, 3 divide; mode 0 reads both operands as
// vectors, mode 1 takes b[0] as a scalar for every i, mode 2 takes a[0].
// One IEEE operation per element, as the Go loops do.
TEXT ·binAVX2(SB), NOSPLIT, $0-48
	MOVQ op+0(FP), AX
	MOVQ mode+8(FP), BX
	MOVQ d+16(FP), DI
	MOVQ a+24(FP), SI
	MOVQ b+32(FP), DX
	MOVQ n+40(FP), CX
	SHLQ $2, AX
	ADDQ BX, AX          // 4·op + mode
	CMPQ BX, $1
	JNE  notb
	VBROADCASTSS (DX), Y15
notb:
	CMPQ BX, $2
	JNE  nota
	VBROADCASTSS (SI), Y14
nota:
	CMPQ AX, $0
	JEQ  add0
	CMPQ AX, $1
	JEQ  add1
	CMPQ AX, $2
	JEQ  add2
	CMPQ AX, $4
	JEQ  sub0
	CMPQ AX, $5
	JEQ  sub1
	CMPQ AX, $6
	JEQ  sub2
	CMPQ AX, $8
	JEQ  mul0
	CMPQ AX, $9
	JEQ  mul1
	CMPQ AX, $10
	JEQ  mul2
	CMPQ AX, $12
	JEQ  div0
	CMPQ AX, $13
	JEQ  div1
	CMPQ AX, $14
	JEQ  div2
	VZEROUPPER
	RET

add0:
	VMOVUPS (SI), Y0
	VADDPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  add0
	VZEROUPPER
	RET

add1:
	VMOVUPS (SI), Y0
	VADDPS Y15, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  add1
	VZEROUPPER
	RET

add2:
	VADDPS (DX), Y14, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  add2
	VZEROUPPER
	RET

sub0:
	VMOVUPS (SI), Y0
	VSUBPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  sub0
	VZEROUPPER
	RET

sub1:
	VMOVUPS (SI), Y0
	VSUBPS Y15, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  sub1
	VZEROUPPER
	RET

sub2:
	VSUBPS (DX), Y14, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  sub2
	VZEROUPPER
	RET

mul0:
	VMOVUPS (SI), Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  mul0
	VZEROUPPER
	RET

mul1:
	VMOVUPS (SI), Y0
	VMULPS Y15, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  mul1
	VZEROUPPER
	RET

mul2:
	VMULPS (DX), Y14, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  mul2
	VZEROUPPER
	RET

div0:
	VMOVUPS (SI), Y0
	VDIVPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  div0
	VZEROUPPER
	RET

div1:
	VMOVUPS (SI), Y0
	VDIVPS Y15, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  div1
	VZEROUPPER
	RET

div2:
	VDIVPS (DX), Y14, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  div2
	VZEROUPPER
	RET
