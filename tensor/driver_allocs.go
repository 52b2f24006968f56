package tensor

import (
	"sync"
	"sync/atomic"
	"time"
)

// Driver allocations: a device backend with a caching allocator (CUDA)
// reports each allocation its cache could not serve — a call into the
// device's driver, which can take tens of microseconds and more — with
// the time it took, so that a workload can show what its captures and
// warm-ups spend growing device memory (esper bench W4).

// driverAllocStats are one device's counters.
type driverAllocStats struct {
	n     atomic.Uint64
	nanos atomic.Int64
}

var driverAllocs sync.Map // Device → *driverAllocStats

// driverAllocCounting holds the devices whose backend counts its driver
// allocations (CountsDriverAllocs).
var driverAllocCounting sync.Map // Device → struct{}

// CountingDriverAllocs declares that device d's backend reports every
// allocation that goes to its driver (CountDriverAlloc): a backend with
// a caching allocator calls it when it opens d (CUDA).
func CountingDriverAllocs(d Device) { driverAllocCounting.Store(d, struct{}{}) }

// CountsDriverAllocs reports whether device d's backend counts its driver
// allocations (CountingDriverAllocs), so that DriverAllocs' zeros mean
// none rather than not counted: a report prints them only then.
func CountsDriverAllocs(d Device) bool {
	_, ok := driverAllocCounting.Load(d)
	return ok
}

func driverAllocCounter(d Device) *driverAllocStats {
	if c, ok := driverAllocs.Load(d); ok {
		return c.(*driverAllocStats)
	}
	c, _ := driverAllocs.LoadOrStore(d, new(driverAllocStats))
	return c.(*driverAllocStats)
}

// CountDriverAlloc records one allocation on device d that went to its
// driver, taking dt (a backend calls it; the CPU's are not counted).
func CountDriverAlloc(d Device, dt time.Duration) {
	if d.IsCPU() {
		return
	}
	c := driverAllocCounter(d)
	c.n.Add(1)
	c.nanos.Add(int64(dt))
}

// DriverAllocs returns the number of allocations on device d that went
// to its driver so far (CountDriverAlloc), and the time they took. Both
// are 0 for the CPU and for a device whose backend reports none (sim).
func DriverAllocs(d Device) (n uint64, dt time.Duration) {
	if d.IsCPU() {
		return 0, 0
	}
	c := driverAllocCounter(d)
	return c.n.Load(), time.Duration(c.nanos.Load())
}
