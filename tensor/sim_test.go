package tensor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/esper-go/esper/tensor"
)

// TestSimTensorsRefuseHostReads: a tensor on the simulated device is a
// device tensor: every host accessor refuses it, as for CUDA.
func TestSimTensorsRefuseHostReads(t *testing.T) {
	x, err := tensor.EmptyOn(tensor.Sim(0), tensor.F32, 2, 3)
	noErr(t, err)
	one, err := tensor.EmptyOn(tensor.Sim(0), tensor.F32, 1)
	noErr(t, err)
	equal(t, x.Device(), tensor.Sim(0))
	for name, read := range map[string]func(){
		"F32":      func() { x.F32() },
		"Item":     func() { one.Item() },
		"At":       func() { x.At(0, 0) },
		"Float64s": func() { x.Float64s() },
		"Bytes":    func() { x.Storage().Bytes() },
	} {
		msg := panicMessage(t, read)
		if !strings.Contains(msg, "sim:0") {
			t.Errorf("%s of a sim tensor: panic %q, want one naming the device", name, msg)
		}
	}
}

// TestSimCopiesAreExplicitAndCounted: the way across is ToDevice, bitwise
// both ways; every device-to-host copy is one host sync of that device
// (and of no other).
func TestSimCopiesAreExplicitAndCounted(t *testing.T) {
	host := tensor.Empty(tensor.F32, 3, 4)
	for i := range host.F32() {
		host.F32()[i] = float32(i)*0.37 - 1
	}
	dev := tensor.Sim(3)
	before, other := tensor.HostSyncs(dev), tensor.HostSyncs(tensor.Sim(4))
	d, err := host.ToDevice(dev)
	noErr(t, err)
	equal(t, tensor.HostSyncs(dev), before, "a host-to-device copy does not wait")
	back, err := d.ToDevice(tensor.CPU)
	noErr(t, err)
	equal(t, tensor.HostSyncs(dev), before+1)
	equal(t, tensor.HostSyncs(tensor.Sim(4)), other)
	equal(t, tensor.HostSyncs(tensor.CPU), uint64(0))
	equal(t, back.Device(), tensor.CPU)
	for i, v := range back.F32() {
		if v != host.F32()[i] {
			t.Fatalf("element %d: %v, want %v", i, v, host.F32()[i])
		}
	}
	// Device to device (sim:3 → sim:5) goes through the host: one sync.
	e, err := d.ToDevice(tensor.Sim(5))
	noErr(t, err)
	equal(t, e.Device(), tensor.Sim(5))
	equal(t, tensor.HostSyncs(dev), before+2)
	tensor.CountHostSync(dev)
	equal(t, tensor.HostSyncs(dev), before+3)
}

// TestBackendViewAliases: the backend's view of a sim tensor is a CPU
// tensor over the same elements (writes through it land on the device),
// with the tensor's shape, strides and offset.
func TestBackendViewAliases(t *testing.T) {
	host := tensor.Empty(tensor.F32, 4, 5)
	d, err := host.ToDevice(tensor.Sim(0))
	noErr(t, err)
	v := tensor.BackendView(d)
	equal(t, v.Device(), tensor.CPU)
	v.F32()[7] = 42
	back, err := d.ToDevice(tensor.CPU)
	noErr(t, err)
	equal(t, back.F32()[7], float32(42))
	equal(t, tensor.BackendView(host), host, "a CPU tensor is its own view")
	// A view on the device keeps its strides and offset in the backend's
	// view.
	for i := range host.F32() {
		host.F32()[i] = float32(i)
	}
	d, err = host.ToDevice(tensor.Sim(0))
	noErr(t, err)
	w := tensor.BackendView(d.Narrow(1, 2, 2).T())
	equal(t, w.Shape(), []int{2, 4})
	equal(t, w.At(1, 3), host.At(3, 3))
	equal(t, w.At(0, 1), host.At(1, 2))
}

// TestSameMemory: a storage is its own memory and its BackendView
// alias's; distinct storages, nil and empty storages are not; MemoryKey
// agrees.
func TestSameMemory(t *testing.T) {
	a, err := tensor.EmptyOn(tensor.Sim(0), tensor.F32, 4)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tensor.EmptyOn(tensor.Sim(0), tensor.F32, 4)
	if err != nil {
		t.Fatal(err)
	}
	c := tensor.Empty(tensor.F32, 3)
	for _, tc := range []struct {
		what string
		x, y *tensor.Storage
		want bool
	}{
		{"a storage and itself", a.Storage(), a.Storage(), true},
		{"a sim tensor and its CPU alias", a.Storage(), tensor.BackendView(a.Narrow(0, 1, 2)).Storage(), true},
		{"a CPU tensor and a view of it", c.Storage(), c.Narrow(0, 1, 1).Storage(), true},
		{"two sim storages", a.Storage(), b.Storage(), false},
		{"a storage and nil", a.Storage(), nil, false},
		{"two empty storages", tensor.Empty(tensor.F32, 0).Storage(), tensor.Empty(tensor.F32, 0).Storage(), false},
	} {
		if got := tc.x.SameMemory(tc.y); got != tc.want {
			t.Errorf("%s: SameMemory %v, want %v", tc.what, got, tc.want)
		}
		if tc.y != nil && tc.x != tc.y {
			if same := tc.x.MemoryKey() != nil && tc.x.MemoryKey() == tc.y.MemoryKey(); same != tc.want {
				t.Errorf("%s: one MemoryKey %v, want %v", tc.what, same, tc.want)
			}
		}
	}
}

// TestHostSyncTimeAccumulates: each host sync adds the time it took to
// its device's HostSyncTime — a read, a batched read, and a backend's
// report (AddHostSyncTime) — while the CPU has none.
func TestHostSyncTimeAccumulates(t *testing.T) {
	dev := tensor.Sim(3)
	x, err := tensor.Ones(tensor.F32, 1<<16).ToDevice(dev)
	noErr(t, err)
	t0 := tensor.HostSyncTime(dev)
	_, err = x.ToDevice(tensor.CPU)
	noErr(t, err)
	t1 := tensor.HostSyncTime(dev)
	if t1 <= t0 {
		t.Fatalf("a read left HostSyncTime at %v (was %v)", t1, t0)
	}
	_, err = tensor.ToHostMany([]*tensor.Tensor{x, x})
	noErr(t, err)
	t2 := tensor.HostSyncTime(dev)
	if t2 <= t1 {
		t.Fatalf("a batched read left HostSyncTime at %v (was %v)", t2, t1)
	}
	tensor.AddHostSyncTime(dev, time.Second)
	equal(t, tensor.HostSyncTime(dev)-t2, time.Second)
	tensor.AddHostSyncTime(tensor.CPU, time.Second)
	equal(t, tensor.HostSyncTime(tensor.CPU), time.Duration(0))
}
