package leyline

// Constants of the second-generation Esper (esper-reference.md §1.7),
// ported verbatim. Each cites the Python name it comes from.

// Lifecycle and gates.
const (
	// MinPruneAge is the youngest seed age (epochs) a policy may prune.
	MinPruneAge = 5 // G2 MIN_PRUNE_AGE
	// FullEvaluationAge is the age (epochs) at which a seed's evaluation
	// counts in full.
	FullEvaluationAge = 10 // G2 FULL_EVALUATION_AGE
	// MinHoldingEpochs is the shortest HOLDING period before fossilization.
	MinHoldingEpochs = 5 // G2 MIN_HOLDING_EPOCHS
	// MinFossilizeContribution is the counterfactual contribution (accuracy
	// percentage points) G5 needs to fossilize.
	MinFossilizeContribution = 1.0 // G2 DEFAULT_MIN_FOSSILIZE_CONTRIBUTION
	// GradientRatioThreshold is the seed/host gradient ratio strict G2 needs.
	GradientRatioThreshold = 0.10 // G2 DEFAULT_GRADIENT_RATIO_THRESHOLD
	// MinProbationStability is the stability score probation needs.
	MinProbationStability = 0.95 // G2 DEFAULT_MIN_PROBATION_STABILITY
	// GradientEMADecay is the decay of the gradient-ratio EMA.
	GradientEMADecay = 0.9 // G2 DEFAULT_GRADIENT_EMA_DECAY
	// MinTrainingImprovement is the accuracy gain (points) strict G2 needs.
	MinTrainingImprovement = 0.5 // G2 DEFAULT_MIN_TRAINING_IMPROVEMENT
	// MinBlendingEpochs is the number of epochs G2 and strict G3 need.
	MinBlendingEpochs = 10 // G2 DEFAULT_MIN_BLENDING_EPOCHS
	// MinGradientHealthForBlending is the gradient health permissive G2
	// needs.
	MinGradientHealthForBlending = 0.7 // G2 §1.7 gates: min gradient health for blending
	// AlphaCompleteThreshold is the alpha at which a blend counts as done.
	AlphaCompleteThreshold = 0.95 // G2 DEFAULT_ALPHA_COMPLETE_THRESHOLD
	// MaxProbationEpochs bounds the probation period.
	MaxProbationEpochs = 5 // G2 DEFAULT_MAX_PROBATION_EPOCHS
	// BlendingTotalSteps is the default blend length.
	BlendingTotalSteps = 5 // G2 DEFAULT_BLENDING_TOTAL_STEPS
	// StabilizationThreshold is the relative loss improvement below which an
	// epoch counts as stable.
	StabilizationThreshold = 0.03 // G2 DEFAULT_STABILIZATION_THRESHOLD
	// StabilizationEpochs is the number of consecutive stable epochs that
	// latch host_stabilized.
	StabilizationEpochs = 3 // G2 DEFAULT_STABILIZATION_EPOCHS
)

// Episodes and environments.
const (
	// EpisodeSuccessThreshold is the final accuracy (%) of a successful
	// episode.
	EpisodeSuccessThreshold = 80.0 // G2 EPISODE_SUCCESS_THRESHOLD
	// DefaultGamma is the discount; it must equal the PBRS gamma.
	DefaultGamma = 0.995 // G2 DEFAULT_GAMMA
	// DefaultEpisodeLength is the number of epochs per episode.
	DefaultEpisodeLength = 150 // G2 DEFAULT_EPISODE_LENGTH
	// DefaultNEnvs is the number of parallel environments.
	DefaultNEnvs = 4 // G2 DEFAULT_N_ENVS
	// DefaultNumSlots is the number of slots of DefaultSlotConfig.
	DefaultNumSlots = 3 // G2 DEFAULT_NUM_SLOTS
	// DefaultBatchSize is the training batch size.
	DefaultBatchSize = 128 // G2 DEFAULT_BATCH_SIZE_TRAINING
	// DefaultDropout is the task models' dropout.
	DefaultDropout = 0.1 // G2 DEFAULT_DROPOUT
	// DefaultHostLR is the host's SGD learning rate when none is given,
	// the one default of tolaria.TrainerOptions.HostLR and
	// simic.EsperEnvOptions.HostLR (esper train's tasks choose their own,
	// 0.05, from its task table).
	DefaultHostLR = 0.01 // G2 DEFAULT_HOST_LR
	// DefaultSeedLR is each seed's SGD learning rate when none is given
	// (tolaria.TrainerOptions.SeedLR).
	DefaultSeedLR = 0.01 // G2 DEFAULT_SEED_LR
)

// Policy network and PPO.
const (
	// DefaultLSTMHiddenDim is the policy LSTM's hidden size.
	DefaultLSTMHiddenDim = 512 // G2 DEFAULT_LSTM_HIDDEN_DIM
	// DefaultFeatureDim is the policy feature network's width.
	DefaultFeatureDim = 512 // G2 DEFAULT_FEATURE_DIM
	// DefaultLearningRate is the PPO learning rate.
	DefaultLearningRate = 3e-4 // G2 DEFAULT_LEARNING_RATE
	// DefaultClipRatio is the PPO clip ε.
	DefaultClipRatio = 0.2 // G2 DEFAULT_CLIP_RATIO
	// DefaultGAELambda is the GAE λ.
	DefaultGAELambda = 0.98 // G2 DEFAULT_GAE_LAMBDA
	// AdvantageStdFloor keeps advantage normalisation from blowing up.
	AdvantageStdFloor = 0.1 // G2 ADVANTAGE_STD_FLOOR
	// DefaultValueCoef is the value-loss weight (TrainingConfig overrides it
	// to 0.5).
	DefaultValueCoef = 1.0 // G2 DEFAULT_VALUE_COEF
	// DefaultMaxGradNorm is the PPO gradient clip.
	DefaultMaxGradNorm = 5.0 // G2 DEFAULT_MAX_GRAD_NORM (HEAD value)
	// DefaultHostMaxGradNorm is the host and per-seed gradient clip.
	DefaultHostMaxGradNorm = 1.0 // G2 §1.7 host/seed max grad norm
	// DefaultEntropyCoef is the entropy bonus weight.
	DefaultEntropyCoef = 0.05 // G2 DEFAULT_ENTROPY_COEF
	// DefaultEntropyCoefMin is the floor of the annealed entropy weight.
	DefaultEntropyCoefMin = 0.01 // G2 DEFAULT_ENTROPY_COEF_MIN
	// DefaultValueClip is the value clip range.
	DefaultValueClip = 10.0 // G2 DEFAULT_VALUE_CLIP
	// LogProbMin is the floor applied to log-probabilities.
	LogProbMin = -100.0 // G2 LOG_PROB_MIN
	// RatioExplosionThreshold flags a PPO ratio above it.
	RatioExplosionThreshold = 5.0 // G2 DEFAULT_RATIO_EXPLOSION_THRESHOLD
	// RatioCollapseThreshold flags a PPO ratio below it.
	RatioCollapseThreshold = 0.1 // G2 DEFAULT_RATIO_COLLAPSE_THRESHOLD
)

// EntropyFloorPerHead is the per-head entropy floor (G2 §1.7 entropy floors per head), in HeadNames order:
// op .30, slot .15, blueprint .20, style .15, tempo .20, alpha_* .10.
var EntropyFloorPerHead = [NumActionHeads]float64{
	HeadSlot: 0.15, HeadBlueprint: 0.20, HeadStyle: 0.15, HeadTempo: 0.20,
	HeadAlphaTarget: 0.10, HeadAlphaSpeed: 0.10, HeadAlphaCurve: 0.10, HeadOp: 0.30,
}

// EntropyFloorPenaltyCoef is the weight of each head's entropy-floor
// penalty (G2 §1.7 entropy-floor penalty coefs), in HeadNames order.
var EntropyFloorPenaltyCoef = [NumActionHeads]float64{
	HeadSlot: 0.1, HeadBlueprint: 0.3, HeadStyle: 0.1, HeadTempo: 0.3,
	HeadAlphaTarget: 0.1, HeadAlphaSpeed: 0.1, HeadAlphaCurve: 0.1, HeadOp: 0.3,
}

// EntropyCollapseThresholdPerHead is the normalised entropy below which a
// head counts as collapsed (G2 §1.7 collapse thresholds), in HeadNames
// order.
var EntropyCollapseThresholdPerHead = [NumActionHeads]float64{
	HeadSlot: 0.10, HeadBlueprint: 0.05, HeadStyle: 0.08, HeadTempo: 0.05,
	HeadAlphaTarget: 0.08, HeadAlphaSpeed: 0.08, HeadAlphaCurve: 0.08, HeadOp: 0.08,
}

// Rewards.
const (
	// ContributionWeight scales the counterfactual contribution reward.
	ContributionWeight = 1.0 // G2 DEFAULT_CONTRIBUTION_WEIGHT
	// PBRSWeight scales potential-based shaping.
	PBRSWeight = 0.3 // G2 DEFAULT_PBRS_WEIGHT
	// RentWeight scales the parameter rent.
	RentWeight = 0.5 // G2 DEFAULT_RENT_WEIGHT
	// FossilizeTerminalScale scales the fossilization bonus.
	FossilizeTerminalScale = 3.0 // G2 DEFAULT_FOSSILIZE_TERMINAL_SCALE
)

// Governor (Tolaria).
const (
	// GovernorSensitivity is the σ multiple a loss spike must exceed.
	GovernorSensitivity = 6.0 // G2 DEFAULT_GOVERNOR_SENSITIVITY
	// GovernorAbsoluteThreshold is the loss a spike must exceed.
	GovernorAbsoluteThreshold = 12.0 // G2 DEFAULT_GOVERNOR_ABSOLUTE_THRESHOLD
	// GovernorDeathPenalty is the magnitude of the rollback penalty (the
	// reward is its negative, −10).
	GovernorDeathPenalty = 10.0 // G2 DEFAULT_GOVERNOR_DEATH_PENALTY
	// GovernorHistoryWindow is the number of losses the governor remembers.
	GovernorHistoryWindow = 20 // G2 DEFAULT_GOVERNOR_HISTORY_WINDOW
	// GovernorMinSamples is the history length before the governor judges.
	GovernorMinSamples = 10 // G2 §1.7 governor: min samples
	// GovernorMinConsecutivePanics is the number of anomalies in a row that
	// trigger a rollback.
	GovernorMinConsecutivePanics = 3 // G2 DEFAULT_MIN_PANICS_BEFORE_ROLLBACK
	// GovernorLossMultiplier is the multiple of the average a spike must
	// exceed.
	GovernorLossMultiplier = 3.0 // G2 DEFAULT_GOVERNOR_LOSS_MULTIPLIER
	// RollbackForfeitReward is the reward left on the forfeited prefix.
	RollbackForfeitReward = 0.0 // G2 ROLLBACK_FORFEIT_REWARD
)

// Heuristic controller (Tamiyo).
const (
	// HeuristicPlateauEpochs is the plateau length that triggers germination.
	HeuristicPlateauEpochs = 3 // G2 DEFAULT_PLATEAU_EPOCHS_TO_GERMINATE
	// HeuristicMinEpochsBeforeGerminate is the earliest germination epoch.
	HeuristicMinEpochsBeforeGerminate = 5 // G2 DEFAULT_MIN_EPOCHS_BEFORE_GERMINATE
	// HeuristicPruneAfterEpochs is the no-improvement period before a prune.
	HeuristicPruneAfterEpochs = 5 // G2 DEFAULT_PRUNE_AFTER_EPOCHS_WITHOUT_IMPROVEMENT
	// HeuristicPruneAccuracyDrop is the accuracy drop (points) that prunes.
	HeuristicPruneAccuracyDrop = 2.0 // G2 DEFAULT_PRUNE_IF_ACCURACY_DROPS_BY
	// EmbargoEpochsAfterPrune is the wait after a prune before germinating.
	EmbargoEpochsAfterPrune = 5 // G2 DEFAULT_EMBARGO_EPOCHS_AFTER_PRUNE
	// HeuristicMinImprovementToFossilize is the contribution that fossilizes.
	HeuristicMinImprovementToFossilize = 0.5 // G2 DEFAULT_MIN_IMPROVEMENT_TO_FOSSILIZE
	// BlueprintPenaltyOnPrune is added to a blueprint's penalty per prune.
	BlueprintPenaltyOnPrune = 2.0 // G2 DEFAULT_BLUEPRINT_PENALTY_ON_PRUNE
	// BlueprintPenaltyDecay multiplies every penalty once per epoch.
	BlueprintPenaltyDecay = 0.5 // G2 DEFAULT_BLUEPRINT_PENALTY_DECAY
	// BlueprintPenaltyThreshold is the penalty at which a blueprint is
	// skipped.
	BlueprintPenaltyThreshold = 3.0 // G2 DEFAULT_BLUEPRINT_PENALTY_THRESHOLD
)

// SupportedDevices are the device types a run may name (G2
// SUPPORTED_DEVICES).
var SupportedDevices = [3]string{"cpu", "cuda", "mps"}
