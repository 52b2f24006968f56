//go:build !amd64 || purego

package cpu

// poolAsm is false: max pools run the Go loops alone.
const poolAsm = false

func maxPool2x2Rows(y []float32, idx []int32, x []float32, rows, n, base, w int) {
	panic("unreachable")
}

func maxPoolBwd2x2Rows(dx, dy []float32, idx []int32, rows, n, base, w int) bool {
	panic("unreachable")
}
