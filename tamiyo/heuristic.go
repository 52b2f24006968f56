package tamiyo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/esper-go/esper/leyline"
)

// Heuristic defaults that leyline does not hold (esper-reference.md §4.1);
// the others are leyline's Heuristic* and BlueprintPenalty* constants.
const (
	// DefaultRansomwareContributionThreshold is the counterfactual
	// contribution above which a HOLDING seed with a negative total
	// improvement is pruned as "ransomware": the host has come to depend
	// on it without being better for it.
	DefaultRansomwareContributionThreshold = 0.1 // G2 ransomware_contribution_threshold
	// DefaultRansomwareImprovementThreshold is the total improvement below
	// which such a seed counts as ransomware.
	DefaultRansomwareImprovementThreshold = 0.0 // G2 ransomware_improvement_threshold
)

const (
	// penaltyFloor is the blueprint penalty below which decay deletes the
	// entry.
	penaltyFloor = 0.1 // G2 _decay_blueprint_penalties
	// confidenceScale turns a plateau length or a contribution into a
	// confidence: min(1, x/5).
	confidenceScale = 5.0 // G2 decide(): plateau/5.0, improvement/5.0
	// alphaTolerance is how close a BLENDING seed's alpha and target must
	// be, and how close the target must be to 1, for ADVANCE to HOLDING.
	alphaTolerance = 1e-6 // G2 decide() BLENDING rule
	// initialLastPruneEpoch places the "last prune" far enough in the past
	// that no embargo applies at the start.
	initialLastPruneEpoch = -100 // G2 HeuristicTamiyo._last_prune_epoch
)

// Germination defaults: what a heuristic GERMINATE asks for. They are the
// values a G2 germination takes when nothing else is said (blend
// "sigmoid" with the ADD algorithm, tempo 5 epochs) and the heuristic
// always blends to full amplitude.
const (
	// GerminateStyle is SIGMOID_ADD: sigmoid easing, ADD blend (G2
	// germinate blend_algorithm_id "sigmoid", alpha_algorithm ADD).
	GerminateStyle = leyline.StyleSigmoidAdd
	// GerminateTempo is STANDARD, a 5-epoch ramp (G2 germinate tempo 5).
	GerminateTempo = leyline.TempoStandard
	// GerminateAlphaTarget is FULL (alpha 1): G2 heuristic germinations
	// always target full amplitude.
	GerminateAlphaTarget = leyline.AlphaTargetFull
)

// defaultRotations are the default blueprint rotations by topology. cnn is
// the reference's; mlp is this port's (the cnn rotation names blueprints
// the MLP host does not have). transformer has none, as in the
// reference: its rotation must be given.
var defaultRotations = map[string][]string{
	leyline.TopologyCNN: {"conv_light", "conv_heavy", "attention", "norm", "depthwise"}, // G2 blueprint_rotation
	leyline.TopologyMLP: {"mlp_small", "lora", "norm", "mlp", "lora_large"},
}

// DefaultBlueprintRotation returns the default germination rotation of a
// topology (a copy): cnn [conv_light conv_heavy attention norm
// depthwise], mlp [mlp_small lora norm mlp lora_large]. A topology
// without a default (transformer) or an unknown one is an error.
func DefaultBlueprintRotation(topology string) ([]string, error) {
	if _, err := leyline.TopologyBlueprints(topology); err != nil {
		return nil, fmt.Errorf("tamiyo: %w", err)
	}
	r, ok := defaultRotations[topology]
	if !ok {
		avail, _ := germinableBlueprints(topology)
		return nil, fmt.Errorf("tamiyo: topology %q has no default blueprint rotation; set HeuristicOptions.BlueprintRotation (available: %s)", topology, strings.Join(avail, ", "))
	}
	return append([]string(nil), r...), nil
}

// HeuristicOptions configure a Heuristic. The zero value is the
// reference's configuration for the cnn topology. For the counts and
// magnitudes below, 0 selects the default and a negative value means zero
// (as with net.Dialer's KeepAlive), so that "no embargo" can be said.
// Floating-point fields must be finite.
type HeuristicOptions struct {
	// Topology is the host's blueprint topology ("cnn", "mlp",
	// "transformer"); "" means cnn.
	Topology string
	// PlateauEpochsToGerminate is the plateau length (epochs) that
	// triggers germination; default leyline.HeuristicPlateauEpochs (3).
	PlateauEpochsToGerminate int
	// MinEpochsBeforeGerminate is the earliest epoch at which a seed may
	// be germinated; default leyline.HeuristicMinEpochsBeforeGerminate (5).
	MinEpochsBeforeGerminate int
	// PruneAfterEpochsWithoutImprovement is how many epochs a TRAINING or
	// BLENDING seed gets in its stage before it may be pruned; default
	// leyline.HeuristicPruneAfterEpochs (5).
	PruneAfterEpochsWithoutImprovement int
	// PruneIfAccuracyDropsBy prunes such a seed whose improvement since
	// its stage started is below −PruneIfAccuracyDropsBy points; default
	// leyline.HeuristicPruneAccuracyDrop (2.0).
	PruneIfAccuracyDropsBy float64
	// MinImprovementToFossilize is the counterfactual contribution
	// (points) a HOLDING seed must exceed to be fossilized; default
	// leyline.HeuristicMinImprovementToFossilize (0.5).
	MinImprovementToFossilize float64
	// EmbargoEpochsAfterPrune is how many epochs after a prune no seed is
	// germinated; default leyline.EmbargoEpochsAfterPrune (5).
	EmbargoEpochsAfterPrune int
	// BlueprintRotation is the order in which blueprints are germinated.
	// Every name must be a blueprint of Topology other than noop
	// (duplicates are allowed). Empty means DefaultBlueprintRotation.
	BlueprintRotation []string
	// BlueprintPenaltyOnPrune is added to a blueprint's penalty each time
	// one of its seeds is pruned; default leyline.BlueprintPenaltyOnPrune
	// (2.0).
	BlueprintPenaltyOnPrune float64
	// BlueprintPenaltyDecay multiplies every penalty once per epoch
	// (entries below 0.1 are dropped); default
	// leyline.BlueprintPenaltyDecay (0.5). It must not exceed 1.
	BlueprintPenaltyDecay float64
	// BlueprintPenaltyThreshold is the penalty at which the rotation skips
	// a blueprint; default leyline.BlueprintPenaltyThreshold (3.0).
	BlueprintPenaltyThreshold float64
	// RansomwareContributionThreshold: a HOLDING seed whose counterfactual
	// contribution exceeds it while its total improvement is below
	// RansomwareImprovementThreshold is pruned; default
	// DefaultRansomwareContributionThreshold (0.1).
	RansomwareContributionThreshold float64
	// RansomwareImprovementThreshold is used as given; the zero value is
	// the default, DefaultRansomwareImprovementThreshold (0.0).
	RansomwareImprovementThreshold float64
}

func countOption(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func magnitudeOption(name string, v, def float64) (float64, error) {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return 0, fmt.Errorf("tamiyo: HeuristicOptions.%s = %v must be finite", name, v)
	case v == 0:
		return def, nil
	case v < 0:
		return 0, nil
	}
	return v, nil
}

func (o HeuristicOptions) withDefaults() (HeuristicOptions, error) {
	if o.Topology == "" {
		o.Topology = leyline.TopologyCNN
	}
	if _, err := leyline.TopologyBlueprints(o.Topology); err != nil {
		return o, fmt.Errorf("tamiyo: HeuristicOptions.Topology: %w", err)
	}
	o.PlateauEpochsToGerminate = countOption(o.PlateauEpochsToGerminate, leyline.HeuristicPlateauEpochs)
	o.MinEpochsBeforeGerminate = countOption(o.MinEpochsBeforeGerminate, leyline.HeuristicMinEpochsBeforeGerminate)
	o.PruneAfterEpochsWithoutImprovement = countOption(o.PruneAfterEpochsWithoutImprovement, leyline.HeuristicPruneAfterEpochs)
	o.EmbargoEpochsAfterPrune = countOption(o.EmbargoEpochsAfterPrune, leyline.EmbargoEpochsAfterPrune)
	for _, f := range []struct {
		name string
		p    *float64
		def  float64
	}{
		{"PruneIfAccuracyDropsBy", &o.PruneIfAccuracyDropsBy, leyline.HeuristicPruneAccuracyDrop},
		{"MinImprovementToFossilize", &o.MinImprovementToFossilize, leyline.HeuristicMinImprovementToFossilize},
		{"BlueprintPenaltyOnPrune", &o.BlueprintPenaltyOnPrune, leyline.BlueprintPenaltyOnPrune},
		{"BlueprintPenaltyDecay", &o.BlueprintPenaltyDecay, leyline.BlueprintPenaltyDecay},
		{"BlueprintPenaltyThreshold", &o.BlueprintPenaltyThreshold, leyline.BlueprintPenaltyThreshold},
		{"RansomwareContributionThreshold", &o.RansomwareContributionThreshold, DefaultRansomwareContributionThreshold},
	} {
		v, err := magnitudeOption(f.name, *f.p, f.def)
		if err != nil {
			return o, err
		}
		*f.p = v
	}
	if o.BlueprintPenaltyDecay > 1 {
		return o, fmt.Errorf("tamiyo: HeuristicOptions.BlueprintPenaltyDecay = %v must not exceed 1", o.BlueprintPenaltyDecay)
	}
	if v := o.RansomwareImprovementThreshold; math.IsNaN(v) || math.IsInf(v, 0) {
		return o, fmt.Errorf("tamiyo: HeuristicOptions.RansomwareImprovementThreshold = %v must be finite", v)
	}
	if len(o.BlueprintRotation) == 0 {
		r, err := DefaultBlueprintRotation(o.Topology)
		if err != nil {
			return o, err
		}
		o.BlueprintRotation = r
	} else {
		o.BlueprintRotation = append([]string(nil), o.BlueprintRotation...)
	}
	avail, _ := germinableBlueprints(o.Topology)
	var bad []string
	for _, name := range o.BlueprintRotation {
		if !contains(avail, name) && !contains(bad, name) {
			bad = append(bad, name)
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return o, fmt.Errorf("tamiyo: HeuristicOptions.BlueprintRotation has blueprints not available for topology %q: %s (available: %s)",
			o.Topology, strings.Join(bad, ", "), strings.Join(avail, ", "))
	}
	return o, nil
}

// germinableBlueprints returns the ids of a topology's blueprints other
// than noop, sorted.
func germinableBlueprints(topology string) ([]string, error) {
	bps, err := leyline.TopologyBlueprints(topology)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, b := range bps {
		if b != leyline.BlueprintNoop {
			ids = append(ids, b.ID())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Heuristic is the rule-based controller of the second-generation Python
// Esper (esper-reference.md §4.1). Each epoch it makes one decision:
//
//  1. On the first decision of a new epoch (an epoch greater than the
//     last one seen) every blueprint penalty is multiplied by the decay;
//     penalties below 0.1 are dropped.
//  2. Only live seeds count: reports that are not FOSSILIZED, not on the
//     failure path (PRUNED, EMBARGOED, RESETTING) and not DORMANT or
//     UNKNOWN (an empty slot).
//  3. With no live seed it considers germination, in this order: WAIT
//     during the embargo (epochs since the last prune < embargo); WAIT
//     until the host has stabilised; WAIT before MinEpochsBeforeGerminate;
//     WAIT when Signals.AvailableSlots ≤ 0 or no slot is empty; on a
//     plateau of PlateauEpochsToGerminate epochs GERMINATE the next
//     blueprint in the first empty slot (confidence min(1, plateau/5));
//     otherwise WAIT.
//  4. Otherwise it walks the live seeds in s.Seeds order and the first
//     rule that applies decides: GERMINATED → ADVANCE; TRAINING → PRUNE
//     if it should be pruned, else ADVANCE; BLENDING → PRUNE if it should
//     be pruned, ADVANCE when the alpha controller holds at a target of 1
//     and alpha has reached it, else WAIT; HOLDING → PRUNE a "ransomware"
//     seed (contribution above RansomwareContributionThreshold with total
//     improvement below RansomwareImprovementThreshold), WAIT while the
//     counterfactual contribution is unmeasured, FOSSILIZE when it exceeds
//     MinImprovementToFossilize (confidence min(1, contribution/5)), else
//     PRUNE. A seed should be pruned when it has spent at least
//     PruneAfterEpochsWithoutImprovement epochs in its stage and its
//     improvement since the stage started is below −PruneIfAccuracyDropsBy.
//     A prune starts the embargo and adds BlueprintPenaltyOnPrune to the
//     seed's blueprint.
//
// Blueprint selection scans the rotation from the current position,
// advancing it at each probe, and takes the first blueprint whose penalty
// is below the threshold. When every blueprint is penalised it takes,
// from the rotation sorted by (penalty, name), the one at the starting
// position modulo its length, and moves the position one past the start,
// so repeated fallbacks still rotate.
//
// A GERMINATE decision names the slot (the first slot of s.Slots that no
// seed report occupies; a report in DORMANT or UNKNOWN leaves its slot
// empty, any other stage occupies it), the blueprint, and GerminateStyle,
// GerminateTempo and GerminateAlphaTarget. ADVANCE, FOSSILIZE and PRUNE
// name the seed's slot and id; PRUNE is immediate (alpha speed INSTANT).
// WAIT names no slot. Every decision has a reason and a confidence in
// [0, 1] (1 unless stated above).
//
// The rules read derived signals (PlateauEpochs, HostStabilized, the
// histories), while a trainer passes each epoch's raw figures (epoch,
// step, losses, accuracies): EvaluateEpoch derives the signals from
// those with the heuristic's own SignalTracker (default TrackerOptions)
// before deciding, so a Heuristic is a trainer's controller as it is
// (tolaria.TrainerOptions.Controller). Wrapped in a Tracked, it leaves
// the tracking to the Tracked (for other TrackerOptions); Decide takes
// signals already derived.
//
// A Heuristic is safe for concurrent use; calls are serialised. One
// Heuristic serves one environment.
type Heuristic struct {
	opts HeuristicOptions

	mu sync.Mutex
	st heuristicState
	// tracker derives the signals EvaluateEpoch decides from; nil when
	// the caller derives them (a Tracked wrapping the heuristic).
	tracker *SignalTracker
}

// heuristicState is what a decision changes. EvaluateEpoch decides on a
// copy and commits it only when the decision is delivered in time.
type heuristicState struct {
	blueprintIndex int
	germinations   int
	lastPruneEpoch int
	lastDecayEpoch int
	penalties      map[string]float64
}

func initialHeuristicState() heuristicState {
	return heuristicState{
		lastPruneEpoch: initialLastPruneEpoch,
		lastDecayEpoch: -1,
		penalties:      map[string]float64{},
	}
}

func (s heuristicState) clone() heuristicState {
	c := s
	c.penalties = make(map[string]float64, len(s.penalties))
	for k, v := range s.penalties {
		c.penalties[k] = v
	}
	return c
}

var _ Controller = (*Heuristic)(nil)

// NewHeuristic returns a Heuristic with opts' defaults applied, tracking
// its own signals (see Heuristic): ready to be a trainer's controller.
// An unknown topology, a rotation naming a blueprint the topology lacks
// (the error lists the available ones), a topology without a default
// rotation when none is given, or a non-finite or out-of-range value is
// an error.
func NewHeuristic(opts HeuristicOptions) (*Heuristic, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	tr, err := NewSignalTracker(TrackerOptions{})
	if err != nil {
		return nil, err
	}
	return &Heuristic{opts: o, st: initialHeuristicState(), tracker: tr}, nil
}

// leaveTracking makes the caller responsible for deriving the signals:
// EvaluateEpoch then decides from s.Signals as given (NewTracked).
func (h *Heuristic) leaveTracking() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tracker = nil
}

// Options returns the heuristic's options with defaults applied (the
// rotation is a copy).
func (h *Heuristic) Options() HeuristicOptions {
	o := h.opts
	o.BlueprintRotation = append([]string(nil), o.BlueprintRotation...)
	return o
}

// Reset forgets every decision: rotation position 0, no germinations, no
// prune (last prune epoch −100), no penalties; and, for a heuristic that
// tracks its own signals, every epoch its tracker has seen.
func (h *Heuristic) Reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.st = initialHeuristicState()
	if h.tracker != nil {
		h.tracker.Reset()
	}
}

// Penalties returns a copy of the current blueprint penalties, by
// blueprint id.
func (h *Heuristic) Penalties() map[string]float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st.clone().penalties
}

// GerminationCount returns the number of GERMINATE decisions made since
// construction or Reset.
func (h *Heuristic) GerminationCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st.germinations
}

// LastPruneEpoch returns the epoch of the last PRUNE decision (−100 when
// there has been none).
func (h *Heuristic) LastPruneEpoch() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st.lastPruneEpoch
}

// Decide returns the decision for s and records it (embargo, penalties,
// rotation). It trusts s: EvaluateEpoch is the checked entry point.
// s.Signals must be derived signals (a SignalTracker's): Decide does not
// track.
// s.Topology is not consulted; the blueprints come from the rotation
// validated for the heuristic's own topology.
func (h *Heuristic) Decide(s leyline.EpochState) leyline.Decision {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.st.clone()
	d := h.decide(&st, s)
	h.st = st
	return d
}

// EvaluateEpoch implements Controller. It checks ctx first, then s (a
// topology other than the heuristic's, an invalid stage, an empty or
// duplicate seed id, a seed in a slot outside s.Slots or two seeds in one
// slot, a negative AvailableSlots), derives the signals from
// s.Signals.Metrics' raw figures, s.Seeds and s.Signals.AvailableSlots
// with its tracker (unless a Tracked derives them), decides, and commits
// the decision's bookkeeping only if ctx is still live afterwards, so a
// decision the trainer discards as late leaves no embargo or penalty
// behind. The tracker keeps the epoch either way, as Tracked's does.
func (h *Heuristic) EvaluateEpoch(ctx context.Context, s leyline.EpochState) (leyline.Decision, error) {
	if err := ctx.Err(); err != nil {
		return leyline.Wait("controller cancelled"), fmt.Errorf("tamiyo: heuristic: %w", err)
	}
	if err := h.validate(s); err != nil {
		return leyline.Wait("invalid epoch state"), err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tracker != nil {
		m := s.Signals.Metrics
		sig, err := h.tracker.Update(EpochResult{
			Epoch: m.Epoch, GlobalStep: m.GlobalStep,
			TrainLoss: m.TrainLoss, TrainAccuracy: m.TrainAccuracy,
			ValLoss: m.ValLoss, ValAccuracy: m.ValAccuracy,
			Seeds: s.Seeds, AvailableSlots: s.Signals.AvailableSlots,
		})
		if err != nil {
			return leyline.Wait("invalid epoch state"), fmt.Errorf("tamiyo: heuristic: %w", err)
		}
		s.Signals = sig
	}
	st := h.st.clone()
	d := h.decide(&st, s)
	if err := ctx.Err(); err != nil {
		return leyline.Wait("controller cancelled"), fmt.Errorf("tamiyo: heuristic: %w", err)
	}
	h.st = st
	return d, nil
}

// ErrInvalidEpochState is wrapped by EvaluateEpoch's error when the epoch
// state is inconsistent.
var ErrInvalidEpochState = errors.New("invalid epoch state")

func (h *Heuristic) validate(s leyline.EpochState) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("tamiyo: heuristic: %w: %s", ErrInvalidEpochState, fmt.Sprintf(format, args...))
	}
	if s.Topology != "" && s.Topology != h.opts.Topology {
		return bad("topology %q, but the heuristic was built for %q", s.Topology, h.opts.Topology)
	}
	if s.Signals.AvailableSlots < 0 {
		return bad("AvailableSlots = %d is negative", s.Signals.AvailableSlots)
	}
	seeds, err := presentSeeds(s.Seeds)
	if err != nil {
		return bad("%v", err)
	}
	bySlot := make(map[string]string, len(seeds))
	for _, r := range seeds {
		if !s.Slots.Contains(r.SlotID) {
			return bad("seed %q is in slot %q, which is not among the slots %v", r.SeedID, r.SlotID, s.Slots.IDs())
		}
		if other, dup := bySlot[r.SlotID]; dup {
			return bad("seeds %q and %q both occupy slot %q", other, r.SeedID, r.SlotID)
		}
		bySlot[r.SlotID] = r.SeedID
	}
	return nil
}

// decide is the §4.1 algorithm over st.
func (h *Heuristic) decide(st *heuristicState, s leyline.EpochState) leyline.Decision {
	epoch := s.Signals.Metrics.Epoch
	if epoch > st.lastDecayEpoch {
		h.decayPenalties(st)
		st.lastDecayEpoch = epoch
	}
	var live []leyline.SeedReport
	for _, r := range s.Seeds {
		if isLiveStage(r.Stage) {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return h.decideGermination(st, s)
	}
	for _, r := range live {
		if d, ok := h.manageSeed(st, epoch, r); ok {
			return d
		}
	}
	// Unreachable while every live stage has a rule; kept so that a new
	// stage degrades to WAIT.
	return leyline.Wait("Seeds progressing normally")
}

// isLiveStage reports whether a seed in stage s is one the heuristic
// manages.
func isLiveStage(s leyline.SeedStage) bool {
	return s.Valid() && !leyline.IsTerminalStage(s) && !leyline.IsFailureStage(s) && !isEmptySlotStage(s)
}

func (h *Heuristic) decideGermination(st *heuristicState, s leyline.EpochState) leyline.Decision {
	m := s.Signals.Metrics
	since := m.Epoch - st.lastPruneEpoch
	if since < h.opts.EmbargoEpochsAfterPrune {
		return leyline.Wait(fmt.Sprintf("Embargo (%d/%d epochs since prune)", since, h.opts.EmbargoEpochsAfterPrune))
	}
	if m.HostStabilized == 0 {
		return leyline.Wait("Host not stabilized")
	}
	if m.Epoch < h.opts.MinEpochsBeforeGerminate {
		// m.Epoch is the index; people count epochs from 1, and index <
		// Min is number ≤ Min.
		return leyline.Wait(fmt.Sprintf("Too early (epoch %d ≤ %d)", m.Epoch+1, h.opts.MinEpochsBeforeGerminate))
	}
	if s.Signals.AvailableSlots <= 0 {
		return leyline.Wait("No available slot")
	}
	slot := firstEmptySlot(s)
	if slot == "" {
		return leyline.Wait("No empty slot in the slot configuration")
	}
	if m.PlateauEpochs < h.opts.PlateauEpochsToGerminate {
		return leyline.Wait("Training progressing normally")
	}
	bp := h.nextBlueprint(st)
	st.germinations++
	return leyline.Decision{
		Op:          leyline.OpGerminate,
		SlotID:      slot,
		Blueprint:   leyline.BlueprintAction(leyline.BlueprintIndex(bp)),
		Style:       GerminateStyle,
		Tempo:       GerminateTempo,
		AlphaTarget: GerminateAlphaTarget,
		Reason:      fmt.Sprintf("Plateau detected (%d epochs)", m.PlateauEpochs),
		Confidence:  clamp01(float64(m.PlateauEpochs) / confidenceScale),
	}
}

// firstEmptySlot returns the first slot of s.Slots no seed occupies, or "".
func firstEmptySlot(s leyline.EpochState) string {
	occupied := make(map[string]bool, len(s.Seeds))
	for _, r := range s.Seeds {
		if !isEmptySlotStage(r.Stage) {
			occupied[r.SlotID] = true
		}
	}
	for _, id := range s.Slots.IDs() {
		if !occupied[id] {
			return id
		}
	}
	return ""
}

// manageSeed applies the stage rules to one live seed; ok is false when
// none applies.
func (h *Heuristic) manageSeed(st *heuristicState, epoch int, r leyline.SeedReport) (d leyline.Decision, ok bool) {
	improvement := r.ImprovementSinceStageStart
	switch r.Stage {
	case leyline.StageGerminated:
		return seedDecision(leyline.OpAdvance, r, "Advance to TRAINING", 1), true
	case leyline.StageTraining:
		if h.shouldPrune(improvement, r.EpochsInStage) {
			return h.prune(st, epoch, r, fmt.Sprintf("Failing in TRAINING (improvement %+.2f%% after %d epochs)", improvement, r.EpochsInStage)), true
		}
		return seedDecision(leyline.OpAdvance, r, fmt.Sprintf("Advance to BLENDING (improvement %+.2f%%)", improvement), 1), true
	case leyline.StageBlending:
		if h.shouldPrune(improvement, r.EpochsInStage) {
			return h.prune(st, epoch, r, fmt.Sprintf("Failing in BLENDING (improvement %+.2f%% after %d epochs)", improvement, r.EpochsInStage)), true
		}
		if r.AlphaTarget >= 1-alphaTolerance && r.AlphaMode == leyline.AlphaHold && math.Abs(r.Alpha-r.AlphaTarget) <= alphaTolerance {
			return seedDecision(leyline.OpAdvance, r, "Advance to HOLDING (full amplitude reached)", 1), true
		}
		w := leyline.Wait(fmt.Sprintf("Blending %s: alpha=%.2f", r.SeedID, r.Alpha))
		w.SeedID = r.SeedID
		return w, true
	case leyline.StageHolding:
		c := r.Counterfactual
		if c != nil && *c > h.opts.RansomwareContributionThreshold && r.TotalImprovement < h.opts.RansomwareImprovementThreshold {
			return h.prune(st, epoch, r, fmt.Sprintf("Ransomware pattern: high counterfactual (%.3f) but negative improvement (%.3f)", *c, r.TotalImprovement)), true
		}
		if c == nil {
			w := leyline.Wait(fmt.Sprintf("Holding %s: awaiting counterfactual contribution", r.SeedID))
			w.SeedID = r.SeedID
			return w, true
		}
		if *c > h.opts.MinImprovementToFossilize {
			return seedDecision(leyline.OpFossilize, r, fmt.Sprintf("Fossilizing: %+.2f%% contribution", *c), clamp01(*c/confidenceScale)), true
		}
		return h.prune(st, epoch, r, fmt.Sprintf("No improvement in HOLDING (%+.2f%% contribution)", *c)), true
	}
	return leyline.Decision{}, false
}

// shouldPrune: at least PruneAfterEpochsWithoutImprovement epochs in the
// stage and an improvement below −PruneIfAccuracyDropsBy.
func (h *Heuristic) shouldPrune(improvement float64, epochsInStage int) bool {
	return epochsInStage >= h.opts.PruneAfterEpochsWithoutImprovement && improvement < -h.opts.PruneIfAccuracyDropsBy
}

// prune records the prune (embargo start, blueprint penalty) and returns
// an immediate PRUNE of r.
func (h *Heuristic) prune(st *heuristicState, epoch int, r leyline.SeedReport, reason string) leyline.Decision {
	st.lastPruneEpoch = epoch
	if r.BlueprintID != "" {
		st.penalties[r.BlueprintID] += h.opts.BlueprintPenaltyOnPrune
	}
	d := seedDecision(leyline.OpPrune, r, reason, 1)
	d.AlphaSpeed = leyline.AlphaSpeedInstant
	d.AlphaCurve = leyline.AlphaCurveActLinear
	return d
}

func seedDecision(op leyline.LifecycleOp, r leyline.SeedReport, reason string, confidence float64) leyline.Decision {
	return leyline.Decision{Op: op, SlotID: r.SlotID, SeedID: r.SeedID, Reason: reason, Confidence: confidence}
}

func (h *Heuristic) decayPenalties(st *heuristicState) {
	for bp, p := range st.penalties {
		p *= h.opts.BlueprintPenaltyDecay
		if p < penaltyFloor {
			delete(st.penalties, bp)
		} else {
			st.penalties[bp] = p
		}
	}
}

// nextBlueprint advances the rotation and returns the blueprint to
// germinate (see Heuristic).
func (h *Heuristic) nextBlueprint(st *heuristicState) string {
	rot := h.opts.BlueprintRotation
	n := len(rot)
	start := st.blueprintIndex
	for range n {
		bp := rot[st.blueprintIndex%n]
		st.blueprintIndex++
		if st.penalties[bp] < h.opts.BlueprintPenaltyThreshold {
			return bp
		}
	}
	sorted := append([]string(nil), rot...)
	sort.SliceStable(sorted, func(i, j int) bool {
		pi, pj := st.penalties[sorted[i]], st.penalties[sorted[j]]
		if pi != pj {
			return pi < pj
		}
		return sorted[i] < sorted[j]
	})
	st.blueprintIndex = start + 1
	return sorted[start%n]
}

// clamp01 clamps x into [0, 1]; NaN gives 0.
func clamp01(x float64) float64 {
	switch {
	case x > 1:
		return 1
	case x >= 0:
		return x
	}
	return 0
}
