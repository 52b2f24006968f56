package gpu

import (
	"math"
	"testing"

	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/tensor"
)

// w5TestData is a small W5 evaluation pool: 4 batches of 4 random images
// and labels, on the host.
func w5TestData(t *testing.T) *bench.W5Data {
	t.Helper()
	d, err := bench.NewW5Data(bench.W5Options{Batch: 4, Steps: 1, Warmup: 1, EvalBatches: 3, EvalWarmup: 1, RandomData: true, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.EvalX) != 4 {
		t.Fatalf("%d eval batches, want 4", len(d.EvalX))
	}
	return d
}

// TestW5CapturedEvalOnSim: the captured evaluation forward, replayed on
// the sim device, gives the eager forward's logits bit for bit (the same
// kernels on the same weights), hence the same correct counts and loss
// sums, which are the CPU model's.
func TestW5CapturedEvalOnSim(t *testing.T) {
	dev, _ := openSim(t)
	d := w5TestData(t)
	m, err := bench.NewW5ModelOn(3, dev)
	if err != nil {
		t.Fatal(err)
	}
	var fallback error
	cp := w5CaptureEval(m, &fallback)
	chk, err := w5CheckEval(dev, m, cp, d.EvalX, d.EvalY)
	if err != nil {
		t.Fatal(err)
	}
	if fallback != nil {
		t.Fatalf("the captured evaluation fell back to eager: %v", fallback)
	}
	if st := cp.Stats(); st.Captures != 1 || chk.Replays != 3 {
		t.Fatalf("%d captures, %d replays over 4 batches: want 1 capture and 3 replays (the first call eager)", st.Captures, chk.Replays)
	}
	if !chk.OK || !chk.BitwiseEqual || chk.MaxAbsDiff != 0 {
		t.Fatalf("captured evaluation differs from eager on sim: %+v", chk)
	}
	if chk.Samples != 16 || chk.EagerCorrect != chk.CapturedCorrect || chk.EagerLossSum != chk.CapturedLossSum || !(chk.EagerLossSum > 0) {
		t.Fatalf("check figures: %+v", chk)
	}
	if cp.Launches() <= 0 {
		t.Errorf("the captured evaluation's graph has %d launches", cp.Launches())
	}

	// The eager forward on sim is the CPU's: the same model there scores
	// the same batches the same.
	cpuModel, err := bench.NewW5Model(3)
	if err != nil {
		t.Fatal(err)
	}
	cpuModel.SetTraining(false)
	cpu := func(x *tensor.Tensor) (*tensor.Tensor, error) { return cpuModel.Predict(x), nil }
	ref, err := w5CompareEval(tensor.CPU, d.EvalX, d.EvalY, cpu, cpu)
	if err != nil {
		t.Fatal(err)
	}
	if ref.EagerLossSum != chk.EagerLossSum || ref.EagerCorrect != chk.EagerCorrect {
		t.Errorf("sim eval: loss sum %v, %d correct; the CPU's: %v, %d", chk.EagerLossSum, chk.EagerCorrect, ref.EagerLossSum, ref.EagerCorrect)
	}
}

// TestW5CompareEvalCatchesADifference: logits from other weights fail
// the check, with the difference reported.
func TestW5CompareEvalCatchesADifference(t *testing.T) {
	dev, _ := openSim(t)
	d := w5TestData(t)
	var models [2]*bench.W5Model
	for i := range models {
		m, err := bench.NewW5ModelOn(uint64(10+i), dev)
		if err != nil {
			t.Fatal(err)
		}
		m.SetTraining(false)
		models[i] = m
	}
	run := func(m *bench.W5Model) func(*tensor.Tensor) (*tensor.Tensor, error) {
		return func(x *tensor.Tensor) (*tensor.Tensor, error) { return m.Predict(x), nil }
	}
	chk, err := w5CompareEval(dev, d.EvalX, d.EvalY, run(models[0]), run(models[1]))
	if err != nil {
		t.Fatal(err)
	}
	if chk.OK || chk.BitwiseEqual || !(chk.MaxRelDiff > w5EvalCheckTol) {
		t.Fatalf("logits of two different models passed the check: %+v", chk)
	}
	if _, err := w5CompareEval(dev, d.EvalX, d.EvalY[:1], run(models[0]), run(models[0])); err == nil {
		t.Error("4 image batches with 1 label batch: no error")
	}
}

// TestW5Score: the first maximum ranks, and the loss is the
// log-sum-exp minus the label's logit.
func TestW5Score(t *testing.T) {
	for _, c := range []struct {
		logits []float64
		y      int
		ok     bool
		loss   float64
	}{
		{[]float64{0, 0}, 0, true, math.Ln2},
		{[]float64{0, 0}, 1, false, math.Ln2},
		{[]float64{1, 2, 3}, 2, true, 0.40760596444438}, // ln(1 + e⁻¹ + e⁻²)
		{[]float64{1000, 0}, 1, false, 1000},            // no overflow
	} {
		ok, loss := w5Score(c.logits, c.y)
		if ok != c.ok || math.Abs(loss-c.loss) > 1e-9 {
			t.Errorf("w5Score(%v, %d) = %v, %v; want %v, %v", c.logits, c.y, ok, loss, c.ok, c.loss)
		}
	}
}
