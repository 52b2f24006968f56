//go:build cuda

package cuda

import (
	"testing"

	"github.com/esper-go/esper/kernels/backendtest"
	"github.com/esper-go/esper/tensor"
)

// conformanceOptions are what the CUDA backend computes in: F32, BF16 and
// F16 kernels for every method, and F64 ones (computing in double) for
// the elementwise ops and Reduce, which float64 statistics on the device
// use (PPO's, the trainer's aggregation). None is narrower: the methods
// that stay F32 alone on the device (the optimizers, the foreach ops,
// UnscaleCheck, GradAccumulator, ChannelAxpyer) are the ones the suite
// checks in F64 and F32 only, and the accumulating index ops (IndexAdd,
// ScatterAdd) add with atomics in all three.
var conformanceOptions = backendtest.Options{
	Floats: []tensor.DType{tensor.F32, tensor.BF16, tensor.F16},
	Wide: map[string][]tensor.DType{
		"Unary": {tensor.F64}, "Binary": {tensor.F64}, "BinaryScalar": {tensor.F64},
		"Where": {tensor.F64}, "Clamp": {tensor.F64}, "Reduce": {tensor.F64},
	},
}

// TestConformance runs the conformance suite of kernels.Backend on the
// device: every method and ForeachStepper, eager and replayed from a
// CUDA graph.
func TestConformance(t *testing.T) {
	backendtest.RunAll(t, be, conformanceOptions)
}
