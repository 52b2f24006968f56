// Package cpu is the pure-Go CPU backend: kernels written in Go (with
// Go-assembly micro-kernels where they pay), a worker pool, and CPU graph
// capture as a recorded launch list over static buffers.
//
// The op kernels sit in the files of their kernels family, under the
// same names as in kernels and kernels/cuda: elementwise.go (with
// elementwise_copy.go for Fill and Copy, elementwise_axpy.go for
// ChannelAxpy), reduce.go, matmul.go, conv.go (conv_direct.go,
// conv_dwgrad.go), pool.go, softmax.go, norm.go (norm_rows.go), index.go,
// segment.go, shape.go, random.go, optim.go (optim_foreach.go) and
// capture.go. The runtime they share: workers.go (the worker pool and
// parallelFor), staging.go (half-precision operands staged through
// float32), strided.go (strided walks), scratch.go (pooled scratch),
// eager.go (fast paths taken when not capturing) and check.go (argument
// checks; the shape rules every backend shares are in kernels). The
// micro-kernels keep their own names (gemm, tinygemm, pack, vdot, vexp,
// gelu, binary, dconv, and the *_amd64.s of norm, pool and optim).
//
// Every method validates its arguments, prepares a launch closure over
// the tensors' storage, and hands it to launch: eagerly it runs at once;
// during capture it is only recorded. Work inside a launch is split with
// parallelFor into ranges whose results do not depend on the split, so
// any GOMAXPROCS gives bitwise identical results. Closures are built at
// preparation time, so replaying a recorded launch allocates nothing.
//
// Convolutions take one of three routes, chosen per call from the shape:
// the direct kernel for float32 stride-1 convolutions with AVX-512 and
// enough output channels (conv_direct.go: the GEMM micro-kernel reads its
// B rows in place from a zero-padded copy of each sample's planes; the
// input gradient runs the same way over a transposed geometry, the weight
// gradient in conv_dwgrad.go), dot products for small weight gradients,
// and im2col + GEMM otherwise (conv.go). Batch norm, ReLU, max pooling and the common
// binary ops have AVX2/AVX-512 row kernels (norm_amd64.s, pool_amd64.s,
// binary_amd64.s) with Go loops for tails and for builds without them
// (-tags purego).
//
// Importing the package registers the backend for tensor.CPU.
package cpu
