//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"sync"

	"gorgonia.org/cu"
)

// Side streams for independent cuBLAS products (ESPER_CUDA_SIDE_STREAMS=
// on, switches.go): a layer's products that MatMulsT leaves to cuBLAS
// (W2's batch-64 stacked projections, one per node type) run on streams
// of their own, forked from the device's stream by an event and joined
// back by one each, so that their kernels overlap on the GPU instead of
// running one after another. Each side stream has its own cuBLAS handle
// and workspace (two kernels running at once must not share one), of
// the main handle's size, so that cuBLAS picks the kernel it picks on
// the device's stream and every product has MatMul's bits. Inside a
// capture the fork and the joins become the graph's edges, not nodes: a
// replay runs the products as parallel branches.

// sideLaneCount is the number of side streams: the most products of a
// MatMulsT that run at once (W2's layers have three, one per node type;
// more go round the streams).
const sideLaneCount = 3

// sideLanes are a device's side streams, their cuBLAS handles, the fork
// event recorded on the device's stream and a join event per stream. mu
// is held from the fork to the last join, so that one goroutine's
// products, and their handles' math modes, are not interleaved with
// another's (a side stream waiting on a fork recorded by a capturing
// goroutine would join its capture). products counts the products run
// on them (for tests).
type sideLanes struct {
	mu       sync.Mutex
	streams  [sideLaneCount]cu.Stream
	blas     [sideLaneCount]*blasHandle
	fork     cu.Event
	joins    [sideLaneCount]cu.Event
	products int64
}

// errSideLanesInCapture: the side streams are made on first use, which a
// capture may not be (their handles' workspaces would belong to the
// graph); the caller runs the products on the device's stream instead.
var errSideLanesInCapture = errors.New("cuda: side streams are made outside a capture")

// sideLanes returns the device's side streams, making them on first use
// (not during a capture: errSideLanesInCapture). A failure frees what it
// made, and the next call tries again.
func (d *Device) sideLanes() (*sideLanes, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.side != nil {
		return d.side, nil
	}
	if d.capturing {
		return nil, errSideLanesInCapture
	}
	release := d.enterQuiet()
	defer release()
	l := &sideLanes{}
	ok := false
	defer func() {
		if !ok {
			l.destroy(d)
		}
	}()
	var err error
	if l.fork, err = cu.MakeEvent(cu.DisableTiming); err != nil {
		return nil, fmt.Errorf("cuda: side streams: %w", err)
	}
	for i := range l.streams {
		if l.streams[i], err = cu.MakeStream(cu.NonBlocking); err != nil {
			return nil, fmt.Errorf("cuda: side stream %d: %w", i, err)
		}
		if l.joins[i], err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return nil, fmt.Errorf("cuda: side stream %d: %w", i, err)
		}
		if l.blas[i], err = newBlasHandleOn(d, l.streams[i]); err != nil {
			return nil, fmt.Errorf("cuda: side stream %d: %w", i, err)
		}
	}
	ok = true
	d.side = l
	return l, nil
}

// destroy frees whatever of l was made (a sideLanes whose making
// failed).
func (l *sideLanes) destroy(d *Device) {
	for i := range l.streams {
		if l.blas[i] != nil {
			l.blas[i].destroy(d)
		}
		if l.joins[i] != (cu.Event{}) {
			_ = cu.DestroyEvent(&l.joins[i])
		}
		if l.streams[i] != (cu.Stream{}) {
			_ = l.streams[i].Destroy()
		}
	}
	if l.fork != (cu.Event{}) {
		_ = cu.DestroyEvent(&l.fork)
	}
}

// productsOnSides computes every product of cs (dst = a·bᵀ, F32, rows
// of K > 0 elements, as MatMul computes it for MatMulsTOps) through
// cuBLAS on the side streams, product i on stream i mod sideLaneCount,
// after the work enqueued on the device's stream so far and before
// anything enqueued there afterwards. Once the fork is recorded every
// stream that waited for it is joined back, whatever fails (an unjoined
// stream would fail a capture, and eagerly the device's stream would
// not wait for products in flight). The caller holds enter.
func (d *Device) productsOnSides(l *sideLanes, cs []gjCall, prec Precision) (err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.fork.Record(d.stream); err != nil {
		return fmt.Errorf("cuda: side streams: %w", err)
	}
	waited := 0
	defer func() {
		for i := range waited {
			if e := l.joins[i].Record(l.streams[i]); e != nil {
				err = errors.Join(err, fmt.Errorf("cuda: side stream %d: %w", i, e))
				continue
			}
			if e := d.stream.Wait(l.joins[i], 0); e != nil {
				err = errors.Join(err, fmt.Errorf("cuda: side stream %d: %w", i, e))
			}
		}
	}()
	for i := range min(len(cs), sideLaneCount) {
		if err := l.streams[i].Wait(l.fork, 0); err != nil {
			return fmt.Errorf("cuda: side stream %d: %w", i, err)
		}
		waited++
	}
	for i, c := range cs {
		h := l.blas[i%sideLaneCount]
		m, n, k := int(c.m), int(c.n), int(c.k)
		if err := h.gemmRowMajor(false, true, m, n, k, cu.DevicePtr(c.a), k, 0, cu.DevicePtr(c.b), k, 0,
			cu.DevicePtr(c.d), n, int64(m*n), 1, dataF32, prec); err != nil {
			return err
		}
		l.products++
	}
	return nil
}

// sideProducts is the number of products run on d's side streams so far
// (0 before they are made).
func (d *Device) sideProducts() int64 {
	d.mu.Lock()
	l := d.side
	d.mu.Unlock()
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.products
}
