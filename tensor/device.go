package tensor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// DeviceKind names a family of devices.
type DeviceKind uint8

// Device kinds.
const (
	KindCPU DeviceKind = iota
	KindCUDA
	// KindSim is the strict simulated accelerator: its storage is host
	// memory, but its tensors are device tensors — the host accessors
	// refuse them as they refuse CUDA tensors, crossing to the host is an
	// explicit copy counted as a host sync (HostSyncs), and a backend
	// reaches the elements through BackendView only. It runs on any
	// machine, so that the code above the kernels proves every day that it
	// does not read device tensors on the host.
	KindSim
)

// Device identifies where a tensor's storage lives.
type Device struct {
	Kind  DeviceKind
	Index int
}

// CPU is the host device.
var CPU = Device{Kind: KindCPU}

// CUDA returns the i-th CUDA device.
func CUDA(i int) Device { return Device{Kind: KindCUDA, Index: i} }

// Sim returns the i-th simulated device (each index is a device of its
// own: tensors of sim:0 and sim:1 do not mix).
func Sim(i int) Device { return Device{Kind: KindSim, Index: i} }

// IsCPU reports whether d is the host.
func (d Device) IsCPU() bool { return d.Kind == KindCPU }

// String returns "cpu", "cuda:N" or "sim:N".
func (d Device) String() string {
	switch d.Kind {
	case KindCPU:
		return "cpu"
	case KindSim:
		return fmt.Sprintf("sim:%d", d.Index)
	}
	return fmt.Sprintf("cuda:%d", d.Index)
}

// maxDeviceIndex bounds the N of "cuda:N" and "sim:N".
const maxDeviceIndex = 1 << 10

// The errors of ParseDevice, to match with errors.Is.
var (
	// ErrDeviceSyntax is wrapped by the error of a malformed device name
	// ("cuda0", "cuda:", "cuda:-1", "cuda:01", "sim:x", " cpu", "CPU",
	// "gpu"): PyTorch's ValueError for a device string.
	ErrDeviceSyntax = errors.New("malformed device name")
	// ErrDeviceUnsupported is wrapped by the error of a device type that
	// PyTorch knows and this engine does not run on (meta, xla, xpu, hpu,
	// privateuseone, mps, with or without an index); the error says why.
	ErrDeviceUnsupported = errors.New("unsupported device type")
	// ErrDeviceUnavailable is wrapped by the error of a well-formed
	// device that cannot exist or be used: cpu:N for N > 0 here (there is
	// one CPU), and, from kernels/device's Open and OpenDevice, a CUDA
	// device in a build without CUDA or past the device count.
	ErrDeviceUnavailable = errors.New("device unavailable")
)

// unsupportedDevices are the PyTorch device types ParseDevice refuses
// outright (esper-reference §3.2 "Device validation", G2 Tolaria), with
// why.
var unsupportedDevices = map[string]string{
	"meta":          "meta tensors hold no data and cannot train",
	"xla":           "XLA devices are not supported",
	"xpu":           "Intel XPU devices are not supported",
	"hpu":           "Habana HPU devices are not supported",
	"privateuseone": "privateuseone backends are not supported",
	"mps":           "Apple MPS is not supported in the Go port (use cpu or sim)",
}

// deviceNames is what ParseDevice accepts, for its errors.
const deviceNames = "want cpu, sim, sim:N, cuda or cuda:N"

// ParseDevice parses a device name, the one parser of device names in
// the engine: "cpu" (or "cpu:0"), "sim" (sim:0), "sim:N", "cuda" (cuda:0)
// and "cuda:N", N a decimal index from 0 to 1023 without sign or leading
// zeros. Its errors are one line naming the input and wrap
// ErrDeviceSyntax (a malformed name), ErrDeviceUnsupported (meta, xla,
// xpu, hpu, privateuseone, mps: a device type PyTorch has and this
// engine does not, with the reason) or ErrDeviceUnavailable (cpu:N, N >
// 0). Whether a parsed device exists on this machine and build is not
// the parser's question: kernels/device.Open and OpenDevice answer it.
func ParseDevice(s string) (Device, error) {
	typ, idx, hasIdx := strings.Cut(s, ":")
	if typ == "" || strings.IndexFunc(typ, func(r rune) bool { return r < 'a' || r > 'z' }) >= 0 {
		return Device{}, fmt.Errorf("device %q: %w: %s", s, ErrDeviceSyntax, deviceNames)
	}
	i := 0
	if hasIdx {
		n, err := strconv.Atoi(idx)
		if err != nil || n < 0 || n >= maxDeviceIndex || strconv.Itoa(n) != idx {
			return Device{}, fmt.Errorf("device %q: %w: the index after ':' must be a number from 0 to %d", s, ErrDeviceSyntax, maxDeviceIndex-1)
		}
		i = n
	}
	if why, ok := unsupportedDevices[typ]; ok {
		return Device{}, fmt.Errorf("device %q: %w: %s", s, ErrDeviceUnsupported, why)
	}
	switch typ {
	case "cpu":
		if i != 0 {
			return Device{}, fmt.Errorf("device %q: %w: there is one cpu device (cpu or cpu:0)", s, ErrDeviceUnavailable)
		}
		return CPU, nil
	case "cuda":
		return CUDA(i), nil
	case "sim":
		return Sim(i), nil
	}
	return Device{}, fmt.Errorf("device %q: %w: unknown device type %q (%s)", s, ErrDeviceSyntax, typ, deviceNames)
}

// DeviceMemory is implemented by a non-CPU backend to give tensors storage
// on its device. The CUDA backend registers one with RegisterDeviceMemory.
type DeviceMemory interface {
	// Alloc returns nbytes of device memory. The returned handle is freed
	// by Free (or by the storage's finalizer, as a safety net).
	Alloc(nbytes int) (DevicePtr, error)
	// Free releases memory returned by Alloc.
	Free(p DevicePtr)
	// CopyToDevice copies host bytes to p+off.
	CopyToDevice(p DevicePtr, off int, src []byte) error
	// CopyToHost copies device bytes at p+off into dst.
	CopyToHost(dst []byte, p DevicePtr, off int) error
}

// DevicePtr is an opaque device address.
type DevicePtr uintptr

var (
	devMemMu sync.RWMutex
	devMem   = map[DeviceKind]DeviceMemory{}
)

// RegisterDeviceMemory installs the memory provider for a device kind.
func RegisterDeviceMemory(k DeviceKind, m DeviceMemory) {
	devMemMu.Lock()
	defer devMemMu.Unlock()
	devMem[k] = m
}

func deviceMemory(d Device) (DeviceMemory, error) {
	devMemMu.RLock()
	defer devMemMu.RUnlock()
	m, ok := devMem[d.Kind]
	if !ok {
		return nil, fmt.Errorf("tensor: no memory provider for device %v (build with -tags cuda and run on a GPU machine)", d)
	}
	return m, nil
}
