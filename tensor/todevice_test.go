package tensor_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/esper-go/esper/tensor"
)

// hostDeviceMemory is a DeviceMemory over host buffers, standing in for a
// GPU: it counts frees so the tests can see the cleanup.
type hostDeviceMemory struct {
	mu    sync.Mutex
	next  tensor.DevicePtr
	bufs  map[tensor.DevicePtr][]byte
	frees int
}

func (m *hostDeviceMemory) Alloc(n int) (tensor.DevicePtr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next += 4096
	m.bufs[m.next] = make([]byte, n)
	return m.next, nil
}

func (m *hostDeviceMemory) Free(p tensor.DevicePtr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.bufs[p]; !ok {
		panic(fmt.Sprintf("double free of %#x", p))
	}
	delete(m.bufs, p)
	m.frees++
}

func (m *hostDeviceMemory) CopyToDevice(p tensor.DevicePtr, off int, src []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(m.bufs[p][off:], src)
	return nil
}

func (m *hostDeviceMemory) CopyToHost(dst []byte, p tensor.DevicePtr, off int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(dst, m.bufs[p][off:])
	return nil
}

func (m *hostDeviceMemory) freed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.frees
}

// TestToDeviceRoundTrip: a CPU tensor (also a non-contiguous view) goes
// to a device and back unchanged; the device copy is on the device; CPU
// to CPU is a clone. An explicit Free and the cleanup together free a
// block once, and a dropped device tensor's block is freed by the cleanup.
func TestToDeviceRoundTrip(t *testing.T) {
	mem := &hostDeviceMemory{bufs: map[tensor.DevicePtr][]byte{}}
	tensor.RegisterDeviceMemory(tensor.KindCUDA, mem)
	x := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	for _, src := range []*tensor.Tensor{x, x.T()} {
		d, err := src.ToDevice(tensor.CUDA(0))
		if err != nil {
			t.Fatal(err)
		}
		equal(t, d.Device(), tensor.CUDA(0))
		back, err := d.ToDevice(tensor.CPU)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, back.Shape(), src.Shape())
		equal(t, back.Float64s(), src.Float64s())
		d.Storage().Free()
		d.Storage().Free() // a second Free does nothing
	}
	c, _ := x.ToDevice(tensor.CPU)
	c.Set(9, 0, 0)
	equal(t, x.At(0, 0), 1.0)

	before := mem.freed()
	func() {
		d, err := x.ToDevice(tensor.CUDA(0))
		if err != nil {
			t.Fatal(err)
		}
		_ = d
	}()
	for i := 0; i < 50 && mem.freed() == before; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	equal(t, mem.freed(), before+1)
}

// TestCopyFromHost: host elements land in an existing device tensor (a
// view at an offset of a larger one, on the stand-in device and on sim,
// and on the CPU), the rest of the storage untouched; a mismatched
// dtype, element count, non-contiguous destination or device source is
// an error.
func TestCopyFromHost(t *testing.T) {
	mem := &hostDeviceMemory{bufs: map[tensor.DevicePtr][]byte{}}
	tensor.RegisterDeviceMemory(tensor.KindCUDA, mem)
	for _, dev := range []tensor.Device{tensor.CUDA(0), tensor.Sim(0), tensor.CPU} {
		buf, err := tensor.FromSlice([]float32{0, 0, 0, 0, 0, 0}, 6).ToDevice(dev)
		if err != nil {
			t.Fatal(err)
		}
		view := buf.Narrow(0, 2, 3)
		src := tensor.FromSlice([]float32{7, 8, 9, 10}, 2, 2).Narrow(1, 0, 1) // strided: 7, 9
		if err := tensor.CopyFromHost(buf.Narrow(0, 4, 2), src); err != nil {
			t.Fatal(err)
		}
		if err := tensor.CopyFromHost(view.Narrow(0, 0, 2), tensor.FromSlice([]float32{1, 2}, 2)); err != nil {
			t.Fatal(err)
		}
		back, err := buf.ToDevice(tensor.CPU)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, back.Float64s(), []float64{0, 0, 1, 2, 7, 9})
		bad := []func() error{
			func() error { return tensor.CopyFromHost(buf, tensor.FromSlice([]float32{1}, 1)) },
			func() error { return tensor.CopyFromHost(buf.Narrow(0, 0, 1), tensor.FromSlice([]float64{1}, 1)) },
			func() error { return tensor.CopyFromHost(buf.Reshape(2, 3).T(), tensor.Zeros(tensor.F32, 3, 2)) },
		}
		if !dev.IsCPU() {
			bad = append(bad, func() error { return tensor.CopyFromHost(buf, buf) }) // a device source
		}
		for i, f := range bad {
			if f() == nil {
				t.Errorf("%v: bad CopyFromHost %d accepted", dev, i)
			}
		}
	}
}
