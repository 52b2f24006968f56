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
	o     TrainerOptions
	host  *optim.SGD
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
	return &optimizers{o: o, host: host, seeds: map[string]*seedOpt{}}, nil
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
	for _, s := range m.Slots() {
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
	for _, s := range m.Slots() {
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
	t          *Trainer
	captured   *autograd.Captured
	met        *tensor.Tensor // F32 [2]: Σ batch-mean loss, Σ correct
	in         []*tensor.Tensor
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
}

func newStepRunner(t *Trainer) *stepRunner {
	s := &stepRunner{t: t, met: tensor.Zeros(tensor.F32, 2), in: make([]*tensor.Tensor, 2)}
	if t.o.Capture {
		s.captured = autograd.Capture(s.fn, autograd.CaptureOptions{
			Warmup:    t.o.CaptureWarmup,
			Policy:    autograd.Recapture,
			CacheSize: 4,
			Version:   s.guard,
			OnFallback: func(err error) {
				t.summary.CaptureFallbacks++
				if !s.fellBack {
					s.fellBack = true
					t.deadlines.emit(EventCompileFallback, leyline.SeverityWarning, err.Error(), []leyline.Metric{
						{Name: leyline.MetricTolariaCompileFallback, Value: 1},
					})
				}
			},
		})
	}
	return s
}

// fn is one training step over in = {x, y}: zero the gradients, forward
// and cross-entropy (under autocast with AMP), backward (of the scaled
// loss under fp16, then unscale and check every gradient), with
// s.combine the PCGrad combination of the seeds' gradients, clip each
// optimizer's gradients, step (skipped on an inf/NaN gradient under
// fp16), update the loss scale, and add the batch's mean loss and
// correct count to met. Without s.combine it only does tensor work, so it
// can be captured.
func (s *stepRunner) fn(in []*tensor.Tensor) []*tensor.Tensor {
	t := s.t
	x, y := in[0], in[1]
	t.opt.each(t.model, func(o *optim.SGD) { o.ZeroGrad() })
	var logits, loss *autograd.Var
	t.prec.forward(func() {
		logits = t.model.Forward(autograd.Const(x))
		loss = autograd.CrossEntropy(logits, y, s.ce)
	})
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
		if foundInf != nil {
			o.StepSkipIf(foundInf)
		} else {
			o.Step()
		}
	})
	t.prec.update()
	be := kernels.For(s.met.Device())
	lossSum, correct := s.met.Narrow(0, 0, 1), s.met.Narrow(0, 1, 1)
	be.Binary(kernels.Add, lossSum, lossSum, loss.Value.Reshape(1))
	addCorrect(be, correct, logits, y)
	return []*tensor.Tensor{s.met}
}

// guard is the captured step's version: it changes with anything a
// replay would otherwise get wrong — the parameter set (the model's and
// the optimizers' versions) and, per slot, the seed's stage, alpha and
// isolation, which the forward pass reads as Go values.
func (s *stepRunner) guard() uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for i := 0; i < 8; i++ {
			h ^= v & 0xff
			h *= 1099511628211
			v >>= 8
		}
	}
	mix(s.t.model.Version())
	mix(s.t.opt.version)
	for _, sl := range s.t.model.Slots() {
		st := sl.State()
		if st == nil {
			mix(0)
			continue
		}
		mix(uint64(st.Stage))
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
	if _, err := s.captured.Run(x, y); err != nil {
		return false, false, err
	}
	return s.captured.Stats().Replays > before, false, nil
}

// trainEpoch runs the epoch's training steps and returns the mean loss,
// the accuracy in percent and the number of steps.
func (t *Trainer) trainEpoch(ctx context.Context, e int, r *EpochReport) (loss, acc float64, steps int, err error) {
	s := t.step
	kernels.For(s.met.Device()).Fill(s.met, 0)
	s.lat = s.lat[:0]
	samples := 0
	replays := 0
	for x, y := range t.o.Train.Batches(e) {
		if err := ctx.Err(); err != nil {
			return 0, 0, steps, err
		}
		t0 := time.Now()
		captured, combined, err := s.run(x, y)
		if err != nil {
			return 0, 0, steps, fmt.Errorf("tolaria: epoch %d step %d: %w", e, steps, err)
		}
		d := time.Since(t0)
		if captured {
			replays++
		}
		s.lat = append(s.lat, d)
		steps++
		samples += y.Dim(0)
		s.globalStep++
		if st := t.o.GradientTelemetryStride; st > 0 && s.globalStep%st == 0 {
			t.model.CaptureGradientTelemetry()
			if !combined && !t.prec.foundInf() {
				if err := t.agg.observe(t.model, t.opt, x, y); err != nil {
					return 0, 0, steps, fmt.Errorf("tolaria: epoch %d step %d: gradient aggregation: %w", e, steps, err)
				}
			}
		}
		if t.o.OnStep != nil {
			t.o.OnStep(StepInfo{Epoch: e, Step: steps, Latency: d})
		}
	}
	if steps == 0 || samples == 0 {
		return 0, 0, 0, errors.New("tolaria: the training batches of epoch " + fmt.Sprint(e) + " are empty")
	}
	r.Captured = replays > 0
	r.StepP50, r.StepP95 = percentiles(s.lat)
	m := s.met.F32()
	return float64(m[0]) / float64(steps), 100 * float64(m[1]) / float64(samples), steps, nil
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

// addCorrect adds the number of rows of logits whose argmax equals y to
// dst ([1]).
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

// batchLossCorrect returns a batch's mean cross-entropy and its number of
// correct predictions (host reads; validation only).
func batchLossCorrect(logits *autograd.Var, y *tensor.Tensor) (loss, correct float64) {
	l := autograd.CrossEntropy(logits, y, kernels.CrossEntropyParams{})
	be := kernels.For(y.Device())
	c := tensor.Zeros(tensor.F32, 1)
	addCorrect(be, c, logits, y)
	return l.Item(), float64(c.F32()[0])
}
