package bench

import (
	"context"
	"fmt"
	"iter"
	"runtime"
	"time"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/nissa"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// perBatchSource is a Fixed source without its Fixed method: the
// trainer runs it batch by batch (W1Options.PerBatch).
type perBatchSource struct{ f *tolaria.Fixed }

func (p perBatchSource) Batches(e int) iter.Seq2[*tensor.Tensor, *tensor.Tensor] {
	return p.f.Batches(e)
}

// w1KeepEvents and w1KeepEpochs are how many telemetry events and epoch
// reports the W1 trainer run keeps.
const (
	w1KeepEvents = 256
	w1KeepEpochs = 64
)

// w1Trainer is W1 set up to run through tolaria.Trainer.
type w1Trainer struct {
	tr  *tolaria.Trainer
	hub *nissa.Hub
	mem *nissa.MemoryBackend
}

// newW1Trainer builds W1's model, data, telemetry hub (queue room for
// events epochs) and trainer for epochs epochs, the model and the data
// on dev (the data drawn on the host and copied once, as the bare loop's
// is: the trainer then copies no batch).
func newW1Trainer(seed uint64, captured, perBatch bool, epochs int, dev tensor.Device) (*w1Trainer, error) {
	rng := tensor.NewRNG(seed)
	lin, err := nn.NewLinear(rng, nn.LinearOptions{In: w1In, Out: w1Out})
	if err != nil {
		return nil, err
	}
	// W1's Linear(16→4)+bias as a host (its one slot, at the input, is
	// never germinated: a MorphogeneticModel needs one).
	host, err := kasmina.NewLinearHost(lin)
	if err != nil {
		return nil, err
	}
	model, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{kasmina.LinearHostSlot}})
	if err != nil {
		return nil, err
	}
	x, y := tensor.Normal(rng, tensor.F32, 0, 1, w1Samples, w1In), tensor.RandInt(rng, w1Out, w1Samples)
	if !dev.IsCPU() {
		if err := nn.To(model, dev); err != nil {
			return nil, fmt.Errorf("bench: W1 on %v: %w", dev, err)
		}
		if x, err = x.ToDevice(dev); err == nil {
			y, err = y.ToDevice(dev)
		}
		if err != nil {
			return nil, fmt.Errorf("bench: W1 on %v: %w", dev, err)
		}
	}
	// W1's four batches of four, the same views every epoch (a loader
	// over data already in memory): with capture, the trainer replays
	// the whole epoch as one graph.
	fixed, err := tolaria.NewFixed(x, y, tolaria.FixedOptions{Size: w1Batch})
	if err != nil {
		return nil, err
	}
	var data tolaria.Batches = fixed
	if perBatch {
		data = perBatchSource{fixed}
	}
	// Both queues hold a whole run (up to 8192 events, ~4000 epochs, tens
	// of milliseconds: the hub drains every millisecond), so that a busy
	// machine, which can starve the backend worker, does not drop the
	// events counted below. The backend keeps the newest events and
	// counts them all, and the trainer the latest epoch reports: a long
	// run's memory stays flat.
	q := min(4*epochs, 8192)
	hub := nissa.NewHub(nissa.HubOptions{QueueSize: q, BackendQueueSize: q})
	mem := nissa.NewBoundedMemoryBackend("w1", w1KeepEvents)
	if err := hub.AddBackend(mem); err != nil {
		_ = hub.Close(10 * time.Second)
		return nil, err
	}
	tr, err := tolaria.NewTrainer(tolaria.TrainerOptions{
		Model: model, Train: data, Val: data, Epochs: epochs,
		HostLR: 0.01, HostMomentum: 0.9, HostWeightDecay: -1, MaxGradNorm: -1,
		GradientTelemetryStride: -1, Capture: captured, Sink: hub, History: w1KeepEpochs,
	})
	if err != nil {
		_ = hub.Close(10 * time.Second)
		return nil, err
	}
	return &w1Trainer{tr: tr, hub: hub, mem: mem}, nil
}

func (w *w1Trainer) close() { _ = w.hub.Close(10 * time.Second) }

// RunW1Trainer runs W1 through tolaria.Trainer itself — the epoch loop,
// the captured train step (when o.Captured), validation in inference
// mode, and epoch telemetry into a nissa hub with an in-memory backend —
// and times each RunEpoch. The model, data, optimizer (SGD lr 0.01,
// momentum 0.9, no weight decay, no clipping) and epoch are W1's. On
// o.Device the model and data live there, and HostSyncsPerEpoch is the
// mean of the measured epochs' EpochReport.HostSyncs (the trainer's
// reads of its per-epoch metrics; PERF.md's target for a captured epoch
// is at most one).
func RunW1Trainer(o W1Options) (res W1Result, err error) {
	if o, err = o.withDefaults(); err != nil {
		return W1Result{}, err
	}
	w, err := newW1Trainer(o.Seed, o.Captured, o.PerBatch, o.Warmup+o.Epochs, o.Device)
	if err != nil {
		return W1Result{}, err
	}
	defer w.close()
	tr, hub, mem := w.tr, w.hub, w.mem
	res.Mode = "trainer-eager"
	switch {
	case o.Captured && o.PerBatch:
		res.Mode = "trainer-captured-per-batch"
	case o.Captured:
		res.Mode = "trainer-captured"
	}
	ctx := context.Background()
	emit := func(r tolaria.EpochReport) {
		em := EpochMetrics{Epoch: r.Epoch, TrainLoss: r.TrainLoss, ValLoss: r.ValLoss, ValAccuracy: r.ValAccuracy / 100}
		res.Final = em
		if o.Emit != nil {
			o.Emit(em)
		}
	}
	for e := 0; e < o.Warmup; e++ {
		r, err := tr.RunEpoch(ctx, e)
		if err != nil {
			return W1Result{}, err
		}
		emit(r)
	}
	lat := make([]time.Duration, o.Epochs)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	captured, wholeEpochs := 0, 0
	var syncs uint64
	for i := range lat {
		t0 := time.Now()
		r, err := tr.RunEpoch(ctx, o.Warmup+i)
		lat[i] = time.Since(t0)
		if err != nil {
			return W1Result{}, err
		}
		if r.EpochCaptured {
			wholeEpochs++
		}
		if r.Captured {
			captured++
		}
		syncs += r.HostSyncs
		emit(r)
	}
	runtime.ReadMemStats(&ms1)
	if o.Captured && captured != o.Epochs {
		return W1Result{}, fmt.Errorf("bench: W1 through the trainer replayed a captured step in %d of %d epochs (fallbacks %d)", captured, o.Epochs, tr.Summary().CaptureFallbacks)
	}
	if o.Captured && !o.PerBatch && wholeEpochs != o.Epochs {
		return W1Result{}, fmt.Errorf("bench: W1 through the trainer replayed its epoch graph in %d of %d epochs", wholeEpochs, o.Epochs)
	}
	switch {
	case o.Captured && wholeEpochs == o.Epochs:
		res.Launches, res.GraphReplays = tr.EpochGraphNodes(), 1
	case o.Captured:
		batches := w1Samples / w1Batch // the same for training and validation
		step, val := tr.GraphNodes()
		res.Launches, res.GraphReplays = batches*(step+val), 2*batches
	}
	res.Latency = Summarise(lat)
	res.HostSyncsPerEpoch = float64(syncs) / float64(o.Epochs)
	res.AllocsPerEpoch = float64(ms1.Mallocs-ms0.Mallocs) / float64(o.Epochs)
	res.BytesPerEpoch = float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(o.Epochs)
	if err := hub.Flush(ctx); err != nil {
		return res, fmt.Errorf("bench: W1 telemetry: %w", err)
	}
	if got, want := mem.Total(), 2*(o.Warmup+o.Epochs); got < want {
		return res, fmt.Errorf("bench: W1 telemetry: %d events, want at least %d (2 per epoch)", got, want)
	}
	return res, nil
}
