//go:build cuda

package device

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/cuda"
)

// The cuda build's CUDA devices: those of the driver, each opened as a
// cuda.Backend. (Its twin, nocuda.go, is the build without them.)

// cudaDevices is the number of CUDA devices.
func cudaDevices() (int, error) { return cuda.DeviceCount() }

// openCUDA opens CUDA device i.
func openCUDA(i int) (kernels.Backend, error) { return cuda.NewBackend(i) }
