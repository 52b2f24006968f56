package tensor

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Storage is a flat buffer of elements of one dtype on one device. Several
// tensors (views) may share one Storage.
type Storage struct {
	device Device
	n      int          // elements
	host   []byte       // CPU storage (64-byte aligned unless small: see Empty)
	block  *deviceBlock // device storage: its address and provider, freed once
	dtype  DType
	mapped bool // mapped host memory (EmptyMapped)
}

const hostAlign = 64

// NewStorage allocates zeroed storage for n elements of dtype on the CPU.
func NewStorage(dtype DType, n int) *Storage {
	s := &Storage{}
	s.initHost(dtype, n)
	return s
}

// initHost makes s zeroed CPU storage for n elements of dtype.
func (s *Storage) initHost(dtype DType, n int) {
	if _, err := CheckShape(dtype, n); err != nil {
		panic(err)
	}
	nb := n * dtype.Size()
	// Over-allocate so the data can start on a 64-byte boundary, which
	// the vector kernels prefer.
	raw := make([]uint64, (nb+hostAlign)/8+1)
	base := uintptr(unsafe.Pointer(&raw[0]))
	off := int((hostAlign - base%hostAlign) % hostAlign)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&raw[0])), len(raw)*8)
	*s = Storage{dtype: dtype, device: CPU, n: n, host: buf[off : off+nb : off+nb]}
}

// initHostIn makes s CPU storage for n elements of dtype in buf (zeroed,
// at least n·size bytes, aligned for dtype).
func (s *Storage) initHostIn(dtype DType, n int, buf []byte) {
	nb := n * dtype.Size()
	*s = Storage{dtype: dtype, device: CPU, n: n, host: buf[:nb:nb]}
}

// NewDeviceStorage allocates storage on a non-CPU device through its
// registered DeviceMemory.
func NewDeviceStorage(dtype DType, n int, d Device) (*Storage, error) {
	if d.IsCPU() {
		return NewStorage(dtype, n), nil
	}
	if d.Kind == KindSim {
		return newSimStorage(dtype, n, d)
	}
	m, err := deviceMemory(d)
	if err != nil {
		return nil, err
	}
	if _, err := checkedNumel(dtype, []int{n}); err != nil {
		return nil, err
	}
	p, err := m.Alloc(n * dtype.Size())
	if err != nil {
		return nil, err
	}
	s := &Storage{dtype: dtype, device: d, n: n, block: &deviceBlock{p: p, mem: m}}
	// The safety net: device memory of storage that became unreachable
	// without Free goes back to its provider (whose Free must not need
	// the calling goroutine's state: it runs on the cleanup goroutine).
	runtime.AddCleanup(s, func(b *deviceBlock) { b.free() }, s.block)
	return s, nil
}

// deviceBlock is a device allocation's address, its provider and whether
// it was freed, shared by its Storage and the storage's cleanup so that a
// block is freed once, by Free or by the cleanup. (CPU storage has none:
// the fields live here to keep the Storage of a small CPU tensor small.)
type deviceBlock struct {
	p     DevicePtr
	mem   DeviceMemory
	freed atomic.Bool
	// mapper and host are a mapped block's provider and the host's view
	// of its bytes (EmptyMapped); nil for device memory.
	mapper HostMapper
	host   []byte
}

// free returns the block to its provider unless that was done already.
func (b *deviceBlock) free() {
	if !b.freed.Swap(true) {
		if b.mapper != nil {
			b.mapper.FreeMapped(b.p)
			return
		}
		b.mem.Free(b.p)
	}
}

// DType returns the element type.
func (s *Storage) DType() DType { return s.dtype }

// Device returns where the storage lives.
func (s *Storage) Device() Device { return s.device }

// Len returns the number of elements.
func (s *Storage) Len() int { return s.n }

// Bytes returns the raw host bytes (CPU only).
func (s *Storage) Bytes() []byte {
	s.mustHost("Bytes")
	return s.host
}

// DevicePtr returns the device address (non-CPU storage only; 0 after
// Free).
func (s *Storage) DevicePtr() DevicePtr {
	if s.block == nil || s.block.freed.Load() {
		return 0
	}
	return s.block.p
}

// SameMemory reports whether s and o hold the same elements: the same
// storage, or two storages over one memory (a sim tensor's storage and
// the CPU alias BackendView gives the backend). Two empty storages never
// do.
func (s *Storage) SameMemory(o *Storage) bool {
	if s == nil || o == nil {
		return false
	}
	if s == o {
		return true
	}
	k := s.MemoryKey()
	return k != nil && k == o.MemoryKey()
}

// MemoryKey returns a comparable value that two non-empty storages share
// exactly when they hold the same memory (SameMemory), nil for an empty
// one: a map key to group tensors by the memory they view.
func (s *Storage) MemoryKey() any {
	switch {
	case s == nil:
		return nil
	case len(s.host) > 0:
		return &s.host[0]
	case s.block != nil:
		return s.block
	}
	return nil
}

// Free releases device memory early; CPU storage is left to the GC.
func (s *Storage) Free() {
	if s.block != nil {
		s.block.free()
	}
}

func (s *Storage) mustHost(op string) {
	if !s.device.IsCPU() {
		panic(fmt.Sprintf("tensor: %s needs host storage, tensor is on %v (copy it with ToDevice(tensor.CPU) first)", op, s.device))
	}
}

// StorageData views a CPU storage as a []T over all its elements.
// T must match the dtype (uint16 for BF16 and F16).
func StorageData[T Elem](s *Storage) []T {
	s.mustHost("StorageData")
	if !dtypeMatches[T](s.dtype) {
		var z T
		panic(fmt.Sprintf("tensor: cannot view %v storage as %T", s.dtype, z))
	}
	if s.n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&s.host[0])), s.n)
}

// ToDevice returns a contiguous copy of t on dev (t itself is left
// alone; a CPU tensor copied to the CPU is a clone). Copies between two
// non-CPU devices go through the host.
func (t *Tensor) ToDevice(dev Device) (*Tensor, error) {
	src := t
	if !t.Device().IsCPU() {
		host, err := t.toHost()
		if err != nil {
			return nil, err
		}
		if dev.IsCPU() {
			return host, nil
		}
		src = host
	} else if dev.IsCPU() {
		return t.Clone(), nil
	}
	src = src.Contiguous()
	out, err := EmptyOn(dev, src.DType(), src.shape...)
	if err != nil {
		return nil, err
	}
	if dev.Kind == KindSim {
		copy(out.storage.host, src.storage.host[src.offset*src.DType().Size():][:src.Nbytes()])
		return out, nil
	}
	if err := out.storage.block.mem.CopyToDevice(out.storage.DevicePtr(), 0, src.storage.host[src.offset*src.DType().Size():][:src.Nbytes()]); err != nil {
		return nil, fmt.Errorf("tensor: copying %v %v to %v: %w", src.DType(), src.shape, dev, err)
	}
	return out, nil
}

// CopyFromHost copies the elements of src, a CPU tensor, into dst, an
// existing contiguous tensor of src's dtype and element count on any
// device — the host-to-device copy into memory a captured graph already
// reads, where ToDevice would allocate anew. On the CPU it is CopyInto.
// On a device it follows the work already queued there, as ToDevice
// does.
func CopyFromHost(dst, src *Tensor) error {
	switch {
	case !src.Device().IsCPU():
		return fmt.Errorf("tensor: CopyFromHost: the source is on %v, not the CPU", src.Device())
	case src.DType() != dst.DType() || src.Numel() != dst.Numel():
		return fmt.Errorf("tensor: CopyFromHost: %v %v into %v %v (want one dtype and element count)", src.DType(), src.shape, dst.DType(), dst.shape)
	case !dst.IsContiguous():
		return fmt.Errorf("tensor: CopyFromHost: the destination %v on %v is not contiguous", dst.shape, dst.Device())
	}
	if dst.Device().IsCPU() {
		CopyInto(dst, src)
		return nil
	}
	src = src.Contiguous()
	return CopyFromHostBytes(dst, src.storage.host[src.offset*src.DType().Size():][:src.Nbytes()])
}

// toHost copies a contiguous device tensor into a new CPU tensor.
func (t *Tensor) toHost() (*Tensor, error) {
	if !t.IsContiguous() {
		return nil, fmt.Errorf("tensor: copying a non-contiguous %v tensor %v off the device (make it contiguous there first)", t.Device(), t.shape)
	}
	out := Empty(t.DType(), t.shape...)
	if err := CopyToHostBytes(out.storage.host, t); err != nil {
		return nil, err
	}
	return out, nil
}

// CopyToHostBytes copies the elements of src, a contiguous tensor on any
// device, into dst, a host buffer of src's bytes (Nbytes): ToDevice(CPU)
// into memory the caller keeps, for a read each step that allocates
// nothing. From a device it is one host sync, counted, as ToDevice's
// (after the work queued before it; from mapped memory, a wait for the
// device, then a memory copy). A non-contiguous src or a dst of another
// length is an error.
func CopyToHostBytes(dst []byte, src *Tensor) error {
	switch {
	case !src.IsContiguous():
		return fmt.Errorf("tensor: copying a non-contiguous %v tensor %v off the device (make it contiguous there first)", src.Device(), src.shape)
	case len(dst) != src.Nbytes():
		return fmt.Errorf("tensor: CopyToHostBytes: %d bytes for %v %v (%d bytes)", len(dst), src.DType(), src.shape, src.Nbytes())
	}
	off, n := src.offset*src.DType().Size(), src.Nbytes()
	dev := src.Device()
	if dev.IsCPU() {
		copy(dst, src.storage.host[off:][:n])
		return nil
	}
	CountHostSync(dev)
	start := time.Now()
	defer func() { AddHostSyncTime(dev, time.Since(start)) }()
	if dev.Kind == KindSim {
		copy(dst, src.storage.host[off:][:n])
		return nil
	}
	if n == 0 {
		return nil
	}
	if b := src.storage.block; src.storage.mapped {
		// Mapped: the device's work done, the bytes are the host's.
		if b.freed.Load() {
			return fmt.Errorf("tensor: copying mapped %v %v from %v: its storage was freed", src.DType(), src.shape, dev)
		}
		if err := b.mapper.Wait(); err != nil {
			return fmt.Errorf("tensor: copying mapped %v %v from %v: %w", src.DType(), src.shape, dev, err)
		}
		copy(dst, b.host[off:][:n])
		return nil
	}
	if err := src.storage.block.mem.CopyToHost(dst, src.storage.DevicePtr(), off); err != nil {
		return fmt.Errorf("tensor: copying %v %v from %v: %w", src.DType(), src.shape, dev, err)
	}
	return nil
}

// ManyReader is implemented by a DeviceMemory that can copy several
// device ranges to the host with one wait for the device: the copies
// queued after the work already enqueued, then one synchronize
// (ToHostMany). A provider without it makes ToHostMany copy one range
// at a time, one host sync each.
type ManyReader interface {
	// CopyToHostMany copies len(dst[i]) bytes at p[i]+off[i] into dst[i]
	// for every i, waiting for the device once.
	CopyToHostMany(dst [][]byte, p []DevicePtr, off []int) error
}

// ToHostMany copies the tensors ts, all on one device, to new CPU
// tensors (out[i] for ts[i], nil for a nil one) with one host sync: what
// a training loop reads at the end of an epoch, several accumulators of
// several dtypes, costs one wait for the device instead of one per
// tensor. CPU tensors are cloned. Every device tensor must be contiguous
// (make it so on its device first); tensors of two devices are an
// error. On a device whose memory is not a ManyReader the copies are
// made one at a time and counted one host sync each. Mapped tensors
// (EmptyMapped) are copied from their host memory once the device's
// work is done: within the others' wait, or one of their own.
func ToHostMany(ts []*Tensor) ([]*Tensor, error) {
	out := make([]*Tensor, len(ts))
	var dev Device
	var dsts [][]byte
	var ptrs []DevicePtr
	var offs []int
	var mem DeviceMemory
	// The mapped tensors' reads: their bytes, copied once the device's
	// queued work is done (after the other copies' wait, or one of their
	// own).
	type mappedRead struct{ dst, src []byte }
	var mapped []mappedRead
	var mapper HostMapper
	for i, t := range ts {
		switch {
		case t == nil:
			continue
		case t.Device().IsCPU():
			out[i] = t.Clone()
			continue
		case !t.IsContiguous():
			return nil, fmt.Errorf("tensor: ToHostMany: tensor %d (%v %v on %v) is not contiguous (make it contiguous there first)", i, t.DType(), t.shape, t.Device())
		case dev != (Device{}) && t.Device() != dev:
			return nil, fmt.Errorf("tensor: ToHostMany: tensor %d is on %v, an earlier one on %v (one device per call)", i, t.Device(), dev)
		}
		dev = t.Device()
		h := Empty(t.DType(), t.shape...)
		out[i] = h
		if dev.Kind == KindSim {
			copy(h.storage.host, t.storage.host[t.offset*t.DType().Size():][:t.Nbytes()])
			continue
		}
		if t.Nbytes() == 0 {
			continue
		}
		if b := t.storage.block; t.storage.mapped {
			if b.freed.Load() {
				return nil, fmt.Errorf("tensor: ToHostMany: tensor %d (mapped %v %v on %v): its storage was freed", i, t.DType(), t.shape, t.Device())
			}
			// Copied once the device's work is done (below).
			mapper = b.mapper
			mapped = append(mapped, mappedRead{h.storage.host[:t.Nbytes()], b.host[t.offset*t.DType().Size():][:t.Nbytes()]})
			continue
		}
		mem = t.storage.block.mem
		dsts = append(dsts, h.storage.host[:t.Nbytes()])
		ptrs = append(ptrs, t.storage.DevicePtr())
		offs = append(offs, t.offset*t.DType().Size())
	}
	if dev == (Device{}) {
		return out, nil
	}
	start := time.Now()
	defer func() { AddHostSyncTime(dev, time.Since(start)) }()
	if len(dsts) > 0 || len(mapped) == 0 {
		if err := readDevice(dev, mem, dsts, ptrs, offs); err != nil {
			return nil, err
		}
	}
	if len(mapped) > 0 {
		if len(dsts) == 0 {
			// No copy waited for the device: a wait of the mapped reads'
			// own.
			CountHostSync(dev)
			if err := mapper.Wait(); err != nil {
				return nil, fmt.Errorf("tensor: ToHostMany: waiting for %v: %w", dev, err)
			}
		}
		for _, m := range mapped {
			copy(m.dst, m.src)
		}
	}
	return out, nil
}

// readDevice is ToHostMany's copies of device memory: one host sync
// where the memory is a ManyReader, the device is sim or there is
// nothing to copy (empty tensors), else one per copy.
func readDevice(dev Device, mem DeviceMemory, dsts [][]byte, ptrs []DevicePtr, offs []int) error {
	if mr, ok := mem.(ManyReader); ok && len(dsts) > 1 {
		CountHostSync(dev)
		if err := mr.CopyToHostMany(dsts, ptrs, offs); err != nil {
			return fmt.Errorf("tensor: ToHostMany: copying %d tensors from %v: %w", len(dsts), dev, err)
		}
		return nil
	}
	if dev.Kind == KindSim || len(dsts) == 0 {
		CountHostSync(dev) // sim: the copies made, one wait as a GPU's batched read
		return nil
	}
	for k := range dsts {
		CountHostSync(dev)
		if err := mem.CopyToHost(dsts[k], ptrs[k], offs[k]); err != nil {
			return fmt.Errorf("tensor: ToHostMany: copying from %v: %w", dev, err)
		}
	}
	return nil
}
