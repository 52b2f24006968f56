package tensor

import (
	"math"
)

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

// F32ToF16 rounds a float32 to IEEE 754 binary16 bits, to nearest with
// ties to even: magnitudes past the largest half (65504) become
// infinite, those under half the smallest subnormal (2^-25) zero. NaN
// stays NaN, quiet, with its sign and the top of its payload.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man == 0 {
			return sign | 0x7c00 // ±Inf
		}
		return sign | 0x7e00 | uint16(man>>13) // quiet NaN
	}
	// e is the half-precision biased exponent (float32 bias 127, half 15).
	e := exp - 127 + 15
	switch {
	case e >= 0x1f:
		return sign | 0x7c00 // too large: ±Inf
	case e <= 0:
		// A half subnormal (or zero): the significand with its implicit
		// bit, in units of 2^-24, is m >> (14 - e); rounding may carry
		// into the smallest normal, which is the right result.
		if e < -10 {
			return sign // under 2^-25: rounds to ±0
		}
		return sign | uint16(roundShiftEven(man|0x800000, uint(14-e)))
	}
	// Normal: keep 10 of the 23 mantissa bits; a carry out of the
	// mantissa steps the exponent, up to ±Inf, as it should.
	return sign | uint16(roundShiftEven(uint32(e)<<23|man, 13))
}

// roundShiftEven returns v >> s rounded to nearest, ties to even.
func roundShiftEven(v uint32, s uint) uint32 {
	q, rem, half := v>>s, v&(1<<s-1), uint32(1)<<(s-1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	return q
}

// F16ToF32 widens IEEE 754 binary16 bits to float32 exactly. NaN stays
// NaN with its sign and payload, made quiet.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f && man == 0:
		return math.Float32frombits(sign | 0x7f800000) // ±Inf
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7fc00000 | man<<13) // quiet NaN
	case exp == 0 && man == 0:
		return math.Float32frombits(sign) // ±0
	case exp == 0:
		// Subnormal, man·2^-24: normalise so that bit 10 is the implicit
		// one, lowering the exponent of the smallest normal (2^-14).
		e := uint32(127 - 14)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
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
