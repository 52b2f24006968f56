//go:build amd64 && !purego

package cpu

// binAVX2 computes d[i] = a[i] op b[i] over n elements (a positive
// multiple of 8): op 0 add, 1 subtract, 2 multiply, 3 divide; mode 0 both
// vectors, 1 b[0] a scalar, 2 a[0] a scalar (binary_amd64.s).
//
//go:noescape
func binAVX2(op, mode int, d, a, b *float32, n int)
