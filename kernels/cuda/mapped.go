//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <stdint.h>

// esper_host_alloc_mapped allocates n bytes of page-locked host memory
// mapped into every context's address space (portable), write-combined
// with wc, and returns its device address too.
static CUresult esper_host_alloc_mapped(void **p, uint64_t *dev, size_t n, int wc) {
	unsigned flags = CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE;
	if (wc) flags |= CU_MEMHOSTALLOC_WRITECOMBINED;
	CUresult r = cuMemHostAlloc(p, n, flags);
	if (r != CUDA_SUCCESS) return r;
	CUdeviceptr d = 0;
	r = cuMemHostGetDevicePointer(&d, *p, 0);
	if (r != CUDA_SUCCESS) {
		cuMemFreeHost(*p);
		return r;
	}
	*dev = (uint64_t)d;
	return CUDA_SUCCESS;
}

// esper_stream_query is cuStreamQuery: CUDA_SUCCESS when every piece of
// work queued on s has finished, CUDA_ERROR_NOT_READY when some has not.
static CUresult esper_stream_query(CUstream s) { return cuStreamQuery(s); }
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/esper-go/esper/tensor"
)

// Mapped memory (tensor.HostMapper): page-locked host memory mapped into
// the device's address space (cuMemHostAlloc with DEVICEMAP, PORTABLE,
// and WRITECOMBINED for an input), so that kernels, cuBLAS and copies
// read and write it across the bus at its device address and the host
// reads and writes the same bytes without a copy engine between. With
// the driver's unified addressing the device address is the host's.
//
// cuMemHostAlloc is slow (it pins pages) and cuMemFreeHost waits for
// the device, so blocks are pooled: a block is a power of two of at
// least mappedMinBytes, and a freed one (FreeMapped, which may run on
// the cleanup goroutine while another goroutine captures a graph) waits
// in the pool for the next request of its size and kind (an Inference
// whose graph sizes come back, a new Inference after a closed one), on
// the device whose work used it last. A pooled block is handed out again
// once that device has finished the work queued before (at once when it
// is idle, else after a wait, counted as a host sync), since work of its
// last owner may still read or write it, and zeroed. Past mappedPoolBytes of pooled blocks the
// oldest go back to the driver at the next allocation made outside a
// capture, after a wait for the device (a counted host sync).

// mappedMinBytes is the smallest block; mappedPoolBytes bounds the bytes
// the pool keeps (a variable for the tests).
const mappedMinBytes = 4 << 10

var mappedPoolBytes = 64 << 20

// mappedBlock is one cuMemHostAlloc allocation.
type mappedBlock struct {
	host    unsafe.Pointer
	dev     tensor.DevicePtr // its device address
	bytes   int
	wc      bool // write-combined (an input's)
	ordinal int  // the device whose work last used it
}

// mappedPool holds the process's mapped blocks: live by device address,
// free ones oldest first, and those over the bound waiting to be freed.
type mappedPool struct {
	mu        sync.Mutex
	live      map[tensor.DevicePtr]mappedBlock
	free      []mappedBlock
	freeBytes int
	drop      []mappedBlock
}

var mapped = mappedPool{live: map[tensor.DevicePtr]mappedBlock{}}

var _ tensor.HostMapper = memory{}

// mappedClass is the block size that holds n bytes.
func mappedClass(n int) int {
	c := mappedMinBytes
	for c < n {
		c <<= 1
	}
	return c
}

// AllocMapped implements tensor.HostMapper: n zeroed bytes of mapped
// host memory for use, from the pool or the driver; declined
// (tensor.ErrNoMappedMemory) where the use's switch is off
// (ESPER_CUDA_MAPPED_INPUTS, ESPER_CUDA_MAPPED_OUTPUTS). Not during a
// capture.
func (m memory) AllocMapped(n int, use tensor.MappedUse) (tensor.DevicePtr, []byte, error) {
	switch {
	case use == tensor.MappedInput && !mappedInputsOn.Load():
		return 0, nil, fmt.Errorf("cuda: %w for inputs (ESPER_CUDA_MAPPED_INPUTS=off)", tensor.ErrNoMappedMemory)
	case use == tensor.MappedOutput && !mappedOutputsOn.Load():
		return 0, nil, fmt.Errorf("cuda: %w for outputs (ESPER_CUDA_MAPPED_OUTPUTS=off)", tensor.ErrNoMappedMemory)
	case n <= 0:
		return 0, nil, fmt.Errorf("cuda: AllocMapped of %d bytes", n)
	}
	if m.d.Capturing() {
		return 0, nil, fmt.Errorf("cuda: AllocMapped during a graph capture")
	}
	class, wc := mappedClass(n), use == tensor.MappedInput
	mapped.mu.Lock()
	drop := mapped.dropOfLocked(m.d.ordinal)
	b, pooled := mapped.takeLocked(class, wc, m.d.ordinal)
	mapped.mu.Unlock()
	if len(drop) > 0 || pooled {
		// The work queued so far may still use the blocks.
		if err := m.waitIdle(); err != nil {
			mapped.giveBack(drop, b, pooled)
			return 0, nil, err
		}
	}
	release := m.d.enter()
	defer release()
	for i, x := range drop {
		if err := hostFree(x.host); err != nil {
			// That block is given up (not retried at every allocation);
			// the rest go back.
			mapped.giveBack(drop[i+1:], b, pooled)
			return 0, nil, err
		}
	}
	if !pooled {
		var p unsafe.Pointer
		var dev C.uint64_t
		w := C.int(0)
		if wc {
			w = 1
		}
		if err := check("cuMemHostAlloc", C.esper_host_alloc_mapped(&p, &dev, C.size_t(class), w)); err != nil {
			return 0, nil, err
		}
		b = mappedBlock{host: p, dev: tensor.DevicePtr(dev), bytes: class, wc: wc, ordinal: m.d.ordinal}
	}
	host := unsafe.Slice((*byte)(b.host), b.bytes)
	clear(host)
	mapped.mu.Lock()
	mapped.live[b.dev] = b
	mapped.mu.Unlock()
	return b.dev, host[:n], nil
}

// takeLocked removes a free block of class bytes and kind wc that
// device ordinal's work last used from the pool, if it holds one (a
// block of another device's would need that device waited for).
func (p *mappedPool) takeLocked(class int, wc bool, ordinal int) (mappedBlock, bool) {
	for i, b := range p.free {
		if b.bytes == class && b.wc == wc && b.ordinal == ordinal {
			p.free = append(p.free[:i], p.free[i+1:]...)
			p.freeBytes -= b.bytes
			return b, true
		}
	}
	return mappedBlock{}, false
}

// dropOfLocked removes from the blocks waiting to be freed those device
// ordinal's work last used and returns them.
func (p *mappedPool) dropOfLocked(ordinal int) []mappedBlock {
	var mine []mappedBlock
	keep := p.drop[:0]
	for _, b := range p.drop {
		if b.ordinal == ordinal {
			mine = append(mine, b)
		} else {
			keep = append(keep, b)
		}
	}
	clear(p.drop[len(keep):])
	p.drop = keep
	return mine
}

// giveBack returns to the pool, after a failed wait or free, the blocks
// not freed yet (drop) and the pooled block taken (b, where pooled), so
// that no pinned block is lost.
func (p *mappedPool) giveBack(drop []mappedBlock, b mappedBlock, pooled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop = append(p.drop, drop...)
	if pooled {
		p.free = append(p.free, b)
		p.freeBytes += b.bytes
	}
}

// FreeMapped implements tensor.HostMapper: the block goes to the pool,
// the oldest pooled ones past mappedPoolBytes to be freed by the next
// AllocMapped on their device (no driver call here).
func (m memory) FreeMapped(p tensor.DevicePtr) {
	mapped.mu.Lock()
	defer mapped.mu.Unlock()
	b, ok := mapped.live[p]
	if !ok {
		return
	}
	delete(mapped.live, p)
	mapped.free = append(mapped.free, b)
	mapped.freeBytes += b.bytes
	for mapped.freeBytes > mappedPoolBytes && len(mapped.free) > 0 {
		old := mapped.free[0]
		mapped.free = mapped.free[1:]
		mapped.freeBytes -= old.bytes
		mapped.drop = append(mapped.drop, old)
	}
}

// waitIdle returns once the device's queued work is done: at once when
// it is idle, else after a wait, counted as a host sync (syncCounted).
func (m memory) waitIdle() error {
	idle, err := m.Idle()
	if err != nil || idle {
		return err
	}
	return m.d.syncCounted()
}

// Idle implements tensor.HostMapper: whether every piece of work queued
// on the device's stream has finished (cuStreamQuery; the held-back
// steps of a block sequence are launched first). False during a capture.
func (m memory) Idle() (bool, error) {
	if m.d.Capturing() {
		return false, nil
	}
	release := m.d.enter()
	defer release()
	r := C.esper_stream_query(cstream(m.d.stream))
	if r == C.CUDA_ERROR_NOT_READY {
		return false, nil
	}
	if err := check("cuStreamQuery", r); err != nil {
		return false, err
	}
	return true, nil
}

// Wait implements tensor.HostMapper: it waits for the device's stream
// (the caller counts the host sync). An error during a capture.
func (m memory) Wait() error {
	if m.d.Capturing() {
		return fmt.Errorf("%w (a mapped tensor read or written on the host)", ErrSyncInCapture)
	}
	return m.d.Synchronize()
}
