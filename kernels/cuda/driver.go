//go:build cuda

package cuda

// The driver calls gorgonia.org/cu does not wrap (GPU.md): kernel launch
// without per-launch allocation, stream capture and CUDA graphs (pinned
// host memory and graph exec-update come with their users). Each C function makes one driver call and returns its
// status; the Go wrappers turn a status into an error naming the call.

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>

// esper_launch launches f with up to 16 arguments held in the 8-byte
// words of args, argument i starting at word offs[i] (narrower values in
// the low bytes: the driver reads each argument at its own size from its
// address; a struct passed by value spans several words).
static CUresult esper_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shmem, CUstream s, uint64_t *args, int32_t *offs, int nargs) {
	void *params[16];
	for (int i = 0; i < nargs && i < 16; i++) params[i] = &args[offs[i]];
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}

static CUresult esper_begin_capture(CUstream s) {
	return cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
}

static CUresult esper_end_capture(CUstream s, CUgraph *g) { return cuStreamEndCapture(s, g); }

// esper_capture_mode swaps this thread's capture mode (relaxed = 1) with
// *mode.
static CUresult esper_capture_mode(int *mode) {
	CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
	CUresult r = cuThreadExchangeStreamCaptureMode(&m);
	*mode = (int)m;
	return r;
}

static CUresult esper_graph_instantiate(CUgraphExec *e, CUgraph g) { return cuGraphInstantiate(e, g, NULL, NULL, 0); }

static CUresult esper_graph_launch(CUgraphExec e, CUstream s) { return cuGraphLaunch(e, s); }

static CUresult esper_graph_destroy(CUgraph g) { return cuGraphDestroy(g); }

static CUresult esper_graph_node_count(CUgraph g, size_t *n) { return cuGraphGetNodes(g, NULL, n); }

static CUresult esper_graph_exec_destroy(CUgraphExec e) { return cuGraphExecDestroy(e); }

static CUresult esper_host_alloc(void **p, size_t n) { return cuMemHostAlloc(p, n, CU_MEMHOSTALLOC_PORTABLE); }

static CUresult esper_host_free(void *p) { return cuMemFreeHost(p); }

static CUresult esper_copy_h2d_async(uint64_t dst, void *src, size_t n, CUstream s) {
	return cuMemcpyHtoDAsync((CUdeviceptr)dst, src, n, s);
}

static CUresult esper_copy_d2h_async(void *dst, uint64_t src, size_t n, CUstream s) {
	return cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, n, s);
}

static CUresult esper_stream_sync(CUstream s) { return cuStreamSynchronize(s); }

static const char *esper_error_name(CUresult r) {
	const char *s = NULL;
	cuGetErrorName(r, &s);
	return s;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"gorgonia.org/cu"
)

// DriverError is a failed CUDA driver call.
type DriverError struct {
	Call string // the driver function
	Code int    // its CUresult
	Name string // the CUresult's name, e.g. CUDA_ERROR_OUT_OF_MEMORY
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("cuda: %s failed: %s (%d)", e.Call, e.Name, e.Code)
}

// check turns a CUresult into nil or a *DriverError.
func check(call string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	name := "unknown error"
	if s := C.esper_error_name(r); s != nil {
		name = C.GoString(s)
	}
	return &DriverError{Call: call, Code: int(r), Name: name}
}

// ptr appends a device address (args, the argument block, is untagged:
// launch_args.go).
func (a *args) ptr(p cu.DevicePtr) *args { return a.addr(uint64(p)) }

// launchRaw launches fn on stream s with grid×block threads.
func launchRaw(fn cu.Function, grid, block [3]int, shmem int, s cu.Stream, a *args) error {
	r := C.esper_launch(cfn(fn), C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.uint(shmem), cstream(s),
		(*C.uint64_t)(unsafe.Pointer(&a.v[0])), (*C.int32_t)(unsafe.Pointer(&a.off[0])), C.int(a.n))
	return check("cuLaunchKernel", r)
}

// launchStruct launches fn on stream s with grid×block threads and one
// argument, a struct passed by value whose 8-byte words are w (for the
// parameter blocks too large for args: copy_blocks' CopyBlocks; the
// driver takes up to 4 KiB of parameters).
func launchStruct(fn cu.Function, grid, block [3]int, s cu.Stream, w []uint64) error {
	return launchStructShared(fn, grid, block, 0, s, w)
}

// launchStructShared is launchStruct with shmem bytes of dynamic shared
// memory a block.
func launchStructShared(fn cu.Function, grid, block [3]int, shmem int, s cu.Stream, w []uint64) error {
	off := [1]int32{0}
	r := C.esper_launch(cfn(fn), C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.uint(shmem), cstream(s),
		(*C.uint64_t)(unsafe.Pointer(&w[0])), (*C.int32_t)(unsafe.Pointer(&off[0])), 1)
	return check("cuLaunchKernel", r)
}

// cfn and cstream read the driver handles out of cu's wrapper types,
// which hold exactly one handle each.
func cfn(fn cu.Function) C.CUfunction { return *(*C.CUfunction)(unsafe.Pointer(&fn)) }
func cstream(s cu.Stream) C.CUstream  { return *(*C.CUstream)(unsafe.Pointer(&s)) }

// graph is a captured CUDA graph and its executable instance.
type graph struct {
	g C.CUgraph
	e C.CUgraphExec
}

// beginCapture starts capturing the work enqueued on s (this thread's
// calls only).
func beginCapture(s cu.Stream) error {
	return check("cuStreamBeginCapture", C.esper_begin_capture(cstream(s)))
}

// relaxCapture switches the calling thread to the relaxed capture mode,
// in which calls the capture would otherwise refuse (cuMemAlloc, which
// may synchronise) are allowed, and returns the function restoring the
// previous mode. The caller must hold the thread (Device.enter).
func relaxCapture() (restore func(), err error) {
	mode := C.int(C.CU_STREAM_CAPTURE_MODE_RELAXED)
	if err := check("cuThreadExchangeStreamCaptureMode", C.esper_capture_mode(&mode)); err != nil {
		return nil, err
	}
	return func() { C.esper_capture_mode(&mode) }, nil
}

// endCapture ends the capture on s and instantiates the graph.
func endCapture(s cu.Stream) (*graph, error) {
	var gr graph
	if err := check("cuStreamEndCapture", C.esper_end_capture(cstream(s), &gr.g)); err != nil {
		return nil, err
	}
	if err := check("cuGraphInstantiate", C.esper_graph_instantiate(&gr.e, gr.g)); err != nil {
		C.esper_graph_destroy(gr.g)
		return nil, err
	}
	return &gr, nil
}

// launch replays the graph on s.
func (g *graph) launch(s cu.Stream) error {
	return check("cuGraphLaunch", C.esper_graph_launch(g.e, cstream(s)))
}

// nodes is the number of nodes (kernel launches, copies) of the graph.
func (g *graph) nodes() (int, error) {
	var n C.size_t
	err := check("cuGraphGetNodes", C.esper_graph_node_count(g.g, &n))
	return int(n), err
}

// destroy frees the graph and its instance.
func (g *graph) destroy() error {
	err := check("cuGraphExecDestroy", C.esper_graph_exec_destroy(g.e))
	if e := check("cuGraphDestroy", C.esper_graph_destroy(g.g)); err == nil {
		err = e
	}
	return err
}

// hostAlloc returns n bytes of page-locked host memory (cuMemHostAlloc,
// portable across contexts), which the device copies from asynchronously.
func hostAlloc(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := check("cuMemHostAlloc", C.esper_host_alloc(&p, C.size_t(n)))
	return p, err
}

// hostFree releases memory from hostAlloc.
func hostFree(p unsafe.Pointer) error { return check("cuMemFreeHost", C.esper_host_free(p)) }

// copyH2DAsync enqueues a copy of n bytes from page-locked host memory
// at src to the device address dst on stream s.
func copyH2DAsync(dst cu.DevicePtr, src unsafe.Pointer, n int, s cu.Stream) error {
	return check("cuMemcpyHtoDAsync", C.esper_copy_h2d_async(C.uint64_t(dst), src, C.size_t(n), cstream(s)))
}

// bounceMax is the largest host copy that goes through C memory (see
// copyH2DSync).
const bounceMax = 4096

// copyH2DSync copies the host bytes src to the device at dst on stream s
// and, with wait, waits for it (for the stream: everything enqueued
// before it too). Without wait it returns when the driver returns: a copy
// from pageable memory is staged into the driver's own memory before
// that (CUDA's API synchronization behavior), so src may be reused and
// the C buffer below freed; the copy itself stays ordered on s. A small
// copy goes through a C buffer: a small tensor's storage shares one Go
// allocation with its header (which holds pointers), and cgo rejects a
// pointer into such an object. Larger buffers are allocations of their
// own and are passed as they are.
func copyH2DSync(dst cu.DevicePtr, src []byte, s cu.Stream, wait bool) error {
	if len(src) == 0 {
		return nil
	}
	p := unsafe.Pointer(&src[0])
	if len(src) <= bounceMax {
		b := C.malloc(C.size_t(len(src)))
		if b == nil {
			return fmt.Errorf("cuda: malloc of %d bytes failed", len(src))
		}
		defer C.free(b)
		copy(unsafe.Slice((*byte)(b), len(src)), src)
		p = b
	}
	if err := check("cuMemcpyHtoDAsync", C.esper_copy_h2d_async(C.uint64_t(dst), p, C.size_t(len(src)), cstream(s))); err != nil {
		return err
	}
	if !wait {
		return nil
	}
	return check("cuStreamSynchronize", C.esper_stream_sync(cstream(s)))
}

// copyD2HSync copies device bytes at src into dst once the work enqueued
// on s before it has run, through a bounce buffer when small
// (copyH2DSync): a page-locked one from pinnedBounces, so that the copy
// is the DMA of a pinned transfer rather than the driver's staging of a
// pageable one (a trainer's per-epoch metrics read is such a copy), or
// C memory when none can be had.
func copyD2HSync(dst []byte, src cu.DevicePtr, s cu.Stream) error {
	return copyD2HManySync([][]byte{dst}, []cu.DevicePtr{src}, s)
}

// copyD2HManySync copies the device bytes at srcs[i] into dsts[i] for
// every i once the work enqueued on s before them has run, waiting for
// the stream once: the copies are queued one after another (a small one
// through a bounce buffer, as copyD2HSync's, one of up to
// mediumBounceMax bytes through a pinned buffer of mediumBounces while
// one is free), then one synchronize, and the bounced bytes are copied
// out. A larger destination (or a medium one finding no free buffer) is
// Go memory the driver stages (pageable), so its copy returns once done;
// the first such copy waits for the queued work, and the synchronize at
// the end for the copies behind it: one wait for the device's work in
// all.
func copyD2HManySync(dsts [][]byte, srcs []cu.DevicePtr, s cu.Stream) (err error) {
	bounces := make([]unsafe.Pointer, len(dsts))
	pools := make([]*bouncePool, len(dsts)) // the pool of bounces[i]; nil: C memory
	queued, synced := false, false
	defer func() {
		if queued && !synced {
			// An error after a copy was queued: wait for it before its
			// bounce buffer goes back to the pool or is freed.
			_ = C.esper_stream_sync(cstream(s))
		}
		for i, b := range bounces {
			switch {
			case pools[i] != nil:
				pools[i].put(b)
			case b != nil:
				C.free(b)
			}
		}
	}()
	for i, dst := range dsts {
		if len(dst) == 0 {
			continue
		}
		p := unsafe.Pointer(&dst[0])
		var pool *bouncePool
		switch {
		case len(dst) <= bounceMax:
			pool = &pinnedBounces
		case len(dst) <= mediumBounceMax:
			pool = &mediumBounces
		}
		if pool != nil {
			b := pool.get()
			if b != nil {
				pools[i] = pool
			} else if len(dst) <= bounceMax {
				// A small destination may share its Go allocation with
				// pointers (copyH2DSync): C memory, never Go's.
				if b = C.malloc(C.size_t(len(dst))); b == nil {
					return fmt.Errorf("cuda: malloc of %d bytes failed", len(dst))
				}
			}
			if b != nil {
				bounces[i] = b
				p = b
			}
		}
		if err := check("cuMemcpyDtoHAsync", C.esper_copy_d2h_async(p, C.uint64_t(srcs[i]), C.size_t(len(dst)), cstream(s))); err != nil {
			return err
		}
		queued = true
	}
	synced = true // tried once: a failed synchronize is not retried
	if err := check("cuStreamSynchronize", C.esper_stream_sync(cstream(s))); err != nil {
		return err
	}
	for i, b := range bounces {
		if b != nil {
			copy(dsts[i], unsafe.Slice((*byte)(b), len(dsts[i])))
		}
	}
	return nil
}

// bouncePool hands out page-locked bounce buffers of size bytes for
// device-to-host copies: up to limit, allocated on first use
// (cuMemHostAlloc, portable across contexts) and kept for the process.
// get returns nil, and the caller uses C memory or copies straight into
// its destination, when none is free and no more may be made, or the
// allocation fails.
type bouncePool struct {
	size, limit int
	mu          sync.Mutex
	free        []unsafe.Pointer
	made        int
	broke       bool // an allocation failed: stop trying
}

const bouncePoolSize = 8

// mediumBounceMax is the largest device-to-host copy that goes through a
// pinned buffer of mediumBounces (one of up to mediumPoolSize of that
// size) rather than straight into its Go destination: a copy into
// pageable memory is the driver's staging, in chunks, returning once it
// is done, where a pinned copy is one DMA. W2's batch-64 logits (64
// rows of 42 floats, 10.5 KiB, in one joined tensor) are such a read,
// once a forward.
const (
	mediumBounceMax = 256 << 10
	mediumPoolSize  = 4
)

// pinnedBounces are the small copies' buffers, mediumBounces the larger
// ones'.
var (
	pinnedBounces = bouncePool{size: bounceMax, limit: bouncePoolSize}
	mediumBounces = bouncePool{size: mediumBounceMax, limit: mediumPoolSize}
)

func (bp *bouncePool) get() unsafe.Pointer {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	if n := len(bp.free); n > 0 {
		b := bp.free[n-1]
		bp.free = bp.free[:n-1]
		return b
	}
	if bp.broke || bp.made == bp.limit {
		return nil
	}
	b, err := hostAlloc(bp.size)
	if err != nil || b == nil {
		bp.broke = true
		return nil
	}
	bp.made++
	return b
}

func (bp *bouncePool) put(b unsafe.Pointer) {
	bp.mu.Lock()
	bp.free = append(bp.free, b)
	bp.mu.Unlock()
}
