package tamiyo

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
)

// Sampling follows the G2 factored policy (esper-reference.md §1.3
// "Masked sampling" and §4.2 "Sampling"): the op is drawn first from its
// masked, floored distribution; heads that are not causally relevant to
// that op are pinned to a canonical option by a one-hot mask (so their
// log-probability and entropy are 0); the slot is drawn from the slots
// where the op is valid (for WAIT, the first enabled slot); every other
// head from its own masked, floored distribution. Log-probabilities and
// entropies are float32 (Evaluate keeps F64 for an F64 policy).

// canonicalOption is the option a head is pinned to when the op taken
// does not use it (G2 get_action: blueprint NOOP, tempo STANDARD, style
// SIGMOID_ADD, alpha_target FULL, alpha_speed INSTANT, alpha_curve
// LINEAR). The slot's canonical option is the first valid slot.
var canonicalOption = [leyline.NumActionHeads]int{
	leyline.HeadBlueprint:   int(leyline.BlueprintNoop),
	leyline.HeadStyle:       int(leyline.StyleSigmoidAdd),
	leyline.HeadTempo:       int(leyline.TempoStandard),
	leyline.HeadAlphaTarget: int(leyline.AlphaTargetFull),
	leyline.HeadAlphaSpeed:  int(leyline.AlphaSpeedInstant),
	leyline.HeadAlphaCurve:  int(leyline.AlphaCurveActLinear),
}

// ErrAction is wrapped when Evaluate is given an action its masks forbid
// or that is out of range.
var ErrAction = errors.New("invalid action")

// headFloors returns the floors in use: f, or the G2 defaults when nil.
func headFloors(f *[leyline.NumActionHeads]float32) [leyline.NumActionHeads]float32 {
	if f == nil {
		return ProbabilityFloorPerHead
	}
	return *f
}

func checkFloors(f [leyline.NumActionHeads]float32) error {
	for h, v := range f {
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("tamiyo: probability floor of head %s is %g (want finite, >= 0)", leyline.HeadNames[h], v)
		}
	}
	return nil
}

// checkMasks verifies that masks has one entry per environment of g with
// every row the head's size (the slot rows the environment's slot count).
func checkMasks(g *Graph, masks []leyline.ActionMasks) error {
	if len(masks) != g.NumGraphs {
		return fmt.Errorf("tamiyo: %d action masks for %d environments", len(masks), g.NumGraphs)
	}
	for b, m := range masks {
		sizes := leyline.HeadSizes(g.NumSlots(b))
		for h, row := range m.Heads {
			if len(row) != sizes[h] {
				return fmt.Errorf("tamiyo: env %d: %s mask has %d entries, want %d", b, leyline.HeadNames[h], len(row), sizes[h])
			}
		}
		for op, row := range m.SlotByOp {
			if len(row) != sizes[leyline.HeadSlot] {
				return fmt.Errorf("tamiyo: env %d: slot mask of op %s has %d entries, want %d", b, leyline.LifecycleOp(op), len(row), sizes[leyline.HeadSlot])
			}
		}
	}
	return nil
}

// effectiveMasks returns the masks every head is drawn from once op is
// chosen: op's own mask, the slots where op is valid (the first enabled
// slot for WAIT), the head's mask when the op uses it, else the one-hot
// canonical option.
func effectiveMasks(m leyline.ActionMasks, op leyline.LifecycleOp) ([leyline.NumActionHeads][]bool, error) {
	var out [leyline.NumActionHeads][]bool
	rel := leyline.CausalRelevance(op)
	for h := range out {
		switch {
		case h == leyline.HeadOp:
			out[h] = m.Heads[h]
		case h == leyline.HeadSlot && rel[h]:
			out[h] = m.SlotByOp[op]
		case h == leyline.HeadSlot:
			first := -1
			for i, v := range m.Slot() {
				if v {
					first = i
					break
				}
			}
			if first < 0 {
				return out, &InvalidStateMachineError{Row: -1, Size: len(m.Slot())}
			}
			out[h] = oneHot(len(m.Slot()), first)
		case rel[h]:
			out[h] = m.Heads[h]
		default:
			out[h] = oneHot(len(m.Heads[h]), canonicalOption[h])
		}
	}
	return out, nil
}

func oneHot(n, i int) []bool {
	b := make([]bool, n)
	b[i] = true
	return b
}

// ActOptions configure Act.
type ActOptions struct {
	// Deterministic takes the most probable option of every head
	// (argmax of the floored distribution) instead of sampling.
	Deterministic bool
	// Rand draws the samples; required unless Deterministic.
	Rand *rand.Rand
	// Floors are the per-head probability floors in HeadNames order;
	// nil means ProbabilityFloorPerHead, all zeros disables them.
	Floors *[leyline.NumActionHeads]float32
}

// ActResult is Act's output for B environments.
type ActResult struct {
	// Actions holds one option index per head in HeadNames order; the
	// slot index is into the environment's SlotConfig.
	Actions [][leyline.NumActionHeads]int
	// LogProbs are the actions' log-probabilities under the floored
	// (and, for irrelevant heads, canonicalised) distributions.
	LogProbs [][leyline.NumActionHeads]float32
	// Entropies are the heads' entropies normalised to [0, 1] by
	// ln(number of valid options); 0 when a single option is valid.
	Entropies [][leyline.NumActionHeads]float32
	// Values are V(s) per environment.
	Values []float32
	// OpLogits are the raw (unmasked) op logits per environment.
	OpLogits [][]float32
}

// Action returns environment b's action as a leyline.FactoredAction.
func (r *ActResult) Action(b int) leyline.FactoredAction {
	a := r.Actions[b]
	return leyline.FactoredAction{
		Slot:        a[leyline.HeadSlot],
		Blueprint:   leyline.BlueprintAction(a[leyline.HeadBlueprint]),
		Style:       leyline.GerminationStyle(a[leyline.HeadStyle]),
		Tempo:       leyline.TempoAction(a[leyline.HeadTempo]),
		AlphaTarget: leyline.AlphaTargetAction(a[leyline.HeadAlphaTarget]),
		AlphaSpeed:  leyline.AlphaSpeedAction(a[leyline.HeadAlphaSpeed]),
		AlphaCurve:  leyline.AlphaCurveAction(a[leyline.HeadAlphaCurve]),
		Op:          leyline.LifecycleOp(a[leyline.HeadOp]),
	}
}

// tensorRows reads a [B, n] CPU tensor as float32 rows.
func tensorRows(t *tensor.Tensor) [][]float32 {
	s := t.Shape()
	return splitRows(hostFloat32s(t), 0, s[1], s[0], s[1])
}

// hostFloat32s returns a CPU tensor's elements in row-major order as
// float32: an F32 contiguous tensor's own (aliased, not copied), any
// other's converted (BF16 and F16 exactly, F64 rounded, as the logits
// always were).
func hostFloat32s(t *tensor.Tensor) []float32 {
	if t.DType() == tensor.F32 && t.IsContiguous() {
		return t.F32()
	}
	v := t.Float64s()
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// splitRows cuts b rows of n float32 values out of vals, a row-major
// [b, width] matrix, starting at column off: copies, all in one backing
// array (each row's capacity its length, so that appending to one does
// not write into the next).
func splitRows(vals []float32, off, n, b, width int) [][]float32 {
	return splitRowsInto(make([][]float32, b), make([]float32, b*n), vals, off, n, width)
}

// splitRowsInto is splitRows into rows (len b) and back (len b·n), which
// the caller allocates, so that several heads' rows can share one
// allocation of each (readJoined).
func splitRowsInto(rows [][]float32, back, vals []float32, off, n, width int) [][]float32 {
	for i := range rows {
		rows[i] = back[i*n : (i+1)*n : (i+1)*n]
		copy(rows[i], vals[i*width+off:i*width+off+n])
	}
	return rows
}

// readRows copies [B, n_i] tensors (one B, widths free) to the host as
// float32 rows: the CPU's are read where they are; a device's are
// concatenated there and copied at once, one host sync for them all.
func readRows(ts []*tensor.Tensor) ([][][]float32, error) {
	out := make([][][]float32, len(ts))
	if len(ts) == 0 {
		return out, nil
	}
	if dev := ts[0].Device(); dev.IsCPU() {
		for i, t := range ts {
			out[i] = tensorRows(t)
		}
		return out, nil
	}
	if len(ts) == 1 && ts[0].IsContiguous() {
		return readJoined(ts[0], ts, nil) // one tensor: read as it is, no join
	}
	return readJoined(joinRows(ts), ts, nil)
}

// joinRows concatenates [B, n_i] device tensors along their columns (one
// launch), the tensor readJoined reads.
func joinRows(ts []*tensor.Tensor) *tensor.Tensor {
	parts := make([]*autograd.Var, len(ts))
	for i, t := range ts {
		parts[i] = autograd.Const(t)
	}
	var cat *autograd.Var
	autograd.InferenceMode(func() { cat = autograd.Concat(parts, 1) })
	return cat.Value
}

// readJoined copies cat, joinRows of ts, to the host (one host sync) and
// cuts it into ts' rows. An F32 cat is read into *scratch where scratch
// is not nil (grown as needed, kept by the caller for its next read:
// tamiyo.Inference), else into a new host tensor.
func readJoined(cat *tensor.Tensor, ts []*tensor.Tensor, scratch *[]float32) ([][][]float32, error) {
	b, width := cat.Shape()[0], cat.Shape()[1]
	var vals []float32
	if scratch != nil && cat.DType() == tensor.F32 && cat.IsContiguous() {
		if cap(*scratch) < b*width {
			*scratch = make([]float32, b*width)
		}
		vals = (*scratch)[:b*width]
		if err := tensor.CopyToHostBytes(bytesOf(vals), cat); err != nil {
			return nil, fmt.Errorf("tamiyo: reading the policy's outputs: %w", err)
		}
	} else {
		host, err := cat.ToDevice(tensor.CPU)
		if err != nil {
			return nil, fmt.Errorf("tamiyo: reading the policy's outputs: %w", err)
		}
		vals = hostFloat32s(host)
	}
	out := make([][][]float32, len(ts))
	// Every tensor's rows in one header array and one backing array
	// (two allocations a read, not two a tensor); each row keeps its
	// capacity its length, so that appending to one writes into no other.
	headers := make([][]float32, len(ts)*b)
	back := make([]float32, b*width)
	off := 0
	for i, t := range ts {
		n := t.Shape()[1]
		out[i] = splitRowsInto(headers[i*b:(i+1)*b:(i+1)*b], back[off*b:(off+n)*b:(off+n)*b], vals, off, n, width)
		off += n
	}
	return out, nil
}

// readLogits copies a forward's head logits ([B, size] each; the slot
// head's padded to the widest environment) and values ([B]) to the host
// with readRows: one host sync on a device. The slot rows lose their
// padding.
func readLogits(g *Graph, logits [leyline.NumActionHeads]*tensor.Tensor, value *tensor.Tensor) (*Logits, error) {
	return readLogitsJoined(g, logits, value, nil, nil)
}

// logitRows are the tensors readLogits reads: the heads' logits, then
// the values as one column.
func logitRows(logits [leyline.NumActionHeads]*tensor.Tensor, value *tensor.Tensor) []*tensor.Tensor {
	ts := make([]*tensor.Tensor, 0, leyline.NumActionHeads+1)
	ts = append(ts, logits[:]...)
	return append(ts, value.Reshape(value.Shape()[0], 1))
}

// readLogitsJoined is readLogits reading joined, joinRows of logitRows
// (computed on the device already, as a captured forward's output), when
// it is not nil.
func readLogitsJoined(g *Graph, logits [leyline.NumActionHeads]*tensor.Tensor, value, joined *tensor.Tensor, scratch *[]float32) (*Logits, error) {
	ts := logitRows(logits, value)
	var rows [][][]float32
	var err error
	if joined != nil {
		rows, err = readJoined(joined, ts, scratch)
	} else {
		rows, err = readRows(ts)
	}
	if err != nil {
		return nil, err
	}
	lg := &Logits{Values: make([]float32, g.NumGraphs)}
	for h := range lg.Heads {
		lg.Heads[h] = rows[h]
		if h == leyline.HeadSlot {
			for b := range lg.Heads[h] {
				lg.Heads[h][b] = lg.Heads[h][b][:g.NumSlots(b)] // drop the padding
			}
		}
	}
	for b, row := range rows[leyline.NumActionHeads] {
		lg.Values[b] = row[0]
	}
	return lg, nil
}

// Act runs the policy on g without recording gradients and chooses one
// action per environment with masks (one per environment, from
// leyline.ComputeActionMasks). The network runs in its current mode;
// call SetTraining(false) for rollouts without dropout. On a device the
// graph goes there in two copies and the logits and values come back in
// one (one host sync per call).
//
// Errors: a malformed graph or masks, floors that are negative, no Rand
// when sampling, a mask with no valid option
// (*InvalidStateMachineError), or non-finite logits (wraps
// ErrNonFiniteLogits).
func (p *Policy) Act(g *Graph, masks []leyline.ActionMasks, opt ActOptions) (*ActResult, error) {
	floors, err := checkActInputs(g, masks, opt)
	if err != nil {
		return nil, err
	}
	gt, err := p.tensors(g)
	if err != nil {
		return nil, err
	}
	var out *PolicyOutput
	autograd.InferenceMode(func() { out = p.run(gt) })
	var logits [leyline.NumActionHeads]*tensor.Tensor
	for h, l := range out.Logits {
		logits[h] = l.Value
	}
	lg, err := readLogits(g, logits, out.Value.Value)
	if err != nil {
		return nil, err
	}
	return selectActions(lg, masks, opt, floors)
}

// checkActInputs validates Act's graph, masks and options and returns the
// floors in use.
func checkActInputs(g *Graph, masks []leyline.ActionMasks, opt ActOptions) ([leyline.NumActionHeads]float32, error) {
	floors := headFloors(opt.Floors)
	if err := g.Validate(); err != nil {
		return floors, err
	}
	if err := checkMasks(g, masks); err != nil {
		return floors, err
	}
	if err := checkFloors(floors); err != nil {
		return floors, err
	}
	if !opt.Deterministic && opt.Rand == nil {
		return floors, errors.New("tamiyo: Act: sampling needs ActOptions.Rand (or set Deterministic)")
	}
	return floors, nil
}

// selectActions chooses one action per environment from a forward's host
// logits: the op from its masked, floored distribution, then every other
// head from its effective mask (see effectiveMasks).
func selectActions(lg *Logits, masks []leyline.ActionMasks, opt ActOptions, floors [leyline.NumActionHeads]float32) (*ActResult, error) {
	n := len(lg.Values)
	res := &ActResult{
		Actions:   make([][leyline.NumActionHeads]int, n),
		LogProbs:  make([][leyline.NumActionHeads]float32, n),
		Entropies: make([][leyline.NumActionHeads]float32, n),
		Values:    lg.Values,
		OpLogits:  lg.Heads[leyline.HeadOp],
	}
	choose := func(d *MaskedCategorical) int {
		if opt.Deterministic {
			return d.Mode()
		}
		return d.Sample(opt.Rand)
	}
	for b := 0; b < n; b++ {
		m := masks[b]
		opDist, err := NewMaskedCategorical(lg.Heads[leyline.HeadOp][b], m.Op(), floors[leyline.HeadOp])
		if err != nil {
			return nil, actErr(b, leyline.HeadOp, err)
		}
		op := choose(opDist)
		eff, err := effectiveMasks(m, leyline.LifecycleOp(op))
		if err != nil {
			return nil, actErr(b, leyline.HeadSlot, err)
		}
		for h := 0; h < leyline.NumActionHeads; h++ {
			d := opDist
			if h != leyline.HeadOp {
				if d, err = NewMaskedCategorical(lg.Heads[h][b], eff[h], floors[h]); err != nil {
					return nil, actErr(b, h, err)
				}
			}
			a := op
			if h != leyline.HeadOp {
				a = choose(d)
			}
			lp, err := d.LogProb(a)
			if err != nil {
				return nil, actErr(b, h, err)
			}
			res.Actions[b][h] = a
			res.LogProbs[b][h] = lp
			res.Entropies[b][h] = d.Entropy()
		}
	}
	return res, nil
}

func actErr(b, head int, err error) error {
	return fmt.Errorf("tamiyo: Act: env %d, head %s: %w", b, leyline.HeadNames[head], err)
}

// EvaluateOptions configure Evaluate.
type EvaluateOptions struct {
	// Floors are the per-head probability floors, as in ActOptions; use
	// the ones the actions were sampled with.
	Floors *[leyline.NumActionHeads]float32
}

// Evaluation is Evaluate's output: differentiable tensors for the PPO
// loss.
type Evaluation struct {
	// LogProbs[h] is [B]: the log-probability of each environment's
	// action on head h, under the same masks, canonicalisation and floors
	// as Act.
	LogProbs [leyline.NumActionHeads]*autograd.Var
	// Entropies[h] is [B]: head h's entropy normalised by ln(number of
	// valid options), 0 where a single option is valid.
	Entropies [leyline.NumActionHeads]*autograd.Var
	// Value is V(s), [B].
	Value *autograd.Var
	// LogProbsAll and EntropiesAll are LogProbs and Entropies as the rows
	// of one [H, B] tensor each, in head order (LogProbs[h] is a view of
	// row h): for a loss computed over every head at once.
	LogProbsAll, EntropiesAll *autograd.Var
}

// Evaluate runs the policy on g (recording gradients when grad mode is
// on) and recomputes the log-probabilities and entropies of actions (one
// per environment, as Act returned them) under masks. It is what a PPO
// update calls on a minibatch. Logits are computed on in float32 (F64
// for an F64 policy). An action that its masks forbid, or whose
// irrelevant heads are not at their canonical options, is an error
// wrapping ErrAction. On a device the tensors it returns stay there; the
// probability floors need the masked logits on the host, read in one
// copy for all heads (one host sync, none when every floor is zero).
func (p *Policy) Evaluate(g *Graph, masks []leyline.ActionMasks, actions [][leyline.NumActionHeads]int, opt EvaluateOptions) (*Evaluation, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if err := checkMasks(g, masks); err != nil {
		return nil, err
	}
	floors := headFloors(opt.Floors)
	if err := checkFloors(floors); err != nil {
		return nil, err
	}
	if len(actions) != g.NumGraphs {
		return nil, fmt.Errorf("tamiyo: Evaluate: %d actions for %d environments", len(actions), g.NumGraphs)
	}
	// Per head, per environment: the mask the action was drawn from.
	var eff [leyline.NumActionHeads][][]bool
	for h := range eff {
		eff[h] = make([][]bool, g.NumGraphs)
	}
	for b, a := range actions {
		op := leyline.LifecycleOp(a[leyline.HeadOp])
		if !masks[b].OpValid(op) {
			return nil, fmt.Errorf("tamiyo: Evaluate: env %d: %w: op %d is not allowed by the op mask", b, ErrAction, a[leyline.HeadOp])
		}
		e, err := effectiveMasks(masks[b], op)
		if err != nil {
			return nil, fmt.Errorf("tamiyo: Evaluate: env %d: %w", b, err)
		}
		for h, row := range e {
			if a[h] < 0 || a[h] >= len(row) || !row[a[h]] {
				return nil, fmt.Errorf("tamiyo: Evaluate: env %d: %w: %s option %d is masked for op %s", b, ErrAction, leyline.HeadNames[h], a[h], op)
			}
			eff[h][b] = row
		}
	}

	gt, err := p.tensors(g)
	if err != nil {
		return nil, err
	}
	out := p.run(gt)
	ev := &Evaluation{Value: out.Value}
	// Every head at once: the heads' logits padded to the widest and
	// stacked, [H, B, N], so that the number of ops (launches on a GPU)
	// does not grow with the heads. Their masks, actions and constants
	// go to the device in one staging; the masked logits come back in one
	// read when a head has a floor, and what the floors need goes in a
	// second staging.
	hp, err := newHeadsProbs(out.Logits, eff, actions, floors)
	if err != nil {
		return nil, fmt.Errorf("tamiyo: Evaluate: %w", err)
	}
	if err := hp.st.upload(); err != nil {
		return nil, fmt.Errorf("tamiyo: Evaluate: %w", err)
	}
	hp.mask()
	if hp.anyFloor {
		rows, err := readRows([]*tensor.Tensor{hp.masked.Value.Reshape(leyline.NumActionHeads*hp.bsz, hp.n)})
		if err != nil {
			return nil, fmt.Errorf("tamiyo: Evaluate: %w", err)
		}
		hp.stageFloor(rows[0])
		if err := hp.st.upload(); err != nil {
			return nil, fmt.Errorf("tamiyo: Evaluate: %w", err)
		}
	}
	ev.LogProbsAll, ev.EntropiesAll = hp.finish()
	for h := 0; h < leyline.NumActionHeads; h++ {
		ev.LogProbs[h] = autograd.Reshape(autograd.Narrow(ev.LogProbsAll, 0, h, 1), hp.bsz)
		ev.Entropies[h] = autograd.Reshape(autograd.Narrow(ev.EntropiesAll, 0, h, 1), hp.bsz)
	}
	return ev, nil
}

// headsProbs computes, differentiably, the log-probability of actions
// and the normalised entropy of every head's masked, floored
// distribution per row, the heads side by side: [H, B, N] with N the
// widest head's options, a narrower head's logits padded (its padding,
// like every option its mask forbids, masked to MaskedLogitValue, whose
// probability is 0). masks rows may be shorter than a head's logits (the
// padded slot head); the rest is masked. Its constants are staged
// (newHeadsProbs, stageFloor) so that all heads share the copies to the
// device.
//
// The floor follows MaskedCategorical exactly: the set U of
// valid options held at the floor f is found on the host from the
// values (as leyline does, repeating the pass until none is under);
// the floored logits are then log f on U and log p₀ᵢ + log(1 − |U|f) −
// log Σ_{valid∖U} p₀ elsewhere, masked options −1e4, and log-softmax
// renormalises them. Gradients flow through p₀ for the options not on
// the floor, as in the reference. A head without a floor keeps the
// masked log-softmax.
type headsProbs struct {
	st       *staging
	logits   *autograd.Var // [H, B, N]
	masks    [leyline.NumActionHeads][][]bool
	minProb  [leyline.NumActionHeads]float32
	anyFloor bool
	allFloor bool
	bsz, n   int
	// Staged by newHeadsProbs.
	maskT, neg, idx, zero, invLn, floorHead *tensor.Tensor
	// Staged by stageFloor.
	overT, underT, shift, floorLog *tensor.Tensor
	// Set by mask.
	masked, lsm *autograd.Var
}

// newHeadsProbs checks every head's masks, pads and stacks the heads'
// logits (cast to F32 unless F32 or F64) and stages the masks, actions
// and constants.
func newHeadsProbs(logits [leyline.NumActionHeads]*autograd.Var, masks [leyline.NumActionHeads][][]bool,
	actions [][leyline.NumActionHeads]int, floors [leyline.NumActionHeads]float32) (*headsProbs, error) {
	const nh = leyline.NumActionHeads
	hp := &headsProbs{masks: masks, minProb: floors, allFloor: true}
	for h, l := range logits {
		if dt := l.DType(); dt != tensor.F32 && dt != tensor.F64 {
			logits[h] = autograd.Cast(l, tensor.F32)
		}
		hp.n = max(hp.n, l.Shape()[1])
		if floors[h] > 0 {
			hp.anyFloor = true
		} else {
			hp.allFloor = false
		}
	}
	bsz, n := logits[0].Shape()[0], hp.n
	hp.bsz = bsz
	padded := make([]*autograd.Var, nh)
	for h, l := range logits {
		if w := l.Shape()[1]; w < n {
			l = autograd.Pad(l, []int{0, 0, 0, n - w}, 0)
		}
		padded[h] = l
	}
	hp.logits = autograd.Stack(padded, 0)
	hp.st = newStaging(hp.logits.Value.Device(), hp.logits.DType())
	maskFlat := make([]bool, nh*bsz*n)
	invLn := make([]float64, nh*bsz)
	idx := make([]int64, nh*bsz)
	floorHead := make([]bool, nh)
	for h := range masks {
		floorHead[h] = floors[h] > 0
		for b, row := range masks[h] {
			nv := 0
			for i, v := range row {
				maskFlat[(h*bsz+b)*n+i] = v
				if v {
					nv++
				}
			}
			if nv == 0 {
				return nil, fmt.Errorf("head %s: %w", leyline.HeadNames[h], &InvalidStateMachineError{Row: b, Size: len(row)})
			}
			if nv > 1 {
				invLn[h*bsz+b] = 1 / math.Log(float64(nv))
			}
			idx[h*bsz+b] = int64(actions[b][h])
		}
	}
	st := hp.st
	st.boolMask(&hp.maskT, maskFlat, nh, bsz, n)
	st.full(&hp.neg, float64(leyline.MaskedLogitValue), 1)
	st.int64s(&hp.idx, idx, nh, bsz, 1)
	st.full(&hp.zero, 0, 1)
	st.float64s(&hp.invLn, invLn, nh, bsz)
	if hp.anyFloor && !hp.allFloor {
		st.boolMask(&hp.floorHead, floorHead, nh, 1, 1)
	}
	return hp, nil
}

// mask computes the masked logits and their log-softmax (after the
// first upload).
func (hp *headsProbs) mask() {
	hp.masked = autograd.Where(hp.maskT, hp.logits, autograd.Const(hp.neg))
	hp.lsm = autograd.LogSoftmax(hp.masked, 2)
}

// stageFloor finds, for every head with a floor, the options at the
// probability floor from the masked logits read back to the host (rows
// [H·B][N]) and stages the floor's constants; a head without a floor
// gets its mask as the options over the floor and none under it (its
// floored logits are computed and not used).
func (hp *headsProbs) stageFloor(hostMasked [][]float32) {
	const nh = leyline.NumActionHeads
	bsz, n := hp.bsz, hp.n
	overFlat := make([]bool, nh*bsz*n)
	underFlat := make([]bool, nh*bsz*n)
	shift := make([]float64, nh*bsz)    // log(1 − |U|·f) per row
	floorLog := make([]float64, nh*bsz) // log f per row, for U
	for h := 0; h < nh; h++ {
		for b, row := range hp.masks[h] {
			r := h*bsz + b
			if hp.minProb[h] == 0 {
				for i, v := range row {
					overFlat[r*n+i] = v
				}
				continue
			}
			under, f := floorSet(hostMasked[r][:len(row)], row, hp.minProb[h])
			nu := 0
			for i, v := range row {
				switch {
				case !v:
				case under[i]:
					underFlat[r*n+i] = true
					nu++
				default:
					overFlat[r*n+i] = true
				}
			}
			shift[r] = math.Log(math.Max(1-float64(nu)*f, probFloorEps))
			floorLog[r] = math.Log(math.Max(f, probFloorEps))
		}
	}
	hp.st.boolMask(&hp.overT, overFlat, nh, bsz, n)
	hp.st.boolMask(&hp.underT, underFlat, nh, bsz, n)
	hp.st.float64s(&hp.shift, shift, nh, bsz, 1)
	hp.st.float64s(&hp.floorLog, floorLog, nh, bsz, 1)
}

// finish returns the actions' log-probabilities and the normalised
// entropies, [H, B] each (after the uploads).
func (hp *headsProbs) finish() (logp, ent *autograd.Var) {
	neg := autograd.Const(hp.neg)
	logp = hp.lsm
	if hp.anyFloor {
		lseOver := autograd.LogSumExp(autograd.Where(hp.overT, hp.lsm, neg), []int{2}, true)
		overL := autograd.Sub(autograd.Add(hp.lsm, autograd.Const(hp.shift)), lseOver)
		floored := autograd.Where(hp.overT, overL, autograd.Where(hp.underT, autograd.Const(hp.floorLog), neg))
		fl := autograd.LogSoftmax(floored, 2)
		if hp.allFloor {
			logp = fl
		} else {
			logp = autograd.Where(hp.floorHead, fl, hp.lsm)
		}
	}
	nh := leyline.NumActionHeads
	sel := autograd.Reshape(autograd.Gather(logp, 2, hp.idx), nh, hp.bsz)
	plogp := autograd.Where(hp.maskT, autograd.Mul(autograd.Exp(logp), logp), autograd.Const(hp.zero))
	h := autograd.Neg(autograd.Sum(plogp, []int{2}, false))
	ent = autograd.Mul(h, autograd.Const(hp.invLn))
	return sel, ent
}

// probFloorEps is the clamp inside the floor's rescale and log (G2 1e-8).
const probFloorEps = 1e-8

// floorSet returns which valid options of one masked row sit at the
// probability floor, and the effective floor min(minProb,
// 0.99/numValid), by the same passes as MaskedCategorical.
func floorSet(masked []float32, mask []bool, minProb float32) ([]bool, float64) {
	nv := 0
	for _, v := range mask {
		if v {
			nv++
		}
	}
	f := math.Min(float64(minProb), 0.99/float64(nv))
	// p0 as leyline computes it: float64 softmax of the float32 logits,
	// rounded to float32.
	mx := math.Inf(-1)
	for _, v := range masked {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range masked {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	p0 := make([]float64, len(masked))
	for i, v := range masked {
		p0[i] = float64(float32(math.Exp(float64(v) - lse)))
	}
	under := make([]bool, len(masked))
	for {
		nu := 0
		var sumOver float64
		for i := range p0 {
			if !mask[i] {
				continue
			}
			if under[i] {
				nu++
			} else {
				sumOver += p0[i]
			}
		}
		scale := math.Max(1-float64(nu)*f, probFloorEps) / math.Max(sumOver, probFloorEps)
		changed := false
		for i := range p0 {
			if !mask[i] || under[i] {
				continue
			}
			q := p0[i] * scale
			if nu == 0 {
				q = p0[i]
			}
			if q < f {
				under[i] = true
				changed = true
			}
		}
		if !changed {
			return under, f
		}
	}
}
