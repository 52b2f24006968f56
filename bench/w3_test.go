package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestW3Runs: the germination workload completes, registers every seed
// with the conv_light parameter count and reports one latency per request.
func TestW3Runs(t *testing.T) {
	calls := 0
	r, err := RunW3(W3Options{Requests: 12, Concurrency: 3, Warmup: 1, Progress: func(done, total int) {
		calls++
		require.Equal(t, 12, total)
		require.Equal(t, calls, done)
	}})
	require.NoError(t, err)
	require.Equal(t, 12, r.Latency.N)
	require.Equal(t, 12, calls)
	// conv_light at 32 channels: 3×3 conv 32·32·9, GroupNorm 2·32, out scale 32.
	require.Equal(t, 32*32*9+2*32+32, r.SeedParams)
	require.Greater(t, r.Latency.P50us, 0.0)
	require.LessOrEqual(t, r.Latency.P50us, r.Latency.P95us)
}

func TestW3RejectsBadOptions(t *testing.T) {
	_, err := RunW3(W3Options{Requests: -1})
	require.Error(t, err)
	_, err = RunW3(W3Options{Requests: 2, Blueprint: "no_such_blueprint"})
	require.ErrorContains(t, err, "no_such_blueprint")
}

// BenchmarkW3Germinate reports the W3 latency percentiles (the PERF.md
// target is p95 ≤ 1 ms on the CPU).
func BenchmarkW3Germinate(b *testing.B) {
	for b.Loop() {
		r, err := RunW3(W3Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.Latency.P50us, "p50-µs")
		b.ReportMetric(r.Latency.P95us, "p95-µs")
	}
}
