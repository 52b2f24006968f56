package device_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/kernels/sim"
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
	for _, name := range []string{"", "cuda0", "cuda:", "cuda:-1", "cuda:x", "cuda:01", " cpu", "CPU", "gpu", "cuda:1:2", "sim:x", "sim:", "sim:+1"} {
		if _, err := device.Parse(name); !errors.Is(err, device.ErrSyntax) {
			t.Errorf("Parse(%q) error %v, want one wrapping ErrSyntax", name, err)
		}
	}
	for _, name := range []string{"mps", "xla", "meta:0"} {
		if _, err := device.Parse(name); !errors.Is(err, device.ErrUnsupported) {
			t.Errorf("Parse(%q) error %v, want one wrapping ErrUnsupported", name, err)
		}
	}
	if _, err := device.Parse("cpu:1"); !errors.Is(err, device.ErrUnavailable) {
		t.Errorf("Parse(cpu:1) error %v, want one wrapping ErrUnavailable", err)
	}
	// Parse is tensor.ParseDevice: the same device, the same error.
	for _, name := range []string{"cpu", "sim:3", "cuda:2", "cuda0", "mps", "cpu:1"} {
		d1, e1 := device.Parse(name)
		d2, e2 := tensor.ParseDevice(name)
		if d1 != d2 || fmt.Sprint(e1) != fmt.Sprint(e2) {
			t.Errorf("Parse(%q) = %v, %v; tensor.ParseDevice %v, %v", name, d1, e1, d2, e2)
		}
	}
}

// TestOpenErrors: Open refuses what Parse refuses, with the same
// sentinel, and names the device as given.
func TestOpenErrors(t *testing.T) {
	for name, want := range map[string]error{"sim:x": device.ErrSyntax, "mps": device.ErrUnsupported, "cpu:1": device.ErrUnavailable} {
		_, err := device.Open(name)
		if !errors.Is(err, want) || !strings.Contains(err.Error(), name) {
			t.Errorf("Open(%q) error %v, want one wrapping %v naming %q", name, err, want, name)
		}
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

// ExampleOpened prints the line esper's commands print once a device is
// open: on a GPU it also says where the kernels' machine code came from
// (for example "(13 modules from sm_90 cubins)").
func ExampleOpened() {
	t0 := time.Now()
	b, err := device.Open("sim")
	if err != nil {
		fmt.Println(err)
		return
	}
	line := device.Opened(b.Device(), b, time.Since(t0))
	fmt.Println(strings.HasPrefix(line, "opened sim:0 in "), strings.HasSuffix(line, " s"))
	// Output: true true
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

// codeBackend is a backend that says where its kernels came from.
type codeBackend struct {
	kernels.Backend
	code string
}

func (c codeBackend) KernelCode() string { return c.code }

// TestOpenedLine: the opened line gives the device and the time Open
// took, and the kernels' origin where the backend says it.
func TestOpenedLine(t *testing.T) {
	be, err := device.Open("cpu")
	require.NoError(t, err)
	require.Equal(t, "opened cpu in 1.5 s", device.Opened(tensor.CPU, be, 1500*time.Millisecond))
	require.Equal(t, "opened cuda:0 in 0.3 s (13 modules from sm_90 cubins)",
		device.Opened(tensor.CUDA(0), codeBackend{code: "13 modules from sm_90 cubins"}, 300*time.Millisecond))
	require.Equal(t, "opened cuda:0 in 0.3 s", device.Opened(tensor.CUDA(0), codeBackend{}, 300*time.Millisecond))
}

// TestOpenSimLaunchBound: ESPER_SIM_LAUNCH_BOUND makes the opened sim
// backend launch-bound (on) or not (off, unset); another value is an
// error naming the variable.
func TestOpenSimLaunchBound(t *testing.T) {
	t.Cleanup(func() { sim.Default().SetLaunchBound(false) })
	for _, c := range []struct {
		v    string
		want bool
	}{{"on", true}, {"off", false}, {"", false}} {
		t.Setenv(device.SimLaunchBoundEnv, c.v)
		b, err := device.Open("sim")
		require.NoError(t, err, "%q", c.v)
		require.Equal(t, c.want, b.(kernels.LaunchBounder).LaunchBound(), "%q", c.v)
	}
	t.Setenv(device.SimLaunchBoundEnv, "yes")
	_, err := device.Open("sim")
	require.ErrorContains(t, err, "ESPER_SIM_LAUNCH_BOUND=\"yes\": want on or off")
}
