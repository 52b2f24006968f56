//go:build !cuda

package main

import (
	"fmt"
	"io"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/tensor"
)

// benchDevice is `esper bench --device cuda` in a binary built without
// the cuda tag, which has no CUDA backend: it says how to get one.
func benchDevice(dev tensor.Device, workload string, c bench.Config, stdout, stderr io.Writer) error {
	return fmt.Errorf("--device %v: this esper was built without -tags cuda, so it has no CUDA backend; see GPU.md (make gpu-bundle builds the GPU binaries)", dev)
}
