package tolaria

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// evalRunner runs validation batches: the forward pass in inference
// mode, the batch's summed cross-entropy and its correct count added to
// a device-resident accumulator that evaluate reads once, after the last
// batch. Like the train step it only launches kernels, so with
// TrainerOptions.Capture each batch is replayed from a captured graph
// (same guard as the train step: the parameter set and every seed's
// stage, alpha and isolation, so a counterfactual's forced alpha gets a
// graph of its own).
type evalRunner struct {
	t        *Trainer
	captured *autograd.Captured
	met      *tensor.Tensor // F32 [2]: Σ loss, Σ correct
	both     *tensor.Tensor // F32 [4]: met and the training pass's, read together
	lossSum  *tensor.Tensor // met[0:1]
	correct  *tensor.Tensor // met[1:2]
	out      []*tensor.Tensor
	in       []*tensor.Tensor
	ce       kernels.CrossEntropyParams
	correctN correctCounter
	// n and batches count the samples and batches of the running
	// evaluate, err its failure; body is r.batch, bound once.
	n, batches int
	err        error
	body       func(x, y *tensor.Tensor) bool
}

func newEvalRunner(t *Trainer) *evalRunner {
	r := &evalRunner{
		t: t, met: zerosOn(t.dev, 2), in: make([]*tensor.Tensor, 2),
		ce: kernels.CrossEntropyParams{Reduction: kernels.ReduceSum},
	}
	r.lossSum, r.correct = r.met.Narrow(0, 0, 1), r.met.Narrow(0, 1, 1)
	r.out = []*tensor.Tensor{r.met}
	r.body = r.batch
	if t.o.Capture {
		r.captured = autograd.Capture(r.fn, autograd.CaptureOptions{
			Warmup:     t.o.CaptureWarmup,
			Policy:     autograd.Recapture,
			CacheSize:  4,
			Version:    t.step.guard,
			OnFallback: t.captureFallback,
		})
	}
	return r
}

// fn is one validation batch over in = {x, y}.
func (r *evalRunner) fn(in []*tensor.Tensor) []*tensor.Tensor {
	x, y := in[0], in[1]
	be := kernels.For(r.met.Device())
	autograd.InferenceMode(func() {
		logits := r.t.model.Forward(autograd.Const(x))
		l := autograd.CrossEntropy(logits, y, r.ce)
		be.Binary(kernels.Add, r.lossSum, r.lossSum, l.Value.Reshape(1))
		r.correctN.add(be, r.correct, logits, y)
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
// of the accumulator per call). A malformed batch, or no batch at all,
// is an error naming epoch e.
func (t *Trainer) evaluate(e int) (loss, acc float64, err error) {
	loss, acc, _, err = t.evaluateWith(e, nil)
	return loss, acc, err
}

// evaluateWith is evaluate reading, in the same device-to-host copy,
// the two sums of also (an F32 [2] accumulator on the model's device:
// the training pass's), which it returns; nil reads nothing more.
func (t *Trainer) evaluateWith(e int, also *tensor.Tensor) (loss, acc float64, alsoVals [2]float64, err error) {
	t.model.SetTraining(false)
	defer t.model.SetTraining(true)
	r := t.eval
	zeroMetrics(r.met)
	r.correctN.reset()
	r.n, r.batches, r.err = 0, 0, nil
	t.o.Val.Batches(e)(r.body)
	switch {
	case r.err != nil:
		return 0, 0, alsoVals, fmt.Errorf("tolaria: epoch %d: %w", e+1, r.err)
	case r.n == 0:
		return 0, 0, alsoVals, fmt.Errorf("tolaria: the validation batches of epoch %d are empty", e+1)
	}
	r.correctN.sumInto(r.correct)
	src := r.met
	if also != nil {
		// Both accumulators side by side in one buffer, one copy.
		if r.both == nil {
			r.both = zerosOn(r.met.Device(), 4)
		}
		be := kernels.For(r.both.Device())
		be.Copy(r.both.Narrow(0, 0, 2), r.met)
		be.Copy(r.both.Narrow(0, 2, 2), also)
		src = r.both
	}
	h, err := hostCopy(src)
	if err != nil {
		return 0, 0, alsoVals, fmt.Errorf("tolaria: epoch %d: reading the validation metrics: %w", e+1, err)
	}
	m := h.F32()
	if also != nil {
		alsoVals = [2]float64{float64(m[2]), float64(m[3])}
	}
	return float64(m[0]) / float64(r.n), 100 * float64(m[1]) / float64(r.n), alsoVals, nil
}
