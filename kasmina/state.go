package kasmina

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/esper-go/esper/leyline"
)

// StateSchemaVersion is the version of SeedState's serialised form.
const StateSchemaVersion = 1

// StageHistoryLimit bounds SeedState.StageHistory; older entries are
// dropped first (G2 stage_history maxlen 100).
const StageHistoryLimit = 100

// DefaultBlendTempoEpochs is the default length of the blending ramp in
// epochs (G2 blend_tempo_epochs 5, TaskConfig blending_steps 5).
const DefaultBlendTempoEpochs = 5

// ErrInvalidTransition is wrapped by errors about a stage change that
// leyline's transition table does not allow.
var ErrInvalidTransition = errors.New("invalid stage transition")

// StageRecord is one entry of a seed's stage history.
type StageRecord struct {
	From leyline.SeedStage `json:"from"`
	To   leyline.SeedStage `json:"to"`
	// EpochsInFrom is how many epochs the seed spent in From.
	EpochsInFrom int       `json:"epochs_in_from"`
	At           time.Time `json:"at"`
}

// SeedTelemetry is the seed's latest gradient telemetry, as observations
// read it. Missing measurements are flagged, never encoded as healthy.
type SeedTelemetry struct {
	// GradientNorm is the seed's global gradient L2 norm.
	GradientNorm float64 `json:"gradient_norm"`
	// GradientHealth in [0, 1] (esper-reference §5.8); valid only when
	// HealthMeasured.
	GradientHealth float64 `json:"gradient_health"`
	HealthMeasured bool    `json:"health_measured"`
	HasVanishing   bool    `json:"has_vanishing"`
	HasExploding   bool    `json:"has_exploding"`
	// PrevGradientHealth is the health of the measurement before the
	// latest; nil = never recorded.
	PrevGradientHealth *float64 `json:"prev_gradient_health"`
}

// SeedState is everything a slot knows about its seed apart from the
// module itself: identity, lifecycle stage, metrics, the alpha
// controller and telemetry.
type SeedState struct {
	SeedID      string `json:"seed_id"`
	BlueprintID string `json:"blueprint_id"`
	SlotID      string `json:"slot_id"`

	Stage         leyline.SeedStage `json:"stage"`
	PreviousStage leyline.SeedStage `json:"previous_stage"`
	// PreviousEpochsInStage is how long the seed stayed in
	// PreviousStage (potential-based reward shaping needs it).
	PreviousEpochsInStage int       `json:"previous_epochs_in_stage"`
	StageEnteredAt        time.Time `json:"stage_entered_at"`

	// Alpha is the seed's current blend weight.
	Alpha           float64          `json:"alpha"`
	Metrics         SeedMetrics      `json:"metrics"`
	AlphaController *AlphaController `json:"alpha_controller"`
	// AlphaAlgorithm is how the seed blends in (ADD by default).
	AlphaAlgorithm leyline.AlphaAlgorithm `json:"alpha_algorithm"`
	// BlendTempoEpochs is the blending ramp length chosen at germination.
	BlendTempoEpochs int `json:"blend_tempo_epochs"`
	// AlphaTarget is the blending target chosen at germination.
	AlphaTarget float64 `json:"germination_alpha_target"`

	IsHealthy bool `json:"is_healthy"`
	IsPaused  bool `json:"is_paused"`

	StageHistory []StageRecord `json:"stage_history"`
	Telemetry    SeedTelemetry `json:"telemetry"`
}

// NewSeedState returns the state of a freshly germinated seed at
// DORMANT: healthy, ADD blending, alpha 0 held by a new controller.
func NewSeedState(seedID, blueprintID, slotID string) *SeedState {
	return &SeedState{
		SeedID: seedID, BlueprintID: blueprintID, SlotID: slotID,
		Stage: leyline.StageDormant, PreviousStage: leyline.StageUnknown,
		StageEnteredAt:  time.Now().UTC(),
		AlphaController: NewAlphaController(0),
		AlphaAlgorithm:  leyline.BlendAdd, BlendTempoEpochs: DefaultBlendTempoEpochs,
		AlphaTarget: 1, IsHealthy: true,
	}
}

// Transition moves the seed to stage to if leyline's table allows it
// (else an error wrapping ErrInvalidTransition, and nothing changes). It
// records the previous stage and the epochs spent there, appends the
// bounded history and restarts the stage baseline: stage-start accuracy
// = current accuracy, epochs in stage = 0.
func (s *SeedState) Transition(to leyline.SeedStage) error {
	if !leyline.IsValidTransition(s.Stage, to) {
		return fmt.Errorf("kasmina: seed %q: %w %v → %v (allowed: %v)", s.SeedID, ErrInvalidTransition, s.Stage, to, leyline.ValidTransitions(s.Stage))
	}
	now := time.Now().UTC()
	s.PreviousStage = s.Stage
	s.PreviousEpochsInStage = s.Metrics.EpochsInCurrentStage
	s.StageHistory = append(s.StageHistory, StageRecord{From: s.Stage, To: to, EpochsInFrom: s.Metrics.EpochsInCurrentStage, At: now})
	if n := len(s.StageHistory); n > StageHistoryLimit {
		s.StageHistory = append([]StageRecord(nil), s.StageHistory[n-StageHistoryLimit:]...)
	}
	s.Stage = to
	s.StageEnteredAt = now
	s.Metrics.AccuracyAtStageStart = s.Metrics.CurrentValAccuracy
	s.Metrics.EpochsInCurrentStage = 0
	return nil
}

// setAlpha sets the blend weight (clamped) in the state, its metrics and
// its controller.
func (s *SeedState) setAlpha(v float64) {
	v = clamp01(v)
	s.Alpha = v
	s.Metrics.CurrentAlpha = v
	s.AlphaController.Alpha = v
}

// Clone returns a deep copy.
func (s *SeedState) Clone() *SeedState {
	c := *s
	ctrl := *s.AlphaController
	c.AlphaController = &ctrl
	c.StageHistory = append([]StageRecord(nil), s.StageHistory...)
	c.Metrics = cloneMetrics(s.Metrics)
	if p := s.Telemetry.PrevGradientHealth; p != nil {
		v := *p
		c.Telemetry.PrevGradientHealth = &v
	}
	return &c
}

func cloneMetrics(m SeedMetrics) SeedMetrics {
	if p := m.SeedGradientNormRatio; p != nil {
		v := *p
		m.SeedGradientNormRatio = &v
	}
	if p := m.CounterfactualContribution; p != nil {
		v := *p
		m.CounterfactualContribution = &v
	}
	return m
}

type seedStateAlias SeedState

type seedStateJSON struct {
	SchemaVersion *int `json:"schema_version"`
	*seedStateAlias
}

// MarshalJSON writes the state with its schema version.
func (s *SeedState) MarshalJSON() ([]byte, error) {
	v := StateSchemaVersion
	return json.Marshal(seedStateJSON{SchemaVersion: &v, seedStateAlias: (*seedStateAlias)(s)})
}

// UnmarshalJSON reads a state written by MarshalJSON. A missing or
// different schema version, a missing alpha controller or metrics, an
// invalid stage or blend algorithm is an error and leaves s unchanged.
func (s *SeedState) UnmarshalJSON(b []byte) error {
	var a seedStateAlias
	j := seedStateJSON{seedStateAlias: &a}
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("kasmina: seed state: %w", err)
	}
	if err := checkSchema("seed state", j.SchemaVersion, StateSchemaVersion); err != nil {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("kasmina: seed state: %w", err)
	}
	for _, k := range []string{"seed_id", "blueprint_id", "slot_id", "stage", "metrics", "alpha_controller", "alpha_algorithm"} {
		if _, ok := raw[k]; !ok {
			return fmt.Errorf("kasmina: seed state: required field %q is missing", k)
		}
	}
	if a.AlphaController == nil {
		return errors.New("kasmina: seed state: alpha_controller is null")
	}
	if !a.AlphaAlgorithm.Valid() {
		return fmt.Errorf("kasmina: seed state: invalid alpha algorithm %d", int(a.AlphaAlgorithm))
	}
	if _, err := leyline.ValidateStage(int(a.Stage), "kasmina seed state"); err != nil {
		return err
	}
	*s = SeedState(a)
	return nil
}
