package leyline

import (
	"fmt"
	"reflect"
	"slices"
)

// Typed payloads of the telemetry events (esper-reference.md §1.6). The
// seed lifecycle payloads are in payload_seed.go and METRICS in
// payload_metrics.go. Fields tagged esper:"required" must be present
// when an event is decoded; pointer fields are optional measurements
// whose absence stays nil (null), never a made-up 0.

// EpochCompletedPayload is the data of EPOCH_COMPLETED: one environment's
// epoch.
type EpochCompletedPayload struct {
	EnvID       int     `json:"env_id" esper:"required"`
	ValAccuracy float64 `json:"val_accuracy" esper:"required"`
	ValLoss     float64 `json:"val_loss" esper:"required"`
	InnerEpoch  int     `json:"inner_epoch" esper:"required"`
	// Optional; nil means not computed (0 means computed as zero).
	TrainLoss     *float64 `json:"train_loss"`
	TrainAccuracy *float64 `json:"train_accuracy"`
	HostGradNorm  *float64 `json:"host_grad_norm"`
	// Seeds holds per-slot telemetry snapshots: slot id → name → value.
	Seeds map[string]map[string]float64 `json:"seeds"`
}

// Validate implements Payload.
func (p *EpochCompletedPayload) Validate() error { return nil }

// BatchEpochCompletedPayload is the data of BATCH_EPOCH_COMPLETED: a
// batch of episodes finished (the commit barrier of a PPO round).
type BatchEpochCompletedPayload struct {
	EpisodesCompleted int     `json:"episodes_completed" esper:"required"`
	BatchIdx          int     `json:"batch_idx" esper:"required"`
	AvgAccuracy       float64 `json:"avg_accuracy" esper:"required"`
	AvgReward         float64 `json:"avg_reward" esper:"required"`
	TotalEpisodes     int     `json:"total_episodes" esper:"required"`
	NEnvs             int     `json:"n_envs" esper:"required"`
	// Optional.
	StartEpisode      int       `json:"start_episode"`
	RequestedEpisodes int       `json:"requested_episodes"`
	RollingAccuracy   float64   `json:"rolling_accuracy"`
	EnvAccuracies     []float64 `json:"env_accuracies"`
}

// Validate implements Payload.
func (p *BatchEpochCompletedPayload) Validate() error { return nil }

// PhaseProfilePayload is the data of PHASE_PROFILE_COMPLETED: where the
// time of one batch or epoch went, per phase ("train", "validate",
// "counterfactual", "act", ...).
type PhaseProfilePayload struct {
	BatchIdx int `json:"batch_idx" esper:"required"`
	// PhaseMs maps a phase name to its wall time in milliseconds.
	PhaseMs map[string]float64 `json:"phase_ms" esper:"required"`
	TotalMs float64            `json:"total_ms" esper:"required"`
	// Optional.
	EnvID *int `json:"env_id"`
	Epoch *int `json:"epoch"`
}

// Validate implements Payload.
func (p *PhaseProfilePayload) Validate() error {
	if p.PhaseMs == nil {
		return errMissing("PhaseProfile", "phase_ms")
	}
	return nil
}

// TrendDetectedPayload is the data of PLATEAU_DETECTED,
// DEGRADATION_DETECTED and IMPROVEMENT_DETECTED: the rolling accuracy
// crossed a threshold between batches.
type TrendDetectedPayload struct {
	BatchIdx               int     `json:"batch_idx" esper:"required"`
	EpisodesCompleted      int     `json:"episodes_completed" esper:"required"`
	RollingDelta           float64 `json:"rolling_delta" esper:"required"`
	RollingAvgAccuracy     float64 `json:"rolling_avg_accuracy" esper:"required"`
	PrevRollingAvgAccuracy float64 `json:"prev_rolling_avg_accuracy" esper:"required"`
}

// Validate implements Payload.
func (p *TrendDetectedPayload) Validate() error { return nil }

// TamiyoInitiatedPayload is the data of TAMIYO_INITIATED: the host has
// stabilised and germination is now allowed.
type TamiyoInitiatedPayload struct {
	EnvID               int     `json:"env_id" esper:"required"`
	Epoch               int     `json:"epoch" esper:"required"`
	StableCount         int     `json:"stable_count" esper:"required"`
	StabilizationEpochs int     `json:"stabilization_epochs" esper:"required"`
	ValLoss             float64 `json:"val_loss" esper:"required"`
}

// Validate implements Payload.
func (p *TamiyoInitiatedPayload) Validate() error { return nil }

// AnomalyDetectedPayload is the data of every anomaly event:
// GRADIENT_ANOMALY, RATIO_EXPLOSION_DETECTED, RATIO_COLLAPSE_DETECTED,
// VALUE_COLLAPSE_DETECTED, GRADIENT_PATHOLOGY_DETECTED and
// NUMERICAL_INSTABILITY_DETECTED (G2 AnomalyDetectedPayload).
type AnomalyDetectedPayload struct {
	// AnomalyType names the anomaly ("ratio_explosion", ...).
	AnomalyType   string `json:"anomaly_type" esper:"required"`
	Episode       int    `json:"episode" esper:"required"`
	Batch         int    `json:"batch" esper:"required"`
	InnerEpoch    int    `json:"inner_epoch" esper:"required"`
	TotalEpisodes int    `json:"total_episodes" esper:"required"`
	// Optional.
	Detail string `json:"detail"`
	// Stats holds the diagnostic figures (ratio extremes, per-layer
	// gradient norms, ...), by name.
	Stats map[string]float64 `json:"stats"`
}

// Validate implements Payload.
func (p *AnomalyDetectedPayload) Validate() error { return missingRequiredString(p) }

// PerformanceDegradationPayload is the data of PERFORMANCE_DEGRADATION:
// accuracy dropped well below its rolling average.
type PerformanceDegradationPayload struct {
	EnvID            int     `json:"env_id" esper:"required"`
	CurrentAcc       float64 `json:"current_acc" esper:"required"`
	RollingAvgAcc    float64 `json:"rolling_avg_acc" esper:"required"`
	DropPercent      float64 `json:"drop_percent" esper:"required"`
	ThresholdPercent float64 `json:"threshold_percent" esper:"required"`
	// Optional: progress through training in [0, 1].
	TrainingProgress float64 `json:"training_progress"`
}

// Validate implements Payload.
func (p *PerformanceDegradationPayload) Validate() error { return nil }

// PPOUpdatePayload is the data of PPO_UPDATE_COMPLETED: the health of one
// PPO update.
type PPOUpdatePayload struct {
	PolicyLoss   float64 `json:"policy_loss" esper:"required"`
	ValueLoss    float64 `json:"value_loss" esper:"required"`
	Entropy      float64 `json:"entropy" esper:"required"`
	GradNorm     float64 `json:"grad_norm" esper:"required"`
	KLDivergence float64 `json:"kl_divergence" esper:"required"`
	ClipFraction float64 `json:"clip_fraction" esper:"required"`
	NaNGradCount int     `json:"nan_grad_count" esper:"required"`
	// Optional.
	PreClipGradNorm float64 `json:"pre_clip_grad_norm"`
	// ExplainedVariance is nil when undefined (early training).
	ExplainedVariance *float64 `json:"explained_variance"`
	LR                *float64 `json:"lr"`
	EntropyCoef       *float64 `json:"entropy_coef"`
	RatioMean         float64  `json:"ratio_mean"`
	RatioMin          float64  `json:"ratio_min"`
	RatioMax          float64  `json:"ratio_max"`
	RatioStd          float64  `json:"ratio_std"`
	InfGradCount      int      `json:"inf_grad_count"`
	// HeadEntropies and HeadGradNorms are keyed by HeadNames.
	HeadEntropies  map[string]float64 `json:"head_entropies"`
	HeadGradNorms  map[string]float64 `json:"head_grad_norms"`
	UpdateTimeMs   float64            `json:"update_time_ms"`
	EarlyStopEpoch *int               `json:"early_stop_epoch"`
	InnerEpoch     int                `json:"inner_epoch"`
	Batch          int                `json:"batch"`
	PPOUpdates     int                `json:"ppo_updates_count"`
	Skipped        bool               `json:"skipped"`
}

// Validate implements Payload.
func (p *PPOUpdatePayload) Validate() error { return nil }

// MemoryWarningPayload is the data of MEMORY_WARNING: accelerator memory
// use passed the threshold.
type MemoryWarningPayload struct {
	// GPUUtilization is the used fraction in [0, 1].
	GPUUtilization float64 `json:"gpu_utilization" esper:"required"`
	GPUAllocatedGB float64 `json:"gpu_allocated_gb" esper:"required"`
	GPUTotalGB     float64 `json:"gpu_total_gb" esper:"required"`
	Threshold      float64 `json:"threshold" esper:"required"`
}

// Validate implements Payload.
func (p *MemoryWarningPayload) Validate() error { return nil }

// Reward-hacking patterns.
const (
	RewardHackingAttributionRatio = "attribution_ratio"
	RewardHackingRansomware       = "ransomware_signature"
)

// RewardHackingSuspectedPayload is the data of REWARD_HACKING_SUSPECTED: a
// seed claims an implausible share of the improvement
// (attribution_ratio), or a high contribution while the system degrades
// (ransomware_signature).
type RewardHackingSuspectedPayload struct {
	Pattern          string  `json:"pattern" esper:"required"`
	SlotID           string  `json:"slot_id" esper:"required"`
	SeedID           string  `json:"seed_id" esper:"required"`
	SeedContribution float64 `json:"seed_contribution" esper:"required"`
	TotalImprovement float64 `json:"total_improvement" esper:"required"`
	// Optional: attribution_ratio figures.
	Ratio     *float64 `json:"ratio"`
	Threshold *float64 `json:"threshold"`
	// Optional: ransomware_signature figures.
	ContributionThreshold *float64 `json:"contribution_threshold"`
	DegradationThreshold  *float64 `json:"degradation_threshold"`
}

// Validate checks the required strings and the pattern.
func (p *RewardHackingSuspectedPayload) Validate() error {
	if err := missingRequiredString(p); err != nil {
		return err
	}
	if p.Pattern != RewardHackingAttributionRatio && p.Pattern != RewardHackingRansomware {
		return fmt.Errorf("leyline: RewardHackingSuspected payload: unknown pattern %q", p.Pattern)
	}
	return nil
}

// Governor panic reasons (G2 GovernorPanicReason).
const (
	PanicReasonNaN        = "governor_nan"
	PanicReasonLobotomy   = "governor_lobotomy"
	PanicReasonDivergence = "governor_divergence"
	PanicReasonRollback   = "governor_rollback"
)

// GovernorRollbackPayload is the data of GOVERNOR_ROLLBACK: the governor
// restored the last good state.
type GovernorRollbackPayload struct {
	EnvID  int    `json:"env_id" esper:"required"`
	Device string `json:"device" esper:"required"`
	Reason string `json:"reason" esper:"required"`
	// Optional panic context; nil when not known.
	LossAtPanic       *float64 `json:"loss_at_panic"`
	LossThreshold     *float64 `json:"loss_threshold"`
	ConsecutivePanics *int     `json:"consecutive_panics"`
	// PanicReason is one of the PanicReason constants, or "" when absent.
	PanicReason string `json:"panic_reason"`
	// Optional state-dict mismatch context.
	MissingKeys    []string `json:"missing_keys"`
	UnexpectedKeys []string `json:"unexpected_keys"`
}

// Validate checks the required strings and the panic reason.
func (p *GovernorRollbackPayload) Validate() error {
	if err := missingRequiredString(p); err != nil {
		return err
	}
	switch p.PanicReason {
	case "", PanicReasonNaN, PanicReasonLobotomy, PanicReasonDivergence, PanicReasonRollback:
		return nil
	}
	return fmt.Errorf("leyline: GovernorRollback payload: unknown panic_reason %q", p.PanicReason)
}

// MorphologyCausalLogPayload is the data of MORPHOLOGY_CAUSAL_LOG: one
// structural action and its outcome, for causal analysis of how the
// network's shape changed.
type MorphologyCausalLogPayload struct {
	EnvID int `json:"env_id" esper:"required"`
	Epoch int `json:"epoch" esper:"required"`
	// Op is a LifecycleOp name ("GERMINATE").
	Op      string `json:"op" esper:"required"`
	Success bool   `json:"success" esper:"required"`
	// Optional.
	SlotID         string   `json:"slot_id"`
	BlueprintID    string   `json:"blueprint_id"`
	Reason         string   `json:"reason"`
	AccuracyBefore *float64 `json:"accuracy_before"`
	AccuracyAfter  *float64 `json:"accuracy_after"`
}

// Validate checks that Op names an operation.
func (p *MorphologyCausalLogPayload) Validate() error {
	if p.Op == "" {
		return errMissing("MorphologyCausalLog", "op")
	}
	_, err := ParseLifecycleOp(p.Op)
	return err
}

// TopologyManifestPayload is the data of TOPOLOGY_MANIFEST_RECORDED: the
// host's shape and slots at the start of a run.
type TopologyManifestPayload struct {
	Topology   string   `json:"topology" esper:"required"`
	HostParams int      `json:"host_params" esper:"required"`
	SlotIDs    []string `json:"slot_ids" esper:"required"`
	// Optional.
	SlotChannels map[string]int `json:"slot_channels"`
	Blueprints   []string       `json:"blueprints"`
}

// Validate checks the required fields.
func (p *TopologyManifestPayload) Validate() error {
	if err := missingRequiredString(p); err != nil {
		return err
	}
	if p.SlotIDs == nil {
		return errMissing("TopologyManifest", "slot_ids")
	}
	return nil
}

// TrainingStartedPayload is the data of TRAINING_STARTED, emitted once
// per run.
type TrainingStartedPayload struct {
	NEnvs        int      `json:"n_envs" esper:"required"`
	MaxEpochs    int      `json:"max_epochs" esper:"required"`
	MaxBatches   int      `json:"max_batches" esper:"required"`
	Task         string   `json:"task" esper:"required"`
	HostParams   int      `json:"host_params" esper:"required"`
	SlotIDs      []string `json:"slot_ids" esper:"required"`
	Seed         int64    `json:"seed" esper:"required"`
	NEpisodes    int      `json:"n_episodes" esper:"required"`
	LR           float64  `json:"lr" esper:"required"`
	ClipRatio    float64  `json:"clip_ratio" esper:"required"`
	EntropyCoef  float64  `json:"entropy_coef" esper:"required"`
	ParamBudget  int      `json:"param_budget" esper:"required"`
	PolicyDevice string   `json:"policy_device" esper:"required"`
	EnvDevices   []string `json:"env_devices" esper:"required"`
	RewardMode   string   `json:"reward_mode" esper:"required"`
	// Optional.
	EpisodeID      string `json:"episode_id"`
	ResumePath     string `json:"resume_path"`
	StartEpisode   int    `json:"start_episode"`
	WorldSize      int    `json:"world_size"` // default 1
	Rank           int    `json:"rank"`
	LocalRank      int    `json:"local_rank"`
	AMPEnabled     bool   `json:"amp_enabled"`
	AMPDtype       string `json:"amp_dtype"`
	CaptureEnabled bool   `json:"compile_enabled"`
	CaptureMode    string `json:"compile_mode"`
}

func (p *TrainingStartedPayload) applyDefaults() { p.WorldSize = 1 }

// Validate checks the required fields.
func (p *TrainingStartedPayload) Validate() error {
	if err := missingRequiredString(p); err != nil {
		return err
	}
	if p.SlotIDs == nil {
		return errMissing("TrainingStarted", "slot_ids")
	}
	if p.EnvDevices == nil {
		return errMissing("TrainingStarted", "env_devices")
	}
	return nil
}

// CheckpointLoadedPayload is the data of CHECKPOINT_LOADED.
type CheckpointLoadedPayload struct {
	Path         string `json:"path" esper:"required"`
	StartEpisode int    `json:"start_episode" esper:"required"`
	// Optional.
	Source      string   `json:"source"`
	AvgAccuracy *float64 `json:"avg_accuracy"`
}

// Validate checks the required fields.
func (p *CheckpointLoadedPayload) Validate() error { return missingRequiredString(p) }

// CounterfactualConfig is one row of a counterfactual matrix: which
// slots were on, and the result.
type CounterfactualConfig struct {
	// Enabled[i] says whether slot SlotIDs[i] was on.
	Enabled     []bool   `json:"enabled" esper:"required"`
	ValAccuracy float64  `json:"val_accuracy" esper:"required"`
	ValLoss     *float64 `json:"val_loss"`
}

// CounterfactualMatrixPayload is the data of
// COUNTERFACTUAL_MATRIX_COMPUTED.
type CounterfactualMatrixPayload struct {
	EnvID   int                    `json:"env_id" esper:"required"`
	SlotIDs []string               `json:"slot_ids" esper:"required"`
	Configs []CounterfactualConfig `json:"configs" esper:"required"`
	// Optional.
	Strategy      string  `json:"strategy"` // default "unavailable"
	ComputeTimeMs float64 `json:"compute_time_ms"`
}

func (p *CounterfactualMatrixPayload) applyDefaults() { p.Strategy = "unavailable" }

// Validate checks that every config has one flag per slot.
func (p *CounterfactualMatrixPayload) Validate() error {
	if p.SlotIDs == nil {
		return errMissing("CounterfactualMatrix", "slot_ids")
	}
	if p.Configs == nil {
		return errMissing("CounterfactualMatrix", "configs")
	}
	for i, c := range p.Configs {
		if len(c.Enabled) != len(p.SlotIDs) {
			return fmt.Errorf("leyline: CounterfactualMatrix payload: configs[%d] has %d flags for %d slots", i, len(c.Enabled), len(p.SlotIDs))
		}
	}
	return nil
}

// AnalyticsSnapshotPayload is the data of ANALYTICS_SNAPSHOT: a dashboard
// snapshot of some kind ("action_distribution", "throughput",
// "reward_summary", "mask_hit_rates", "shapley_computed", ...).
type AnalyticsSnapshotPayload struct {
	Kind string `json:"kind" esper:"required"`
	// Optional, by kind.
	EnvID  *int               `json:"env_id"`
	Values map[string]float64 `json:"values"`
	Counts map[string]int     `json:"counts"`
	Labels map[string]string  `json:"labels"`
}

// Validate checks the kind.
func (p *AnalyticsSnapshotPayload) Validate() error { return missingRequiredString(p) }

// EpisodeOutcomePayload is the data of EPISODE_OUTCOME: the
// multi-objective result of one episode.
type EpisodeOutcomePayload struct {
	EnvID                     int     `json:"env_id" esper:"required"`
	EpisodeIdx                int     `json:"episode_idx" esper:"required"`
	FinalAccuracy             float64 `json:"final_accuracy" esper:"required"`
	ParamRatio                float64 `json:"param_ratio" esper:"required"`
	NumFossilized             int     `json:"num_fossilized" esper:"required"`
	NumContributingFossilized int     `json:"num_contributing_fossilized" esper:"required"`
	EpisodeReward             float64 `json:"episode_reward" esper:"required"`
	StabilityScore            float64 `json:"stability_score" esper:"required"`
	RewardMode                string  `json:"reward_mode" esper:"required"`
	// Optional.
	EpisodeLength  int    `json:"episode_length"`
	OutcomeType    string `json:"outcome_type"` // default "unknown"
	GerminateCount int    `json:"germinate_count"`
	PruneCount     int    `json:"prune_count"`
	FossilizeCount int    `json:"fossilize_count"`
}

func (p *EpisodeOutcomePayload) applyDefaults() { p.OutcomeType = "unknown" }

// Validate checks the required strings.
func (p *EpisodeOutcomePayload) Validate() error { return missingRequiredString(p) }

// AllocatorStatsPayload is the data of ALLOCATOR_STATS: a device memory
// allocator's figures.
type AllocatorStatsPayload struct {
	Device         string `json:"device" esper:"required"`
	AllocatedBytes int64  `json:"allocated_bytes" esper:"required"`
	ReservedBytes  int64  `json:"reserved_bytes" esper:"required"`
	// Optional; nil when the allocator does not report it.
	PeakAllocatedBytes *int64   `json:"peak_allocated_bytes"`
	Fragmentation      *float64 `json:"fragmentation"`
	PoolHits           *int64   `json:"pool_hits"`
	PoolMisses         *int64   `json:"pool_misses"`
}

// Validate checks the device.
func (p *AllocatorStatsPayload) Validate() error { return missingRequiredString(p) }

// Defaults of the seed payloads' optional fields (G2).
func (p *SeedGerminatedPayload) applyDefaults() { p.BlendTempoEpochs, p.AlphaCurve = 5, "LINEAR" }
func (p *SeedFossilizedPayload) applyDefaults() { p.Alpha = 1.0 }
func (p *SeedPrunedPayload) applyDefaults()     { p.Initiator = "policy" }

// eventPayloads maps every event type to its payload type (a struct
// type; events carry a pointer to it).
var eventPayloads = map[EventType]reflect.Type{
	EventSeedGerminated:               reflect.TypeFor[SeedGerminatedPayload](),
	EventSeedStageChanged:             reflect.TypeFor[SeedStageChangedPayload](),
	EventSeedGateEvaluated:            reflect.TypeFor[SeedGateEvaluatedPayload](),
	EventSeedFossilized:               reflect.TypeFor[SeedFossilizedPayload](),
	EventSeedPruned:                   reflect.TypeFor[SeedPrunedPayload](),
	EventEpochCompleted:               reflect.TypeFor[EpochCompletedPayload](),
	EventBatchEpochCompleted:          reflect.TypeFor[BatchEpochCompletedPayload](),
	EventPhaseProfileCompleted:        reflect.TypeFor[PhaseProfilePayload](),
	EventPlateauDetected:              reflect.TypeFor[TrendDetectedPayload](),
	EventDegradationDetected:          reflect.TypeFor[TrendDetectedPayload](),
	EventImprovementDetected:          reflect.TypeFor[TrendDetectedPayload](),
	EventTamiyoInitiated:              reflect.TypeFor[TamiyoInitiatedPayload](),
	EventGradientAnomaly:              reflect.TypeFor[AnomalyDetectedPayload](),
	EventPerformanceDegradation:       reflect.TypeFor[PerformanceDegradationPayload](),
	EventPPOUpdateCompleted:           reflect.TypeFor[PPOUpdatePayload](),
	EventMemoryWarning:                reflect.TypeFor[MemoryWarningPayload](),
	EventRewardHackingSuspected:       reflect.TypeFor[RewardHackingSuspectedPayload](),
	EventRatioExplosionDetected:       reflect.TypeFor[AnomalyDetectedPayload](),
	EventRatioCollapseDetected:        reflect.TypeFor[AnomalyDetectedPayload](),
	EventValueCollapseDetected:        reflect.TypeFor[AnomalyDetectedPayload](),
	EventGradientPathologyDetected:    reflect.TypeFor[AnomalyDetectedPayload](),
	EventNumericalInstabilityDetected: reflect.TypeFor[AnomalyDetectedPayload](),
	EventGovernorRollback:             reflect.TypeFor[GovernorRollbackPayload](),
	EventMorphologyCausalLog:          reflect.TypeFor[MorphologyCausalLogPayload](),
	EventTopologyManifestRecorded:     reflect.TypeFor[TopologyManifestPayload](),
	EventTrainingStarted:              reflect.TypeFor[TrainingStartedPayload](),
	EventCheckpointLoaded:             reflect.TypeFor[CheckpointLoadedPayload](),
	EventCounterfactualMatrixComputed: reflect.TypeFor[CounterfactualMatrixPayload](),
	EventAnalyticsSnapshot:            reflect.TypeFor[AnalyticsSnapshotPayload](),
	EventEpisodeOutcome:               reflect.TypeFor[EpisodeOutcomePayload](),
	EventAllocatorStats:               reflect.TypeFor[AllocatorStatsPayload](),
	EventMetrics:                      reflect.TypeFor[MetricsPayload](),
}

// NewPayload returns a new, empty payload of the type event type t
// carries (a pointer, such as *SeedPrunedPayload), with the type's
// defaults applied. EventUnknown and undefined types are an error.
func NewPayload(t EventType) (Payload, error) {
	typ, ok := eventPayloads[t]
	if !ok {
		return nil, fmt.Errorf("leyline: event type %v has no payload type", t)
	}
	p := reflect.New(typ).Interface().(Payload)
	if d, ok := p.(payloadDefaulter); ok {
		d.applyDefaults()
	}
	return p, nil
}

// PayloadMatches reports whether p is the payload type event type t
// carries (a nil p matches every type: an event may carry no data).
func PayloadMatches(t EventType, p Payload) bool {
	if p == nil {
		return true
	}
	typ, ok := eventPayloads[t]
	return ok && reflect.TypeOf(p) == reflect.PointerTo(typ)
}

// EventTypesFor returns the event types that carry payload p's type, in
// EventType order.
func EventTypesFor(p Payload) []EventType {
	var out []EventType
	for t, typ := range eventPayloads {
		if reflect.TypeOf(p) == reflect.PointerTo(typ) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}
