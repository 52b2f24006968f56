package tolaria

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// evalRunner runs validation batches: the forward pass in inference
// mode, the batch's summed cross-entropy and its correct count added to
// the validation pass's device-resident accumulators (the trainer's
// metricsBuf), which evaluate reads once, after the last batch. Like
// the train step it only launches kernels, so with
// TrainerOptions.Capture each batch is replayed from a captured graph
// (keyed by graphKey(false): every seed in the forward pass, its stage,
// alpha and isolation, so a counterfactual's forced alpha gets a graph
// of its own, while seeds outside it and the optimizers do not count).
type evalRunner struct {
	t        *Trainer
	captured *autograd.Captured
	// met is the validation pass's part of the trainer's epoch metrics
	// (Σ loss, Σ correct, the per-row correct counters).
	met *passMetrics
	out []*tensor.Tensor
	in  []*tensor.Tensor
	ce  kernels.CrossEntropyParams
	// n and batches count the samples and batches of the running
	// evaluate, err its failure; body is r.batch, bound once.
	n, batches int
	err        error
	body       func(x, y *tensor.Tensor) bool
	// pass replays a whole validation pass as one graph when Val is
	// FixedBatches (nil otherwise), over the batches in list (passBody
	// collects them, counting rows into passRows).
	pass     *autograd.Captured
	list     batchList
	passRows int
	passBody func(x, y *tensor.Tensor) bool
}

func newEvalRunner(t *Trainer) *evalRunner {
	r := &evalRunner{
		t: t, met: &t.met.val, in: make([]*tensor.Tensor, 2),
		ce: kernels.CrossEntropyParams{Reduction: kernels.ReduceSum},
	}
	r.out = []*tensor.Tensor{r.met.sums}
	r.body = r.batch
	if t.o.Capture {
		r.captured = autograd.Capture(r.fn, autograd.CaptureOptions{
			Warmup:      t.o.CaptureWarmup,
			Policy:      autograd.Recapture,
			CacheSize:   4,
			Version:     func() uint64 { return t.graphKey(false) },
			OnFallback:  t.captureFallback,
			BoundInputs: boundBatches,
		})
		if _, ok := t.o.Val.(FixedBatches); ok {
			r.list.dev = t.dev
			r.passBody = func(x, y *tensor.Tensor) bool { return r.list.add(x, y, &r.passRows) }
			r.pass = t.listCapture(r.passFn, 4, false, func() int { return len(r.list.in) })
		}
	}
	return r
}

// passFn is a whole validation pass over in (x and y of each batch), as
// one block sequence (sequenced: one launch on CUDA for a linear head's
// batches).
func (r *evalRunner) passFn(in []*tensor.Tensor) []*tensor.Tensor {
	return sequenced(r.t.dev, func() []*tensor.Tensor {
		for i := 0; i < len(in)/2; i++ {
			r.fn(in[2*i : 2*i+2])
		}
		return r.out
	})
}

// runPass runs epoch e's validation pass as one graph (r.pass) and
// reports whether it did: Val must be FixedBatches and Fixed, and its
// batches fit a graph (see batchList); otherwise nothing ran and the
// caller takes the batches one by one. It sets r.n, r.batches and r.err
// as the per-batch loop does.
func (r *evalRunner) runPass(e int) bool {
	if r.pass == nil || !r.t.o.Val.(FixedBatches).Fixed() {
		return false
	}
	l := &r.list
	l.reset()
	defer l.reset()
	r.passRows = 0
	r.t.o.Val.Batches(e)(r.passBody)
	if !l.ok || len(l.in) == 0 {
		return false
	}
	r.n, r.batches = r.passRows, len(l.in)/2
	if _, err := r.pass.Run(l.in...); err != nil {
		r.err = err
	}
	return true
}

// fn is one validation batch over in = {x, y}.
func (r *evalRunner) fn(in []*tensor.Tensor) []*tensor.Tensor {
	x, y := in[0], in[1]
	autograd.InferenceMode(func() {
		if l, logits, counted, _ := r.met.forwardLoss(r.t.model, x, y, r.ce, nil); !counted {
			r.met.add(l, logits, y)
		}
	})
	return r.out
}

// batch is the validation loop's body: one batch added to the
// accumulator, replayed when captured.
func (r *evalRunner) batch(x, y *tensor.Tensor) bool {
	r.batches++
	if err := checkBatch("validation", r.batches, x, y); err != nil {
		r.err = err
		return false
	}
	x, y, err := r.t.input(x, y)
	if err != nil {
		r.err = fmt.Errorf("validation batch %d: %w", r.batches, err)
		return false
	}
	r.in[0], r.in[1] = x, y
	if r.captured == nil {
		r.fn(r.in)
	} else if _, err := r.captured.Run(r.in...); err != nil {
		r.err = err
	}
	clear(r.in)
	r.n += y.Dim(0)
	return r.err == nil
}

// evaluate runs the validation batches in inference mode and eval mode
// and returns the mean loss and the accuracy in percent (one host read
// of the validation accumulators per call; they are zeroed first, one
// Fill on a device). A malformed batch, or no batch at all, is an error
// naming epoch e.
func (t *Trainer) evaluate(e int) (loss, acc float64, err error) {
	loss, acc, _, err = t.evaluateWith(e, false)
	return loss, acc, err
}

// evaluateWith is evaluate reading, withTrain, the training pass's loss
// sum and correct count in the same device-to-host copy, which it
// returns (zeros without). RunEpoch calls it after trainEpoch, whose
// beginEpoch left the validation accumulators zeroed: that pass needs
// no Fill of its own.
func (t *Trainer) evaluateWith(e int, withTrain bool) (loss, acc float64, train [2]float64, err error) {
	t.model.SetTraining(false)
	defer t.model.SetTraining(true)
	r := t.eval
	t.met.beginValidation()
	r.n, r.batches, r.err = 0, 0, nil
	if !r.runPass(e) {
		t.o.Val.Batches(e)(r.body)
	}
	switch {
	case r.err != nil:
		return 0, 0, train, fmt.Errorf("tolaria: epoch %d: %w", e+1, r.err)
	case r.n == 0:
		return 0, 0, train, fmt.Errorf("tolaria: the validation batches of epoch %d are empty", e+1)
	}
	var val [2]float64
	if withTrain {
		val, train, err = t.readEpoch(e)
	} else if val, _, err = t.met.read(false); err != nil {
		err = fmt.Errorf("tolaria: epoch %d: reading the validation metrics: %w", e+1, err)
	}
	if err != nil {
		return 0, 0, [2]float64{}, err
	}
	return val[0] / float64(r.n), 100 * val[1] / float64(r.n), train, nil
}
