package autograd

import (
	"sync/atomic"

	"github.com/esper-go/esper/tensor"
)

var (
	noGradDepth    atomic.Int32
	inferenceDepth atomic.Int32
	autocastDType  atomic.Uint32 // tensor.DType; Invalid = off
)

// The modes below (NoGrad, InferenceMode, Autocast) are process-wide,
// not per goroutine: Go has no goroutine-local state. A region in one
// goroutine changes what ops record in every other, so two models must
// not train (or one train while another evaluates) concurrently in one
// process; run them one after another, or in separate processes.

// GradEnabled reports whether ops record nodes for backward.
func GradEnabled() bool { return noGradDepth.Load() == 0 && inferenceDepth.Load() == 0 }

// InInferenceMode reports whether an InferenceMode region is active.
func InInferenceMode() bool { return inferenceDepth.Load() > 0 }

// NoGrad runs f with gradient recording off: ops in f record no nodes and
// save no tensors, and their outputs do not require gradients.
func NoGrad(f func()) {
	noGradDepth.Add(1)
	defer noGradDepth.Add(-1)
	f()
}

// InferenceMode runs f with recording off, like NoGrad, and additionally
// marks the region as inference: layers that behave differently in
// evaluation (dropout, batch-norm statistics) still follow their own
// train/eval flag, but nothing in f may be differentiated later.
func InferenceMode(f func()) {
	inferenceDepth.Add(1)
	defer inferenceDepth.Add(-1)
	f()
}

// Autocast runs f with mixed precision: matmul, linear and convolution
// compute in dt (BF16 or F16) with fp32 accumulation and return dt;
// softmax, log-softmax, layer/group/batch norm, reductions and losses
// compute in F32; other elementwise ops follow type promotion (the
// widest input wins). Regions nest; the innermost wins.
func Autocast(dt tensor.DType, f func()) {
	if dt != tensor.BF16 && dt != tensor.F16 {
		panic("autograd: Autocast wants BF16 or F16, got " + dt.String())
	}
	prev := autocastDType.Swap(uint32(dt))
	defer autocastDType.Store(prev)
	f()
}

// AutocastDType returns the active autocast dtype, or tensor.Invalid.
func AutocastDType() tensor.DType { return tensor.DType(autocastDType.Load()) }
