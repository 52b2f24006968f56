//go:build !amd64 || purego

package cpu

// poolAsm is false: max pools run the Go loops alone.
const poolAsm = false

func maxPool2x2Row(y []float32, idx []int32, r0, r1 []float32, n, base, w int) { panic("unreachable") }
