package cpu_test

import (
	"testing"

	"github.com/esper-go/esper/kernels/backendtest"
	"github.com/esper-go/esper/kernels/cpu"
)

// TestConformance runs the conformance suite of kernels.Backend on the
// CPU backend: every method and optional interface in every float dtype,
// eager and captured.
func TestConformance(t *testing.T) {
	backendtest.RunAll(t, cpu.Default(), backendtest.Options{})
}
