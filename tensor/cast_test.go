package tensor_test

import (
	"math"
	"runtime"
	"sync"
	"testing"

	"github.com/x448/float16"

	"github.com/esper-go/esper/tensor"
)

func TestF32ToBF16(t *testing.T) {
	tests := []struct {
		name string
		in   uint32 // float32 bits
		want uint16
	}{
		{"one", 0x3f800000, 0x3f80},
		{"minus two", 0xc0000000, 0xc000},
		{"zero", 0x00000000, 0x0000},
		{"negative zero", 0x80000000, 0x8000},
		{"below half rounds down", 0x3f807fff, 0x3f80},
		{"above half rounds up", 0x3f808001, 0x3f81},
		{"tie to even (down)", 0x3f808000, 0x3f80},
		{"tie to even (up)", 0x3f818000, 0x3f82},
		{"negative tie to even (down)", 0xbf808000, 0xbf80},
		{"negative tie to even (up)", 0xbf818000, 0xbf82},
		{"carry into exponent", 0x3fffffff, 0x4000},
		{"smallest subnormal rounds to zero", 0x00000001, 0x0000},
		{"subnormal tie to even", 0x00018000, 0x0002},
		{"+Inf", 0x7f800000, 0x7f80},
		{"-Inf", 0xff800000, 0xff80},
		{"max finite rounds to +Inf", 0x7f7fffff, 0x7f80},
		{"-max finite rounds to -Inf", 0xff7fffff, 0xff80},
		{"largest that stays finite", 0x7f7f7fff, 0x7f7f},
		{"max bf16 tie rounds to Inf", 0x7f7f8000, 0x7f80},
	}
	for _, tc := range tests {
		got := tensor.F32ToBF16(math.Float32frombits(tc.in))
		if got != tc.want {
			t.Errorf("%s: F32ToBF16(%#08x) = %#04x, want %#04x", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestF32ToBF16NaN(t *testing.T) {
	for _, bits := range []uint32{0x7fc00000, 0xffc00000, 0x7f800001, 0x7f80ffff, 0xff800001, 0x7fffffff} {
		h := tensor.F32ToBF16(math.Float32frombits(bits))
		back := tensor.BF16ToF32(h)
		if !math.IsNaN(float64(back)) {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, not a NaN", bits, h)
		}
		if h&0x0040 == 0 {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, not quiet", bits, h)
		}
		if (h>>15 == 1) != (bits>>31 == 1) {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x lost the sign", bits, h)
		}
	}
}

func TestBF16ToF32Exact(t *testing.T) {
	// Every bf16 value widens exactly and narrows back to itself
	// (NaNs aside, which only need to stay NaN).
	for h := 0; h <= 0xffff; h++ {
		f := tensor.BF16ToF32(uint16(h))
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("BF16ToF32(%#04x) = %#08x", h, math.Float32bits(f))
		}
		if f != f {
			continue
		}
		if back := tensor.F32ToBF16(f); back != uint16(h) {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", h, back)
		}
	}
}

func TestF16(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},           // max finite
		{65520, 0x7c00},           // halfway to the next binade rounds to +Inf
		{1e6, 0x7c00},             // overflow
		{-1e6, 0xfc00},            // overflow
		{5.960464477539063e-8, 1}, // smallest subnormal
		{1 + 1.0/2048, 0x3c00},    // tie to even (down)
		{1 + 3.0/2048, 0x3c02},    // tie to even (up)
		{float32(math.Inf(1)), 0x7c00},
		{float32(math.Inf(-1)), 0xfc00},
	}
	for _, tc := range tests {
		got := tensor.F32ToF16(tc.in)
		if got != tc.want {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", tc.in, got, tc.want)
		}
		if want := uint16(float16.Fromfloat32(tc.in)); got != want {
			t.Errorf("F32ToF16(%v) = %#04x, x448/float16 says %#04x", tc.in, got, want)
		}
	}
	if h := tensor.F32ToF16(float32(math.NaN())); !math.IsNaN(float64(tensor.F16ToF32(h))) {
		t.Errorf("F32ToF16(NaN) = %#04x, not a NaN", h)
	}
	for h := 0; h <= 0xffff; h++ {
		f := tensor.F16ToF32(uint16(h))
		if f != f {
			continue
		}
		if back := tensor.F32ToF16(f); back != uint16(h) {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, back)
		}
	}
}

// TestF16MatchesReference checks the half conversions bit for bit
// against x448/float16: every half widened, and every float32 whose low
// 16 bits are one of the patterns around the rounding points (ties,
// just below and above, the subnormal shifts' halves) or a random one,
// for all 2^16 high halves — sign, exponent and top mantissa bits, NaNs
// and infinities included.
func TestF16MatchesReference(t *testing.T) {
	for h := 0; h <= 0xffff; h++ {
		got := math.Float32bits(tensor.F16ToF32(uint16(h)))
		if want := math.Float32bits(float16.Frombits(uint16(h)).Float32()); got != want {
			t.Fatalf("F16ToF32(%#04x) = %#08x, x448/float16 says %#08x", h, got, want)
		}
	}
	lows := []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2001, 0x3000, 0x7fff, 0x8000, 0x8001, 0xffff}
	rng := tensor.NewRNG(3)
	for i := 0; i < 8; i++ {
		lows = append(lows, uint32(rng.IntN(1<<16)))
	}
	for hi := uint32(0); hi <= 0xffff; hi++ {
		for _, lo := range lows {
			checkF16(t, hi<<16|lo)
		}
	}
}

// TestF16Exhaustive compares F32ToF16 with x448/float16 on all 2^32
// float32 bit patterns (about 9 s on two cores; skipped by -short).
func TestF16Exhaustive(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the 2^32 sweep is left out (TestF16MatchesReference still runs)")
	}
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for hi := uint32(w); hi <= 0xffff; hi += uint32(workers) {
				for lo := uint32(0); lo <= 0xffff; lo++ {
					if !checkF16(t, hi<<16|lo) {
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
}

// checkF16 compares one conversion with the reference, reporting a
// mismatch; it returns false after one.
func checkF16(t *testing.T, bits uint32) bool {
	f := math.Float32frombits(bits)
	if got, want := tensor.F32ToF16(f), uint16(float16.Fromfloat32(f)); got != want {
		t.Errorf("F32ToF16(%#08x) = %#04x, x448/float16 says %#04x", bits, got, want)
		return false
	}
	return true
}

func TestCastAllPairs(t *testing.T) {
	// Values every dtype represents exactly except Bool (non-zero → true).
	src := []float64{0, 1, -2, 3, 100, -7}
	for _, from := range allDTypes {
		for _, to := range allDTypes {
			t.Run(from.String()+"->"+to.String(), func(t *testing.T) {
				in := src
				if from == tensor.Bool {
					in = []float64{0, 1, 1, 0, 1, 0}
				}
				x := tensor.FromFloat64s(from, in, 2, 3)
				for _, v := range []*tensor.Tensor{x, x.T()} {
					y := v.Cast(to)
					equal(t, y.DType(), to, "dtype")
					sameInts(t, y.Shape(), v.Shape(), "shape")
					equal(t, y.IsContiguous(), true, "contiguous")
					want := v.Float64s()
					if to == tensor.Bool {
						for i, w := range want {
							if w != 0 {
								want[i] = 1
							}
						}
					}
					equal(t, y.Float64s(), want, "values")
					if from == to && v.IsContiguous() {
						equal(t, y, v, "Cast to own dtype of a contiguous tensor returns it")
					} else if shares(y, v) {
						t.Error("Cast result shares storage")
					}
				}
			})
		}
	}
}

func TestCastRounding(t *testing.T) {
	x := tensor.FromSlice([]float64{1.5, -1.5, 2.9, -2.9, 0.1, 1e-50, 1 + 1.0/512})
	equal(t, x.Cast(tensor.I32).Float64s(), []float64{1, -1, 2, -2, 0, 0, 1}, "float to int truncates")
	equal(t, x.Cast(tensor.I64).Float64s(), []float64{1, -1, 2, -2, 0, 0, 1}, "float to int truncates")
	equal(t, x.Cast(tensor.Bool).Float64s(), []float64{1, 1, 1, 1, 1, 1, 1}, "non-zero is true")
	equal(t, x.Cast(tensor.BF16).U16()[6], uint16(0x3f80), "1+2^-9 is a bf16 tie, rounds to even")
	equal(t, x.Cast(tensor.F32).Cast(tensor.BF16).U16(), x.Cast(tensor.BF16).U16(), "F64→BF16 goes through F32 (as PyTorch)")

	// The contiguous F32<->BF16 fast paths agree with the scalar conversion.
	f := tensor.FromSlice([]float32{math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), float32(math.Inf(-1)), float32(math.NaN())})
	b := f.Cast(tensor.BF16)
	equal(t, b.U16()[:3], []uint16{0x3f80, 0x3f82, 0xff80})
	if !math.IsNaN(b.At(3)) {
		t.Errorf("NaN cast to BF16 is %v", b.At(3))
	}
	back := b.Cast(tensor.F32).F32()
	equal(t, back[:3], []float32{1, math.Float32frombits(0x3f820000), float32(math.Inf(-1))})
	// Strided (slow path) gives the same bits.
	bs := tensor.Zeros(tensor.BF16, 4, 2).Narrow(1, 0, 1)
	tensor.CopyInto(bs, f)
	equal(t, bs.Contiguous().U16(), b.U16(), "strided F32→BF16")
}

func TestCopyIntoStrided(t *testing.T) {
	src := tensor.FromFloat64s(tensor.F32, iota64(12), 3, 4)
	dst := tensor.Zeros(tensor.F64, 4, 6)
	view := dst.Narrow(1, 1, 3).T() // [3 4], strides [1 6], offset 1
	tensor.CopyInto(view, src)
	equal(t, view.Float64s(), iota64(12))
	want := []float64{
		0, 0, 4, 8, 0, 0,
		0, 1, 5, 9, 0, 0,
		0, 2, 6, 10, 0, 0,
		0, 3, 7, 11, 0, 0,
	}
	equal(t, dst.Float64s(), want, "only the view's elements change")

	// Strided source into a contiguous destination of another shape.
	flat := tensor.Zeros(tensor.I32, 12)
	tensor.CopyInto(flat, view)
	equal(t, flat.Float64s(), iota64(12))

	// Broadcast (stride 0) source.
	row := tensor.FromSlice([]int64{7, 8, 9}).Unsqueeze(0).Expand(2, 3)
	out := tensor.Zeros(tensor.I64, 2, 3)
	tensor.CopyInto(out.T().T(), row)
	equal(t, out.I64(), []int64{7, 8, 9, 7, 8, 9})

	mustPanicWith(t, "tensor: CopyInto from shape [3 4] into shape [2 2]", func() { tensor.CopyInto(tensor.Zeros(tensor.F32, 2, 2), src) })
}

func TestCopyIntoExactIntegers(t *testing.T) {
	// Large int64 values are not representable in float64; a strided copy
	// or an I64→I32 cast must not go through float64.
	big := []int64{1<<53 + 1, -(1<<62 + 3), math.MaxInt64, math.MinInt64}
	x := tensor.FromSlice(big, 2, 2)
	equal(t, x.T().Contiguous().I64(), []int64{big[0], big[2], big[1], big[3]}, "strided I64 copy")
	equal(t, x.T().Clone().T().Contiguous().I64(), big, "Clone round trip")
	equal(t, x.Reshape(4).Cast(tensor.I32).I32(), []int32{int32(big[0]), int32(big[1]), int32(big[2]), int32(big[3])}, "I64→I32 wraps")
	y := tensor.FromSlice([]int32{math.MaxInt32, math.MinInt32, -1, 5}, 2, 2)
	equal(t, y.T().Cast(tensor.I64).I64(), []int64{math.MaxInt32, -1, math.MinInt32, 5}, "strided I32→I64")

	// Same for NaN payloads through a strided F32 copy.
	nan := math.Float32frombits(0x7fc01234)
	f := tensor.FromSlice([]float32{nan, 1, 2, 3}, 2, 2)
	equal(t, math.Float32bits(f.T().Contiguous().F32()[0]), uint32(0x7fc01234), "NaN payload kept")
}
