//go:build amd64 && !purego

package cpu

// geluAVX2 computes dst[i] = GELU(src[i]) (geluErfF32's algorithm) for
// i < n (n a positive multiple of 8) with the constants k (geluConsts)
// and e (expConsts). dst may equal src. It needs AVX2 and FMA
// (vexpAsm).
//
//go:noescape
func geluAVX2(dst, src *float32, n int, k *[18][8]float32, e *[14][8]float32)
