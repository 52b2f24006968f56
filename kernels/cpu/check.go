package cpu

import (
	"fmt"
	"math"

	"github.com/esper-go/esper/tensor"
)

// Validation helpers. Every method checks its arguments before it prepares
// a launch; a mismatch is a programming error and panics with a message
// naming the op and every shape involved. The shape and dtype rules every
// backend shares are package kernels' checks (geometry.go and the family
// files), which the methods call through must; the helpers here check
// what is the CPU backend's own (host tensors, contiguity, its dtypes).

func fail(op string, format string, args ...any) {
	panic("cpu: " + op + ": " + fmt.Sprintf(format, args...))
}

// needCPU panics unless every non-nil tensor lives on the host.
func needCPU(op string, ts ...*T) {
	for _, t := range ts {
		if t != nil && !t.Device().IsCPU() {
			fail(op, "tensor of shape %v is on %v, the CPU backend needs host tensors", t.Shape(), t.Device())
		}
	}
}

// needContig panics unless t is contiguous.
func needContig(op, name string, t *T) {
	if !t.IsContiguous() {
		fail(op, "%s of shape %v strides %v must be contiguous", name, t.Shape(), t.Strides())
	}
}

// needShape panics unless t has exactly the shape want.
func needShape(op, name string, t *T, want []int) {
	if !tensor.SameShape(t.Shape(), want) {
		fail(op, "%s has shape %v, want %v", name, t.Shape(), append([]int(nil), want...)) // a copy: want stays off the heap
	}
}

// needFloat panics unless t has a floating-point dtype.
func needFloat(op, name string, t *T) {
	if !t.DType().IsFloat() {
		fail(op, "%s (shape %v) has dtype %v, want a float dtype", name, t.Shape(), t.DType())
	}
}

// needIndex panics unless t holds I64 or I32 indices.
func needIndex(op, name string, t *T) {
	if d := t.DType(); d != tensor.I64 && d != tensor.I32 {
		fail(op, "%s (shape %v) has dtype %v, want i64 or i32", name, t.Shape(), d)
	}
}

// wide reports whether a kernel over these tensors computes in float64:
// any F64 or integer tensor makes it so (integers go through float64,
// which is exact below 2^53).
func wide(ts ...*T) bool {
	for _, t := range ts {
		if t == nil {
			continue
		}
		if d := t.DType(); d == tensor.F64 || d.IsInt() {
			return true
		}
	}
	return false
}

// must panics with the error of a check of package kernels (the rules
// every backend shares), naming the backend as fail does.
func must(err error) {
	if err != nil {
		panic("cpu: " + err.Error())
	}
}

// must1 is must for a check that also returns a value.
func must1[V any](v V, err error) V {
	must(err)
	return v
}

// scalarReader returns a function reading the single element of t at
// launch time (t read through its storage, any dtype).
func scalarReader(op, name string, t *T) func() float64 {
	if t.Numel() != 1 {
		fail(op, "%s has shape %v, want one element", name, t.Shape())
	}
	off := t.Offset()
	s := t.Storage()
	switch t.DType() {
	case tensor.F64:
		d := tensor.StorageData[float64](s)
		return func() float64 { return d[off] }
	case tensor.F32:
		d := tensor.StorageData[float32](s)
		return func() float64 { return float64(d[off]) }
	case tensor.BF16:
		d := tensor.StorageData[uint16](s)
		return func() float64 { return float64(tensor.BF16ToF32(d[off])) }
	case tensor.F16:
		d := tensor.StorageData[uint16](s)
		return func() float64 { return float64(tensor.F16ToF32(d[off])) }
	case tensor.I32:
		d := tensor.StorageData[int32](s)
		return func() float64 { return float64(d[off]) }
	case tensor.I64:
		d := tensor.StorageData[int64](s)
		return func() float64 { return float64(d[off]) }
	case tensor.Bool:
		d := tensor.StorageData[bool](s)
		return func() float64 {
			if d[off] {
				return 1
			}
			return 0
		}
	}
	fail(op, "%s has invalid dtype", name)
	return nil
}

// scalarWriter returns a function storing v into the single element of t.
func scalarWriter(op, name string, t *T) func(v float64) {
	if t.Numel() != 1 {
		fail(op, "%s has shape %v, want one element", name, t.Shape())
	}
	off := t.Offset()
	s := t.Storage()
	switch t.DType() {
	case tensor.F64:
		d := tensor.StorageData[float64](s)
		return func(v float64) { d[off] = v }
	case tensor.F32:
		d := tensor.StorageData[float32](s)
		return func(v float64) { d[off] = float32(v) }
	case tensor.BF16:
		d := tensor.StorageData[uint16](s)
		return func(v float64) { d[off] = tensor.F32ToBF16(float32(v)) }
	case tensor.F16:
		d := tensor.StorageData[uint16](s)
		return func(v float64) { d[off] = tensor.F32ToF16(float32(v)) }
	case tensor.I32:
		d := tensor.StorageData[int32](s)
		return func(v float64) { d[off] = int32(v) }
	case tensor.I64:
		d := tensor.StorageData[int64](s)
		return func(v float64) { d[off] = int64(v) }
	case tensor.Bool:
		d := tensor.StorageData[bool](s)
		return func(v float64) { d[off] = v != 0 }
	}
	fail(op, "%s has invalid dtype", name)
	return nil
}

// scalarAt reads element i of t's storage from its offset (t's single
// element, or element i of a contiguous t) as scalarReader's functions
// do, without preparing one.
func scalarAt(t *T, i int) float64 {
	off := t.Offset() + i
	s := t.Storage()
	switch t.DType() {
	case tensor.F64:
		return tensor.StorageData[float64](s)[off]
	case tensor.F32:
		return float64(tensor.StorageData[float32](s)[off])
	case tensor.BF16:
		return float64(tensor.BF16ToF32(tensor.StorageData[uint16](s)[off]))
	case tensor.F16:
		return float64(tensor.F16ToF32(tensor.StorageData[uint16](s)[off]))
	case tensor.I32:
		return float64(tensor.StorageData[int32](s)[off])
	case tensor.I64:
		return float64(tensor.StorageData[int64](s)[off])
	case tensor.Bool:
		if tensor.StorageData[bool](s)[off] {
			return 1
		}
		return 0
	}
	fail("scalar", "tensor of shape %v has an invalid dtype", t.Shape())
	return 0
}

// scalarSet stores v into t's single element as scalarWriter's
// functions do.
func scalarSet(t *T, v float64) {
	off := t.Offset()
	s := t.Storage()
	switch t.DType() {
	case tensor.F64:
		tensor.StorageData[float64](s)[off] = v
	case tensor.F32:
		tensor.StorageData[float32](s)[off] = float32(v)
	case tensor.BF16:
		tensor.StorageData[uint16](s)[off] = tensor.F32ToBF16(float32(v))
	case tensor.F16:
		tensor.StorageData[uint16](s)[off] = tensor.F32ToF16(float32(v))
	case tensor.I32:
		tensor.StorageData[int32](s)[off] = int32(v)
	case tensor.I64:
		tensor.StorageData[int64](s)[off] = int64(v)
	case tensor.Bool:
		tensor.StorageData[bool](s)[off] = v != 0
	default:
		fail("scalar", "tensor of shape %v has an invalid dtype", t.Shape())
	}
}

// indexReader returns the I64 or I32 data of a contiguous index tensor;
// exactly one of the two slices is non-nil.
func indexData(op, name string, t *T) ([]int64, []int32) {
	needIndex(op, name, t)
	needContig(op, name, t)
	if t.DType() == tensor.I64 {
		return tensor.Data[int64](t), nil
	}
	return nil, tensor.Data[int32](t)
}

// idxAt reads index i from whichever slice is set.
func idxAt(i64 []int64, i32 []int32, i int) int {
	if i64 != nil {
		return int(i64[i])
	}
	return int(i32[i])
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
