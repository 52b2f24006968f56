package nn

import (
	"testing"

	"github.com/esper-go/esper/tensor"
)

func BenchmarkKaimingUniformConv32(b *testing.B) {
	rng := tensor.NewRNG(1)
	t := tensor.Empty(tensor.F32, 32, 32, 3, 3)
	b.ReportAllocs()
	for b.Loop() {
		KaimingUniform(rng, t, KaimingOptions{})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(t.Numel()), "ns/elem")
}
