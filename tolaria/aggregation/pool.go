package aggregation

import (
	"sync"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// GradientBufferPool hands out flat buffers for per-microbatch
// gradients, so the trainer does not allocate a model-sized buffer every
// step (G1 GradientBufferPool): host buffers with Acquire, buffers on a
// device (the model's, for the tensor path) with AcquireOn. Acquire and
// AcquireOn reuse the first cached buffer with the same device, element
// count and dtype, or allocate a new zeroed one; Release zeroes a buffer
// (with the device's backend off the host: no host sync) and caches it
// again. A buffer whose size is no longer asked for (the model grew)
// stays cached until Drain.
//
// The zero value is an empty pool ready to use. A pool is safe for
// concurrent use.
type GradientBufferPool struct {
	mu    sync.Mutex
	free  []*tensor.Tensor // cached buffers, oldest first
	inUse map[*tensor.Tensor]struct{}
	stats PoolStats
}

// PoolStats describes a GradientBufferPool.
type PoolStats struct {
	// Allocated counts buffers created because no cached one fitted.
	Allocated int
	// Reused counts Acquire calls served from the cache.
	Reused int
	// InUse is the number of buffers acquired and not yet released.
	InUse int
	// Cached is the number of buffers waiting in the cache.
	Cached int
	// CachedBytes is the memory held by the cached buffers.
	CachedBytes int
}

// Acquire returns a zeroed flat CPU buffer of shape [numel] and the given
// dtype: the first cached buffer of that size and dtype, or a new one.
// numel may be 0 but not negative; dtype must be a float dtype.
func (p *GradientBufferPool) Acquire(numel int, dtype tensor.DType) (*tensor.Tensor, error) {
	return p.acquire("GradientBufferPool.Acquire", tensor.CPU, numel, dtype)
}

// AcquireOn is Acquire on device dev: a zeroed contiguous buffer of shape
// [numel] on dev, cached or new (allocated with tensor.EmptyOn and zeroed
// by the device's backend). AcquireOn(tensor.CPU, …) is Acquire. It fails
// on a negative size, a non-float dtype, a device without a registered
// backend or a failed allocation.
func (p *GradientBufferPool) AcquireOn(dev tensor.Device, numel int, dtype tensor.DType) (*tensor.Tensor, error) {
	return p.acquire("GradientBufferPool.AcquireOn", dev, numel, dtype)
}

func (p *GradientBufferPool) acquire(op string, dev tensor.Device, numel int, dtype tensor.DType) (*tensor.Tensor, error) {
	if numel < 0 {
		return nil, invalid(op, "negative element count %d", numel)
	}
	if !dtype.IsFloat() {
		return nil, invalid(op, "dtype %v is not a float dtype", dtype)
	}
	var be kernels.Backend
	if !dev.IsCPU() {
		var err error
		if be, err = backendFor(op, dev); err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inUse == nil {
		p.inUse = make(map[*tensor.Tensor]struct{})
	}
	for i, t := range p.free {
		if t.Numel() == numel && t.DType() == dtype && t.Device() == dev {
			// Keep the cache in release order: the oldest match goes
			// first, as the reference's list.pop(idx) does.
			copy(p.free[i:], p.free[i+1:])
			p.free[len(p.free)-1] = nil
			p.free = p.free[:len(p.free)-1]
			p.stats.Reused++
			p.stats.CachedBytes -= t.Nbytes()
			p.inUse[t] = struct{}{}
			return t, nil
		}
	}
	var t *tensor.Tensor
	if be == nil {
		t = tensor.Zeros(dtype, numel)
	} else {
		var err error
		if t, err = filledOn(op, be, dev, dtype, 0, numel); err != nil {
			return nil, err
		}
	}
	p.stats.Allocated++
	p.inUse[t] = struct{}{}
	return t, nil
}

// Release zeroes t and returns it to the cache. t must have come from
// this pool's Acquire or AcquireOn and not have been released since;
// otherwise Release returns an error and leaves the pool unchanged. A
// device buffer is zeroed by its backend (a Fill launch, no host sync).
func (p *GradientBufferPool) Release(t *tensor.Tensor) error {
	if t == nil {
		return invalid("GradientBufferPool.Release", "nil buffer")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.inUse[t]; !ok {
		return invalid("GradientBufferPool.Release", "buffer of %d elements was not acquired from this pool or was already released", t.Numel())
	}
	if dev := t.Device(); !dev.IsCPU() {
		// The backend existed when AcquireOn made the buffer.
		be, err := backendFor("GradientBufferPool.Release", dev)
		if err != nil {
			return err
		}
		be.Fill(t, 0)
	} else {
		// The pool made the buffer, so it owns its whole storage:
		// clearing the bytes zeroes any dtype without a per-dtype loop.
		clear(t.Storage().Bytes())
	}
	delete(p.inUse, t)
	p.free = append(p.free, t)
	p.stats.CachedBytes += t.Nbytes()
	return nil
}

// Stats returns the pool's counters.
func (p *GradientBufferPool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.InUse = len(p.inUse)
	s.Cached = len(p.free)
	return s
}

// Drain drops every cached buffer (for instance after the parameter set
// changed size) and returns the bytes released. Buffers in use stay
// valid and may still be released into the pool.
func (p *GradientBufferPool) Drain() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.stats.CachedBytes
	clear(p.free)
	p.free = p.free[:0]
	p.stats.CachedBytes = 0
	return n
}
