//go:build !amd64 || purego

package cpu

// dconvAsm is false: convolutions take the im2col route.
const dconvAsm = false

func sconv12x32AVX512(kb int, pa, xq *float32, offs *int, c *float32, ldc int, add bool) {
	panic("unreachable")
}

func sconv8x32AVX512(kb int, pa, xq *float32, offs *int, c *float32, ldc int, add bool) {
	panic("unreachable")
}
