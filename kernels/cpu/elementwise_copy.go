package cpu

import (
	"math"
	"unsafe"

	"github.com/esper-go/esper/tensor"
)

// rawElem are the unsigned types of each element size; moving data of any
// dtype is moving these.
type rawElem interface {
	~uint8 | ~uint16 | ~uint32 | ~uint64
}

// rawView views t's whole storage as elements of E (sizeof(E) must be the
// dtype size).
func rawView[E rawElem](t *T) []E {
	b := t.Storage().Bytes()
	var z E
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*E)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

// Fill implements kernels.Backend. dst may be any strided view.
func (be *Backend) Fill(dst *T, v float64) {
	needCPU("Fill", dst)
	if dst.DType() == tensor.Invalid {
		fail("Fill", "dst of shape %v has an invalid dtype", dst.Shape())
	}
	if be.eager() && fillEager(dst, v) {
		return
	}
	be.launch(fillFunc(dst, v))
}

// fillFunc prepares the fill of dst (any strides) with v.
func fillFunc(dst *T, v float64) func() {
	// The element's bit pattern, computed once by storing v into a
	// one-element tensor of dst's dtype.
	one := tensor.Empty(dst.DType(), 1)
	one.Set(v, 0)
	g := newGeom(dst.Shape(), [][]int{dst.Strides()}, []int{dst.Offset()})
	var f func()
	switch dst.DType().Size() {
	case 1:
		f = fillRaw(g, rawView[uint8](dst), rawView[uint8](one)[0])
	case 2:
		f = fillRaw(g, rawView[uint16](dst), rawView[uint16](one)[0])
	case 4:
		f = fillRaw(g, rawView[uint32](dst), rawView[uint32](one)[0])
	default:
		f = fillRaw(g, rawView[uint64](dst), rawView[uint64](one)[0])
	}
	return f
}

func fillRaw[E rawElem](g *geom, d []E, v E) func() {
	sd := g.innerStride(0)
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			o, n := g.item(it)
			if sd == 1 {
				s := d[o[0] : o[0]+n]
				for i := range s {
					s[i] = v
				}
				continue
			}
			for i, j := 0, o[0]; i < n; i, j = i+1, j+sd {
				d[j] = v
			}
		}
	}
	return func() { parallelFor(g.items, min(g.inner, itemLen), body) }
}

// Copy implements kernels.Backend.
func (be *Backend) Copy(dst, src *T) {
	needCPU("Copy", dst, src)
	if dst.Numel() != src.Numel() {
		fail("Copy", "dst shape %v and src shape %v have different element counts", dst.Shape(), src.Shape())
	}
	if be.eager() && copyEager(dst, src) {
		return
	}
	be.launch(copyFunc(dst, src))
}

// copyFunc prepares a copy of src into dst (equal element counts, any
// strides and dtypes) and returns the launch body.
func copyFunc(dst, src *T) func() {
	if dst.Numel() == 0 {
		return func() {}
	}
	var shape, sst, dst_ []int
	switch {
	case tensor.SameShape(dst.Shape(), src.Shape()):
		shape, dst_, sst = dst.Shape(), dst.Strides(), src.Strides()
	case src.IsContiguous():
		shape, dst_, sst = dst.Shape(), dst.Strides(), contigStrides(dst.Shape())
	case dst.IsContiguous():
		shape, dst_, sst = src.Shape(), contigStrides(src.Shape()), src.Strides()
	default:
		// Both strided with different shapes: go through a packed copy.
		tmp := tensor.Empty(src.DType(), src.Shape()...)
		a := copyFunc(tmp, src)
		b := copyFunc(dst, tmp)
		return func() { a(); b() }
	}
	if dst.DType() == src.DType() && dst.IsContiguous() && tensor.SameShape(dst.Shape(), src.Shape()) {
		if outer, inner, ok := expandedInner(src); ok && inner > 1 {
			switch dst.DType().Size() {
			case 4:
				return repeatEach(rawView[uint32](dst)[dst.Offset():], rawView[uint32](src)[src.Offset():], outer, inner)
			case 8:
				return repeatEach(rawView[uint64](dst)[dst.Offset():], rawView[uint64](src)[src.Offset():], outer, inner)
			}
		}
	}
	g := newGeom(shape, [][]int{dst_, sst}, []int{dst.Offset(), src.Offset()})
	if dst.DType() == src.DType() {
		switch dst.DType().Size() {
		case 1:
			return copySame(g, rawView[uint8](dst), rawView[uint8](src))
		case 2:
			return copySame(g, rawView[uint16](dst), rawView[uint16](src))
		case 4:
			return copySame(g, rawView[uint32](dst), rawView[uint32](src))
		default:
			return copySame(g, rawView[uint64](dst), rawView[uint64](src))
		}
	}
	// Frequent conversions get direct element functions; the rest go
	// through float64.
	switch {
	case dst.DType() == tensor.F32 && src.DType() == tensor.BF16:
		return copyConv(g, storF32(dst), storU16(src), tensor.BF16ToF32)
	case dst.DType() == tensor.BF16 && src.DType() == tensor.F32:
		return copyConv(g, storU16(dst), storF32(src), tensor.F32ToBF16)
	case dst.DType() == tensor.F32 && src.DType() == tensor.F16:
		return copyConv(g, storF32(dst), storU16(src), tensor.F16ToF32)
	case dst.DType() == tensor.F16 && src.DType() == tensor.F32:
		return copyConv(g, storU16(dst), storF32(src), tensor.F32ToF16)
	case dst.DType() == tensor.F64 && src.DType() == tensor.F32:
		return copyConv(g, tensor.StorageData[float64](dst.Storage()), storF32(src), func(v float32) float64 { return float64(v) })
	case dst.DType() == tensor.F32 && src.DType() == tensor.F64:
		return copyConv(g, storF32(dst), tensor.StorageData[float64](src.Storage()), func(v float64) float32 { return float32(v) })
	}
	s := src.Storage()
	switch src.DType() {
	case tensor.F64:
		return copyFrom(g, dst, tensor.StorageData[float64](s), func(v float64) float64 { return v })
	case tensor.F32:
		return copyFrom(g, dst, tensor.StorageData[float32](s), func(v float32) float64 { return float64(v) })
	case tensor.BF16:
		return copyFrom(g, dst, tensor.StorageData[uint16](s), func(v uint16) float64 { return float64(tensor.BF16ToF32(v)) })
	case tensor.F16:
		return copyFrom(g, dst, tensor.StorageData[uint16](s), func(v uint16) float64 { return float64(tensor.F16ToF32(v)) })
	case tensor.I32:
		return copyFrom(g, dst, tensor.StorageData[int32](s), func(v int32) float64 { return float64(v) })
	case tensor.I64:
		return copyFrom(g, dst, tensor.StorageData[int64](s), func(v int64) float64 { return float64(v) })
	case tensor.Bool:
		return copyFrom(g, dst, tensor.StorageData[bool](s), func(v bool) float64 {
			if v {
				return 1
			}
			return 0
		})
	}
	fail("Copy", "invalid dtype %v (shape %v)", src.DType(), src.Shape())
	return nil
}

func storF32(t *T) []float32 { return tensor.StorageData[float32](t.Storage()) }
func storF64(t *T) []float64 { return tensor.StorageData[float64](t.Storage()) }
func storU16(t *T) []uint16  { return tensor.StorageData[uint16](t.Storage()) }

func copyFrom[S tensor.Elem](g *geom, dst *T, src []S, ld func(S) float64) func() {
	d := dst.Storage()
	switch dst.DType() {
	case tensor.F64:
		return copyConv(g, tensor.StorageData[float64](d), src, ld)
	case tensor.F32:
		return copyConv(g, tensor.StorageData[float32](d), src, func(v S) float32 { return float32(ld(v)) })
	case tensor.BF16:
		return copyConv(g, tensor.StorageData[uint16](d), src, func(v S) uint16 { return tensor.F32ToBF16(float32(ld(v))) })
	case tensor.F16:
		return copyConv(g, tensor.StorageData[uint16](d), src, func(v S) uint16 { return tensor.F32ToF16(float32(ld(v))) })
	case tensor.I32:
		return copyConv(g, tensor.StorageData[int32](d), src, func(v S) int32 { return int32(truncInt(ld(v))) })
	case tensor.I64:
		return copyConv(g, tensor.StorageData[int64](d), src, func(v S) int64 { return truncInt(ld(v)) })
	case tensor.Bool:
		return copyConv(g, tensor.StorageData[bool](d), src, func(v S) bool { return ld(v) != 0 })
	}
	fail("Copy", "invalid dtype %v (shape %v)", dst.DType(), dst.Shape())
	return nil
}

// truncInt converts toward zero; NaN becomes 0 rather than the
// platform's undefined value.
func truncInt(v float64) int64 {
	if math.IsNaN(v) {
		return 0
	}
	return int64(v)
}

func copySame[E rawElem](g *geom, d, s []E) func() {
	sd, ss := g.innerStride(0), g.innerStride(1)
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			o, n := g.item(it)
			if sd == 1 && ss == 1 {
				copy(d[o[0]:o[0]+n], s[o[1]:o[1]+n])
				continue
			}
			for i, j, k := 0, o[0], o[1]; i < n; i, j, k = i+1, j+sd, k+ss {
				d[j] = s[k]
			}
		}
	}
	return func() { parallelFor(g.items, min(g.inner, itemLen), body) }
}

func copyConv[D, S tensor.Elem](g *geom, d []D, s []S, conv func(S) D) func() {
	sd, ss := g.innerStride(0), g.innerStride(1)
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			o, n := g.item(it)
			if sd == 1 && ss == 1 {
				dd, sv := d[o[0]:o[0]+n], s[o[1]:o[1]+n]
				for i, v := range sv {
					dd[i] = conv(v)
				}
				continue
			}
			for i, j, k := 0, o[0], o[1]; i < n; i, j, k = i+1, j+sd, k+ss {
				d[j] = conv(s[k])
			}
		}
	}
	return func() { parallelFor(g.items, 4*min(g.inner, itemLen), body) }
}

// expandedInner reports whether t is a contiguous block broadcast along a
// trailing run of dims (stride 0 there, size-1 dims anywhere): element
// (o, i) of the [outer, inner] view is t's storage element o past its
// offset. The backward of a global average pool copies such a tensor.
func expandedInner(t *T) (outer, inner int, ok bool) {
	sh, st := t.Shape(), t.Strides()
	k := len(sh)
	inner = 1
	for k > 0 && (st[k-1] == 0 || sh[k-1] == 1) {
		k--
		inner *= sh[k]
	}
	outer, want := 1, 1
	for i := k - 1; i >= 0; i-- {
		if sh[i] != 1 && st[i] != want {
			return 0, 0, false
		}
		want *= sh[i]
		outer *= sh[i]
	}
	return outer, inner, k < len(sh)
}

// repeatEach sets d[o·inner + i] = s[o] for o < outer, i < inner.
func repeatEach[E rawElem](d, s []E, outer, inner int) func() {
	d, s = d[:outer*inner], s[:outer]
	body := func(lo, hi int) {
		for o := lo; o < hi; o++ {
			v := s[o]
			row := d[o*inner : (o+1)*inner]
			for i := range row {
				row[i] = v
			}
		}
	}
	return func() { parallelFor(outer, inner, body) }
}
