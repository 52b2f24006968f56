package aggregation

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
)

// Event names of the epoch's aggregation warnings (esper-reference
// §3.1.4, §3.1.7). leyline has no constants for them: the trainer emits
// them as descriptions of its own warning events.
const (
	// EventSeedShareJump: a seed's gradient share moved by at least
	// AccumulatorOptions.ShareJumpWarn since the previous epoch.
	EventSeedShareJump = "seed_share_jump"
	// EventSeedConflictHigh: a seed's conflict ratio reached
	// AccumulatorOptions.SeedConflictWarn.
	EventSeedConflictHigh = "seed_conflict_high"
	// EventGradConflictHigh: the epoch's conflict ratio reached
	// AccumulatorOptions.ConflictWarn.
	EventGradConflictHigh = "grad_conflict_high"
)

// TeacherStage is the stage attribute of the teacher's per-seed metrics.
const TeacherStage = "TEACHER"

// Metric and event attribute keys.
const (
	// AttrSeedID names the seed (or TeacherID) a per-seed metric is about.
	AttrSeedID = "seed_id"
	// AttrStage is the seed's stage name ("TRAINING"), or TeacherStage.
	AttrStage = "stage"
	// AttrLayer names the layer of a layer_norm metric.
	AttrLayer = "layer"
)

// Default warning thresholds (G1 settings TOLARIA_SEED_SHARE_JUMP_WARN,
// TOLARIA_SEED_CONFLICT_RATIO_WARN, TOLARIA_AGGREGATION_CONFLICT_WARN,
// TOLARIA_SEED_LAYER_TOPK).
const (
	// DefaultShareJumpWarn is the default |share_delta| warning level.
	DefaultShareJumpWarn = 0.3
	// DefaultSeedConflictWarn is the default per-seed conflict_ratio
	// warning level.
	DefaultSeedConflictWarn = 0.5
	// DefaultConflictWarn is the default epoch conflict_ratio warning
	// level.
	DefaultConflictWarn = 0.75
	// DefaultLayerTopK is the default number of layers reported per seed.
	DefaultLayerTopK = 3
)

// maxConflictSeeds bounds the pairwise per-seed conflict count, which is
// quadratic in the number of participants (G1: 2 ≤ n ≤ 16).
const maxConflictSeeds = 16

// Event is a warning the accumulator found at Finalize, returned as data
// for the trainer to emit through its telemetry hub.
type Event struct {
	// Name is EventSeedShareJump, EventSeedConflictHigh or
	// EventGradConflictHigh.
	Name string
	// Severity is leyline.SeverityWarning for all three.
	Severity leyline.Severity
	// Attributes carry seed_id and stage (per-seed events) and the
	// offending value, formatted as the reference does ("delta" with four
	// decimals, "conflict_ratio" with three).
	Attributes map[string]string
	// Value is the offending value; Threshold the limit it reached.
	Value, Threshold float64
}

// Layer names one flat range for per-layer gradient norms (usually one
// parameter tensor).
type Layer struct {
	Name string
	Range
}

// ParamLayers returns one Layer per parameter over the flat layout of
// GradsToFlat, named by the parameter's Name or "param_<i>".
func ParamLayers(params []*autograd.Var) []Layer {
	out := make([]Layer, 0, len(params))
	off := 0
	for i, p := range params {
		n := 0
		if p != nil && p.Value != nil {
			n = p.Value.Numel()
		}
		name := ""
		if p != nil {
			name = p.Name
		}
		if name == "" {
			name = fmt.Sprintf("param_%d", i)
		}
		out = append(out, Layer{Name: name, Range: Range{off, off + n}})
		off += n
	}
	return out
}

// AccumulatorOptions configures a SeedMetricsAccumulator. The zero value
// gives the reference defaults without per-layer norms.
type AccumulatorOptions struct {
	// ShareJumpWarn is the |share_delta| that raises seed_share_jump
	// (0 → 0.3).
	ShareJumpWarn float64
	// SeedConflictWarn is the per-seed conflict_ratio that raises
	// seed_conflict_high (0 → 0.5).
	SeedConflictWarn float64
	// ConflictWarn is the epoch conflict_ratio that raises
	// grad_conflict_high (0 → 0.75).
	ConflictWarn float64
	// Layers enables per-layer norms (tolaria.grad_agg.seed.layer_norm)
	// over these flat ranges; nil disables them (G1 default).
	Layers []Layer
	// LayerTopK is how many layers per seed are reported (0 → 3).
	LayerTopK int
}

// seedTotals are one participant's running sums for the epoch.
type seedTotals struct {
	weight, norm, share, alpha, teacherSplit float64
	conflicts, uses                          int
	layers                                   []float64 // per-layer norm sums, with Layers
}

// SeedMetricsAccumulator collects the per-step aggregation figures of an
// epoch and reduces them to the tolaria.grad_agg.* metrics at its end
// (G1 SeedMetricsAccumulator, esper-reference §3.1.4). Per step it only
// adds to running sums: norms, shares, teacher split, pairwise conflicts
// (for 2 to 16 participants) and optional per-layer norms, in O(elements)
// work and without allocating once every participant has been seen.
// Averages, ratios, top-k layers, share deltas against the previous
// epoch and warning events are computed at Finalize.
//
// Reset clears the epoch's sums but keeps each seed's last share, so
// share_delta compares consecutive epochs. Not safe for concurrent use.
type SeedMetricsAccumulator struct {
	opts AccumulatorOptions

	totals         map[string]*seedTotals
	weightsSum     float64
	weightsUses    int
	teacherNormSum float64
	teacherUses    int
	microTotal     int
	conflictsTotal int
	attribUses     int

	masks     *Masks
	lastShare map[string]float64

	norms     []float64 // Record scratch
	conflicts []int

	dev devSums // RecordTensors' pending device sums (metrics_tensor.go)
}

// NewSeedMetricsAccumulator returns an empty accumulator. It fails on
// negative thresholds or top-k, or layers with inverted ranges.
func NewSeedMetricsAccumulator(opts AccumulatorOptions) (*SeedMetricsAccumulator, error) {
	const op = "NewSeedMetricsAccumulator"
	for _, t := range []struct {
		name string
		v    *float64
		def  float64
	}{
		{"ShareJumpWarn", &opts.ShareJumpWarn, DefaultShareJumpWarn},
		{"SeedConflictWarn", &opts.SeedConflictWarn, DefaultSeedConflictWarn},
		{"ConflictWarn", &opts.ConflictWarn, DefaultConflictWarn},
	} {
		if *t.v < 0 || !finite(*t.v) {
			return nil, invalid(op, "%s is %v", t.name, *t.v)
		}
		if *t.v == 0 {
			*t.v = t.def
		}
	}
	if opts.LayerTopK < 0 {
		return nil, invalid(op, "LayerTopK is %d", opts.LayerTopK)
	}
	if opts.LayerTopK == 0 {
		opts.LayerTopK = DefaultLayerTopK
	}
	for i, l := range opts.Layers {
		if l.Start < 0 || l.End < l.Start {
			return nil, invalid(op, "layer %d (%q) has range [%d, %d)", i, l.Name, l.Start, l.End)
		}
	}
	opts.Layers = slices.Clone(opts.Layers)
	return &SeedMetricsAccumulator{
		opts:      opts,
		totals:    map[string]*seedTotals{},
		lastShare: map[string]float64{},
	}, nil
}

// SetMasks gives the accumulator the step's ownership masks, for the
// params and mask_fraction metrics and for the set of seeds an epoch
// reports on. Call it whenever the parameter set changes; nil removes
// them.
func (a *SeedMetricsAccumulator) SetMasks(m *Masks) { a.masks = m }

// Record adds one optimizer step of the seed path (G1
// record_seed_metrics): names, flats and weights as PerSeed produced them
// (one per participant), each participant's alpha (missing → 0), and the
// trainer's running attribution sums and use count for the epoch. Per
// participant it adds the weight, the L2 norm, the share of the norms'
// sum, the alpha, the teacher split attribSums[name]/Σ attribSums (when
// attribUses > 0), and, with 2 to 16 participants, how many others it
// conflicts with (negative inner product).
//
// It fails, recording nothing, when the lists differ in length, a name
// repeats, the flats differ in length, a weight is not finite, or a
// layer range lies outside the flats. An empty names list is a no-op.
func (a *SeedMetricsAccumulator) Record(names []string, flats [][]float32, weights []float64, alphaBySeed, attribSums map[string]float64, attribUses int) error {
	const op = "SeedMetricsAccumulator.Record"
	n := len(names)
	if n == 0 {
		return nil
	}
	if len(flats) != n || len(weights) != n {
		return invalid(op, "%d names, %d gradients and %d weights", n, len(flats), len(weights))
	}
	size := len(flats[0])
	for i := range n {
		if len(flats[i]) != size {
			return invalid(op, "gradient %d has %d elements, gradient 0 has %d", i, len(flats[i]), size)
		}
	}
	if err := a.checkParticipants(op, names, weights, size); err != nil {
		return err
	}

	wmean := 0.0
	for _, w := range weights {
		wmean += w
	}
	a.weightsSum += wmean / float64(n)
	a.weightsUses++

	a.norms = slices.Grow(a.norms[:0], n)[:n]
	normSum := 0.0
	for i, f := range flats {
		a.norms[i] = norm(f)
		normSum += a.norms[i]
	}

	attribTotal := 0.0
	if attribUses > 0 {
		for _, v := range attribSums {
			attribTotal += v
		}
	}

	a.conflicts = slices.Grow(a.conflicts[:0], n)[:n]
	clear(a.conflicts)
	if n >= 2 && n <= maxConflictSeeds {
		for i := range n {
			for j := i + 1; j < n; j++ {
				if dot(flats[i], flats[j]) < 0 {
					a.conflicts[i]++
					a.conflicts[j]++
				}
			}
		}
	}

	for i, name := range names {
		t := a.seed(name)
		t.weight += weights[i]
		t.norm += a.norms[i]
		if normSum > 0 {
			t.share += a.norms[i] / normSum
		}
		t.alpha += alphaBySeed[name]
		if attribTotal > 0 {
			t.teacherSplit += attribSums[name] / attribTotal
		}
		t.conflicts += a.conflicts[i]
		t.uses++
		for k, l := range a.opts.Layers {
			t.layers[k] += norm(flats[i][l.Start:l.End])
		}
	}
	if attribUses > a.attribUses {
		a.attribUses = attribUses
	}
	return nil
}

// checkParticipants is Record's and RecordTensors' check of the
// participant list: finite weights, no name twice, and every layer
// range within the gradients' size elements.
func (a *SeedMetricsAccumulator) checkParticipants(op string, names []string, weights []float64, size int) error {
	for i := range names {
		if !finite(weights[i]) {
			return invalid(op, "weight of %q is %v", names[i], weights[i])
		}
		for j := range i {
			if names[j] == names[i] {
				return invalid(op, "participant %q appears twice", names[i])
			}
		}
	}
	for i, l := range a.opts.Layers {
		if l.End > size {
			return invalid(op, "layer %d (%q) ends at %d, the gradients have %d elements", i, l.Name, l.End, size)
		}
	}
	return nil
}

// RecordTeacherNorm adds the L2 norm of a redistributed teacher gradient
// (SeedGrads.TeacherNorm) to the teacher's totals and to the epoch's
// teacher_share average (G1 record_teacher_norm).
func (a *SeedMetricsAccumulator) RecordTeacherNorm(norm float64) error {
	if !finite(norm) || norm < 0 {
		return invalid("SeedMetricsAccumulator.RecordTeacherNorm", "norm %v", norm)
	}
	t := a.seed(TeacherID)
	t.uses++
	t.norm += norm
	a.teacherNormSum += norm
	a.teacherUses++
	return nil
}

// RecordCombine adds one optimizer step's combination: the number of
// microbatch gradients it consumed and the conflict pairs Combine
// counted.
func (a *SeedMetricsAccumulator) RecordCombine(microbatches, conflicts int) error {
	if microbatches < 0 || conflicts < 0 {
		return invalid("SeedMetricsAccumulator.RecordCombine", "%d microbatches, %d conflicts", microbatches, conflicts)
	}
	a.microTotal += microbatches
	a.conflictsTotal += conflicts
	return nil
}

// RecordWeights adds the mean of one step's aggregation weights to
// weights_mean without per-seed figures: the microbatch path, whose
// microbatches all share one stage-derived weight. Record does this
// itself on the seed path. An empty list is a no-op.
func (a *SeedMetricsAccumulator) RecordWeights(weights []float64) error {
	if len(weights) == 0 {
		return nil
	}
	s := 0.0
	for i, w := range weights {
		if !finite(w) {
			return invalid("SeedMetricsAccumulator.RecordWeights", "weight %d is %v", i, w)
		}
		s += w
	}
	a.weightsSum += s / float64(len(weights))
	a.weightsUses++
	return nil
}

// seed returns name's totals, creating them on first sight.
func (a *SeedMetricsAccumulator) seed(name string) *seedTotals {
	t := a.totals[name]
	if t == nil {
		t = &seedTotals{}
		if len(a.opts.Layers) > 0 {
			t.layers = make([]float64, len(a.opts.Layers))
		}
		a.totals[name] = t
	}
	return t
}

// EpochReport is what Finalize returns for the trainer to publish.
type EpochReport struct {
	// Metrics are the epoch metrics then the per-seed metrics (seeds in
	// id order, the teacher last).
	Metrics []leyline.Metric
	// Events are the warnings found, in the same order.
	Events []Event
	// ConflictRatio is the epoch conflict ratio, also reported as
	// tolaria.grad_agg.conflict_ratio (the state packet's
	// grad_conflict_rate).
	ConflictRatio float64
	// Err is the error of the Flush Finalize ran first, when the device
	// sums could not be read; the report then leaves them out. It is nil
	// when nothing was recorded on a device or the read succeeded.
	Err error
}

// Finalize reduces the epoch (G1 finalize plus the trainer's telemetry
// builders), after a Flush of the figures recorded on a device (its
// error, if any, in EpochReport.Err). stages gives each seed's stage for the stage attribute
// (seeds without one get none; the teacher's is TEACHER). Finalize
// records every seed's share as the baseline of the next epoch's
// share_delta and does not clear the sums: call Reset before the next
// epoch.
//
// Epoch metrics: microbatches_total, conflicts, weights_mean (mean of the
// per-step weight means), pcgrad_applied (1 if any conflict),
// conflict_ratio = conflicts / max(1, participants recorded − 1), and
// teacher_share, the mean recorded teacher norm (a norm, not a ratio,
// despite the reference's name). Per seed (every recorded participant and
// every owner of the masks): weight, norm, share, share_delta, alpha,
// conflicts, conflict_ratio = (conflicts/uses)/max(1, seeds seen − 1),
// params and mask_fraction (with masks), teacher_share = teacher split
// sum / attribution uses, and the top-k layer_norm; the teacher reports
// weight, norm, params and mask_fraction.
func (a *SeedMetricsAccumulator) Finalize(stages map[string]leyline.SeedStage) EpochReport {
	var r EpochReport
	r.Err = a.Flush()
	// One allocation for the usual epoch: the six totals and about ten
	// figures per seed (more grow the slice).
	perSeed := 10 + max(a.opts.LayerTopK, 0)
	owners := 0
	if a.masks != nil {
		owners = len(a.masks.owners)
	}
	r.Metrics = make([]leyline.Metric, 0, 6+perSeed*(len(a.totals)+owners))
	metric := func(name string, v float64, unit string, attrs map[string]string) {
		r.Metrics = append(r.Metrics, leyline.Metric{Name: name, Value: v, Unit: unit, Attributes: attrs})
	}

	weightsMean := 0.0
	if a.weightsUses > 0 {
		weightsMean = a.weightsSum / float64(a.weightsUses)
	}
	pcgradApplied := 0.0
	if a.conflictsTotal > 0 {
		pcgradApplied = 1
	}
	r.ConflictRatio = float64(a.conflictsTotal) / math.Max(1, float64(len(a.totals)-1))
	teacherShare := 0.0
	if a.teacherUses > 0 {
		teacherShare = a.teacherNormSum / float64(a.teacherUses)
	}
	metric(leyline.MetricTolariaGradAggMicrobatchesTotal, float64(a.microTotal), "count", nil)
	metric(leyline.MetricTolariaGradAggConflicts, float64(a.conflictsTotal), "count", nil)
	metric(leyline.MetricTolariaGradAggWeightsMean, weightsMean, "ratio", nil)
	metric(leyline.MetricTolariaGradAggPCGradApplied, pcgradApplied, "bool", nil)
	metric(leyline.MetricTolariaGradAggConflictRatio, r.ConflictRatio, "ratio", nil)
	metric(leyline.MetricTolariaGradAggTeacherShare, teacherShare, "grad", nil)

	// The seeds an epoch reports on: everyone recorded, and every owner
	// of the current masks.
	seen := make(map[string]bool, len(a.totals))
	for name := range a.totals {
		seen[name] = true
	}
	if a.masks != nil {
		for _, o := range a.masks.owners {
			seen[o] = true
		}
	}
	ids := make([]string, 0, len(seen))
	for name := range seen {
		if name != TeacherID {
			ids = append(ids, name)
		}
	}
	sort.Strings(ids)
	neighbours := math.Max(1, float64(len(seen)-1))

	for _, id := range ids {
		attrs := map[string]string{AttrSeedID: id}
		if s, ok := stages[id]; ok {
			attrs[AttrStage] = s.String()
		}
		at := func() map[string]string { return cloneAttrs(attrs) }
		t := a.totals[id]
		if t == nil {
			t = &seedTotals{}
		}
		uses := float64(max(1, t.uses))
		metric(leyline.MetricTolariaGradAggSeedWeight, t.weight/uses, "ratio", at())
		metric(leyline.MetricTolariaGradAggSeedNorm, t.norm/uses, "grad", at())
		recorded := a.totals[id] != nil
		if recorded && t.uses > 0 {
			share := t.share / uses
			delta := share - a.lastShare[id]
			a.lastShare[id] = share
			metric(leyline.MetricTolariaGradAggSeedShare, share, "ratio", at())
			metric(leyline.MetricTolariaGradAggSeedShareDelta, delta, "ratio", at())
			if math.Abs(delta) >= a.opts.ShareJumpWarn {
				ev := at()
				ev["delta"] = fmt.Sprintf("%.4f", delta)
				r.Events = append(r.Events, Event{Name: EventSeedShareJump, Severity: leyline.SeverityWarning, Attributes: ev, Value: delta, Threshold: a.opts.ShareJumpWarn})
			}
			metric(leyline.MetricTolariaGradAggSeedAlpha, t.alpha/uses, "ratio", at())
		}
		if recorded {
			ratio := float64(t.conflicts) / uses / neighbours
			metric(leyline.MetricTolariaGradAggSeedConflicts, float64(t.conflicts), "count", at())
			metric(leyline.MetricTolariaGradAggSeedConflictRatio, ratio, "ratio", at())
			if ratio >= a.opts.SeedConflictWarn {
				ev := at()
				ev["conflict_ratio"] = fmt.Sprintf("%.3f", ratio)
				r.Events = append(r.Events, Event{Name: EventSeedConflictHigh, Severity: leyline.SeverityWarning, Attributes: ev, Value: ratio, Threshold: a.opts.SeedConflictWarn})
			}
		}
		a.paramMetrics(metric, id, at)
		if recorded && a.attribUses > 0 {
			metric(leyline.MetricTolariaGradAggSeedTeacherShare, t.teacherSplit/float64(a.attribUses), "ratio", at())
		}
		if recorded && len(t.layers) > 0 {
			for _, k := range topK(t.layers, a.opts.LayerTopK) {
				la := at()
				la[AttrLayer] = a.opts.Layers[k].Name
				metric(leyline.MetricTolariaGradAggSeedLayerNorm, t.layers[k]/uses, "grad", la)
			}
		}
	}

	if seen[TeacherID] {
		attrs := map[string]string{AttrSeedID: TeacherID, AttrStage: TeacherStage}
		at := func() map[string]string { return cloneAttrs(attrs) }
		t := a.totals[TeacherID]
		if t == nil {
			t = &seedTotals{}
		}
		uses := float64(max(1, t.uses))
		metric(leyline.MetricTolariaGradAggSeedWeight, t.weight/uses, "ratio", at())
		metric(leyline.MetricTolariaGradAggSeedNorm, t.norm/uses, "grad", at())
		a.paramMetrics(metric, TeacherID, at)
	}

	if r.ConflictRatio >= a.opts.ConflictWarn {
		r.Events = append(r.Events, Event{
			Name: EventGradConflictHigh, Severity: leyline.SeverityWarning,
			Attributes: map[string]string{"conflict_ratio": fmt.Sprintf("%.3f", r.ConflictRatio)},
			Value:      r.ConflictRatio, Threshold: a.opts.ConflictWarn,
		})
	}
	return r
}

// paramMetrics emits params and mask_fraction for id when masks are set.
func (a *SeedMetricsAccumulator) paramMetrics(metric func(string, float64, string, map[string]string), id string, at func() map[string]string) {
	if a.masks == nil || a.masks.Total() == 0 {
		return
	}
	elems := float64(a.masks.Elems(id))
	metric(leyline.MetricTolariaGradAggSeedParams, elems, "elems", at())
	metric(leyline.MetricTolariaGradAggSeedMaskFraction, elems/float64(a.masks.Total()), "ratio", at())
}

// Empty reports whether nothing has been recorded since the last Reset
// and no seed masks are set: Finalize then reports only the six epoch
// totals, all zero.
func (a *SeedMetricsAccumulator) Empty() bool {
	return len(a.totals) == 0 && a.masks == nil && a.weightsUses == 0 && a.teacherUses == 0 &&
		a.microTotal == 0 && a.conflictsTotal == 0 && a.attribUses == 0 &&
		len(a.dev.blocks) == 0 && a.dev.glob == nil
}

// Reset clears the epoch's sums for the next epoch, pending device sums
// included (dropped unread). The masks, the options and each seed's last
// share (the share_delta baseline) stay.
func (a *SeedMetricsAccumulator) Reset() {
	a.dropDevice()
	clear(a.totals)
	a.weightsSum, a.weightsUses = 0, 0
	a.teacherNormSum, a.teacherUses = 0, 0
	a.microTotal, a.conflictsTotal, a.attribUses = 0, 0, 0
}

// cloneAttrs gives each metric its own attribute map, so a consumer that
// edits one cannot change another.
func cloneAttrs(m map[string]string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// topK returns the indices of the k largest values, largest first (ties
// by lower index).
func topK(vals []float64, k int) []int {
	idx := make([]int, len(vals))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(x, y int) bool { return vals[idx[x]] > vals[idx[y]] })
	return idx[:min(k, len(idx))]
}
