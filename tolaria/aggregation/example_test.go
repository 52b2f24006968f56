package aggregation_test

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria/aggregation"
)

// PCGrad on two directly opposed gradients counts one conflict; on two
// orthogonal ones it leaves them alone and sums them.
func ExampleCombine() {
	rng := tensor.NewRNG(7)
	_, conflicts, _ := aggregation.Combine([][]float32{{1, 0}, {-1, 0}}, true, nil, rng)
	fmt.Println("opposed:", conflicts, "conflict")

	out, conflicts, _ := aggregation.Combine([][]float32{{1, 0}, {0, 1}}, true, nil, rng)
	fmt.Println("orthogonal:", out, conflicts, "conflicts")

	out, _, _ = aggregation.Combine([][]float32{{1, 1}, {2, 2}}, false, []float64{1, 3}, nil)
	fmt.Println("weighted:", out)
	// Output:
	// opposed: 1 conflict
	// orthogonal: [1 1] 0 conflicts
	// weighted: [1.75 1.75]
}

// One optimizer step of the seed path: flatten the gradients into a
// pooled buffer, split them by owner with the host's share redistributed
// by attribution, record the step's metrics, combine with PCGrad, and
// write the result back.
func Example_step() {
	host := autograd.Param(tensor.Zeros(tensor.F32, 2))
	seedA := autograd.Param(tensor.Zeros(tensor.F32, 1))
	seedB := autograd.Param(tensor.Zeros(tensor.F32, 1))
	params := []*autograd.Var{host, seedA, seedB}
	host.Grad = tensor.FromSlice([]float32{4, -2})
	seedA.Grad = tensor.FromSlice([]float32{1})
	seedB.Grad = tensor.FromSlice([]float32{-3})

	masks, _ := aggregation.SegmentMasks(params, []string{"host", "a", "b"})
	var pool aggregation.GradientBufferPool
	buf, _ := pool.Acquire(masks.Total(), tensor.F32)
	_ = aggregation.GradsToFlat(params, buf.F32())

	var split aggregation.SeedGrads
	attribution := map[string]float64{"a": 1, "b": 1} // host credit split evenly
	seeds := map[string]aggregation.SeedInfo{
		"a": {Stage: leyline.StageTraining, Alpha: 1},
		"b": {Stage: leyline.StageBlending, Alpha: 1},
	}
	_ = aggregation.PerSeed(&split, [][]float32{buf.F32()}, masks, attribution, 1, seeds)
	fmt.Println(split.Names, split.Weights, split.TeacherNorm)

	acc, _ := aggregation.NewSeedMetricsAccumulator(aggregation.AccumulatorOptions{})
	acc.SetMasks(masks)
	_ = acc.Record(split.Names, split.Flats, split.Weights, map[string]float64{"a": 1, "b": 1}, attribution, 1)
	_ = acc.RecordTeacherNorm(split.TeacherNorm)

	var comb aggregation.Combiner
	out, conflicts, _ := comb.Combine(split.Flats, true, split.Weights, tensor.NewRNG(1))
	_ = acc.RecordCombine(1, conflicts)
	_ = aggregation.FlatToGrads(out, params)
	_ = pool.Release(buf)
	fmt.Printf("combined %.3f, %d conflicts\n", out, conflicts)

	report := acc.Finalize(nil)
	fmt.Println(len(report.Metrics), "metrics, conflict ratio", report.ConflictRatio)
	// Output:
	// [a b] [1 0.5] 4.47213595499958
	// combined [2.000 -1.000 0.667 -1.000], 0 conflicts
	// 30 metrics, conflict ratio 0
}

// The seed step's tensor path, on the device of the gradients (here the
// CPU; on a GPU or the sim device the same calls read nothing back until
// Finalize): the gradients are flattened into a pooled buffer on that
// device, split per seed, recorded, combined with PCGrad in place and
// written back.
func ExampleTensorCombiner() {
	dev := tensor.CPU
	host := autograd.Param(tensor.Zeros(tensor.F32, 2))
	seedA := autograd.Param(tensor.Zeros(tensor.F32, 1))
	seedB := autograd.Param(tensor.Zeros(tensor.F32, 1))
	params := []*autograd.Var{host, seedA, seedB}
	host.Grad = tensor.FromSlice([]float32{4, -2})
	seedA.Grad = tensor.FromSlice([]float32{1})
	seedB.Grad = tensor.FromSlice([]float32{-3})
	masks, _ := aggregation.SegmentMasks(params, []string{"host", "a", "b"})

	var pool aggregation.GradientBufferPool
	buf, _ := pool.AcquireOn(dev, masks.Total(), tensor.F32)
	_ = aggregation.GradsToFlatTensor(params, buf)
	var split aggregation.SeedTensors
	// Seed b takes the host's gradient against a's share of it.
	attribution := map[string]float64{"a": 2, "b": -1}
	_ = aggregation.PerSeedTensors(&split, []*tensor.Tensor{buf}, masks, attribution, 1, nil)

	acc, _ := aggregation.NewSeedMetricsAccumulator(aggregation.AccumulatorOptions{})
	acc.SetMasks(masks)
	_ = acc.RecordTensors(split.Names, split.Flats, split.Weights, nil, attribution, 1)
	_ = acc.RecordTeacherNormTensor(split.TeacherNorm)
	var comb aggregation.TensorCombiner
	conflicts, _ := comb.CombineInto(buf, split.Flats, true, nil, tensor.NewRNG(1))
	_ = acc.RecordCombineTensor(1, conflicts)
	_ = aggregation.FlatTensorToGrads(buf, params)
	_ = pool.Release(buf)

	report := acc.Finalize(nil) // the one read of the epoch's device sums
	fmt.Println(split.Names, "conflict ratio", report.ConflictRatio)
	fmt.Printf("host %.3f, a %.3f, b %.3f\n", host.Grad.F32(), seedA.Grad.F32(), seedB.Grad.F32())
	// Output:
	// [a b] conflict ratio 0.5
	// host [-1.517 0.759], a [1.000], b [-7.138]
}

// A caller that already waits for the device once an epoch reads the
// accumulator's device sums in that wait: PendingSums joins its own
// tensors in one tensor.ToHostMany, and FlushFrom takes their host
// copies; Finalize then has nothing left to read.
func ExampleSeedMetricsAccumulator_FlushFrom() {
	params := []*autograd.Var{autograd.Param(tensor.Zeros(tensor.F32, 2)), autograd.Param(tensor.Zeros(tensor.F32, 1))}
	masks, _ := aggregation.SegmentMasks(params, []string{"host", "a"})
	acc, _ := aggregation.NewSeedMetricsAccumulator(aggregation.AccumulatorOptions{})
	acc.SetMasks(masks)
	// One step's per-seed vectors and conflict count, as tensors (on the
	// CPU here; on a GPU they stay on the device until the read).
	flats := []*tensor.Tensor{tensor.FromSlice([]float32{3, 4, 0}), tensor.FromSlice([]float32{0, 0, 12})}
	_ = acc.RecordTensors([]string{"a", "b"}, flats, []float64{1, 1}, nil, nil, 0)
	_ = acc.RecordCombineTensor(1, tensor.FromSlice([]float64{0}))

	mine := tensor.FromSlice([]float32{1.5}) // the caller's own figure
	read := append([]*tensor.Tensor{mine}, acc.PendingSums()...)
	host, _ := tensor.ToHostMany(read) // one wait on a device
	fmt.Println("mine", host[0].F32(), "sums", len(read)-1)
	if err := acc.FlushFrom(host[1:]); err != nil {
		fmt.Println(err)
	}
	fmt.Println("pending after:", acc.PendingSums() == nil)
	report := acc.Finalize(nil)
	fmt.Println(report.Err == nil, "conflict ratio", report.ConflictRatio)
	// Output:
	// mine [1.5] sums 2
	// pending after: true
	// true conflict ratio 0
}
