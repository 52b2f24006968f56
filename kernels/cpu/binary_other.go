//go:build !amd64 || purego

package cpu

func binAVX2(op, mode int, d, a, b *float32, n int) { panic("unreachable") }
