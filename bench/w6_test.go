package bench

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestW6ComputesTheProduct: at n = 64 both implementations compute A·B
// (checked here entry by entry against a float64 reference, independently
// of RunW6's own sampled check) and the figures are positive and
// consistent with the latencies.
func TestW6ComputesTheProduct(t *testing.T) {
	const n = 64
	r, err := RunW6(W6Options{Size: n, Reps: 5, Warmup: 1, Seed: 7})
	require.NoError(t, err)
	require.Equal(t, 2.0*n*n*n, r.FLOPPerGEMM)
	for name, g := range map[string]GEMMTiming{"esper": r.Esper, "gonum": r.Gonum} {
		require.Equal(t, 5, g.Latency.N, name)
		require.Greater(t, g.MedianGFLOPS, 0.0, name)
		require.GreaterOrEqual(t, g.BestGFLOPS, g.MedianGFLOPS, name)
		require.InDelta(t, r.FLOPPerGEMM/(g.Latency.P50us*1e-6)/1e9, g.MedianGFLOPS, 1e-9*g.MedianGFLOPS, name)
		require.Less(t, g.MaxRelErr, 1e-5, name)
	}

	// The same operands through the workload's own code paths.
	w := newW6(n, 7)
	w.esper()
	w.gonum()
	a, b, c := w.a.F32(), w.b.F32(), w.c.F32()
	for _, ij := range [][2]int{{0, 0}, {0, n - 1}, {n - 1, 0}, {17, 42}, {n - 1, n - 1}, {31, 5}} {
		i, j := ij[0], ij[1]
		ref := 0.0
		for k := 0; k < n; k++ {
			ref += float64(a[i*n+k]) * float64(b[k*n+j])
		}
		require.InDelta(t, ref, float64(c[i*n+j]), 1e-4, "esper C[%d,%d]", i, j)
		require.InDelta(t, ref, float64(w.gc[i*n+j]), 1e-4, "gonum C[%d,%d]", i, j)
	}
	// RunW6's sampled check catches a wrong product.
	require.Less(t, w.checkEntries(c, W6CheckEntries, 1), 1e-5)
	wrong := append([]float32(nil), c...)
	for i := range wrong {
		wrong[i] += 0.5
	}
	require.Greater(t, w.checkEntries(wrong, W6CheckEntries, 1), 1e-3)
	for i := range wrong {
		wrong[i] = float32(math.NaN())
	}
	require.True(t, math.IsInf(w.checkEntries(wrong, 1, 1), 1))
}

// TestW6Rounds: the engine is timed in Rounds blocks with AfterRound
// after each, in order, before gonum; the pooled figures cover every
// block; an AfterRound error stops the run.
func TestW6Rounds(t *testing.T) {
	var events []string
	r, err := RunW6(W6Options{Size: 32, Reps: 4, Warmup: 1, Rounds: 3, Seed: 3,
		Progress: func(impl string, round int) { events = append(events, fmt.Sprintf("%s %d", impl, round)) },
		AfterRound: func(round int) error {
			events = append(events, fmt.Sprintf("after %d", round))
			return nil
		},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"esper 1", "after 1", "esper 2", "after 2", "esper 3", "after 3", "gonum 0"}, events)
	require.Equal(t, 3, r.Rounds)
	require.Len(t, r.EsperRounds, 3)
	require.Equal(t, 12, r.Esper.Latency.N)
	require.Equal(t, 4, r.Gonum.Latency.N)
	best := 0.0
	for _, g := range r.EsperRounds {
		require.Equal(t, 4, g.Latency.N)
		require.Less(t, g.MaxRelErr, 1e-5)
		best = max(best, g.BestGFLOPS)
	}
	require.InDelta(t, best, r.Esper.BestGFLOPS, 1e-9*best)

	stop := errors.New("peer failed")
	calls := 0
	_, err = RunW6(W6Options{Size: 16, Reps: 1, Rounds: 3, AfterRound: func(int) error { calls++; return stop }})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
}

func TestW6RejectsNegativeOptions(t *testing.T) {
	_, err := RunW6(W6Options{Size: -1})
	require.Error(t, err)
	_, err = RunW6(W6Options{Reps: -2})
	require.Error(t, err)
	_, err = RunW6(W6Options{Rounds: -1})
	require.Error(t, err)
}

// BenchmarkW6GEMM times the engine's 256³ fp32 GEMM (the harness runs
// the full 1024³ workload).
func BenchmarkW6GEMM(b *testing.B) {
	w := newW6(256, 1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.esper()
	}
	b.ReportMetric(2*256*256*256*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
