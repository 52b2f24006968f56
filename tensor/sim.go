package tensor

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Host syncs: every copy that makes the host wait for a device (a
// device-to-host read) is counted per device, like PyTorch's
// torch.cuda.set_sync_debug_mode, so that a training loop can show how
// often it stops for the device (tolaria emits the count per epoch).

var hostSyncs sync.Map // Device → *atomic.Uint64

// hostSyncNanos accumulates, per device, the time the host spent in its
// host syncs: waiting for the device and copying (HostSyncTime).
var hostSyncNanos sync.Map // Device → *atomic.Int64

func syncCounter(d Device) *atomic.Uint64 {
	if c, ok := hostSyncs.Load(d); ok {
		return c.(*atomic.Uint64)
	}
	c, _ := hostSyncs.LoadOrStore(d, new(atomic.Uint64))
	return c.(*atomic.Uint64)
}

// HostSyncs returns the number of host syncs on device d so far: the
// device-to-host copies (ToDevice(CPU), CopyToHost) and the waits a
// backend reports with CountHostSync (CUDA: a Synchronize, and each
// host-to-device copy that waits for its stream; sim's uploads do not
// wait, so sim counts reads and Synchronize only). Always 0 for the CPU.
func HostSyncs(d Device) uint64 {
	if d.IsCPU() {
		return 0
	}
	return syncCounter(d).Load()
}

// HostSyncTime returns the time the host has spent so far in the host
// syncs HostSyncs counts on device d — waiting for the device to finish
// what was enqueued before, then copying — as far as the code that
// syncs reports it (AddHostSyncTime; the reads of this package always
// do). Always 0 for the CPU. Beside a loop's wall time it says how much
// of it the host spent waiting for the device rather than enqueuing
// work.
func HostSyncTime(d Device) time.Duration {
	if d.IsCPU() {
		return 0
	}
	return time.Duration(syncNanos(d).Load())
}

// AddHostSyncTime adds dt, the time one host sync on d took, to
// HostSyncTime (a backend calls it beside CountHostSync).
func AddHostSyncTime(d Device, dt time.Duration) {
	if !d.IsCPU() {
		syncNanos(d).Add(int64(dt))
	}
}

func syncNanos(d Device) *atomic.Int64 {
	if c, ok := hostSyncNanos.Load(d); ok {
		return c.(*atomic.Int64)
	}
	c, _ := hostSyncNanos.LoadOrStore(d, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// CountHostSync records one host sync on d (a backend calls it when the
// host waits for the device outside a copy, e.g. a stream synchronize).
func CountHostSync(d Device) {
	if !d.IsCPU() {
		syncCounter(d).Add(1)
	}
}

// newSimStorage makes zeroed storage for n elements of dtype on the
// simulated device d: host memory the host accessors refuse.
func newSimStorage(dtype DType, n int, d Device) (*Storage, error) {
	if _, err := CheckShape(dtype, n); err != nil {
		return nil, err
	}
	s := &Storage{}
	s.initHost(dtype, n)
	s.device = d
	return s, nil
}

// BackendView returns a CPU tensor that aliases the elements of t, a
// tensor on a simulated device, with t's shape, strides and offset: the
// way the sim backend hands its operands to the CPU kernels. It is for
// backends only — code above the kernels that reads device tensors
// through it defeats the device's purpose. A CPU tensor (or nil) is
// returned as it is; a tensor on any other device panics.
func BackendView(t *Tensor) *Tensor {
	if t == nil {
		return nil
	}
	switch t.Device().Kind {
	case KindCPU:
		return t
	case KindSim:
	default:
		panic(fmt.Sprintf("tensor: BackendView of a tensor on %v (only sim storage is host memory)", t.Device()))
	}
	s := t.storage
	alias := &Storage{dtype: s.dtype, device: CPU, n: s.n, host: s.host}
	v := newTensor(len(t.shape), alias, t.offset)
	copy(v.shape, t.shape)
	copy(v.strides, t.strides)
	return v.seal()
}

// Relocate moves t's elements to dev in place: t keeps its identity (the
// module fields and autograd variables that point to it stay valid) and
// gets a contiguous copy of its storage on dev. Only a tensor that is its
// whole storage (no view, never narrowed) can move, since views of the
// old storage would not follow; moving to its own device is a no-op.
// nn.To moves a module's parameters and buffers with it.
func (t *Tensor) Relocate(dev Device) error {
	if t.Device() == dev {
		return nil
	}
	if !t.OwnsStorage() {
		return fmt.Errorf("tensor: Relocate of a view (%v %v on %v): only a tensor that owns its whole storage can move", t.DType(), t.shape, t.Device())
	}
	moved, err := t.ToDevice(dev)
	if err != nil {
		return err
	}
	t.storage = moved.storage
	return nil
}

// OwnsStorage reports whether t is the whole of its storage, not a view
// of it (and has never been narrowed): what Relocate can move.
func (t *Tensor) OwnsStorage() bool {
	return t.offset == 0 && t.Numel() == t.storage.n && t.IsContiguous() && !t.narrowed.Load()
}
