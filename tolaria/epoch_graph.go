package tolaria

import (
	"context"
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// maxEpochGraphBatches bounds the batches (training and validation
// together) of an epoch captured as one graph: the graph keeps every
// batch's intermediates alive at once, so a long epoch is replayed step
// by step instead.
const maxEpochGraphBatches = 64

// epochGraph runs a whole epoch — the zeroing of the epoch's metrics,
// every training step, every validation batch — as one captured region,
// when TrainerOptions.Capture is set and both Train and Val are
// FixedBatches: a replay is then one graph launch per epoch (a CUDA
// graph, a recorded CPU tape) instead of one per batch, and the epoch's
// one host sync is the metrics read that follows it. The device work is
// the per-batch path's but for the zeroing: the metrics are zeroed
// inside the graph, and each step but the last leaves the gradients
// zeroed in its optimizer launch so that the next skips its ZeroGrad.
// Its results are bitwise those of the per-batch path (captured or
// eager).
//
// Epochs that need host work between the steps keep the per-batch
// path: gradient telemetry (GradientTelemetryStride), OnStep, a PCGrad
// combination, batches that must be copied to the device, and epochs of
// more than maxEpochGraphBatches batches.
type epochGraph struct {
	t        *Trainer
	captured *autograd.Captured
	// list holds the epoch's inputs, x and y of each training batch,
	// then of each validation batch; nTrain is the training batches
	// among them and trainRows, valRows the rows of each pass.
	list               batchList
	nTrain             int
	trainRows, valRows int
	// body and valBody are collect's loop bodies, bound once.
	body, valBody func(x, y *tensor.Tensor) bool
	out           []*tensor.Tensor
}

// batchList gathers fixed batches for a graph over them: x and y of each
// batch, in order, while they may join one (well formed, on the model's
// device already, at most maxEpochGraphBatches); ok turns false, and
// the loop stops, at the first that may not.
type batchList struct {
	dev tensor.Device
	in  []*tensor.Tensor
	ok  bool
}

// reset empties the list for a new collection.
func (l *batchList) reset() {
	clear(l.in)
	l.in, l.ok = l.in[:0], true
}

// add appends one batch, counting its rows into rows, or clears l.ok and
// stops the loop (false).
func (l *batchList) add(x, y *tensor.Tensor, rows *int) bool {
	if len(l.in) >= 2*maxEpochGraphBatches || checkBatch("", 0, x, y) != nil ||
		x.Device() != l.dev || y.Device() != l.dev {
		l.ok = false
		return false
	}
	l.in = append(l.in, x, y)
	*rows += y.Dim(0)
	return true
}

func newEpochGraph(t *Trainer) *epochGraph {
	if !t.o.Capture {
		return nil
	}
	tf, ok1 := t.o.Train.(FixedBatches)
	vf, ok2 := t.o.Val.(FixedBatches)
	if !ok1 || !ok2 || tf == nil || vf == nil {
		return nil
	}
	g := &epochGraph{t: t, out: []*tensor.Tensor{t.met.buf}, list: batchList{dev: t.dev}}
	g.body = func(x, y *tensor.Tensor) bool { return g.list.add(x, y, &g.trainRows) }
	g.valBody = func(x, y *tensor.Tensor) bool { return g.list.add(x, y, &g.valRows) }
	g.captured = t.listCapture(g.fn, 2, true, func() int { return g.nTrain })
	return g
}

// listCapture captures fn, a graph over a list of fixed batches (its one
// bound input set), with the trainer's warm-up and fallback, keeping up
// to cacheSize graphs: re-captured when graphKey(train) (train: the
// graph trains) or n (what else shapes the graph, such as how many of
// the batches are training batches) changes.
func (t *Trainer) listCapture(fn func([]*tensor.Tensor) []*tensor.Tensor, cacheSize int, train bool, n func() int) *autograd.Captured {
	return autograd.Capture(fn, autograd.CaptureOptions{
		Warmup:      t.o.CaptureWarmup,
		Policy:      autograd.Recapture,
		CacheSize:   cacheSize,
		Version:     func() uint64 { return t.graphKey(train) ^ uint64(n())*0x9e3779b97f4a7c15 },
		OnFallback:  t.captureFallback,
		BoundInputs: 1,
	})
}

// collect gathers epoch e's batches and reports whether the epoch can
// run as one graph (see epochGraph). It only ranges over the sources,
// which for FixedBatches launches nothing.
func (g *epochGraph) collect(e int) bool {
	if g == nil {
		return false
	}
	t := g.t
	if t.o.GradientTelemetryStride > 0 || t.o.OnStep != nil || t.step.afterBackward != nil {
		return false
	}
	if !t.o.Train.(FixedBatches).Fixed() || !t.o.Val.(FixedBatches).Fixed() {
		return false
	}
	if t.agg.combining(t.model, t.opt) {
		return false
	}
	l := &g.list
	l.reset()
	g.trainRows, g.valRows = 0, 0
	t.o.Train.Batches(e)(g.body)
	g.nTrain = len(l.in) / 2
	if l.ok {
		t.o.Val.Batches(e)(g.valBody)
	}
	if !l.ok || g.nTrain == 0 || len(l.in) == 2*g.nTrain || g.trainRows == 0 || g.valRows == 0 {
		l.reset()
		return false
	}
	return true
}

// fn is the epoch: the metrics zeroed, the training steps in training
// mode, the validation batches in eval mode (the training mode is
// restored after them), as one block sequence (sequenced): on CUDA a
// small linear model's whole epoch — the zeroing, every step's
// LinearCESGDStep, every validation batch's LinearCrossEntropyCount —
// is one launch, one node of the epoch's graph, when its calls fit one
// launch's arguments (about 20 steps) and take one block size; a few
// launches otherwise.
func (g *epochGraph) fn(in []*tensor.Tensor) []*tensor.Tensor {
	return sequenced(g.t.dev, func() []*tensor.Tensor { return g.epoch(in) })
}

// sequenced runs f as one sequence where dev's backend joins one-block
// launches (kernels.BlockSequencer; f only launches: a graph's body),
// else as it is. A sequence that fails to launch panics, as a failed
// launch does (which fails a capture).
func sequenced[R any](dev tensor.Device, f func() R) R {
	bs, ok := kernels.For(dev).(kernels.BlockSequencer)
	if !ok {
		return f()
	}
	bs.BeginSequence()
	ended := false
	defer func() {
		if !ended { // f panicked: end the sequence, keep f's panic
			_ = bs.EndSequence()
		}
	}()
	out := f()
	ended = true
	if err := bs.EndSequence(); err != nil {
		panic(fmt.Sprintf("tolaria: %v", err))
	}
	return out
}

// epoch is fn's work.
func (g *epochGraph) epoch(in []*tensor.Tensor) []*tensor.Tensor {
	t := g.t
	// The metrics and the first step's gradients are zeroed together
	// where the backend can (one launch), else each as the per-batch
	// path zeroes them.
	zeroed := false
	if zm, ok := kernels.For(t.dev).(kernels.ZeroManyer); ok && g.nTrain > 0 {
		bufs := []*tensor.Tensor{t.met.beginEpochView()}
		t.opt.each(t.model, func(o *optim.SGD) { bufs = o.Arena().AppendGradBuffers(bufs) })
		zm.ZeroMany(bufs)
		zeroed = true
	} else {
		t.met.beginEpochLaunch()
	}
	// Nothing reads the gradients between the steps of an epoch graph:
	// each step but the last leaves them zeroed in its optimizer launch,
	// and the next skips its ZeroGrad. The last leaves them as the
	// per-batch path does.
	s := t.step
	defer func() { s.zeroed, s.zeroAfter = false, false }() // also when a step panics
	for i := 0; i < g.nTrain; i++ {
		s.zeroed, s.zeroAfter = i > 0 || zeroed, i < g.nTrain-1
		s.fn(in[2*i : 2*i+2])
	}
	s.zeroed, s.zeroAfter = false, false
	t.model.SetTraining(false)
	t.met.beginValidation()
	for i := g.nTrain; i < len(in)/2; i++ {
		t.eval.fn(in[2*i : 2*i+2])
	}
	t.model.SetTraining(true)
	return g.out
}

// run runs the collected epoch e and reads its metrics (one host sync
// on a device): the training steps and samples, the training loss sum
// and correct count, and the validation loss and accuracy into r.
func (g *epochGraph) run(ctx context.Context, e int, r *EpochReport) (samples int, train [2]float64, err error) {
	t := g.t
	defer g.list.reset()
	if err := ctx.Err(); err != nil {
		return 0, train, err
	}
	before := g.captured.Stats().Replays
	if _, err := g.captured.Run(g.list.in...); err != nil {
		return 0, train, fmt.Errorf("tolaria: epoch %d: %w", e+1, err)
	}
	replayed := g.captured.Stats().Replays > before
	t.step.globalStep += g.nTrain
	r.Steps, r.Captured, r.EpochCaptured = g.nTrain, replayed, replayed
	val, train, err := t.readEpoch(e)
	if err != nil {
		return 0, [2]float64{}, err
	}
	r.ValLoss, r.ValAccuracy = val[0]/float64(g.valRows), 100*val[1]/float64(g.valRows)
	return g.trainRows, train, nil
}
