//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Indexing along any axis (src/index.cu). Index tensors are contiguous
// I64 or I32 on the device; their values are read by the kernels at run
// time (a captured step sees new indices), so a value out of range cannot
// panic as on the CPU: selection and gather write zero bits for it, the
// accumulating ops skip it.

// IndexSelect implements kernels.Backend (any dtype).
func (b *Backend) IndexSelect(dst, src *T, axis int, index *T) {
	must(b.d.IndexSelect(dst, src, axis, index))
}

// IndexAdd implements kernels.Backend (F32, BF16, F16).
func (b *Backend) IndexAdd(dst *T, axis int, index, src *T) {
	must(b.d.IndexAdd(dst, axis, index, src))
}

// Gather implements kernels.Backend (any dtype).
func (b *Backend) Gather(dst, src *T, axis int, index *T) { must(b.d.Gather(dst, src, axis, index)) }

// ScatterAdd implements kernels.Backend (F32, BF16, F16).
func (b *Backend) ScatterAdd(dst *T, axis int, index, src *T) {
	must(b.d.ScatterAdd(dst, axis, index, src))
}

// indexPtr checks an index tensor and reports whether it is I64.
func (d *Device) indexPtr(op, what string, index *tensor.Tensor) (cu.DevicePtr, bool, error) {
	if index == nil {
		return 0, false, fmt.Errorf("cuda: %s: %s is nil", op, what)
	}
	switch index.DType() {
	case tensor.I64, tensor.I32:
	default:
		return 0, false, fmt.Errorf("cuda: %s: %s (shape %v) has dtype %v, want I64 or I32", op, what, index.Shape(), index.DType())
	}
	p, err := d.ptrOf(op, what, index, index.DType())
	return p, index.DType() == tensor.I64, err
}

// IndexSelect picks slices of src along axis by index ([K]): dst has
// src's shape with that axis of size K. Any dtype; dst and src
// contiguous.
func (d *Device) IndexSelect(dst, src *tensor.Tensor, axis int, index *tensor.Tensor) error {
	const op = "IndexSelect"
	a, err := kernels.CheckIndexSelect(op, dst, src, axis, index)
	if err := checked(err); err != nil {
		return err
	}
	pi, i64, err := d.indexPtr(op, "index", index)
	if err != nil {
		return err
	}
	pd, err := d.ptrOf(op, "dst", dst, src.DType())
	if err != nil {
		return err
	}
	ps, err := d.ptrOf(op, "src", src, src.DType())
	if err != nil {
		return err
	}
	outer, n, inner := kernels.Split3(src.Shape(), a)
	k := index.Numel()
	release := d.enter()
	defer release()
	var ar args
	ar.ptr(pd).ptr(ps).ptr(pi).i32(b2i(i64)).i64(int64(outer)).i64(int64(n)).i64(int64(inner)).i64(int64(k))
	return d.launch1D(fmt.Sprintf("index_select_raw%d", src.DType().Size()), int64(outer*k*inner), &ar)
}

// IndexAdd accumulates dst.select(axis, index[k]) += src.select(axis, k)
// (F32, BF16 or F16, contiguous; atomics, so repeated indices add in no
// fixed order, each addition rounded to the dtype).
func (d *Device) IndexAdd(dst *tensor.Tensor, axis int, index, src *tensor.Tensor) error {
	const op = "IndexAdd"
	a, err := kernels.CheckIndexAdd(op, dst, axis, index, src)
	if err := checked(err); err != nil {
		return err
	}
	dt := dst.DType()
	kernel, err := floatKernel(op, "index_add", dt)
	if err != nil {
		return err
	}
	pi, i64, err := d.indexPtr(op, "index", index)
	if err != nil {
		return err
	}
	pd, err := d.ptrOf(op, "dst", dst, dt)
	if err != nil {
		return err
	}
	ps, err := d.ptrOf(op, "src", src, dt)
	if err != nil {
		return err
	}
	outer, n, inner := kernels.Split3(dst.Shape(), a)
	k := index.Numel()
	release := d.enter()
	defer release()
	var ar args
	ar.ptr(pd).ptr(ps).ptr(pi).i32(b2i(i64)).i64(int64(outer)).i64(int64(n)).i64(int64(inner)).i64(int64(k))
	return d.launch1D(kernel, int64(outer*k*inner), &ar)
}

// axisZeroed returns t's strides with axis's set to 0.
func axisZeroed(t *tensor.Tensor, axis int) []int {
	st := append([]int(nil), t.Strides()...)
	st[axis] = 0
	return st
}

// Gather follows torch.gather: dst (contiguous, index's shape) gets
// src[..., index[...], ...] along axis; src is a view of any strides and
// any dtype.
func (d *Device) Gather(dst, src *tensor.Tensor, axis int, index *tensor.Tensor) error {
	const op = "Gather"
	a, err := kernels.CheckGather(op, dst, src, axis, index)
	if err := checked(err); err != nil {
		return err
	}
	pi, i64, err := d.indexPtr(op, "index", index)
	if err != nil {
		return err
	}
	pd, err := d.ptrOf(op, "dst", dst, src.DType())
	if err != nil {
		return err
	}
	ps, err := d.viewPtr(op, "src", src, src.DType())
	if err != nil {
		return err
	}
	n := int64(index.Numel())
	if n == 0 {
		return nil
	}
	g, err := newGeom(op, index.Shape(), axisZeroed(src, a))
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var ar args
	ar.ptr(pd).ptr(ps).ptr(pi).i32(b2i(i64)).push(g.words()...).i64(int64(src.Strides()[a])).i64(int64(src.Dim(a))).i64(n)
	return d.launch1D(fmt.Sprintf("gather_raw%d", src.DType().Size()), n, &ar)
}

// ScatterAdd follows torch.scatter_add_: dst[..., index[...], ...] +=
// src[...] along axis over index's extent (F32, BF16 or F16; dst and src
// views of any strides; atomics, so repeated targets add in no fixed
// order, each addition rounded to the dtype).
func (d *Device) ScatterAdd(dst *tensor.Tensor, axis int, index, src *tensor.Tensor) error {
	const op = "ScatterAdd"
	a, err := kernels.CheckScatterAdd(op, dst, axis, index, src)
	if err := checked(err); err != nil {
		return err
	}
	dt := dst.DType()
	kernel, err := floatKernel(op, "scatter_add", dt)
	if err != nil {
		return err
	}
	pi, i64, err := d.indexPtr(op, "index", index)
	if err != nil {
		return err
	}
	pd, err := d.viewPtr(op, "dst", dst, dt)
	if err != nil {
		return err
	}
	ps, err := d.viewPtr(op, "src", src, dt)
	if err != nil {
		return err
	}
	n := int64(index.Numel())
	if n == 0 {
		return nil
	}
	g, err := newGeom(op, index.Shape(), src.Strides(), axisZeroed(dst, a))
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var ar args
	ar.ptr(pd).ptr(ps).ptr(pi).i32(b2i(i64)).push(g.words()...).i64(int64(dst.Strides()[a])).i64(int64(dst.Dim(a))).i64(n)
	return d.launch1D(kernel, n, &ar)
}
