package leyline

import (
	"errors"
	"fmt"
)

// EnvIDUnset is the EnvID Kasmina writes; Simic fills in the real one.
const EnvIDUnset = -1

// errMissing reports a required payload field that is absent or empty.
func errMissing(payload, field string) error {
	return fmt.Errorf("leyline: %s: required field %q is missing", payload, field)
}

// ErrMissingField is wrapped by every error about an absent required
// payload field.
var ErrMissingField = errors.New("required field missing")

// SeedGerminatedPayload is the data of SEED_GERMINATED.
type SeedGerminatedPayload struct {
	// Required.
	SlotID      string
	EnvID       int
	BlueprintID string
	Params      int
	// Optional.
	Alpha            float64
	GradRatio        float64
	HasVanishing     bool
	HasExploding     bool
	EpochsInStage    int
	BlendTempoEpochs int    // default 5
	AlphaCurve       string // default "LINEAR"
}

// Validate checks the required fields.
func (p *SeedGerminatedPayload) Validate() error {
	if p.SlotID == "" {
		return fmt.Errorf("%w: %w", ErrMissingField, errMissing("SeedGerminated", "slot_id"))
	}
	if p.BlueprintID == "" {
		return fmt.Errorf("%w: %w", ErrMissingField, errMissing("SeedGerminated", "blueprint_id"))
	}
	return nil
}

// SeedStageChangedPayload is the data of SEED_STAGE_CHANGED.
type SeedStageChangedPayload struct {
	// Required.
	SlotID string
	EnvID  int
	From   SeedStage
	To     SeedStage
	// Optional.
	Alpha         float64
	AccuracyDelta float64
	EpochsInStage int
	GradRatio     float64
}

// Validate checks the required fields and that both stages are valid.
func (p *SeedStageChangedPayload) Validate() error {
	if p.SlotID == "" {
		return fmt.Errorf("%w: %w", ErrMissingField, errMissing("SeedStageChanged", "slot_id"))
	}
	if _, err := ValidateStage(int(p.From), "SeedStageChanged.from_stage"); err != nil {
		return err
	}
	if _, err := ValidateStage(int(p.To), "SeedStageChanged.to_stage"); err != nil {
		return err
	}
	return nil
}

// SeedGateEvaluatedPayload is the data of SEED_GATE_EVALUATED, emitted on
// both pass and fail.
type SeedGateEvaluatedPayload struct {
	SlotID       string
	EnvID        int
	Gate         string // "G0" .. "G5"
	Passed       bool
	TargetStage  SeedStage
	ChecksPassed []string
	ChecksFailed []string
	Message      string
}

// Validate checks the required fields.
func (p *SeedGateEvaluatedPayload) Validate() error {
	if p.SlotID == "" {
		return fmt.Errorf("%w: %w", ErrMissingField, errMissing("SeedGateEvaluated", "slot_id"))
	}
	if p.Gate == "" {
		return fmt.Errorf("%w: %w", ErrMissingField, errMissing("SeedGateEvaluated", "gate"))
	}
	_, err := ValidateStage(int(p.TargetStage), "SeedGateEvaluated.target_stage")
	return err
}

// SeedFossilizedPayload is the data of SEED_FOSSILIZED.
type SeedFossilizedPayload struct {
	// Required.
	SlotID      string
	EnvID       int
	BlueprintID string
	Improvement float64
	ParamsAdded int
	// Optional.
	Alpha          float64 // 1.0 once fossilized
	EpochsTotal    int
	Counterfactual *float64 // nil: never measured
	BlendingDelta  float64
}

// Validate checks the required fields.
func (p *SeedFossilizedPayload) Validate() error {
	if p.SlotID == "" {
		return fmt.Errorf("%w: %w", ErrMissingField, errMissing("SeedFossilized", "slot_id"))
	}
	if p.BlueprintID == "" {
		return fmt.Errorf("%w: %w", ErrMissingField, errMissing("SeedFossilized", "blueprint_id"))
	}
	return nil
}

// SeedPrunedPayload is the data of SEED_PRUNED.
type SeedPrunedPayload struct {
	// Required.
	SlotID string
	EnvID  int
	Reason string
	// Optional.
	BlueprintID    string
	Improvement    float64
	AutoPruned     bool
	EpochsTotal    int
	Counterfactual *float64 // nil: never measured
	BlendingDelta  float64
	Initiator      string // "policy", "governor" or "auto"
}

// Validate checks the required fields.
func (p *SeedPrunedPayload) Validate() error {
	if p.SlotID == "" {
		return fmt.Errorf("%w: %w", ErrMissingField, errMissing("SeedPruned", "slot_id"))
	}
	if p.Reason == "" {
		return fmt.Errorf("%w: %w", ErrMissingField, errMissing("SeedPruned", "reason"))
	}
	return nil
}
