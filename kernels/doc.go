// Package kernels defines the Backend interface — every primitive the
// engine needs, for every dtype it supports — and the registry that maps a
// device to its backend.
//
// Backends follow one convention: the caller allocates every output
// (dst, and any saved statistics) with the right shape, dtype and device,
// and the backend fills it. Keeping allocation out of the backend is what
// lets a captured step replay over static buffers. Inputs must be
// contiguous unless a method says otherwise (Copy takes any strides, and
// Binary/Where take broadcast views). A shape or dtype mismatch is a
// programming error and panics with a message naming the op and the
// shapes.
//
// Float kernels compute in float32 for F32, BF16 and F16 tensors (half
// types are converted on load and rounded on store) and in float64 for
// F64. Reductions use a fixed chunking that does not depend on the number
// of workers, so results are bitwise reproducible for any GOMAXPROCS.
package kernels
