package device_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/tensor"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name string
		want tensor.Device
	}{{"cpu", tensor.CPU}, {"cpu:0", tensor.CPU}, {"cuda", tensor.CUDA(0)}, {"cuda:0", tensor.CUDA(0)}, {"cuda:3", tensor.CUDA(3)}, {"sim", tensor.Sim(0)}, {"sim:2", tensor.Sim(2)}} {
		d, err := device.Parse(c.name)
		if err != nil || d != c.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.name, d, err, c.want)
		}
	}
	for _, name := range []string{"", "cuda0", "cuda:", "cuda:-1", "cuda:x", "cuda:01", " cpu", "CPU", "gpu", "cuda:1:2", "mps", "sim:x", "sim:", "sim:+1"} {
		if _, err := device.Parse(name); !errors.Is(err, device.ErrSyntax) {
			t.Errorf("Parse(%q) error %v, want one wrapping ErrSyntax", name, err)
		}
	}
	if _, err := device.Parse("cpu:1"); !errors.Is(err, device.ErrUnavailable) {
		t.Errorf("Parse(cpu:1) error %v, want one wrapping ErrUnavailable", err)
	}
}

func TestOpenCPU(t *testing.T) {
	for _, name := range []string{"cpu", "cpu:0"} {
		b, err := device.Open(name)
		if err != nil || b.Name() != "cpu" || b.Device() != tensor.CPU {
			t.Fatalf("Open(%q) = %v, %v", name, b, err)
		}
	}
	if _, err := device.Open("cuda0"); !errors.Is(err, device.ErrSyntax) {
		t.Fatalf("Open(cuda0) error %v, want one wrapping ErrSyntax", err)
	}
}

// ExampleOpen opens the CPU; a CUDA device opens the same way in a build
// with the cuda tag, on a GPU machine.
func ExampleOpen() {
	b, err := device.Open("cpu")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(b.Name(), b.Device())
	// Output: cpu cpu
}

// TestOpenSim: every sim index opens the one sim backend.
func TestOpenSim(t *testing.T) {
	for _, name := range []string{"sim", "sim:0", "sim:3"} {
		b, err := device.Open(name)
		if err != nil || b.Name() != "sim" {
			t.Fatalf("Open(%q) = %v, %v", name, b, err)
		}
	}
}
