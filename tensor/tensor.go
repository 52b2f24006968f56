package tensor

import (
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Tensor is a strided view over a Storage. The zero value is not usable;
// create tensors with Zeros, Empty, Full, FromSlice and friends.
//
// Element (i0, i1, ...) lives at storage index
// Offset() + i0*Strides()[0] + i1*Strides()[1] + ...
type Tensor struct {
	shape   []int
	strides []int
	offset  int
	storage *Storage
	// dims holds shape and strides for ranks up to inlineRank, so that a
	// small tensor or view is one allocation instead of three (the eager
	// path of a tiny model creates thousands of them per second).
	dims [2 * inlineRank]int
	// views remembers t's recent Narrow views (see Narrow); nil until t
	// has been narrowed twice.
	views atomic.Pointer[viewCache]
	// narrowed is set by t's first Narrow.
	narrowed atomic.Bool
	// numel and contig are Numel and IsContiguous, computed once by seal
	// when t is made (shape and strides never change after that); an
	// unsealed tensor computes them on each call.
	sealed bool
	contig bool
	numel  int
}

// seal records t's element count and contiguity once its shape and
// strides are final, and returns t. Every constructor calls it last.
func (t *Tensor) seal() *Tensor {
	t.numel = Numel(t.shape)
	t.contig = t.computeContiguous()
	t.sealed = true
	return t
}

// inlineRank is the highest rank whose shape and strides live inside the
// Tensor itself.
const inlineRank = 4

// newTensor returns a tensor over s at offset whose shape and strides,
// of rank r, the caller fills in.
func newTensor(r int, s *Storage, offset int) *Tensor {
	t := &Tensor{offset: offset, storage: s}
	t.initDims(r)
	return t
}

// initDims points t's shape and strides at rank-r space: t's own array
// when it is large enough, else one fresh slice.
func (t *Tensor) initDims(r int) {
	if r <= inlineRank {
		if r > 0 { // a scalar's shape stays nil, as append would leave it
			t.shape = t.dims[:r:r]
		}
		t.strides = t.dims[inlineRank : inlineRank+r : inlineRank+r]
		return
	}
	buf := make([]int, 2*r)
	t.shape, t.strides = buf[:r:r], buf[r:2*r:2*r]
}

// setContiguous fills t's shape with shape and its strides with the
// row-major strides of shape.
func (t *Tensor) setContiguous(shape []int) {
	copy(t.shape, shape)
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		t.strides[i] = acc
		acc *= shape[i]
	}
}

// New wraps storage in a tensor of the given shape, offset and strides.
// It panics if the view would reach outside the storage.
func New(s *Storage, shape, strides []int, offset int) *Tensor {
	if len(shape) != len(strides) {
		panic(fmt.Sprintf("tensor: New with shape %v and strides %v of different rank", shape, strides))
	}
	// Check signs before the element count: with an odd number of
	// negative dimensions the count is negative and the bounds check
	// below would be skipped.
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: New with negative dimension in shape %v", shape))
		}
	}
	t := newTensor(len(shape), s, offset)
	copy(t.shape, shape)
	copy(t.strides, strides)
	t.seal()
	if n := t.Numel(); n > 0 {
		lo, hi := offset, offset
		for i, d := range shape {
			st := strides[i] * (d - 1)
			if st < 0 {
				lo += st
			} else {
				hi += st
			}
		}
		if lo < 0 || hi >= s.n {
			panic(fmt.Sprintf("tensor: view shape %v strides %v offset %d reaches outside storage of %d elements", shape, strides, offset, s.n))
		}
	}
	return t
}

// ContiguousStrides returns the row-major strides of shape.
func ContiguousStrides(shape []int) []int {
	st := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= shape[i]
	}
	return st
}

// Numel returns the number of elements of shape (1 for a scalar shape []).
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Shape returns the dimensions. The slice must not be modified.
func (t *Tensor) Shape() []int { return t.shape }

// Strides returns the element strides. The slice must not be modified.
func (t *Tensor) Strides() []int { return t.strides }

// Offset returns the storage index of the first element.
func (t *Tensor) Offset() int { return t.offset }

// Storage returns the underlying storage.
func (t *Tensor) Storage() *Storage { return t.storage }

// DType returns the element type.
func (t *Tensor) DType() DType { return t.storage.dtype }

// Device returns where the tensor lives.
func (t *Tensor) Device() Device { return t.storage.device }

// Rank returns the number of dimensions.
func (t *Tensor) Rank() int { return len(t.shape) }

// Dim returns dimension i; negative i counts from the end.
func (t *Tensor) Dim(i int) int { return t.shape[t.Axis(i)] }

// Axis normalises a possibly negative axis, panicking when out of range.
func (t *Tensor) Axis(i int) int {
	r := len(t.shape)
	a := i
	if a < 0 {
		a += r
	}
	if a < 0 || a >= r {
		panic(fmt.Sprintf("tensor: axis %d out of range for shape %v", i, t.shape))
	}
	return a
}

// Numel returns the number of elements.
func (t *Tensor) Numel() int {
	if t.sealed {
		return t.numel
	}
	return Numel(t.shape)
}

// Nbytes returns the number of bytes the elements occupy when contiguous.
func (t *Tensor) Nbytes() int { return t.Numel() * t.DType().Size() }

// IsContiguous reports whether the elements are laid out row-major without
// gaps (dimensions of size 1 may have any stride). A tensor without
// elements is contiguous whatever its strides, as in PyTorch.
func (t *Tensor) IsContiguous() bool {
	if t.sealed {
		return t.contig
	}
	return t.computeContiguous()
}

// computeContiguous is IsContiguous from the shape and strides.
func (t *Tensor) computeContiguous() bool {
	if Numel(t.shape) == 0 {
		return true
	}
	acc := 1
	for i := len(t.shape) - 1; i >= 0; i-- {
		if t.shape[i] != 1 && t.strides[i] != acc {
			return false
		}
		acc *= t.shape[i]
	}
	return true
}

// SameShape reports whether a and b have identical shapes.
func SameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ShapeString formats a shape as [2 3 4].
func ShapeString(s []int) string { return fmt.Sprint(s) }

// String gives a short description (dtype, shape, device), plus values for
// small CPU tensors.
func (t *Tensor) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Tensor(%v %v %v", t.DType(), t.shape, t.Device())
	if t.Device().IsCPU() && t.Numel() <= 16 {
		fmt.Fprintf(&b, " %v", t.Float64s())
	}
	b.WriteString(")")
	return b.String()
}

// Data views a contiguous CPU tensor's elements as []T (uint16 for BF16 and
// F16). The slice aliases the storage. It panics on a dtype mismatch or a
// non-contiguous tensor (call Contiguous first).
func Data[T Elem](t *Tensor) []T {
	// The common case, checked in a few instructions: a sealed,
	// contiguous, non-empty CPU tensor of T inside its storage (the
	// kernels of a tiny model's eager step ask for their operands'
	// elements a hundred times per epoch). The slice's capacity is its
	// length.
	if s := t.storage; t.sealed && t.contig && t.numel > 0 && s.device.Kind == KindCPU && dtypeMatches[T](s.dtype) && uint(t.offset+t.numel) <= uint(s.n) {
		var z T
		p := unsafe.Add(unsafe.Pointer(unsafe.SliceData(s.host)), uintptr(t.offset)*unsafe.Sizeof(z))
		return unsafe.Slice((*T)(p), t.numel)
	}
	if !t.IsContiguous() {
		panic(fmt.Sprintf("tensor: Data of non-contiguous tensor shape %v strides %v (call Contiguous first)", t.shape, t.strides))
	}
	all := StorageData[T](t.storage)
	if t.Numel() == 0 {
		// The offset of an empty view may lie at or past the end of
		// its storage (a zero-length Narrow at the end).
		return all[:0:0]
	}
	return all[t.offset : t.offset+t.Numel() : t.offset+t.Numel()]
}

// F64 is Data[float64].
func (t *Tensor) F64() []float64 { return Data[float64](t) }

// F32 is Data[float32].
func (t *Tensor) F32() []float32 { return Data[float32](t) }

// U16 is Data[uint16], the raw bits of a BF16 or F16 tensor.
func (t *Tensor) U16() []uint16 { return Data[uint16](t) }

// I32 is Data[int32].
func (t *Tensor) I32() []int32 { return Data[int32](t) }

// I64 is Data[int64].
func (t *Tensor) I64() []int64 { return Data[int64](t) }

// Bools is Data[bool].
func (t *Tensor) Bools() []bool { return Data[bool](t) }

// index returns the storage index of multi-index idx.
func (t *Tensor) index(idx []int) int {
	if len(idx) != len(t.shape) {
		panic(fmt.Sprintf("tensor: index %v has rank %d, tensor shape %v", idx, len(idx), t.shape))
	}
	o := t.offset
	for i, v := range idx {
		if v < 0 || v >= t.shape[i] {
			panic(fmt.Sprintf("tensor: index %v out of range for shape %v", idx, t.shape))
		}
		o += v * t.strides[i]
	}
	return o
}

// At returns element idx converted to float64 (CPU only).
func (t *Tensor) At(idx ...int) float64 { return t.storage.get(t.index(idx)) }

// Set stores v (converted to the dtype) at idx (CPU only).
func (t *Tensor) Set(v float64, idx ...int) { t.storage.set(t.index(idx), v) }

// Item returns the single element of a one-element tensor as float64.
func (t *Tensor) Item() float64 {
	if t.Numel() != 1 {
		panic(fmt.Sprintf("tensor: Item of tensor with shape %v (want one element)", t.shape))
	}
	return t.storage.get(t.offset)
}

// Float64s returns the elements in row-major order converted to float64
// (a copy; CPU only).
func (t *Tensor) Float64s() []float64 {
	out := make([]float64, 0, t.Numel())
	t.each(func(i int) { out = append(out, t.storage.get(i)) })
	return out
}

// each calls f with the storage index of every element in row-major order.
func (t *Tensor) each(f func(int)) {
	n := t.Numel()
	if n == 0 {
		return
	}
	if t.IsContiguous() {
		for i := 0; i < n; i++ {
			f(t.offset + i)
		}
		return
	}
	r := len(t.shape)
	idx := make([]int, r)
	o := t.offset
	for {
		f(o)
		d := r - 1
		for ; d >= 0; d-- {
			idx[d]++
			o += t.strides[d]
			if idx[d] < t.shape[d] {
				break
			}
			o -= t.strides[d] * t.shape[d]
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// StorageIndices returns the storage index of every element in row-major
// order; kernels use it for strided gathers.
func (t *Tensor) StorageIndices() []int {
	out := make([]int, 0, t.Numel())
	t.each(func(i int) { out = append(out, i) })
	return out
}

func (s *Storage) get(i int) float64 {
	s.mustHost("element access")
	switch s.dtype {
	case F64:
		return StorageData[float64](s)[i]
	case F32:
		return float64(StorageData[float32](s)[i])
	case BF16:
		return float64(BF16ToF32(StorageData[uint16](s)[i]))
	case F16:
		return float64(F16ToF32(StorageData[uint16](s)[i]))
	case I32:
		return float64(StorageData[int32](s)[i])
	case I64:
		return float64(StorageData[int64](s)[i])
	case Bool:
		if StorageData[bool](s)[i] {
			return 1
		}
		return 0
	}
	panic("tensor: element access on invalid dtype")
}

func (s *Storage) set(i int, v float64) {
	s.mustHost("element access")
	switch s.dtype {
	case F64:
		StorageData[float64](s)[i] = v
	case F32:
		StorageData[float32](s)[i] = float32(v)
	case BF16:
		StorageData[uint16](s)[i] = F32ToBF16(float32(v))
	case F16:
		StorageData[uint16](s)[i] = F32ToF16(float32(v))
	case I32:
		StorageData[int32](s)[i] = int32(v)
	case I64:
		StorageData[int64](s)[i] = int64(v)
	case Bool:
		StorageData[bool](s)[i] = v != 0
	default:
		panic("tensor: element access on invalid dtype")
	}
}
