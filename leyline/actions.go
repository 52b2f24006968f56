package leyline

import (
	"fmt"
	"math"
)

// NumActionHeads is the number of heads of the factored action space
// (G2 NUM_ACTION_HEADS).
const NumActionHeads = 8

// HeadNames are the action heads in their fixed order (G2 HEAD_NAMES).
// Every per-head array in Esper is indexed in this order.
var HeadNames = [NumActionHeads]string{
	"slot", "blueprint", "style", "tempo", "alpha_target", "alpha_speed", "alpha_curve", "op",
}

// Indices of the heads in HeadNames.
const (
	HeadSlot        = 0
	HeadBlueprint   = 1
	HeadStyle       = 2
	HeadTempo       = 3
	HeadAlphaTarget = 4
	HeadAlphaSpeed  = 5
	HeadAlphaCurve  = 6
	HeadOp          = 7
)

// HeadIndex returns the position of a head name in HeadNames, or -1.
func HeadIndex(name string) int {
	for i, n := range HeadNames {
		if n == name {
			return i
		}
	}
	return -1
}

// MaskedLogitValue replaces the logit of a masked action (G2
// MASKED_LOGIT_VALUE). It is large enough that softmax gives the action
// no probability and small enough to stay finite in float16 and bfloat16,
// where the dtype's lowest value would overflow to -Inf.
const MaskedLogitValue float32 = -1e4

// ---------------------------------------------------------------------------
// blueprint head

// BlueprintAction is the blueprint head's option: which seed architecture
// to germinate.
type BlueprintAction int

// Blueprints (G2 BlueprintAction). The values are the head's indices.
const (
	BlueprintNoop          BlueprintAction = 0
	BlueprintConvLight     BlueprintAction = 1
	BlueprintAttention     BlueprintAction = 2
	BlueprintNorm          BlueprintAction = 3
	BlueprintDepthwise     BlueprintAction = 4
	BlueprintBottleneck    BlueprintAction = 5
	BlueprintConvSmall     BlueprintAction = 6
	BlueprintConvHeavy     BlueprintAction = 7
	BlueprintLora          BlueprintAction = 8
	BlueprintLoraLarge     BlueprintAction = 9
	BlueprintMLPSmall      BlueprintAction = 10
	BlueprintMLP           BlueprintAction = 11
	BlueprintFlexAttention BlueprintAction = 12
)

// NumBlueprints is the blueprint head's size (G2 NUM_BLUEPRINTS).
const NumBlueprints = 13

// BlueprintNullIndex is the embedding row meaning "no blueprint" (an empty
// slot), one past the last blueprint (G2 BLUEPRINT_NULL_INDEX).
const BlueprintNullIndex = 13

// BlueprintIDs maps a blueprint index to its registry id (G2
// BLUEPRINT_IDS).
var BlueprintIDs = [NumBlueprints]string{
	"noop", "conv_light", "attention", "norm", "depthwise", "bottleneck",
	"conv_small", "conv_heavy", "lora", "lora_large", "mlp_small", "mlp", "flex_attention",
}

// BlueprintIndex returns the index of a blueprint id, or -1 for an
// unknown id (G2 BLUEPRINT_ID_TO_INDEX).
func BlueprintIndex(id string) int {
	for i, v := range BlueprintIDs {
		if v == id {
			return i
		}
	}
	return -1
}

// Valid reports whether b is one of the 13 blueprints.
func (b BlueprintAction) Valid() bool { return b >= 0 && b < NumBlueprints }

// ID returns the blueprint's registry id ("conv_light"), or "" when b is
// not valid.
func (b BlueprintAction) ID() string {
	if !b.Valid() {
		return ""
	}
	return BlueprintIDs[b]
}

// String returns the blueprint's id, or "BlueprintAction(n)".
func (b BlueprintAction) String() string {
	if !b.Valid() {
		return fmt.Sprintf("BlueprintAction(%d)", int(b))
	}
	return BlueprintIDs[b]
}

// ---------------------------------------------------------------------------
// style head

// GerminationStyle is the style head's option: the blend easing and the
// blend algorithm a new seed uses.
type GerminationStyle int

// Germination styles (G2 GerminationStyle).
const (
	StyleLinearAdd      GerminationStyle = 0
	StyleLinearMultiply GerminationStyle = 1
	StyleSigmoidAdd     GerminationStyle = 2
	StyleGatedGate      GerminationStyle = 3
)

// NumStyles is the style head's size.
const NumStyles = 4

// StyleNames are the styles' names, by index.
var StyleNames = [NumStyles]string{"LINEAR_ADD", "LINEAR_MULTIPLY", "SIGMOID_ADD", "GATED_GATE"}

// StyleBlendIDs maps a style to its blend id (G2 STYLE_BLEND_IDS).
var StyleBlendIDs = [NumStyles]string{"linear", "linear", "sigmoid", "gated"}

// StyleAlphaAlgorithms maps a style to its blend algorithm (G2
// STYLE_ALPHA_ALGORITHMS).
var StyleAlphaAlgorithms = [NumStyles]AlphaAlgorithm{BlendAdd, BlendMultiply, BlendAdd, BlendGate}

// Valid reports whether s is one of the four styles.
func (s GerminationStyle) Valid() bool { return s >= 0 && s < NumStyles }

// BlendID returns the style's blend id ("linear", "sigmoid", "gated").
func (s GerminationStyle) BlendID() string {
	if !s.Valid() {
		return ""
	}
	return StyleBlendIDs[s]
}

// Algorithm returns the style's blend algorithm, or 0 when s is invalid.
func (s GerminationStyle) Algorithm() AlphaAlgorithm {
	if !s.Valid() {
		return 0
	}
	return StyleAlphaAlgorithms[s]
}

// String returns the style's name ("SIGMOID_ADD").
func (s GerminationStyle) String() string {
	if !s.Valid() {
		return fmt.Sprintf("GerminationStyle(%d)", int(s))
	}
	return StyleNames[s]
}

// ---------------------------------------------------------------------------
// tempo head

// TempoAction is the tempo head's option: how many epochs a new seed's
// blend ramp lasts.
type TempoAction int

// Tempos (G2 TempoAction).
const (
	TempoFast     TempoAction = 0
	TempoStandard TempoAction = 1
	TempoSlow     TempoAction = 2
)

// NumTempos is the tempo head's size (G2 NUM_TEMPO).
const NumTempos = 3

// TempoNames are the tempos' names, by index (G2 TEMPO_NAMES).
var TempoNames = [NumTempos]string{"FAST", "STANDARD", "SLOW"}

// TempoToEpochs maps a tempo to its blend length in epochs (G2
// TEMPO_TO_EPOCHS: 3, 5, 8).
var TempoToEpochs = [NumTempos]int{3, 5, 8}

// Valid reports whether t is one of the three tempos.
func (t TempoAction) Valid() bool { return t >= 0 && t < NumTempos }

// Epochs returns the blend length in epochs, or 0 when t is invalid.
func (t TempoAction) Epochs() int {
	if !t.Valid() {
		return 0
	}
	return TempoToEpochs[t]
}

// String returns the tempo's name ("STANDARD").
func (t TempoAction) String() string {
	if !t.Valid() {
		return fmt.Sprintf("TempoAction(%d)", int(t))
	}
	return TempoNames[t]
}

// ---------------------------------------------------------------------------
// alpha_target head

// AlphaTargetAction is the alpha_target head's option: the alpha a blend
// ramps to.
type AlphaTargetAction int

// Alpha targets (G2 AlphaTargetAction).
const (
	AlphaTargetHalf    AlphaTargetAction = 0
	AlphaTargetSeventy AlphaTargetAction = 1
	AlphaTargetFull    AlphaTargetAction = 2
)

// NumAlphaTargets is the alpha_target head's size.
const NumAlphaTargets = 3

// AlphaTargetNames are the targets' names, by index.
var AlphaTargetNames = [NumAlphaTargets]string{"HALF", "SEVENTY", "FULL"}

// AlphaTargetValues maps a target to its alpha (G2: 0.5, 0.7, 1.0).
var AlphaTargetValues = [NumAlphaTargets]float64{0.5, 0.7, 1.0}

// Valid reports whether a is one of the three targets.
func (a AlphaTargetAction) Valid() bool { return a >= 0 && a < NumAlphaTargets }

// Value returns the target alpha, or NaN when a is invalid.
func (a AlphaTargetAction) Value() float64 {
	if !a.Valid() {
		return math.NaN()
	}
	return AlphaTargetValues[a]
}

// String returns the target's name ("FULL").
func (a AlphaTargetAction) String() string {
	if !a.Valid() {
		return fmt.Sprintf("AlphaTargetAction(%d)", int(a))
	}
	return AlphaTargetNames[a]
}

// ---------------------------------------------------------------------------
// alpha_speed head

// AlphaSpeedAction is the alpha_speed head's option: how many controller
// ticks an alpha change takes.
type AlphaSpeedAction int

// Alpha speeds (G2 AlphaSpeedAction).
const (
	AlphaSpeedInstant AlphaSpeedAction = 0
	AlphaSpeedFast    AlphaSpeedAction = 1
	AlphaSpeedMedium  AlphaSpeedAction = 2
	AlphaSpeedSlow    AlphaSpeedAction = 3
)

// NumAlphaSpeeds is the alpha_speed head's size.
const NumAlphaSpeeds = 4

// AlphaSpeedNames are the speeds' names, by index.
var AlphaSpeedNames = [NumAlphaSpeeds]string{"INSTANT", "FAST", "MEDIUM", "SLOW"}

// AlphaSpeedTicks maps a speed to its tick count (G2: 0, 3, 5, 8).
var AlphaSpeedTicks = [NumAlphaSpeeds]int{0, 3, 5, 8}

// Valid reports whether a is one of the four speeds.
func (a AlphaSpeedAction) Valid() bool { return a >= 0 && a < NumAlphaSpeeds }

// Ticks returns the number of ticks, or -1 when a is invalid.
func (a AlphaSpeedAction) Ticks() int {
	if !a.Valid() {
		return -1
	}
	return AlphaSpeedTicks[a]
}

// String returns the speed's name ("MEDIUM").
func (a AlphaSpeedAction) String() string {
	if !a.Valid() {
		return fmt.Sprintf("AlphaSpeedAction(%d)", int(a))
	}
	return AlphaSpeedNames[a]
}

// ---------------------------------------------------------------------------
// alpha_curve head

// AlphaCurveAction is the alpha_curve head's option: the easing of an
// alpha change and, for sigmoids, its steepness.
type AlphaCurveAction int

// Alpha curve options (G2 AlphaCurveAction).
const (
	AlphaCurveActLinear        AlphaCurveAction = 0
	AlphaCurveActCosine        AlphaCurveAction = 1
	AlphaCurveActSigmoidGentle AlphaCurveAction = 2
	AlphaCurveActSigmoid       AlphaCurveAction = 3
	AlphaCurveActSigmoidSharp  AlphaCurveAction = 4
)

// NumAlphaCurves is the alpha_curve head's size.
const NumAlphaCurves = 5

// DefaultSigmoidSteepness is the steepness of the plain SIGMOID option,
// also carried (unused) by LINEAR and COSINE (G2 default steepness 12).
const DefaultSigmoidSteepness = 12.0

// AlphaCurveActionNames are the options' names, by index.
var AlphaCurveActionNames = [NumAlphaCurves]string{"LINEAR", "COSINE", "SIGMOID_GENTLE", "SIGMOID", "SIGMOID_SHARP"}

// AlphaCurveCurves maps an option to its easing curve.
var AlphaCurveCurves = [NumAlphaCurves]AlphaCurve{CurveLinear, CurveCosine, CurveSigmoid, CurveSigmoid, CurveSigmoid}

// AlphaCurveSteepness maps an option to its sigmoid steepness (G2:
// gentle 6, standard 12, sharp 24; LINEAR and COSINE carry 12, unused).
var AlphaCurveSteepness = [NumAlphaCurves]float64{DefaultSigmoidSteepness, DefaultSigmoidSteepness, 6, 12, 24}

// Valid reports whether a is one of the five options.
func (a AlphaCurveAction) Valid() bool { return a >= 0 && a < NumAlphaCurves }

// Curve returns the option's easing curve, or 0 when a is invalid.
func (a AlphaCurveAction) Curve() AlphaCurve {
	if !a.Valid() {
		return 0
	}
	return AlphaCurveCurves[a]
}

// Steepness returns the option's sigmoid steepness, or NaN when a is
// invalid.
func (a AlphaCurveAction) Steepness() float64 {
	if !a.Valid() {
		return math.NaN()
	}
	return AlphaCurveSteepness[a]
}

// String returns the option's name ("SIGMOID_SHARP").
func (a AlphaCurveAction) String() string {
	if !a.Valid() {
		return fmt.Sprintf("AlphaCurveAction(%d)", int(a))
	}
	return AlphaCurveActionNames[a]
}

// ---------------------------------------------------------------------------
// op head

// LifecycleOp is the op head's option: what to do to the chosen slot.
type LifecycleOp int

// Lifecycle operations (G2 LifecycleOp).
const (
	OpWait           LifecycleOp = 0
	OpGerminate      LifecycleOp = 1
	OpSetAlphaTarget LifecycleOp = 2
	OpPrune          LifecycleOp = 3
	OpFossilize      LifecycleOp = 4
	OpAdvance        LifecycleOp = 5
)

// NumOps is the op head's size (G2 NUM_OPS).
const NumOps = 6

// OpNames are the operations' names, by index (G2 OP_NAMES).
var OpNames = [NumOps]string{"WAIT", "GERMINATE", "SET_ALPHA_TARGET", "PRUNE", "FOSSILIZE", "ADVANCE"}

// Valid reports whether o is one of the six operations.
func (o LifecycleOp) Valid() bool { return o >= 0 && o < NumOps }

// String returns the operation's name ("PRUNE").
func (o LifecycleOp) String() string {
	if !o.Valid() {
		return fmt.Sprintf("LifecycleOp(%d)", int(o))
	}
	return OpNames[o]
}

// ParseLifecycleOp returns the operation with the given name.
func ParseLifecycleOp(name string) (LifecycleOp, error) {
	for i, n := range OpNames {
		if n == name {
			return LifecycleOp(i), nil
		}
	}
	return 0, fmt.Errorf("leyline: unknown lifecycle op %q (%v)", name, OpNames)
}

// ---------------------------------------------------------------------------
// head sizes and entropies

// HeadSizes returns the number of options of every head, in HeadNames
// order; the slot head has numSlots options.
func HeadSizes(numSlots int) [NumActionHeads]int {
	return [NumActionHeads]int{
		numSlots, NumBlueprints, NumStyles, NumTempos,
		NumAlphaTargets, NumAlphaSpeeds, NumAlphaCurves, NumOps,
	}
}

// HeadSizesFor returns HeadSizes for the slots of cfg.
func HeadSizesFor(cfg SlotConfig) [NumActionHeads]int { return HeadSizes(cfg.Len()) }

// HeadMaxEntropies returns ln(size) for every head (G2
// HEAD_MAX_ENTROPIES): the entropy of a uniform choice, used to
// normalise entropies. The slot head uses numSlots (ln 1 = 0 for a single
// slot).
func HeadMaxEntropies(numSlots int) [NumActionHeads]float64 {
	var out [NumActionHeads]float64
	for i, n := range HeadSizes(numSlots) {
		if n > 0 {
			out[i] = math.Log(float64(n))
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// factored action

// FactoredAction is one choice on every head. Slot is an index into the
// SlotConfig in use.
type FactoredAction struct {
	Slot        int
	Blueprint   BlueprintAction
	Style       GerminationStyle
	Tempo       TempoAction
	AlphaTarget AlphaTargetAction
	AlphaSpeed  AlphaSpeedAction
	AlphaCurve  AlphaCurveAction
	Op          LifecycleOp
}

// FactoredActionFromIndices builds an action from one index per head in
// HeadNames order. Every index must lie in its head's range; the slot
// head has numSlots options.
func FactoredActionFromIndices(idx [NumActionHeads]int, numSlots int) (FactoredAction, error) {
	sizes := HeadSizes(numSlots)
	for h, v := range idx {
		if v < 0 || v >= sizes[h] {
			return FactoredAction{}, fmt.Errorf("leyline: FactoredAction: %s index %d outside [0, %d)", HeadNames[h], v, sizes[h])
		}
	}
	return FactoredAction{
		Slot:        idx[HeadSlot],
		Blueprint:   BlueprintAction(idx[HeadBlueprint]),
		Style:       GerminationStyle(idx[HeadStyle]),
		Tempo:       TempoAction(idx[HeadTempo]),
		AlphaTarget: AlphaTargetAction(idx[HeadAlphaTarget]),
		AlphaSpeed:  AlphaSpeedAction(idx[HeadAlphaSpeed]),
		AlphaCurve:  AlphaCurveAction(idx[HeadAlphaCurve]),
		Op:          LifecycleOp(idx[HeadOp]),
	}, nil
}

// ToIndices returns one index per head in HeadNames order, the inverse of
// FactoredActionFromIndices.
func (a FactoredAction) ToIndices() [NumActionHeads]int {
	return [NumActionHeads]int{
		a.Slot, int(a.Blueprint), int(a.Style), int(a.Tempo),
		int(a.AlphaTarget), int(a.AlphaSpeed), int(a.AlphaCurve), int(a.Op),
	}
}

// Validate checks every field against its head's range.
func (a FactoredAction) Validate(numSlots int) error {
	_, err := FactoredActionFromIndices(a.ToIndices(), numSlots)
	return err
}

// ---------------------------------------------------------------------------
// topologies

// Topology names accepted by masks and blueprint guards.
const (
	TopologyCNN         = "cnn"
	TopologyMLP         = "mlp"
	TopologyTransformer = "transformer"
)

// topologyBlueprints lists each topology's blueprints in BlueprintAction
// order. cnn and transformer follow G2 CNN_BLUEPRINTS and
// TRANSFORMER_BLUEPRINTS; mlp is this port's MLP host catalog.
var topologyBlueprints = map[string][]BlueprintAction{
	TopologyCNN: {
		BlueprintNoop, BlueprintConvLight, BlueprintAttention, BlueprintNorm,
		BlueprintDepthwise, BlueprintBottleneck, BlueprintConvSmall, BlueprintConvHeavy,
	},
	TopologyMLP: {
		BlueprintNoop, BlueprintNorm, BlueprintLora, BlueprintLoraLarge, BlueprintMLPSmall, BlueprintMLP,
	},
	TopologyTransformer: {
		BlueprintNoop, BlueprintAttention, BlueprintNorm, BlueprintLora, BlueprintLoraLarge,
		BlueprintMLPSmall, BlueprintMLP, BlueprintFlexAttention,
	},
}

// Topologies returns the known topology names, sorted.
func Topologies() []string { return []string{TopologyCNN, TopologyMLP, TopologyTransformer} }

// TopologyBlueprints returns the blueprints a topology offers, NOOP
// included, in BlueprintAction order. The name is matched exactly (no
// case folding or trimming); an unknown topology is an error.
func TopologyBlueprints(topology string) ([]BlueprintAction, error) {
	bps, ok := topologyBlueprints[topology]
	if !ok {
		return nil, fmt.Errorf("leyline: unknown topology %q (known: %v)", topology, Topologies())
	}
	return append([]BlueprintAction(nil), bps...), nil
}

// BlueprintAllowed reports whether topology offers blueprint b; false for
// an unknown topology.
func BlueprintAllowed(topology string, b BlueprintAction) bool {
	for _, v := range topologyBlueprints[topology] {
		if v == b {
			return true
		}
	}
	return false
}
