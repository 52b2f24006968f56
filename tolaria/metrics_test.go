package tolaria

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// TestMetricsBufLayout: both passes' sums and per-row counters are
// views into the one buffer, each pass's used rows next to its sums;
// read sums the counters on the host; beginValidation zeroes the
// validation pass's part only, and only once it was used; beginEpoch
// zeroes everything used; a counter taken later starts at zero; a size
// past the capacity or past maxCorrectBufs gets no counter.
func TestMetricsBufLayout(t *testing.T) {
	dev := testdevice.Device(t)
	m := newMetricsBuf(dev)
	tr, va := &m.train.correctN, &m.val.correctN
	t5, t3, v4 := tr.get(dev, 5), tr.get(dev, 3), va.get(dev, 4)
	require.NotNil(t, t5)
	require.NotNil(t, t3)
	require.NotNil(t, v4)
	require.Same(t, t5.acc, tr.get(dev, 5).acc, "one counter per size")
	require.Equal(t, 8, tr.used)
	require.Equal(t, 4, va.used)
	for _, v := range []*tensor.Tensor{t5.acc, t3.acc, v4.acc, m.train.sums, m.val.sums} {
		require.Same(t, m.buf.Storage(), v.Storage(), "a view into the one buffer")
	}
	other := tensor.CPU
	if dev.IsCPU() {
		other = tensor.Sim(1)
	}
	require.Nil(t, tr.get(other, 5), "no counter on another device")

	fill(t5.acc, 1)
	fill(t3.acc, 2)
	fill(v4.acc, 3)
	fill(m.train.lossSum, 0.5)
	fill(m.train.correct, 7)
	fill(m.val.lossSum, 1.5)
	fill(m.val.correct, 11)
	val, train, err := m.read(true)
	require.NoError(t, err)
	require.Equal(t, [2]float64{0.5, 7 + 5*1 + 3*2}, train)
	require.Equal(t, [2]float64{1.5, 11 + 4*3}, val)
	val, train, err = m.read(false)
	require.NoError(t, err)
	require.Equal(t, [2]float64{}, train, "nothing read for the training pass")
	require.Equal(t, [2]float64{1.5, 23}, val)

	// After beginEpoch the validation part is known to be zero: the
	// first pass leaves everything alone.
	m.valZero = true
	m.beginValidation()
	val, _, err = m.read(false)
	require.NoError(t, err)
	require.Equal(t, [2]float64{1.5, 23}, val, "no Fill for the epoch's first validation pass")
	m.beginValidation()
	val, train, err = m.read(true)
	require.NoError(t, err)
	require.Equal(t, [2]float64{}, val, "a later pass starts from zero")
	require.Equal(t, [2]float64{0.5, 18}, train, "and leaves the training pass's figures alone")

	v2 := va.get(dev, 2)
	require.NotNil(t, v2)
	val, _, err = m.read(false)
	require.NoError(t, err)
	require.Equal(t, [2]float64{}, val, "a new counter starts at zero")

	m.beginEpoch()
	require.True(t, m.valZero)
	val, train, err = m.read(true)
	require.NoError(t, err)
	require.Equal(t, [2]float64{}, train)
	require.Equal(t, [2]float64{}, val)

	require.Nil(t, va.get(dev, correctRows-va.used+1), "past the capacity: the slow path")
	require.NotNil(t, va.get(dev, correctRows-va.used), "exactly the capacity left")
	for n := 1; len(tr.bufs) < maxCorrectBufs; n++ {
		if n != 3 && n != 5 {
			require.NotNil(t, tr.get(dev, n))
		}
	}
	require.Nil(t, tr.get(dev, 100), "past maxCorrectBufs sizes: the slow path")
}

// TestEvaluateAgainStartsFromZero: a validation pass of its own after
// an epoch (as a counterfactual's) zeroes what the epoch's pass left,
// so that it measures the same figures bit for bit.
func TestEvaluateAgainStartsFromZero(t *testing.T) {
	for _, capture := range []bool{false, true} {
		tr, err := NewTrainer(TrainerOptions{Model: trainerModel(t), Train: toyData(t, 1, 5, 8), Val: toyData(t, 2, 3, 8), Epochs: 2, Capture: capture})
		require.NoError(t, err)
		sum, err := tr.Fit(context.Background())
		require.NoError(t, err)
		last := sum.Final()
		for range 2 {
			loss, acc, err := tr.evaluate(1)
			require.NoError(t, err)
			require.Equal(t, [2]float64{last.ValLoss, last.ValAccuracy}, [2]float64{loss, acc}, "capture %v", capture)
		}
	}
}

// countingBackend counts the eager launches, outside any capture, of
// the ops the trainer's bookkeeping used: Fill, Copy, Reduce, Binary.
type countingBackend struct {
	kernels.Backend
	n map[string]int
}

func (b *countingBackend) count(op string) {
	if !b.Capturing() {
		b.n[op]++
	}
}

func (b *countingBackend) Fill(dst *tensor.Tensor, v float64) {
	b.count("Fill")
	b.Backend.Fill(dst, v)
}

func (b *countingBackend) Copy(dst, src *tensor.Tensor) {
	b.count("Copy")
	b.Backend.Copy(dst, src)
}

func (b *countingBackend) Reduce(op kernels.ReduceOp, dst, x *tensor.Tensor, axes []int) {
	b.count("Reduce")
	b.Backend.Reduce(op, dst, x, axes)
}

func (b *countingBackend) Binary(op kernels.BinaryOp, dst, x, y *tensor.Tensor) {
	b.count("Binary")
	b.Backend.Binary(op, dst, x, y)
}

// TestEpochBookkeepingLaunches: on a device, once the steps and the
// validation batches replay captured graphs, an epoch's bookkeeping is
// one Fill (every accumulator of both passes, zeroed at once) and one
// device-to-host read (one host sync): no reduction, addition or copy
// of accumulators. The only eager copies left are the inputs' copies
// into the graphs' static buffers, at most two per batch. (Explicitly
// on sim, whose backend the test wraps to count.)
func TestEpochBookkeepingLaunches(t *testing.T) {
	dev := tensor.Sim(0)
	orig := kernels.For(dev)
	cb := &countingBackend{Backend: orig, n: map[string]int{}}
	kernels.Register(cb)
	t.Cleanup(func() { kernels.Register(orig) })

	const trainBatches, valBatches = 4, 3
	train, val := hostToyData(1, trainBatches, 8), hostToyData(2, valBatches-1, 8)
	last := hostToyData(3, 1, 5) // a partial last batch: a second size
	val.x, val.y = append(val.x, last.x...), append(val.y, last.y...)
	o := TrainerOptions{Train: train, Val: val, Epochs: 4, Capture: true, GradientTelemetryStride: -1}
	m := hostTrainerModel(t)
	require.NoError(t, nn.To(m, dev))
	o.Model = m
	tr, err := NewTrainer(o)
	require.NoError(t, err)
	ctx := context.Background()
	for e := range 2 { // warm-up and capture
		_, err := tr.RunEpoch(ctx, e)
		require.NoError(t, err)
	}
	for e := 2; e < o.Epochs; e++ {
		clear(cb.n)
		r, err := tr.RunEpoch(ctx, e)
		require.NoError(t, err)
		require.True(t, r.Captured)
		require.Equal(t, 1, cb.n["Fill"], "epoch %d: one Fill", e)
		require.Zero(t, cb.n["Reduce"], "epoch %d", e)
		require.Zero(t, cb.n["Binary"], "epoch %d", e)
		require.LessOrEqual(t, cb.n["Copy"], 2*(trainBatches+valBatches), "epoch %d: the inputs' copies only", e)
		require.Equal(t, uint64(1), r.HostSyncs, "epoch %d: one read", e)
	}
}

// ceCountingBackend is countingBackend with kernels.CrossEntropyCounter
// (the wrapped backend's), counting its calls and CountCorrect's.
type ceCountingBackend struct {
	*countingBackend
	cc kernels.CrossEntropyCounter
}

func (b *ceCountingBackend) CrossEntropyCount(loss, logits, target *tensor.Tensor, p kernels.CrossEntropyParams, lossSum, acc *tensor.Tensor) {
	b.count("CrossEntropyCount")
	b.cc.CrossEntropyCount(loss, logits, target, p, lossSum, acc)
}

func (b *ceCountingBackend) CountCorrect(acc, logits, target *tensor.Tensor) {
	b.count("CountCorrect")
	b.Backend.CountCorrect(acc, logits, target)
}

// TestMetricsRideOnTheLoss: on a backend with kernels.CrossEntropyCounter
// every batch of an eager epoch, training and validation, computes its
// loss with CrossEntropyCount, so that the loss and the correct count
// are added in the loss's own launch: against the same backend without
// the interface, one Binary and one CountCorrect fewer per batch. The
// epoch's figures are the same bit for bit either way, and the CPU's.
func TestMetricsRideOnTheLoss(t *testing.T) {
	dev := tensor.Sim(0)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })

	const trainBatches, valBatches = 4, 3
	train, val := hostToyData(1, trainBatches, 8), hostToyData(2, valBatches, 8)
	run := func(d tensor.Device) [4]float64 {
		m := hostTrainerModel(t)
		require.NoError(t, nn.To(m, d))
		tr, err := NewTrainer(TrainerOptions{Model: m, Train: train, Val: val, Epochs: 1, GradientTelemetryStride: -1})
		require.NoError(t, err)
		r, err := tr.RunEpoch(context.Background(), 0)
		require.NoError(t, err)
		return [4]float64{r.TrainLoss, r.TrainAccuracy, r.ValLoss, r.ValAccuracy}
	}
	plain := &countingBackend{Backend: &ceCountingBackend{countingBackend: &countingBackend{Backend: orig, n: map[string]int{}}}, n: map[string]int{}}
	kernels.Register(plain)
	unfused := run(dev)
	cb := &ceCountingBackend{countingBackend: &countingBackend{Backend: orig, n: map[string]int{}}, cc: orig.(kernels.CrossEntropyCounter)}
	kernels.Register(cb)
	fused := run(dev)
	kernels.Register(orig)

	inner := plain.Backend.(*ceCountingBackend)
	require.Equal(t, trainBatches+valBatches, cb.n["CrossEntropyCount"])
	require.Zero(t, cb.n["CountCorrect"])
	require.Equal(t, trainBatches+valBatches, inner.n["CountCorrect"])
	require.Equal(t, plain.n["Binary"]-(trainBatches+valBatches), cb.n["Binary"])
	require.Equal(t, unfused, fused)
	require.Equal(t, run(tensor.CPU), fused)
}
