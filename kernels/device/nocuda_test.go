//go:build !cuda

package device_test

import (
	"errors"
	"testing"

	"github.com/esper-go/esper/kernels/device"
)

// TestOpenCUDAWithoutTheTag: a build without the cuda tag says how to
// get CUDA devices, naming the device as given.
func TestOpenCUDAWithoutTheTag(t *testing.T) {
	for _, name := range []string{"cuda", "cuda:1"} {
		_, err := device.Open(name)
		if !errors.Is(err, device.ErrUnavailable) {
			t.Fatalf("Open(%q) error %v, want one wrapping ErrUnavailable", name, err)
		}
		want := name + ": this build has no CUDA support (build with -tags cuda"
		if got := err.Error(); len(got) < len(want) || got[:len(want)] != want {
			t.Errorf("Open(%q) error %q, want it to start %q", name, got, want)
		}
	}
}
