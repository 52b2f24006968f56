// Stores of the 12×32 and 8×32 AVX-512 micro-tiles (gemm_amd64.s,
// dconv_amd64.s): one tile row is two accumulators, at DX and DX+64 in C.

// Adds the row's accumulators za, zb to C and stores the sums.
#define ADDROW(za, zb) \
	VADDPS  (DX), za, za; \
	VMOVUPS za, (DX); \
	VADDPS  64(DX), zb, zb; \
	VMOVUPS zb, 64(DX)

// Stores the row's accumulators za, zb in C.
#define SETROW(za, zb) \
	VMOVUPS za, (DX); \
	VMOVUPS zb, 64(DX)

// One tile row's step p: the A element at off(SI) broadcast into zb, times
// the B row in Z0 and Z1, added to the row's accumulators za and zz.
#define FMAROW(off, zb, za, zz) \
	VBROADCASTSS off(SI), zb; \
	VFMADD231PS  Z0, zb, za; \
	VFMADD231PS  Z1, zb, zz

// A whole tile's store, row by row (BX the row stride of C in bytes;
// accumulators Z4, Z5 for row 0, Z(4+2i), Z(5+2i) for row i): the first
// 8 rows, and a 12-row tile as those plus four more.
#define ADDTILE8 \
	ADDROW(Z4, Z5); \
	ADDQ BX, DX; \
	ADDROW(Z6, Z7); \
	ADDQ BX, DX; \
	ADDROW(Z8, Z9); \
	ADDQ BX, DX; \
	ADDROW(Z10, Z11); \
	ADDQ BX, DX; \
	ADDROW(Z12, Z13); \
	ADDQ BX, DX; \
	ADDROW(Z14, Z15); \
	ADDQ BX, DX; \
	ADDROW(Z16, Z17); \
	ADDQ BX, DX; \
	ADDROW(Z18, Z19)

#define ADDTILE12 \
	ADDTILE8; \
	ADDQ BX, DX; \
	ADDROW(Z20, Z21); \
	ADDQ BX, DX; \
	ADDROW(Z22, Z23); \
	ADDQ BX, DX; \
	ADDROW(Z24, Z25); \
	ADDQ BX, DX; \
	ADDROW(Z26, Z27)

#define SETTILE8 \
	SETROW(Z4, Z5); \
	ADDQ BX, DX; \
	SETROW(Z6, Z7); \
	ADDQ BX, DX; \
	SETROW(Z8, Z9); \
	ADDQ BX, DX; \
	SETROW(Z10, Z11); \
	ADDQ BX, DX; \
	SETROW(Z12, Z13); \
	ADDQ BX, DX; \
	SETROW(Z14, Z15); \
	ADDQ BX, DX; \
	SETROW(Z16, Z17); \
	ADDQ BX, DX; \
	SETROW(Z18, Z19)

#define SETTILE12 \
	SETTILE8; \
	ADDQ BX, DX; \
	SETROW(Z20, Z21); \
	ADDQ BX, DX; \
	SETROW(Z22, Z23); \
	ADDQ BX, DX; \
	SETROW(Z24, Z25); \
	ADDQ BX, DX; \
	SETROW(Z26, Z27)

// Zeroes the accumulators of an 8-row tile, and of a 12-row one.
#define ZEROTILE8 \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19

#define ZEROTILE12 \
	ZEROTILE8; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23; \
	VPXORD Z24, Z24, Z24; \
	VPXORD Z25, Z25, Z25; \
	VPXORD Z26, Z26, Z26; \
	VPXORD Z27, Z27, Z27

// One step p of a whole tile: rows 0..7 (and 8..11) from the packed A
// column at SI (4 bytes a row), the broadcasts rotating through Z28..Z31.
#define FMATILE8 \
	FMAROW(0, Z28, Z4, Z5); \
	FMAROW(4, Z29, Z6, Z7); \
	FMAROW(8, Z30, Z8, Z9); \
	FMAROW(12, Z31, Z10, Z11); \
	FMAROW(16, Z28, Z12, Z13); \
	FMAROW(20, Z29, Z14, Z15); \
	FMAROW(24, Z30, Z16, Z17); \
	FMAROW(28, Z31, Z18, Z19)

#define FMATILE12 \
	FMATILE8; \
	FMAROW(32, Z28, Z20, Z21); \
	FMAROW(36, Z29, Z22, Z23); \
	FMAROW(40, Z30, Z24, Z25); \
	FMAROW(44, Z31, Z26, Z27)
