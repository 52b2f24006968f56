//go:build cuda

package cuda

import (
	"testing"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/tensor"
)

// TestTrainerCapturedStepHoldsMemory is issue 24's memory check on the
// trainer itself: W1 through tolaria.Trainer with its step captured
// (bench.RunW1Trainer: the epoch loop, the captured training step and
// validation batch replayed, the per-epoch read), 2 500 measured epochs
// of 4 training steps — 10 000 replays of the trainer's captured step —
// after which the allocator's reserved bytes are those of the 10th
// measured epoch and the driver's free memory is within 1 MiB of it.
// The run must replay in every epoch (RunW1Trainer fails otherwise) and
// end where the CPU's run ends.
func TestTrainerCapturedStepHoldsMemory(t *testing.T) {
	const warmup, epochs = 2, 2500
	memFree := func() int64 { return driverFree(t) }
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
	r, err := bench.RunW1Trainer(bench.W1Options{Epochs: epochs, Warmup: warmup, Captured: true, Device: tensor.CUDA(0), Emit: emit})
	if err != nil {
		t.Fatal(err)
	}
	if calls != warmup+epochs {
		t.Fatalf("%d epochs reported, want %d", calls, warmup+epochs)
	}
	if after.Reserved != before.Reserved {
		t.Fatalf("reserved device memory %d → %d bytes over %d trainer epochs", before.Reserved, after.Reserved, epochs-10)
	}
	if free0-free1 > 1<<20 {
		t.Fatalf("driver free memory fell %d bytes over %d trainer epochs (%d → %d)", free0-free1, epochs-10, free0, free1)
	}
	ref, err := bench.RunW1Trainer(bench.W1Options{Epochs: epochs, Warmup: warmup, Captured: true})
	if err != nil {
		t.Fatal(err)
	}
	closeRel(t, "final training loss against the CPU's", tensor.FromFloat64s(tensor.F64, []float64{r.Final.TrainLoss}), tensor.FromFloat64s(tensor.F64, []float64{ref.Final.TrainLoss}), 1e-3)
	t.Logf("trainer-captured W1, %d epochs (%d step replays): reserved %d bytes at epoch 10 and at the end; driver free %d → %d bytes; p95 %.1f µs per epoch; final loss %.6f (CPU %.6f)",
		epochs, 4*epochs, before.Reserved, free0, free1, r.Latency.P95us, r.Final.TrainLoss, ref.Final.TrainLoss)
}
