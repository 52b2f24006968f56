package tensor

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// Mapped tensors: a device tensor whose elements live in page-locked
// host memory that the device addresses directly (CUDA's mapped pinned
// memory). Device work reads and writes it like any device tensor — a
// kernel's loads and stores cross the bus — and the host's copies into
// and out of it are plain memory copies, with no copy engine between:
// what a small, latency-bound call (a policy forward) gains is the
// transfers' driver calls and the copy engine's start-up. The crossing
// stays explicit: CopyFromHostBytes (or CopyFromHost) writes a mapped
// tensor once the device's queued work is done with it, and ToDevice(CPU)
// and ToHostMany read it after waiting for the device, a counted host
// sync as for any device tensor.

// MappedUse says which way a mapped tensor's elements cross, so that the
// device can pick its memory for it (CUDA: write-combined memory for an
// input, which the host writes in bursts and never reads back).
type MappedUse uint8

const (
	// MappedInput is written by the host and read by device work.
	MappedInput MappedUse = iota + 1
	// MappedOutput is written by device work and read by the host.
	MappedOutput
)

func (u MappedUse) String() string {
	switch u {
	case MappedInput:
		return "input"
	case MappedOutput:
		return "output"
	}
	return fmt.Sprintf("MappedUse(%d)", uint8(u))
}

// ErrNoMappedMemory is EmptyMapped's error (wrapped) where the device
// gives no mapped memory for the use asked: the CPU, a device whose
// memory is not a HostMapper, or one switched off (CUDA's
// ESPER_CUDA_MAPPED_INPUTS and ESPER_CUDA_MAPPED_OUTPUTS). The caller
// uses ordinary device memory instead.
var ErrNoMappedMemory = errors.New("no mapped host memory")

// HostMapper is implemented by a DeviceMemory whose device can address
// page-locked host memory (EmptyMapped).
type HostMapper interface {
	// AllocMapped returns nbytes of zeroed page-locked host memory mapped
	// into the device's address space for use: its device address (what
	// Storage.DevicePtr returns, and kernels are given) and the host's
	// view of the same bytes. An error wrapping ErrNoMappedMemory where
	// the device declines the use.
	AllocMapped(nbytes int, use MappedUse) (DevicePtr, []byte, error)
	// FreeMapped releases memory from AllocMapped (it may be called from
	// the cleanup goroutine).
	FreeMapped(p DevicePtr)
	// Idle reports, without waiting, whether every piece of work queued
	// on the device has finished.
	Idle() (bool, error)
	// Wait waits for the work queued on the device (the caller counts
	// the host sync).
	Wait() error
}

// simMappedOff turns the sim device's mapped memory off (SetSimMapped).
var simMappedOff atomic.Bool

// SetSimMapped turns the sim device's mapped memory on (the default) or
// off, in which case EmptyMapped on sim returns ErrNoMappedMemory as a
// device without it does: for tests of both paths. It returns the
// previous setting.
func SetSimMapped(on bool) bool { return !simMappedOff.Swap(!on) }

// EmptyMapped allocates a zeroed contiguous tensor of dtype dt and shape
// on dev in mapped host memory for use (the package comment above). On
// the sim device it is sim storage marked mapped (sim's memory is the
// host's already; its reads count a host sync as any sim read). Errors:
// a bad shape or use, or ErrNoMappedMemory (wrapped) for the CPU, a
// device without mapped memory or one that declines the use.
func EmptyMapped(dev Device, use MappedUse, dt DType, shape ...int) (*Tensor, error) {
	if use != MappedInput && use != MappedOutput {
		return nil, fmt.Errorf("tensor: EmptyMapped: use %v (MappedInput or MappedOutput)", use)
	}
	n, err := checkedNumel(dt, shape)
	if err != nil {
		return nil, err
	}
	var s *Storage
	switch {
	case dev.IsCPU():
		return nil, fmt.Errorf("tensor: EmptyMapped on %v: %w (a CPU tensor is host memory already)", dev, ErrNoMappedMemory)
	case dev.Kind == KindSim:
		if simMappedOff.Load() {
			return nil, fmt.Errorf("tensor: EmptyMapped on %v: %w (switched off: SetSimMapped)", dev, ErrNoMappedMemory)
		}
		if s, err = newSimStorage(dt, n, dev); err != nil {
			return nil, err
		}
		s.mapped = true
	default:
		mem, err := deviceMemory(dev)
		if err != nil {
			return nil, err
		}
		hm, ok := mem.(HostMapper)
		if !ok {
			return nil, fmt.Errorf("tensor: EmptyMapped on %v: %w", dev, ErrNoMappedMemory)
		}
		// An empty tensor still takes a byte, so that it has an address
		// (as device storage of no elements does).
		p, host, err := hm.AllocMapped(max(n*dt.Size(), 1), use)
		if err != nil {
			return nil, fmt.Errorf("tensor: EmptyMapped on %v (%v %v, %s): %w", dev, dt, shape, use, err)
		}
		if len(host) < n*dt.Size() {
			hm.FreeMapped(p)
			return nil, fmt.Errorf("tensor: EmptyMapped on %v: the device gave %d bytes for %d", dev, len(host), n*dt.Size())
		}
		s = &Storage{dtype: dt, device: dev, n: n, mapped: true,
			block: &deviceBlock{p: p, mem: mem, mapper: hm, host: host[:n*dt.Size()]}}
		runtime.AddCleanup(s, func(b *deviceBlock) { b.free() }, s.block)
	}
	t := newTensor(len(shape), s, 0)
	t.setContiguous(shape)
	return t.seal(), nil
}

// IsMapped reports whether t's storage is mapped host memory
// (EmptyMapped).
func (t *Tensor) IsMapped() bool { return t.storage.mapped }

// CopyFromHostBytes copies raw, the bytes of dst's elements (as many as
// dst holds), into dst, a contiguous tensor on any device: CopyFromHost
// for a caller that holds the bytes rather than a CPU tensor (a staging
// buffer). Into a mapped tensor it is a memory copy once the device's
// queued work is done (a counted host sync when it is not done yet: the
// work may still read the old values); elsewhere it follows the work
// already queued, as CopyFromHost does.
func CopyFromHostBytes(dst *Tensor, raw []byte) error {
	switch {
	case !dst.IsContiguous():
		return fmt.Errorf("tensor: CopyFromHostBytes: the destination %v on %v is not contiguous", dst.shape, dst.Device())
	case len(raw) != dst.Nbytes():
		return fmt.Errorf("tensor: CopyFromHostBytes: %d bytes into %v %v (%d bytes)", len(raw), dst.DType(), dst.shape, dst.Nbytes())
	case len(raw) == 0:
		return nil
	}
	off := dst.offset * dst.DType().Size()
	s := dst.storage
	switch {
	case dst.Device().IsCPU() || dst.Device().Kind == KindSim:
		copy(s.host[off:], raw)
		return nil
	case s.mapped:
		if s.block.freed.Load() {
			return fmt.Errorf("tensor: copying into mapped %v %v on %v: its storage was freed", dst.DType(), dst.shape, dst.Device())
		}
		if err := waitForMapped(dst.Device(), s.block.mapper); err != nil {
			return fmt.Errorf("tensor: copying into mapped %v %v on %v: %w", dst.DType(), dst.shape, dst.Device(), err)
		}
		copy(s.block.host[off:], raw)
		return nil
	}
	if err := s.block.mem.CopyToDevice(s.DevicePtr(), off, raw); err != nil {
		return fmt.Errorf("tensor: copying %v %v to %v: %w", dst.DType(), dst.shape, dst.Device(), err)
	}
	return nil
}

// waitForMapped returns once the work queued on dev is done: at once
// when it is idle already, else after a wait, counted as a host sync.
func waitForMapped(dev Device, hm HostMapper) error {
	idle, err := hm.Idle()
	if err != nil || idle {
		return err
	}
	CountHostSync(dev)
	start := time.Now()
	err = hm.Wait()
	AddHostSyncTime(dev, time.Since(start))
	return err
}
