package tolaria

import (
	"fmt"
	"slices"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// correctRows is the capacity, per pass (training, validation), of the
// per-row correct counters in metricsBuf's buffer: the batch sizes a
// pass keeps counters for (see correctCounter) must fit in it together.
// A batch size that does not fit takes correctCounter's slower path.
// The whole buffer is 64 KiB of device memory per trainer; an epoch
// zeroes and reads only the rows in use.
const correctRows = 1 << 13

// maxCorrectBufs bounds the batch sizes each correctCounter keeps
// counters for (training batches and the last partial batch; validation
// batches and theirs).
const maxCorrectBufs = 8

// metricsBuf holds every per-epoch accumulator of the trainer — the
// training pass's loss sum and correct count, the validation pass's, and
// the per-row correct counters of both passes' correctCounter — as views
// into one contiguous F32 buffer on the model's device. The buffer is
// allocated and zeroed once, with the trainer, and never reallocated:
// captured graphs record the views' addresses. An epoch zeroes what it
// uses with one Fill (beginEpoch) and reads it with one device-to-host
// copy (read); the per-row counters are summed on the host. A further
// validation pass in the epoch (a counterfactual's) zeroes the
// validation range alone, one Fill (beginValidation), and reads it alone.
//
// The layout, with R = correctRows:
//
//	[0, R)       the training counters, taken downward from R
//	R, R+1       the training loss sum and correct count
//	R+2, R+3     the validation loss sum and correct count
//	[R+4, 2R+4)  the validation counters, taken upward from R+4
//
// so that what the training pass uses, what the validation pass uses,
// and both together are each one contiguous range. Rows no counter has
// taken are never written and stay zero from the allocation; a counter
// taken mid-epoch therefore starts at zero.
type metricsBuf struct {
	dev tensor.Device
	buf *tensor.Tensor // F32 [2R+4]
	// train and val are the passes' sums (F32 [2] views: loss sum,
	// correct count) and per-row counters.
	train, val passMetrics
	// valZero tells whether the validation range is zero: set by
	// beginEpoch, cleared by beginValidation (its pass writes it).
	valZero bool
	// both and valOnly are the used ranges (training and validation;
	// validation only), views cached until a counter is taken.
	both, valOnly *tensor.Tensor
}

// passMetrics is one pass's part of metricsBuf.
type passMetrics struct {
	sums     *tensor.Tensor // F32 [2]: Σ loss, Σ correct (correctCounter's slow path)
	lossSum  *tensor.Tensor // sums[0:1]
	correct  *tensor.Tensor // sums[1:2]
	correctN correctCounter
}

// crossEntropy is the batch's loss under p. When the batch has a
// counter (see correctCounter) and the loss is reduced, it is
// autograd.CrossEntropyCount, which adds the loss and the correct count
// to the pass's metrics in the loss's own launch on CUDA, and counted is
// true; otherwise it is CrossEntropy and the caller adds them (add).
func (pm *passMetrics) crossEntropy(logits *autograd.Var, y *tensor.Tensor, p kernels.CrossEntropyParams) (loss *autograd.Var, counted bool) {
	if p.Reduction != kernels.ReduceNone {
		if b := pm.correctN.counter(logits, y); b != nil {
			return autograd.CrossEntropyCount(logits, y, p, pm.lossSum, b.acc), true
		}
	}
	return autograd.CrossEntropy(logits, y, p), false
}

// forwardLoss runs m on x and returns the batch's loss under p, as
// m.Forward and then crossEntropy would: with a reduced loss, a counter
// for the batch and a host whose output layer is a linear head
// (kasmina.LinearHead), the head and its counted loss go together
// (autograd.LinearCrossEntropyCount: one launch on CUDA for a small
// batch), counted is true and logits nil; otherwise logits are the
// model's output and the loss crossEntropy's.
//
// With step (a training step that may run whole: stepRunner.linearStep)
// and such a head over features that take no gradient, step is offered
// the head's whole training step (only then: other models pay nothing
// for it); when it takes it (stepped true) there is no loss to
// back-propagate and nothing more to do.
func (pm *passMetrics) forwardLoss(m *kasmina.MorphogeneticModel, x, y *tensor.Tensor, p kernels.CrossEntropyParams, step linearStep) (loss, logits *autograd.Var, counted, stepped bool) {
	if p.Reduction != kernels.ReduceNone && y.DType().IsInt() && y.Rank() == 1 {
		feats, head, err := m.ForwardFeatures(autograd.Const(x))
		if err != nil {
			panic(err.Error()) // as Forward panics
		}
		if head == nil {
			loss, counted = pm.crossEntropy(feats, y, p)
			return loss, feats, counted, false
		}
		if b := pm.correctN.get(y.Device(), y.Dim(0)); b != nil && feats.Value.Rank() == 2 && feats.Value.Dim(0) == y.Dim(0) && feats.Value.Device() == y.Device() {
			if step != nil && !feats.RequiresGrad() && step(feats.Value, head, y, pm.lossSum, b.acc) {
				return nil, nil, true, true
			}
			return autograd.LinearCrossEntropyCount(feats, head.Weight, head.Bias, y, p, pm.lossSum, b.acc), nil, true, false
		}
		logits = head.Forward(feats)
		loss, counted = pm.crossEntropy(logits, y, p)
		return loss, logits, counted, false
	}
	logits = m.Forward(autograd.Const(x))
	loss, counted = pm.crossEntropy(logits, y, p)
	return loss, logits, counted, false
}

// linearStep runs a linear head's whole training step over features x
// (no gradient) against y, adding the loss and correct counts to lossSum
// and acc, and reports whether it did (optim.SGD.LinearCEStep); false
// leaves everything as it was.
type linearStep func(x *tensor.Tensor, head *nn.Linear, y, lossSum, acc *tensor.Tensor) bool

// add adds a batch's loss (one element) and correct count to the pass's
// metrics: the path of crossEntropy's uncounted losses.
func (pm *passMetrics) add(loss, logits *autograd.Var, y *tensor.Tensor) {
	be := kernels.For(pm.sums.Device())
	be.Binary(kernels.Add, pm.lossSum, pm.lossSum, loss.Value.Reshape(1))
	pm.correctN.add(be, pm.correct, logits, y)
}

func newMetricsBuf(dev tensor.Device) *metricsBuf {
	m := &metricsBuf{dev: dev, buf: zerosOn(dev, 2*correctRows+4), valZero: true}
	for i, p := range []*passMetrics{&m.train, &m.val} {
		p.sums = m.buf.Narrow(0, correctRows+2*i, 2)
		p.lossSum, p.correct = p.sums.Narrow(0, 0, 1), p.sums.Narrow(0, 1, 1)
		p.correctN = correctCounter{m: m, down: i == 0}
	}
	return m
}

// trainLo, valLo and valHi bound the used ranges: the training pass's
// is [trainLo, valLo), the validation pass's [valLo, valHi).
func (m *metricsBuf) trainLo() int { return correctRows - m.train.correctN.used }
func (m *metricsBuf) valLo() int   { return correctRows + 2 }
func (m *metricsBuf) valHi() int   { return correctRows + 4 + m.val.correctN.used }

// usedView returns the used range of both passes, or of the validation
// pass only.
func (m *metricsBuf) usedView(withTrain bool) *tensor.Tensor {
	if withTrain {
		if m.both == nil {
			m.both = m.buf.Narrow(0, m.trainLo(), m.valHi()-m.trainLo())
		}
		return m.both
	}
	if m.valOnly == nil {
		m.valOnly = m.buf.Narrow(0, m.valLo(), m.valHi()-m.valLo())
	}
	return m.valOnly
}

// beginEpoch zeroes both passes' accumulators, with one Fill on a
// device (outside any captured region).
func (m *metricsBuf) beginEpoch() {
	zeroMetrics(m.usedView(true))
	m.valZero = true
}

// beginEpochLaunch is beginEpoch through the backend's Fill even on
// the CPU, so that a captured region (the epoch graph) records it.
func (m *metricsBuf) beginEpochLaunch() {
	kernels.For(m.dev).Fill(m.beginEpochView(), 0)
}

// beginEpochView is beginEpochLaunch's tensor for a caller that zeroes
// it itself (with others, in one kernels.ZeroManyer launch).
func (m *metricsBuf) beginEpochView() *tensor.Tensor {
	m.valZero = true
	return m.usedView(true)
}

// beginValidation zeroes the validation pass's accumulators unless
// they are still zero from beginEpoch (one Fill on a device when not).
func (m *metricsBuf) beginValidation() {
	if !m.valZero {
		zeroMetrics(m.usedView(false))
	}
	m.valZero = false
}

// read copies the used range to the host in one copy (one host sync on
// a device) and returns the validation pass's loss sum and correct
// count and, withTrain, the training pass's (else zeros). The correct
// counts add the per-row counters on the host: small integers, exact in
// F32 and in the float64 sum, so the count is the one a device sum gave
// (exact below 2^24).
func (m *metricsBuf) read(withTrain bool) (val, train [2]float64, err error) {
	val, train, _, err = m.readWith(withTrain, nil, nil)
	return val, train, err
}

// readWith is read that also copies the tensors extra (of any dtype, on
// the buffer's device; nil entries allowed) to the host in the same
// wait for the device, and returns their host copies. With read set, it
// makes the copy (the trainer's EpochRead), whatever extra holds; else
// tensor.ToHostMany does (one host sync for all), or a plain copy when
// extra holds no tensor.
func (m *metricsBuf) readWith(withTrain bool, extra []*tensor.Tensor, read func([]*tensor.Tensor) ([]*tensor.Tensor, error)) (val, train [2]float64, hosts []*tensor.Tensor, err error) {
	v := m.usedView(withTrain)
	var h *tensor.Tensor
	switch {
	case read == nil && !slices.ContainsFunc(extra, func(t *tensor.Tensor) bool { return t != nil }):
		hosts = make([]*tensor.Tensor, len(extra))
		h, err = hostCopy(v)
	default:
		if read == nil {
			read = tensor.ToHostMany
		}
		all := append([]*tensor.Tensor{v}, extra...)
		if hosts, err = read(all); err == nil && len(hosts) != len(all) {
			err = fmt.Errorf("tolaria: the epoch's read returned %d tensors for %d", len(hosts), len(all))
		}
		if err == nil {
			h, hosts = hosts[0], hosts[1:]
		}
	}
	if err != nil {
		return val, train, nil, err
	}
	val, train = m.parse(h, withTrain)
	return val, train, hosts, nil
}

// parse sums the host copy h of usedView(withTrain) into the passes'
// loss sums and correct counts.
func (m *metricsBuf) parse(h *tensor.Tensor, withTrain bool) (val, train [2]float64) {
	d := h.F32()
	lo := m.valLo()
	if withTrain {
		lo = m.trainLo()
		t := d[:m.valLo()-lo]
		n := len(t) - 2
		train = [2]float64{float64(t[n]), float64(t[n+1]) + sumRows(t[:n])}
	}
	vs := d[m.valLo()-lo:]
	val = [2]float64{float64(vs[0]), float64(vs[1]) + sumRows(vs[2:])}
	return val, train
}

// sumRows sums per-row correct counters.
func sumRows(rows []float32) float64 {
	s := 0.0
	for _, r := range rows {
		s += float64(r)
	}
	return s
}

// taken records that a counter was taken: the used ranges grew.
func (m *metricsBuf) taken() { m.both, m.valOnly = nil, nil }

// zeroMetrics zeroes a metrics accumulator: in place for a contiguous
// F32 tensor on the CPU, with the backend's Fill elsewhere. Only outside
// a captured region.
func zeroMetrics(m *tensor.Tensor) {
	if m.Device().IsCPU() && m.DType() == tensor.F32 && m.IsContiguous() {
		clear(m.F32())
		return
	}
	kernels.For(m.Device()).Fill(m, 0)
}

// zerosOn returns a zeroed F32 [n] tensor on dev.
func zerosOn(dev tensor.Device, n int) *tensor.Tensor {
	t, err := tensor.EmptyOn(dev, tensor.F32, n)
	if err != nil {
		panic(err)
	}
	zeroMetrics(t)
	return t
}

// correctCounter counts one pass's correct predictions on the device
// with one launch per batch — kernels.Backend.CountCorrect into a
// per-batch-size F32 [n] counter, a view into metricsBuf's buffer —
// instead of reducing every batch to a scalar. metricsBuf zeroes the
// counters with the pass's sums and sums them on the host when it reads
// them. A counter is taken for each new batch size (up to
// maxCorrectBufs sizes whose rows fit in correctRows), so that the
// counter allocates nothing; further sizes take a slower path that
// counts straight into the pass's correct count. A captured graph keeps
// using the counter it was recorded with, and steps run one at a time.
type correctCounter struct {
	m *metricsBuf
	// down: the training pass's counters, taken downward from its sums;
	// else upward from the validation pass's.
	down bool
	used int // rows taken
	bufs []correctBufs
}

type correctBufs struct {
	n   int
	acc *tensor.Tensor // F32 [n]: the epoch's correct predictions per row
}

// get returns the counter for batches of n rows on dev, taking one for
// a new size; nil when none can be had (the slow path).
func (c *correctCounter) get(dev tensor.Device, n int) *correctBufs {
	if dev != c.m.dev {
		return nil // not the buffer's device
	}
	for i := range c.bufs {
		if b := &c.bufs[i]; b.n == n {
			return b
		}
	}
	if len(c.bufs) == maxCorrectBufs || c.used+n > correctRows || kernels.For(dev).Capturing() {
		// Full, or inside a capture (a Captured warms every new shape up
		// eagerly first, so this is rare): the slow path, whose launches
		// a graph may record.
		return nil
	}
	off := correctRows + 4 + c.used
	if c.down {
		off = correctRows - c.used - n
	}
	// Rows never taken are still zero (see metricsBuf): no Fill.
	c.bufs = append(c.bufs, correctBufs{n: n, acc: c.m.buf.Narrow(0, off, n)})
	c.used += n
	c.m.taken()
	return &c.bufs[len(c.bufs)-1]
}

// add counts the rows of logits ([n, C]) whose argmax equals y ([n]).
// Without a counter for n rows it adds the count to fallback ([1])
// instead, through temporaries. It only launches kernels.
func (c *correctCounter) add(be kernels.Backend, fallback *tensor.Tensor, logits *autograd.Var, y *tensor.Tensor) {
	b := c.counter(logits, y)
	if b == nil {
		addCorrect(be, fallback, logits, y)
		return
	}
	be.CountCorrect(b.acc, logits.Value, y)
}

// counter returns the counter of a batch of logits ([n, C], contiguous)
// against y ([n] indices), or nil when it has none (the slow path).
func (c *correctCounter) counter(logits *autograd.Var, y *tensor.Tensor) *correctBufs {
	n := y.Dim(0)
	lv := logits.Value
	if lv.Rank() != 2 || lv.Dim(0) != n || !lv.IsContiguous() || !y.DType().IsInt() || lv.Device() != y.Device() {
		return nil
	}
	return c.get(y.Device(), n)
}

// addCorrect adds the number of rows of logits whose argmax equals y to
// dst ([1]), through freshly allocated temporaries.
func addCorrect(be kernels.Backend, dst *tensor.Tensor, logits *autograd.Var, y *tensor.Tensor) {
	n := y.Dim(0)
	alloc := func(d tensor.DType, n int) *tensor.Tensor {
		t, err := tensor.EmptyOn(y.Device(), d, n)
		if err != nil {
			panic(err)
		}
		return t
	}
	pred := autograd.ArgMax(logits, 1).Reshape(n)
	eq := alloc(tensor.Bool, n)
	be.Binary(kernels.Eq, eq, pred, y)
	eqf := alloc(tensor.F32, n)
	be.Copy(eqf, eq)
	c := alloc(tensor.F32, 1)
	be.Reduce(kernels.Sum, c, eqf, []int{0})
	be.Binary(kernels.Add, dst, dst, c)
}
