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
