package gpu

import (
	"bytes"
	"strings"
	"testing"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/tensor"
)

// TestNeedsEveryWorkload: every GPU workload says which optional
// interfaces of kernels it uses.
func TestNeedsEveryWorkload(t *testing.T) {
	for _, id := range gpuWorkloads {
		if _, ok := needs[id]; !ok {
			t.Errorf("needs has no entry for %s", id)
		}
	}
}

// TestInterfacesMissing: a backend without the optional interfaces a
// workload needs is one clear error naming the interface, before anything
// runs (the sim backend has none of the stream interfaces).
func TestInterfacesMissing(t *testing.T) {
	be, err := device.Open("sim")
	if err != nil {
		t.Fatal(err)
	}
	g := &gpuBench{dev: tensor.Sim(0), be: be}
	err = g.interfaces([]string{"W8"})
	if err == nil || !strings.Contains(err.Error(), "the sim backend of sim:0 has no kernels.DeviceDescriber, which W8 needs") {
		t.Fatalf("interfaces(W8) on sim: %v", err)
	}
}

// TestRunRefusesBeforeOpening: Run checks the device kind and the
// workload before it opens anything.
func TestRunRefusesBeforeOpening(t *testing.T) {
	var out, errb bytes.Buffer
	for _, c := range []struct {
		dev      tensor.Device
		workload string
		msg      string
	}{
		{tensor.Sim(0), "W1", "is not a CUDA device"},
		{tensor.CUDA(0), "W3", "unknown workload"},
	} {
		err := Run(c.dev, c.workload, bench.DefaultConfig(), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Run(%v, %s): %v, want an error saying %q", c.dev, c.workload, err, c.msg)
		}
	}
}
