package nn_test

import (
	"testing"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// onDevice moves m to the test device (testdevice.Device: the CPU, or
// the device ESPER_TEST_DEVICE names) and returns it.
func onDevice[M nn.Module](t testing.TB, m M) M {
	t.Helper()
	if err := nn.To(m, testdevice.Device(t)); err != nil {
		t.Fatal(err)
	}
	return m
}

// exampleDevice is where the examples compute: the CPU, or the device
// ESPER_TEST_DEVICE names (the examples print the same on both). A
// program names its device instead: tensor.CPU, tensor.Sim(0), a CUDA
// device.
func exampleDevice() tensor.Device { return testdevice.Must() }

// moveTo moves an example's module to exampleDevice (nn.To).
func moveTo(m nn.Module) {
	if err := nn.To(m, exampleDevice()); err != nil {
		panic(err)
	}
}

// toDevice copies an example's input to exampleDevice (x itself on the
// CPU).
func toDevice(x *tensor.Tensor) *tensor.Tensor { return testdevice.To(testdevice.Example{}, x) }

// onHost returns x readable on the host: x itself on the CPU, an
// explicit copy (a host sync) from a device.
func onHost(x *tensor.Tensor) *tensor.Tensor { return testdevice.Host(testdevice.Example{}, x) }
