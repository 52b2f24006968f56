//go:build !amd64 || purego

package cpu

// vexpAsm is false: no assembly exponential on this build.
const vexpAsm = false

func vexpAVX2(dst, src *float32, n int, c *[14][8]float32) {
	panic("cpu: vexpAVX2 called without an assembly kernel")
}
