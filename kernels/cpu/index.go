package cpu

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Indexing kernels. Index values are read at launch time (so a captured
// step sees new indices) and checked there; an out-of-range index panics
// naming the op. Accumulating kernels give every destination element to
// one item that adds in index order, so they are deterministic.

func checkIndexValue(op string, v, n int) {
	if v < 0 || v >= n {
		fail(op, "index %d out of range [0, %d)", v, n)
	}
}

// IndexSelect implements kernels.Backend (any dtype).
func (be *Backend) IndexSelect(dst, src *T, axis int, index *T) {
	const name = "IndexSelect"
	needCPU(name, dst, src, index)
	a := must1(kernels.CheckIndexSelect(name, dst, src, axis, index))
	i64, i32 := indexData(name, "index", index)
	needContig(name, "dst", dst)
	needContig(name, "src", src)
	outer, A, inner := kernels.Split3(src.Shape(), a)
	k := index.Numel()
	switch src.DType().Size() {
	case 1:
		be.launch(indexSelectPrep(rawData[uint8](dst), rawData[uint8](src), i64, i32, outer, A, inner, k))
	case 2:
		be.launch(indexSelectPrep(rawData[uint16](dst), rawData[uint16](src), i64, i32, outer, A, inner, k))
	case 4:
		be.launch(indexSelectPrep(rawData[uint32](dst), rawData[uint32](src), i64, i32, outer, A, inner, k))
	default:
		be.launch(indexSelectPrep(rawData[uint64](dst), rawData[uint64](src), i64, i32, outer, A, inner, k))
	}
}

// rawData is the contiguous element range of t as E.
func rawData[E rawElem](t *T) []E {
	return rawView[E](t)[t.Offset() : t.Offset()+t.Numel()]
}

func indexSelectPrep[E rawElem](d, s []E, i64 []int64, i32 []int32, outer, A, inner, k int) func() {
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			o, j := it/k, it%k
			idx := idxAt(i64, i32, j)
			checkIndexValue("IndexSelect", idx, A)
			copy(d[it*inner:(it+1)*inner], s[(o*A+idx)*inner:(o*A+idx+1)*inner])
		}
	}
	return func() { parallelFor(outer*k, inner, body) }
}

// IndexAdd implements kernels.Backend (float dtypes).
func (be *Backend) IndexAdd(dst *T, axis int, index, src *T) {
	const name = "IndexAdd"
	needCPU(name, dst, src, index)
	a := must1(kernels.CheckIndexAdd(name, dst, axis, index, src))
	if wide(dst, src) {
		be.launch(indexAddPrep[float64](dst, a, index, src))
	} else {
		be.launch(indexAddPrep[float32](dst, a, index, src))
	}
}

const indexAddBlock = 256 // inner elements per item

func indexAddPrep[F tensor.Float](dst *T, axis int, index, src *T) func() {
	var s stage
	ds := inout[F](&s, dst)
	ss := in[F](&s, src)
	i64, i32 := indexData("IndexAdd", "index", index)
	outer, A, inner := kernels.Split3(dst.Shape(), axis)
	k := index.Numel()
	blocks := (inner + indexAddBlock - 1) / indexAddBlock
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			o, b := it/blocks, it%blocks
			c0, c1 := b*indexAddBlock, min((b+1)*indexAddBlock, inner)
			for j := 0; j < k; j++ {
				idx := idxAt(i64, i32, j)
				checkIndexValue("IndexAdd", idx, A)
				d := ds[(o*A+idx)*inner+c0 : (o*A+idx)*inner+c1]
				sv := ss[(o*k+j)*inner+c0 : (o*k+j)*inner+c1]
				for i, v := range sv {
					d[i] += v
				}
			}
		}
	}
	return func() {
		s.load()
		parallelFor(outer*blocks, k*min(inner, indexAddBlock), body)
		s.store()
	}
}

// fibers walks the lines of shape along axis: fiber q covers all
// positions sharing q's coordinates off the axis.
type fibers struct {
	shape []int // index shape
	axis  int
	st    [3][]int
	count int
}

func newFibers(shape []int, axis int, strides ...[]int) *fibers {
	f := &fibers{shape: shape, axis: axis, count: 1}
	copy(f.st[:], strides)
	for d, s := range shape {
		if d != axis {
			f.count *= s
		}
	}
	return f
}

func (f *fibers) offsets(q int) (o [3]int) {
	for d := len(f.shape) - 1; d >= 0; d-- {
		if d == f.axis {
			continue
		}
		s := f.shape[d]
		c := q % s
		q /= s
		for k := range o {
			if f.st[k] != nil {
				o[k] += c * f.st[k][d]
			}
		}
	}
	return o
}

// Gather implements kernels.Backend (any dtype): dst has index's shape.
func (be *Backend) Gather(dst, src *T, axis int, index *T) {
	const name = "Gather"
	needCPU(name, dst, src, index)
	a := must1(kernels.CheckGather(name, dst, src, axis, index))
	i64, i32 := indexData(name, "index", index)
	needContig(name, "dst", dst)
	needContig(name, "src", src)
	f := newFibers(index.Shape(), a, contigStrides(index.Shape()), contigStrides(src.Shape()))
	switch src.DType().Size() {
	case 1:
		be.launch(gatherPrep(f, rawData[uint8](dst), rawData[uint8](src), i64, i32, src.Shape()[a]))
	case 2:
		be.launch(gatherPrep(f, rawData[uint16](dst), rawData[uint16](src), i64, i32, src.Shape()[a]))
	case 4:
		be.launch(gatherPrep(f, rawData[uint32](dst), rawData[uint32](src), i64, i32, src.Shape()[a]))
	default:
		be.launch(gatherPrep(f, rawData[uint64](dst), rawData[uint64](src), i64, i32, src.Shape()[a]))
	}
}

func gatherPrep[E rawElem](f *fibers, d, s []E, i64 []int64, i32 []int32, size int) func() {
	L := f.shape[f.axis]
	ist, sst := f.st[0][f.axis], f.st[1][f.axis]
	body := func(lo, hi int) {
		for q := lo; q < hi; q++ {
			o := f.offsets(q)
			for i, j := 0, o[0]; i < L; i, j = i+1, j+ist {
				idx := idxAt(i64, i32, j)
				checkIndexValue("Gather", idx, size)
				d[j] = s[o[1]+idx*sst]
			}
		}
	}
	return func() { parallelFor(f.count, L, body) }
}

// ScatterAdd implements kernels.Backend (float dtypes): index has at most
// src's extent in every axis and is what is iterated.
func (be *Backend) ScatterAdd(dst *T, axis int, index, src *T) {
	const name = "ScatterAdd"
	needCPU(name, dst, src, index)
	a := must1(kernels.CheckScatterAdd(name, dst, axis, index, src))
	if wide(dst, src) {
		be.launch(scatterAddPrep[float64](dst, a, index, src))
	} else {
		be.launch(scatterAddPrep[float32](dst, a, index, src))
	}
}

func scatterAddPrep[F tensor.Float](dst *T, axis int, index, src *T) func() {
	var s stage
	ds := inout[F](&s, dst)
	ss := in[F](&s, src)
	i64, i32 := indexData("ScatterAdd", "index", index)
	f := newFibers(index.Shape(), axis, contigStrides(index.Shape()), contigStrides(src.Shape()), contigStrides(dst.Shape()))
	L := f.shape[axis]
	ist, sst, dst_ := f.st[0][axis], f.st[1][axis], f.st[2][axis]
	size := dst.Shape()[axis]
	body := func(lo, hi int) {
		for q := lo; q < hi; q++ {
			o := f.offsets(q)
			for i := 0; i < L; i++ {
				idx := idxAt(i64, i32, o[0]+i*ist)
				checkIndexValue("ScatterAdd", idx, size)
				ds[o[2]+idx*dst_] += ss[o[1]+i*sst]
			}
		}
	}
	return func() {
		s.load()
		parallelFor(f.count, L, body)
		s.store()
	}
}
