// The float32 exponential of vexpAVX2 and geluAVX2 (vexp.go's algorithm,
// Cephes' expf) on the eight lanes of in, into out, with the constants
// at c (expConsts) and t0..t5 as scratch (out may be t4; in is kept).
// Lanes below expLo give 0; in must not be NaN (it is clamped).
#define EXPPS(c, in, t0, t1, t2, t3, t4, t5, out) \
	VMINPS       0(c), in, t0; \
	VMAXPS       32(c), t0, t0; \
	VMULPS       64(c), t0, t1; \
	VADDPS       96(c), t1, t1; \
	VROUNDPS     $1, t1, t1; \
	VMOVAPS      t0, t2; \
	VFNMADD231PS 128(c), t1, t2; \
	VFNMADD231PS 160(c), t1, t2; \
	VMULPS       t2, t2, t3; \
	VMOVUPS      192(c), t4; \
	VFMADD213PS  224(c), t2, t4; \
	VFMADD213PS  256(c), t2, t4; \
	VFMADD213PS  288(c), t2, t4; \
	VFMADD213PS  320(c), t2, t4; \
	VFMADD213PS  352(c), t2, t4; \
	VFMADD213PS  t2, t3, t4; \
	VADDPS       384(c), t4, t4; \
	VCVTTPS2DQ   t1, t5; \
	VPADDD       416(c), t5, t5; \
	VPSLLD       $23, t5, t5; \
	VMULPS       t5, t4, t4; \
	VCMPPS       $0x1D, 32(c), in, t5; \
	VANDPS       t5, t4, out
