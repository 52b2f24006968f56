package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"unsafe"
)

// Empty allocates a contiguous CPU tensor. CPU storage is zeroed, so Empty
// and Zeros only differ in intent: Empty says the contents will be
// overwritten. A shape with a negative dimension, an overflowing size or
// more bytes than HostLimit panics with a *SizeError (CheckShape tells
// beforehand).
func Empty(d DType, shape ...int) *Tensor {
	n, err := CheckShape(d, shape...)
	if err != nil {
		panic(err)
	}
	var t *Tensor
	switch nb := n * d.Size(); {
	case nb > 0 && nb <= tinyBytes:
		// Small tensors (a tiny model's activations, gradients and
		// losses) are one allocation: the tensor, its Storage and the
		// elements.
		ts := &tinyTensorStorage{}
		t = ts.t.withElements(&ts.s, d, n, ts.buf[:])
	case nb > 0 && nb <= smallBytes:
		ts := &smallTensorStorage{}
		t = ts.t.withElements(&ts.s, d, n, ts.buf[:])
	default:
		// The tensor and its Storage header share one allocation; the
		// elements are a second one (see NewStorage).
		ts := &tensorStorage{}
		ts.s.initHost(d, n)
		t = &ts.t
		t.storage = &ts.s
	}
	t.initDims(len(shape))
	t.setContiguous(shape)
	return t.seal()
}

// tensorStorage is a tensor allocated together with the Storage it owns.
type tensorStorage struct {
	t Tensor
	s Storage
}

// tinyBytes and smallBytes are the element buffers Empty allocates
// together with their tensor: a scalar or a few values, and up to 16
// float32 values. Each tier is one allocation of the size class just
// above its object (tinyTensorStorage 224 bytes, smallTensorStorage 280
// in the 288-byte class): the elements of a tensor this small gain
// nothing from the 64-byte alignment of larger storage, and every byte
// of a tensor allocated per op in a tiny model's eager step is a byte
// the allocator touches and the garbage collector recycles.
const (
	tinyBytes  = 8
	smallBytes = 64
)

// tinyTensorStorage and smallTensorStorage are a tensor allocated
// together with its Storage and that storage's elements (uint64 words,
// so that they are aligned for every dtype).
type tinyTensorStorage struct {
	t   Tensor
	s   Storage
	buf [tinyBytes / 8]uint64
}

type smallTensorStorage struct {
	t   Tensor
	s   Storage
	buf [smallBytes / 8]uint64
}

// withElements makes s CPU storage for n elements of dtype d in words (of
// t's own allocation) and t's storage, and returns t.
func (t *Tensor) withElements(s *Storage, d DType, n int, words []uint64) *Tensor {
	s.initHostIn(d, n, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), 8*len(words)))
	t.storage = s
	return t
}

// EmptyOn allocates a contiguous tensor on device dev; a shape that cannot
// be allocated is a *SizeError.
func EmptyOn(dev Device, d DType, shape ...int) (*Tensor, error) {
	if dev.IsCPU() {
		if _, err := CheckShape(d, shape...); err != nil {
			return nil, err
		}
		return Empty(d, shape...), nil
	}
	n, err := checkedNumel(d, shape)
	if err != nil {
		return nil, err
	}
	s, err := NewDeviceStorage(d, n, dev)
	if err != nil {
		return nil, err
	}
	t := newTensor(len(shape), s, 0)
	t.setContiguous(shape)
	return t.seal(), nil
}

// EmptyLike allocates a contiguous tensor with t's dtype, shape and device.
func EmptyLike(t *Tensor) *Tensor {
	if t.Device().IsCPU() {
		return Empty(t.DType(), t.shape...)
	}
	out, err := EmptyOn(t.Device(), t.DType(), t.shape...)
	if err != nil {
		panic(err)
	}
	return out
}

// Zeros allocates a zero-filled CPU tensor.
func Zeros(d DType, shape ...int) *Tensor { return Empty(d, shape...) }

// Ones allocates a CPU tensor filled with one.
func Ones(d DType, shape ...int) *Tensor { return Full(d, 1, shape...) }

// Full allocates a CPU tensor filled with v.
func Full(d DType, v float64, shape ...int) *Tensor {
	t := Empty(d, shape...)
	t.Fill(v)
	return t
}

// Scalar allocates a rank-0 CPU tensor holding v.
func Scalar(d DType, v float64) *Tensor { return Full(d, v) }

// Fill sets every element to v (CPU only; views are filled in place).
func (t *Tensor) Fill(v float64) {
	if t.IsContiguous() {
		switch t.DType() {
		case F64:
			s := t.F64()
			for i := range s {
				s[i] = v
			}
			return
		case F32:
			s := t.F32()
			f := float32(v)
			for i := range s {
				s[i] = f
			}
			return
		}
	}
	t.each(func(i int) { t.storage.set(i, v) })
}

// FromSlice copies data into a new CPU tensor of the given shape (shape
// [len(data)] when omitted). The dtype follows T: float64→F64,
// float32→F32, int32→I32, int64→I64, bool→Bool; use FromFloat64s for
// BF16/F16.
func FromSlice[T float64 | float32 | int32 | int64 | bool](data []T, shape ...int) *Tensor {
	if len(shape) == 0 {
		shape = []int{len(data)}
	}
	if Numel(shape) != len(data) {
		panic(fmt.Sprintf("tensor: FromSlice of %d elements into shape %v", len(data), shape))
	}
	var z T
	var d DType
	switch any(z).(type) {
	case float64:
		d = F64
	case float32:
		d = F32
	case int32:
		d = I32
	case int64:
		d = I64
	case bool:
		d = Bool
	}
	t := Empty(d, shape...)
	copy(Data[T](t), data)
	return t
}

// FromFloat64s builds a CPU tensor of any dtype from float64 values.
func FromFloat64s(d DType, data []float64, shape ...int) *Tensor {
	if len(shape) == 0 {
		shape = []int{len(data)}
	}
	if Numel(shape) != len(data) {
		panic(fmt.Sprintf("tensor: FromFloat64s of %d elements into shape %v", len(data), shape))
	}
	t := Empty(d, shape...)
	// One typed loop per dtype (the conversions of Storage.set, without
	// its per-element dtype switch).
	switch d {
	case F64:
		copy(Data[float64](t), data)
	case F32:
		dst := Data[float32](t)
		for i, v := range data {
			dst[i] = float32(v)
		}
	case BF16:
		dst := StorageData[uint16](t.storage)
		for i, v := range data {
			dst[i] = F32ToBF16(float32(v))
		}
	case F16:
		dst := StorageData[uint16](t.storage)
		for i, v := range data {
			dst[i] = F32ToF16(float32(v))
		}
	default:
		for i, v := range data {
			t.storage.set(i, v)
		}
	}
	return t
}

// Arange returns [start, start+step, ...) up to (not including) stop.
func Arange(d DType, start, stop, step float64) *Tensor {
	if step == 0 || !((stop-start)/step >= 0) || math.IsInf((stop-start)/step, 0) {
		panic(fmt.Sprintf("tensor: Arange(%v, %v, %v): want a non-zero step pointing from start to stop and finite bounds", start, stop, step))
	}
	n := int(math.Ceil((stop - start) / step))
	t := Empty(d, n)
	for i := 0; i < n; i++ {
		t.storage.set(i, start+float64(i)*step)
	}
	return t
}

// NewRNG returns a deterministic random source for a seed. All randomness
// in Esper-Go takes such an explicit source.
func NewRNG(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Uniform returns a CPU tensor with elements drawn uniformly from [lo, hi).
func Uniform(rng *rand.Rand, d DType, lo, hi float64, shape ...int) *Tensor {
	t := Empty(d, shape...)
	n := t.Numel()
	for i := 0; i < n; i++ {
		t.storage.set(i, lo+(hi-lo)*rng.Float64())
	}
	return t
}

// Normal returns a CPU tensor with elements drawn from N(mean, std²).
func Normal(rng *rand.Rand, d DType, mean, std float64, shape ...int) *Tensor {
	t := Empty(d, shape...)
	n := t.Numel()
	for i := 0; i < n; i++ {
		t.storage.set(i, mean+std*rng.NormFloat64())
	}
	return t
}

// RandInt returns an I64 CPU tensor with elements drawn uniformly from
// [0, n).
func RandInt(rng *rand.Rand, n int, shape ...int) *Tensor {
	if n <= 0 {
		panic(fmt.Sprintf("tensor: RandInt with bound %d (want n > 0)", n))
	}
	t := Empty(I64, shape...)
	s := t.I64()
	for i := range s {
		s[i] = int64(rng.IntN(n))
	}
	return t
}
