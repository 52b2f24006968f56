package tolaria

import (
	"errors"
	"strings"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

func TestParseDeviceCPU(t *testing.T) {
	for _, s := range []string{"cpu", "cpu:0"} {
		d, err := ParseDevice(s)
		if err != nil || d != tensor.CPU {
			t.Fatalf("%q: %v %v", s, d, err)
		}
	}
}

func TestParseDeviceNoCUDABackend(t *testing.T) {
	if _, err := kernels.Lookup(tensor.CUDA(0)); err == nil {
		t.Skip("this build has a CUDA backend")
	}
	for _, s := range []string{"cuda", "cuda:0", "cuda:3"} {
		_, err := ParseDevice(s)
		if !errors.Is(err, ErrDeviceUnavailable) || !strings.Contains(err.Error(), "-tags cuda") {
			t.Fatalf("%q: %v, want ErrDeviceUnavailable naming -tags cuda", s, err)
		}
	}
}

func TestParseDeviceStrings(t *testing.T) {
	twoGPUs := func() (int, error) { return 2, nil }
	cases := []struct {
		in   string
		want tensor.Device
		err  error
		msg  string
	}{
		{in: "cpu", want: tensor.CPU},
		{in: "cuda", want: tensor.CUDA(0)},
		{in: "cuda:0", want: tensor.CUDA(0)},
		{in: "cuda:1", want: tensor.CUDA(1)},
		{in: "cuda:2", err: ErrDeviceUnavailable, msg: "out of range"},
		{in: "cuda:99999999999999999999", err: ErrDeviceSyntax},
		{in: "cpu:1", err: ErrDeviceUnavailable},
		{in: "cuda0", err: ErrDeviceSyntax},
		{in: "cuda:", err: ErrDeviceSyntax},
		{in: "cuda:-1", err: ErrDeviceSyntax},
		{in: "cuda:+1", err: ErrDeviceSyntax},
		{in: "cuda:x", err: ErrDeviceSyntax},
		{in: "cuda:0:1", err: ErrDeviceSyntax},
		{in: "CUDA", err: ErrDeviceSyntax},
		{in: " cpu", err: ErrDeviceSyntax},
		{in: "", err: ErrDeviceSyntax},
		{in: ":0", err: ErrDeviceSyntax},
		{in: "tpu", err: ErrDeviceSyntax},
		{in: "meta", err: ErrDeviceUnsupported},
		{in: "xpu", err: ErrDeviceUnsupported},
		{in: "xpu:0", err: ErrDeviceUnsupported},
		{in: "xla", err: ErrDeviceUnsupported},
		{in: "hpu", err: ErrDeviceUnsupported},
		{in: "privateuseone", err: ErrDeviceUnsupported},
		{in: "mps", err: ErrDeviceUnsupported, msg: "not supported in the Go port"},
		{in: "mps:0", err: ErrDeviceUnsupported},
		{in: "mps:1", err: ErrDeviceUnsupported},
	}
	for _, c := range cases {
		d, err := parseDevice(c.in, twoGPUs)
		if c.err == nil {
			if err != nil || d != c.want {
				t.Errorf("%q: %v %v, want %v", c.in, d, err, c.want)
			}
			continue
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%q: error %v, want %v", c.in, err, c.err)
			continue
		}
		if c.msg != "" && !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: error %q lacks %q", c.in, err, c.msg)
		}
	}
	// No GPU at all.
	if _, err := parseDevice("cuda", func() (int, error) { return 0, nil }); !errors.Is(err, ErrDeviceUnavailable) {
		t.Errorf("zero devices: %v", err)
	}
}

// TestParseDeviceSim: "sim" is sim:0 and "sim:N" the Nth simulated
// device; a malformed index is a syntax error.
func TestParseDeviceSim(t *testing.T) {
	for s, want := range map[string]tensor.Device{"sim": tensor.Sim(0), "sim:0": tensor.Sim(0), "sim:3": tensor.Sim(3)} {
		if d, err := ParseDevice(s); err != nil || d != want {
			t.Fatalf("%q: %v %v, want %v", s, d, err, want)
		}
	}
	for _, s := range []string{"sim:", "sim:x", "sim:-1", "sim0"} {
		if _, err := ParseDevice(s); !errors.Is(err, ErrDeviceSyntax) {
			t.Fatalf("%q: %v, want ErrDeviceSyntax", s, err)
		}
	}
}
