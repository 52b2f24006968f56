package leyline

import (
	"fmt"
	"strings"
)

// SeedReport is what a controller sees of one seed at the end of an
// epoch. Kasmina fills it from a slot's state; Tamiyo's heuristic and
// policy read it. Counterfactual is nil until the seed's contribution has
// been measured.
type SeedReport struct {
	SeedID      string
	SlotID      string
	BlueprintID string
	Stage       SeedStage
	Alpha       float64
	AlphaTarget float64
	AlphaMode   AlphaMode
	// EpochsInStage and EpochsTotal count the seed's epochs in its
	// current stage and since germination.
	EpochsInStage int
	EpochsTotal   int
	// ImprovementSinceStageStart and TotalImprovement are validation
	// accuracy gains in points (0–100 scale).
	ImprovementSinceStageStart float64
	TotalImprovement           float64
	Counterfactual             *float64
}

// EpochState is a controller's input for one decision: the training
// signals, the seeds, and the slots it may act on.
type EpochState struct {
	Signals TrainingSignals
	Seeds   []SeedReport
	// Slots are the host's slots in action order; the decision's SlotID
	// must be one of them.
	Slots SlotConfig
	// Topology is the host's blueprint topology ("cnn", "mlp").
	Topology string
}

// Decision is a controller's choice for one epoch: a lifecycle op with its
// arguments (the factored action space's heads, by value), a reason and a
// confidence in [0, 1]. Fields an op does not use (see CausalRelevance)
// are ignored.
type Decision struct {
	Op LifecycleOp
	// SlotID is the target slot; empty for WAIT.
	SlotID string
	// SeedID names the seed acted on, when there is one (informational).
	SeedID string
	// Blueprint is the blueprint to germinate (GERMINATE).
	Blueprint   BlueprintAction
	Style       GerminationStyle
	Tempo       TempoAction
	AlphaTarget AlphaTargetAction
	AlphaSpeed  AlphaSpeedAction
	AlphaCurve  AlphaCurveAction
	Reason      string
	Confidence  float64
}

// Wait returns the WAIT decision with a reason.
func Wait(reason string) Decision { return Decision{Op: OpWait, Reason: reason, Confidence: 1} }

// String renders the decision for logs: "GERMINATE r0c1 conv_light (plateau)".
func (d Decision) String() string {
	var b strings.Builder
	b.WriteString(d.Op.String())
	if d.SlotID != "" {
		b.WriteString(" " + d.SlotID)
	}
	if d.Op == OpGerminate {
		b.WriteString(" " + d.Blueprint.String())
	}
	if d.Reason != "" {
		fmt.Fprintf(&b, " (%s)", d.Reason)
	}
	return b.String()
}
