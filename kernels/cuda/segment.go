//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Segment operations over rows of src [E, F...] grouped by segment id
// (src/segment.cu): each launch first buckets the rows by segment with a
// stable counting sort on the device, into an I32 scratch of S+1 offsets,
// S cursors and E row numbers, then visits every segment's rows in row
// order, as the CPU backend does. Values are F32, BF16 or F16 (fp32 math);
// segment ids I64 or I32 [E] in [0, S) (an id outside puts its row in no
// segment: a kernel cannot panic).

// SegmentReduce implements kernels.Backend.
func (b *Backend) SegmentReduce(op kernels.ReduceOp, dst, argmax, src, segIDs *T) {
	must(b.d.SegmentReduce(op, dst, argmax, src, segIDs))
}

// SegmentMaxBackward implements kernels.Backend.
func (b *Backend) SegmentMaxBackward(dsrc, dy, argmax *T) {
	must(b.d.SegmentMaxBackward(dsrc, dy, argmax))
}

// SegmentSoftmax implements kernels.Backend.
func (b *Backend) SegmentSoftmax(dst, src, segIDs *T, numSegments int) {
	must(b.d.SegmentSoftmax(dst, src, segIDs, numSegments))
}

// SegmentSoftmaxBackward implements kernels.Backend.
func (b *Backend) SegmentSoftmaxBackward(dx, y, dy, segIDs *T, numSegments int) {
	must(b.d.SegmentSoftmaxBackward(dx, y, dy, segIDs, numSegments))
}

// segCSR is a launch's bucketing: the scratch and its parts' addresses.
type segCSR struct {
	scratch            *tensor.Tensor
	start, next, order cu.DevicePtr
}

// free releases the scratch (stream order keeps it until the launches
// reading it have run).
func (c segCSR) free() { c.scratch.Storage().Free() }

// buildCSR enqueues the bucketing of E rows into S segments by segIDs
// (checked by the caller: kernels.CheckSegmentIDs; contiguous here).
func (d *Device) buildCSR(op string, segIDs *tensor.Tensor, e, s int) (segCSR, error) {
	var c segCSR
	pseg, i64, err := d.indexPtr(op, "segIDs", segIDs)
	if err != nil {
		return c, err
	}
	if c.scratch, err = tensor.EmptyOn(tensor.CUDA(d.ordinal), tensor.I32, 2*s+1+e); err != nil {
		return c, err
	}
	c.start = cu.DevicePtr(c.scratch.Storage().DevicePtr())
	c.next = c.start + cu.DevicePtr(4*(s+1))
	c.order = c.next + cu.DevicePtr(4*s)
	fail := func(err error) (segCSR, error) {
		c.free()
		return segCSR{}, err
	}
	if err := d.Fill(c.scratch.Narrow(0, 0, s+1), 0); err != nil {
		return fail(err)
	}
	release := d.enter()
	defer release()
	var a args
	if err := d.launch1D("seg_count", int64(e), a.ptr(c.start).ptr(pseg).i32(b2i(i64)).i64(int64(e)).i64(int64(s))); err != nil {
		return fail(err)
	}
	scan, err := d.kernel("seg_scan")
	if err != nil {
		return fail(err)
	}
	var b args
	if err := launchRaw(scan, [3]int{1, 1, 1}, [3]int{scanThreads, 1, 1}, 0, d.stream, b.ptr(c.start+4).i64(int64(s))); err != nil {
		return fail(err)
	}
	place, err := d.kernel("seg_place")
	if err != nil {
		return fail(err)
	}
	var p args
	p.ptr(c.order).ptr(c.next).ptr(c.start).ptr(pseg).i32(b2i(i64)).i64(int64(e)).i64(int64(s))
	if err := launchRaw(place, [3]int{1, 1, 1}, [3]int{32, 1, 1}, 0, d.stream, &p); err != nil {
		return fail(err)
	}
	return c, nil
}

// scanThreads is seg_scan's block size (SCAN_THREADS in src/segment.cu).
const scanThreads = 1024

// SegmentReduce reduces the rows of src [E, F...] into dst [S, F...] by
// segment with Sum, Mean or Max; an empty segment gives 0. For Max,
// argmax (I64, dst's shape, optional) receives the winning row (the
// first of equal maxima), or -1 for an empty segment.
func (d *Device) SegmentReduce(op kernels.ReduceOp, dst, argmax, src, segIDs *tensor.Tensor) error {
	name := "SegmentReduce " + op.String()
	e, fw, s, err := kernels.CheckSegmentReduce(name, op, dst, argmax, src, segIDs)
	if err := checked(err); err != nil {
		return err
	}
	if op != kernels.Max {
		argmax = nil
	}
	dt := src.DType()
	kernel, err := floatKernel(name, "seg_reduce", dt)
	if err != nil {
		return err
	}
	pd, err := d.ptrOf(name, "dst", dst, dt)
	if err != nil {
		return err
	}
	pa, err := d.optPtr(name, "argmax", argmax, tensor.I64)
	if err != nil {
		return err
	}
	ps, err := d.ptrOf(name, "src", src, dt)
	if err != nil {
		return err
	}
	c, err := d.buildCSR(name, segIDs, e, s)
	if err != nil {
		return err
	}
	defer c.free()
	release := d.enter()
	defer release()
	var a args
	a.i32(int32(op)).ptr(pd).ptr(pa).ptr(ps).ptr(c.start).ptr(c.order).i64(int64(s)).i64(int64(fw))
	return d.launch1D(kernel, int64(s*fw), &a)
}

// SegmentMaxBackward overwrites dsrc [E, F...] with dy [S, F...] routed
// to argmax (I64, dy's shape; -1 routes nothing).
func (d *Device) SegmentMaxBackward(dsrc, dy, argmax *tensor.Tensor) error {
	const op = "SegmentMaxBackward"
	if err := checked(kernels.CheckSegmentMaxBackward(op, dsrc, dy, argmax)); err != nil {
		return err
	}
	dt := dy.DType()
	kernel, err := floatKernel(op, "seg_max_bwd", dt)
	if err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"dsrc", "dy", "argmax"}, []*tensor.Tensor{dsrc, dy, argmax},
		[]tensor.DType{dt, dt, tensor.I64}, []bool{false, false, false})
	if err != nil {
		return err
	}
	if err := d.Fill(dsrc, 0); err != nil {
		return err
	}
	s, fw := dy.Dim(0), tensor.Numel(dy.Shape()[1:])
	release := d.enter()
	defer release()
	var a args
	a.ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).i64(int64(dsrc.Dim(0))).i64(int64(s)).i64(int64(fw))
	return d.launch1D(kernel, int64(s*fw), &a)
}

// SegmentSoftmax normalises src [E, F...] into dst (same shape) with a
// softmax within each of numSegments segments, per feature (fp64 sums).
func (d *Device) SegmentSoftmax(dst, src, segIDs *tensor.Tensor, numSegments int) error {
	return d.segSoftmax("SegmentSoftmax", dst, src, nil, segIDs, numSegments)
}

// SegmentSoftmaxBackward computes dx = y·(dy − Σ_segment y·dy) from y =
// SegmentSoftmax(x).
func (d *Device) SegmentSoftmaxBackward(dx, y, dy, segIDs *tensor.Tensor, numSegments int) error {
	if dy == nil {
		return fmt.Errorf("cuda: SegmentSoftmaxBackward: dy is nil")
	}
	return d.segSoftmax("SegmentSoftmaxBackward", dx, y, dy, segIDs, numSegments)
}

// segSoftmax is the forward (dy nil) or the backward of the segment
// softmax; x is src or y.
func (d *Device) segSoftmax(op string, dst, x, dy, segIDs *tensor.Tensor, numSegments int) error {
	bwd := dy != nil
	e, fw, err := kernels.CheckSegmentSoftmax(op, dst, x, dy, segIDs, numSegments)
	if err := checked(err); err != nil {
		return err
	}
	dt := x.DType()
	kernel, err := floatKernel(op, "seg_softmax", dt)
	if err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"dst", "x", "dy"}, []*tensor.Tensor{dst, x, dy},
		[]tensor.DType{dt, dt, dt}, []bool{false, false, true})
	if err != nil {
		return err
	}
	c, err := d.buildCSR(op, segIDs, e, numSegments)
	if err != nil {
		return err
	}
	defer c.free()
	release := d.enter()
	defer release()
	var a args
	a.i32(b2i(bwd)).ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).ptr(c.start).ptr(c.order).i64(int64(numSegments)).i64(int64(fw))
	return d.launch1D(kernel, int64(numSegments*fw), &a)
}
