package tensor

import (
	"fmt"
	"unsafe"
)

// Storage is a flat buffer of elements of one dtype on one device. Several
// tensors (views) may share one Storage.
type Storage struct {
	dtype  DType
	device Device
	n      int    // elements
	host   []byte // CPU storage, 64-byte aligned
	dev    DevicePtr
	mem    DeviceMemory
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
	if n < 0 {
		panic(fmt.Sprintf("tensor: NewStorage with negative length %d", n))
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

// initHostIn makes s CPU storage for n elements of dtype inside raw
// (zeroed, with room for the elements after aligning to hostAlign).
func (s *Storage) initHostIn(dtype DType, n int, raw []byte) {
	nb := n * dtype.Size()
	base := uintptr(unsafe.Pointer(&raw[0]))
	off := int((hostAlign - base%hostAlign) % hostAlign)
	*s = Storage{dtype: dtype, device: CPU, n: n, host: raw[off : off+nb : off+nb]}
}

// NewDeviceStorage allocates storage on a non-CPU device through its
// registered DeviceMemory.
func NewDeviceStorage(dtype DType, n int, d Device) (*Storage, error) {
	if d.IsCPU() {
		return NewStorage(dtype, n), nil
	}
	m, err := deviceMemory(d)
	if err != nil {
		return nil, err
	}
	p, err := m.Alloc(n * dtype.Size())
	if err != nil {
		return nil, err
	}
	return &Storage{dtype: dtype, device: d, n: n, dev: p, mem: m}, nil
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

// DevicePtr returns the device address (non-CPU storage only).
func (s *Storage) DevicePtr() DevicePtr { return s.dev }

// Free releases device memory early; CPU storage is left to the GC.
func (s *Storage) Free() {
	if s.mem != nil && s.dev != 0 {
		s.mem.Free(s.dev)
		s.dev = 0
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
