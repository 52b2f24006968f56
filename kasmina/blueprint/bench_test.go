package blueprint

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/esper-go/esper/tensor"
)

// BenchmarkBuildConvLight32 measures one germination-time Build of
// conv_light at 32 channels, probe included.
func BenchmarkBuildConvLight32(b *testing.B) {
	rng := tensor.NewRNG(1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(TopologyCNN, "conv_light", Options{Channels: 32, RNG: rng}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuildConvLight32Concurrent4 builds conv_light at 32 channels
// from four goroutines at once, W3's germination pattern (256 builds,
// target p95 ≤ 1 ms), and reports the p50 and p95 latency of one Build.
func BenchmarkBuildConvLight32Concurrent4(b *testing.B) {
	const workers = 4
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := tensor.NewRNG(uint64(w))
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				start := time.Now()
				if _, err := Build(TopologyCNN, "conv_light", Options{Channels: 32, RNG: rng}); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1e3, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1e3, "p95-ms")
}
