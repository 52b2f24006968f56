//go:build !amd64 || purego

package cpu

// optimAsm is false: no assembly optimizer loops on this build.
var optimAsm = false

func sgdMomAVX(p, g, m *float32, n int, mu, lr float32) {
	panic("cpu: sgdMomAVX called without an assembly kernel")
}

func adamwAVX(p, g, m, v *float32, n int, c *[8]float32) {
	panic("cpu: adamwAVX called without an assembly kernel")
}
