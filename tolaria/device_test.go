package tolaria

import (
	"errors"
	"fmt"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// TestParseDeviceIsTensors: ParseDevice is tensor.ParseDevice (the one
// parser), and tolaria's sentinels are tensor's, so that the G2 error
// classes match with either name.
func TestParseDeviceIsTensors(t *testing.T) {
	for _, s := range []string{"cpu", "cpu:0", "sim", "sim:3", "cuda", "cuda:1", "cuda0", "cuda:", "cuda:-1", "sim:x", "", "tpu", "mps", "xpu:0", "meta", "cpu:1"} {
		d1, e1 := ParseDevice(s)
		d2, e2 := tensor.ParseDevice(s)
		if d1 != d2 || fmt.Sprint(e1) != fmt.Sprint(e2) {
			t.Errorf("ParseDevice(%q) = %v, %v; tensor.ParseDevice %v, %v", s, d1, e1, d2, e2)
		}
	}
	for s, want := range map[string]error{"cuda0": ErrDeviceSyntax, "sim:x": ErrDeviceSyntax, "mps": ErrDeviceUnsupported, "xla": ErrDeviceUnsupported, "cpu:1": ErrDeviceUnavailable} {
		if _, err := ParseDevice(s); !errors.Is(err, want) {
			t.Errorf("ParseDevice(%q) error %v, want one wrapping %v", s, err, want)
		}
	}
	for _, c := range []struct{ ours, tensors error }{
		{ErrDeviceSyntax, tensor.ErrDeviceSyntax}, {ErrDeviceUnsupported, tensor.ErrDeviceUnsupported}, {ErrDeviceUnavailable, tensor.ErrDeviceUnavailable},
	} {
		if c.ours != c.tensors {
			t.Errorf("tolaria's %v is not tensor's", c.ours)
		}
	}
}
