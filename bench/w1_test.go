package bench

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"

	"github.com/esper-go/esper/tensor"
)

// TestW1CapturedMatchesEager: the captured epoch computes bitwise the same
// metrics as the eager one, allocates nothing per epoch, and learns.
func TestW1CapturedMatchesEager(t *testing.T) {
	eager, captured := make([]EpochMetrics, 0, 64), make([]EpochMetrics, 0, 64)
	re, err := RunW1(W1Options{Epochs: 30, Warmup: 5, Emit: func(m EpochMetrics) { eager = append(eager, m) }})
	require.NoError(t, err)
	rc, err := RunW1(W1Options{Epochs: 30, Warmup: 5, Captured: true, Emit: func(m EpochMetrics) { captured = append(captured, m) }})
	require.NoError(t, err)
	require.Equal(t, eager, captured)
	require.Less(t, eager[len(eager)-1].TrainLoss, eager[0].TrainLoss, "training lowers the loss")
	require.Greater(t, rc.Launches, 0)
	require.Greater(t, re.AllocsPerEpoch, 0.0)

	// Allocation-free replays, measured with testing.AllocsPerRun (which
	// holds GOMAXPROCS at 1, so a stray allocation by some other goroutine
	// of the test binary cannot land in the count as it can in RunW1's
	// process-wide MemStats figure).
	m, err := NewW1(0)
	require.NoError(t, err)
	c := captureW1(m, func(err error) { t.Fatal(err) })
	in := []*tensor.Tensor{m.x, m.y}
	for i := 0; i < 3; i++ {
		_, err := c.Run(in...)
		require.NoError(t, err)
	}
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := c.Run(in...); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs, "captured epochs allocate nothing")
}

// TestW1StaticInputsMatchesEager: feeding the replays through the
// captured graph's static input buffers (no input copies) computes the
// same metrics as the eager epoch, and says it did.
func TestW1StaticInputsMatchesEager(t *testing.T) {
	eager, static := make([]EpochMetrics, 0, 32), make([]EpochMetrics, 0, 32)
	_, err := RunW1(W1Options{Epochs: 20, Warmup: 3, Emit: func(m EpochMetrics) { eager = append(eager, m) }})
	require.NoError(t, err)
	r, err := RunW1(W1Options{Epochs: 20, Warmup: 3, Captured: true, StaticInputs: true, Emit: func(m EpochMetrics) { static = append(static, m) }})
	require.NoError(t, err)
	require.True(t, r.StaticInputs)
	require.Equal(t, eager, static)
	r, err = RunW1(W1Options{Epochs: 2, Warmup: 1, StaticInputs: true})
	require.NoError(t, err)
	require.False(t, r.StaticInputs, "StaticInputs without Captured does nothing")
}

func TestSummarise(t *testing.T) {
	require.Zero(t, Summarise(nil).N)
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Microsecond)
	}
	l := Summarise(d)
	require.Equal(t, 100, l.N)
	require.Equal(t, 50.0, l.P50us)
	require.Equal(t, 95.0, l.P95us)
	require.Equal(t, 99.0, l.P99us)
	require.Equal(t, 100.0, l.MaxUs)
	require.InDelta(t, 50.5, l.MeanUs, 1e-9)
}

// benchmarkStep times step over in, eagerly or replayed from a capture.
func benchmarkStep(b *testing.B, m *W1, step autograd.StepFunc, in []*tensor.Tensor, captured bool) {
	run := func() { step(in) }
	if captured {
		c := autograd.Capture(step, autograd.CaptureOptions{
			Policy:     autograd.FailOnMismatch,
			Version:    m.opt.Arena().Version,
			OnFallback: func(err error) { b.Fatal(err) },
		})
		run = func() {
			if _, err := c.Run(in...); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := 0; i < 5; i++ {
		run()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
}

func benchmarkW1(b *testing.B, captured bool) {
	m, err := NewW1(0)
	require.NoError(b, err)
	benchmarkStep(b, m, m.Epoch, []*tensor.Tensor{m.x, m.y}, captured)
}

// BenchmarkW1Eager is one W1 epoch run eagerly (PERF.md W1).
func BenchmarkW1Eager(b *testing.B) { benchmarkW1(b, false) }

// BenchmarkW1Captured is one W1 epoch replayed from a capture.
func BenchmarkW1Captured(b *testing.B) { benchmarkW1(b, true) }

func benchmarkW1Step(b *testing.B, captured bool) {
	m, err := NewW1(0)
	require.NoError(b, err)
	benchmarkStep(b, m, m.TrainStep, []*tensor.Tensor{m.x.Narrow(0, 0, w1Batch), m.y.Narrow(0, 0, w1Batch)}, captured)
}

// BenchmarkW1StepEager is one W1 train step (batch 4) run eagerly.
func BenchmarkW1StepEager(b *testing.B) { benchmarkW1Step(b, false) }

// BenchmarkW1StepCaptured is one W1 train step replayed from a capture.
func BenchmarkW1StepCaptured(b *testing.B) { benchmarkW1Step(b, true) }

// TestW1ThroughTrainer: W1 run by tolaria.Trainer learns, captured and
// eager give the same metrics, and every epoch's telemetry arrives.
func TestW1ThroughTrainer(t *testing.T) {
	var eager, captured []EpochMetrics
	_, err := RunW1Trainer(W1Options{Epochs: 20, Warmup: 3, Emit: func(m EpochMetrics) { eager = append(eager, m) }})
	require.NoError(t, err)
	rc, err := RunW1Trainer(W1Options{Epochs: 20, Warmup: 3, Captured: true, Emit: func(m EpochMetrics) { captured = append(captured, m) }})
	require.NoError(t, err)
	require.Equal(t, eager, captured)
	require.Less(t, eager[len(eager)-1].TrainLoss, eager[0].TrainLoss)
	require.Equal(t, "trainer-captured", rc.Mode)
	// Its launches: W1's batches are fixed views, so the whole epoch is
	// one graph, replayed once: one ZeroMany for the metrics and the
	// first step's gradients, then 4 × (step + validation batch), each
	// with work in it, and the CPU's gradient zeroing after each of the
	// first three steps (one launch each: 1 + 3 ≡ 0 mod 4).
	require.Equal(t, 1, rc.GraphReplays)
	require.Greater(t, rc.Launches, 9)
	require.Equal(t, 0, rc.Launches%4, "1 + 4 × (step + validation) + 3")
	// Batch by batch (a source that is not tolaria.FixedBatches): 4
	// replays of the step graph and 4 of the validation graph, the same
	// metrics.
	var perBatch []EpochMetrics
	rp, err := RunW1Trainer(W1Options{Epochs: 20, Warmup: 3, Captured: true, PerBatch: true, Emit: func(m EpochMetrics) { perBatch = append(perBatch, m) }})
	require.NoError(t, err)
	require.Equal(t, eager, perBatch)
	require.Equal(t, "trainer-captured-per-batch", rp.Mode)
	require.Equal(t, 8, rp.GraphReplays)
	require.Zero(t, rp.Launches%4, "4 × (step + validation)")
	require.Greater(t, rp.Launches, 8)
}

// TestW1OnDeviceWithoutBackend: W1 on a device whose backend is not
// registered is an error naming the device, not a panic.
func TestW1OnDeviceWithoutBackend(t *testing.T) {
	_, err := RunW1(W1Options{Epochs: 1, Device: tensor.CUDA(0)})
	require.ErrorContains(t, err, "cuda:0")
}

// TestW1ValidationMetrics: the epoch's validation loss and accuracy equal
// a float64 computation from the weights the training steps left (the
// validation pass does not change them): mean cross-entropy and the share
// of argmax predictions that match, over the 16 samples.
func TestW1ValidationMetrics(t *testing.T) {
	for _, captured := range []bool{false, true} {
		m, err := NewW1(3)
		require.NoError(t, err)
		in := []*tensor.Tensor{m.x, m.y}
		run := func() *tensor.Tensor { return m.Epoch(in)[0] }
		if captured {
			c := captureW1(m, func(err error) { t.Fatal(err) })
			run = func() *tensor.Tensor {
				out, err := c.Run(in...)
				require.NoError(t, err)
				return out[0]
			}
		}
		var got EpochMetrics
		for e := 0; e < 6; e++ { // several epochs, so that accuracy moves
			got = m.read(e, run())
		}
		w, b, x, y := m.w.Value.F32(), m.b.Value.F32(), m.x.F32(), m.y.I64()
		var loss float64
		correct := 0
		for i := 0; i < w1Samples; i++ {
			var logits [w1Out]float64
			best := 0
			for o := range logits {
				v := float64(b[o])
				for k := 0; k < w1In; k++ {
					v += float64(w[o*w1In+k]) * float64(x[i*w1In+k])
				}
				logits[o] = v
				if v > logits[best] {
					best = o
				}
			}
			mx := logits[best]
			var se float64
			for _, v := range logits {
				se += math.Exp(v - mx)
			}
			loss += mx + math.Log(se) - logits[y[i]]
			if int64(best) == y[i] {
				correct++
			}
		}
		require.InDelta(t, loss/w1Samples, got.ValLoss, 1e-5, "captured %v", captured)
		require.Equal(t, float64(correct)/w1Samples, got.ValAccuracy, "captured %v", captured)
	}
}
