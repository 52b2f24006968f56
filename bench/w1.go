package bench

import (
	"fmt"
	"runtime"
	"time"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// W1Options configures the W1 "tolaria-ref" workload (PERF.md): a
// Linear(16→4)+bias classifier trained with cross-entropy, batch 4, 16
// samples per epoch (4 SGD steps, lr 0.01, momentum 0.9), then a
// validation pass over the 16 samples in inference mode, with the epoch
// metrics emitted. Zero values give the PERF.md definition.
type W1Options struct {
	Epochs   int  // measured epochs (default 2000)
	Warmup   int  // unmeasured epochs (default 50)
	Captured bool // replay a captured epoch instead of running eagerly
	// StaticInputs, with Captured, passes the captured graph's own input
	// buffers (autograd.Captured.Inputs) to the replays once the epoch
	// is captured: they hold x and y from the capture on, and W1's data
	// never changes, so each replay skips the copies of x and y into the
	// graph (two launches per epoch on a GPU). Without Captured it does
	// nothing.
	StaticInputs bool
	// PerBatch, through the trainer (RunW1Trainer), hands it W1's batches
	// as a source that is not tolaria.FixedBatches, so that a captured
	// epoch replays its step graph once per training batch and its
	// validation graph once per validation batch instead of the whole
	// epoch as one graph.
	PerBatch bool
	Seed     uint64
	// Device runs the workload on a device other than the CPU (the zero
	// value); its backend must be registered (kernels/device.Open does
	// it). The epoch is timed up to its metrics read back to the host,
	// which waits for the device; W1Result.HostSyncsPerEpoch counts the
	// reads.
	Device tensor.Device
	// Emit receives each epoch's metrics (the workload's telemetry); nil
	// keeps them in the result only.
	Emit func(EpochMetrics)
}

// EpochMetrics is the per-epoch telemetry of W1.
type EpochMetrics struct {
	Epoch       int
	TrainLoss   float64
	ValLoss     float64
	ValAccuracy float64
}

// W1Result is what RunW1 measured.
type W1Result struct {
	Mode           string  `json:"mode"` // "eager" or "captured"
	Latency        Latency `json:"latency"`
	AllocsPerEpoch float64 `json:"allocs_per_epoch"`
	BytesPerEpoch  float64 `json:"bytes_per_epoch"`
	// Launches are the captured epoch's launches (CUDA graph nodes on
	// CUDA): the bare loop's one graph; through the trainer its epoch
	// graph, or with PerBatch its step's graph times the training
	// batches plus its validation graph times the validation batches.
	Launches int `json:"launches_per_epoch,omitempty"`
	// GraphReplays is the number of graph replays per captured epoch (1
	// for the bare loop and the trainer's epoch graph, one per batch
	// through the trainer with PerBatch).
	GraphReplays int `json:"graph_replays_per_epoch,omitempty"`
	// StaticInputs is set when the replays were fed through the graph's
	// static input buffers (W1Options.StaticInputs).
	StaticInputs bool `json:"static_inputs,omitempty"`
	// HostSyncsPerEpoch is the mean number of host syncs (device-to-host
	// reads that wait for the device, tensor.HostSyncs) per measured
	// epoch on a device other than the CPU, which has none (0, left out).
	HostSyncsPerEpoch float64      `json:"host_syncs_per_epoch,omitempty"`
	Final             EpochMetrics `json:"final"`
}

// W1 is the W1 model, data and optimizer, ready to run epochs.
type W1 struct {
	w, b    *autograd.Var
	opt     *optim.SGD
	x, y    *tensor.Tensor
	metrics *tensor.Tensor // F32 [3]: train loss sum, val loss sum, correct
	// trainSum and valSum are the scalar views of metrics[0] and
	// metrics[1] that the losses (scalars) are added to; correctSum is
	// metrics[2:3], the validation's correct count.
	trainSum, valSum, correctSum *tensor.Tensor
	correct                      *tensor.Tensor   // F32 [4]: per-row correct counts of the validation
	out                          []*tensor.Tensor // {metrics}: what Epoch returns, made once
	ce                           kernels.CrossEntropyParams
	ceSum                        kernels.CrossEntropyParams
}

const (
	w1Samples = 16
	w1In      = 16
	w1Out     = 4
	w1Batch   = 4
)

// NewW1 builds the workload on the CPU with PyTorch-style Linear
// initialisation.
func NewW1(seed uint64) (*W1, error) { return NewW1On(seed, tensor.CPU) }

// NewW1On builds the workload on dev: the same initial weights and data
// as NewW1 (drawn on the host, then copied), the parameters, data and
// metrics on dev. dev's backend must be registered.
func NewW1On(seed uint64, dev tensor.Device) (*W1, error) {
	rng := tensor.NewRNG(seed)
	bound := 1 / float64(4) // 1/sqrt(in)
	wt := tensor.Uniform(rng, tensor.F32, -bound, bound, w1Out, w1In)
	bt := tensor.Uniform(rng, tensor.F32, -bound, bound, w1Out)
	x := tensor.Normal(rng, tensor.F32, 0, 1, w1Samples, w1In)
	y := tensor.RandInt(rng, w1Out, w1Samples)
	metrics := tensor.Zeros(tensor.F32, 3)
	correct := tensor.Zeros(tensor.F32, w1Batch)
	if !dev.IsCPU() {
		if _, err := kernels.Lookup(dev); err != nil {
			return nil, fmt.Errorf("bench: W1 on %v: %w", dev, err)
		}
		ts := []*tensor.Tensor{wt, bt, x, y, metrics, correct}
		for i, t := range ts {
			d, err := t.ToDevice(dev)
			if err != nil {
				return nil, fmt.Errorf("bench: W1 on %v: %w", dev, err)
			}
			ts[i] = d
		}
		wt, bt, x, y, metrics, correct = ts[0], ts[1], ts[2], ts[3], ts[4], ts[5]
	}
	w, b := autograd.Param(wt), autograd.Param(bt)
	w.Name, b.Name = "weight", "bias"
	opt, err := optim.NewSGD([]*autograd.Var{w, b}, optim.SGDOptions{LR: 0.01, Momentum: 0.9})
	if err != nil {
		return nil, err
	}
	return &W1{
		w: w, b: b, opt: opt, x: x, y: y, metrics: metrics, correct: correct,
		trainSum: metrics.Select(0, 0), valSum: metrics.Select(0, 1), correctSum: metrics.Narrow(0, 2, 1),
		out:   []*tensor.Tensor{metrics},
		ceSum: kernels.CrossEntropyParams{Reduction: kernels.ReduceSum},
	}, nil
}

// Epoch runs one epoch over x [16,16] and y [16] and returns the metrics
// tensor {train-loss sum, validation-loss sum, correct count}. It does
// only tensor work, so it can be captured.
func (m *W1) Epoch(in []*tensor.Tensor) []*tensor.Tensor {
	x, y := in[0], in[1]
	be := kernels.For(x.Device())
	met := m.metrics
	be.Fill(met, 0)
	for s := 0; s < w1Samples/w1Batch; s++ {
		xb := autograd.Const(x.Narrow(0, s*w1Batch, w1Batch))
		yb := y.Narrow(0, s*w1Batch, w1Batch)
		m.opt.ZeroGrad()
		loss := autograd.CrossEntropy(autograd.Linear(xb, m.w, m.b), yb, m.ce)
		autograd.Backward(loss)
		m.opt.Step()
		be.Binary(kernels.Add, m.trainSum, m.trainSum, loss.Value)
	}
	m.validate(be, x, y)
	return m.out
}

// validate is Epoch's validation pass: per batch the summed loss goes
// into valSum and CountCorrect (argmax, comparison and count in one
// launch) adds the batch's correct predictions to per-row counters,
// summed into correct once at the end. The backends off the CPU have no
// integer comparison kernels, and on the CPU the one launch replaces
// five (argmax, compare, convert, sum, add) per batch.
func (m *W1) validate(be kernels.Backend, x, y *tensor.Tensor) {
	be.Fill(m.correct, 0)
	autograd.InferenceMode(func() {
		for s := 0; s < w1Samples/w1Batch; s++ {
			xb := autograd.Const(x.Narrow(0, s*w1Batch, w1Batch))
			yb := y.Narrow(0, s*w1Batch, w1Batch)
			logits := autograd.Linear(xb, m.w, m.b)
			l := autograd.CrossEntropy(logits, yb, m.ceSum)
			be.Binary(kernels.Add, m.valSum, m.valSum, l.Value)
			be.CountCorrect(m.correct, logits.Value, yb)
		}
	})
	be.Reduce(kernels.Sum, m.correctSum, m.correct, axis0)
}

// axis0 is the axis list {0}: a literal passed through the
// kernels.Backend interface would be allocated on every call.
var axis0 = []int{0}

// read converts the metrics tensor into EpochMetrics (a host read, which
// waits for a device).
func (m *W1) read(epoch int, met *tensor.Tensor) EpochMetrics {
	if !met.Device().IsCPU() {
		h, err := met.ToDevice(tensor.CPU)
		if err != nil {
			panic(fmt.Sprintf("bench: W1 reading the epoch metrics: %v", err))
		}
		met = h
	}
	f := met.F32()
	return EpochMetrics{
		Epoch:       epoch,
		TrainLoss:   float64(f[0]) / (w1Samples / w1Batch),
		ValLoss:     float64(f[1]) / w1Samples,
		ValAccuracy: float64(f[2]) / w1Samples,
	}
}

// withDefaults fills the zero fields of o (2000 epochs, 50 warm-up) and
// rejects a negative warm-up.
func (o W1Options) withDefaults() (W1Options, error) {
	if o.Epochs <= 0 {
		o.Epochs = 2000
	}
	if o.Warmup < 0 {
		return o, fmt.Errorf("bench: W1 warm-up %d < 0", o.Warmup)
	}
	if o.Warmup == 0 {
		o.Warmup = 50
	}
	return o, nil
}

// RunW1 times W1 and counts allocations per epoch.
func RunW1(o W1Options) (res W1Result, err error) {
	if o, err = o.withDefaults(); err != nil {
		return W1Result{}, err
	}
	m, err := NewW1On(o.Seed, o.Device)
	if err != nil {
		return W1Result{}, err
	}
	res.Mode = "eager"
	in := []*tensor.Tensor{m.x, m.y}
	run := func() []*tensor.Tensor { return m.Epoch(in) }
	var cap *autograd.Captured
	if o.Captured {
		res.Mode = "captured"
		var fallback error
		cap = captureW1(m, func(err error) { fallback = err })
		static := false
		run = func() []*tensor.Tensor {
			out, err := cap.Run(in...)
			if err != nil {
				panic(err)
			}
			if o.StaticInputs && !static {
				// From the capture on, the graph's buffers hold x and y.
				if s := cap.Inputs(); s != nil {
					in, static = s, true
					res.StaticInputs = true
				}
			}
			return out
		}
		defer func() {
			if fallback != nil && err == nil {
				err = fmt.Errorf("bench: W1 capture fell back to eager: %w", fallback)
			}
		}()
	}
	epoch := 0
	emit := func(met *tensor.Tensor) {
		em := m.read(epoch, met)
		res.Final = em
		if o.Emit != nil {
			o.Emit(em)
		}
		epoch++
	}
	for i := 0; i < o.Warmup; i++ {
		emit(run()[0])
	}
	if cap != nil {
		res.Launches, res.GraphReplays = cap.Launches(), 1
	}
	lat := make([]time.Duration, o.Epochs)
	var ms0, ms1 runtime.MemStats
	syncs0 := tensor.HostSyncs(o.Device)
	runtime.ReadMemStats(&ms0)
	for i := range lat {
		t0 := time.Now()
		emit(run()[0])
		lat[i] = time.Since(t0)
	}
	runtime.ReadMemStats(&ms1)
	syncs := tensor.HostSyncs(o.Device) - syncs0
	res.Latency = Summarise(lat)
	res.HostSyncsPerEpoch = float64(syncs) / float64(o.Epochs)
	res.AllocsPerEpoch = float64(ms1.Mallocs-ms0.Mallocs) / float64(o.Epochs)
	res.BytesPerEpoch = float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(o.Epochs)
	return res, err
}

// captureW1 wraps the W1 epoch for capture and replay.
func captureW1(m *W1, onFallback func(error)) *autograd.Captured {
	return autograd.Capture(m.Epoch, autograd.CaptureOptions{
		Policy:     autograd.FailOnMismatch,
		Version:    m.opt.Arena().Version,
		OnFallback: onFallback,
		// The epoch's x and y are the same tensors every call: the graph
		// reads them in place, no input copies per epoch.
		BoundInputs: 1,
	})
}

// TrainStep is one W1 SGD step on a batch: in = {x [4,16], y [4]}. It
// returns the loss tensor. Like Epoch it can be captured.
func (m *W1) TrainStep(in []*tensor.Tensor) []*tensor.Tensor {
	m.opt.ZeroGrad()
	loss := autograd.CrossEntropy(autograd.Linear(autograd.Const(in[0]), m.w, m.b), in[1], m.ce)
	autograd.Backward(loss)
	m.opt.Step()
	return []*tensor.Tensor{loss.Value}
}
