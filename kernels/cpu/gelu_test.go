package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

// geluRef is GELU (the erf form) in float64, through erfc so that the
// negative tail keeps its relative accuracy.
func geluRef(x float64) float64 { return x * 0.5 * math.Erfc(-x/math.Sqrt2) }

// TestGeluErfF32: the float32 GELU, kernel and Go fallback, is within
// 6e-7 of x·Φ(x) relative down to 2^-100 (|x| up to 14 on a fine grid,
// tiny and random inputs; lengths that are not a multiple of the
// kernel's 8 lanes), within 1e-4 down to float32's smallest normal
// (x ≈ −13.2, where ½·erfc itself is subnormal), and keeps the special values:
// GELU(±0) = ±0, GELU(+∞) = +∞, GELU(−∞) and GELU(NaN) NaN, and 0 (of
// x's sign) once x·Φ(x) underflows. It works in place and allocates
// nothing.
func TestGeluErfF32(t *testing.T) {
	var xs []float32
	for x := -14.0; x <= 14; x += 1.0 / 1024 {
		xs = append(xs, float32(x))
	}
	for e := -30; e <= 1; e++ {
		xs = append(xs, float32(math.Pow(10, float64(e))), -float32(math.Pow(10, float64(e))))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5001 {
		xs = append(xs, float32(rng.NormFloat64()*3))
	}
	impls := map[string]func(dst, src []float32){"Go": geluErfF32Go}
	if vexpAsm {
		impls["kernel"] = geluErfF32
	}
	for name, f := range impls {
		got := make([]float32, len(xs))
		f(got, xs)
		worst, at := 0.0, float32(0)
		for i, x := range xs {
			want := geluRef(float64(x))
			switch rel := math.Abs(float64(got[i])-want) / math.Abs(want); {
			case math.Abs(want) < 0x1p-126: // below float32's normal range
				require.LessOrEqual(t, math.Abs(float64(got[i])), 0x1p-126, "%s: GELU(%v)", name, x)
				continue
			case math.Abs(want) < 0x1p-100:
				require.Less(t, rel, 1e-4, "%s: GELU(%v) = %v, want %v", name, x, got[i], want)
				continue
			}
			if rel := math.Abs(float64(got[i])-want) / math.Abs(want); rel > worst {
				worst, at = rel, x
			}
		}
		require.Less(t, worst, 6e-7, "%s: worst relative error %.3g at x = %v", name, worst, at)
		t.Logf("%s: worst relative error %.3g at x = %v", name, worst, at)

		specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -20, -100, 20, 1e30}
		out := make([]float32, len(specials))
		f(out, specials)
		require.Equal(t, math.Float32bits(0), math.Float32bits(out[0]), "%s: GELU(+0)", name)
		require.Equal(t, math.Float32bits(float32(math.Copysign(0, -1))), math.Float32bits(out[1]), "%s: GELU(−0)", name)
		require.True(t, math.IsInf(float64(out[2]), 1), "%s: GELU(+Inf) = %v", name, out[2])
		require.True(t, math.IsNaN(float64(out[3])), "%s: GELU(−Inf) = %v", name, out[3])
		require.True(t, math.IsNaN(float64(out[4])), "%s: GELU(NaN) = %v", name, out[4])
		require.Equal(t, float32(0), out[5], "%s: GELU(−20)", name)
		require.True(t, math.Signbit(float64(out[5])), "%s: GELU(−20) is −0", name)
		require.Equal(t, float32(0), out[6], "%s: GELU(−100)", name)
		require.Equal(t, float32(20), out[7], "%s: GELU(20)", name)
		require.Equal(t, float32(1e30), out[8], "%s: GELU(1e30)", name)
	}
	// In place, with a ragged tail, allocating nothing (it runs inside
	// replayed steps).
	x := append([]float32(nil), xs[:21]...)
	want := make([]float32, 21)
	geluErfF32(want, x)
	geluErfF32(x, x)
	require.Equal(t, want, x)
	if !raceEnabled {
		require.Zero(t, testing.AllocsPerRun(20, func() { geluErfF32(x, x) }))
	}
}

// BenchmarkGeluErf times the float32 GELU on 64K values, through Unary
// (the kernel where the CPU has one).
func BenchmarkGeluErf(b *testing.B) {
	x := randT(1, tensor.F32, 1<<16)
	d := tensor.Empty(tensor.F32, 1<<16)
	b.SetBytes(8 << 16)
	for i := 0; i < b.N; i++ {
		be.Unary(kernels.GeluErf, d, x)
	}
}
