package bench

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// W5 model and data dimensions (PERF.md): a CNN host of 3 blocks of base
// width 32 on 1×28×28 images, 10 classes.
const (
	w5InChannels = 1
	w5Side       = 28
	w5Classes    = 10
	w5Blocks     = 3
	w5Base       = 32
	w5Kernel     = 3
	// w5Pool is the number of distinct batches cycled through (per phase):
	// speed does not depend on the content, only the shape.
	w5Pool = 8
)

// W5Options configures the W5 "host-train" workload (PERF.md): the
// kasmina CNN host (3 Conv3×3(no bias)→BatchNorm2d→ReLU→MaxPool2 blocks of
// 32/64/128 channels, global average pool, Linear(128→10)) on 1×28×28
// images, trained with cross-entropy and SGD (lr 0.01, momentum 0.9), then
// evaluated (forward only, evaluation mode, inference mode). Zero values
// give the defaults.
type W5Options struct {
	Batch       int  // samples per batch (default 128)
	Steps       int  // measured training steps per mode (default 20)
	Warmup      int  // unmeasured training steps per mode (default 5; at least 2 when captured)
	EvalBatches int  // measured evaluation batches (default 20)
	EvalWarmup  int  // unmeasured evaluation batches (default 2)
	Captured    bool // also time training with the step captured and replayed
	// DataDir holds Fashion-MNIST ("" = data.DefaultFashionMNISTDir).
	// When it cannot be read the workload runs on random data and says so.
	DataDir string
	// RandomData skips Fashion-MNIST: images N(0, 1), labels uniform.
	RandomData bool
	Seed       uint64
	// Progress, when set, is called after each measured step or batch of
	// a phase ("train eager", "train captured", "eval").
	Progress func(phase string, done, total int)
}

// W5TrainResult is the timing of one training mode.
type W5TrainResult struct {
	Mode          string  `json:"mode"` // "eager" or "captured"
	Latency       Latency `json:"step_latency"`
	SamplesPerSec float64 `json:"samples_per_second"`
	// GFLOPS is SamplesPerSec times W5Result.TrainFLOPPerSample.
	GFLOPS        float64 `json:"effective_gflops"`
	AllocsPerStep float64 `json:"allocs_per_step"`
	Launches      int     `json:"launches_per_step,omitempty"`
	// FirstLoss is the loss of the first warm-up step, FinalLoss that of
	// the last measured step.
	FirstLoss float64 `json:"first_loss"`
	FinalLoss float64 `json:"final_loss"`
	// Fallback is the reason a captured run fell back to eager steps.
	Fallback string `json:"fallback,omitempty"`
}

// W5EvalResult is the timing of the evaluation forward pass.
type W5EvalResult struct {
	// Mode is "eager" or "captured" (the forward replayed from a graph
	// captured in inference mode, with its output buffers reused).
	Mode          string  `json:"mode"`
	Latency       Latency `json:"batch_latency"`
	SamplesPerSec float64 `json:"samples_per_second"`
	GFLOPS        float64 `json:"effective_gflops"`
}

// W5Result is what RunW5 measured.
type W5Result struct {
	Batch       int `json:"batch"`
	Steps       int `json:"steps"`
	Warmup      int `json:"warmup"`
	EvalBatches int `json:"eval_batches"`
	EvalWarmup  int `json:"eval_warmup"`
	// Data is "fashion-mnist" or "random-normal"; DataNote says where the
	// data came from or why Fashion-MNIST was not used.
	Data     string `json:"data"`
	DataNote string `json:"data_note"`
	Params   int    `json:"params"`
	// FwdFLOPPerSample counts the convolutions and the classifier of one
	// forward pass (2 FLOP per multiply-add); TrainFLOPPerSample is 3×
	// that (forward, input and weight gradients).
	FwdFLOPPerSample   float64         `json:"fwd_flop_per_sample"`
	TrainFLOPPerSample float64         `json:"train_flop_per_sample"`
	Train              []W5TrainResult `json:"train"`
	Eval               W5EvalResult    `json:"eval"`
	// EvalCaptured is the captured evaluation forward (with Captured).
	EvalCaptured *W5EvalResult `json:"eval_captured,omitempty"`
}

func (o W5Options) withDefaults() (W5Options, error) {
	if o.Batch < 0 || o.Steps < 0 || o.Warmup < 0 || o.EvalBatches < 0 || o.EvalWarmup < 0 {
		return o, fmt.Errorf("bench: W5 options must not be negative: %+v", o)
	}
	if o.Batch == 0 {
		o.Batch = 128
	}
	if o.Steps == 0 {
		o.Steps = 20
	}
	if o.Warmup == 0 {
		o.Warmup = 5
	}
	if o.EvalBatches == 0 {
		o.EvalBatches = 20
	}
	if o.EvalWarmup == 0 {
		o.EvalWarmup = 2
	}
	if o.DataDir == "" {
		o.DataDir = data.DefaultFashionMNISTDir
	}
	return o, nil
}

// W5FwdFLOPPerSample is the forward cost of one 1×28×28 sample through
// the W5 host: per block 2·k²·Cin·Cout·H·W for the convolution (the
// side halving after each block's pool), then 2·C·classes for the
// classifier. Batch norm, ReLU and pooling are not counted.
func W5FwdFLOPPerSample() float64 {
	flop, in, side := 0.0, w5InChannels, w5Side
	for i := 0; i < w5Blocks; i++ {
		out := w5Base << i
		flop += 2 * float64(w5Kernel*w5Kernel*in*out*side*side)
		in, side = out, side/2
	}
	return flop + 2*float64(in*w5Classes)
}

// W5Data is the pool of host batches W5 cycles through, per phase at
// most 8 (speed does not depend on the content, only the shape): images
// F32 [Batch, 1, 28, 28] and labels I64 [Batch], contiguous on the CPU.
type W5Data struct {
	// Kind is "fashion-mnist" or "random-normal"; Note says where the
	// data came from or why Fashion-MNIST was not used.
	Kind, Note     string
	TrainX, TrainY []*tensor.Tensor
	EvalX, EvalY   []*tensor.Tensor
}

// NewW5Data returns the batches RunW5 trains and evaluates on for the
// same options (Batch, Warmup+Steps and EvalWarmup+EvalBatches, data
// source, Seed), so that another runner of the workload (the GPU one of
// `esper bench --device cuda`) sees the same data.
func NewW5Data(o W5Options) (*W5Data, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return loadW5Data(o, tensor.NewRNG(o.Seed+1)), nil
}

func loadW5Data(o W5Options, rng *rand.Rand) *W5Data {
	d := &W5Data{}
	nTrain, nEval := min(w5Pool, o.Warmup+o.Steps), min(w5Pool, o.EvalWarmup+o.EvalBatches)
	if !o.RandomData {
		train, test, err := data.OpenFashionMNIST(o.DataDir)
		if err == nil && train.Len() >= o.Batch && test.Len() >= o.Batch {
			d.Kind, d.Note = "fashion-mnist", "Fashion-MNIST from "+o.DataDir+" (train batches from the training set, eval batches from the test set, random order)"
			fill := func(ds *data.TensorDataset, n int) (xs, ys []*tensor.Tensor) {
				perm := rng.Perm(ds.Len())
				for b := 0; b < n; b++ {
					x, y := tensor.Empty(tensor.F32, o.Batch, w5InChannels, w5Side, w5Side), tensor.Empty(tensor.I64, o.Batch)
					ds.Batch(perm[(b*o.Batch)%(ds.Len()-o.Batch+1):][:o.Batch], x, y)
					xs, ys = append(xs, x), append(ys, y)
				}
				return xs, ys
			}
			d.TrainX, d.TrainY = fill(train, nTrain)
			d.EvalX, d.EvalY = fill(test, nEval)
			return d
		}
		if err == nil {
			err = fmt.Errorf("fewer than %d samples", o.Batch)
		}
		d.Note = fmt.Sprintf("random N(0,1) images and uniform labels: Fashion-MNIST unavailable (%v)", err)
	} else {
		d.Note = "random N(0,1) images and uniform labels (requested)"
	}
	d.Kind = "random-normal"
	gen := func(n int) (xs, ys []*tensor.Tensor) {
		for b := 0; b < n; b++ {
			xs = append(xs, tensor.Normal(rng, tensor.F32, 0, 1, o.Batch, w5InChannels, w5Side, w5Side))
			ys = append(ys, tensor.RandInt(rng, w5Classes, o.Batch))
		}
		return xs, ys
	}
	d.TrainX, d.TrainY = gen(nTrain)
	d.EvalX, d.EvalY = gen(nEval)
	return d
}

// W5Model is the W5 host (kasmina.CNNHost with W5's dimensions) with its
// SGD optimizer (lr 0.01, momentum 0.9) over a flat parameter arena, on
// one device, in training mode.
type W5Model struct {
	host *kasmina.CNNHost
	opt  *optim.SGD
	ce   kernels.CrossEntropyParams
}

// NewW5Model builds the W5 model on the CPU, its weights drawn from seed.
func NewW5Model(seed uint64) (*W5Model, error) { return NewW5ModelOn(seed, tensor.CPU) }

// NewW5ModelOn builds the W5 model on dev: the same initial weights as
// NewW5Model (drawn on the host, then copied), with the parameters, the
// BatchNorm running statistics, the gradients and the optimizer state on
// dev. dev's backend must be registered (kernels.Register, done by
// cuda.Backend.Register).
func NewW5ModelOn(seed uint64, dev tensor.Device) (*W5Model, error) {
	host, err := kasmina.NewCNNHost(kasmina.CNNHostOptions{
		InChannels: w5InChannels, Classes: w5Classes, Blocks: w5Blocks, BaseChannels: w5Base,
		KernelSize: w5Kernel, RNG: tensor.NewRNG(seed),
	})
	if err != nil {
		return nil, err
	}
	if !dev.IsCPU() {
		if _, err := kernels.Lookup(dev); err != nil {
			return nil, fmt.Errorf("bench: W5 on %v: %w", dev, err)
		}
		if err := w5MoveHost(host, dev); err != nil {
			return nil, fmt.Errorf("bench: W5 on %v: %w", dev, err)
		}
	}
	// The arena is laid out on the parameters' device.
	opt, err := optim.NewSGD(host.Parameters(), optim.SGDOptions{LR: 0.01, Momentum: 0.9})
	if err != nil {
		return nil, err
	}
	nn.Train(host)
	return &W5Model{host: host, opt: opt}, nil
}

// w5MoveHost copies the host's parameters and buffers to dev and points
// the host at the copies. nn has no module-to-device move yet, so the
// buffers, which only the host's BatchNorm2d layers have (their running
// statistics, exported fields), are reached by walking the module tree;
// a host with any other buffer is an error rather than half moved. The
// layers' NamedBuffers still list the host tensors afterwards (W5 never
// reads them: no state dict is taken).
func w5MoveHost(host *kasmina.CNNHost, dev tensor.Device) error {
	to := func(what string, t *tensor.Tensor) (*tensor.Tensor, error) {
		d, err := t.ToDevice(dev)
		if err != nil {
			return nil, fmt.Errorf("copying %s: %w", what, err)
		}
		return d, nil
	}
	var bns []*nn.BatchNorm2d
	walkModules(host, func(m nn.Module) {
		if bn, ok := m.(*nn.BatchNorm2d); ok {
			bns = append(bns, bn)
		}
	})
	if got, want := len(host.NamedBuffers()), 2*len(bns); got != want {
		return fmt.Errorf("the host has %d buffers, %d of them outside BatchNorm2d running statistics, which cannot be moved", got, got-want)
	}
	for _, p := range host.NamedParameters() {
		d, err := to(p.Name, p.Var.Value)
		if err != nil {
			return err
		}
		p.Var.Value = d
	}
	for i, bn := range bns {
		mean, err := to(fmt.Sprintf("BatchNorm2d %d running_mean", i), bn.RunningMean)
		if err != nil {
			return err
		}
		vr, err := to(fmt.Sprintf("BatchNorm2d %d running_var", i), bn.RunningVar)
		if err != nil {
			return err
		}
		bn.RunningMean, bn.RunningVar = mean, vr
	}
	return nil
}

// walkModules calls f on m and on every module below it (children of
// nn.Composite-based modules, depth first).
func walkModules(m nn.Module, f func(nn.Module)) {
	f(m)
	if c, ok := m.(interface{ Children() []nn.Child }); ok {
		for _, ch := range c.Children() {
			walkModules(ch.Module, f)
		}
	}
}

// Step is one training step over in = {x [Batch,1,28,28] F32, y [Batch]
// I64}, both on the model's device: zero the gradients, forward,
// cross-entropy, backward, SGD step. It returns the loss (a one-element
// tensor on the device) and does only tensor work, so it can be captured
// (autograd.Capture).
func (m *W5Model) Step(in []*tensor.Tensor) []*tensor.Tensor { return m.step(in) }

// Predict returns the logits [Batch, 10] of the images x in inference
// mode (no tape). Call SetTraining(false) first for evaluation mode (the
// running statistics of the batch norms, folded into the convolutions).
func (m *W5Model) Predict(x *tensor.Tensor) *tensor.Tensor {
	var out *tensor.Tensor
	autograd.InferenceMode(func() { out = m.host.Forward(autograd.Const(x)).Value })
	return out
}

// SetTraining switches the host between training (the default) and
// evaluation mode.
func (m *W5Model) SetTraining(training bool) { m.host.SetTraining(training) }

// Optimizer returns the model's SGD optimizer (its Arena().Version is the
// parameter-set version a capture guard keys on).
func (m *W5Model) Optimizer() *optim.SGD { return m.opt }

// Params is the number of parameter elements.
func (m *W5Model) Params() int { return m.opt.Arena().Len() }

// step is one training step over in = {x, y}: zero the gradients,
// forward, cross-entropy, backward, SGD step. It returns the loss and
// does only tensor work, so it can be captured.
func (m *W5Model) step(in []*tensor.Tensor) []*tensor.Tensor {
	m.opt.ZeroGrad()
	loss := autograd.CrossEntropy(m.host.Forward(autograd.Const(in[0])), in[1], m.ce)
	autograd.Backward(loss)
	m.opt.Step()
	return []*tensor.Tensor{loss.Value}
}

// train runs warmup then steps training steps over the pool of batches,
// eagerly or captured.
func (m *W5Model) train(o W5Options, d *W5Data, captured bool, flopPerSample float64) (W5TrainResult, error) {
	res := W5TrainResult{Mode: "eager"}
	run := func(in []*tensor.Tensor) ([]*tensor.Tensor, error) { return m.step(in), nil }
	var c *autograd.Captured
	var fallback error
	warmup := o.Warmup
	if captured {
		res.Mode = "captured"
		warmup = max(warmup, 2) // one eager call, then capture + first replay
		c = autograd.Capture(m.step, autograd.CaptureOptions{
			Policy:     autograd.FailOnMismatch,
			Version:    m.opt.Arena().Version,
			OnFallback: func(err error) { fallback = err },
		})
		run = func(in []*tensor.Tensor) ([]*tensor.Tensor, error) { return c.Run(in...) }
	}
	in := make([]*tensor.Tensor, 2)
	batch := func(i int) []*tensor.Tensor {
		in[0], in[1] = d.TrainX[i%len(d.TrainX)], d.TrainY[i%len(d.TrainY)]
		return in
	}
	var out []*tensor.Tensor
	var err error
	for i := 0; i < warmup; i++ {
		if out, err = run(batch(i)); err != nil {
			return res, err
		}
		if i == 0 {
			res.FirstLoss = out[0].Item()
		}
	}
	if c != nil {
		res.Launches = c.Launches()
	}
	phase := "train " + res.Mode
	lat := make([]time.Duration, o.Steps)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for i := range lat {
		x := batch(warmup + i)
		t0 := time.Now()
		out, err = run(x)
		lat[i] = time.Since(t0)
		if err != nil {
			return res, err
		}
		if o.Progress != nil {
			o.Progress(phase, i+1, o.Steps)
		}
	}
	runtime.ReadMemStats(&ms1)
	res.FinalLoss = out[0].Item()
	res.Latency = Summarise(lat)
	res.SamplesPerSec = float64(o.Batch) / (res.Latency.MeanUs * 1e-6)
	res.GFLOPS = res.SamplesPerSec * flopPerSample / 1e9
	res.AllocsPerStep = float64(ms1.Mallocs-ms0.Mallocs) / float64(o.Steps)
	if fallback != nil {
		res.Fallback = fallback.Error()
	}
	return res, nil
}

// evalForward is the evaluation forward over in = {x}: the logits of x
// in inference mode (the host in whatever mode it is in; eval sets it to
// evaluation). It does only tensor work, so it can be captured.
func (m *W5Model) evalForward(in []*tensor.Tensor) []*tensor.Tensor {
	var y *autograd.Var
	autograd.InferenceMode(func() { y = m.host.Forward(autograd.Const(in[0])) })
	return []*tensor.Tensor{y.Value}
}

// eval times the forward pass in evaluation and inference mode, eagerly
// or replayed from a captured graph.
func (m *W5Model) eval(o W5Options, d *W5Data, flopPerSample float64, captured bool) (W5EvalResult, error) {
	nn.Eval(m.host)
	defer nn.Train(m.host)
	forward := m.evalForward
	res := W5EvalResult{Mode: "eager"}
	run := func(in []*tensor.Tensor) error { forward(in); return nil }
	warmup := o.EvalWarmup
	if captured {
		res.Mode = "captured"
		warmup = max(warmup, 2) // one eager call, then capture + first replay
		var fallback error
		c := autograd.Capture(forward, autograd.CaptureOptions{
			Policy: autograd.FailOnMismatch, OnFallback: func(err error) { fallback = err },
		})
		run = func(in []*tensor.Tensor) error {
			if _, err := c.Run(in...); err != nil {
				return err
			}
			if fallback != nil {
				return fmt.Errorf("captured evaluation fell back to eager: %w", fallback)
			}
			return nil
		}
	}
	in := make([]*tensor.Tensor, 1)
	fwd := func(i int) error {
		in[0] = d.EvalX[i%len(d.EvalX)]
		return run(in)
	}
	for i := 0; i < warmup; i++ {
		if err := fwd(i); err != nil {
			return res, err
		}
	}
	lat := make([]time.Duration, o.EvalBatches)
	phase := "eval"
	if captured {
		phase = "eval captured"
	}
	for i := range lat {
		t0 := time.Now()
		err := fwd(warmup + i)
		lat[i] = time.Since(t0)
		if err != nil {
			return res, err
		}
		if o.Progress != nil {
			o.Progress(phase, i+1, o.EvalBatches)
		}
	}
	res.Latency = Summarise(lat)
	res.SamplesPerSec = float64(o.Batch) / (res.Latency.MeanUs * 1e-6)
	res.GFLOPS = res.SamplesPerSec * flopPerSample / 1e9
	return res, nil
}

// RunW5 trains the W5 host eagerly (and captured with o.Captured, on a
// fresh host of the same seed), then times evaluation batches on the
// eagerly trained host. Samples per second are the batch over the mean
// step (batch) time.
func RunW5(o W5Options) (W5Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return W5Result{}, err
	}
	rng := tensor.NewRNG(o.Seed + 1)
	d := loadW5Data(o, rng)
	fwd := W5FwdFLOPPerSample()
	res := W5Result{
		Batch: o.Batch, Steps: o.Steps, Warmup: o.Warmup, EvalBatches: o.EvalBatches, EvalWarmup: o.EvalWarmup,
		Data: d.Kind, DataNote: d.Note, FwdFLOPPerSample: fwd, TrainFLOPPerSample: 3 * fwd,
	}
	modes := []bool{false}
	if o.Captured {
		modes = append(modes, true)
	}
	var evalModel *W5Model
	for _, captured := range modes {
		m, err := NewW5Model(o.Seed)
		if err != nil {
			return W5Result{}, err
		}
		if res.Params == 0 {
			res.Params = m.opt.Arena().Len()
		}
		runtime.GC()
		r, err := m.train(o, d, captured, res.TrainFLOPPerSample)
		if err != nil {
			return W5Result{}, err
		}
		res.Train = append(res.Train, r)
		if !captured {
			evalModel = m
		}
	}
	if res.Eval, err = evalModel.eval(o, d, fwd, false); err != nil {
		return W5Result{}, err
	}
	if o.Captured {
		ec, err := evalModel.eval(o, d, fwd, true)
		if err != nil {
			return W5Result{}, err
		}
		res.EvalCaptured = &ec
	}
	return res, nil
}
