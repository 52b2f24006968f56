// Package tensor holds Esper-Go's n-dimensional array: shape, dtype,
// device, storage and views, plus creation, copies and casts. Interop
// with gorgonia.org/tensor is in the subpackage tensor/gorgonia, so that
// importing tensor costs no third-party module.
//
// A Tensor is a strided view over a Storage. Reshape of a contiguous
// tensor, Slice (Narrow), Permute/Transpose, Expand, Squeeze and Unsqueeze
// return views that share storage with their source; Reshape of a
// non-contiguous tensor returns a contiguous copy (documented on Reshape).
// Contiguous returns the tensor itself when it already is contiguous.
//
// The package does no math beyond copies and casts: arithmetic lives in
// package kernels and its backends, and differentiation in package
// autograd.
//
// Storage is host memory (Go slices) for the CPU device. Other devices
// plug in through the DeviceMemory interface (the CUDA backend registers
// one); host-side accessors such as F32 panic with a clear message when
// called on a tensor that does not live on the CPU.
package tensor
