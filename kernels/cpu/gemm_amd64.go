//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// sgemmKernels lists the float32 assembly micro-kernels this CPU supports,
// fastest first.
var sgemmKernels = supportedSgemm()

// sgemmAsm is the float32 assembly micro-kernel in use (fn nil if the CPU
// supports none).
var sgemmAsm = func() sgemmKernel {
	if len(sgemmKernels) > 0 {
		return sgemmKernels[0]
	}
	return sgemmKernel{}
}()

func supportedSgemm() []sgemmKernel {
	var ks []sgemmKernel
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && useAVX512 {
		ks = append(ks, sgemmKernel{name: "avx512-12x32", mr: 12, nr: 32, fn: sgemmAVX512})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, sgemmKernel{name: "avx2-fma-6x16", mr: 6, nr: 16, fn: sgemmAVX2})
	}
	return ks
}

// useAVX512 lets the AVX-512 kernel be preferred where the CPU has it.
const useAVX512 = true

// sgemm6x16AVX2 adds the product of a 6×kb packed A panel at pa and a
// kb×16 packed B panel at pb to the 6×16 tile of C at c (row stride ldc
// elements), or stores it there when add is false. kb ≥ 0.
//
//go:noescape
func sgemm6x16AVX2(kb int, pa, pb, c *float32, ldc int, add bool)

// sgemmAVX2 is the microKernelFunc for sgemm6x16AVX2: full tiles go
// straight to C; edge tiles are computed into a zeroed 6×16 scratch tile
// whose valid mr×nr part is then added to (or stored in) C. It
// prefetches nothing (the third slice, pf, is unused).
func sgemmAVX2(kb int, pa, pb, _ []float32, c []float32, ci, ldc, mr, nr int, add bool) {
	if kb <= 0 || mr <= 0 || nr <= 0 {
		return
	}
	_ = pa[6*kb-1]
	_ = pb[16*kb-1]
	if mr == 6 && nr == 16 {
		_ = c[ci : ci+5*ldc+16]
		sgemm6x16AVX2(kb, &pa[0], &pb[0], &c[ci], ldc, add)
		return
	}
	var t [6 * 16]float32
	sgemm6x16AVX2(kb, &pa[0], &pb[0], &t[0], 16, false)
	storeTile(t[:], 16, c, ci, ldc, mr, nr, add)
}

// sgemm12x32AVX512 adds the product of a 12×kb packed A panel at pa and a
// kb×32 packed B panel at pb to the 12×32 tile of C at c (row stride ldc
// elements), or stores it there when add is false, and prefetches the
// 64·kb bytes at pf into L2 (prefetches do not fault: pf need only be a
// valid pointer). kb ≥ 0.
//
//go:noescape
func sgemm12x32AVX512(kb int, pa, pb, c *float32, ldc int, add bool, pf *float32)

// sgemmAVX512 is the microKernelFunc for sgemm12x32AVX512, with edge
// tiles handled as in sgemmAVX2. pf, when not empty, is prefetched as the
// kernel describes (else the kernel re-fetches pb, which is in cache).
func sgemmAVX512(kb int, pa, pb, pf []float32, c []float32, ci, ldc, mr, nr int, add bool) {
	if kb <= 0 || mr <= 0 || nr <= 0 {
		return
	}
	_ = pa[12*kb-1]
	_ = pb[32*kb-1]
	next := &pb[0]
	if len(pf) > 0 {
		next = &pf[0]
	}
	if mr == 12 && nr == 32 {
		_ = c[ci : ci+11*ldc+32]
		sgemm12x32AVX512(kb, &pa[0], &pb[0], &c[ci], ldc, add, next)
		return
	}
	var t [12 * 32]float32
	sgemm12x32AVX512(kb, &pa[0], &pb[0], &t[0], 32, false, next)
	storeTile(t[:], 32, c, ci, ldc, mr, nr, add)
}
