package optim

import (
	"math"

	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Small device-agnostic helpers for the optimizer's own buffers. On the
// CPU they touch memory directly, so they work without any kernel and are
// never recorded by a capture; on other devices they go through the
// backend.

// emptyOn allocates a zeroed contiguous tensor on dev.
func emptyOn(dev tensor.Device, dt tensor.DType, shape ...int) *tensor.Tensor {
	t, err := tensor.EmptyOn(dev, dt, shape...)
	if err != nil {
		panic(fmt.Sprintf("optim: allocating %v %v on %v: %v", dt, shape, dev, err))
	}
	if !dev.IsCPU() {
		kernels.For(dev).Fill(t, 0)
	}
	return t
}

// outOn allocates a tensor on dev for an op that writes all of it next
// (ForeachNorm's norms, BinaryScalar's result). Unlike emptyOn it is not
// zeroed first: on a device that would be a Fill launch, one graph node
// per captured step that nothing reads.
func outOn(dev tensor.Device, dt tensor.DType, shape ...int) *tensor.Tensor {
	t, err := tensor.EmptyOn(dev, dt, shape...)
	if err != nil {
		panic(fmt.Sprintf("optim: allocating %v %v on %v: %v", dt, shape, dev, err))
	}
	return t
}

// copyTensor copies src into dst (same element count, any dtypes).
func copyTensor(dst, src *tensor.Tensor) {
	if dst.Device().IsCPU() && src.Device().IsCPU() {
		tensor.CopyInto(dst, src)
		return
	}
	kernels.For(dst.Device()).Copy(dst, src)
}

// cloneTensor returns a contiguous copy of t on t's device.
func cloneTensor(t *tensor.Tensor) *tensor.Tensor {
	if t.Device().IsCPU() {
		return t.Clone()
	}
	out := emptyOn(t.Device(), t.DType(), t.Shape()...)
	copyTensor(out, t)
	return out
}

// fillTensor sets every element of the contiguous tensor t to v.
func fillTensor(t *tensor.Tensor, v float64) {
	if t.Device().IsCPU() {
		t.Fill(v)
		return
	}
	kernels.For(t.Device()).Fill(t, v)
}

// writeScalar stores v into element i of the flat tensor t in place. On
// the CPU it is a plain memory write (not a launch, so a capture never
// records it and a replay reads whatever was written last).
func writeScalar(t *tensor.Tensor, i int, v float64) {
	if t.Device().IsCPU() {
		t.Set(v, i)
		return
	}
	kernels.For(t.Device()).Fill(t.Narrow(0, i, 1), v)
}

// readScalar returns the single element of t. It synchronises on a
// device; it is for accessors, never for the step path.
func readScalar(t *tensor.Tensor) float64 {
	if t.Device().IsCPU() {
		return t.Item()
	}
	host, err := t.Contiguous().ToDevice(tensor.CPU)
	if err != nil {
		return math.NaN()
	}
	return host.Item()
}

// stateDType is the dtype of optimizer state for parameters of dtype dt:
// never less precise than F32 (GoMLX's rule: optimizer state at least as
// precise as the model).
func stateDType(dt tensor.DType) tensor.DType {
	if dt == tensor.F64 {
		return tensor.F64
	}
	return tensor.F32
}
