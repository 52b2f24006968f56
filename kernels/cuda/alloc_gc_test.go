//go:build cuda

package cuda

import (
	"testing"

	"github.com/esper-go/esper/tensor"
)

// TestAllocatorCollectsUnreachableTensors: device memory held only by
// tensors nobody references (dropped without Free, as eager autograd
// drops its intermediates) comes back when the device fills up: twice
// as many 4 GiB tensors as fit are made and dropped one after the
// other, and each allocation succeeds, the full device answered by a
// garbage collection (AllocStats.GCRetries) instead of an error.
func TestAllocatorCollectsUnreachableTensors(t *testing.T) {
	const block = 1 << 30 // F32 elements: 4 GiB
	fit := int(driverFree(t)/(4<<30)) + 1
	before := dev.Allocator().Stats().GCRetries
	for i := 0; i < 2*fit; i++ {
		if _, err := tensor.EmptyOn(tensor.CUDA(0), tensor.F32, block); err != nil {
			t.Fatalf("tensor %d of %d (4 GiB each, about %d fit): %v", i+1, 2*fit, fit, err)
		}
	}
	retries := dev.Allocator().Stats().GCRetries - before
	if retries == 0 {
		t.Fatalf("%d tensors of 4 GiB never filled the device", 2*fit)
	}
	if err := dev.Allocator().EmptyCache(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tensors of 4 GiB (about %d fit): %d garbage collections made room", 2*fit, fit, retries)
}

// TestAllocatorReusesQueuedFrees: a block whose tensor was freed (queued,
// as a finalizer frees) is handed out again without a driver allocation,
// by an eager allocation and by one during a graph capture, and a block
// handed out during a capture does not come back to the cache while the
// graph holds it; every driver allocation is counted on the device
// (tensor.DriverAllocs).
func TestAllocatorReusesQueuedFrees(t *testing.T) {
	const n = 13<<20 + 123 // bytes: a class (14 MiB) of its own among the tests'
	a := dev.Allocator()
	if err := a.EmptyCache(); err != nil { // nothing of the class cached
		t.Fatal(err)
	}
	d := tensor.CUDA(0)
	m := memory{d: dev}
	drivers := func() uint64 { k, _ := tensor.DriverAllocs(d); return k }
	before, stats := drivers(), a.Stats()
	p, err := m.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := drivers()-before, uint64(a.Stats().DriverAllocs-stats.DriverAllocs); got != want || got == 0 {
		t.Fatalf("%d driver allocations counted on the device, the allocator made %d (want 1 or more)", got, want)
	}
	m.Free(p) // queued
	before = drivers()
	q, err := m.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if drivers() != before || q != p {
		t.Fatalf("eager: a queued free's block was not handed out again (%d driver allocations)", drivers()-before)
	}
	m.Free(q)
	if err := dev.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	r, err := m.Alloc(n)
	drivenIn := drivers() - before // before the launch's own small tensor
	if x, xerr := tensor.EmptyOn(d, tensor.F32, 4); xerr == nil {
		be.Fill(x, 1) // a launch: the graph is not empty
	} else if err == nil {
		err = xerr
	}
	g, gerr := dev.EndCapture()
	if err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if drivenIn != 0 || r != p {
		t.Fatalf("capture: a queued free's block was not handed out again (%d driver allocations)", drivenIn)
	}
	m.Free(r) // the graph holds it
	s, err := m.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if s == r {
		t.Fatal("a block the graph holds was handed out again")
	}
	m.Free(s)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}
