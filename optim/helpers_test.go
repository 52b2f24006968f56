package optim_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The tests use only the standard library: testify's own dependencies are
// not in go.sum, and this package must not change the module files.

// failOnPanic, deferred first in a test, turns a panic into a failure
// that shows its stack.
func failOnPanic(t *testing.T) {
	r := recover()
	if r == nil {
		return
	}
	t.Fatalf("panic: %v\n%s", r, debug.Stack())
}

// mustPanic checks that f panics with a message containing part.
func mustPanic(t *testing.T, part string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("expected a panic containing %q, got none", part)
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, part) {
			t.Fatalf("panic %q does not contain %q", msg, part)
		}
	}()
	f()
}

// relErr is max|a-b| / max|b| over two equally long slices (max|a-b| when
// b is all zero).
func relErr(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
		m = math.Max(m, math.Abs(b[i]))
		if math.IsNaN(a[i]) != math.IsNaN(b[i]) {
			return math.Inf(1)
		}
	}
	if m == 0 {
		return d
	}
	return d / m
}

// randParams makes leaf parameters of the given shapes and dtype with
// N(0,1) values.
func randParams(rng *rand.Rand, dt tensor.DType, shapes ...[]int) []*autograd.Var {
	ps := make([]*autograd.Var, len(shapes))
	for i, s := range shapes {
		ps[i] = autograd.Param(tensor.Normal(rng, dt, 0, 1, s...))
		ps[i].Name = fmt.Sprintf("p%d", i)
	}
	return ps
}

// setGrads writes host values into each parameter's Grad (an arena view).
func setGrads(ps []*autograd.Var, gs [][]float64) {
	for i, p := range ps {
		for j, v := range gs[i] {
			setFlat(p.Grad, j, v)
		}
	}
}

// setFlat sets element j (row-major) of a contiguous CPU tensor.
func setFlat(t *tensor.Tensor, j int, v float64) {
	switch t.DType() {
	case tensor.F64:
		t.F64()[j] = v
	case tensor.F32:
		t.F32()[j] = float32(v)
	default:
		panic("setFlat: unsupported dtype " + t.DType().String())
	}
}

// randGrads draws gradients shaped like ps, rounded to each parameter's
// dtype so the float64 reference sees exactly what the kernel sees.
func randGrads(rng *rand.Rand, ps []*autograd.Var) [][]float64 {
	gs := make([][]float64, len(ps))
	for i, p := range ps {
		gs[i] = make([]float64, p.Value.Numel())
		for j := range gs[i] {
			gs[i][j] = roundTo(p.DType(), rng.NormFloat64())
		}
	}
	return gs
}

func roundTo(dt tensor.DType, v float64) float64 {
	if dt == tensor.F32 {
		return float64(float32(v))
	}
	return v
}

// values returns every parameter's value as float64s.
func values(ps []*autograd.Var) [][]float64 {
	out := make([][]float64, len(ps))
	for i, p := range ps {
		out[i] = p.Value.Float64s()
	}
	return out
}

func cloneVals(v [][]float64) [][]float64 {
	out := make([][]float64, len(v))
	for i := range v {
		out[i] = append([]float64(nil), v[i]...)
	}
	return out
}

// capture records f with the CPU backend's capture. The capture is ended
// even when f panics (a missing kernel), so later tests run eagerly.
func capture(t *testing.T, f func()) kernels.Graph {
	t.Helper()
	be := kernels.For(tensor.CPU)
	if err := be.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	ended := false
	defer func() {
		if !ended {
			_, _ = be.EndCapture()
		}
	}()
	f()
	g, err := be.EndCapture()
	ended = true
	if err != nil {
		t.Fatal(err)
	}
	return g
}
