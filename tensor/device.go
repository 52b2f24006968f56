package tensor

import (
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

// ParseDevice parses "cpu", "cuda", "cuda:N", "sim" or "sim:N" (N a
// decimal index below 1024; "cuda" and "sim" are index 0). Whether such a
// device exists is the backend's question (kernels), not the parser's.
func ParseDevice(s string) (Device, error) {
	name, idx, hasIdx := strings.Cut(s, ":")
	var kind DeviceKind
	switch name {
	case "cpu":
		if hasIdx {
			return Device{}, fmt.Errorf("tensor: device %q: the CPU has no index", s)
		}
		return CPU, nil
	case "cuda":
		kind = KindCUDA
	case "sim":
		kind = KindSim
	default:
		return Device{}, fmt.Errorf("tensor: unknown device %q (want cpu, cuda, cuda:N, sim or sim:N)", s)
	}
	if !hasIdx {
		return Device{Kind: kind}, nil
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || i >= maxDeviceIndex || strconv.Itoa(i) != idx {
		return Device{}, fmt.Errorf("tensor: device %q: the index must be a number from 0 to %d", s, maxDeviceIndex-1)
	}
	return Device{Kind: kind, Index: i}, nil
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
