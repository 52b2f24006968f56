//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// vexpAsm reports whether expF32 runs the AVX2+FMA kernel.
var vexpAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// vexpAVX2 computes dst[i] = e^src[i] for i < n (n a positive multiple
// of 8) with the constants c (see expConsts). dst may equal src.
//
//go:noescape
func vexpAVX2(dst, src *float32, n int, c *[14][8]float32)
