// Package testdevice is the one switch that runs a package's test suite
// on another device. Tests build their models and tensors on Device() and
// read results back through Host, F32 and F64 (explicit, counted copies);
// the suite then runs unchanged on the CPU (the default) and, with
//
//	ESPER_TEST_DEVICE=sim go test ./tolaria/...
//
// on the strict simulated accelerator, whose host accessors refuse device
// tensors — so a test that passes there proves the code under test never
// reads a device tensor on the host. `make test` runs the suites of nn,
// optim, tolaria, kasmina, tamiyo and simic both ways (SIM_PKGS in the
// Makefile).
//
// Values are "cpu" (default when unset or empty), "sim", "sim:N"; on a
// GPU machine with the cuda build, "cuda" and "cuda:N". A value that does
// not name a usable device fails every test that asks for it, with the
// variable's name in the message.
package testdevice

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/tensor"
)

// Env is the environment variable that selects the device.
const Env = "ESPER_TEST_DEVICE"

var (
	once   sync.Once
	dev    tensor.Device
	devErr error
)

// resolve parses and opens the device named by Env once per process.
func resolve() (tensor.Device, error) {
	once.Do(func() {
		name := os.Getenv(Env)
		if name == "" {
			dev = tensor.CPU
			return
		}
		d, err := device.Parse(name)
		if err == nil {
			_, err = device.OpenDevice(d)
		}
		if err != nil {
			devErr = fmt.Errorf("testdevice: %s=%q: %w", Env, name, err)
			return
		}
		dev = d
	})
	return dev, devErr
}

// Device returns the device the tests run on, failing t when Env names
// no usable device.
func Device(t testing.TB) tensor.Device {
	t.Helper()
	d, err := resolve()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Must returns the device the tests run on, for code without a
// testing.TB (an Example): it panics, failing the example, when Env names
// no usable device.
func Must() tensor.Device {
	d, err := resolve()
	if err != nil {
		panic(err)
	}
	return d
}

// Example is the testing.TB the helpers take, for code that has none
// (an Example function): Helper does nothing, Fatal and Fatalf panic,
// which fails the example. The helpers of this package call nothing
// else on it.
type Example struct{ testing.TB }

// Helper does nothing.
func (Example) Helper() {}

// Fatal panics with its arguments.
func (Example) Fatal(args ...any) { panic(fmt.Sprint(args...)) }

// Fatalf panics with the formatted message.
func (Example) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// OnDevice reports whether the tests run on a device other than the CPU.
func OnDevice(t testing.TB) bool { return !Device(t).IsCPU() }

// To returns x on the test device: x itself when it is there already,
// otherwise an explicit copy.
func To(t testing.TB, x *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	d := Device(t)
	if x == nil || x.Device() == d {
		return x
	}
	y, err := x.ToDevice(d)
	if err != nil {
		t.Fatalf("testdevice: copying to %s: %v", d, err)
	}
	return y
}

// Host returns x on the CPU: x itself when it is a CPU tensor, otherwise
// an explicit copy (a counted host sync on a device).
func Host(t testing.TB, x *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	if x == nil || x.Device().IsCPU() {
		return x
	}
	if !x.IsContiguous() {
		// Pack a strided view on its device first (the copy to the
		// host takes a contiguous tensor).
		c, err := tensor.EmptyOn(x.Device(), x.DType(), x.Shape()...)
		if err != nil {
			t.Fatalf("testdevice: packing a %s view: %v", x.Device(), err)
		}
		kernels.For(x.Device()).Copy(c, x)
		x = c
	}
	y, err := x.ToDevice(tensor.CPU)
	if err != nil {
		t.Fatalf("testdevice: copying %s to the host: %v", x.Device(), err)
	}
	return y
}

// F32 returns a host copy of a float32 tensor's elements in logical order.
func F32(t testing.TB, x *tensor.Tensor) []float32 {
	t.Helper()
	h := Host(t, x)
	if !h.IsContiguous() {
		h = h.Contiguous()
	}
	return append([]float32(nil), h.F32()...)
}

// F64 returns a host copy of a tensor's elements widened to float64, in
// logical order, whatever its float dtype.
func F64(t testing.TB, x *tensor.Tensor) []float64 {
	t.Helper()
	return Host(t, x).Float64s()
}

// Fill sets every element of x to v where x lives: a host fill on the
// CPU, the backend's Fill on a device (no copy, no host sync).
func Fill(x *tensor.Tensor, v float64) {
	if x.Device().IsCPU() {
		x.Fill(v)
		return
	}
	kernels.For(x.Device()).Fill(x, v)
}

// Set writes v into element idx of x where x lives: a host Set on the
// CPU, the backend's Fill of that one element on a device.
func Set(x *tensor.Tensor, v float64, idx ...int) {
	if x.Device().IsCPU() {
		x.Set(v, idx...)
		return
	}
	e := x
	for axis, i := range idx {
		e = e.Narrow(axis, i, 1)
	}
	kernels.For(x.Device()).Fill(e, v)
}

// Item returns the value of a one-element tensor, copying it to the host.
func Item(t testing.TB, x *tensor.Tensor) float64 {
	t.Helper()
	return Host(t, x).Item()
}
