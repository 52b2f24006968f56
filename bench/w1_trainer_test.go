package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tensor"
)

// benchmarkW1Trainer times tolaria.Trainer.RunEpoch on W1 (PERF.md W1
// through the trainer, telemetry into a nissa hub), reporting the epoch
// latency's p50 and p95 next to ns/op and allocs/op.
func benchmarkW1Trainer(b *testing.B, captured bool) {
	const warmup = 50
	w, err := newW1Trainer(0, captured, false, warmup+b.N, tensor.CPU)
	require.NoError(b, err)
	defer w.close()
	ctx := context.Background()
	for e := 0; e < warmup; e++ {
		_, err := w.tr.RunEpoch(ctx, e)
		require.NoError(b, err)
	}
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r, err := w.tr.RunEpoch(ctx, warmup+i)
		lat[i] = time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if captured && !r.Captured {
			b.Fatal("epoch did not replay its captured step")
		}
	}
	b.StopTimer()
	l := Summarise(lat)
	b.ReportMetric(l.P50us, "p50-µs")
	b.ReportMetric(l.P95us, "p95-µs")
}

// BenchmarkW1TrainerCaptured is one W1 epoch through tolaria.Trainer with
// Capture (the ISSUE target: p95 ≤ 20 µs on the CPU, telemetry on).
func BenchmarkW1TrainerCaptured(b *testing.B) { benchmarkW1Trainer(b, true) }

// BenchmarkW1TrainerEager is one W1 epoch through tolaria.Trainer, eager.
func BenchmarkW1TrainerEager(b *testing.B) { benchmarkW1Trainer(b, false) }
