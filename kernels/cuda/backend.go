//go:build cuda

package cuda

import (
	"sync/atomic"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Backend is the CUDA implementation of kernels.Backend over one Device.
// Every method checks its operands and enqueues its kernels on the
// device's stream, or panics with a "cuda: <Op>: ..." message naming the
// op and the shapes on misuse, as the CPU backend does. An operation or
// dtype the device has no kernel for is such a panic too: there is no
// silent CPU fallback (ARCHITECTURE.md).
//
// Capture maps onto the stream's capture: between BeginCapture and
// EndCapture nothing runs, the launches are recorded into a CUDA graph,
// and the kernels.Graph that EndCapture returns replays them with one
// graph launch. A capture belongs to the goroutine that began it.
type Backend struct {
	d    *Device
	prec atomic.Int32 // Precision of F32 matmuls and convolutions
}

var (
	_ kernels.Backend        = (*Backend)(nil)
	_ kernels.ForeachStepper = (*Backend)(nil)
)

// T is the tensor type of kernels.Backend's methods.
type T = kernels.T

// NewBackend opens CUDA device ordinal (see Open) and returns its
// backend. It does not register it; call Register for that.
func NewBackend(ordinal int) (*Backend, error) {
	d, err := Open(ordinal)
	if err != nil {
		return nil, err
	}
	return &Backend{d: d}, nil
}

// Register makes b the backend of tensors on tensor.KindCUDA
// (kernels.Register), so that autograd, nn and optim run on it.
func (b *Backend) Register() { kernels.Register(b) }

// CUDADevice returns the device b computes on.
func (b *Backend) CUDADevice() *Device { return b.d }

// must panics with err, the misuse message of the failed operation.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// Name implements kernels.Backend.
func (b *Backend) Name() string { return "cuda" }

// Device implements kernels.Backend.
func (b *Backend) Device() tensor.Device { return tensor.CUDA(b.d.ordinal) }

// KernelCode is the Device's KernelCode: where the kernels' machine code
// came from (device.Opened prints it).
func (b *Backend) KernelCode() string { return b.d.KernelCode() }

// precision is the F32 matmul precision set by SetMatmulPrecision.
func (b *Backend) precision() Precision { return Precision(b.prec.Load()) }
