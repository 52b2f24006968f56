//go:build !amd64 || purego

package cpu

func geluAVX2(dst, src *float32, n int, k *[18][8]float32, e *[14][8]float32) {
	panic("cpu: geluAVX2 called without an assembly kernel")
}
