package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExpF32: the assembly kernel and its Go twin are within 2 ulp
// (relative 2.4e-7) of math.Exp over [expLo, expHi], agree with each
// other to 1 ulp, handle every tail length, flush results under the
// smallest normal to 0, clamp above expHi, and give exactly 1 at 0.
func TestExpF32(t *testing.T) {
	var src []float32
	for x := float32(expLo); x <= expHi; x += 0.0173 {
		src = append(src, x)
	}
	src = append(src, 0, -0.5, 0.5, 1e-8, -1e-8, float32(math.Ln2), -float32(math.Ln2), expHi, expLo)
	asm := make([]float32, len(src))
	gov := make([]float32, len(src))
	expF32(asm, src)
	expF32Go(gov, src)
	for i, x := range src {
		want := math.Exp(float64(x))
		for name, got := range map[string]float32{"kernel": asm[i], "go": gov[i]} {
			require.InEpsilon(t, want, float64(got), 2.4e-7, "%s e^%v", name, x)
		}
		ulps := int64(math.Float32bits(asm[i])) - int64(math.Float32bits(gov[i]))
		require.LessOrEqual(t, ulps*ulps, int64(1), "kernel and Go differ by %d ulp at %v", ulps, x)
	}
	// Every length 0..19 (the kernel's 8-lane body and its tail).
	for n := 0; n < 20; n++ {
		in := make([]float32, n)
		for i := range in {
			in[i] = -float32(i) * 0.9
		}
		out := make([]float32, n+1)
		out[n] = 42
		expF32(out, in)
		for i, x := range in {
			require.InEpsilon(t, math.Exp(float64(x)), float64(out[i]), 2.4e-7, "n=%d i=%d", n, i)
		}
		require.Equal(t, float32(42), out[n], "n=%d: wrote past the input", n)
	}
	edge := []float32{0, -88, -100, float32(math.Inf(-1)), 100, float32(math.Inf(1))}
	for _, f := range []func(dst, src []float32){expF32, expF32Go} {
		out := make([]float32, len(edge))
		f(out, edge)
		require.Equal(t, float32(1), out[0])
		require.Zero(t, out[1], "e^-88 is under the smallest normal")
		require.Zero(t, out[2])
		require.Zero(t, out[3])
		require.InEpsilon(t, math.Exp(float64(float32(expHi))), float64(out[4]), 2.4e-7, "clamped")
		require.InEpsilon(t, math.Exp(float64(float32(expHi))), float64(out[5]), 2.4e-7, "clamped")
	}
}

func BenchmarkExpF32(b *testing.B) {
	src := make([]float32, 64)
	for i := range src {
		src[i] = -float32(i) * 0.37
	}
	dst := make([]float32, 64)
	b.Run("kernel", func(b *testing.B) {
		for b.Loop() {
			expF32(dst, src)
		}
	})
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			expF32Go(dst, src)
		}
	})
	b.Run("math", func(b *testing.B) {
		for b.Loop() {
			for i, x := range src {
				dst[i] = float32(math.Exp(float64(x)))
			}
		}
	})
}
