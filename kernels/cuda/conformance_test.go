//go:build cuda

package cuda

import (
	"testing"

	"github.com/esper-go/esper/kernels/backendtest"
	"github.com/esper-go/esper/tensor"
)

// conformanceOptions are what the CUDA backend computes in: F32 and BF16
// kernels, the accumulating index ops (atomics) in F32 alone.
var conformanceOptions = backendtest.Options{
	Floats: []tensor.DType{tensor.F32, tensor.BF16},
	Narrow: map[string][]tensor.DType{
		"IndexAdd":   {tensor.F32},
		"ScatterAdd": {tensor.F32},
	},
}

// TestConformance runs the conformance suite of kernels.Backend on the
// device: every method and ForeachStepper, eager and replayed from a
// CUDA graph.
func TestConformance(t *testing.T) {
	backendtest.RunAll(t, be, conformanceOptions)
}
