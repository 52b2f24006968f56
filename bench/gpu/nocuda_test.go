//go:build !cuda

package gpu

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/tensor"
)

// TestRunWithoutTheTag: in a build without the cuda tag, Run opens the
// device through kernels/device, whose error says how to get CUDA.
func TestRunWithoutTheTag(t *testing.T) {
	var out, errb bytes.Buffer
	err := Run(tensor.CUDA(0), "W6", bench.DefaultConfig(), &out, &errb)
	if !errors.Is(err, device.ErrUnavailable) || !strings.Contains(err.Error(), "-tags cuda") {
		t.Fatalf("Run on cuda:0 without the tag: %v", err)
	}
}
