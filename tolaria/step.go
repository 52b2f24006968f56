package tolaria

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// EventCompileFallback is the event (a METRICS event whose Message starts
// with this name) sent once when a captured train step falls back to
// eager execution.
const EventCompileFallback = "tolaria.compile_fallback"

// optimizers are the host's SGD and one SGD per slot that holds a seed
// with trainable parameters (G2: a lazily created optimizer per seed
// slot, dropped when the slot empties).
type optimizers struct {
	o    TrainerOptions
	host *optim.SGD
	// model and slots are o.Model and its slots, fixed when the model
	// was built: the per-step loops walk slots instead of asking
	// Model.Slots for a fresh copy each time.
	model *kasmina.MorphogeneticModel
	slots []*kasmina.Slot
	seeds map[string]*seedOpt // by slot id
	// version changes whenever an optimizer is created or dropped: the
	// captured step's guard includes it.
	version uint64
}

// seedOpt is a slot's optimizer and what it was built for.
type seedOpt struct {
	seedID      string
	slotVersion uint64
	sgd         *optim.SGD
}

func newOptimizers(o TrainerOptions) (*optimizers, error) {
	host, err := optim.NewSGD(o.Model.HostParameters(), optim.SGDOptions{
		LR: o.HostLR, Momentum: o.HostMomentum, WeightDecay: o.HostWeightDecay,
	})
	if err != nil {
		return nil, fmt.Errorf("tolaria: host optimizer: %w", err)
	}
	return &optimizers{o: o, host: host, model: o.Model, slots: o.Model.Slots(), seeds: map[string]*seedOpt{}}, nil
}

// slotsOf returns m's slots: the cached list for the trainer's model
// (a model's slot set is fixed at construction), a fresh copy otherwise.
func (p *optimizers) slotsOf(m *kasmina.MorphogeneticModel) []*kasmina.Slot {
	if m == p.model {
		return p.slots
	}
	return m.Slots()
}

// trainable returns the parameters that currently take gradients (a
// seed ramping down has its parameters frozen).
func trainable(ps []*autograd.Var) []*autograd.Var {
	out := ps[:0:0]
	for _, p := range ps {
		if p.RequiresGrad() {
			out = append(out, p)
		}
	}
	return out
}

// sync makes the seed optimizers match the slots: a new seed, or a slot
// whose parameter set changed (germinate, prune, freeze, reload), gets a
// fresh SGD; an empty slot loses its optimizer.
func (p *optimizers) sync(m *kasmina.MorphogeneticModel) error {
	for _, s := range p.slotsOf(m) {
		id := s.ID()
		cur := p.seeds[id]
		st := s.State()
		var params []*autograd.Var
		if st != nil && s.Seed() != nil {
			params = trainable(s.Parameters())
		}
		if len(params) == 0 {
			if cur != nil {
				delete(p.seeds, id)
				p.version++
			}
			continue
		}
		if cur != nil && cur.seedID == st.SeedID && cur.slotVersion == s.Version() {
			continue
		}
		sgd, err := optim.NewSGD(params, optim.SGDOptions{LR: p.o.SeedLR, Momentum: p.o.SeedMomentum})
		if err != nil {
			return fmt.Errorf("tolaria: optimizer for seed %s in %s: %w", st.SeedID, id, err)
		}
		p.seeds[id] = &seedOpt{seedID: st.SeedID, slotVersion: s.Version(), sgd: sgd}
		p.version++
	}
	return nil
}

// each calls f for the host's optimizer, then each slot's in model
// order, so every step runs them in the same order.
func (p *optimizers) each(m *kasmina.MorphogeneticModel, f func(*optim.SGD)) {
	f(p.host)
	if len(p.seeds) == 0 {
		return
	}
	for _, s := range p.slotsOf(m) {
		if so := p.seeds[s.ID()]; so != nil {
			f(so.sgd)
		}
	}
}

// reset clears every optimizer's state (momentum), as a rollback needs.
func (p *optimizers) reset() {
	p.host.ResetState()
	for _, so := range p.seeds {
		so.sgd.ResetState()
	}
}

// slotIDs returns the slots that have an optimizer, sorted.
func (p *optimizers) slotIDs() []string {
	ids := make([]string, 0, len(p.seeds))
	for id := range p.seeds {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// stepRunner runs training steps, eagerly or captured.
type stepRunner struct {
	t        *Trainer
	captured *autograd.Captured
	// met is the training pass's part of the trainer's epoch metrics
	// (Σ batch-mean loss, Σ correct, the per-row correct counters).
	met *passMetrics
	out []*tensor.Tensor
	in  []*tensor.Tensor
	// loop is the running epoch's loop state and body its loop body
	// (s.trainBatch, bound once).
	loop       trainLoop
	body       func(x, y *tensor.Tensor) bool
	globalStep int
	lat        []time.Duration
	fellBack   bool
	ce         kernels.CrossEntropyParams
	// combine makes fn run the aggregation's combining path; set only
	// around an eager call (run), never while capturing.
	combine bool
	// err is the combining path's failure in the last fn call.
	err error
	// afterBackward, when set, runs in fn right after backward (tests
	// inject gradients through it).
	afterBackward func()
	// zeroed and zeroAfter are the epoch graph's: the gradients are zero
	// already (the previous step left them so), and this step leaves
	// them zeroed (optim.SGD.StepZeroGrad). Both false otherwise.
	zeroed, zeroAfter bool
	// grads is zeroGrads' list of the optimizers' gradient buffers,
	// reused from step to step.
	grads []*tensor.Tensor
	// whole counts the steps fn took whole (linearStep), captures
	// included, replays not; linear is linearStep, bound once.
	whole  int
	linear linearStep
}

// zeroGrads zeroes every optimizer's gradients: in one launch where the
// backend has kernels.ZeroManyer and there are several buffers (the
// host's and each seed's optimizer), else with each optimizer's ZeroGrad.
func (s *stepRunner) zeroGrads() {
	t := s.t
	s.grads = s.grads[:0]
	t.opt.each(t.model, func(o *optim.SGD) { s.grads = o.Arena().AppendGradBuffers(s.grads) })
	defer clear(s.grads)
	if zm, ok := kernels.For(t.dev).(kernels.ZeroManyer); ok && len(s.grads) > 1 {
		zm.ZeroMany(s.grads)
		return
	}
	t.opt.each(t.model, func(o *optim.SGD) { o.ZeroGrad() })
}

// boundBatches is how many batches' input tensors a captured step or
// validation batch reads in place (autograd's BoundInputs): batches the
// loader yields as the same device tensors every epoch (fixed views of
// data kept on the device, a stager's ring of buffers) replay without
// copying their inputs, each through a graph of its own.
const boundBatches = 8

func newStepRunner(t *Trainer) *stepRunner {
	s := &stepRunner{t: t, met: &t.met.train, in: make([]*tensor.Tensor, 2)}
	s.linear = s.linearStep
	s.out = []*tensor.Tensor{s.met.sums}
	if t.o.Capture {
		s.captured = autograd.Capture(s.fn, autograd.CaptureOptions{
			Warmup:      t.o.CaptureWarmup,
			Policy:      autograd.Recapture,
			CacheSize:   4,
			Version:     s.guard,
			OnFallback:  t.captureFallback,
			BoundInputs: boundBatches,
		})
	}
	return s
}

// captureFallback counts a captured region (train step or validation
// batch) that fell back to eager and sends tolaria.compile_fallback the
// first time.
func (t *Trainer) captureFallback(err error) {
	t.summary.CaptureFallbacks++
	if !t.step.fellBack {
		t.step.fellBack = true
		t.deadlines.emit(EventCompileFallback, leyline.SeverityWarning, err.Error(), []leyline.Metric{
			{Name: leyline.MetricTolariaCompileFallback, Value: 1},
		})
	}
}

// fn is one training step over in = {x, y}: zero the gradients, forward
// and cross-entropy (under autocast with AMP), backward (of the scaled
// loss under fp16, then unscale and check every gradient), with
// s.combine the PCGrad combination of the seeds' gradients, clip each
// optimizer's gradients, step (skipped on an inf/NaN gradient under
// fp16) and update the loss scale. The batch's mean loss and correct
// count go to met with the loss where the batch has a counter
// (passMetrics.crossEntropy), else at the end. Without s.combine it only
// does tensor work, so it can be captured.
func (s *stepRunner) fn(in []*tensor.Tensor) []*tensor.Tensor {
	t := s.t
	x, y := in[0], in[1]
	if !s.zeroed {
		s.zeroGrads()
	}
	var logits, loss *autograd.Var
	var counted, stepped bool
	t.prec.forward(func() { loss, logits, counted, stepped = s.met.forwardLoss(t.model, x, y, s.ce, s.linear) })
	if stepped {
		// A linear classifier's whole step, backward and update
		// included (optim.SGD.LinearCEStep).
		s.whole++
		return s.out
	}
	autograd.Backward(t.prec.scale(loss))
	if s.afterBackward != nil {
		s.afterBackward()
	}
	foundInf := t.prec.unscale(t.opt, t.model)
	if s.combine && !t.prec.foundInf() {
		// Host reads and writes of the gradients: eager only (run).
		if _, err := t.agg.combine(t.model, t.opt, x, y, nil); err != nil && s.err == nil {
			s.err = err
		}
	}
	t.opt.each(t.model, func(o *optim.SGD) {
		if t.o.MaxGradNorm > 0 {
			optim.ClipGradNorm(o.Arena(), t.o.MaxGradNorm)
		}
		switch {
		case s.zeroAfter:
			o.StepZeroGrad(foundInf)
		case foundInf != nil:
			o.StepSkipIf(foundInf)
		default:
			o.Step()
		}
	})
	t.prec.update()
	if !counted {
		s.met.add(loss, logits, y)
	}
	return s.out
}

// linearStep takes the step of a model that is a linear classifier over
// its input whole (optim.SGD.LinearCEStep: one launch on CUDA where
// forward, backward and update take three) and reports whether it did.
// forwardLoss offers it only that model's steps; it declines where the
// step needs more than its forward, backward and update: a combining or
// instrumented step, gradient clipping, mixed precision, or any
// optimizer beside the host's (a seed's).
func (s *stepRunner) linearStep(x *tensor.Tensor, head *nn.Linear, y, lossSum, acc *tensor.Tensor) bool {
	t := s.t
	if s.combine || s.afterBackward != nil || t.o.MaxGradNorm > 0 || t.prec.enabled() {
		return false
	}
	n := 0
	t.opt.each(t.model, func(*optim.SGD) { n++ })
	return n == 1 && t.opt.host.LinearCEStep(x, head.Weight, head.Bias, y, s.ce, lossSum, acc, s.zeroAfter)
}

// guard is the captured step's version: graphKey(true).
func (s *stepRunner) guard() uint64 { return s.t.graphKey(true) }

// graphKey is the version of the trainer's captured graphs (the train
// step's and the epoch's with train, the validation pass's without): it
// changes with anything a replay would otherwise get wrong, and only
// with that, so that a model back in a configuration it had before
// replays that configuration's graph instead of capturing it again.
//
// The host's parameters never change (a model's host is fixed); what
// changes is its slots. A slot whose seed takes no part in the forward
// pass (kasmina.Slot.IsActive false: empty, germinated, pruned,
// embargoed, resetting) and, with train, has no optimizer adds nothing
// to the pass that a replay could get wrong: it keys as an empty slot,
// so a seed germinated and later pruned leaves the graphs of the model
// before it valid again (its validation pass keys as the host alone
// from germination on). Any other slot keys with its version (it only
// grows: a new seed, a prune, a freeze or a load gives a new one), its
// optimizer's (made for that slot version: with train, and for a seed
// in the forward pass, whose weights the optimizer's arena holds), and
// the seed's stage, blend algorithm, alpha and isolation, which the
// forward pass reads as Go values.
func (t *Trainer) graphKey(train bool) uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for i := 0; i < 8; i++ {
			h ^= v & 0xff
			h *= 1099511628211
			v >>= 8
		}
	}
	if train {
		mix(1)
	}
	for _, sl := range t.opt.slotsOf(t.model) {
		active := sl.IsActive()
		var so *seedOpt
		if (train || active) && len(t.opt.seeds) > 0 {
			// An optimizer made for a slot moves its seed's weights
			// into the optimizer's arena (optim.NewSGD): a forward pass
			// recorded before reads the old storage.
			so = t.opt.seeds[sl.ID()]
		}
		if !active && so == nil {
			mix(0)
			continue
		}
		mix(1 + sl.Version())
		if so != nil {
			mix(1 + so.slotVersion)
		} else {
			mix(0)
		}
		if st := sl.State(); st != nil {
			// The blend algorithm changes without a new slot version
			// (kasmina.Slot.SetAlphaTarget between ADD and MULTIPLY).
			mix(1 + uint64(st.Stage))
			mix(uint64(st.AlphaAlgorithm))
		} else {
			mix(0)
			mix(0)
		}
		mix(math.Float64bits(sl.Alpha()))
		if sl.IsolateGradients() {
			mix(1)
		} else {
			mix(2)
		}
	}
	return h
}

// run executes one step on (x, y): eagerly with the PCGrad combination
// when it applies (TrainerOptions.PCGrad and two or more participating
// seeds), else captured (with Capture) or eagerly. It reports whether a
// captured graph was replayed and whether the step combined gradients.
func (s *stepRunner) run(x, y *tensor.Tensor) (captured, combined bool, err error) {
	if s.t.agg.combining(s.t.model, s.t.opt) {
		s.in[0], s.in[1] = x, y
		s.combine, s.err = true, nil
		s.fn(s.in)
		s.combine = false
		clear(s.in)
		return false, true, s.err
	}
	if s.captured == nil {
		s.in[0], s.in[1] = x, y
		s.fn(s.in)
		clear(s.in)
		return false, false, nil
	}
	before := s.captured.Stats().Replays
	s.in[0], s.in[1] = x, y
	_, err = s.captured.Run(s.in...)
	clear(s.in)
	if err != nil {
		return false, false, err
	}
	return s.captured.Stats().Replays > before, false, nil
}

// trainLoop is one epoch's training loop state. The loop body is a
// method value bound once (stepRunner.body), so ranging over the batches
// allocates nothing on the trainer's side.
type trainLoop struct {
	ctx                     context.Context
	e                       int
	steps, samples, replays int
	err                     error
}

// trainEpoch zeroes the epoch's accumulators (both passes', one Fill on
// a device), runs the epoch's training steps and returns the number of
// steps and samples; the loss sum and correct counts are left in the
// training pass's accumulators, on the device, for evaluateWith to read
// with the validation's.
func (t *Trainer) trainEpoch(ctx context.Context, e int, r *EpochReport) (steps, samples int, err error) {
	s := t.step
	t.met.beginEpoch()
	s.lat = s.lat[:0]
	s.loop = trainLoop{ctx: ctx, e: e}
	if s.body == nil {
		s.body = s.trainBatch
	}
	t.o.Train.Batches(e)(s.body)
	l := s.loop
	s.loop.ctx = nil
	if l.err != nil {
		return l.steps, 0, l.err
	}
	if l.steps == 0 || l.samples == 0 {
		return 0, 0, fmt.Errorf("tolaria: the training batches of epoch %d are empty", e+1)
	}
	r.Captured = l.replays > 0
	r.StepP50, r.StepP95 = percentiles(s.lat)
	// The sums stay on the device: evaluateWith reads them with the
	// validation's, in one copy (one host sync per epoch on a device).
	return l.steps, l.samples, nil
}

// trainBatch is the training loop's body: one step on (x, y), its
// latency, and every GradientTelemetryStride steps the gradient
// telemetry. It stops the loop (false) on an error, kept in s.loop.err.
func (s *stepRunner) trainBatch(x, y *tensor.Tensor) bool {
	t, l := s.t, &s.loop
	if err := l.ctx.Err(); err != nil {
		l.err = err
		return false
	}
	if err := checkBatch("training", l.steps+1, x, y); err != nil {
		l.err = fmt.Errorf("tolaria: epoch %d: %w", l.e+1, err)
		return false
	}
	x, y, err := t.input(x, y)
	if err != nil {
		l.err = fmt.Errorf("tolaria: epoch %d: training batch %d: %w", l.e+1, l.steps+1, err)
		return false
	}
	t0 := time.Now()
	captured, combined, err := s.run(x, y)
	if err != nil {
		l.err = fmt.Errorf("tolaria: epoch %d step %d: %w", l.e+1, l.steps+1, err)
		return false
	}
	d := time.Since(t0)
	if captured {
		l.replays++
	}
	s.lat = append(s.lat, d)
	l.steps++
	l.samples += y.Dim(0)
	s.globalStep++
	if st := t.o.GradientTelemetryStride; st > 0 && s.globalStep%st == 0 {
		if err := t.telemetry(x, y, combined); err != nil {
			l.err = fmt.Errorf("tolaria: epoch %d step %d: gradient aggregation: %w", l.e+1, l.steps, err)
			return false
		}
	}
	if t.o.OnStep != nil {
		t.o.OnStep(StepInfo{Epoch: l.e, Step: l.steps, Latency: d})
	}
	return true
}

// percentiles returns the nearest-rank p50 and p95 of d (sorted in place).
func percentiles(d []time.Duration) (p50, p95 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	at := func(p float64) time.Duration {
		k := int(math.Ceil(p/100*float64(len(d)))) - 1
		return d[max(0, min(k, len(d)-1))]
	}
	return at(50), at(95)
}

// telemetry is a telemetry step's work after the step on (x, y): every
// seed's gradient telemetry, then the gradient aggregation's per-seed
// observation when seeds take part (none after a combining step, which
// observed them, nor after a step whose fp16 gradients overflowed). The
// seeds' norms are computed on the device and read with the epoch's
// metrics (pendingTelemetry, applied by applyTelemetry): no host sync at
// the step. With one participant the observation waits for them too;
// under fp16 the scaler's found-inf flag goes with them, as one more
// norm (0 unless it is set), so the overflow is known at the read. Two or
// more participants are observed here, through the aggregation's device
// path (its sums read with the epoch's), after the found-inf read under
// fp16. Where the device cannot launch the norms, they are read here.
func (t *Trainer) telemetry(x, y *tensor.Tensor, combined bool) error {
	n := 0
	if !combined {
		n = t.agg.participants(t.model, t.opt)
	}
	var extra []*tensor.Tensor
	if n == 1 {
		var err error
		if extra, err = t.agg.oneGrads(t.model, t.opt); err != nil {
			return err
		}
	}
	launch, scaled := extra, t.prec.scaler != nil && n == 1
	if scaled {
		launch = append(extra[:len(extra):len(extra)], t.prec.scaler.FoundInf())
	}
	if p, err := t.model.LaunchGradientTelemetry(launch); err == nil {
		pt := pendingTelemetry{p: p, observe: n == 1, scaled: scaled, modelVersion: t.model.Version(), optVersion: t.opt.version}
		if n == 1 {
			pt.seed = t.agg.cur[0].id
		}
		t.pendingTel = append(t.pendingTel, pt)
		if n <= 1 || t.prec.foundInf() {
			return nil
		}
		return t.agg.observeParticipants(n, t.model, t.opt, x, y)
	}
	norms, err := t.model.GradientTelemetry(extra)
	if err != nil {
		norms = nil // the seeds' telemetry is unchanged; observeOne reads its own
	}
	// The found-inf read (a host sync under fp16) only when there are
	// seeds to observe.
	if n == 0 || t.prec.foundInf() {
		return nil
	}
	if n == 1 {
		return t.agg.observeOneNorms(t.model, t.opt, x, y, norms)
	}
	return t.agg.observeParticipants(n, t.model, t.opt, x, y)
}

// pendingTelemetry is a telemetry step whose norms are still on the
// device: the seeds' telemetry to apply and, with observe, the
// aggregation's observation of its one participant, seed, made at model
// and optimizer versions modelVersion and optVersion. With scaled (fp16)
// the last extra norm is the fp16 scaler's found-inf flag's: nonzero, the
// step's gradients overflowed and nothing is observed. The batch is not
// kept: the observation's attribution does not read it
// (kasmina.MorphogeneticModel.AttributeBatch).
type pendingTelemetry struct {
	p                        *kasmina.PendingTelemetry
	observe, scaled          bool
	seed                     string
	modelVersion, optVersion uint64
}

// telemetryReads lists the pending telemetry's device tensors for the
// epoch's read (nil entries where one has nothing to read).
func (t *Trainer) telemetryReads() []*tensor.Tensor {
	if len(t.pendingTel) == 0 {
		return nil
	}
	out := make([]*tensor.Tensor, len(t.pendingTel))
	for i, pt := range t.pendingTel {
		out[i] = pt.p.Pending()
	}
	return out
}

// readEpoch is epoch e's one read: both passes' accumulators, the
// pending telemetry's norms and the gradient aggregation's device sums
// (steps with two or more participants record there), through
// TrainerOptions.EpochRead when set (then the matmul precision is set
// again: another trainer may have run while it waited); the telemetry is
// then applied, and the device sums added to the aggregation's host sums
// after it, where finalize's Flush would have added them. It returns the
// validation and training sums (metricsBuf.read).
func (t *Trainer) readEpoch(e int) (val, train [2]float64, err error) {
	tel := t.telemetryReads()
	sums := t.agg.acc.PendingSums()
	val, train, hosts, err := t.met.readWith(true, append(tel, sums...), t.o.EpochRead)
	if t.o.EpochRead != nil {
		t.setMatmulPrecision()
	}
	if err != nil {
		return val, train, fmt.Errorf("tolaria: epoch %d: reading the metrics: %w", e+1, err)
	}
	if err := t.applyTelemetry(hosts[:len(tel)]); err != nil {
		return val, train, fmt.Errorf("tolaria: epoch %d: gradient telemetry: %w", e+1, err)
	}
	if sums != nil {
		if err := t.agg.acc.FlushFrom(hosts[len(tel):]); err != nil {
			return val, train, fmt.Errorf("tolaria: epoch %d: gradient aggregation sums: %w", e+1, err)
		}
	}
	return val, train, nil
}

// applyTelemetry applies the pending telemetry in step order from hosts,
// the host copies of telemetryReads, and empties the list. Nothing in the
// trainer changes the participants or the parameter set before the
// epoch's read; should something else have (a caller's OnStep), an
// observation whose participant, model or optimizers differ from its
// step's is dropped rather than recorded against the wrong layout.
func (t *Trainer) applyTelemetry(hosts []*tensor.Tensor) error {
	defer func() {
		clear(t.pendingTel)
		t.pendingTel = t.pendingTel[:0]
	}()
	for i, pt := range t.pendingTel {
		norms, err := pt.p.Apply(hosts[i])
		if err != nil {
			return err
		}
		if pt.scaled {
			if len(norms) == 0 {
				return errors.New("tolaria: pending telemetry lost its found-inf norm")
			}
			overflowed := norms[len(norms)-1] != 0
			norms = norms[:len(norms)-1]
			if overflowed {
				continue
			}
		}
		if !pt.observe || t.model.Version() != pt.modelVersion || t.opt.version != pt.optVersion {
			continue
		}
		if t.agg.participants(t.model, t.opt) != 1 || t.agg.cur[0].id != pt.seed {
			continue
		}
		if err := t.agg.observeOneNorms(t.model, t.opt, nil, nil, norms); err != nil {
			return err
		}
	}
	return nil
}
