package kasmina

import (
	"encoding/json"
	"fmt"
	"math"
)

// MetricsSchemaVersion is the version of SeedMetrics' serialised form.
const MetricsSchemaVersion = 1

// AutoPruneReasons are the prune reasons that mark a seed as
// auto-pruned (by the governor rather than the policy) (G2
// AUTO_PRUNE_REASONS).
var AutoPruneReasons = map[string]bool{
	"governor_nan":        true,
	"governor_lobotomy":   true,
	"governor_divergence": true,
	"governor_rollback":   true,
}

// SeedMetrics are the measurements of one seed over its life. Accuracies
// are percentages (0–100). Optional measurements are pointers: nil means
// never measured, which is never the same as zero.
type SeedMetrics struct {
	// EpochsTotal counts epochs since germination (RecordAccuracy calls,
	// plus embargo and reset ticks); EpochsInCurrentStage restarts at 0
	// on every stage transition.
	EpochsTotal          int `json:"epochs_total"`
	EpochsInCurrentStage int `json:"epochs_in_current_stage"`

	InitialValAccuracy float64 `json:"initial_val_accuracy"`
	CurrentValAccuracy float64 `json:"current_val_accuracy"`
	BestValAccuracy    float64 `json:"best_val_accuracy"`
	// AccuracyRecorded is set by the first RecordAccuracy.
	AccuracyRecorded     bool    `json:"accuracy_recorded"`
	AccuracyAtStageStart float64 `json:"accuracy_at_stage_start"`
	// AccuracyAtBlendingStart is snapshotted on entering BLENDING;
	// BlendingStarted tells whether that happened.
	AccuracyAtBlendingStart float64 `json:"accuracy_at_blending_start"`
	BlendingStarted         bool    `json:"blending_started"`

	// GradientNormAvg is an EMA (decay 0.9) of the seed's gradient norm.
	GradientNormAvg float64 `json:"gradient_norm_avg"`
	// SeedGradientNormRatio is the parameter-count-normalised ratio of
	// seed to host gradient norms, capped at 10; nil = never measured.
	SeedGradientNormRatio *float64 `json:"seed_gradient_norm_ratio"`

	CurrentAlpha  float64 `json:"current_alpha"`
	AlphaRampStep int     `json:"alpha_ramp_step"`

	// CounterfactualContribution is val_acc(all on) − val_acc(this seed
	// off) in percentage points; nil until measured.
	CounterfactualContribution *float64 `json:"counterfactual_contribution"`
	ContributionVelocity       float64  `json:"contribution_velocity"`

	HostParamCount int `json:"host_param_count"`
	SeedParamCount int `json:"seed_param_count"`

	AutoPruned      bool   `json:"auto_pruned"`
	AutoPruneReason string `json:"auto_prune_reason"`

	InteractionSum     float64 `json:"interaction_sum"`
	BoostReceived      float64 `json:"boost_received"`
	UpstreamAlphaSum   float64 `json:"upstream_alpha_sum"`
	DownstreamAlphaSum float64 `json:"downstream_alpha_sum"`
}

// RecordAccuracy records one epoch's validation accuracy: the first call
// also sets the initial and stage-start accuracies; best is the maximum
// seen; both epoch counters advance.
func (m *SeedMetrics) RecordAccuracy(acc float64) {
	if !m.AccuracyRecorded {
		m.AccuracyRecorded = true
		m.InitialValAccuracy = acc
		m.AccuracyAtStageStart = acc
		m.BestValAccuracy = acc
	}
	m.CurrentValAccuracy = acc
	m.BestValAccuracy = math.Max(m.BestValAccuracy, acc)
	m.EpochsTotal++
	m.EpochsInCurrentStage++
}

// RecordCounterfactual stores a new counterfactual contribution and
// updates its velocity: 0.7·velocity + 0.3·(new − previous), unchanged
// on the first measurement (G2 vectorised environment).
func (m *SeedMetrics) RecordCounterfactual(c float64) {
	if m.CounterfactualContribution != nil {
		m.ContributionVelocity = 0.7*m.ContributionVelocity + 0.3*(c-*m.CounterfactualContribution)
	}
	m.CounterfactualContribution = &c
}

// TotalImprovement is current − initial accuracy.
func (m *SeedMetrics) TotalImprovement() float64 {
	return m.CurrentValAccuracy - m.InitialValAccuracy
}

// ImprovementSinceStageStart is current − stage-start accuracy.
func (m *SeedMetrics) ImprovementSinceStageStart() float64 {
	return m.CurrentValAccuracy - m.AccuracyAtStageStart
}

// NormalizedTotalImprovement is TotalImprovement clamped to ±10, /10.
func (m *SeedMetrics) NormalizedTotalImprovement() float64 {
	return math.Max(-10, math.Min(10, m.TotalImprovement())) / 10
}

// NormalizedImprovementSinceStageStart is ImprovementSinceStageStart
// clamped to ±10, /10.
func (m *SeedMetrics) NormalizedImprovementSinceStageStart() float64 {
	return math.Max(-10, math.Min(10, m.ImprovementSinceStageStart())) / 10
}

// BlendingDelta is current accuracy − accuracy at the start of blending,
// 0 if blending never started.
func (m *SeedMetrics) BlendingDelta() float64 {
	if !m.BlendingStarted {
		return 0
	}
	return m.CurrentValAccuracy - m.AccuracyAtBlendingStart
}

// seedMetricsAlias has SeedMetrics' fields without its methods.
type seedMetricsAlias SeedMetrics

type seedMetricsJSON struct {
	SchemaVersion *int `json:"schema_version"`
	*seedMetricsAlias
}

// MarshalJSON writes the metrics with their schema version.
func (m SeedMetrics) MarshalJSON() ([]byte, error) {
	v := MetricsSchemaVersion
	a := seedMetricsAlias(m)
	return json.Marshal(seedMetricsJSON{SchemaVersion: &v, seedMetricsAlias: &a})
}

// UnmarshalJSON reads metrics written by MarshalJSON; a missing or
// different schema version is an error.
func (m *SeedMetrics) UnmarshalJSON(b []byte) error {
	var a seedMetricsAlias
	j := seedMetricsJSON{seedMetricsAlias: &a}
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("kasmina: seed metrics: %w", err)
	}
	if err := checkSchema("seed metrics", j.SchemaVersion, MetricsSchemaVersion); err != nil {
		return err
	}
	*m = SeedMetrics(a)
	return nil
}

// checkSchema reports a missing or unexpected schema version.
func checkSchema(what string, got *int, want int) error {
	if got == nil {
		return fmt.Errorf("kasmina: %s: %w: schema_version is missing", what, ErrSchema)
	}
	if *got != want {
		return fmt.Errorf("kasmina: %s: %w: schema_version %d (this build reads %d)", what, ErrSchema, *got, want)
	}
	return nil
}
