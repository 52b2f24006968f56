// Package cpu is the pure-Go CPU backend: kernels written in Go (with
// Go-assembly micro-kernels where they pay), a worker pool, and CPU graph
// capture as a recorded launch list over static buffers.
//
// Every method validates its arguments, prepares a launch closure over
// the tensors' storage, and hands it to launch: eagerly it runs at once;
// during capture it is only recorded. Work inside a launch is split with
// parallelFor into ranges whose results do not depend on the split, so
// any GOMAXPROCS gives bitwise identical results. Closures are built at
// preparation time, so replaying a recorded launch allocates nothing.
//
// Importing the package registers the backend for tensor.CPU.
package cpu
