//go:build cuda

package main

// The one place esper opens a device, and the one file of cmd/esper that
// imports kernels/cuda (its twin, device_nocuda.go, says how to get a
// CUDA build).

import (
	"io"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/bench/gpu"
	"github.com/esper-go/esper/kernels/cuda"
	"github.com/esper-go/esper/tensor"
)

// benchDevice is `esper bench --device cuda[:N]`: the GPU workloads on
// dev, opened by openCUDA once the workload and flags are checked.
func benchDevice(dev tensor.Device, workload string, c bench.Config, stdout, stderr io.Writer) error {
	return gpu.Run(dev, workload, c, openCUDA, stdout, stderr)
}

// openCUDA opens dev's CUDA backend and registers it as the backend of
// dev's tensors.
func openCUDA(dev tensor.Device) (*cuda.Backend, error) {
	be, err := cuda.NewBackend(dev.Index)
	if err != nil {
		return nil, err
	}
	be.Register()
	return be, nil
}
