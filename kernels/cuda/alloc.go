//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/tensor"
)

// Allocator is a stream-ordered caching allocator for one Device. Sizes
// are rounded to classes (multiples of 512 bytes up to 1 MiB, of 2 MiB
// above), freed blocks go to a free list of their class and are handed
// out again without a driver call. A class of up to 1 MiB grows by a
// slab of several blocks at once, cut from one driver allocation (up to
// 64 blocks or 2 MiB; slab.go), which goes back to the driver only
// whole; ESPER_CUDA_SLABS=off makes every block an allocation of its
// own. Because every kernel of the backend
// runs on the device's one stream, a block freed after the launches that
// use it were enqueued can be reused by later launches at once: stream
// order keeps them apart. (A launch a block sequence holds back counts
// as enqueued: any later stream use launches it first.)
//
// Free may be called from a finalizer (tensor storage's safety net),
// where no driver call may be made (the goroutine has no context, and a
// capture may be running): frees are queued and the queue drained on the
// next Alloc or EmptyCache outside a capture.
//
// A block handed out during a graph capture belongs to the graph too:
// its launches read and write it on every replay, long after the tensor
// that held it may be gone. Such a block returns to the cache only once
// both its tensor has been freed and every graph that captured it has
// been closed (or collected).
type Allocator struct {
	d *Device

	mu        sync.Mutex
	free      map[int64][]cu.DevicePtr // cached blocks by size class
	size      map[cu.DevicePtr]int64   // class of every live block
	pending   []cu.DevicePtr           // frees queued from finalizers
	capturing bool                     // a graph capture is running
	recording []cu.DevicePtr           // blocks handed out during the running capture
	graphRefs map[cu.DevicePtr]int     // graphs holding each captured block
	orphans   map[cu.DevicePtr]bool    // captured blocks whose tensor has been freed
	graphs    []pendingGraph           // collected graphs to destroy
	slabs     slabSet                  // the driver allocations, cut into blocks (slab.go)
	stats     AllocStats
}

// AllocStats are an Allocator's counters.
type AllocStats struct {
	Allocated    int64 // bytes in live blocks (by size class)
	Reserved     int64 // bytes held from the driver: live plus cached
	Cached       int64 // bytes in cached blocks, ready to hand out (Reserved less Allocated; a freed block a graph still holds counts as allocated)
	PeakReserved int64 // the most Reserved has been
	Allocs       int64 // Alloc calls
	CacheHits    int64 // Allocs served from the cache
	DriverAllocs int64 // cuMemAlloc calls, failed ones too (a slab's blocks come from one: slab.go)
	DriverFrees  int64 // cuMemFree calls
	// GCRetries counts the allocations that found the device full and
	// ran the Go collector to get back the blocks of unreachable
	// tensors before trying again.
	GCRetries int64
}

func newAllocator(d *Device) *Allocator {
	return &Allocator{d: d, free: map[int64][]cu.DevicePtr{}, size: map[cu.DevicePtr]int64{},
		graphRefs: map[cu.DevicePtr]int{}, orphans: map[cu.DevicePtr]bool{}}
}

// sizeClass rounds n bytes up to its class.
func sizeClass(n int64) int64 {
	const small, smallStep, bigStep = 1 << 20, 512, 2 << 20
	if n <= 0 {
		n = 1
	}
	if n <= small {
		return (n + smallStep - 1) / smallStep * smallStep
	}
	return (n + bigStep - 1) / bigStep * bigStep
}

// Alloc returns a block of at least n bytes: a cached one, else one of
// a new slab. When the driver is out of memory it gives back the slabs
// whose blocks are all cached and tries once more, then a single block,
// then again after a garbage collection (not during a capture, where
// nothing may be freed).
func (a *Allocator) Alloc(n int64) (cu.DevicePtr, error) {
	c := sizeClass(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Allocs++
	if p, ok := a.takeLocked(c); ok {
		return p, nil
	}
	// No stream work here: a block sequence's held-back steps stay held,
	// but are launched before any block goes back to the driver (one
	// they use may have been freed explicitly: cuMemFree must come after
	// them).
	release := a.d.enterQuiet()
	defer release()
	if a.capturing {
		// cuMemAlloc is no stream operation, but a capture refuses it on
		// its thread unless the thread's capture mode is relaxed around
		// the call (PyTorch's graph pools grow so too). No block goes back
		// to the driver, and the block is the graph's (the rest of its
		// slab is cached: never used, any later allocation may have it).
		//
		// The queued frees go into the cache first, without a driver
		// call: a block in the queue that no graph holds was last used by
		// work enqueued before this capture began (a block handed out
		// during it is the graph's, and stays out of the cache), so the
		// graph's launches come after that work on the stream. A
		// capture after an episode's reset, say, then takes the blocks
		// the collector gave back instead of the driver's.
		a.drainFreesLocked()
		if p, ok := a.takeLocked(c); ok {
			return p, nil
		}
		restore, err := relaxCapture()
		if err != nil {
			return 0, fmt.Errorf("cuda: allocating %d bytes during a graph capture: %w", n, err)
		}
		p, err := a.slabLocked(c)
		restore()
		if err != nil {
			return 0, fmt.Errorf("cuda: allocating %d bytes during a graph capture (%d reserved): %w", n, a.stats.Reserved, err)
		}
		a.recording = append(a.recording, p)
		a.graphRefs[p]++
		return p, nil
	}
	a.drainLocked()
	if p, ok := a.takeLocked(c); ok {
		return p, nil
	}
	p, err := a.slabLocked(c)
	if err != nil {
		a.d.flushHeld()
		a.emptyLocked()
		p, err = a.slabLocked(c)
	}
	if err != nil {
		// Tensors that became unreachable give their blocks back only
		// once the Go collector has run their cleanups (FreeLater): on a
		// full device, collect, let the cleanups queue their frees, and
		// try the cache and the driver once more.
		a.mu.Unlock()
		collectDeviceGarbage(func() int {
			a.mu.Lock()
			defer a.mu.Unlock()
			return len(a.pending)
		})
		a.mu.Lock()
		a.stats.GCRetries++
		a.drainLocked()
		if p, ok := a.takeLocked(c); ok {
			return p, nil
		}
		a.d.flushHeld()
		a.emptyLocked()
		if p, err = a.slabLocked(c); err != nil {
			return 0, fmt.Errorf("cuda: allocating %d bytes (%d reserved, after a garbage collection): %w", n, a.stats.Reserved, err)
		}
	}
	return p, nil
}

// slabLocked asks the driver for a slab of class c (slabBlocks blocks,
// one with ESPER_CUDA_SLABS=off or past slabMaxClass), hands out its
// first block and caches the others. When the slab cannot be had, a
// single block is asked for before giving up: a nearly full device may
// still have room for the block.
func (a *Allocator) slabLocked(c int64) (cu.DevicePtr, error) {
	k := slabBlocks(c, slabsOff.Load())
	p, err := a.memAlloc(c * k)
	if err != nil && k > 1 {
		k = 1
		p, err = a.memAlloc(c)
	}
	if err != nil {
		return 0, err
	}
	sl := slab{base: uint64(p), class: uint64(c), blocks: uint64(k)}
	a.slabs.add(sl)
	a.stats.Reserved += c * k
	a.stats.PeakReserved = max(a.stats.PeakReserved, a.stats.Reserved)
	// The cache hands out its last block first: cached from the slab's
	// end, the next allocations take the blocks in address order.
	rest := sl.cut()
	for i := len(rest) - 1; i >= 0; i-- {
		a.free[c] = append(a.free[c], cu.DevicePtr(rest[i]))
	}
	a.size[p] = c
	a.stats.Allocated += c
	return p, nil
}

// memAlloc asks the driver for c bytes, counting the call (failed or
// not) in AllocStats.DriverAllocs and, with its time, on the device
// (tensor.DriverAllocs).
func (a *Allocator) memAlloc(c int64) (cu.DevicePtr, error) {
	t0 := time.Now()
	a.stats.DriverAllocs++
	p, err := cu.MemAlloc(c)
	tensor.CountDriverAlloc(tensor.CUDA(a.d.ordinal), time.Since(t0))
	return p, err
}

// takeLocked hands out a cached block of class c, if there is one.
func (a *Allocator) takeLocked(c int64) (cu.DevicePtr, bool) {
	l := a.free[c]
	if len(l) == 0 {
		return 0, false
	}
	p := l[len(l)-1]
	a.free[c] = l[:len(l)-1]
	a.size[p] = c
	a.stats.CacheHits++
	a.stats.Allocated += c
	if a.capturing {
		a.recording = append(a.recording, p)
		a.graphRefs[p]++
	}
	return p, true
}

// collectDeviceGarbage runs the Go collector and waits, up to 100 ms,
// until the number of frees queued by storage cleanups (pending) has
// stopped growing for 3 ms: the cleanups run on their own goroutine
// after the collection, and nothing reports when they are done.
func collectDeviceGarbage(pending func() int) {
	runtime.GC()
	last, still := pending(), 0
	for i := 0; i < 100 && still < 3; i++ {
		time.Sleep(time.Millisecond)
		if n := pending(); n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
}

// Free returns a block to the cache. Freeing an address Alloc did not
// return, or freeing twice, is an error.
func (a *Allocator) Free(p cu.DevicePtr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.size[p]
	if !ok || a.orphans[p] {
		return fmt.Errorf("cuda: freeing %#x, which is not a live block", uintptr(p))
	}
	if a.graphRefs[p] > 0 {
		a.orphans[p] = true
		return nil
	}
	delete(a.size, p)
	a.free[c] = append(a.free[c], p)
	a.stats.Allocated -= c
	return nil
}

// FreeLater queues p to be freed on the next Alloc or EmptyCache; it
// makes no driver call, so finalizers may use it.
func (a *Allocator) FreeLater(p cu.DevicePtr) {
	a.mu.Lock()
	a.pending = append(a.pending, p)
	a.mu.Unlock()
}

// drainLocked moves the queued frees into the cache and destroys the
// collected graphs (the context is current, no capture is running).
func (a *Allocator) drainLocked() {
	for _, g := range a.graphs {
		g.g.destroy()
		a.releaseLocked(g.blocks)
	}
	a.graphs = a.graphs[:0]
	a.drainFreesLocked()
}

// drainFreesLocked moves the queued frees into the cache, or marks them
// orphans while a graph holds them. No driver call: a capture may run.
func (a *Allocator) drainFreesLocked() {
	for _, p := range a.pending {
		if a.graphRefs[p] > 0 {
			a.orphans[p] = true
			continue
		}
		if c, ok := a.size[p]; ok && !a.orphans[p] {
			delete(a.size, p)
			a.free[c] = append(a.free[c], p)
			a.stats.Allocated -= c
		}
	}
	a.pending = a.pending[:0]
}

// EmptyCache returns the cached blocks to the driver (after waiting for
// the stream, so that no enqueued kernel still uses one): every slab all
// of whose blocks are cached, which with ESPER_CUDA_SLABS=off is every
// cached block. A cached block cut from the same slab as a live one stays
// (AllocStats.Cached).
func (a *Allocator) EmptyCache() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.capturing {
		return errors.New("cuda: EmptyCache during a graph capture")
	}
	release := a.d.enter()
	defer release()
	if err := a.d.stream.Synchronize(); err != nil {
		return err
	}
	a.drainLocked()
	return a.emptyLocked()
}

// emptyLocked returns to the driver every slab whose blocks are all
// cached; a cached block of a slab that still has a live one stays in
// the cache.
func (a *Allocator) emptyLocked() error {
	var first error
	for c, l := range a.free {
		free := make([]uint64, len(l))
		for i, p := range l {
			free[i] = uint64(p)
		}
		whole, keep := a.slabs.reclaim(uint64(c), free)
		for _, sl := range whole {
			if err := cu.MemFree(cu.DevicePtr(sl.base)); err != nil && first == nil {
				first = err
			}
			a.stats.DriverFrees++
			a.stats.Reserved -= c * int64(sl.blocks)
		}
		if len(keep) == 0 {
			delete(a.free, c)
			continue
		}
		l = l[:0]
		for _, p := range keep {
			l = append(l, cu.DevicePtr(p))
		}
		a.free[c] = l
	}
	return first
}

// beginRecording marks a capture as running: no driver allocations or
// frees until endRecording, and every block handed out is the graph's.
func (a *Allocator) beginRecording() {
	a.mu.Lock()
	a.capturing = true
	a.recording = nil
	a.mu.Unlock()
}

// endRecording marks the capture as over and returns the blocks handed
// out during it (each holding one graph reference).
func (a *Allocator) endRecording() []cu.DevicePtr {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.capturing = false
	blocks := a.recording
	a.recording = nil
	return blocks
}

// release drops one graph reference from each block; a block whose
// tensor has already been freed goes back to the cache with its last.
// Stream order makes this safe without waiting: later launches run after
// the graph's.
func (a *Allocator) release(blocks []cu.DevicePtr) {
	a.mu.Lock()
	a.releaseLocked(blocks)
	a.mu.Unlock()
}

func (a *Allocator) releaseLocked(blocks []cu.DevicePtr) {
	for _, p := range blocks {
		if a.graphRefs[p]--; a.graphRefs[p] > 0 {
			continue
		}
		delete(a.graphRefs, p)
		if !a.orphans[p] {
			continue
		}
		delete(a.orphans, p)
		c := a.size[p]
		delete(a.size, p)
		a.free[c] = append(a.free[c], p)
		a.stats.Allocated -= c
	}
}

// pendingGraph is a collected graph waiting for a safe point to be
// destroyed, with the blocks it holds.
type pendingGraph struct {
	g      *graph
	blocks []cu.DevicePtr
}

// queueGraph defers destroying g and releasing its blocks to the next
// drain (finalizers may make no driver call).
func (a *Allocator) queueGraph(g *graph, blocks []cu.DevicePtr) {
	a.mu.Lock()
	a.graphs = append(a.graphs, pendingGraph{g: g, blocks: blocks})
	a.mu.Unlock()
}

// Stats returns the counters.
func (a *Allocator) Stats() AllocStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.stats
	for c, l := range a.free {
		st.Cached += c * int64(len(l))
	}
	return st
}

// memory gives tensors storage on the device (tensor.DeviceMemory).
type memory struct{ d *Device }

var _ tensor.DeviceMemory = memory{}

func (m memory) Alloc(n int) (tensor.DevicePtr, error) {
	p, err := m.d.alloc.Alloc(int64(n))
	return tensor.DevicePtr(p), err
}

// Free queues the block: tensor storage calls it from its finalizer too.
func (m memory) Free(p tensor.DevicePtr) { m.d.alloc.FreeLater(cu.DevicePtr(p)) }

// CopyToDevice copies src to p+off after the work already enqueued on
// the stream (the copy is ordered on it, then waited for: Device.upload).
func (m memory) CopyToDevice(p tensor.DevicePtr, off int, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	release := m.d.enter()
	defer release()
	return m.d.upload(cu.DevicePtr(p)+cu.DevicePtr(off), src)
}

// upload copies src to dst on the stream and waits for the stream — a
// host sync, counted as one (tensor.CountHostSync) with its time — or,
// with ESPER_CUDA_UPLOAD_WAIT=off, returns once the driver has taken the
// bytes (copyH2DSync), the host not waiting for the device's queue.
func (d *Device) upload(dst cu.DevicePtr, src []byte) error {
	wait := !uploadWaitOff.Load()
	start := time.Now()
	if err := copyH2DSync(dst, src, d.stream, wait); err != nil {
		return err
	}
	if wait {
		dev := tensor.CUDA(d.ordinal)
		tensor.CountHostSync(dev)
		tensor.AddHostSyncTime(dev, time.Since(start))
	}
	return nil
}

// CopyToHost copies device bytes at p+off into dst once the work enqueued
// before it has run.
func (m memory) CopyToHost(dst []byte, p tensor.DevicePtr, off int) error {
	if len(dst) == 0 {
		return nil
	}
	release := m.d.enter()
	defer release()
	return copyD2HSync(dst, cu.DevicePtr(p)+cu.DevicePtr(off), m.d.stream)
}

var _ tensor.ManyReader = memory{}

// CopyToHostMany copies the device bytes at p[i]+off[i] into dst[i] for
// every i once the work enqueued before them has run, with one wait for
// the stream (tensor.ToHostMany).
func (m memory) CopyToHostMany(dst [][]byte, p []tensor.DevicePtr, off []int) error {
	if len(dst) != len(p) || len(dst) != len(off) {
		return fmt.Errorf("cuda: CopyToHostMany: %d destinations, %d pointers and %d offsets", len(dst), len(p), len(off))
	}
	srcs := make([]cu.DevicePtr, len(p))
	for i := range p {
		srcs[i] = cu.DevicePtr(p[i]) + cu.DevicePtr(off[i])
	}
	release := m.d.enter()
	defer release()
	return copyD2HManySync(dst, srcs, m.d.stream)
}
