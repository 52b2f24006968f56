package bench

import (
	"math"
	"sort"
	"time"
)

// Latency summarises a set of per-iteration durations.
type Latency struct {
	N      int     `json:"n"`
	P50us  float64 `json:"p50_us"`
	P95us  float64 `json:"p95_us"`
	P99us  float64 `json:"p99_us"`
	MaxUs  float64 `json:"max_us"`
	MeanUs float64 `json:"mean_us"`
}

// Summarise computes nearest-rank percentiles (the PyTorch peer scripts
// use the same definition).
func Summarise(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	us := make([]float64, len(d))
	sum := 0.0
	for i, v := range d {
		us[i] = float64(v.Nanoseconds()) / 1e3
		sum += us[i]
	}
	sort.Float64s(us)
	return Latency{
		N:      len(us),
		P50us:  percentile(us, 50),
		P95us:  percentile(us, 95),
		P99us:  percentile(us, 99),
		MaxUs:  us[len(us)-1],
		MeanUs: sum / float64(len(us)),
	}
}

// percentile is the nearest-rank percentile of an ascending slice.
func percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	k := int(math.Ceil(p / 100 * float64(n)))
	k = max(1, min(k, n))
	return sorted[k-1]
}
