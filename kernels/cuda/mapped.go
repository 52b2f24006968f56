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
// A free is queued, not done (FreeMapped may run on the cleanup
// goroutine while another goroutine captures a graph, and cuMemFreeHost
// waits for the device): the queue is emptied by the next AllocMapped
// made outside a capture, after a wait for the device, so that no work
// still queued reads a block freed under it. The blocks are few (tamiyo
// keeps one input and one output buffer per batch shape).

// mappedFrees are the blocks freed and not yet returned to the driver.
type mappedFrees struct {
	mu    sync.Mutex
	host  map[tensor.DevicePtr]unsafe.Pointer // live blocks: device address → host address
	queue []unsafe.Pointer
}

var mapped = mappedFrees{host: map[tensor.DevicePtr]unsafe.Pointer{}}

var _ tensor.HostMapper = memory{}

// AllocMapped implements tensor.HostMapper: n zeroed bytes of mapped
// host memory for use, declined (tensor.ErrNoMappedMemory) where the
// use's switch is off (ESPER_CUDA_MAPPED_INPUTS, ESPER_CUDA_MAPPED_OUTPUTS).
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
	release := m.d.enter()
	defer release()
	if err := m.d.freeMappedQueue(); err != nil {
		return 0, nil, err
	}
	var p unsafe.Pointer
	var dev C.uint64_t
	wc := C.int(0)
	if use == tensor.MappedInput {
		wc = 1
	}
	if err := check("cuMemHostAlloc", C.esper_host_alloc_mapped(&p, &dev, C.size_t(n), wc)); err != nil {
		return 0, nil, err
	}
	host := unsafe.Slice((*byte)(p), n)
	clear(host)
	mapped.mu.Lock()
	mapped.host[tensor.DevicePtr(dev)] = p
	mapped.mu.Unlock()
	return tensor.DevicePtr(dev), host, nil
}

// FreeMapped implements tensor.HostMapper: the block is queued for the
// next AllocMapped (see above).
func (m memory) FreeMapped(p tensor.DevicePtr) {
	mapped.mu.Lock()
	defer mapped.mu.Unlock()
	if h, ok := mapped.host[p]; ok {
		delete(mapped.host, p)
		mapped.queue = append(mapped.queue, h)
	}
}

// freeMappedQueue returns the queued blocks to the driver once the
// device's queued work is done (called inside enter, outside a capture).
func (d *Device) freeMappedQueue() error {
	mapped.mu.Lock()
	q := mapped.queue
	mapped.queue = nil
	mapped.mu.Unlock()
	if len(q) == 0 {
		return nil
	}
	if err := d.stream.Synchronize(); err != nil {
		return fmt.Errorf("cuda: waiting before freeing mapped memory: %w", err)
	}
	for _, h := range q {
		if err := hostFree(h); err != nil {
			return err
		}
	}
	return nil
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
		return fmt.Errorf("cuda: waiting for the device during a graph capture (a mapped tensor read or written on the host)")
	}
	release := m.d.enter()
	defer release()
	return m.d.stream.Synchronize()
}
