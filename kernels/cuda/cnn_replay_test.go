//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/tensor"
)

// TestCapturedCNNStepEqualsEagerAndHoldsMemory is GPU.md's CNN check: the
// W5 host's training step (convolutions, batch norm and ReLU, max pool,
// global average pool, linear, cross-entropy, SGD with momentum) captured
// as a CUDA graph gives the losses of the same step run eagerly from the
// same weights over 100 steps of fresh batches; then 10 000 more replays
// leave the allocator's reserved bytes unchanged and the driver's free
// memory within 1 MiB of where it stood after the first replays.
func TestCapturedCNNStepEqualsEagerAndHoldsMemory(t *testing.T) {
	const batch = 16
	eager, err := bench.NewW5ModelOn(7, tensor.CUDA(0))
	if err != nil {
		t.Fatal(err)
	}
	captured, err := bench.NewW5ModelOn(7, tensor.CUDA(0))
	if err != nil {
		t.Fatal(err)
	}
	var fallback error
	c := autograd.Capture(captured.Step, autograd.CaptureOptions{
		Policy:     autograd.FailOnMismatch,
		Version:    captured.Optimizer().Arena().Version,
		OnFallback: func(err error) { fallback = err },
	})
	draw := func(i int) []*tensor.Tensor {
		rng := tensor.NewRNG(uint64(5000 + i))
		x := tensor.Normal(rng, tensor.F32, 0, 1, batch, 1, 28, 28)
		y := tensor.RandInt(rng, 10, batch)
		return []*tensor.Tensor{toDev(t, x), toDev(t, y)}
	}
	for i := 0; i < 100; i++ {
		in := draw(i)
		want := eager.Step(in)[0]
		outs, err := c.Run(in...)
		if err != nil {
			t.Fatal(err)
		}
		if fallback != nil {
			t.Fatalf("capture fell back to eager at step %d: %v", i, fallback)
		}
		closeRel(t, fmt.Sprintf("captured CNN loss at step %d", i), fromDev(t, outs[0]), fromDev(t, want), 1e-5)
	}

	// Memory over 10 000 replays of one batch held in the graph's own
	// input buffers.
	in := c.Inputs()
	if in == nil {
		t.Fatal("no captured graph after 100 steps")
	}
	replay := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := c.Run(in...); err != nil {
				t.Fatalf("replay %d: %v", i, err)
			}
		}
		if err := be.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	memFree := func() int64 { return driverFree(t) }
	replay(10)
	before, free0 := dev.Allocator().Stats(), memFree()
	replay(10000)
	after, free1 := dev.Allocator().Stats(), memFree()
	if after.Reserved != before.Reserved {
		t.Fatalf("reserved device memory %d → %d bytes over 10 000 replays", before.Reserved, after.Reserved)
	}
	if free0-free1 > 1<<20 {
		t.Fatalf("driver free memory fell %d bytes over 10 000 replays (%d → %d)", free0-free1, free0, free1)
	}
	t.Logf("10 000 replays: reserved %d bytes before and after; driver free %d → %d bytes", before.Reserved, free0, free1)
}

// driverFree is the driver's free device memory (cuMemGetInfo).
func driverFree(t *testing.T) int64 {
	t.Helper()
	release := dev.enter() // cuMemGetInfo reads the current context
	defer release()
	free, _, err := cu.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	return free
}
