package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPoolW6Peers: the peer's runs pool into figures over every product,
// keep each run's own summary, and a run without latencies is an error.
func TestPoolW6Peers(t *testing.T) {
	const flop = 2e9 // 1 ms is 2000 GFLOP/s
	runs := []map[string]any{
		{"torch_version": "x", "median_gflops": 1.0, "lat_us": []any{1000.0, 4000.0, 2000.0}},
		{"torch_version": "x", "median_gflops": 2.0, "lat_us": []any{500.0, 3000.0}},
	}
	p, err := poolW6Peers(runs, flop)
	require.NoError(t, err)
	require.Equal(t, "x", p["torch_version"])
	require.Equal(t, 5, p["reps"])
	require.InDelta(t, 2000.0, p["p50_us"].(float64), 1e-9) // 500 1000 [2000] 3000 4000
	require.InDelta(t, 1000.0, p["median_gflops"].(float64), 1e-9)
	require.InDelta(t, 4000.0, p["best_gflops"].(float64), 1e-9)
	require.NotContains(t, p, "lat_us")
	sums := p["runs"].([]map[string]any)
	require.Len(t, sums, 2)
	require.Equal(t, 2.0, sums[1]["median_gflops"])
	require.NotContains(t, sums[0], "lat_us")

	_, err = poolW6Peers([]map[string]any{{"median_gflops": 1.0}}, flop)
	require.ErrorContains(t, err, "lat_us")
	_, err = poolW6Peers([]map[string]any{{"lat_us": []any{-1.0}}}, flop)
	require.ErrorContains(t, err, "bad latency")
}
