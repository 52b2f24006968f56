package cpu

import (
	"math/bits"
	"sync"

	"github.com/esper-go/esper/tensor"
)

// Scratch buffers (GEMM packing panels, im2col columns) of eager launches
// come from size-classed pools and go back after the launch, so a stream
// of small eager matmuls and convolutions (a seed's shape probe at
// germination, a validation pass) does not allocate them every time.
// Captured launches take theirs from the same pools but keep them for the
// life of the graph, so a replay never touches a pool (which the garbage
// collector may empty) and stays allocation-free.
//
// Buffers come back with stale contents: every user (packA, packB,
// im2col) writes the whole region it reads, as it must anyway for
// replays that reuse one buffer.
//
// A pool holds a buffer as a *[]F box (a slice does not fit in an
// interface without an allocation of its own); emptied boxes go back to
// boxes32 or boxes64 for the next putBuf, so that taking and returning
// a buffer allocates nothing once the pools are warm.
var (
	pools32 [64]sync.Pool
	pools64 [64]sync.Pool
	boxes32 sync.Pool
	boxes64 sync.Pool
)

// sizeClass is the power-of-two class holding n elements.
func sizeClass(n int) int { return bits.Len(uint(n - 1)) }

func poolFor[F tensor.Float](class int) *sync.Pool {
	var z F
	if _, ok := any(z).(float32); ok {
		return &pools32[class]
	}
	return &pools64[class]
}

// boxesFor is the pool of empty boxes for F's buffers.
func boxesFor[F tensor.Float]() *sync.Pool {
	var z F
	if _, ok := any(z).(float32); ok {
		return &boxes32
	}
	return &boxes64
}

// getBuf returns a buffer of n elements (contents unspecified).
func getBuf[F tensor.Float](n int) []F {
	if n <= 0 {
		return nil
	}
	c := sizeClass(n)
	if v := poolFor[F](c).Get(); v != nil {
		box := v.(*[]F)
		b := *box
		*box = nil
		boxesFor[F]().Put(box)
		return b[:n]
	}
	return make([]F, n, 1<<c)
}

// putBuf returns a buffer from getBuf to its pool.
func putBuf[F tensor.Float](b []F) {
	if cap(b) == 0 || cap(b)&(cap(b)-1) != 0 {
		return // not from getBuf
	}
	box, _ := boxesFor[F]().Get().(*[]F)
	if box == nil {
		box = new([]F)
	}
	*box = b[:cap(b)]
	poolFor[F](sizeClass(cap(b))).Put(box)
}
