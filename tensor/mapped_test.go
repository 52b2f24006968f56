package tensor_test

import (
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/esper-go/esper/tensor"
)

// mappedMemory is hostDeviceMemory that is also a tensor.HostMapper: its
// mapped blocks are host buffers, "device work" on them is pending until
// a Wait (the tests set busy), and it counts its waits and frees.
type mappedMemory struct {
	hostDeviceMemory
	mapped      map[tensor.DevicePtr][]byte
	uses        []tensor.MappedUse
	decline     tensor.MappedUse // a use it refuses (0: none)
	busy        bool             // queued work not yet done
	waits       int
	mappedFrees int
}

func newMappedMemory() *mappedMemory {
	return &mappedMemory{hostDeviceMemory: hostDeviceMemory{bufs: map[tensor.DevicePtr][]byte{}}, mapped: map[tensor.DevicePtr][]byte{}}
}

func (m *mappedMemory) AllocMapped(n int, use tensor.MappedUse) (tensor.DevicePtr, []byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if use == m.decline {
		return 0, nil, tensor.ErrNoMappedMemory
	}
	m.next += 4096
	m.mapped[m.next] = make([]byte, n)
	m.uses = append(m.uses, use)
	return m.next, m.mapped[m.next], nil
}

func (m *mappedMemory) FreeMapped(p tensor.DevicePtr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.mapped[p]; !ok {
		panic("a mapped block freed twice, or never allocated")
	}
	delete(m.mapped, p)
	m.mappedFrees++
}

func (m *mappedMemory) Idle() (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.busy, nil
}

func (m *mappedMemory) Wait() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.busy = false
	m.waits++
	return nil
}

// deviceWrite stands in for device work writing v into mapped tensor t's
// first element (through the block's device address) and leaving work
// queued.
func (m *mappedMemory) deviceWrite(t *tensor.Tensor, v float32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.mapped[t.Storage().DevicePtr()]
	*(*float32)(unsafe.Pointer(&b[t.Offset()*4])) = v
	m.busy = true
}

// TestEmptyMapped: a mapped tensor is a zeroed device tensor at the
// device address its memory gave, allocated for the use asked; the CPU,
// a device memory that is no HostMapper, a declined use and a bad use
// are errors (the first three wrapping ErrNoMappedMemory).
func TestEmptyMapped(t *testing.T) {
	mem := newMappedMemory()
	tensor.RegisterDeviceMemory(tensor.KindCUDA, mem)
	x, err := tensor.EmptyMapped(tensor.CUDA(0), tensor.MappedOutput, tensor.F32, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, x.Device(), tensor.CUDA(0))
	equal(t, x.Shape(), []int{2, 3})
	equal(t, x.IsMapped(), true)
	equal(t, len(mem.mapped[x.Storage().DevicePtr()]), 24)
	equal(t, mem.uses, []tensor.MappedUse{tensor.MappedOutput})
	back, err := x.ToDevice(tensor.CPU)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, back.Float64s(), []float64{0, 0, 0, 0, 0, 0})
	plain, err := tensor.EmptyOn(tensor.CUDA(0), tensor.F32, 2)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, plain.IsMapped(), false)

	if _, err := tensor.EmptyMapped(tensor.CPU, tensor.MappedInput, tensor.F32, 2); !errors.Is(err, tensor.ErrNoMappedMemory) {
		t.Errorf("EmptyMapped on the CPU: %v, want ErrNoMappedMemory", err)
	}
	mem.decline = tensor.MappedInput
	if _, err := tensor.EmptyMapped(tensor.CUDA(0), tensor.MappedInput, tensor.F32, 2); !errors.Is(err, tensor.ErrNoMappedMemory) {
		t.Errorf("EmptyMapped of a declined use: %v, want ErrNoMappedMemory", err)
	}
	if _, err := tensor.EmptyMapped(tensor.CUDA(0), tensor.MappedUse(9), tensor.F32, 2); err == nil || errors.Is(err, tensor.ErrNoMappedMemory) {
		t.Errorf("EmptyMapped of use 9: %v, want an error naming the use", err)
	}
	if _, err := tensor.EmptyMapped(tensor.CUDA(0), tensor.MappedOutput, tensor.F32, -1); err == nil {
		t.Error("EmptyMapped of shape [-1] returned no error")
	}
	tensor.RegisterDeviceMemory(tensor.KindCUDA, &hostDeviceMemory{bufs: map[tensor.DevicePtr][]byte{}})
	if _, err := tensor.EmptyMapped(tensor.CUDA(0), tensor.MappedOutput, tensor.F32, 2); !errors.Is(err, tensor.ErrNoMappedMemory) {
		t.Errorf("EmptyMapped where the memory maps nothing: %v, want ErrNoMappedMemory", err)
	}
}

// TestMappedCrossings: writing a mapped tensor from the host waits for
// the device only when it is busy (one counted host sync); reading one
// (ToDevice, ToHostMany alone or beside a device tensor) waits once, one
// host sync, and sees what the device wrote; CopyFromHost into a mapped
// tensor is CopyFromHostBytes; a wrong byte count is an error.
func TestMappedCrossings(t *testing.T) {
	mem := newMappedMemory()
	tensor.RegisterDeviceMemory(tensor.KindCUDA, mem)
	dev := tensor.CUDA(0)
	in, err := tensor.EmptyMapped(dev, tensor.MappedInput, tensor.F32, 3)
	if err != nil {
		t.Fatal(err)
	}
	raw := []float32{1, 2, 3}
	bytes := unsafe.Slice((*byte)(unsafe.Pointer(&raw[0])), 12)
	s0 := tensor.HostSyncs(dev)
	if err := tensor.CopyFromHostBytes(in, bytes); err != nil {
		t.Fatal(err)
	}
	equal(t, tensor.HostSyncs(dev)-s0, uint64(0)) // idle: no wait
	equal(t, mem.waits, 0)
	equal(t, mem.mapped[in.Storage().DevicePtr()], bytes)
	mem.busy = true
	raw[0] = 7
	if err := tensor.CopyFromHostBytes(in, bytes); err != nil {
		t.Fatal(err)
	}
	equal(t, tensor.HostSyncs(dev)-s0, uint64(1)) // busy: one wait
	equal(t, mem.waits, 1)
	equal(t, mem.mapped[in.Storage().DevicePtr()][0], byte(0)) // 7.0's low byte
	mem.busy = true
	if err := tensor.CopyFromHost(in.Narrow(0, 1, 2), tensor.FromSlice([]float32{8, 9}, 2)); err != nil {
		t.Fatal(err)
	}
	equal(t, tensor.HostSyncs(dev)-s0, uint64(2))
	if err := tensor.CopyFromHostBytes(in, bytes[:8]); err == nil {
		t.Error("CopyFromHostBytes of 8 bytes into 12 returned no error")
	}

	out, err := tensor.EmptyMapped(dev, tensor.MappedOutput, tensor.F32, 2)
	if err != nil {
		t.Fatal(err)
	}
	mem.deviceWrite(out, 5)
	s1, w1 := tensor.HostSyncs(dev), mem.waits
	host, err := out.ToDevice(tensor.CPU)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, host.Float64s(), []float64{5, 0})
	equal(t, tensor.HostSyncs(dev)-s1, uint64(1))
	equal(t, mem.waits-w1, 1)

	mem.deviceWrite(out, 6)
	plain, err := tensor.FromSlice([]float32{4}, 1).ToDevice(dev)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range [][]*tensor.Tensor{{out, in}, {out, plain}} {
		mem.busy = true
		s, w := tensor.HostSyncs(dev), mem.waits
		hs, err := tensor.ToHostMany(ts)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, hs[0].Float64s(), []float64{6, 0})
		equal(t, tensor.HostSyncs(dev)-s, uint64(1))
		if ts[1] == in {
			equal(t, hs[1].Float64s(), []float64{7, 8, 9})
			equal(t, mem.waits-w, 1) // the mapped reads' own wait
		} else {
			equal(t, hs[1].Float64s(), []float64{4})
			equal(t, mem.waits-w, 0) // the device copy waited
		}
	}
}

// TestMappedFree: an explicit Free and the cleanup together free a
// mapped block once, through FreeMapped; a dropped mapped tensor's
// block is freed by the cleanup.
func TestMappedFree(t *testing.T) {
	mem := newMappedMemory()
	tensor.RegisterDeviceMemory(tensor.KindCUDA, mem)
	x, err := tensor.EmptyMapped(tensor.CUDA(0), tensor.MappedOutput, tensor.F32, 4)
	if err != nil {
		t.Fatal(err)
	}
	x.Storage().Free()
	x.Storage().Free()
	equal(t, x.Storage().DevicePtr(), tensor.DevicePtr(0))
	// A freed mapped tensor is neither read nor written.
	if _, err := x.ToDevice(tensor.CPU); err == nil {
		t.Error("reading a freed mapped tensor returned no error")
	}
	if _, err := tensor.ToHostMany([]*tensor.Tensor{x}); err == nil {
		t.Error("ToHostMany of a freed mapped tensor returned no error")
	}
	if err := tensor.CopyFromHostBytes(x, make([]byte, 16)); err == nil {
		t.Error("writing a freed mapped tensor returned no error")
	}
	if _, err := tensor.EmptyMapped(tensor.CUDA(0), tensor.MappedInput, tensor.F32, 4); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		mem.mu.Lock()
		n := mem.mappedFrees
		mem.mu.Unlock()
		if n == 2 || time.Now().After(deadline) {
			equal(t, n, 2)
			break
		}
		time.Sleep(time.Millisecond)
	}
	equal(t, mem.freed(), 0) // none through Free
}

// TestSimMapped: on sim a mapped tensor is sim storage marked mapped,
// read with one host sync as any sim tensor; SetSimMapped(false) makes
// EmptyMapped decline as a device without mapped memory does.
func TestSimMapped(t *testing.T) {
	dev := tensor.Sim(0)
	x, err := tensor.EmptyMapped(dev, tensor.MappedOutput, tensor.F32, 2)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, x.IsMapped(), true)
	equal(t, x.Device(), dev)
	raw := []float32{3, 4}
	if err := tensor.CopyFromHostBytes(x, unsafe.Slice((*byte)(unsafe.Pointer(&raw[0])), 8)); err != nil {
		t.Fatal(err)
	}
	s := tensor.HostSyncs(dev)
	h, err := x.ToDevice(tensor.CPU)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, h.Float64s(), []float64{3, 4})
	equal(t, tensor.HostSyncs(dev)-s, uint64(1))
	prev := tensor.SetSimMapped(false)
	defer tensor.SetSimMapped(prev)
	equal(t, prev, true)
	if _, err := tensor.EmptyMapped(dev, tensor.MappedOutput, tensor.F32, 2); !errors.Is(err, tensor.ErrNoMappedMemory) {
		t.Errorf("EmptyMapped on sim switched off: %v, want ErrNoMappedMemory", err)
	}
}

// TestCopyToHostBytes: a contiguous tensor's bytes into a host buffer
// the caller keeps — from the CPU (no host sync), sim, device memory
// and mapped memory (one host sync each, the mapped read after a wait);
// a buffer of another length and a non-contiguous tensor are errors.
func TestCopyToHostBytes(t *testing.T) {
	mem := newMappedMemory()
	tensor.RegisterDeviceMemory(tensor.KindCUDA, mem)
	x := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	read := func(src *tensor.Tensor) ([]float32, uint64) {
		t.Helper()
		dst := make([]float32, src.Numel())
		s0 := tensor.HostSyncs(src.Device())
		if err := tensor.CopyToHostBytes(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), src); err != nil {
			t.Fatal(err)
		}
		return dst, tensor.HostSyncs(src.Device()) - s0
	}
	got, syncs := read(x.Narrow(0, 1, 1))
	equal(t, got, []float32{4, 5, 6})
	equal(t, syncs, uint64(0))
	for _, dev := range []tensor.Device{tensor.Sim(0), tensor.CUDA(0)} {
		d, err := x.ToDevice(dev)
		if err != nil {
			t.Fatal(err)
		}
		got, syncs = read(d.Narrow(0, 1, 1))
		equal(t, got, []float32{4, 5, 6})
		equal(t, syncs, uint64(1))
	}
	m, err := tensor.EmptyMapped(tensor.CUDA(0), tensor.MappedOutput, tensor.F32, 2)
	if err != nil {
		t.Fatal(err)
	}
	mem.deviceWrite(m, 9)
	w := mem.waits
	got, syncs = read(m)
	equal(t, got, []float32{9, 0})
	equal(t, syncs, uint64(1))
	equal(t, mem.waits-w, 1)
	if err := tensor.CopyToHostBytes(make([]byte, 4), x); err == nil {
		t.Error("CopyToHostBytes of 24 bytes into 4 returned no error")
	}
	if err := tensor.CopyToHostBytes(make([]byte, 24), x.T()); err == nil {
		t.Error("CopyToHostBytes of a non-contiguous tensor returned no error")
	}
}
