// Package fuzzcheck holds what the project's fuzz targets share: the
// allocation budget a reader of untrusted bytes must keep. A reader may
// allocate in proportion to what its input holds or honestly promises
// (a header's dimensions backed by data), never what a few forged bytes
// claim.
package fuzzcheck

import (
	"runtime"
	"testing"
)

// Allocated returns the bytes the process allocated while f ran (a fuzz
// worker runs one input at a time, so they are f's).
func Allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// Budget runs f and fails t when it allocated more than limit bytes,
// naming what (the reader) and the input's size.
func Budget(t testing.TB, what string, inputLen int, limit uint64, f func()) {
	t.Helper()
	if n := Allocated(f); n > limit {
		t.Fatalf("%s allocated %d bytes for an input of %d bytes (budget %d)", what, n, inputLen, limit)
	}
}

// Linear is the usual budget: per bytes of input (or of what the input
// honestly promises), plus a fixed allowance for the reader's own
// structures.
func Linear(n int, per, fixed uint64) uint64 { return uint64(n)*per + fixed }
