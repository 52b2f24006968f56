//go:build cuda

package cuda

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
)

// The stream interfaces of kernels (kernels/stream.go) on the CUDA
// backend: each method is the Device's (or the Timer's, the Stager's, the
// Graph's) of the same name, so that code above kernels (bench/gpu, the
// CLI) reaches them through a kernels.Backend from kernels/device.Open,
// without importing this package.

var (
	_ kernels.DeviceDescriber = (*Backend)(nil)
	_ kernels.ByteCopier      = (*Backend)(nil)
	_ kernels.EventTimers     = (*Backend)(nil)
	_ kernels.Stagers         = (*Backend)(nil)
	_ kernels.EventTimer      = (*Timer)(nil)
	_ kernels.Stager          = (*Stager)(nil)
	_ kernels.InlineStager    = (*Stager)(nil)
	_ kernels.GraphCloser     = backendGraph{}
)

// DeviceName implements kernels.DeviceDescriber: the device's name as the
// driver reports it (Device.Name).
func (b *Backend) DeviceName() string { return b.d.Name() }

// ComputeCapability implements kernels.DeviceDescriber
// (Device.ComputeCapability).
func (b *Backend) ComputeCapability() (major, minor int, err error) { return b.d.ComputeCapability() }

// ComputeCapability is the device's compute capability, major and minor
// (8, 0 for an A100, 9, 0 for an H100).
func (d *Device) ComputeCapability() (major, minor int, err error) {
	release := d.enter()
	defer release()
	if major, minor, err = d.dev.ComputeCapability(); err != nil {
		return 0, 0, fmt.Errorf("cuda: device %d: compute capability: %w", d.ordinal, err)
	}
	return major, minor, nil
}

// CopyHostToDevice implements kernels.ByteCopier (Device.CopyHostToDevice).
func (b *Backend) CopyHostToDevice(dst *T, src []byte) error { return b.d.CopyHostToDevice(dst, src) }

// CopyDeviceToDevice implements kernels.ByteCopier
// (Device.CopyDeviceToDevice).
func (b *Backend) CopyDeviceToDevice(dst, src *T) error { return b.d.CopyDeviceToDevice(dst, src) }

// NewEventTimer implements kernels.EventTimers: a Timer on the device's
// stream (Device.NewTimer).
func (b *Backend) NewEventTimer() (kernels.EventTimer, error) {
	t, err := b.d.NewTimer()
	if err != nil {
		return nil, err
	}
	return t, nil
}

// NewStager implements kernels.Stagers (Device.NewStager).
func (b *Backend) NewStager(slots, bytes int) (kernels.Stager, error) {
	s, err := b.d.NewStager(slots, bytes)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Close implements kernels.GraphCloser: the CUDA graph and the blocks it
// held go back at once (Graph.Close).
func (g backendGraph) Close() error { return g.g.Close() }
