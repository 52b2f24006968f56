package tensor

import "math"

// F32ToBF16 rounds a float32 to bfloat16 bits with round-to-nearest-even.
// NaN stays NaN (quiet), infinities stay infinite.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign, force a quiet payload
		return uint16(b>>16) | 0x40
	}
	// Add 0x7fff plus the lowest kept bit, so ties go to even.
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToF32 widens bfloat16 bits to float32 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// The half-precision conversions are written here rather than imported,
// so that the ground package costs no third-party module; they are
// checked bit for bit against github.com/x448/float16 (the project's
// float16 reference, a test dependency of tensor and leyline): every one
// of the 2^16 halves, and every float32 in an exhaustive sweep
// (TestF16Exhaustive).

// F32ToF16 rounds a float32 to IEEE half-precision bits (nearest-even):
// values past the largest half (65504, after rounding) become ±Inf,
// values below half the smallest subnormal (2^-25, ties to even) ±0. A
// NaN stays a NaN with its sign and the top bits of its payload, and
// quiet.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(man>>13) // quiet NaN
	}
	e := exp - 127 + 15 // the half's biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// A subnormal half (or zero): the significand with its implicit
		// bit, shifted right by 14−e with nearest-even rounding; a carry
		// into bit 10 gives the smallest normal, as it should.
		shift := uint(14 - e)
		if shift > 24 || exp == 0 {
			return sign // below 2^-25, or a float32 subnormal (< 2^-126)
		}
		m := man | 0x800000
		r := m >> shift
		rem, half := m&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || rem == half && r&1 == 1 {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && r&1 == 1 {
		r++ // a carry out of the significand bumps the exponent (to Inf at the top)
	}
	return sign | uint16(r)
}

// F16ToF32 widens half-precision bits to float32 exactly (subnormals
// normalised, Inf kept, a NaN quietened with its sign and payload).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f && man == 0:
		return math.Float32frombits(sign | 0x7f800000)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7fc00000 | man<<13) // quiet NaN
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: shift the significand up to its implicit bit.
	e := uint32(127 - 15 + 1)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// Cast returns a contiguous copy of t converted to dtype (t itself when the
// dtype already matches and t is contiguous). Float to integer conversion
// truncates toward zero; to Bool maps non-zero to true. CPU only.
func (t *Tensor) Cast(d DType) *Tensor {
	if d == t.DType() && t.IsContiguous() {
		return t
	}
	out := Empty(d, t.shape...)
	CopyInto(out, t)
	return out
}

// Contiguous returns t when it is contiguous, else a packed copy.
func (t *Tensor) Contiguous() *Tensor {
	if t.IsContiguous() {
		return t
	}
	return t.Clone()
}

// Clone returns a contiguous copy with its own storage.
func (t *Tensor) Clone() *Tensor {
	out := Empty(t.DType(), t.shape...)
	CopyInto(out, t)
	return out
}

// CopyInto copies src into dst element by element in row-major order,
// converting dtypes. Shapes must have the same number of elements; both
// may be strided views. CPU only; kernels provide the fast device copy.
func CopyInto(dst, src *Tensor) {
	if dst.Numel() != src.Numel() {
		panic("tensor: CopyInto from shape " + ShapeString(src.shape) + " into shape " + ShapeString(dst.shape))
	}
	if dst.Numel() == 0 {
		return
	}
	if dst.DType() == src.DType() && dst.IsContiguous() && src.IsContiguous() {
		sz := dst.DType().Size()
		copy(dst.storage.Bytes()[dst.offset*sz:(dst.offset+dst.Numel())*sz], src.storage.Bytes()[src.offset*sz:(src.offset+src.Numel())*sz])
		return
	}
	if dst.DType() == F32 && src.DType() == BF16 && dst.IsContiguous() && src.IsContiguous() {
		d, s := dst.F32(), src.U16()
		for i, v := range s {
			d[i] = BF16ToF32(v)
		}
		return
	}
	if dst.DType() == BF16 && src.DType() == F32 && dst.IsContiguous() && src.IsContiguous() {
		d, s := dst.U16(), src.F32()
		for i, v := range s {
			d[i] = F32ToBF16(v)
		}
		return
	}
	if dst.DType() == F32 && src.DType() == F64 && dst.IsContiguous() && src.IsContiguous() {
		d, s := dst.F32(), src.F64()
		for i, v := range s {
			d[i] = float32(v)
		}
		return
	}
	if dst.DType() == F64 && src.DType() == F32 && dst.IsContiguous() && src.IsContiguous() {
		d, s := dst.F64(), src.F32()
		for i, v := range s {
			d[i] = float64(v)
		}
		return
	}
	dst.storage.mustHost("CopyInto")
	src.storage.mustHost("CopyInto")
	// Same dtype, or integer to integer: copy exactly. Going through
	// float64 would lose int64 values beyond 2^53.
	if dst.DType() == src.DType() {
		switch dst.DType() {
		case F64:
			copySame[float64](dst, src)
		case F32:
			copySame[float32](dst, src)
		case BF16, F16:
			copySame[uint16](dst, src)
		case I32:
			copySame[int32](dst, src)
		case I64:
			copySame[int64](dst, src)
		case Bool:
			copySame[bool](dst, src)
		}
		return
	}
	di := dst.StorageIndices()
	k := 0
	switch {
	case dst.DType() == I64 && src.DType() == I32:
		d, s := StorageData[int64](dst.storage), StorageData[int32](src.storage)
		src.each(func(i int) { d[di[k]] = int64(s[i]); k++ })
	case dst.DType() == I32 && src.DType() == I64:
		d, s := StorageData[int32](dst.storage), StorageData[int64](src.storage)
		src.each(func(i int) { d[di[k]] = int32(s[i]); k++ }) // wraps, like a C cast
	default:
		src.each(func(i int) { dst.storage.set(di[k], src.storage.get(i)); k++ })
	}
}

// copySame copies src into dst (same dtype, any strides) in row-major
// order without a detour through float64.
func copySame[T Elem](dst, src *Tensor) {
	d, s := StorageData[T](dst.storage), StorageData[T](src.storage)
	di := dst.StorageIndices()
	k := 0
	src.each(func(i int) {
		d[di[k]] = s[i]
		k++
	})
}
