package bench

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

func TestW5FLOPCount(t *testing.T) {
	// 2·9·(1·32·28² + 32·64·14² + 64·128·7²) + 2·128·10, the ≈ 45 MFLOP
	// per training sample of PERF.md once tripled.
	require.Equal(t, 2.0*9*(1*32*784+32*64*196+64*128*49)+2*128*10, W5FwdFLOPPerSample())
	require.InDelta(t, 45e6, 3*W5FwdFLOPPerSample(), 1e6)
}

// TestW5SmallRun trains the W5 host for 2 steps of batch 8 on random
// data, eagerly and captured, and times 2 evaluation batches.
func TestW5SmallRun(t *testing.T) {
	var phases []string
	r, err := RunW5(W5Options{
		Batch: 8, Steps: 2, Warmup: 2, EvalBatches: 2, EvalWarmup: 1, Captured: true, RandomData: true, Seed: 5,
		Progress: func(phase string, done, total int) {
			if done == total {
				phases = append(phases, phase)
			}
		},
	})
	require.NoError(t, err)
	require.Equal(t, "random-normal", r.Data)
	require.Contains(t, r.DataNote, "requested")
	require.Equal(t, []string{"train eager", "train captured", "eval", "eval captured"}, phases)
	// Conv 9·(1·32 + 32·64 + 64·128), BatchNorm 2·(32+64+128), Linear 128·10+10.
	require.Equal(t, 9*(32+32*64+64*128)+2*(32+64+128)+128*10+10, r.Params)
	require.Len(t, r.Train, 2)
	for _, tr := range r.Train {
		require.Equal(t, 2, tr.Latency.N, tr.Mode)
		require.Greater(t, tr.SamplesPerSec, 0.0, tr.Mode)
		require.InDelta(t, 8/(tr.Latency.MeanUs*1e-6), tr.SamplesPerSec, 1e-9*tr.SamplesPerSec, tr.Mode)
		require.Greater(t, tr.GFLOPS, 0.0, tr.Mode)
		require.Empty(t, tr.Fallback, tr.Mode)
		require.False(t, math.IsNaN(tr.FinalLoss), tr.Mode)
		// An untrained 10-class classifier starts near ln 10.
		require.InDelta(t, math.Log(10), tr.FirstLoss, 1.0, tr.Mode)
	}
	require.Equal(t, "eager", r.Train[0].Mode)
	require.Equal(t, "captured", r.Train[1].Mode)
	require.Greater(t, r.Train[1].Launches, 0)
	// Same seed, same batches, same steps (2 warm-up + 2): eager and
	// captured agree.
	require.InDelta(t, r.Train[0].FinalLoss, r.Train[1].FinalLoss, 1e-4)
	require.Equal(t, 2, r.Eval.Latency.N)
	require.Greater(t, r.Eval.SamplesPerSec, 0.0)
	require.Equal(t, "eager", r.Eval.Mode)
	require.NotNil(t, r.EvalCaptured)
	require.Equal(t, "captured", r.EvalCaptured.Mode)
	require.Equal(t, 2, r.EvalCaptured.Latency.N)
	require.Greater(t, r.EvalCaptured.SamplesPerSec, 0.0)

	_, err = RunW5(W5Options{Batch: -1})
	require.Error(t, err)
}

// TestW5FallsBackToRandomData: a missing data directory is reported, not
// fatal.
func TestW5FallsBackToRandomData(t *testing.T) {
	d := loadW5Data(W5Options{Batch: 4, Steps: 1, Warmup: 1, EvalBatches: 1, EvalWarmup: 1, DataDir: t.TempDir()}, tensor.NewRNG(1))
	require.Equal(t, "random-normal", d.Kind)
	require.Contains(t, d.Note, "Fashion-MNIST unavailable")
	require.Len(t, d.TrainX, 2)
	require.Equal(t, []int{4, 1, 28, 28}, d.TrainX[0].Shape())
}

// TestW5ModelAndData: NewW5Data returns the batches RunW5 draws for the
// same options, the exported model steps and predicts on them, and a
// device without a registered backend is an error, not a panic.
func TestW5ModelAndData(t *testing.T) {
	o := W5Options{Batch: 4, Steps: 1, Warmup: 1, EvalBatches: 1, EvalWarmup: 1, RandomData: true, Seed: 3}
	d, err := NewW5Data(o)
	require.NoError(t, err)
	od, err := o.withDefaults()
	require.NoError(t, err)
	ref := loadW5Data(od, tensor.NewRNG(o.Seed+1)) // as RunW5 draws them
	require.Equal(t, ref.TrainX[1].F32(), d.TrainX[1].F32())
	require.Equal(t, ref.EvalY[0].I64(), d.EvalY[0].I64())
	_, err = NewW5Data(W5Options{Steps: -1})
	require.Error(t, err)

	m, err := NewW5Model(3)
	require.NoError(t, err)
	require.Equal(t, 9*(32+32*64+64*128)+2*(32+64+128)+128*10+10, m.Params())
	require.Equal(t, uint64(1), m.Optimizer().Arena().Version())
	loss := m.Step([]*tensor.Tensor{d.TrainX[0], d.TrainY[0]})[0].Item()
	require.InDelta(t, math.Log(10), loss, 1.0)
	m.SetTraining(false)
	require.Equal(t, []int{4, 10}, m.Predict(d.EvalX[0]).Shape())

	_, err = NewW5ModelOn(3, tensor.CUDA(0))
	require.ErrorContains(t, err, "W5 on cuda:0")
}

// benchmarkW5Train times one W5 training step (batch 128, random data),
// eagerly or captured; b.N steps after two unmeasured ones.
func benchmarkW5Train(b *testing.B, captured bool) {
	m, err := NewW5Model(1)
	require.NoError(b, err)
	o := W5Options{Batch: 128, Steps: 4, Warmup: 2, RandomData: true}
	d := loadW5Data(o, tensor.NewRNG(2))
	run := func(in []*tensor.Tensor) { m.step(in) }
	if captured {
		c := autograd.Capture(m.step, autograd.CaptureOptions{Policy: autograd.FailOnMismatch, Version: m.opt.Arena().Version})
		run = func(in []*tensor.Tensor) {
			_, err := c.Run(in...)
			require.NoError(b, err)
		}
	}
	in := []*tensor.Tensor{d.TrainX[0], d.TrainY[0]}
	run(in)
	run(in)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(in)
	}
	b.ReportMetric(float64(o.Batch)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
}

func BenchmarkW5TrainEager(b *testing.B)    { benchmarkW5Train(b, false) }
func BenchmarkW5TrainCaptured(b *testing.B) { benchmarkW5Train(b, true) }

// BenchmarkW5Eval times one W5 evaluation forward of batch 128 in
// inference mode.
func BenchmarkW5Eval(b *testing.B) {
	m, err := NewW5Model(1)
	require.NoError(b, err)
	o := W5Options{Batch: 128, EvalBatches: 1, EvalWarmup: 1, RandomData: true}
	d := loadW5Data(o, tensor.NewRNG(2))
	nn.Eval(m.host)
	fwd := func() { autograd.InferenceMode(func() { m.host.Forward(autograd.Const(d.EvalX[0])) }) }
	fwd()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fwd()
	}
	b.ReportMetric(float64(o.Batch)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
}

// TestW5CapturedEvalMatchesEager: the captured evaluation forward that
// W5 times returns the eager logits, batch after batch (the replays read
// each new batch and the host's running statistics).
func TestW5CapturedEvalMatchesEager(t *testing.T) {
	m, err := NewW5Model(4)
	require.NoError(t, err)
	d, err := NewW5Data(W5Options{Batch: 8, Steps: 1, Warmup: 1, EvalBatches: 3, EvalWarmup: 1, RandomData: true, Seed: 4})
	require.NoError(t, err)
	nn.Eval(m.host)
	c := autograd.Capture(m.evalForward, autograd.CaptureOptions{Policy: autograd.FailOnMismatch})
	for i, x := range append(d.EvalX, d.EvalX...) {
		want := m.evalForward([]*tensor.Tensor{x})[0].Clone()
		out, err := c.Run(x)
		require.NoError(t, err)
		require.Equal(t, want.F32(), out[0].F32(), "batch %d", i)
	}
}
