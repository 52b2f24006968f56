package aggregation

import (
	"fmt"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// benchFlats returns k random gradients of n elements; every other one
// leans against the first, so PCGrad has conflicts to project.
func benchFlats(k, n int) [][]float32 {
	rng := tensor.NewRNG(11)
	flats := make([][]float32, k)
	for i := range flats {
		flats[i] = randVec(rng, n)
	}
	for i := 1; i < k; i += 2 {
		for e := range flats[i] {
			flats[i][e] -= flats[0][e]
		}
	}
	return flats
}

// BenchmarkCombine times one optimizer step's combination over 1M
// elements (≈ a 1M-parameter model) with 2 and 4 seeds, with and without
// PCGrad, through the allocation-free Combiner.
func BenchmarkCombine(b *testing.B) {
	const n = 1 << 20
	for _, k := range []int{2, 4} {
		flats := benchFlats(k, n)
		weights := make([]float64, k)
		for i := range weights {
			weights[i] = 1 / float64(i+1)
		}
		for _, pc := range []bool{false, true} {
			b.Run(fmt.Sprintf("seeds=%d/pcgrad=%v", k, pc), func(b *testing.B) {
				var c Combiner
				out := make([]float32, n)
				rng := tensor.NewRNG(1)
				b.SetBytes(int64(k * n * 4))
				b.ReportAllocs()
				conflicts := 0
				for b.Loop() {
					var err error
					conflicts, err = c.CombineInto(out, flats, pc, weights, rng)
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(conflicts), "conflicts")
			})
		}
	}
}

// BenchmarkRecord times the accumulator's per-step work for 4 seeds over
// 1M elements (norms and the 6 pairwise inner products).
func BenchmarkRecord(b *testing.B) {
	const n = 1 << 20
	flats := benchFlats(4, n)
	names := []string{"a", "b", "c", "d"}
	weights := []float64{1, 1, 0.5, 0.25}
	acc, _ := NewSeedMetricsAccumulator(AccumulatorOptions{})
	b.SetBytes(int64(4 * n * 4))
	b.ReportAllocs()
	for b.Loop() {
		if err := acc.Record(names, flats, weights, nil, nil, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTensorCombine is BenchmarkCombine through TensorCombiner on
// the CPU backend (the tensor path a device runs, here on host memory):
// the projection pass and the sum as backend launches, the flats
// projected in place (they are restored from a copy outside the timer's
// concern: the restore is part of each iteration, a Copy per seed).
func BenchmarkTensorCombine(b *testing.B) {
	const n = 1 << 20
	for _, k := range []int{2, 4} {
		flats := benchFlats(k, n)
		weights := make([]float64, k)
		for i := range weights {
			weights[i] = 1 / float64(i+1)
		}
		src := make([]*tensor.Tensor, k)
		work := make([]*tensor.Tensor, k)
		for i, f := range flats {
			src[i] = tensor.FromSlice(f, n)
			work[i] = tensor.Zeros(tensor.F32, n)
		}
		for _, pc := range []bool{false, true} {
			b.Run(fmt.Sprintf("seeds=%d/pcgrad=%v", k, pc), func(b *testing.B) {
				var c TensorCombiner
				out := tensor.Zeros(tensor.F32, n)
				rng := tensor.NewRNG(1)
				b.SetBytes(int64(k * n * 4))
				b.ReportAllocs()
				var conflicts *tensor.Tensor
				for b.Loop() {
					for i := range work {
						tensor.CopyInto(work[i], src[i])
					}
					var err error
					conflicts, err = c.CombineInto(out, work, pc, weights, rng)
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(conflicts.Item(), "conflicts")
			})
		}
	}
}

// BenchmarkRecordTensors is BenchmarkRecord through RecordTensors on the
// CPU backend (the per-step sums stay in tensors until Flush).
func BenchmarkRecordTensors(b *testing.B) {
	const n = 1 << 20
	flats := benchFlats(4, n)
	ts := make([]*tensor.Tensor, len(flats))
	for i, f := range flats {
		ts[i] = tensor.FromSlice(f, n)
	}
	names := []string{"a", "b", "c", "d"}
	weights := []float64{1, 1, 0.5, 0.25}
	acc, _ := NewSeedMetricsAccumulator(AccumulatorOptions{})
	b.SetBytes(int64(4 * n * 4))
	b.ReportAllocs()
	for b.Loop() {
		if err := acc.RecordTensors(names, ts, weights, nil, nil, 0); err != nil {
			b.Fatal(err)
		}
	}
}
