package cpu

import (
	"unsafe"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Eager fast paths. Outside a capture, a small op over contiguous
// operands in its compute dtype runs at once, on the calling goroutine,
// without preparing a launch: no geometry, staging or closures are built,
// so it allocates nothing. A tiny model's step (PERF.md W1) is made of
// such ops, and their preparation used to cost more than their arithmetic.
//
// Each fast path calls the same row functions as the prepared launch
// would, over the same elements in the same order, so the results are
// bitwise those of the general path; it only takes cases where that
// launch would have run inline as a single item (at most itemLen
// elements), and reports false for everything else. Callers validate
// their arguments first, so error messages do not change either.

// eager reports whether ops may take their fast paths: no capture is
// recording launches.
func (be *Backend) eager() bool { return be.rec == nil }

// contigSame reports whether t is contiguous with exactly shape.
func contigSame(t *T, shape []int) bool {
	return t.IsContiguous() && tensor.SameShape(t.Shape(), shape)
}

// binaryEager is Binary's fast path: a, b and dst contiguous with one
// shape, a and b of one dtype (F32 or F64, or I64 for comparisons), dst
// of that dtype too (Bool for comparisons).
func binaryEager(op kernels.BinaryOp, dst, a, b *T) bool {
	shape := dst.Shape()
	n := dst.Numel()
	if n > itemLen || !contigSame(a, shape) || !contigSame(b, shape) || a.DType() != b.DType() {
		return false
	}
	dt := a.DType()
	if op.IsComparison() {
		d := tensor.Data[bool](dst)
		switch dt {
		case tensor.F32:
			compareRow(op, d, a.F32(), 0, 1, b.F32(), 0, 1)
		case tensor.F64:
			compareRow(op, d, a.F64(), 0, 1, b.F64(), 0, 1)
		case tensor.I64:
			// The general path stages integers to float64 first;
			// compare the same float64 values.
			const most = 64
			if n > most {
				return false
			}
			var fa, fb [most]float64
			for i, v := range a.I64() {
				fa[i] = float64(v)
			}
			for i, v := range b.I64() {
				fb[i] = float64(v)
			}
			compareRow(op, d, fa[:n], 0, 1, fb[:n], 0, 1)
		default:
			return false
		}
		return true
	}
	if dst.DType() != dt {
		return false
	}
	switch dt {
	case tensor.F32:
		binaryRow(op, dst.F32(), a.F32(), 0, 1, b.F32(), 0, 1)
	case tensor.F64:
		binaryRow(op, dst.F64(), a.F64(), 0, 1, b.F64(), 0, 1)
	default:
		return false
	}
	return true
}

// fillEager is Fill's fast path for a contiguous F32 or F64 dst. The
// value is rounded as the general path's one-element staging does.
func fillEager(dst *T, v float64) bool {
	if dst.Numel() > itemLen || !dst.IsContiguous() {
		return false
	}
	switch dst.DType() {
	case tensor.F32:
		d, x := dst.F32(), float32(v)
		for i := range d {
			d[i] = x
		}
	case tensor.F64:
		d := dst.F64()
		for i := range d {
			d[i] = v
		}
	default:
		return false
	}
	return true
}

// copyEager is Copy's fast path: both contiguous, and either one dtype
// (a byte copy) or Bool into F32.
func copyEager(dst, src *T) bool {
	n := dst.Numel()
	if n > itemLen || !dst.IsContiguous() || !src.IsContiguous() {
		return false
	}
	switch {
	case dst.DType() == src.DType():
		sz := dst.DType().Size()
		copy(contigBytes(dst, n*sz), contigBytes(src, n*sz))
	case dst.DType() == tensor.F32 && src.DType() == tensor.Bool:
		d := dst.F32()
		for i, v := range src.Bools() {
			if v {
				d[i] = 1
			} else {
				d[i] = 0
			}
		}
	default:
		return false
	}
	return true
}

// contigBytes is the nb bytes of contiguous t's elements.
func contigBytes(t *T, nb int) []byte {
	if nb == 0 {
		return nil
	}
	b := t.Storage().Bytes()
	off := t.Offset() * t.DType().Size()
	return unsafe.Slice(&b[off], nb)
}

// reduceEager is Reduce's fast path for a sum or mean of contiguous F32
// x into contiguous F32 dst, over every axis (at most chunkLen elements)
// or over the rows of a small matrix (reducePrep's column sums).
func reduceEager(op kernels.ReduceOp, dst, x *T, red []bool) bool {
	if (op != kernels.Sum && op != kernels.Mean) || x.DType() != tensor.F32 || dst.DType() != tensor.F32 ||
		!x.IsContiguous() || !dst.IsContiguous() {
		return false
	}
	n := x.Numel()
	if n == 0 {
		return false
	}
	xs, ds := x.F32(), dst.F32()
	if sh := x.Shape(); len(sh) == 2 && red[0] && !red[1] && sh[1] <= colSumMax && sh[0] <= chunkLen {
		m, c := sh[0], sh[1]
		var acc [colSumMax]float64
		a := acc[:c]
		for i := 0; i < m; i++ {
			for j, v := range xs[i*c : (i+1)*c] {
				a[j] += float64(v)
			}
		}
		for j, v := range a {
			if op == kernels.Mean {
				v /= float64(m)
			}
			ds[j] = float32(v)
		}
		return true
	}
	if len(ds) != 1 || n > chunkLen {
		return false
	}
	// Every axis reduced: the walk is one contiguous run of n elements,
	// one chunk, folded and combined as reducePrep does.
	rShape, rSt := [1]int{n}, [1]int{1}
	g := reduceGeom{rShape: rShape[:], rSt: rSt[:], outs: 1, r: n}
	part, _ := reduceChunk(op, xs, &g, 0, 0, n)
	var v float64
	v += part
	if op == kernels.Mean {
		v /= float64(n)
	}
	ds[0] = float32(v)
	return true
}

// argMaxEager is ArgMax's fast path for contiguous F32 x small enough
// that the general launch runs inline.
func argMaxEager(dst, x *T, axis int) bool {
	if x.DType() != tensor.F32 || !x.IsContiguous() {
		return false
	}
	outer, A, inner := kernels.Split3(x.Shape(), axis)
	if outer*inner != 1 && outer*inner*A >= minWork {
		return false
	}
	xs, d := x.F32(), tensor.Data[int64](dst)
	for it := range outer * inner {
		o, i := it, 0
		if inner != 1 {
			o, i = it/inner, it%inner
		}
		d[it] = int64(argMaxLine(xs, o*A*inner+i, A, inner))
	}
	return true
}
