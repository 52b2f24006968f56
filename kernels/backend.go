package kernels

import "github.com/esper-go/esper/tensor"

// T is a shorthand used throughout the interfaces.
type T = tensor.Tensor

// Backend is the set of primitives a device provides: one interface per
// op family, each in the file of its name (elementwise.go, reduce.go,
// matmul.go, conv.go, pool.go, softmax.go, norm.go, index.go,
// segment.go, shape.go, random.go, optim.go, capture.go) with its params,
// its optional fused interfaces and the checks every backend shares. The
// backends keep the same file names (kernels/cpu, kernels/cuda and its
// src/*.cu), so an op is found under one name everywhere.
//
// See the package doc for the conventions (caller-allocated outputs,
// contiguous inputs, panics on shape mismatch). Methods that take an
// optional tensor accept nil. kernels/backendtest checks a backend
// against a float64 reference, every method and optional interface.
type Backend interface {
	// Name is a short identifier ("cpu", "cuda").
	Name() string
	// Device is the device whose tensors this backend computes on.
	Device() tensor.Device

	ElementwiseFamily
	ReduceFamily
	MatMulFamily
	ConvFamily
	PoolFamily
	SoftmaxFamily
	NormFamily
	IndexFamily
	SegmentFamily
	ShapeFamily
	RandomFamily
	OptimFamily
	CaptureFamily
}
