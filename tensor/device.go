package tensor

import (
	"fmt"
	"sync"
)

// DeviceKind names a family of devices.
type DeviceKind uint8

// Device kinds.
const (
	KindCPU DeviceKind = iota
	KindCUDA
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

// IsCPU reports whether d is the host.
func (d Device) IsCPU() bool { return d.Kind == KindCPU }

// String returns "cpu" or "cuda:N".
func (d Device) String() string {
	if d.Kind == KindCPU {
		return "cpu"
	}
	return fmt.Sprintf("cuda:%d", d.Index)
}

// ParseDevice parses "cpu", "cuda" or "cuda:N".
func ParseDevice(s string) (Device, error) {
	switch s {
	case "cpu":
		return CPU, nil
	case "cuda":
		return CUDA(0), nil
	}
	var i int
	if _, err := fmt.Sscanf(s, "cuda:%d", &i); err == nil && i >= 0 {
		return CUDA(i), nil
	}
	return Device{}, fmt.Errorf("tensor: unknown device %q (want cpu, cuda or cuda:N)", s)
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
