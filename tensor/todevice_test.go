package tensor_test

import (
	"fmt"
	"runtime"
	"strings"
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

// manyDeviceMemory is hostDeviceMemory with CopyToHostMany (a
// tensor.ManyReader), counting its batched calls.
type manyDeviceMemory struct {
	hostDeviceMemory
	batches int
}

func (m *manyDeviceMemory) CopyToHostMany(dst [][]byte, p []tensor.DevicePtr, off []int) error {
	m.batches++
	for i := range dst {
		if err := m.CopyToHost(dst[i], p[i], off[i]); err != nil {
			return err
		}
	}
	return nil
}

// TestToHostMany: tensors of several dtypes and views at offsets come
// back equal to their sources with one host sync, on sim and on a device
// whose memory batches its reads (one CopyToHostMany call); on a device
// whose memory cannot, each copy is a host sync of its own. CPU tensors
// are cloned, nil stays nil; a non-contiguous device tensor and tensors
// of two devices are errors naming the tensor.
func TestToHostMany(t *testing.T) {
	plain := &hostDeviceMemory{bufs: map[tensor.DevicePtr][]byte{}}
	many := &manyDeviceMemory{hostDeviceMemory: hostDeviceMemory{bufs: map[tensor.DevicePtr][]byte{}}}
	f32 := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	f64 := tensor.FromSlice([]float64{0.1, 1e300, -7}, 3)
	i64 := tensor.FromSlice([]int64{9, -9}, 2)
	for _, c := range []struct {
		name  string
		dev   tensor.Device
		mem   tensor.DeviceMemory
		syncs uint64
	}{
		{"sim", tensor.Sim(7), nil, 1},
		{"batched", tensor.CUDA(0), many, 1},
		{"unbatched", tensor.CUDA(0), plain, 3}, // on[0], on[1] and row
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.mem != nil {
				tensor.RegisterDeviceMemory(tensor.KindCUDA, c.mem)
			}
			var on []*tensor.Tensor
			for _, h := range []*tensor.Tensor{f32, f64, i64} {
				d, err := h.ToDevice(c.dev)
				noErr(t, err)
				on = append(on, d)
			}
			row := on[0].Narrow(0, 1, 1) // a view at an offset
			cpu := tensor.FromSlice([]float32{42}, 1)
			s0, b0 := tensor.HostSyncs(c.dev), many.batches
			out, err := tensor.ToHostMany([]*tensor.Tensor{on[0], nil, on[1], row, cpu})
			noErr(t, err)
			equal(t, tensor.HostSyncs(c.dev)-s0, c.syncs, "host syncs")
			if c.name == "batched" {
				equal(t, many.batches-b0, 1, "CopyToHostMany calls")
			}
			equal(t, out[1] == nil, true, "nil stays nil")
			equal(t, out[0].Float64s(), f32.Float64s())
			equal(t, out[2].Float64s(), f64.Float64s())
			equal(t, out[2].DType(), tensor.F64)
			equal(t, out[3].Float64s(), []float64{4, 5, 6})
			equal(t, out[3].Shape(), []int{1, 3})
			equal(t, out[4].Float64s(), []float64{42})
			cpu.Set(0, 0)
			equal(t, out[4].Float64s(), []float64{42}, "a CPU tensor is cloned")
			for _, o := range out {
				if o != nil {
					equal(t, o.Device(), tensor.CPU)
				}
			}
			ints, err := tensor.ToHostMany([]*tensor.Tensor{on[2]})
			noErr(t, err)
			equal(t, ints[0].Float64s(), []float64{9, -9})

			_, err = tensor.ToHostMany([]*tensor.Tensor{on[1], on[0].T()})
			if err == nil || !strings.Contains(err.Error(), "tensor 1") || !strings.Contains(err.Error(), "not contiguous") {
				t.Fatalf("non-contiguous: %v", err)
			}
			other, err := f64.ToDevice(tensor.Sim(8))
			noErr(t, err)
			if c.dev == tensor.Sim(8) {
				t.Fatal("the test needs another device")
			}
			_, err = tensor.ToHostMany([]*tensor.Tensor{on[1], other})
			if err == nil || !strings.Contains(err.Error(), "one device per call") {
				t.Fatalf("two devices: %v", err)
			}
		})
	}
	out, err := tensor.ToHostMany([]*tensor.Tensor{nil, f32})
	noErr(t, err)
	equal(t, out[1].Float64s(), f32.Float64s(), "CPU only")
}
