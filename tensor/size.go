package tensor

import (
	"fmt"
	"math/bits"
	"sync/atomic"
)

// SizeError reports a shape that cannot be allocated: a negative
// dimension, an element count or byte size that overflows, or a byte size
// above the host limit (HostLimit). The constructors that return no
// error (Empty, Zeros, Full, NewStorage) panic with a *SizeError; the
// ones that do (EmptyOn, CheckShape) return it. A command line turns
// either into one line naming the shape instead of a crash.
type SizeError struct {
	DType DType
	Shape []int
	// Reason says which check failed.
	Reason string
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("tensor: cannot allocate %v %v: %s", e.DType, e.Shape, e.Reason)
}

// hostLimit is the largest CPU allocation, in bytes, the constructors
// attempt; 0 until first read (then the machine's physical memory).
var hostLimit atomic.Int64

// HostLimit returns the largest CPU tensor, in bytes, that the
// constructors will allocate: by default the machine's physical memory
// (1 TiB where it cannot be read). A larger request is refused with a
// *SizeError instead of ending the process out of memory.
func HostLimit() int64 {
	if l := hostLimit.Load(); l > 0 {
		return l
	}
	l := physicalMemory()
	if l <= 0 {
		l = 1 << 40
	}
	hostLimit.Store(l)
	return l
}

// SetHostLimit sets HostLimit to n bytes (n <= 0 restores the default)
// and returns the previous limit.
func SetHostLimit(n int64) int64 {
	old := HostLimit()
	if n <= 0 {
		n = 0
	}
	hostLimit.Store(n)
	return old
}

// CheckShape returns the number of elements of a CPU tensor of dtype d
// and the given shape, or a *SizeError when a dimension is negative, the
// element count or byte size overflows, or the bytes exceed HostLimit.
func CheckShape(d DType, shape ...int) (int, error) {
	n, err := checkedNumel(d, shape)
	if err != nil {
		return 0, err
	}
	if nb := int64(n) * int64(d.Size()); nb > HostLimit() {
		return 0, &SizeError{DType: d, Shape: clone(shape),
			Reason: fmt.Sprintf("%d bytes is more than this machine's limit of %d (tensor.HostLimit)", nb, HostLimit())}
	}
	return n, nil
}

// checkedNumel is the element count of shape, refusing negative
// dimensions and counts (or byte sizes of dtype d) that overflow int.
func checkedNumel(d DType, shape []int) (int, error) {
	n := uint64(1)
	overflow, zero := false, false
	for _, s := range shape {
		if s < 0 {
			return 0, &SizeError{DType: d, Shape: clone(shape), Reason: "negative dimension"}
		}
		hi, lo := bits.Mul64(n, uint64(s))
		overflow = overflow || hi != 0 || lo > uint64(maxInt)
		zero = zero || s == 0
		n = lo
	}
	if zero { // a zero dimension makes the count 0 even when others overflow
		return 0, nil
	}
	if sz := uint64(max(d.Size(), 1)); overflow || n > uint64(maxInt)/sz {
		return 0, &SizeError{DType: d, Shape: clone(shape), Reason: "the element count or byte size overflows"}
	}
	return int(n), nil
}

const maxInt = int(^uint(0) >> 1)
