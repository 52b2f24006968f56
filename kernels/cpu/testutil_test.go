package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// Shared test helpers: random tensors, float64 references and
// dtype-scaled comparisons.

var be = Default()

var floatTypes = []tensor.DType{tensor.F64, tensor.F32, tensor.BF16}

// tol is the relative tolerance of a dtype against a float64 reference.
func tol(d tensor.DType) float64 {
	switch d {
	case tensor.F64:
		return 1e-12
	case tensor.F32:
		return 1e-5
	}
	return 2e-2
}

// randT returns a random normal tensor of dtype d.
func randT(seed uint64, d tensor.DType, shape ...int) *T {
	return tensor.Normal(tensor.NewRNG(seed), d, 0, 1, shape...)
}

// vals returns t's elements as float64 (row-major).
func vals(t *T) []float64 { return t.Float64s() }

// closeTo compares got to want with a per-tensor relative tolerance:
// max|got-want| <= rtol·max(1, max|want|).
func closeTo(t testing.TB, what string, got, want []float64, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	scale := 1.0
	for _, w := range want {
		if a := math.Abs(w); a > scale && !math.IsInf(a, 0) {
			scale = a
		}
	}
	worst, at := 0.0, -1
	for i := range got {
		g, w := got[i], want[i]
		if math.IsNaN(w) && math.IsNaN(g) || g == w {
			continue
		}
		d := math.Abs(g - w)
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		if d > worst {
			worst, at = d, i
		}
	}
	if worst > rtol*scale {
		t.Fatalf("%s: max error %.3g at %d (got %v want %v), tolerance %.3g", what, worst, at, got[at], want[at], rtol*scale)
	}
}

// roundTo rounds reference values through dtype d, so that references
// built from half-precision inputs see the same inputs as the kernel.
func asF64(t *T) *T { return t.Cast(tensor.F64) }

func name(parts ...any) string { return fmt.Sprint(parts...) }

// numGrad returns d/dx Σ f()·dy by central differences; x (F64) is
// perturbed in place and restored. f must recompute from x.
func numGrad(x *T, dy []float64, f func() []float64) []float64 {
	const h = 1e-6
	xv := x.F64()
	g := make([]float64, len(xv))
	for i := range xv {
		v := xv[i]
		xv[i] = v + h
		p := f()
		xv[i] = v - h
		m := f()
		xv[i] = v
		var s float64
		for j := range p {
			s += (p[j] - m[j]) * dy[j]
		}
		g[i] = s / (2 * h)
	}
	return g
}

// same asserts bitwise equality.
func same(t testing.TB, what string, a, b []float64) {
	t.Helper()
	for i := range a {
		if a[i] != b[i] && !(a[i] != a[i] && b[i] != b[i]) {
			t.Fatalf("%s: element %d differs: %v vs %v", what, i, a[i], b[i])
		}
	}
}
