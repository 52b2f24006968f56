//go:build cuda

package cuda

import (
	"testing"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/tensor"
)

// TestTrainerCapturedStepHoldsMemory is issue 24's memory check on the
// trainer itself: W1 through tolaria.Trainer captured (bench.RunW1Trainer:
// the epoch loop, the captured graphs replayed, the per-epoch read),
// 2 500 measured epochs of 4 training steps, after which the allocator's
// reserved bytes are those of the 10th measured epoch and the driver's
// free memory is within 1 MiB of it — batch by batch (W1Options.PerBatch:
// 10 000 replays of the trainer's captured step, 10 000 of its
// validation batch) and with the whole epoch as one graph (2 500 replays
// of it, each running the 4 steps). Each run must replay in every epoch
// (RunW1Trainer fails otherwise) and end where the CPU's run ends.
func TestTrainerCapturedStepHoldsMemory(t *testing.T) {
	const warmup, epochs = 2, 2500
	memFree := func() int64 { return driverFree(t) }
	ref, err := bench.RunW1Trainer(bench.W1Options{Epochs: epochs, Warmup: warmup, Captured: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, perBatch := range []bool{true, false} {
		var calls int
		var before, after AllocStats
		var free0, free1 int64
		emit := func(bench.EpochMetrics) {
			calls++ // after RunEpoch, whose metrics read waited for the device
			switch calls {
			case warmup + 10:
				before, free0 = dev.Allocator().Stats(), memFree()
			case warmup + epochs:
				after, free1 = dev.Allocator().Stats(), memFree()
			}
		}
		r, err := bench.RunW1Trainer(bench.W1Options{Epochs: epochs, Warmup: warmup, Captured: true, PerBatch: perBatch, Device: tensor.CUDA(0), Emit: emit})
		if err != nil {
			t.Fatal(err)
		}
		if calls != warmup+epochs {
			t.Fatalf("%s: %d epochs reported, want %d", r.Mode, calls, warmup+epochs)
		}
		if after.Reserved != before.Reserved {
			t.Fatalf("%s: reserved device memory %d → %d bytes over %d trainer epochs", r.Mode, before.Reserved, after.Reserved, epochs-10)
		}
		if free0-free1 > 1<<20 {
			t.Fatalf("%s: driver free memory fell %d bytes over %d trainer epochs (%d → %d)", r.Mode, free0-free1, epochs-10, free0, free1)
		}
		closeRel(t, r.Mode+": final training loss against the CPU's", tensor.FromFloat64s(tensor.F64, []float64{r.Final.TrainLoss}), tensor.FromFloat64s(tensor.F64, []float64{ref.Final.TrainLoss}), 1e-3)
		t.Logf("%s W1, %d epochs (%d graph replays of %d nodes per epoch): reserved %d bytes at epoch 10 and at the end; driver free %d → %d bytes; p95 %.1f µs per epoch; final loss %.6f (CPU %.6f)",
			r.Mode, epochs, r.GraphReplays*epochs, r.Launches, before.Reserved, free0, free1, r.Latency.P95us, r.Final.TrainLoss, ref.Final.TrainLoss)
	}
}
