// Package device opens a compute device by name: Open("cpu"),
// Open("sim:1"), Open("cuda"), Open("cuda:1") return the kernels.Backend
// of that device, opening and registering it (kernels.Register) the
// first time, so that tensors on it work everywhere. Names are parsed by
// tensor.ParseDevice (Parse here); this package answers whether the
// device exists in this build and on this machine. It is the only
// importer of kernels/cuda (in a file built with the cuda tag; without
// it, CUDA names give an error that says how to get one). Programs, the
// CLI and the benchmarks open their devices here.
package device

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/esper-go/esper/kernels"
	_ "github.com/esper-go/esper/kernels/cpu" // registers the CPU backend
	"github.com/esper-go/esper/kernels/sim"
	"github.com/esper-go/esper/tensor"
)

// The errors of Parse, Open and OpenDevice, to match with errors.Is:
// tensor.ParseDevice's sentinels under this package's names.
var (
	// ErrSyntax is wrapped by the errors of a malformed device name
	// (tensor.ErrDeviceSyntax).
	ErrSyntax = tensor.ErrDeviceSyntax
	// ErrUnsupported is wrapped by the errors of a device type the
	// engine does not run on, such as mps (tensor.ErrDeviceUnsupported).
	ErrUnsupported = tensor.ErrDeviceUnsupported
	// ErrUnavailable matches the errors of a well-formed device this
	// process cannot use: a build without its backend, an index past the
	// device count, a second device of a kind of which one is open, cpu:N
	// for N > 0 (tensor.ErrDeviceUnavailable).
	ErrUnavailable = tensor.ErrDeviceUnavailable
)

// unavailable is an error matching ErrUnavailable whose message is the
// device's name and why.
type unavailable struct{ msg string }

func (e *unavailable) Error() string        { return e.msg }
func (e *unavailable) Is(target error) bool { return target == ErrUnavailable }

func unavailablef(format string, args ...any) error {
	return &unavailable{fmt.Sprintf(format, args...)}
}

// Parse parses a device name with tensor.ParseDevice, the one parser of
// device names (its rules and errors: "cpu", "cpu:0", "sim", "sim:N",
// "cuda", "cuda:N"). It is here so that a program that opens its device
// with this package needs no other; whether the device exists is Open's
// and OpenDevice's question.
func Parse(name string) (tensor.Device, error) { return tensor.ParseDevice(name) }

// Open returns the backend of the device named (Parse's names), opening
// and registering it when it is not yet: see OpenDevice. Its errors name
// the device as given ("cuda: this build has no CUDA support (build
// with -tags cuda ...)", "cuda:7: only 1 device").
func Open(name string) (kernels.Backend, error) {
	d, err := Parse(name)
	if err != nil {
		return nil, err
	}
	return open(d, name)
}

// mu serialises the opening of devices.
var mu sync.Mutex

// OpenDevice returns the backend of d, opening it and registering it
// with kernels.Register when no backend serves d's kind yet. The
// registry keeps one backend per kind, so one CUDA device is open per
// process: asking for another is an error wrapping ErrUnavailable, as is
// a CUDA device in a build without the cuda tag or past the device
// count. A backend registered by other means (cuda.NewBackend(i) and
// Register) is returned when it serves d.
func OpenDevice(d tensor.Device) (kernels.Backend, error) { return open(d, d.String()) }

// open is OpenDevice with the device's name for the messages.
func open(d tensor.Device, name string) (kernels.Backend, error) {
	mu.Lock()
	defer mu.Unlock()
	if d.Kind == tensor.KindSim {
		// One backend serves every simulated device (tensors of two
		// indices still do not mix: the backend checks each op).
		on, err := simLaunchBound()
		if err != nil {
			return nil, err
		}
		sim.Default().SetLaunchBound(on)
		return sim.Default(), nil
	}
	if b, err := kernels.Lookup(tensor.Device{Kind: d.Kind}); err == nil {
		if b.Device() == d {
			return b, nil
		}
		return nil, unavailablef("%s: %v is open, and a process uses one device of a kind", name, b.Device())
	}
	switch d.Kind {
	case tensor.KindCUDA:
		n, err := cudaCount()
		if err != nil {
			return nil, unavailablef("%s: %v", name, err)
		}
		if n == 0 {
			return nil, unavailablef("%s: this machine has no CUDA device", name)
		}
		if d.Index >= n {
			return nil, unavailablef("%s: only %d device%s", name, n, plural(n))
		}
		b, err := cudaOpen(d.Index)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		kernels.Register(b)
		return b, nil
	}
	return nil, unavailablef("%s: no backend serves this kind of device", name)
}

// cudaCount and cudaOpen are the build's CUDA device count and opener
// (cuda.go with the cuda tag, nocuda.go without), variables so that the
// tests can stand in a machine with a given number of GPUs.
var (
	cudaCount = cudaDevices
	cudaOpen  = openCUDA
)

// Opened is the line esper's commands print once a device is open: how
// long Open took (on a GPU machine's first start the driver may compile
// kernels for its GPU) and, where the backend says it (CUDA), where its
// kernels' machine code came from — for example "opened cuda:0 in 0.4 s
// (13 modules from sm_90 cubins)".
func Opened(d tensor.Device, be kernels.Backend, took time.Duration) string {
	line := fmt.Sprintf("opened %v in %.1f s", d, took.Seconds())
	if c, ok := be.(interface{ KernelCode() string }); ok && c.KernelCode() != "" {
		line += " (" + c.KernelCode() + ")"
	}
	return line
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// OpenList parses and opens distinct devices ("sim:0", "sim:1"), in
// order: a malformed or unusable name is Parse's or Open's error, and a
// device named twice ("sim:0,sim" names sim:0 twice) is an error naming
// it.
func OpenList(names []string) ([]tensor.Device, error) {
	var devs []tensor.Device
	for _, name := range names {
		d, err := Parse(name)
		if err == nil {
			_, err = open(d, name)
		}
		if err != nil {
			return nil, err
		}
		if slices.Contains(devs, d) {
			return nil, fmt.Errorf("%v is given twice", d)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// SimLaunchBoundEnv names the variable that makes an opened sim device
// launch-bound (sim.Backend.SetLaunchBound): "on" or "off" (the
// default, as when unset).
const SimLaunchBoundEnv = "ESPER_SIM_LAUNCH_BOUND"

// simLaunchBound reads SimLaunchBoundEnv: an error for a value other
// than on, off or empty.
func simLaunchBound() (bool, error) {
	switch v := os.Getenv(SimLaunchBoundEnv); v {
	case "", "off":
		return false, nil
	case "on":
		return true, nil
	default:
		return false, fmt.Errorf("kernels/device: %s=%q: want on or off", SimLaunchBoundEnv, v)
	}
}
