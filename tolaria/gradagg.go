package tolaria

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria/aggregation"
)

// Gradient aggregation in the trainer (esper-reference §3.1.1 steps 3–5,
// §3.1.2, §3.1.4; the recipe of package aggregation).
//
// Two paths share one layout and one SeedMetricsAccumulator:
//
//   - The combining path runs inside the train step, between backward (and
//     the fp16 unscale) and clipping, on every step where
//     TrainerOptions.PCGrad is set and at least two seeds are aggregation
//     participants (see aggSeed). It flattens the gradient into a pooled
//     buffer, splits it per seed with the seed masks (the host's part, the
//     teacher, redistributed by attribution), records the step's per-seed
//     figures, combines the seeds' vectors with PCGrad and writes the
//     result back into the gradients, then releases the buffer. On the CPU
//     it works on the host's float32 vectors with float64 sums; on a
//     device (devicePath) through backend ops on device buffers, reading
//     nothing back per step. Its projection order is drawn from the
//     host RNG every step, so such a step always runs eagerly, never
//     captured or replayed.
//   - The observing path (metrics only) runs when the combining path does
//     not: PCGrad off, or a single participant. It runs after the step,
//     outside any captured region, every GradientTelemetryStride steps
//     (with kasmina's gradient telemetry), on the gradients the optimizers
//     just used (unscaled and clipped). Captured and eager runs therefore
//     observe the same steps and stay bitwise equal. With a single
//     participant it is the fast path: two norms over the gradients where
//     they lie, no buffer, no copy, no projection.
//
// Epoch metrics (tolaria.grad_agg.*, per seed tolaria.grad_agg.seed.*)
// and the accumulator's warnings go out with the epoch's METRICS event.

// aggregationRNGSalt derives the PCG's second word from TrainerOptions.Seed,
// as tensor.NewRNG does.
const aggregationRNGSalt = 0x9e3779b97f4a7c15

// aggSeed is a seed that takes part in aggregation: in TRAINING, BLENDING
// or HOLDING (it learns and is in the forward pass) with trainable
// parameters under an optimizer. Every other parameter — the host's, a
// FOSSILIZED seed's, a GERMINATED seed's not yet in the forward pass —
// belongs to the teacher.
type aggSeed struct {
	id, slot string
	stage    leyline.SeedStage
	alpha    float64
}

// aggLayout is the fence metadata of §3.1.1 step 4: which flat elements
// each participant owns. It is rebuilt when the parameter set, the
// optimizers or the set of participants changes.
type aggLayout struct {
	modelVersion, optVersion uint64
	ids                      []string        // participants, slot order
	params                   []*autograd.Var // trainable parameters, Parameters() order
	owner                    []int           // per param: index into ids, −1 for the teacher
	masks                    *aggregation.Masks
}

// gradAgg is the trainer's aggregation state.
type gradAgg struct {
	pcgrad bool
	pool   aggregation.GradientBufferPool
	split  aggregation.SeedGrads
	comb   aggregation.Combiner
	// The device path's counterparts (a model off the CPU): the split's
	// vectors, the combiner's scratch and the one-buffer micro list live
	// on the device; nothing is read back per step.
	splitT aggregation.SeedTensors
	combT  aggregation.TensorCombiner
	microT [1]*tensor.Tensor
	acc    *aggregation.SeedMetricsAccumulator
	empty  *aggregation.EpochReport // Finalize of an empty epoch, kept
	pcg    *rand.PCG
	rng    *rand.Rand
	lay    aggLayout

	// Per step scratch, reused.
	cur    []aggSeed
	seeds  map[string]aggregation.SeedInfo
	alphas map[string]float64
	attrib map[string]float64
	micro  [][]float32
	grads  []*tensor.Tensor // gradNorms' scratch
	one    [1][]float32
	proxy  [1]float32
	names  [1]string
	wts    [1]float64

	// Per epoch.
	attribUses int                          // steps whose attribution was recorded
	combined   int                          // steps that went through Combine
	stages     map[string]leyline.SeedStage // last stage seen per participant
}

func newGradAgg(o TrainerOptions) (*gradAgg, error) {
	acc, err := aggregation.NewSeedMetricsAccumulator(aggregation.AccumulatorOptions{})
	if err != nil {
		return nil, err
	}
	pcg := rand.NewPCG(o.Seed, o.Seed^aggregationRNGSalt)
	return &gradAgg{
		pcgrad: o.PCGrad, acc: acc, pcg: pcg, rng: rand.New(pcg),
		seeds:  map[string]aggregation.SeedInfo{},
		alphas: map[string]float64{},
		attrib: map[string]float64{},
		stages: map[string]leyline.SeedStage{},
	}, nil
}

// participants fills g.cur with the current aggregation participants in
// slot order and returns their number.
func (g *gradAgg) participants(m *kasmina.MorphogeneticModel, opt *optimizers) int {
	g.cur = g.cur[:0]
	if len(opt.seeds) == 0 {
		return 0 // no slot has an optimizer: no participant
	}
	for _, s := range opt.slotsOf(m) {
		st := s.State()
		if st == nil || opt.seeds[s.ID()] == nil {
			continue
		}
		switch st.Stage {
		case leyline.StageTraining, leyline.StageBlending, leyline.StageHolding:
			g.cur = append(g.cur, aggSeed{id: st.SeedID, slot: s.ID(), stage: st.Stage, alpha: s.Alpha()})
		}
	}
	return len(g.cur)
}

// combining reports whether the next step takes the combining path.
func (g *gradAgg) combining(m *kasmina.MorphogeneticModel, opt *optimizers) bool {
	return g.pcgrad && g.participants(m, opt) >= 2
}

// layout returns the layout for g.cur, rebuilding it when stale.
func (g *gradAgg) layout(m *kasmina.MorphogeneticModel, opt *optimizers) (*aggLayout, error) {
	l := &g.lay
	fresh := l.masks != nil && l.modelVersion == m.Version() && l.optVersion == opt.version && len(l.ids) == len(g.cur)
	for i := 0; fresh && i < len(g.cur); i++ {
		fresh = l.ids[i] == g.cur[i].id
	}
	if fresh {
		return l, nil
	}
	all := m.Parameters()
	seedMasks := m.SeedMasks()
	active := make(map[string][]bool, len(g.cur))
	ids := make([]string, 0, len(g.cur))
	index := make(map[string]int, len(g.cur))
	for i, s := range g.cur {
		mask, ok := seedMasks[s.id]
		if !ok {
			return nil, fmt.Errorf("tolaria: aggregation: seed %s in %s has no parameter mask", s.id, s.slot)
		}
		active[s.id] = mask
		ids = append(ids, s.id)
		index[s.id] = i
	}
	owners, err := aggregation.OwnersFromSeedMasks(active, len(all))
	if err != nil {
		return nil, err
	}
	var params []*autograd.Var
	var kept []string
	var owner []int
	for i, p := range all {
		if !p.RequiresGrad() {
			continue // frozen: no optimizer steps it, so no gradient to split
		}
		params = append(params, p)
		kept = append(kept, owners[i])
		if k, ok := index[owners[i]]; ok {
			owner = append(owner, k)
		} else {
			owner = append(owner, -1)
		}
	}
	masks, err := aggregation.SegmentMasks(params, kept)
	if err != nil {
		return nil, err
	}
	if n := g.pool.Stats(); n.Cached > 0 && masks.Total() != l.total() {
		g.pool.Drain() // the old size is not asked for any more
	}
	*l = aggLayout{modelVersion: m.Version(), optVersion: opt.version, ids: ids, params: params, owner: owner, masks: masks}
	return l, nil
}

// total is the flat length of the layout (0 before the first build).
func (l *aggLayout) total() int {
	if l.masks == nil {
		return 0
	}
	return l.masks.Total()
}

// prepare fills the per-step seed infos and the attribution of the batch
// (x, y) for g.cur: kasmina's AttributeBatch (the intended uniform rule)
// restricted to the participants, since a seed outside the forward pass
// cannot take the teacher's credit. It returns the attribution use
// count for PerSeed (1 when the batch has attribution).
func (g *gradAgg) prepare(m *kasmina.MorphogeneticModel, x, y *tensor.Tensor, attrib map[string]float64) int {
	clear(g.seeds)
	clear(g.alphas)
	for _, s := range g.cur {
		g.seeds[s.id] = aggregation.SeedInfo{Stage: s.stage, Alpha: s.alpha}
		g.alphas[s.id] = s.alpha
		g.stages[s.id] = s.stage
	}
	if attrib == nil {
		attrib = m.AttributeBatch(x, y)
	}
	clear(g.attrib)
	for id, w := range attrib {
		if _, ok := g.seeds[id]; ok {
			g.attrib[id] = w
		}
	}
	if len(g.attrib) == 0 {
		return 0
	}
	g.attribUses++
	return 1
}

// aggStepResult is what one combining step did.
type aggStepResult struct {
	// Participants is the number of vectors combined; Conflicts the
	// distinct conflicting pairs PCGrad found and projected.
	Participants, Conflicts int
}

// combine is the combining path on the current gradients of the model's
// trainable parameters (g.cur must be filled, by combining or
// participants). attrib overrides kasmina's attribution (tests); nil
// asks AttributeBatch. It acquires one flat buffer and releases it
// before returning.
func (g *gradAgg) combine(m *kasmina.MorphogeneticModel, opt *optimizers, x, y *tensor.Tensor, attrib map[string]float64) (aggStepResult, error) {
	return g.seedPath(m, opt, x, y, attrib, true)
}

// observe is the observing path, after a step: per-seed metrics from the
// gradients the optimizers used. With one participant it is the fast
// path (observeOne).
func (g *gradAgg) observe(m *kasmina.MorphogeneticModel, opt *optimizers, x, y *tensor.Tensor) error {
	return g.observeParticipants(g.participants(m, opt), m, opt, x, y)
}

// observeParticipants is observe for the n participants participants
// has just listed in g.cur.
func (g *gradAgg) observeParticipants(n int, m *kasmina.MorphogeneticModel, opt *optimizers, x, y *tensor.Tensor) error {
	switch n {
	case 0:
		return nil
	case 1:
		return g.observeOne(m, opt, x, y)
	}
	_, err := g.seedPath(m, opt, x, y, nil, false)
	return err
}

// seedPath flattens the gradient, splits it per seed, records the
// metrics and, with combine, runs PCGrad and writes the result back. A
// model on a device takes devicePath.
func (g *gradAgg) seedPath(m *kasmina.MorphogeneticModel, opt *optimizers, x, y *tensor.Tensor, attrib map[string]float64, combine bool) (res aggStepResult, err error) {
	l, err := g.layout(m, opt)
	if err != nil {
		return res, err
	}
	uses := g.prepare(m, x, y, attrib)
	if len(l.params) > 0 && !l.params[0].Value.Device().IsCPU() {
		return g.devicePath(l, uses, combine)
	}
	buf, err := g.pool.Acquire(l.masks.Total(), tensor.F32)
	if err != nil {
		return res, err
	}
	defer func() {
		if rerr := g.pool.Release(buf); err == nil {
			err = rerr
		}
	}()
	flat := buf.F32()
	if err := aggregation.GradsToFlat(l.params, flat); err != nil {
		return res, err
	}
	g.micro = append(g.micro[:0], flat)
	if err := aggregation.PerSeed(&g.split, g.micro, l.masks, g.attrib, uses, g.seeds); err != nil {
		return res, err
	}
	g.acc.SetMasks(l.masks)
	if err := g.acc.Record(g.split.Names, g.split.Flats, g.split.Weights, g.alphas, g.attrib, g.attribUses); err != nil {
		return res, err
	}
	if g.split.Redistributed {
		if err := g.acc.RecordTeacherNorm(g.split.TeacherNorm); err != nil {
			return res, err
		}
	}
	res.Participants = len(g.split.Flats)
	if !combine {
		return res, nil
	}
	// The weights stay in the metrics (weights_mean, per-seed weight) but
	// not in the sum: the per-seed vectors partition the gradient, so
	// their plain sum is the gradient itself when nothing conflicts,
	// where G1's Σ w·g / Σ w shrank every parameter's step by about the
	// number of seeds.
	res.Conflicts, err = g.comb.CombineInto(flat, g.split.Flats, true, nil, g.rng)
	if err != nil {
		return res, err
	}
	if err := g.acc.RecordCombine(1, res.Conflicts); err != nil {
		return res, err
	}
	if err := aggregation.FlatToGrads(flat, l.params); err != nil {
		return res, err
	}
	g.combined++
	return res, nil
}

// devicePath is seedPath for a model on a device: the flat buffer, the
// per-seed split, PCGrad and the metrics' sums stay on the device, so a
// step reads nothing back (the accumulator's sums are read once, when
// the epoch is finalized). res.Conflicts is not known on the host and
// stays 0; the epoch's conflict figures come from the accumulator. The
// device ops round in float32 where the host path sums in float64, so
// the two agree within float32 rounding, not bit for bit.
func (g *gradAgg) devicePath(l *aggLayout, uses int, combine bool) (res aggStepResult, err error) {
	dev := l.params[0].Value.Device()
	buf, err := g.pool.AcquireOn(dev, l.masks.Total(), tensor.F32)
	if err != nil {
		return res, err
	}
	defer func() {
		if rerr := g.pool.Release(buf); err == nil {
			err = rerr
		}
	}()
	if err := aggregation.GradsToFlatTensor(l.params, buf); err != nil {
		return res, err
	}
	g.microT[0] = buf
	if err := aggregation.PerSeedTensors(&g.splitT, g.microT[:], l.masks, g.attrib, uses, g.seeds); err != nil {
		return res, err
	}
	g.acc.SetMasks(l.masks)
	if err := g.acc.RecordTensors(g.splitT.Names, g.splitT.Flats, g.splitT.Weights, g.alphas, g.attrib, g.attribUses); err != nil {
		return res, err
	}
	if g.splitT.Redistributed {
		if err := g.acc.RecordTeacherNormTensor(g.splitT.TeacherNorm); err != nil {
			return res, err
		}
	}
	res.Participants = len(g.splitT.Flats)
	if !combine {
		return res, nil
	}
	conflicts, err := g.combT.CombineInto(buf, g.splitT.Flats, true, nil, g.rng)
	if err != nil {
		return res, err
	}
	if err := g.acc.RecordCombineTensor(1, conflicts); err != nil {
		return res, err
	}
	if err := aggregation.FlatTensorToGrads(buf, l.params); err != nil {
		return res, err
	}
	g.combined++
	return res, nil
}

// observeOne is the single-seed fast path: the lone participant's
// vector after redistribution is the whole gradient (its own part plus
// all of the teacher's), so its norm is √(‖teacher‖² + ‖seed‖²), its
// share 1 and its conflicts 0; the teacher's norm is ‖teacher‖. Both
// norms are read from the gradients in place. The accumulator reads a
// lone participant's vector only through its L2 norm (no layers are
// configured and conflicts need two), so it gets a one-element vector
// holding that norm.
func (g *gradAgg) observeOne(m *kasmina.MorphogeneticModel, opt *optimizers, x, y *tensor.Tensor) error {
	return g.observeOneNorms(m, opt, x, y, nil)
}

// oneGrads lists the gradients observeOne reads (the layout's
// parameters' in order), for a caller that reads their norms with
// others (observeOneNorms).
func (g *gradAgg) oneGrads(m *kasmina.MorphogeneticModel, opt *optimizers) ([]*tensor.Tensor, error) {
	l, err := g.layout(m, opt)
	if err != nil {
		return nil, err
	}
	out := make([]*tensor.Tensor, len(l.params))
	for i, p := range l.params {
		out[i] = p.Grad
	}
	return out, nil
}

// observeOneNorms is observeOne with the gradients' norms already read
// (the norms of oneGrads, -1 where there is no gradient), or nil to read
// them here.
func (g *gradAgg) observeOneNorms(m *kasmina.MorphogeneticModel, opt *optimizers, x, y *tensor.Tensor, norms []float64) error {
	l, err := g.layout(m, opt)
	if err != nil {
		return err
	}
	uses := g.prepare(m, x, y, nil)
	if norms == nil {
		if norms, err = g.gradNorms(l.params); err != nil {
			return err
		}
	} else if len(norms) != len(l.params) {
		return fmt.Errorf("tolaria: %d gradient norms for %d parameters", len(norms), len(l.params))
	}
	var teacher, own float64
	for i, n := range norms {
		if n < 0 { // no gradient
			continue
		}
		sq := n * n
		if l.owner[i] < 0 {
			teacher += sq
		} else {
			own += sq
		}
	}
	if math.IsNaN(teacher+own) || math.IsInf(teacher+own, 0) {
		return nil // an overflowed step: nothing meaningful to record
	}
	s := g.cur[0]
	redistributed := uses > 0 && l.masks.Elems(aggregation.TeacherID) > 0
	norm := math.Sqrt(own)
	if redistributed {
		norm = math.Sqrt(teacher + own)
	}
	g.names[0], g.wts[0] = s.id, aggregation.SeedWeight(s.stage, s.alpha)
	g.proxy[0] = float32(norm)
	g.one[0] = g.proxy[:]
	g.acc.SetMasks(l.masks)
	if err := g.acc.Record(g.names[:], g.one[:], g.wts[:], g.alphas, g.attrib, g.attribUses); err != nil {
		return err
	}
	if redistributed {
		return g.acc.RecordTeacherNorm(math.Sqrt(teacher))
	}
	return nil
}

// gradNorms returns the L2 norm of each parameter's gradient (-1 where
// there is none), computed where the gradients are and read back at once
// (kasmina.TensorNorms: one host sync on a device; the gradients stay).
func (g *gradAgg) gradNorms(params []*autograd.Var) ([]float64, error) {
	g.grads = g.grads[:0]
	for _, p := range params {
		g.grads = append(g.grads, p.Grad)
	}
	defer clear(g.grads)
	return kasmina.TensorNorms(g.grads)
}

// beginEpoch clears the epoch's sums (the share_delta baseline stays).
func (g *gradAgg) beginEpoch() {
	g.acc.Reset()
	g.acc.SetMasks(nil)
	g.attribUses, g.combined = 0, 0
	clear(g.stages)
}

// finalize reduces the epoch into r and returns the metrics and warnings
// to emit.
func (g *gradAgg) finalize(r *EpochReport) aggregation.EpochReport {
	var rep aggregation.EpochReport
	if g.acc.Empty() && len(g.stages) == 0 {
		// An epoch without seeds reports the same zeros every time: keep
		// one report rather than allocating it each epoch (its metrics
		// are only read).
		if g.empty == nil {
			e := g.acc.Finalize(g.stages)
			g.empty = &e
		}
		rep = *g.empty
	} else {
		rep = g.acc.Finalize(g.stages)
	}
	r.ConflictRatio = rep.ConflictRatio
	r.AggregatedSteps = g.combined
	for _, mt := range rep.Metrics {
		if mt.Attributes != nil {
			continue
		}
		switch mt.Name {
		case leyline.MetricTolariaGradAggTeacherShare:
			r.TeacherShare = mt.Value
		case leyline.MetricTolariaGradAggPCGradApplied:
			r.PCGradApplied = mt.Value != 0
		}
	}
	return rep
}

// emitAggWarnings sends the accumulator's warnings as METRICS events
// whose Message starts with the event name (seed_share_jump,
// seed_conflict_high, grad_conflict_high), carrying the offending value
// as a metric with the event's attributes, the epoch's 1-based number
// among them.
func (t *Trainer) emitAggWarnings(epoch int, evs []aggregation.Event) {
	for _, e := range evs {
		name := leyline.MetricTolariaGradAggConflictRatio
		switch e.Name {
		case aggregation.EventSeedShareJump:
			name = leyline.MetricTolariaGradAggSeedShareDelta
		case aggregation.EventSeedConflictHigh:
			name = leyline.MetricTolariaGradAggSeedConflictRatio
		}
		keys := make([]string, 0, len(e.Attributes))
		for k := range e.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys)+1)
		for _, k := range keys {
			parts = append(parts, k+"="+e.Attributes[k])
		}
		parts = append(parts, fmt.Sprintf("threshold=%g", e.Threshold))
		attrs := make(map[string]string, len(e.Attributes)+1)
		for k, v := range e.Attributes {
			attrs[k] = v
		}
		attrs["epoch"] = fmt.Sprint(epoch)
		t.deadlines.emit(e.Name, e.Severity, strings.Join(parts, " "), []leyline.Metric{{Name: name, Value: e.Value, Unit: "ratio", Attributes: attrs}})
	}
}

// rngState is the PCGrad order generator's state for a checkpoint.
func (g *gradAgg) rngState() ([]byte, error) { return g.pcg.MarshalBinary() }

// setRNGState restores what rngState saved.
func (g *gradAgg) setRNGState(b []byte) error { return g.pcg.UnmarshalBinary(b) }

// PoolStats returns the gradient buffer pool's counters: every combining
// or observing step acquires one flat buffer and releases it before the
// step ends, so Allocated stays at one per flat size and InUse at zero.
func (t *Trainer) PoolStats() aggregation.PoolStats { return t.agg.pool.Stats() }
