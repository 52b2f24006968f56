package leyline

import (
	"errors"
	"fmt"
	"math"
)

// Observation V3 layout (G2 tamiyo/policy/features.py; sizes in
// leyline/__init__.py).
const (
	// ObsBaseFeatures is the number of environment-wide features.
	ObsBaseFeatures = 23
	// ObsSlotFeatures is the number of features per slot.
	ObsSlotFeatures = 31
	// ObsUnknown is the sentinel for a value that does not exist yet (a
	// history step not yet observed, a health never recorded).
	ObsUnknown = -1.0
	// ObsLossScale divides symlog(loss) so typical losses land in [0, 1].
	ObsLossScale = 7.0
	// ObsContributionScale divides contributions, velocities and
	// interaction sums before clamping to [−1, 1].
	ObsContributionScale = 10.0
	// ObsTempoScale divides the blend tempo (the slowest tempo is 8).
	ObsTempoScale = 12.0
	// ObsFreshnessDecay is the per-epoch decay of counterfactual freshness.
	ObsFreshnessDecay = 0.995
	// BlueprintEmbeddingDim is the per-slot blueprint embedding width the
	// policy appends to the observation (G2: 4, so 116 + 3·4 = 128).
	BlueprintEmbeddingDim = 4
)

// ObservationSize returns the V3 observation length for numSlots slots:
// 23 + 31·numSlots (116 for three).
func ObservationSize(numSlots int) int { return ObsBaseFeatures + ObsSlotFeatures*numSlots }

// Symlog is sign(x)·ln(1+|x|): log scaling that keeps the sign and is
// linear near 0.
func Symlog(x float64) float64 {
	if x < 0 {
		return -math.Log1p(-x)
	}
	return math.Log1p(x)
}

// ErrObservation is wrapped by every error BuildObservation returns.
var ErrObservation = errors.New("invalid observation input")

// ObsSlotState is what the observation reads of one occupied slot. A
// measurement that may be absent is a pointer: nil means "not measured",
// which is never encoded as healthy.
type ObsSlotState struct {
	Stage       SeedStage
	BlueprintID string
	Alpha       float64
	// CounterfactualContribution is the accuracy lost when the seed is
	// switched off; nil when not measured (encodes as 0).
	CounterfactualContribution *float64
	ContributionVelocity       float64
	BlendTempoEpochs           int
	AlphaTarget                float64
	AlphaMode                  AlphaMode
	AlphaStepsTotal            int
	AlphaStepsDone             int
	TimeToTarget               int
	AlphaVelocity              float64
	AlphaAlgorithm             AlphaAlgorithm
	InteractionSum             float64
	// GradientNorm is nil when unmeasured; nil and non-finite encode as 0.
	GradientNorm *float64
	// GradientHealth is in [0, 1]; nil (unmeasured) encodes as 0, a
	// non-finite value is an error.
	GradientHealth *float64
	HasVanishing   bool
	HasExploding   bool
	// PrevGradientHealth is the previous epoch's health; nil (never
	// recorded) encodes as −1, a non-finite value is an error.
	PrevGradientHealth *float64
	EpochsInStage      int
	// EpochsSinceCounterfactual is the number of epochs since the
	// contribution was last measured; nil (never) encodes as −1.
	EpochsSinceCounterfactual *int
	// EpochsTotal is the seed's age in epochs.
	EpochsTotal int
}

// ObsInput is the state one observation is built from.
type ObsInput struct {
	Signals TrainingSignals
	// MaxEpochs is the episode length; it scales every epoch count and
	// must be positive.
	MaxEpochs int
	// LastActionSuccess reports whether the previous action took effect.
	LastActionSuccess bool
	// LastOp is the previous action's op (WAIT, the zero value, before the
	// first action).
	LastOp LifecycleOp
	// Slots orders the per-slot blocks.
	Slots SlotConfig
	// SlotStates maps a slot id to its seed; a missing or nil entry is an
	// empty slot. Ids outside Slots are an error.
	SlotStates map[string]*ObsSlotState
}

// Observation is a V3 observation: the features and, per slot, the
// blueprint index for the policy's embedding (−1 for an empty slot).
type Observation struct {
	Features         []float32
	BlueprintIndices []int
}

// BuildObservation encodes one environment's state as Obs V3
// (esper-reference.md §1.4). It is a pure function of its input.
func BuildObservation(in ObsInput) (Observation, error) {
	n := in.Slots.Len()
	obs := Observation{
		Features:         make([]float32, ObservationSize(n)),
		BlueprintIndices: make([]int, n),
	}
	if err := buildObservationInto(in, obs.Features, obs.BlueprintIndices); err != nil {
		return Observation{}, err
	}
	return obs, nil
}

// BuildObservationBatch encodes several environments into one flat
// [len(inputs)·ObservationSize] slice (row-major) plus the per-slot
// blueprint indices [len(inputs)·numSlots]. All inputs must share the
// slot count.
func BuildObservationBatch(inputs []ObsInput) (features []float32, blueprints []int, err error) {
	if len(inputs) == 0 {
		return nil, nil, nil
	}
	n := inputs[0].Slots.Len()
	size := ObservationSize(n)
	features = make([]float32, size*len(inputs))
	blueprints = make([]int, n*len(inputs))
	for i, in := range inputs {
		if in.Slots.Len() != n {
			return nil, nil, fmt.Errorf("%w: env %d has %d slots, env 0 has %d", ErrObservation, i, in.Slots.Len(), n)
		}
		if err := buildObservationInto(in, features[i*size:(i+1)*size], blueprints[i*n:(i+1)*n]); err != nil {
			return nil, nil, fmt.Errorf("env %d: %w", i, err)
		}
	}
	return features, blueprints, nil
}

func clamp(x, lo, hi float64) float64 { return math.Min(math.Max(x, lo), hi) }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// buildObservationInto fills out (ObservationSize) and bp (numSlots).
func buildObservationInto(in ObsInput, out []float32, bp []int) error {
	if in.MaxEpochs <= 0 {
		return fmt.Errorf("%w: max epochs %d must be > 0", ErrObservation, in.MaxEpochs)
	}
	n := in.Slots.Len()
	if n == 0 {
		return fmt.Errorf("%w: empty slot configuration", ErrObservation)
	}
	if !in.LastOp.Valid() {
		return fmt.Errorf("%w: last op %d is not an op", ErrObservation, int(in.LastOp))
	}
	for id := range in.SlotStates {
		if !in.Slots.Contains(id) {
			return fmt.Errorf("%w: slot state for %q, which is not in the slot configuration %v", ErrObservation, id, in.Slots.IDs())
		}
	}
	m := in.Signals.Metrics
	maxE := float64(in.MaxEpochs)
	lossFeat := func(l float64) float64 { return Symlog(l) / ObsLossScale }

	out[0] = float32(math.Min(float64(m.Epoch)/maxE, 1))
	out[1] = float32(lossFeat(m.ValLoss))
	out[2] = float32(m.ValAccuracy / 100)
	fillHistory(out[3:8], RecentHistory(in.Signals.LossHistory), lossFeat)
	fillHistory(out[8:13], RecentHistory(in.Signals.AccuracyHistory), func(a float64) float64 { return a / 100 })

	var training, blending, settled int
	for i, id := range in.Slots.IDs() {
		st := in.SlotStates[id]
		block := out[ObsBaseFeatures+i*ObsSlotFeatures : ObsBaseFeatures+(i+1)*ObsSlotFeatures]
		if st == nil {
			for j := range block {
				block[j] = 0
			}
			bp[i] = -1
			continue
		}
		switch st.Stage {
		case StageTraining:
			training++
		case StageBlending:
			blending++
		case StageHolding, StageFossilized:
			settled++
		}
		idx, err := encodeSlot(st, id, maxE, block)
		if err != nil {
			return err
		}
		bp[i] = idx
	}
	out[13] = float32(float64(training) / float64(n))
	out[14] = float32(float64(blending) / float64(n))
	out[15] = float32(float64(settled) / float64(n))
	if in.LastActionSuccess {
		out[16] = 1
	} else {
		out[16] = 0
	}
	for op := 0; op < NumOps; op++ {
		out[17+op] = 0
	}
	out[17+int(in.LastOp)] = 1

	for i, v := range out {
		if !finite(float64(v)) {
			return fmt.Errorf("%w: feature %d is %g (a non-finite input)", ErrObservation, i, v)
		}
	}
	return nil
}

// fillHistory writes h (oldest first) right-aligned into dst, padding the
// front with ObsUnknown for steps not yet observed.
func fillHistory(dst []float32, h []float64, f func(float64) float64) {
	pad := len(dst) - len(h)
	for i := range dst {
		if i < pad {
			dst[i] = ObsUnknown
		} else {
			dst[i] = float32(f(h[i-pad]))
		}
	}
}

// encodeSlot writes the 31 features of an occupied slot and returns its
// blueprint index.
func encodeSlot(st *ObsSlotState, id string, maxE float64, b []float32) (int, error) {
	ctx := "BuildObservation: slot " + id
	oneHot, err := StageOneHot(st.Stage)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrObservation, ctx, err)
	}
	bpIdx := BlueprintIndex(st.BlueprintID)
	if bpIdx < 0 {
		return 0, fmt.Errorf("%w: %s: unknown blueprint %q", ErrObservation, ctx, st.BlueprintID)
	}
	if !st.AlphaMode.Valid() {
		return 0, fmt.Errorf("%w: %s: invalid alpha mode %d", ErrObservation, ctx, int(st.AlphaMode))
	}
	if !st.AlphaAlgorithm.Valid() {
		return 0, fmt.Errorf("%w: %s: invalid alpha algorithm %d", ErrObservation, ctx, int(st.AlphaAlgorithm))
	}
	steps := func(v int) float64 { return math.Min(float64(v), maxE) / maxE }

	b[0] = 1
	copy(b[1:11], oneHot[:])
	b[11] = float32(st.Alpha)
	b[12] = 0
	if st.CounterfactualContribution != nil {
		b[12] = float32(clamp(*st.CounterfactualContribution/ObsContributionScale, -1, 1))
	}
	b[13] = float32(clamp(st.ContributionVelocity/ObsContributionScale, -1, 1))
	b[14] = float32(float64(st.BlendTempoEpochs) / ObsTempoScale)
	b[15] = float32(st.AlphaTarget)
	b[16] = float32(float64(st.AlphaMode) / 2)
	b[17] = float32(steps(st.AlphaStepsTotal))
	b[18] = float32(steps(st.AlphaStepsDone))
	b[19] = float32(steps(st.TimeToTarget))
	b[20] = float32(clamp(st.AlphaVelocity, -1, 1))
	b[21] = float32(float64(st.AlphaAlgorithm-BlendAdd) / 2)
	b[22] = float32(clamp(st.InteractionSum/ObsContributionScale, -1, 1))

	// A gradient norm that is missing or non-finite says nothing; 0 keeps
	// it from looking like a large, informative value.
	b[23] = 0
	if g := st.GradientNorm; g != nil && finite(*g) {
		b[23] = float32(Symlog(*g) / ObsLossScale)
	}
	// Unmeasured health is 0, the unhealthy end, never the healthy 1.
	b[24] = 0
	if h := st.GradientHealth; h != nil {
		if !finite(*h) {
			return 0, fmt.Errorf("%w: %s: gradient health is %g", ErrObservation, ctx, *h)
		}
		b[24] = float32(*h)
	}
	b[25] = boolFeature(st.HasVanishing)
	b[26] = boolFeature(st.HasExploding)
	b[27] = ObsUnknown
	if h := st.PrevGradientHealth; h != nil {
		if !finite(*h) {
			return 0, fmt.Errorf("%w: %s: previous gradient health is %g", ErrObservation, ctx, *h)
		}
		b[27] = float32(*h)
	}
	b[28] = float32(math.Min(float64(st.EpochsInStage)/maxE, 1))
	b[29] = ObsUnknown
	if e := st.EpochsSinceCounterfactual; e != nil {
		if *e < 0 {
			return 0, fmt.Errorf("%w: %s: epochs since counterfactual %d < 0", ErrObservation, ctx, *e)
		}
		b[29] = float32(math.Pow(ObsFreshnessDecay, float64(*e)))
	}
	b[30] = float32(math.Min(float64(st.EpochsTotal)/maxE, 1))
	return bpIdx, nil
}

func boolFeature(v bool) float32 {
	if v {
		return 1
	}
	return 0
}

// Float64Ptr returns a pointer to v, for the optional measurements.
func Float64Ptr(v float64) *float64 { return &v }
