//go:build cuda

package cuda

import (
	"strings"
	"testing"
)

// TestKernelsLoadFromCubins: on an sm_90 GPU (H100, H200) every module
// loads from its cubin — no driver compile — unless ESPER_CUDA_CUBIN=off
// says otherwise; elsewhere every module loads from PTX. The rest of the
// suite then runs on the kernels so loaded.
func TestKernelsLoadFromCubins(t *testing.T) {
	code := dev.KernelCode()
	t.Logf("%s (%s): %s", dev.name, dev.arch, code)
	switch {
	case cubinOff.Load():
		if !strings.Contains(code, "ESPER_CUDA_CUBIN=off") || strings.Contains(code, "cubins") {
			t.Errorf("ESPER_CUDA_CUBIN=off, yet %q", code)
		}
	case dev.arch == "sm_90":
		if strings.Contains(code, "PTX") {
			t.Errorf("an sm_90 device loaded modules from PTX: %s", code)
		}
	default:
		if strings.Contains(code, "cubins") {
			t.Errorf("a %s device loaded cubins: %s", dev.arch, code)
		}
	}
}
