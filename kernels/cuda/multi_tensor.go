//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Multi-tensor apply (src/multi_tensor.cu): one launch runs an update over
// a whole list of F32 tensors of any sizes, the way PyTorch's foreach
// optimizers do, instead of one launch per tensor. The list travels as a
// table in device memory — per tensor its pointers (one per operand
// list) and size, then the chunks of mtChunk elements the blocks share
// out — which the Device caches by content: a step over the same tensors
// uploads its table once, and a captured step reuses it on every replay
// without a copy.
//
// A table is uploaded with a synchronous copy, which a graph capture
// forbids; a list first seen during a capture (autograd.Capture warms up
// eagerly, so the usual step has been seen) therefore runs as one launch
// per tensor, with the same per-element arithmetic, and so does a list of
// one tensor (the optimizers' arena buckets), for which a table would buy
// nothing.

// mtMaxTables bounds the cached tables that no capture has used; older
// ones are freed first. Tables a capture used are kept for the device's
// lifetime, because a graph reads its table on every replay.
const mtMaxTables = 32

// errMTEach tells the caller to launch once per tensor: the list has one
// tensor, or its table is not on the device during a capture.
var errMTEach = errors.New("cuda: a list to launch tensor by tensor")

// mtTable is a table on the device and the host words it was made from
// (its cache key).
type mtTable struct {
	words   []uint64
	ptr     cu.DevicePtr
	tensors int64
	chunks  int64
	pinned  bool   // used during a capture: never freed
	used    uint64 // cache tick of the last use
}

// mtCache holds a Device's tables.
type mtCache struct {
	mu     sync.Mutex
	tables []*mtTable
	words  []uint64 // scratch for the key of a lookup
	tick   uint64
}

// mtTableFor returns the device table for the operand lists (lists[l][t]
// is the address of tensor t in list l, sizes[t] its element count),
// uploading it when it is not cached. A list of one tensor, and during a
// capture a list whose table is not cached, is errMTEach.
func (d *Device) mtTableFor(lists [][]cu.DevicePtr, sizes []int64) (*mtTable, error) {
	if len(sizes) >= mtMaxTensors {
		return nil, fmt.Errorf("cuda: a multi-tensor list of %d tensors (at most %d)", len(sizes), mtMaxTensors-1)
	}
	switch len(sizes) {
	case 0:
		return &mtTable{}, nil // nothing to launch
	case 1:
		return nil, errMTEach
	}
	capturing := d.Capturing()
	c := &d.mt
	c.mu.Lock()
	defer c.mu.Unlock()
	w, chunks := mtWords(c.words[:0], lists, sizes)
	c.words = w
	c.tick++
	for _, tb := range c.tables {
		if slices.Equal(tb.words, w) {
			tb.used = c.tick
			tb.pinned = tb.pinned || capturing
			return tb, nil
		}
	}
	if capturing {
		return nil, errMTEach
	}
	if err := c.evictLocked(d); err != nil {
		return nil, err
	}
	tb := &mtTable{words: slices.Clone(w), tensors: int64(len(sizes)), chunks: chunks, used: c.tick}
	p, err := d.alloc.Alloc(int64(8 * len(tb.words)))
	if err != nil {
		return nil, err
	}
	tb.ptr = p
	if len(tb.words) > 0 {
		// No wait for the copy: from pageable memory the driver stages
		// the words before the call returns (or waits itself), the
		// table keeps them besides, and the launches that read the
		// table come after the copy on the same stream. (A wait here
		// was a host sync that nothing counted.)
		release := d.enter()
		err = cu.MemcpyHtoDAsync(p, unsafe.Pointer(&tb.words[0]), int64(8*len(tb.words)), d.stream)
		release()
		if err != nil {
			d.alloc.Free(p)
			return nil, fmt.Errorf("cuda: uploading a multi-tensor table: %w", err)
		}
	}
	c.tables = append(c.tables, tb)
	return tb, nil
}

// evictLocked frees the least recently used table no capture holds when
// the cache is full. Stream order makes the free safe: launches that read
// the table were enqueued before anything that reuses its block.
func (c *mtCache) evictLocked(d *Device) error {
	if len(c.tables) < mtMaxTables {
		return nil
	}
	victim := -1
	for i, tb := range c.tables {
		if !tb.pinned && (victim < 0 || tb.used < c.tables[victim].used) {
			victim = i
		}
	}
	if victim < 0 {
		return nil // every table belongs to a graph: the cache grows
	}
	tb := c.tables[victim]
	c.tables = slices.Delete(c.tables, victim, victim+1)
	return d.alloc.Free(tb.ptr)
}

// mtLaunch launches a multi-tensor kernel over tb's chunks: up to eight
// blocks per SM, each walking chunks with a grid stride.
func (d *Device) mtLaunch(name string, tb *mtTable, a *args) error {
	if tb.chunks == 0 {
		return nil
	}
	fn, err := d.kernel(name)
	if err != nil {
		return err
	}
	blocks := min(tb.chunks, int64(d.sms)*8)
	release := d.enter()
	defer release()
	return launchRaw(fn, [3]int{int(blocks), 1, 1}, [3]int{blockSize, 1, 1}, 0, d.stream, a)
}

// mtOperands checks parallel lists of contiguous F32 tensors on d (every
// list as long as the first, tensor t of one shape in every list) and
// returns their addresses per list and the element counts.
func (d *Device) mtOperands(op string, names []string, lists ...[]*tensor.Tensor) ([][]cu.DevicePtr, []int64, error) {
	n := len(lists[0])
	for l, ts := range lists {
		if len(ts) != n {
			return nil, nil, fmt.Errorf("cuda: %s: %d %s for %d %s", op, len(ts), names[l], n, names[0])
		}
	}
	ptrs := make([][]cu.DevicePtr, len(lists))
	sizes := make([]int64, n)
	for l, ts := range lists {
		ps, err := d.foreachPtrs(op, names[l], ts)
		if err != nil {
			return nil, nil, err
		}
		ptrs[l] = ps
		for t, x := range ts {
			if l == 0 {
				sizes[t] = int64(x.Numel())
			} else if err := sameShape(op, lists[0][t], x); err != nil {
				return nil, nil, fmt.Errorf("%w (%s[%d] and %s[%d])", err, names[0], t, names[l], t)
			}
		}
	}
	return ptrs, sizes, nil
}

// ForeachSGDStep is SGDStep over lists of separate tensors (not a flat
// arena): params[i] is updated from grads[i] and, with momentum, the
// buffer moms[i] (moms empty when o.Momentum is 0), all F32 and
// pairwise of one shape; hyper is the F64 [2] {lr, step} and foundInf
// (optional, F32, one element) skips the update when non-zero. The whole
// list is one launch (one per tensor in the cases the multi-tensor notes
// above name). Parameters must not overlap one another.
func (d *Device) ForeachSGDStep(params, grads, moms []*tensor.Tensor, hyper, foundInf *tensor.Tensor, o kernels.SGDOptions) error {
	const op = "ForeachSGDStep"
	if o.ZeroGrad {
		return fmt.Errorf("cuda: %s: SGDOptions.ZeroGrad is for SGDStep over an arena; zero the gradients with Fill", op)
	}
	if (len(moms) == 0) != (o.Momentum == 0) {
		return fmt.Errorf("cuda: %s: momentum %v with %d momentum buffers", op, o.Momentum, len(moms))
	}
	lists, names := [][]*tensor.Tensor{params, grads}, []string{"params", "grads"}
	if len(moms) > 0 {
		lists, names = append(lists, moms), append(names, "moms")
	}
	ptrs, sizes, err := d.mtOperands(op, names, lists...)
	if err != nil {
		return err
	}
	ph, pf, err := d.hyperPtrs(op, hyper, foundInf)
	if err != nil {
		return err
	}
	tb, err := d.mtTableFor(ptrs, sizes)
	if errors.Is(err, errMTEach) {
		for i := range params {
			var m *tensor.Tensor
			if len(moms) > 0 {
				m = moms[i]
			}
			if err := d.SGDStep(params[i], grads[i], m, hyper, foundInf, o); err != nil {
				return err
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	var a args
	a.ptr(tb.ptr).i64(tb.tensors).i64(tb.chunks).i32(int32(len(lists))).ptr(ph).ptr(pf)
	a.f32(float32(o.Momentum)).f32(float32(1 - o.Dampening)).f32(float32(o.WeightDecay))
	a.i32(b2i(o.Nesterov)).i32(b2i(o.Maximize))
	return d.mtLaunch("mt_sgd_f32", tb, &a)
}

// ForeachAdamWStep is AdamWStep over lists of separate tensors: params[i]
// with grads[i] and the moments ms[i], vs[i] (all F32, pairwise of one
// shape), hyper the F64 [2] {lr, step}, foundInf optional. The whole list
// is one launch, as for ForeachSGDStep. Parameters must not overlap one
// another.
func (d *Device) ForeachAdamWStep(params, grads, ms, vs []*tensor.Tensor, hyper, foundInf *tensor.Tensor, o kernels.AdamWOptions) error {
	const op = "ForeachAdamWStep"
	ptrs, sizes, err := d.mtOperands(op, []string{"params", "grads", "ms", "vs"}, params, grads, ms, vs)
	if err != nil {
		return err
	}
	ph, pf, err := d.hyperPtrs(op, hyper, foundInf)
	if err != nil {
		return err
	}
	tb, err := d.mtTableFor(ptrs, sizes)
	if errors.Is(err, errMTEach) {
		for i := range params {
			if err := d.AdamWStep(params[i], grads[i], ms[i], vs[i], hyper, foundInf, o); err != nil {
				return err
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	var a args
	a.ptr(tb.ptr).i64(tb.tensors).i64(tb.chunks).ptr(ph).ptr(pf)
	a.f32(float32(o.Beta1)).f32(float32(o.Beta2)).f32(float32(1 - o.Beta1)).f32(float32(1 - o.Beta2)).f32(float32(o.Eps))
	a.f64(o.WeightDecay).f64(o.Beta1).f64(o.Beta2)
	return d.mtLaunch("mt_adamw_f32", tb, &a)
}

// hyperPtrs checks an optimizer step's F64 [2] hyper tensor and its
// optional F32 foundInf scalar.
func (d *Device) hyperPtrs(op string, hyper, foundInf *tensor.Tensor) (ph, pf cu.DevicePtr, err error) {
	if err := checked(kernels.CheckHyper(op, hyper)); err != nil {
		return 0, 0, err
	}
	if ph, err = d.ptrOf(op, "hyper", hyper, tensor.F64); err != nil {
		return 0, 0, err
	}
	if foundInf != nil {
		if pf, err = d.scalarPtr(op, "foundInf", foundInf); err != nil {
			return 0, 0, err
		}
	}
	return ph, pf, nil
}
