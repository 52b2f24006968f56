//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// dconvAsm reports whether float32 stride-1 convolutions may run the
// direct kernel (sconv12x32AVX512; conv_direct.go).
var dconvAsm = cpu.X86.HasAVX512F && useAVX512

// sconv12x32AVX512 adds to the 12×32 tile of C at c (row stride ldc) the
// product of the packed 12×kb A panel at pa and the kb×32 B whose row p is
// the 32 floats at xq + offs[p], or stores it when add is false. kb ≥ 0.
//
//go:noescape
func sconv12x32AVX512(kb int, pa, xq *float32, offs *int, c *float32, ldc int, add bool)

// sconv8x32AVX512 is sconv12x32AVX512 for an 8×32 tile and an 8-row A
// panel.
//
//go:noescape
func sconv8x32AVX512(kb int, pa, xq *float32, offs *int, c *float32, ldc int, add bool)
