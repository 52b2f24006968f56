// Package device opens a compute device by name: Open("cpu"),
// Open("cuda"), Open("cuda:1") return the kernels.Backend of that device,
// opening and registering it (kernels.Register) the first time, so that
// tensors on it work everywhere. It is the one place that parses device
// names and the only importer of kernels/cuda (in a file built with the
// cuda tag; without it, CUDA names give an error that says how to get
// one). Programs, the CLI and the benchmarks open their devices here.
package device

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/esper-go/esper/kernels"
	_ "github.com/esper-go/esper/kernels/cpu" // registers the CPU backend
	"github.com/esper-go/esper/kernels/sim"
	"github.com/esper-go/esper/tensor"
)

// ErrSyntax is wrapped by the errors of a malformed device name.
var ErrSyntax = errors.New("malformed device name")

// ErrUnavailable matches (errors.Is) the errors of a well-formed device
// this process cannot use: a build without its backend, an index past
// the device count, a second device of a kind of which one is open.
var ErrUnavailable = errors.New("device unavailable")

// unavailable is an error matching ErrUnavailable whose message is the
// device's name and why.
type unavailable struct{ msg string }

func (e *unavailable) Error() string        { return e.msg }
func (e *unavailable) Is(target error) bool { return target == ErrUnavailable }

func unavailablef(format string, args ...any) error {
	return &unavailable{fmt.Sprintf(format, args...)}
}

// kinds are the device kinds by name.
var kinds = map[string]tensor.DeviceKind{"cpu": tensor.KindCPU, "cuda": tensor.KindCUDA, "sim": tensor.KindSim}

// Parse parses a device name: "cpu" (or "cpu:0"), "cuda" (device 0),
// "cuda:N", "sim" (sim:0) or "sim:N" (the strict simulated devices of
// kernels/sim). A malformed name ("cuda0", "cuda:", "cuda:-1", "sim:x",
// " cpu", "gpu") is an error wrapping ErrSyntax.
func Parse(name string) (tensor.Device, error) {
	typ, idx, hasIdx := strings.Cut(name, ":")
	kind, ok := kinds[typ]
	if !ok {
		return tensor.Device{}, fmt.Errorf("device %q: %w: want cpu, cuda, cuda:N, sim or sim:N", name, ErrSyntax)
	}
	i := 0
	if hasIdx {
		n, err := strconv.Atoi(idx)
		if err != nil || n < 0 || idx != strconv.Itoa(n) {
			return tensor.Device{}, fmt.Errorf("device %q: %w: the index after ':' must be a non-negative integer", name, ErrSyntax)
		}
		i = n
	}
	if kind == tensor.KindCPU {
		if i != 0 {
			return tensor.Device{}, unavailablef("%s: there is one cpu device (cpu or cpu:0)", name)
		}
		return tensor.CPU, nil
	}
	return tensor.Device{Kind: kind, Index: i}, nil
}

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
		n, err := cudaDevices()
		if err != nil {
			return nil, unavailablef("%s: %v", name, err)
		}
		if d.Index >= n {
			return nil, unavailablef("%s: only %d device%s", name, n, plural(n))
		}
		b, err := openCUDA(d.Index)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		kernels.Register(b)
		return b, nil
	}
	return nil, unavailablef("%s: no backend serves this kind of device", name)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
