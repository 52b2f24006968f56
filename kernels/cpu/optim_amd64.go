//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// optimAsm reports whether the float32 SGD-momentum and AdamW loops run
// the AVX kernels (8 lanes, the Go loops' rounding: results are bitwise
// those of the Go code).
var optimAsm = cpu.X86.HasAVX

//go:noescape
func sgdMomAVX(p, grad, mom *float32, n int, mu, lr float32)

//go:noescape
func adamwAVX(p, grad, mom, vel *float32, n int, c *[8]float32)
