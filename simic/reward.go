package simic

import (
	"errors"
	"fmt"
	"math"

	"github.com/esper-go/esper/leyline"
)

// RewardMode selects the reward function of esper-reference.md §5.6.
type RewardMode int

// Reward modes. The zero value is the default, SHAPED.
const (
	// RewardShaped is the dense contribution-primary reward: counterfactual
	// attribution, anti-gaming penalties, warnings, PBRS, rent, alpha shock,
	// capacity costs, action shaping and a terminal accuracy bonus.
	RewardShaped RewardMode = iota
	// RewardSimplified is PBRS, a small cost per non-WAIT action and a
	// terminal bonus for accuracy and contributing fossils (diagnostic; it
	// charges no parameter rent).
	RewardSimplified
	// RewardSparse pays nothing before the last epoch and then the
	// committed accuracy minus a parameter cost, clamped to [−1, 1].
	RewardSparse
	// RewardAccuracy pays what an evaluation measures: the validation
	// accuracy at the end of the run (averaged over its last
	// AccuracyWindow epochs, AccuracyScale per point) less ParamCost per
	// thousand parameters the seeds added by then, with potential-based
	// stage shaping over every slot (StagePotentialWeight) whose
	// potentials fall to zero at the last epoch, so that it credits
	// progress early without changing which run pays most. Not a G2
	// mode: see esper ppo's notes (bench/baselines/ppo) for why.
	RewardAccuracy
)

var rewardModeNames = [...]string{"SHAPED", "SIMPLIFIED", "SPARSE", "ACCURACY"}

// String returns the mode's upper-case name ("SHAPED").
func (m RewardMode) String() string {
	if m < 0 || int(m) >= len(rewardModeNames) {
		return fmt.Sprintf("RewardMode(%d)", int(m))
	}
	return rewardModeNames[m]
}

// ParseRewardMode returns the mode with the given name, in any case
// ("shaped", "SPARSE").
func ParseRewardMode(name string) (RewardMode, error) {
	for i, n := range rewardModeNames {
		if equalFoldASCII(n, name) {
			return RewardMode(i), nil
		}
	}
	return 0, fmt.Errorf("simic: unknown reward mode %q (%v)", name, rewardModeNames)
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// Reward defaults that callers may override through RewardOptions
// (esper-reference.md §5.1 and §5.6, ContributionRewardConfig).
const (
	// DefaultRentHostParamsFloor is the smallest host size rent divides by,
	// so a tiny host is not crushed by any seed.
	DefaultRentHostParamsFloor = 200 // G2 rent_host_params_floor
	// DefaultParamBudget is SPARSE's parameter budget.
	DefaultParamBudget = 500_000 // G2 param_budget
	// DefaultParamPenaltyWeight is SPARSE's parameter cost weight.
	DefaultParamPenaltyWeight = 0.1 // G2 param_penalty_weight
	// DefaultSparseRewardScale scales SPARSE's terminal reward.
	DefaultSparseRewardScale = 1.0 // G2 sparse_reward_scale
	// BaseSlotRentRatio is the share of the host's parameters each occupied
	// (BLENDING, HOLDING or FOSSILIZED) slot pays as rent on top of its
	// alpha-weighted seed parameters; see EffectiveSeedParams.
	BaseSlotRentRatio = 0.0039 // G2 base_slot_rent_ratio
	// AutoPrunePenalty is the reward added once for every seed the slot
	// pruned by itself (safety or timeout) since the last step.
	AutoPrunePenalty = -0.2 // G2 auto_prune_penalty
	// DefaultAccuracyScale is ACCURACY's reward per point of accuracy: a
	// run that ends 10 points higher earns 1 more.
	DefaultAccuracyScale = 0.1
	// DefaultAccuracyWindow is ACCURACY's averaging window (epochs).
	DefaultAccuracyWindow = 5
	// DefaultParamCost is ACCURACY's cost per thousand added parameters:
	// half a point of accuracy per thousand parameters (the heuristic
	// gains about 8 points per thousand on the demo task).
	DefaultParamCost = 0.05
	// DefaultStagePotentialWeight scales ACCURACY's stage potentials
	// (StagePotential), as G2's PBRS weight scales SHAPED's: a seed
	// blended into the host is worth 1.05, a fossil 1.8, until the last
	// epoch takes them back.
	DefaultStagePotentialWeight = 0.3
)

// Fixed SHAPED, SIMPLIFIED and SPARSE constants (esper-reference.md §5.6,
// G2 ContributionRewardConfig defaults unless noted).
const (
	proxyConfidence    = 0.3    // G2 proxy_confidence_factor
	epochProgressBonus = 0.3    // G2 epoch_progress_bonus
	maxProgressBonus   = 2.0    // G2 max_progress_bonus
	maxRent            = 1.5    // G2 max_rent
	alphaShockCoef     = 0.1958 // G2 alpha_shock_coef
	alphaShockCap      = 1.0    // G2 alpha_shock_cap

	invalidFossilizePenalty  = -1.0 // G2 invalid_fossilize_penalty
	pruneFossilizedPenalty   = -1.0 // G2 prune_fossilized_penalty
	germinateWithSeedPenalty = -0.3 // G2 germinate_with_seed_penalty

	germinateCost      = -0.15  // G2 germinate_cost
	fossilizeCost      = -0.01  // G2 fossilize_cost
	pruneCost          = -0.005 // G2 prune_cost
	setAlphaTargetCost = -0.005 // G2 set_alpha_target_cost

	fossilizeBaseBonus              = 0.5  // G2 fossilize_base_bonus
	fossilizeContributionScale      = 0.1  // G2 fossilize_contribution_scale
	fossilizeNoncontributingPenalty = -0.2 // G2 fossilize_noncontributing_penalty
	fossilizeQualityCeiling         = 3.0  // G2 fossilize_quality_ceiling
	fossilizeNegativeBase           = -0.5 // G2 _contribution_fossilize_shaping base penalty
	fossilizeDamagePerPoint         = 0.2  // G2 damage scale per point of negative total improvement
	fossilizeDamageCap              = 1.0
	ransomwarePenalty               = -0.3 // G2 ransomware signature penalty
	ransomwareContribution          = 0.1  // G2 ransomware: contribution above this …
	ransomwareDegradation           = -0.2 // … while total improvement is below this

	pruneNoSeedPenalty     = -0.2  // G2 _contribution_prune_shaping without a seed
	pruneYoungPerEpoch     = -0.3  // G2 per epoch below MIN_PRUNE_AGE
	pruneUnmeasuredPenalty = -0.1  // G2 early_prune_penalty
	pruneHurtingBonus      = 0.15  // G2 prune_hurting_bonus
	pruneAcceptableBonus   = 0.1   // G2 prune_acceptable_bonus
	pruneGoodSeedPenalty   = -0.3  // G2 prune_good_seed_penalty
	pruneGoodSeedPerPoint  = -0.05 // G2 scaled prune penalty per contribution point
	pruneGoodSeedMax       = -0.9  // G2 3 × prune_good_seed_penalty
	pruneHurtingThreshold  = -0.5  // G2 prune_hurting_threshold
	pruneYoungHurting      = -0.1  // G2 young hurting seed (farming guard)
	minPruneBonusAge       = 3     // G2 min_prune_bonus_age

	advanceFromTrainingPenalty = -0.1 // G2 advance_from_training_penalty

	improvementSafeThreshold    = 0.1 // G2 improvement_safe_threshold
	hackingRatioThreshold       = 5.0 // G2 hacking_ratio_threshold
	attributionSigmoidSteepness = 3.0 // G2 attribution_sigmoid_steepness
	ratioPenaltyCap             = 0.3 // G2 −prune_good_seed_penalty caps the ratio penalty
	ratioPenaltySlope           = 0.1

	blendingWarningBase = -0.1 // G2 blending warning
	blendingWarningRamp = 0.05
	blendingWarningCap  = 0.3
	holdingWarningBase  = 0.1 // G2 holding indecision penalty
	holdingWarningRamp  = 0.05
	holdingWarningCap   = 0.3
	holdingWarningFrom  = 2 // epochs in HOLDING before the warning starts

	synergyWeight = 0.1 // G2 _compute_synergy_bonus
	synergyScale  = 0.5

	seedOccupancyCost         = 0.01  // G2 seed_occupancy_cost
	freeSlots                 = 1     // G2 free_slots
	fossilizedMaintenanceCost = 0.002 // G2 fossilized_maintenance_cost

	germinationWarmupEpochs  = 10  // G2 germination_warmup_epochs
	germinationDiscountFloor = 0.4 // G2 germination_discount_floor

	terminalAccWeight = 0.05 // G2 terminal_acc_weight

	simplifiedActionCost    = -0.01 // G2 compute_simplified_reward
	simplifiedAccWeight     = 3.0
	simplifiedFossilBonus   = 2.0
	harmonicDenominatorSafe = 1e-8
)

// stagePotentials are the PBRS potentials of esper-reference.md §5.6 step 5
// (G2 STAGE_POTENTIALS); every other stage (DORMANT, UNKNOWN and the
// failure stages) has potential 0.
var stagePotentials = map[leyline.SeedStage]float64{
	leyline.StageGerminated: 1.0,
	leyline.StageTraining:   2.0,
	leyline.StageBlending:   3.5,
	leyline.StageHolding:    5.5,
	leyline.StageFossilized: 6.0,
}

// StagePotential returns the PBRS potential of a stage (esper-reference.md
// §5.6: DORMANT 0, GERMINATED 1, TRAINING 2, BLENDING 3.5, HOLDING 5.5,
// FOSSILIZED 6, failure stages 0).
func StagePotential(s leyline.SeedStage) float64 { return stagePotentials[s] }

// seedPotential is φ(stage, epochs in stage): the stage potential plus the
// capped epoch-progress bonus.
func seedPotential(s leyline.SeedStage, epochsInStage int) float64 {
	return StagePotential(s) + math.Min(epochProgressBonus*float64(epochsInStage), maxProgressBonus)
}

// ErrRewardInput is wrapped by every error about inconsistent or invalid
// reward inputs.
var ErrRewardInput = errors.New("invalid reward input")

// RewardSeed describes the seed in the slot the action addressed, as the
// environment saw it before executing the action.
type RewardSeed struct {
	// Stage is the seed's current stage.
	Stage leyline.SeedStage
	// EpochsInStage is how many epochs the seed has spent in Stage.
	EpochsInStage int
	// PreviousStage and PreviousEpochsInStage describe the stage the seed
	// left; PBRS uses them when EpochsInStage is 0.
	PreviousStage         leyline.SeedStage
	PreviousEpochsInStage int
	// PreviousIsLastStep says that PreviousStage and
	// PreviousEpochsInStage are the seed's stage and epochs in it at the
	// previous step instead: PBRS is then γ·φ(Stage, EpochsInStage) −
	// φ(PreviousStage, PreviousEpochsInStage), whatever EpochsInStage
	// (an environment that observes a seed only at its decisions sees it
	// one epoch into its new stage, never at 0).
	PreviousIsLastStep bool
	// SeedAgeEpochs is the seed's age; Epoch − SeedAgeEpochs is its
	// germination epoch.
	SeedAgeEpochs int
	// ImprovementSinceStageStart is the accuracy gain (percentage points)
	// since the seed entered Stage; it feeds the proxy attribution when no
	// counterfactual has been measured yet.
	ImprovementSinceStageStart float64
	// Contribution is the seed's counterfactual contribution, val_acc(main)
	// − val_acc(seed off), in percentage points; valid when
	// ContributionMeasured.
	Contribution         float64
	ContributionMeasured bool
	// TotalImprovement is the counterfactual total improvement,
	// val_acc(main) − val_acc(all seeds off); valid when
	// TotalImprovementMeasured, which a measured Contribution requires.
	TotalImprovement         float64
	TotalImprovementMeasured bool
	// InteractionSum is the sum of the seed's pairwise interaction terms.
	InteractionSum float64
}

// RewardInputs is what an environment step gives the reward function
// (esper-reference.md §5.6 "Inputs per env step").
type RewardInputs struct {
	// Op is the lifecycle operation the policy took.
	Op leyline.LifecycleOp
	// Seed is the seed in the addressed slot before the action, or nil when
	// that slot was empty.
	Seed *RewardSeed
	// ValAcc is the validation accuracy with all seeds as they are, in
	// percent (0–100).
	ValAcc float64
	// AccAtGermination is ValAcc when the seed germinated; valid when
	// AccAtGerminationKnown. Progress = ValAcc − AccAtGermination.
	AccAtGermination      float64
	AccAtGerminationKnown bool
	// Epoch is the epoch just trained (1-based); the step with Epoch ==
	// MaxEpochs is terminal.
	Epoch, MaxEpochs int
	// HostParams is the host's parameter count.
	HostParams int
	// EffectiveSeedParams is the rent base; see EffectiveSeedParams.
	EffectiveSeedParams float64
	// AlphaDeltaSqSum is Σ_slots Δα²·seed_params/host_params over this
	// step; see AlphaDeltaSqSum.
	AlphaDeltaSqSum float64
	// NumActiveSeeds and NumFossilizedSeeds count the occupied slots:
	// live seeds and fossils.
	NumActiveSeeds, NumFossilizedSeeds int
	// NumContributingFossilized counts fossils whose contribution is at
	// least leyline.MinFossilizeContribution (SIMPLIFIED's terminal bonus).
	NumContributingFossilized int
	// CommittedValAcc is the validation accuracy with only fossilized seeds
	// on, in percent (SPARSE's terminal reward).
	CommittedValAcc float64
	// FossilizedSeedParams is the parameter count of all fossils (SPARSE).
	FossilizedSeedParams int
	// PendingAutoPrunes counts seeds the slots pruned by themselves since
	// the last step; each adds AutoPrunePenalty in every mode.
	PendingAutoPrunes int
	// Transitions are every slot's stage before the action and after the
	// epoch's tick (an empty slot is the zero stage, UNKNOWN, of potential
	// 0): ACCURACY's stage shaping.
	Transitions []StageTransition
	// AddedParams are the parameters of the seeds in the model after the
	// step (every seed not on the failure path, fossils included): what
	// an evaluation counts as added (ACCURACY's parameter cost).
	AddedParams int
}

// StageTransition is one slot's stage before and after a step.
type StageTransition struct {
	Before, After leyline.SeedStage
}

// RewardTerms are the separately reported terms of one reward; Total is
// exactly their Sum. Terms a mode does not use are zero.
type RewardTerms struct {
	// Attribution is the bounded counterfactual attribution (negated for
	// PRUNE; the proxy path when nothing is measured yet).
	Attribution float64
	// RatioPenalty is the anti-gaming penalty for a contribution far above
	// the total improvement (≤ 0).
	RatioPenalty float64
	// BlendingWarning penalises a BLENDING seed with negative total
	// improvement (≤ 0).
	BlendingWarning float64
	// HoldingWarning penalises indecision in HOLDING (≤ 0).
	HoldingWarning float64
	// PBRS is the potential-based stage-progression shaping.
	PBRS float64
	// Synergy rewards positive interactions with other seeds (≥ 0).
	Synergy float64
	// Rent is the logarithmic parameter rent (≤ 0); ACCURACY's cost of
	// the parameters added by the end of the run.
	Rent float64
	// AlphaShock penalises fast alpha changes (≤ 0).
	AlphaShock float64
	// Occupancy charges occupied slots above the free one (≤ 0).
	Occupancy float64
	// FossilMaintenance charges every fossil (≤ 0).
	FossilMaintenance float64
	// ActionShaping holds the operation-specific shaping: enforcement
	// penalties and the FOSSILIZE, PRUNE and ADVANCE rules.
	ActionShaping float64
	// ActionPBRS is the PBRS of the action itself: the germination bonus or
	// the potential a PRUNE forfeits.
	ActionPBRS float64
	// InterventionCost is the fixed friction of the operation (≤ 0);
	// SIMPLIFIED's per-action cost.
	InterventionCost float64
	// FossilizeBonus is the immediate bonus for a legitimate FOSSILIZE
	// (SHAPED), or SIMPLIFIED's terminal bonus for contributing fossils.
	FossilizeBonus float64
	// Terminal is the accuracy bonus of the last epoch (ACCURACY: of each
	// of the last AccuracyWindow epochs).
	Terminal float64
	// AutoPrune is AutoPrunePenalty per pending automatic prune.
	AutoPrune float64
}

// Sum adds the terms in declaration order.
func (t RewardTerms) Sum() float64 {
	return t.Attribution + t.RatioPenalty + t.BlendingWarning + t.HoldingWarning +
		t.PBRS + t.Synergy + t.Rent + t.AlphaShock + t.Occupancy + t.FossilMaintenance +
		t.ActionShaping + t.ActionPBRS + t.InterventionCost + t.FossilizeBonus +
		t.Terminal + t.AutoPrune
}

// Reward is one step's reward with its terms and diagnostics.
type Reward struct {
	// Total is the reward: Terms.Sum().
	Total float64
	// Terms are the separately reported components.
	Terms RewardTerms
	// Progress is ValAcc − AccAtGermination (valid when ProgressKnown).
	Progress      float64
	ProgressKnown bool
	// AttributionDiscount is σ(3·total improvement) for a regressing seed,
	// else 1.
	AttributionDiscount float64
	// TimingDiscount is the early-germination discount applied to the
	// attribution (1 when none applied).
	TimingDiscount float64
	// GrowthRatio is EffectiveSeedParams / max(HostParams, floor).
	GrowthRatio float64
	// HackingSuspected reports a contribution more than 5× the positive
	// total improvement (REWARD_HACKING_SUSPECTED, pattern attribution
	// ratio).
	HackingSuspected bool
	// RansomwareSignature reports a contribution above 0.1 while the total
	// improvement is below −0.2: the seed made itself needed without
	// helping.
	RansomwareSignature bool
}

// RewardOptions configure NewRewarder; the zero value selects SHAPED with
// the reference defaults.
type RewardOptions struct {
	// Mode is the reward function; the zero value is RewardShaped.
	Mode RewardMode
	// Gamma is the PBRS discount in (0, 1]; 0 means leyline.DefaultGamma.
	// It must equal the PPO discount for PBRS to leave the optimal policy
	// unchanged.
	Gamma float64
	// ContributionWeight scales the attribution (> 0); 0 means
	// leyline.ContributionWeight (1.0).
	ContributionWeight float64
	// PBRSWeight scales all potential-based shaping (> 0); 0 means
	// leyline.PBRSWeight (0.3). Use DisablePBRS to switch it off.
	PBRSWeight float64
	// RentWeight scales the logarithmic rent (> 0); 0 means
	// leyline.RentWeight (0.5).
	RentWeight float64
	// RentHostParamsFloor is the smallest host size rent divides by (≥ 1);
	// 0 means DefaultRentHostParamsFloor.
	RentHostParamsFloor int
	// ParamBudget is SPARSE's parameter budget (> 0); 0 means
	// DefaultParamBudget.
	ParamBudget int
	// ParamPenaltyWeight is SPARSE's parameter cost weight (> 0); 0 means
	// DefaultParamPenaltyWeight.
	ParamPenaltyWeight float64
	// SparseScale scales SPARSE's terminal reward (> 0); 0 means
	// DefaultSparseRewardScale.
	SparseScale float64
	// AccuracyScale is ACCURACY's reward per point of validation accuracy
	// (> 0); 0 means DefaultAccuracyScale.
	AccuracyScale float64
	// AccuracyWindow is how many of the last epochs ACCURACY averages the
	// validation accuracy over (≥ 1; one noisy final epoch is a poor
	// estimate of where the run ended); 0 means DefaultAccuracyWindow.
	AccuracyWindow int
	// ParamCost is ACCURACY's cost per thousand parameters the seeds
	// added by the end of the run (≥ 0); 0 means DefaultParamCost and a
	// negative value no cost.
	ParamCost float64
	// StagePotentialWeight scales ACCURACY's stage shaping (≥ 0); 0 means
	// DefaultStagePotentialWeight and a negative value none.
	StagePotentialWeight float64
	// DisablePBRS, DisableTerminalReward, DisableAntiGaming (ratio penalty
	// and alpha shock) and DisableTimingDiscount are the G2 ablation flags.
	DisablePBRS           bool
	DisableTerminalReward bool
	DisableAntiGaming     bool
	DisableTimingDiscount bool
}

// Rewarder computes rewards for one configuration. It holds no state, so
// one Rewarder serves all environments.
type Rewarder struct {
	o RewardOptions
}

// NewRewarder validates the options and fills in their defaults.
func NewRewarder(o RewardOptions) (*Rewarder, error) {
	if o.Gamma == 0 {
		o.Gamma = leyline.DefaultGamma
	}
	if o.ContributionWeight == 0 {
		o.ContributionWeight = leyline.ContributionWeight
	}
	if o.PBRSWeight == 0 {
		o.PBRSWeight = leyline.PBRSWeight
	}
	if o.RentWeight == 0 {
		o.RentWeight = leyline.RentWeight
	}
	if o.RentHostParamsFloor == 0 {
		o.RentHostParamsFloor = DefaultRentHostParamsFloor
	}
	if o.ParamBudget == 0 {
		o.ParamBudget = DefaultParamBudget
	}
	if o.ParamPenaltyWeight == 0 {
		o.ParamPenaltyWeight = DefaultParamPenaltyWeight
	}
	if o.SparseScale == 0 {
		o.SparseScale = DefaultSparseRewardScale
	}
	if o.AccuracyScale == 0 {
		o.AccuracyScale = DefaultAccuracyScale
	}
	if o.AccuracyWindow == 0 {
		o.AccuracyWindow = DefaultAccuracyWindow
	}
	if o.ParamCost == 0 {
		o.ParamCost = DefaultParamCost
	}
	if o.StagePotentialWeight == 0 {
		o.StagePotentialWeight = DefaultStagePotentialWeight
	}
	switch {
	case o.Mode < 0 || int(o.Mode) >= len(rewardModeNames):
		return nil, fmt.Errorf("simic: unknown reward mode %d", int(o.Mode))
	case !(o.Gamma > 0 && o.Gamma <= 1):
		return nil, fmt.Errorf("simic: reward Gamma %v must lie in (0, 1]", o.Gamma)
	case !positiveFinite(o.ContributionWeight), !positiveFinite(o.PBRSWeight), !positiveFinite(o.RentWeight),
		!positiveFinite(o.ParamPenaltyWeight), !positiveFinite(o.SparseScale):
		return nil, fmt.Errorf("simic: reward weights must be positive and finite (contribution %v, pbrs %v, rent %v, param penalty %v, sparse scale %v)",
			o.ContributionWeight, o.PBRSWeight, o.RentWeight, o.ParamPenaltyWeight, o.SparseScale)
	case o.RentHostParamsFloor < 1:
		return nil, fmt.Errorf("simic: RentHostParamsFloor %d must be ≥ 1", o.RentHostParamsFloor)
	case o.ParamBudget < 1:
		return nil, fmt.Errorf("simic: ParamBudget %d must be positive", o.ParamBudget)
	case !positiveFinite(o.AccuracyScale):
		return nil, fmt.Errorf("simic: AccuracyScale %v must be positive and finite", o.AccuracyScale)
	case o.AccuracyWindow < 1:
		return nil, fmt.Errorf("simic: AccuracyWindow %d must be ≥ 1", o.AccuracyWindow)
	case math.IsNaN(o.ParamCost) || math.IsInf(o.ParamCost, 0) || math.IsNaN(o.StagePotentialWeight) || math.IsInf(o.StagePotentialWeight, 0):
		return nil, fmt.Errorf("simic: ParamCost %v and StagePotentialWeight %v must be finite", o.ParamCost, o.StagePotentialWeight)
	}
	return &Rewarder{o: o}, nil
}

func positiveFinite(v float64) bool { return v > 0 && !math.IsInf(v, 0) }

// Options returns the options with defaults filled in.
func (r *Rewarder) Options() RewardOptions { return r.o }

// Compute returns the reward of one environment step in the configured
// mode. It fails, without computing anything, when the inputs are
// inconsistent (see ErrRewardInput).
func (r *Rewarder) Compute(in RewardInputs) (Reward, error) {
	if err := in.validate(); err != nil {
		return Reward{}, err
	}
	var out Reward
	switch r.o.Mode {
	case RewardSimplified:
		r.simplified(&in, &out)
	case RewardSparse:
		r.sparse(&in, &out)
	case RewardAccuracy:
		r.accuracy(&in, &out)
	default:
		r.shaped(&in, &out)
	}
	out.Terms.AutoPrune = AutoPrunePenalty * float64(in.PendingAutoPrunes)
	out.Total = out.Terms.Sum()
	return out, nil
}

func (in *RewardInputs) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("simic: %w: "+format, append([]any{ErrRewardInput}, a...)...)
	}
	switch {
	case !in.Op.Valid():
		return bad("unknown lifecycle op %d", int(in.Op))
	case in.MaxEpochs < 1:
		return bad("MaxEpochs %d must be positive", in.MaxEpochs)
	case in.Epoch < 0 || in.Epoch > in.MaxEpochs:
		return bad("Epoch %d outside 0..MaxEpochs (%d)", in.Epoch, in.MaxEpochs)
	case in.HostParams < 0 || in.NumActiveSeeds < 0 || in.NumFossilizedSeeds < 0 ||
		in.NumContributingFossilized < 0 || in.FossilizedSeedParams < 0 || in.PendingAutoPrunes < 0 || in.AddedParams < 0:
		return bad("counts must be non-negative")
	case !finite(in.ValAcc) || !finite(in.AccAtGermination) || !finite(in.CommittedValAcc):
		return bad("accuracies must be finite")
	case !(in.EffectiveSeedParams >= 0) || math.IsInf(in.EffectiveSeedParams, 0):
		return bad("EffectiveSeedParams %v must be finite and non-negative", in.EffectiveSeedParams)
	case !(in.AlphaDeltaSqSum >= 0) || math.IsInf(in.AlphaDeltaSqSum, 0):
		return bad("AlphaDeltaSqSum %v must be finite and non-negative", in.AlphaDeltaSqSum)
	}
	for _, tr := range in.Transitions {
		if !tr.Before.Valid() || !tr.After.Valid() {
			return bad("transition %v → %v has an invalid stage", tr.Before, tr.After)
		}
	}
	if s := in.Seed; s != nil {
		switch {
		case !s.Stage.Valid():
			return bad("seed stage %v is not valid", s.Stage)
		case !s.PreviousStage.Valid():
			return bad("previous seed stage %v is not valid", s.PreviousStage)
		case s.EpochsInStage < 0 || s.PreviousEpochsInStage < 0 || s.SeedAgeEpochs < 0:
			return bad("seed epoch counts must be non-negative")
		case s.ContributionMeasured && !s.TotalImprovementMeasured:
			return bad("a measured contribution needs the counterfactual total improvement")
		case !finite(s.Contribution) || !finite(s.TotalImprovement) ||
			!finite(s.ImprovementSinceStageStart) || !finite(s.InteractionSum):
			return bad("seed measurements must be finite")
		}
	}
	return nil
}

// pbrs is the stage-progression shaping w·(γ·φ(s') − φ(s)) for a seed that
// stays in its slot.
func (r *Rewarder) pbrs(s *RewardSeed) float64 {
	cur := seedPotential(s.Stage, s.EpochsInStage)
	var prev float64
	if s.PreviousIsLastStep || s.EpochsInStage == 0 {
		prev = seedPotential(s.PreviousStage, s.PreviousEpochsInStage)
	} else {
		prev = seedPotential(s.Stage, s.EpochsInStage-1)
	}
	return r.o.PBRSWeight * (r.o.Gamma*cur - prev)
}

// TimingDiscount is the early-germination discount of
// esper-reference.md §5.6 step 2: 0.4 for a seed germinated at epoch 0,
// rising linearly to 1 at epoch 10 and staying there.
func TimingDiscount(germinationEpoch int) float64 {
	if germinationEpoch >= germinationWarmupEpochs {
		return 1
	}
	if germinationEpoch < 0 {
		germinationEpoch = 0
	}
	return germinationDiscountFloor + (1-germinationDiscountFloor)*float64(germinationEpoch)/germinationWarmupEpochs
}

// HarmonicAttribution is 2pc/(p+c), the harmonic mean of progress and
// contribution that SHAPED credits when the contribution exceeds the
// progress; 0 unless both are positive. It never exceeds 2·min(p, c).
func HarmonicAttribution(progress, contribution float64) float64 {
	if progress <= 0 || contribution <= 0 {
		return 0
	}
	return 2 * progress * contribution / math.Max(progress+contribution, harmonicDenominatorSafe)
}

func (r *Rewarder) shaped(in *RewardInputs, out *Reward) {
	o := &r.o
	t := &out.Terms
	s := in.Seed
	fossilized := s != nil && s.Stage == leyline.StageFossilized
	measured := s != nil && s.ContributionMeasured
	cfKnown := s != nil && s.TotalImprovementMeasured
	var c, cf float64
	if s != nil {
		c, cf = s.Contribution, s.TotalImprovement
	}

	// 1. Attribution discount, ratio penalty and hacking diagnostics.
	out.AttributionDiscount, out.TimingDiscount = 1, 1
	ratioPenalty := 0.0
	if measured {
		if cf < 0 {
			out.AttributionDiscount = 1 / (1 + math.Exp(math.Min(-attributionSigmoidSteepness*cf, 700)))
		}
		if c > 1 && out.AttributionDiscount >= 0.5 && !o.DisableAntiGaming {
			if cf > improvementSafeThreshold {
				if ratio := c / cf; ratio > hackingRatioThreshold {
					ratioPenalty = -math.Min(ratioPenaltyCap, ratioPenaltySlope*(ratio-hackingRatioThreshold)/hackingRatioThreshold)
				}
			} else {
				ratioPenalty = -ratioPenaltyCap * math.Min(1, c/10)
			}
		}
		out.HackingSuspected = cf > 0 && c > 0 && c/cf > hackingRatioThreshold
		out.RansomwareSignature = c > ransomwareContribution && cf < ransomwareDegradation
	}
	if in.AccAtGerminationKnown {
		out.Progress, out.ProgressKnown = in.ValAcc-in.AccAtGermination, true
	}

	// 2. Bounded attribution.
	attribution := 0.0
	if s != nil && !fossilized {
		switch {
		case measured && c < 0:
			attribution = o.ContributionWeight * c
		case measured:
			var attributed float64
			switch {
			case !out.ProgressKnown:
				attributed = 0.5 * c
			case out.Progress <= 0:
				attributed = 0
			case c >= out.Progress:
				attributed = HarmonicAttribution(out.Progress, c)
			default:
				attributed = c
			}
			attribution = o.ContributionWeight * attributed * out.AttributionDiscount
			if !o.DisableTimingDiscount {
				out.TimingDiscount = TimingDiscount(in.Epoch - s.SeedAgeEpochs)
				attribution *= out.TimingDiscount
			}
		case (s.Stage == leyline.StageBlending || s.Stage == leyline.StageHolding) && s.ImprovementSinceStageStart > 0:
			// Proxy path: no counterfactual yet, so trust the stage's own
			// improvement at a discount.
			attribution = o.ContributionWeight * proxyConfidence * s.ImprovementSinceStageStart
		}
	}
	if in.Op == leyline.OpFossilize && cfKnown && cf < 0 {
		attribution = 0
	}
	if in.Op == leyline.OpPrune {
		attribution = -attribution
	}
	t.Attribution = attribution
	if !fossilized {
		// Added after the PRUNE negation, so it always penalises.
		t.RatioPenalty = ratioPenalty
	}
	bounded := t.Attribution + t.RatioPenalty

	// 3. Blending warning.
	if s != nil && s.Stage == leyline.StageBlending && cfKnown && cf < 0 {
		t.BlendingWarning = blendingWarningBase - math.Min(blendingWarningRamp*float64(s.EpochsInStage), blendingWarningCap)
	}
	// 4. Holding warning.
	if s != nil && s.Stage == leyline.StageHolding && in.Op != leyline.OpFossilize && in.Op != leyline.OpPrune &&
		s.EpochsInStage >= holdingWarningFrom && bounded > 0 {
		t.HoldingWarning = -math.Min(holdingWarningBase+holdingWarningRamp*float64(s.EpochsInStage-holdingWarningFrom), holdingWarningCap)
	}
	// 5. PBRS.
	if s != nil && !o.DisablePBRS {
		t.PBRS = r.pbrs(s)
	}
	// 6. Synergy (not for a seed whose attribution is heavily discounted).
	if s != nil && out.AttributionDiscount >= 0.5 && bounded > 0 && s.InteractionSum > 0 {
		t.Synergy = synergyWeight * math.Tanh(synergyScale*s.InteractionSum)
	}
	// 7. Rent.
	if in.HostParams > 0 && in.EffectiveSeedParams > 0 {
		out.GrowthRatio = in.EffectiveSeedParams / float64(max(in.HostParams, o.RentHostParamsFloor))
		t.Rent = -math.Min(o.RentWeight*math.Log1p(out.GrowthRatio), maxRent)
	}
	// 8. Alpha shock.
	if in.AlphaDeltaSqSum > 0 && !o.DisableAntiGaming {
		t.AlphaShock = math.Max(-alphaShockCoef*in.AlphaDeltaSqSum, -alphaShockCap)
	}
	// 9. Capacity: fossils still occupy slots.
	if excess := in.NumActiveSeeds + in.NumFossilizedSeeds - freeSlots; excess > 0 {
		t.Occupancy = -seedOccupancyCost * float64(excess)
	}
	t.FossilMaintenance = -fossilizedMaintenanceCost * float64(in.NumFossilizedSeeds)

	// 10. Action shaping.
	switch in.Op {
	case leyline.OpGerminate:
		if s != nil {
			t.ActionShaping = germinateWithSeedPenalty
		} else if !o.DisablePBRS && in.Epoch < in.MaxEpochs {
			bonus := o.Gamma * StagePotential(leyline.StageGerminated)
			if !o.DisableTimingDiscount {
				bonus *= TimingDiscount(in.Epoch)
			}
			t.ActionPBRS = o.PBRSWeight * bonus
		}
		t.InterventionCost = germinateCost
	case leyline.OpFossilize:
		t.ActionShaping = fossilizeShaping(s, out.RansomwareSignature)
		t.InterventionCost = fossilizeCost
		if s != nil && s.Stage == leyline.StageHolding && cfKnown && cf >= 0 && measured &&
			c >= leyline.MinFossilizeContribution && !o.DisableTerminalReward {
			t.FossilizeBonus = leyline.FossilizeTerminalScale * math.Tanh(1/fossilizeQualityCeiling) * legitimacy(s)
		}
	case leyline.OpPrune:
		if s != nil && !o.DisablePBRS {
			// The slot returns to "no seed" (potential 0): forfeit φ(s).
			t.ActionPBRS = o.PBRSWeight * (o.Gamma*0 - seedPotential(s.Stage, s.EpochsInStage))
		}
		t.ActionShaping = pruneShaping(s)
		t.InterventionCost = pruneCost
	case leyline.OpAdvance:
		if s != nil && s.Stage == leyline.StageTraining {
			t.ActionShaping = advanceFromTrainingPenalty
		}
	case leyline.OpSetAlphaTarget:
		t.InterventionCost = setAlphaTargetCost
	}

	// 11. Terminal accuracy bonus.
	if in.Epoch == in.MaxEpochs && !o.DisableTerminalReward {
		t.Terminal = terminalAccWeight * in.ValAcc
	}
}

// legitimacy is the share of the minimum HOLDING period a seed has served.
func legitimacy(s *RewardSeed) float64 {
	return math.Min(1, float64(s.EpochsInStage)/leyline.MinHoldingEpochs)
}

func fossilizeShaping(s *RewardSeed, ransomware bool) float64 {
	if s == nil || s.Stage != leyline.StageHolding {
		return invalidFossilizePenalty
	}
	if s.TotalImprovementMeasured && s.TotalImprovement < 0 {
		p := fossilizeNegativeBase - math.Min(fossilizeDamagePerPoint*math.Abs(s.TotalImprovement), fossilizeDamageCap)
		if ransomware {
			p += ransomwarePenalty
		}
		return p
	}
	if s.ContributionMeasured && s.Contribution >= leyline.MinFossilizeContribution {
		return (fossilizeBaseBonus + fossilizeContributionScale*s.Contribution) * legitimacy(s)
	}
	return fossilizeNoncontributingPenalty
}

func pruneShaping(s *RewardSeed) float64 {
	switch {
	case s == nil:
		return pruneNoSeedPenalty
	case s.Stage == leyline.StageFossilized:
		return pruneFossilizedPenalty
	case s.SeedAgeEpochs < leyline.MinPruneAge:
		return pruneYoungPerEpoch * float64(leyline.MinPruneAge-s.SeedAgeEpochs)
	case !s.ContributionMeasured:
		// G2 also charges early_prune_penalty here for an unmeasured seed
		// younger than its early-prune threshold (5); the MinPruneAge case
		// above already covers every such seed.
		return 0
	case s.Contribution < pruneHurtingThreshold:
		if s.SeedAgeEpochs < minPruneBonusAge {
			// Farming guard; unreachable while MinPruneAge ≥ 3.
			return pruneYoungHurting
		}
		return pruneHurtingBonus
	case s.Contribution < 0:
		return pruneAcceptableBonus
	default:
		return math.Max(pruneGoodSeedPenalty+pruneGoodSeedPerPoint*s.Contribution, pruneGoodSeedMax)
	}
}

func (r *Rewarder) simplified(in *RewardInputs, out *Reward) {
	t := &out.Terms
	out.AttributionDiscount, out.TimingDiscount = 1, 1
	if in.Seed != nil && !r.o.DisablePBRS {
		t.PBRS = r.pbrs(in.Seed)
	}
	if in.Op != leyline.OpWait {
		t.InterventionCost = simplifiedActionCost
	}
	if in.Epoch == in.MaxEpochs && !r.o.DisableTerminalReward {
		t.Terminal = simplifiedAccWeight * in.ValAcc / 100
		t.FossilizeBonus = simplifiedFossilBonus * float64(in.NumContributingFossilized)
	}
}

func (r *Rewarder) sparse(in *RewardInputs, out *Reward) {
	out.AttributionDiscount, out.TimingDiscount = 1, 1
	if in.Epoch != in.MaxEpochs {
		return
	}
	base := in.CommittedValAcc/100 - r.o.ParamPenaltyWeight*float64(in.FossilizedSeedParams)/float64(r.o.ParamBudget)
	out.Terms.Terminal = r.o.SparseScale * math.Max(-1, math.Min(1, base))
}

// accuracy is RewardAccuracy: the stage shaping Σ_slots w·(γ·φ(after) −
// φ(before)) with φ(after) = 0 at the last epoch (so the shaping of a
// whole episode sums to −φ at its start, zero for a run that starts
// without seeds, whatever the policy did), AccuracyScale·ValAcc/window
// in each of the last window epochs, and at the last epoch the
// parameter cost ParamCost·AddedParams/1000.
func (r *Rewarder) accuracy(in *RewardInputs, out *Reward) {
	o := &r.o
	t := &out.Terms
	out.AttributionDiscount, out.TimingDiscount = 1, 1
	last := in.Epoch == in.MaxEpochs
	if w := o.StagePotentialWeight; w > 0 && !o.DisablePBRS {
		for _, tr := range in.Transitions {
			after := StagePotential(tr.After)
			if last {
				after = 0
			}
			t.PBRS += w * (o.Gamma*after - StagePotential(tr.Before))
		}
	}
	window := min(o.AccuracyWindow, in.MaxEpochs)
	if in.Epoch > in.MaxEpochs-window && !o.DisableTerminalReward {
		t.Terminal = o.AccuracyScale * in.ValAcc / float64(window)
	}
	if last && o.ParamCost > 0 && in.AddedParams > 0 {
		t.Rent = -o.ParamCost * float64(in.AddedParams) / 1000
	}
}

// SlotParams describes one slot for EffectiveSeedParams and
// AlphaDeltaSqSum.
type SlotParams struct {
	// Stage is the slot's seed stage (DORMANT for an empty slot).
	Stage leyline.SeedStage
	// Alpha is the blend weight after this step; PrevAlpha before it.
	Alpha, PrevAlpha float64
	// SeedParams is the seed's parameter count, gate included.
	SeedParams int
}

// EffectiveSeedParams is the rent base of esper-reference.md §5.6 step 7:
// Σ over slots in BLENDING, HOLDING or FOSSILIZED of
// BaseSlotRentRatio·hostParams + alpha·seedParams.
func EffectiveSeedParams(hostParams int, slots []SlotParams) float64 {
	sum := 0.0
	for _, s := range slots {
		switch s.Stage {
		case leyline.StageBlending, leyline.StageHolding, leyline.StageFossilized:
			sum += BaseSlotRentRatio*float64(hostParams) + s.Alpha*float64(s.SeedParams)
		}
	}
	return sum
}

// AlphaDeltaSqSum is the alpha-shock base of esper-reference.md §5.6 step
// 8: Σ_slots (Alpha − PrevAlpha)²·seedParams/hostParams; 0 for a host
// without parameters.
func AlphaDeltaSqSum(hostParams int, slots []SlotParams) float64 {
	if hostParams <= 0 {
		return 0
	}
	sum := 0.0
	for _, s := range slots {
		d := s.Alpha - s.PrevAlpha
		sum += d * d * float64(s.SeedParams) / float64(hostParams)
	}
	return sum
}
