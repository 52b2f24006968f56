//go:build !amd64 || purego

package cpu

// tinyAsm is false: sgemmTiny and sdot4x4 have no vector kernels on this
// build, and matmulSmall does not call them.
const tinyAsm = false

func sgemmTinyChunk(m, n, k int, a []float32, ai, ap int, b []float32, ldb int, init []float32, is int, c []float32, ldc, j0 int) {
	panic("cpu: sgemmTiny without the AVX-512 kernel")
}

func sdot4x4Kernel(a []float32, lda int, b []float32, ldb, k int, bias, c []float32, ldc int) {
	panic("cpu: sdot4x4 without the AVX-512 kernel")
}

func rowExpsKernel(xs []float32, c, n int, mask uint16, e, maxes []float32, ses []float64) {
	panic("cpu: rowExps without the AVX-512 kernel")
}

func sdotOffs4x4Kernel(a *float32, lda int, b *float32, boffs *[4]int, kc int, tail uint16, ns, sa, sb int, out *[16]float32) {
	panic("cpu: sdotOffs4x4 without the AVX-512 kernel")
}

func copyRowsKernel(dst []float32, ldd int, src []float32, lds, rows, w int) {
	panic("cpu: copyRows without the AVX-512 kernel")
}
