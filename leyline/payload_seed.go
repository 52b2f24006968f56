package leyline

import (
	"errors"
	"fmt"
)

// EnvIDUnset is the EnvID Kasmina writes; Simic fills in the real one.
const EnvIDUnset = -1

// errMissing reports a required payload field that is absent or empty;
// the error wraps ErrMissingField and names the payload and the field.
func errMissing(payload, field string) error {
	return fmt.Errorf("leyline: %s payload: %w: %q", payload, ErrMissingField, field)
}

// ErrMissingField is wrapped by every error about an absent required
// payload field.
var ErrMissingField = errors.New("required field missing")

// SeedGerminatedPayload is the data of SEED_GERMINATED.
type SeedGerminatedPayload struct {
	// Required.
	SlotID      string `json:"slot_id" esper:"required"`
	EnvID       int    `json:"env_id" esper:"required"`
	BlueprintID string `json:"blueprint_id" esper:"required"`
	Params      int    `json:"params" esper:"required"`
	// Optional.
	Alpha            float64 `json:"alpha"`
	GradRatio        float64 `json:"grad_ratio"`
	HasVanishing     bool    `json:"has_vanishing"`
	HasExploding     bool    `json:"has_exploding"`
	EpochsInStage    int     `json:"epochs_in_stage"`
	BlendTempoEpochs int     `json:"blend_tempo_epochs"` // default 5
	AlphaCurve       string  `json:"alpha_curve"`        // default "LINEAR"
}

// Validate checks the required fields.
func (p *SeedGerminatedPayload) Validate() error {
	return missingRequiredString(p)
}

// SeedStageChangedPayload is the data of SEED_STAGE_CHANGED.
type SeedStageChangedPayload struct {
	// Required.
	SlotID string    `json:"slot_id" esper:"required"`
	EnvID  int       `json:"env_id" esper:"required"`
	From   SeedStage `json:"from_stage" esper:"required"`
	To     SeedStage `json:"to_stage" esper:"required"`
	// Optional.
	Alpha         float64 `json:"alpha"`
	AccuracyDelta float64 `json:"accuracy_delta"`
	EpochsInStage int     `json:"epochs_in_stage"`
	GradRatio     float64 `json:"grad_ratio"`
}

// Validate checks the required fields and that both stages are valid.
func (p *SeedStageChangedPayload) Validate() error {
	if err := missingRequiredString(p); err != nil {
		return err
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
	SlotID       string    `json:"slot_id" esper:"required"`
	EnvID        int       `json:"env_id" esper:"required"`
	Gate         string    `json:"gate" esper:"required"` // "G0" .. "G5"
	Passed       bool      `json:"passed" esper:"required"`
	TargetStage  SeedStage `json:"target_stage" esper:"required"`
	ChecksPassed []string  `json:"checks_passed" esper:"required"`
	ChecksFailed []string  `json:"checks_failed" esper:"required"`
	Message      string    `json:"message"`
}

// Validate checks the required fields.
func (p *SeedGateEvaluatedPayload) Validate() error {
	if err := missingRequiredString(p); err != nil {
		return err
	}
	_, err := ValidateStage(int(p.TargetStage), "SeedGateEvaluated.target_stage")
	return err
}

// SeedFossilizedPayload is the data of SEED_FOSSILIZED.
type SeedFossilizedPayload struct {
	// Required.
	SlotID      string  `json:"slot_id" esper:"required"`
	EnvID       int     `json:"env_id" esper:"required"`
	BlueprintID string  `json:"blueprint_id" esper:"required"`
	Improvement float64 `json:"improvement" esper:"required"`
	ParamsAdded int     `json:"params_added" esper:"required"`
	// Optional.
	Alpha          float64  `json:"alpha"` // 1.0 once fossilized
	EpochsTotal    int      `json:"epochs_total"`
	Counterfactual *float64 `json:"counterfactual"` // nil: never measured
	BlendingDelta  float64  `json:"blending_delta"`
}

// Validate checks the required fields.
func (p *SeedFossilizedPayload) Validate() error {
	return missingRequiredString(p)
}

// SeedPrunedPayload is the data of SEED_PRUNED.
type SeedPrunedPayload struct {
	// Required.
	SlotID string `json:"slot_id" esper:"required"`
	EnvID  int    `json:"env_id" esper:"required"`
	Reason string `json:"reason" esper:"required"`
	// Optional.
	BlueprintID    string   `json:"blueprint_id"`
	Improvement    float64  `json:"improvement"`
	AutoPruned     bool     `json:"auto_pruned"`
	EpochsTotal    int      `json:"epochs_total"`
	Counterfactual *float64 `json:"counterfactual"` // nil: never measured
	BlendingDelta  float64  `json:"blending_delta"`
	Initiator      string   `json:"initiator"` // "policy", "governor" or "auto"
}

// Validate checks the required fields.
func (p *SeedPrunedPayload) Validate() error {
	return missingRequiredString(p)
}
