package tensor_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// TestParseDevice: the names ParseDevice accepts, and for every other
// input the sentinel its one-line error wraps, naming the input.
func TestParseDevice(t *testing.T) {
	for s, want := range map[string]tensor.Device{"cpu": tensor.CPU, "cpu:0": tensor.CPU, "cuda": tensor.CUDA(0), "cuda:0": tensor.CUDA(0),
		"cuda:3": tensor.CUDA(3), "cuda:1023": tensor.CUDA(1023), "sim": tensor.Sim(0), "sim:0": tensor.Sim(0), "sim:2": tensor.Sim(2)} {
		d, err := tensor.ParseDevice(s)
		noErr(t, err)
		equal(t, d, want, s)
		if s != "cuda" && s != "sim" && s != "cpu:0" {
			equal(t, d.String(), s)
		}
	}
	for _, c := range []struct {
		in   string
		err  error
		says string
	}{
		{"", tensor.ErrDeviceSyntax, "want cpu, sim, sim:N, cuda or cuda:N"},
		{"gpu", tensor.ErrDeviceSyntax, `unknown device type "gpu"`},
		{"tpu", tensor.ErrDeviceSyntax, "want cpu"},
		{"cuda0", tensor.ErrDeviceSyntax, "want cpu"},
		{"CUDA", tensor.ErrDeviceSyntax, "want cpu"},
		{"SIM", tensor.ErrDeviceSyntax, "want cpu"},
		{" cpu", tensor.ErrDeviceSyntax, "want cpu"},
		{":0", tensor.ErrDeviceSyntax, "want cpu"},
		{"cuda:", tensor.ErrDeviceSyntax, "the index after ':'"},
		{"cuda:-1", tensor.ErrDeviceSyntax, "from 0 to 1023"},
		{"cuda:+1", tensor.ErrDeviceSyntax, "the index"},
		{"cuda:x", tensor.ErrDeviceSyntax, "the index"},
		{"cuda:1x", tensor.ErrDeviceSyntax, "the index"},
		{"cuda:01", tensor.ErrDeviceSyntax, "the index"},
		{"cuda:0:1", tensor.ErrDeviceSyntax, "the index"},
		{"cuda:1024", tensor.ErrDeviceSyntax, "the index"},
		{"cuda:99999999999999999999", tensor.ErrDeviceSyntax, "the index"},
		{"sim:", tensor.ErrDeviceSyntax, "the index"},
		{"sim:x", tensor.ErrDeviceSyntax, "the index"},
		{"sim:+1", tensor.ErrDeviceSyntax, "the index"},
		{"sim:-1", tensor.ErrDeviceSyntax, "the index"},
		{"sim:1024", tensor.ErrDeviceSyntax, "the index"},
		{"sim0", tensor.ErrDeviceSyntax, "want cpu"},
		{"cpu:1", tensor.ErrDeviceUnavailable, "there is one cpu device"},
		{"cpu:01", tensor.ErrDeviceSyntax, "the index"},
		{"meta", tensor.ErrDeviceUnsupported, "cannot train"},
		{"xla", tensor.ErrDeviceUnsupported, "XLA"},
		{"xpu", tensor.ErrDeviceUnsupported, "XPU"},
		{"xpu:0", tensor.ErrDeviceUnsupported, "XPU"},
		{"hpu", tensor.ErrDeviceUnsupported, "HPU"},
		{"privateuseone", tensor.ErrDeviceUnsupported, "privateuseone"},
		{"mps", tensor.ErrDeviceUnsupported, "not supported in the Go port"},
		{"mps:1", tensor.ErrDeviceUnsupported, "MPS"},
	} {
		_, err := tensor.ParseDevice(c.in)
		if !errors.Is(err, c.err) {
			t.Errorf("ParseDevice(%q) error %v, want one wrapping %v", c.in, err, c.err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, fmt.Sprintf("device %q: ", c.in)) || !strings.Contains(msg, c.says) || strings.Contains(msg, "\n") {
			t.Errorf("ParseDevice(%q) error %q: want one line naming the input and saying %q", c.in, msg, c.says)
		}
	}
	// The sentinels are distinct: a syntax error is not an unavailable
	// device.
	if _, err := tensor.ParseDevice("cuda0"); errors.Is(err, tensor.ErrDeviceUnavailable) || errors.Is(err, tensor.ErrDeviceUnsupported) {
		t.Errorf("ParseDevice(cuda0) error %v matches another sentinel", err)
	}
}

// TestEmptyOnUnregisteredDevice: without a registered memory provider a
// device allocation is an error, not a panic.
func TestEmptyOnUnregisteredDevice(t *testing.T) {
	if _, err := tensor.EmptyOn(tensor.Device{Kind: 7}, tensor.F32, 2); err == nil {
		t.Error("EmptyOn an unregistered device kind: no error")
	}
}

// ExampleParseDevice parses a device name and shows an error matched
// with errors.Is.
func ExampleParseDevice() {
	d, err := tensor.ParseDevice("sim:1")
	fmt.Println(d, err)
	_, err = tensor.ParseDevice("mps")
	fmt.Println(errors.Is(err, tensor.ErrDeviceUnsupported), err)
	// Output:
	// sim:1 <nil>
	// true device "mps": unsupported device type: Apple MPS is not supported in the Go port (use cpu or sim)
}
