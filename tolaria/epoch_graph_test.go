package tolaria

import (
	"context"
	"iter"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// fixedOn is hostToyData as one tensor pair on dev, cut by NewFixed
// into batches of size rows.
func fixedOn(t *testing.T, dev tensor.Device, seed uint64, batches, size int) *Fixed {
	t.Helper()
	d := hostToyData(seed, 1, batches*size)
	x, y := d.x[0], d.y[0]
	if !dev.IsCPU() {
		var err error
		x, err = x.ToDevice(dev)
		require.NoError(t, err)
		y, err = y.ToDevice(dev)
		require.NoError(t, err)
	}
	f, err := NewFixed(x, y, FixedOptions{Size: size})
	require.NoError(t, err)
	return f
}

// perBatch hides a Fixed source's Fixed method: the trainer takes the
// per-batch path over the very same tensors.
type perBatch struct{ f *Fixed }

func (p perBatch) Batches(e int) iter.Seq2[*tensor.Tensor, *tensor.Tensor] { return p.f.Batches(e) }

// epochRun trains hostTrainerModel on dev under the lifecycle script
// (germinations and an advance re-capture the graphs) without gradient
// telemetry, and returns the trainer, the summary and the final
// parameters.
func epochRun(t *testing.T, dev tensor.Device, train, val Batches, capture bool) (*Trainer, Summary, map[string][]float32) {
	t.Helper()
	m := hostTrainerModel(t)
	require.NoError(t, nn.To(m, dev))
	tr, err := NewTrainer(TrainerOptions{
		Model: m, Train: train, Val: val, Epochs: 6, Controller: script, HostLR: 0.05,
		GradientTelemetryStride: -1, Capture: capture,
	})
	require.NoError(t, err)
	sum, err := tr.Fit(context.Background())
	require.NoError(t, err)
	return tr, sum, params(t, m)
}

// TestEpochGraphBitwisePerBatch: with Capture and both sources Fixed,
// the trainer replays whole epochs as one graph — seeds germinating and
// advancing between epochs re-capture it — and its epoch reports and
// final parameters are bit for bit those of the per-batch captured path
// over the same tensors and of the eager run, on the CPU and on sim. On
// sim every epoch still costs one host sync (the metrics read after the
// graph); an epoch graph replay is one replay where the per-batch path
// makes one per batch.
func TestEpochGraphBitwisePerBatch(t *testing.T) {
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		train, val := fixedOn(t, dev, 1, 5, 8), fixedOn(t, dev, 2, 2, 8)
		_, eager, ep := epochRun(t, dev, train, val, false)
		_, batched, bp := epochRun(t, dev, perBatch{train}, perBatch{val}, true)
		tr, whole, wp := epochRun(t, dev, train, val, true)
		require.Equal(t, ep, wp, "%v: final parameters, eager and epoch graph", dev)
		require.Equal(t, bp, wp, "%v: final parameters, per-batch and epoch graph", dev)
		wholeEpochs := 0
		for i, r := range whole.Epochs {
			require.False(t, batched.Epochs[i].EpochCaptured, "%v epoch %d: a source that is not Fixed runs batch by batch", dev, i)
			require.False(t, eager.Epochs[i].EpochCaptured)
			require.Equal(t, r.Captured, r.EpochCaptured, "%v epoch %d: the steps ran in the epoch graph or not at all captured", dev, i)
			if r.EpochCaptured {
				wholeEpochs++
				require.Zero(t, r.StepP50, "steps are not timed one by one in an epoch graph")
			}
			if !dev.IsCPU() {
				require.Equal(t, uint64(1), r.HostSyncs, "%v epoch %d", dev, i)
			}
		}
		// Epochs 0, 1 and 2 end with a germination or an advance (a new
		// parameter set or stage: the guard changes), so the graph is
		// captured and replayed only in the last epochs, after the
		// warm-up and the binding of the inputs under the final guard.
		t.Logf("%v: %d of %d epochs replayed whole, %d launches in the epoch graph", dev, wholeEpochs, len(whole.Epochs), tr.EpochGraphNodes())
		require.Positive(t, wholeEpochs, "%v: some epochs replayed as one graph", dev)
		for _, s := range []*Summary{&eager, &batched, &whole} {
			for i := range s.Epochs {
				s.Epochs[i].Captured, s.Epochs[i].EpochCaptured = false, false
			}
		}
		sameReports(t, eager.Epochs, whole.Epochs)
		sameReports(t, batched.Epochs, whole.Epochs)
		require.Positive(t, tr.EpochGraphNodes(), "%v: the epoch graph's launches", dev)
		step, v := tr.GraphNodes()
		require.Zero(t, step+v, "%v: no per-batch graph was captured", dev)
		require.Equal(t, wholeEpochs, tr.captureStats().Replays, "%v: one replay per whole epoch", dev)
	}
}

// TestEpochGraphDeclines: epochs that need host work between their
// steps keep the per-batch captured path, Fixed sources or not: OnStep,
// gradient telemetry, and more batches than an epoch graph holds.
func TestEpochGraphDeclines(t *testing.T) {
	dev := tensor.CPU
	cases := map[string]func(o *TrainerOptions){
		"OnStep":                  func(o *TrainerOptions) { o.OnStep = func(StepInfo) {} },
		"GradientTelemetryStride": func(o *TrainerOptions) { o.GradientTelemetryStride = 3 },
		"too many batches": func(o *TrainerOptions) {
			o.Train = fixedOn(t, dev, 1, maxEpochGraphBatches, 2)
		},
	}
	for name, set := range cases {
		o := TrainerOptions{
			Model: hostTrainerModel(t), Train: fixedOn(t, dev, 1, 4, 8), Val: fixedOn(t, dev, 2, 2, 8),
			Epochs: 4, HostLR: 0.05, GradientTelemetryStride: -1, Capture: true,
		}
		set(&o)
		tr, err := NewTrainer(o)
		require.NoError(t, err)
		sum, err := tr.Fit(context.Background())
		require.NoError(t, err, name)
		for _, r := range sum.Epochs {
			require.False(t, r.EpochCaptured, "%s: epoch %d", name, r.Epoch)
		}
		require.True(t, sum.Final().Captured, "%s: the steps are captured one by one", name)
		require.Zero(t, tr.EpochGraphNodes(), name)
	}
}

// TestNewFixed: NewFixed cuts the rows into views, the last one shorter
// unless DropLast, yields the same tensors every epoch, and refuses bad
// input with an error naming it.
func TestNewFixed(t *testing.T) {
	x := tensor.Normal(tensor.NewRNG(1), tensor.F32, 0, 1, 10, 3)
	y := tensor.RandInt(tensor.NewRNG(2), 4, 10)
	ySim, err := y.ToDevice(tensor.Sim(0))
	require.NoError(t, err)
	f, err := NewFixed(x, y, FixedOptions{Size: 4})
	require.NoError(t, err)
	require.Equal(t, 3, f.Len())
	require.Equal(t, 10, f.Rows())
	require.True(t, f.Fixed())
	var first []*tensor.Tensor
	for bx, by := range f.Batches(0) {
		first = append(first, bx, by)
	}
	require.Equal(t, []int{2, 3}, first[4].Shape(), "the last batch is shorter")
	i := 0
	for bx, by := range f.Batches(7) {
		require.Same(t, first[i], bx)
		require.Same(t, first[i+1], by)
		i += 2
	}
	require.Same(t, x.Storage(), first[2].Storage(), "a batch is a view of x")
	require.Equal(t, 4*3, first[2].Offset(), "the second batch starts at row 4")

	d, err := NewFixed(x, y, FixedOptions{Size: 4, DropLast: true})
	require.NoError(t, err)
	require.Equal(t, 2, d.Len())
	require.Equal(t, 8, d.Rows())

	for name, c := range map[string]struct {
		x, y *tensor.Tensor
		o    FixedOptions
		want string
	}{
		"size":     {x, y, FixedOptions{}, "batch size 0"},
		"rows":     {x, y.Narrow(0, 0, 9), FixedOptions{Size: 2}, "10 images and 9 labels"},
		"nil":      {nil, y, FixedOptions{Size: 2}, "nil images"},
		"labels":   {x, x, FixedOptions{Size: 2}, "want images [N, ...] and labels [N]"},
		"droplast": {x, y, FixedOptions{Size: 11, DropLast: true}, "make no batch of 11"},
		"devices":  {x, ySim, FixedOptions{Size: 2}, "labels on sim"},
	} {
		_, err := NewFixed(c.x, c.y, c.o)
		require.ErrorIs(t, err, ErrOptions, name)
		require.ErrorContains(t, err, c.want, name)
	}
}

// TestValidationPassGraph: with Capture, a Fixed validation source and
// training batches that are not (a shuffled loader's, say), every
// validation pass is one graph replay while the steps replay batch by
// batch, and the run is bit for bit the eager one, on the CPU and on
// sim (one host sync an epoch there).
func TestValidationPassGraph(t *testing.T) {
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		train, val := fixedOn(t, dev, 1, 5, 8), fixedOn(t, dev, 2, 3, 8)
		_, eager, ep := epochRun(t, dev, perBatch{train}, val, false)
		tr, got, gp := epochRun(t, dev, perBatch{train}, val, true)
		require.Equal(t, ep, gp, "%v: final parameters", dev)
		for i, r := range got.Epochs {
			require.False(t, r.EpochCaptured, "%v epoch %d: the training batches are not Fixed", dev, i)
			if !dev.IsCPU() {
				require.Equal(t, uint64(1), r.HostSyncs, "%v epoch %d", dev, i)
			}
		}
		require.True(t, got.Final().Captured, "%v: the steps replay", dev)
		for _, s := range []*Summary{&eager, &got} {
			for i := range s.Epochs {
				s.Epochs[i].Captured = false
			}
		}
		sameReports(t, eager.Epochs, got.Epochs)
		require.Zero(t, tr.eval.captured.Launches(), "%v: no per-batch validation graph", dev)
		require.Positive(t, tr.eval.pass.Launches(), "%v: the validation pass graph", dev)
		require.Positive(t, tr.eval.pass.Stats().Replays, "%v", dev)
	}
}

// TestSequencedOnSim: sequenced runs its function inside one block
// sequence where the backend has them (sim), ends it when the function
// panics (the panic going on), and runs it as it is on the CPU.
func TestSequencedOnSim(t *testing.T) {
	sb, ok := kernels.For(tensor.Sim(0)).(interface{ Sequences() int })
	require.True(t, ok, "sim counts its sequences")
	require.Equal(t, 0, sb.Sequences())
	got := sequenced(tensor.Sim(0), func() int { return sb.Sequences() })
	require.Equal(t, 1, got, "the function runs inside one sequence")
	require.Equal(t, 0, sb.Sequences(), "the sequence ends with it")
	require.PanicsWithValue(t, "boom", func() {
		sequenced(tensor.Sim(0), func() int { panic("boom") })
	})
	require.Equal(t, 0, sb.Sequences(), "a panicking function's sequence ends too")
	require.Equal(t, 7, sequenced(tensor.CPU, func() int { return 7 }))
}

// TestEpochGraphSequencesEndOnSim: a trainer whose epochs replay as one
// graph (their body a sequence, warm-up and capture included) leaves no
// sequence on.
func TestEpochGraphSequencesEndOnSim(t *testing.T) {
	sb := kernels.For(tensor.Sim(0)).(interface{ Sequences() int })
	dev := tensor.Sim(0)
	_, sum, _ := epochRun(t, dev, fixedOn(t, dev, 1, 4, 8), fixedOn(t, dev, 2, 2, 8), true)
	require.True(t, sum.Epochs[len(sum.Epochs)-1].EpochCaptured)
	require.Equal(t, 0, sb.Sequences())
}

// TestTrainerClose: Close drops the graphs of every captured region (per
// batch, and the whole epoch's), keeping the figures; the later epochs
// warm up and capture again, and train on.
func TestTrainerClose(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		o := TrainerOptions{Model: hostTrainerModel(t), Epochs: 4, HostLR: 0.05, GradientTelemetryStride: -1, Capture: true}
		if fixed {
			o.Train, o.Val = fixedOn(t, tensor.CPU, 1, 4, 8), fixedOn(t, tensor.CPU, 2, 2, 8)
		} else {
			o.Train, o.Val = toyDataOn(t, tensor.CPU, 1, 4, 8), toyDataOn(t, tensor.CPU, 2, 2, 8)
		}
		tr, err := NewTrainer(o)
		require.NoError(t, err)
		for e := range 2 {
			_, err := tr.RunEpoch(context.Background(), e)
			require.NoError(t, err)
		}
		st := tr.CaptureStats()
		require.Positive(t, st.CachedGraphs, "fixed %v: graphs cached", fixed)
		require.NoError(t, tr.Close())
		after := tr.CaptureStats()
		require.Zero(t, after.CachedGraphs, "fixed %v: graphs left after Close", fixed)
		require.Equal(t, st.Captures, after.Captures, "fixed %v: the figures stay", fixed)
		for e := 2; e < 4; e++ { // a warm-up, then a capture, again
			r, err := tr.RunEpoch(context.Background(), e)
			require.NoError(t, err)
			require.False(t, math.IsNaN(r.ValLoss), "fixed %v, epoch %d", fixed, e)
		}
		require.Greater(t, tr.CaptureStats().Captures, st.Captures, "fixed %v: the later epochs capture again", fixed)
	}
}
