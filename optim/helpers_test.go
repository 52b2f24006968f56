package optim_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The tests use only the standard library: testify's own dependencies are
// not in go.sum, and this package must not change the module files.
//
// The tests compute on testdevice.Device (the CPU, or the device
// ESPER_TEST_DEVICE names): parameters, gradients and flags are put
// there with explicit copies (randParams, setGrads, testdevice.To), and
// results read back only through explicit copies (values,
// testdevice.F64 and Item). The float64 references stay on the host.

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
// N(0,1) values, on the test device.
func randParams(t testing.TB, rng *rand.Rand, dt tensor.DType, shapes ...[]int) []*autograd.Var {
	t.Helper()
	ps := make([]*autograd.Var, len(shapes))
	for i, s := range shapes {
		ps[i] = autograd.Param(testdevice.To(t, tensor.Normal(rng, dt, 0, 1, s...)))
		ps[i].Name = fmt.Sprintf("p%d", i)
	}
	return ps
}

// setGrads writes host values into each parameter's Grad (an arena view)
// where it lives: directly on the CPU, with one host-to-device copy and
// the backend's Copy on a device.
func setGrads(t testing.TB, ps []*autograd.Var, gs [][]float64) {
	t.Helper()
	for i, p := range ps {
		write(t, p.Grad, tensor.FromFloat64s(p.Grad.DType(), gs[i], p.Grad.Shape()...))
	}
}

// write copies the host tensor h into x (same element count) where x
// lives.
func write(t testing.TB, x, h *tensor.Tensor) {
	t.Helper()
	if x.Device().IsCPU() {
		tensor.CopyInto(x, h)
		return
	}
	kernels.For(x.Device()).Copy(x, testdevice.To(t, h))
}

// hostDict returns host copies of sd's tensors (sd's own on the CPU).
func hostDict(t testing.TB, sd map[string]*tensor.Tensor) map[string]*tensor.Tensor {
	t.Helper()
	out := make(map[string]*tensor.Tensor, len(sd))
	for k, v := range sd {
		out[k] = testdevice.Host(t, v)
	}
	return out
}

// item is testdevice.Item: the value of a one-element tensor, copied to
// the host.
func item(t testing.TB, x *tensor.Tensor) float64 {
	t.Helper()
	return testdevice.Item(t, x)
}

// f64 is testdevice.F64: x's elements as float64s, copied to the host.
func f64(t testing.TB, x *tensor.Tensor) []float64 {
	t.Helper()
	return testdevice.F64(t, x)
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

// values returns every parameter's value as float64s (host copies).
func values(t testing.TB, ps []*autograd.Var) [][]float64 {
	t.Helper()
	out := make([][]float64, len(ps))
	for i, p := range ps {
		out[i] = f64(t, p.Value)
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

// toDevice copies an example's tensor to the test device (x itself on
// the CPU); a program names its device instead.
func toDevice(x *tensor.Tensor) *tensor.Tensor { return testdevice.To(testdevice.Example{}, x) }

// onHost returns x readable on the host: x itself on the CPU, an
// explicit copy (a host sync) from a device.
func onHost(x *tensor.Tensor) *tensor.Tensor { return testdevice.Host(testdevice.Example{}, x) }

// capture records f with the test device's backend's capture. The
// capture is ended even when f panics (a missing kernel), so later tests
// run eagerly.
func capture(t *testing.T, f func()) kernels.Graph {
	t.Helper()
	be := kernels.For(testdevice.Device(t))
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
