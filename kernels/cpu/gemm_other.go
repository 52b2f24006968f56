//go:build !amd64 || purego

package cpu

// sgemmAsm is the float32 assembly micro-kernel: none on this build.
var sgemmAsm sgemmKernel

// sgemmKernels lists the float32 assembly micro-kernels: none on this build.
var sgemmKernels []sgemmKernel
