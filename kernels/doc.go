// Package kernels defines the Backend interface — every primitive the
// engine needs, for every dtype it supports, as one small interface per
// op family — the checks every backend shares, and the registry that
// maps a device to its backend.
//
// Each op family has one file, under the same name in kernels/cpu,
// kernels/cuda and kernels/cuda/src: elementwise, reduce, matmul, conv,
// pool, softmax, norm, index, segment, shape, random, optim and capture.
// A family file holds the family's interface (ConvFamily), its params
// (Conv2dParams), its optional fused interfaces (ConvAffineActer) and its
// checks (CheckConv2d); geometry.go holds the axis and broadcast rules
// the checks share. kernels/backendtest is the conformance suite every
// backend runs; kernels/device opens a device by name ("cpu", "cuda:1")
// and registers its backend here (registry.go).
//
// Backends follow one convention: the caller allocates every output
// (dst, and any saved statistics) with the right shape, dtype and device,
// and the backend fills it. Keeping allocation out of the backend is what
// lets a captured step replay over static buffers. Inputs must be
// contiguous unless a method says otherwise (Copy takes any strides, and
// Binary/Where take broadcast views). A shape or dtype mismatch is a
// programming error and panics with a message naming the op and the
// shapes: a backend checks its arguments with the Check functions of
// this package (which return errors and allocate nothing when they pass),
// adds what only it knows (device, contiguity, the dtypes it has kernels
// for), then runs kernels that do not check again.
//
// Float kernels compute in float32 for F32, BF16 and F16 tensors (half
// types are converted on load and rounded on store) and in float64 for
// F64. Reductions use a fixed chunking that does not depend on the number
// of workers, so results are bitwise reproducible for any GOMAXPROCS.
package kernels
