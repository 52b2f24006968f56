//go:build !cuda

package device

import (
	"errors"

	"github.com/esper-go/esper/kernels"
)

// The build without the cuda tag: no CUDA devices. (Its twin, cuda.go,
// opens them.)

// errNoCUDA says how to get CUDA devices.
var errNoCUDA = errors.New("this build has no CUDA support (build with -tags cuda, and run on a GPU machine; GPU.md)")

// cudaDevices is the number of CUDA devices: none in this build.
func cudaDevices() (int, error) { return 0, errNoCUDA }

// openCUDA is never reached: there are no devices to open.
func openCUDA(int) (kernels.Backend, error) { return nil, errNoCUDA }
