package tensor_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/esper-go/esper/tensor"
)

func TestCreation(t *testing.T) {
	tests := []struct {
		name   string
		x      *tensor.Tensor
		dtype  tensor.DType
		shape  []int
		values []float64
	}{
		{"Zeros", tensor.Zeros(tensor.F32, 2, 3), tensor.F32, ints(2, 3), make([]float64, 6)},
		{"Zeros empty", tensor.Zeros(tensor.I64, 2, 0), tensor.I64, ints(2, 0), []float64{}},
		{"Empty", tensor.Empty(tensor.BF16, 3), tensor.BF16, ints(3), []float64{0, 0, 0}},
		{"EmptyLike", tensor.EmptyLike(tensor.Ones(tensor.F16, 1, 2)), tensor.F16, ints(1, 2), []float64{0, 0}},
		{"Ones bool", tensor.Ones(tensor.Bool, 2), tensor.Bool, ints(2), []float64{1, 1}},
		{"Ones bf16", tensor.Ones(tensor.BF16, 2, 1), tensor.BF16, ints(2, 1), []float64{1, 1}},
		{"Full f64", tensor.Full(tensor.F64, -2.5, 2, 2), tensor.F64, ints(2, 2), []float64{-2.5, -2.5, -2.5, -2.5}},
		{"Full i32 truncates", tensor.Full(tensor.I32, 2.9, 3), tensor.I32, ints(3), []float64{2, 2, 2}},
		{"Full f16 rounds", tensor.Full(tensor.F16, 0.1, 1), tensor.F16, ints(1), []float64{float64(tensor.F16ToF32(0x2e66))}},
		{"Scalar", tensor.Scalar(tensor.F32, 4), tensor.F32, ints(), []float64{4}},
		{"Scalar i64", tensor.Scalar(tensor.I64, -7), tensor.I64, ints(), []float64{-7}},
		{"FromSlice f32", tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3), tensor.F32, ints(2, 3), []float64{1, 2, 3, 4, 5, 6}},
		{"FromSlice default shape", tensor.FromSlice([]int64{5, 6}), tensor.I64, ints(2), []float64{5, 6}},
		{"FromSlice f64", tensor.FromSlice([]float64{1.5}, 1, 1), tensor.F64, ints(1, 1), []float64{1.5}},
		{"FromSlice i32", tensor.FromSlice([]int32{-1, 1}), tensor.I32, ints(2), []float64{-1, 1}},
		{"FromSlice bool", tensor.FromSlice([]bool{true, false}), tensor.Bool, ints(2), []float64{1, 0}},
		{"FromSlice empty", tensor.FromSlice([]float32{}, 0, 4), tensor.F32, ints(0, 4), []float64{}},
		{"FromFloat64s bf16", tensor.FromFloat64s(tensor.BF16, []float64{1, 2, 3, 4}, 2, 2), tensor.BF16, ints(2, 2), []float64{1, 2, 3, 4}},
		{"FromFloat64s bool", tensor.FromFloat64s(tensor.Bool, []float64{0, -3, 0.5}), tensor.Bool, ints(3), []float64{0, 1, 1}},
		{"FromFloat64s rank 0", tensor.FromFloat64s(tensor.F32, []float64{2}, []int{}...), tensor.F32, ints(1), []float64{2}},
		{"Arange", tensor.Arange(tensor.I64, 0, 5, 1), tensor.I64, ints(5), []float64{0, 1, 2, 3, 4}},
		{"Arange fractional", tensor.Arange(tensor.F64, 1, 2, 0.25), tensor.F64, ints(4), []float64{1, 1.25, 1.5, 1.75}},
		{"Arange partial last step", tensor.Arange(tensor.F32, 0, 5, 2), tensor.F32, ints(3), []float64{0, 2, 4}},
		{"Arange negative step", tensor.Arange(tensor.I32, 3, 0, -1), tensor.I32, ints(3), []float64{3, 2, 1}},
		{"Arange empty", tensor.Arange(tensor.F32, 2, 2, 1), tensor.F32, ints(0), []float64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			equal(t, tc.x.DType(), tc.dtype, "dtype")
			sameInts(t, tc.x.Shape(), tc.shape, "shape")
			equal(t, tc.x.Float64s(), tc.values, "values")
			equal(t, tc.x.IsContiguous(), true, "contiguous")
			equal(t, tc.x.Device(), tensor.CPU, "device")
			equal(t, tc.x.Offset(), 0, "offset")
		})
	}
}

func TestScalarIsRankZero(t *testing.T) {
	s := tensor.Scalar(tensor.F64, 3.5)
	equal(t, s.Rank(), 0)
	equal(t, s.Numel(), 1)
	equal(t, s.Item(), 3.5)
	equal(t, s.At(), 3.5)
	s.Set(1)
	equal(t, s.F64(), []float64{1})
	equal(t, s.Reshape(1, 1).Float64s(), []float64{1})
	equal(t, s.Unsqueeze(0).Shape(), []int{1})
	equal(t, s.Expand(2, 3).Float64s(), []float64{1, 1, 1, 1, 1, 1})
}

func TestFillStridedView(t *testing.T) {
	for _, d := range allDTypes {
		x := tensor.Zeros(d, 3, 3)
		x.T().Narrow(0, 1, 1).Fill(1) // column 1
		equal(t, x.Float64s(), []float64{0, 1, 0, 0, 1, 0, 0, 1, 0}, d)
	}
}

func TestCreationPanics(t *testing.T) {
	mustPanicWith(t, "tensor: cannot allocate f32 [2 -1]: negative dimension", func() { tensor.Zeros(tensor.F32, 2, -1) })
	mustPanicWith(t, "tensor: FromSlice of 3 elements into shape [2 2]", func() { tensor.FromSlice([]float32{1, 2, 3}, 2, 2) })
	mustPanicWith(t, "tensor: FromFloat64s of 1 elements into shape [2]", func() { tensor.FromFloat64s(tensor.F16, []float64{1}, 2) })
	for _, a := range [][3]float64{{0, 1, 0}, {0, 1, -1}, {1, 0, 1}, {0, math.Inf(1), 1}, {0, math.NaN(), 1}, {math.NaN(), 0, 1}, {0, 1, math.NaN()}} {
		mustPanicContaining(t, func() { tensor.Arange(tensor.F32, a[0], a[1], a[2]) }, "tensor: Arange(", "want a non-zero step")
	}
	mustPanicWith(t, "tensor: RandInt with bound 0 (want n > 0)", func() { tensor.RandInt(tensor.NewRNG(1), 0, 3) })
	mustPanicWith(t, "tensor: Size of invalid dtype invalid", func() { tensor.Zeros(tensor.Invalid, 1) })
}

func TestRandomDeterminism(t *testing.T) {
	gens := map[string]func(seed uint64) *tensor.Tensor{
		"Uniform": func(s uint64) *tensor.Tensor { return tensor.Uniform(tensor.NewRNG(s), tensor.F32, -1, 1, 64) },
		"Normal":  func(s uint64) *tensor.Tensor { return tensor.Normal(tensor.NewRNG(s), tensor.F64, 0, 1, 8, 8) },
		"RandInt": func(s uint64) *tensor.Tensor { return tensor.RandInt(tensor.NewRNG(s), 1000, 64) },
	}
	for name, gen := range gens {
		a, b, c := gen(42), gen(42), gen(43)
		equal(t, a.Float64s(), b.Float64s(), name, ": same seed must give the same values")
		if equalFloats(a.Float64s(), c.Float64s()) {
			t.Errorf("%s: seeds 42 and 43 gave identical values", name)
		}
	}
	// One RNG used twice continues its stream instead of repeating it.
	rng := tensor.NewRNG(7)
	u1, u2 := tensor.Uniform(rng, tensor.F64, 0, 1, 16), tensor.Uniform(rng, tensor.F64, 0, 1, 16)
	if equalFloats(u1.Float64s(), u2.Float64s()) {
		t.Error("consecutive draws from one RNG are identical")
	}
}

func moments(v []float64) (mean, std, lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		mean += x
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	mean /= float64(len(v))
	for _, x := range v {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(v))), lo, hi
}

func TestRandomMoments(t *testing.T) {
	const n = 100000
	rng := tensor.NewRNG(2024)

	u := tensor.Uniform(rng, tensor.F64, 2, 6, n)
	mean, std, lo, hi := moments(u.Float64s())
	// Uniform[2,6): mean 4, std 4/sqrt(12) = 1.1547.
	if math.Abs(mean-4) > 0.02 || math.Abs(std-4/math.Sqrt(12)) > 0.02 || lo < 2 || hi >= 6 {
		t.Errorf("Uniform(2,6): mean %v std %v range [%v, %v]", mean, std, lo, hi)
	}

	g := tensor.Normal(rng, tensor.F32, -1, 3, n)
	mean, std, _, _ = moments(g.Float64s())
	if math.Abs(mean+1) > 0.05 || math.Abs(std-3) > 0.05 {
		t.Errorf("Normal(-1,3): mean %v std %v", mean, std)
	}

	gb := tensor.Normal(rng, tensor.BF16, 0, 1, n)
	equal(t, gb.DType(), tensor.BF16)
	mean, std, _, _ = moments(gb.Float64s())
	if math.Abs(mean) > 0.02 || math.Abs(std-1) > 0.02 {
		t.Errorf("Normal bf16: mean %v std %v", mean, std)
	}

	r := tensor.RandInt(rng, 5, n)
	equal(t, r.DType(), tensor.I64)
	counts := make([]int, 5)
	for _, v := range r.I64() {
		if v < 0 || v >= 5 {
			t.Fatalf("RandInt(5) gave %d", v)
		}
		counts[v]++
	}
	for k, c := range counts {
		if math.Abs(float64(c)-n/5) > 0.02*n {
			t.Errorf("RandInt(5): value %d drawn %d times of %d", k, c, n)
		}
	}
	equal(t, tensor.RandInt(rng, 1, 4).Float64s(), []float64{0, 0, 0, 0}, "RandInt(1)")
}

// TestFromFloat64sConvertsAsSet: FromFloat64s's typed loops convert every
// dtype as writing the elements one at a time does (Set: round to
// nearest even into F32, then into BF16 or F16; truncation into the
// integers), NaN, infinities, signed zeros, subnormals and halfway cases
// included.
func TestFromFloat64sConvertsAsSet(t *testing.T) {
	in := []float64{0, math.Copysign(0, -1), 1, -2.5, 1e-40, 1e-8, 3.4e38, 1e39, -1e39, math.Inf(1), math.Inf(-1), math.NaN(),
		1 + 1.0/256, 1 + 3.0/512, 65504, 65520, 6e-8, 0.1, 1.0000001192092896, 7.9, -7.9}
	for _, d := range []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.F16, tensor.I32, tensor.I64, tensor.Bool} {
		vals := in
		if d == tensor.I32 || d == tensor.I64 {
			vals = []float64{0, 1, -2.5, 7.9, -7.9, 1e9}
		}
		got := tensor.FromFloat64s(d, vals)
		want := tensor.Empty(d, len(vals))
		for i, v := range vals {
			want.Set(v, i)
		}
		if raw(want) != raw(got) {
			t.Errorf("%v: FromFloat64s %s, Set %s", d, raw(got), raw(want))
		}
	}
}

// raw renders a tensor's stored elements exactly (bit patterns).
func raw(x *tensor.Tensor) string {
	switch x.DType() {
	case tensor.F64:
		var b []uint64
		for _, v := range tensor.Data[float64](x) {
			b = append(b, math.Float64bits(v))
		}
		return fmt.Sprint(b)
	case tensor.F32:
		var b []uint32
		for _, v := range tensor.Data[float32](x) {
			b = append(b, math.Float32bits(v))
		}
		return fmt.Sprint(b)
	case tensor.BF16, tensor.F16:
		return fmt.Sprint(tensor.StorageData[uint16](x.Storage()))
	case tensor.I32:
		return fmt.Sprint(tensor.Data[int32](x))
	case tensor.I64:
		return fmt.Sprint(tensor.Data[int64](x))
	default:
		return fmt.Sprint(tensor.Data[bool](x))
	}
}
