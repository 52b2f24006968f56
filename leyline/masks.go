package leyline

import (
	"errors"
	"fmt"
)

// MaskSlotState is what the action masks need to know about an occupied
// slot (G2 MaskSeedInfo).
type MaskSlotState struct {
	Stage SeedStage
	// SeedAgeEpochs is the seed's total age (metrics.epochs_total).
	SeedAgeEpochs int
	AlphaMode     AlphaMode
}

// MaskInput is everything ComputeActionMasks reads for one environment.
type MaskInput struct {
	// Slots is the slot head's configuration (its order is the head's).
	Slots SlotConfig
	// EnabledSlots are the slots the policy may target; each must be in
	// Slots, and there must be at least one.
	EnabledSlots []string
	// SlotStates has an entry for every enabled slot: nil for an empty
	// slot, else the seed's state. A missing entry is an error, so a
	// forgotten slot is never mistaken for an empty one.
	SlotStates map[string]*MaskSlotState
	// TotalSeeds is the number of seeds alive in the environment;
	// MaxSeeds caps it (0 = unlimited).
	TotalSeeds, MaxSeeds int
	// Topology selects the blueprint set ("cnn", "mlp", "transformer"),
	// matched exactly.
	Topology string
	// AllowGovernorOverride lets PRUNE through while alpha is moving.
	AllowGovernorOverride bool
	// DisableAdvance masks ADVANCE everywhere.
	DisableAdvance bool
}

// ActionMasks holds the valid options of every head for one environment.
// true means the option may be chosen.
type ActionMasks struct {
	// Heads is indexed by head (HeadSlot … HeadOp); each row has the
	// head's size (the slot row has Slots.Len() entries).
	Heads [NumActionHeads][]bool
	// SlotByOp[op] lists, per slot, whether op is valid there. The op
	// mask is the OR over slots of these rows (optimistic masking); a
	// policy that picked op draws its slot from SlotByOp[op]. WAIT's row is
	// the slot mask. The row of an invalid op is all false.
	SlotByOp [NumOps][]bool
}

// Slot returns the slot head's mask.
func (m ActionMasks) Slot() []bool { return m.Heads[HeadSlot] }

// Op returns the op head's mask.
func (m ActionMasks) Op() []bool { return m.Heads[HeadOp] }

// OpValid reports whether op is valid in at least one enabled slot.
func (m ActionMasks) OpValid(op LifecycleOp) bool {
	return op.Valid() && m.Heads[HeadOp][op]
}

// ValidOps returns the op mask as a fixed array, for AvailabilityMask.
func (m ActionMasks) ValidOps() [NumOps]bool {
	var out [NumOps]bool
	copy(out[:], m.Heads[HeadOp])
	return out
}

// ErrMaskInput is wrapped by every error ComputeActionMasks returns for
// bad input.
var ErrMaskInput = errors.New("invalid action-mask input")

// germinationBlockers are the stages that stop any germination while an
// enabled slot is in them ("sequential development": a seed still
// developing, or a slot being recycled). BLENDING and HOLDING do not
// block.
func blocksGermination(s SeedStage) bool {
	switch s {
	case StageGerminated, StageTraining, StagePruned, StageEmbargoed, StageResetting:
		return true
	}
	return false
}

// advanceable are the stages in which ADVANCE is an explicit policy
// decision.
func advanceable(s SeedStage) bool {
	return s == StageGerminated || s == StageTraining || s == StageBlending
}

// ComputeActionMasks returns which options of every head are valid
// (esper-reference.md §1.3 "Action-mask rules"). It masks only what is
// physically impossible; timing is left to the policy.
func ComputeActionMasks(in MaskInput) (ActionMasks, error) {
	var m ActionMasks
	n := in.Slots.Len()
	if n == 0 {
		return m, fmt.Errorf("%w: empty slot configuration", ErrMaskInput)
	}
	bps, err := TopologyBlueprints(in.Topology)
	if err != nil {
		return m, fmt.Errorf("%w: %w", ErrMaskInput, err)
	}
	if len(in.EnabledSlots) == 0 {
		return m, fmt.Errorf("%w: no enabled slots", ErrMaskInput)
	}
	if in.MaxSeeds < 0 || in.TotalSeeds < 0 {
		return m, fmt.Errorf("%w: negative seed count (total %d, max %d)", ErrMaskInput, in.TotalSeeds, in.MaxSeeds)
	}

	slotMask := make([]bool, n)
	states := make([]*MaskSlotState, n)
	for _, id := range in.EnabledSlots {
		i, err := in.Slots.Index(id)
		if err != nil {
			return m, fmt.Errorf("%w: enabled slot %q is not in the slot configuration %v", ErrMaskInput, id, in.Slots.IDs())
		}
		st, ok := in.SlotStates[id]
		if !ok {
			return m, fmt.Errorf("%w: no slot state entry for enabled slot %q (use a nil entry for an empty slot)", ErrMaskInput, id)
		}
		if st != nil {
			if _, err := ValidateStage(int(st.Stage), "ComputeActionMasks: slot "+id); err != nil {
				return m, fmt.Errorf("%w: %w", ErrMaskInput, err)
			}
			if !st.AlphaMode.Valid() {
				return m, fmt.Errorf("%w: slot %q: invalid alpha mode %d", ErrMaskInput, id, int(st.AlphaMode))
			}
		}
		slotMask[i] = true
		states[i] = st
	}

	for op := range m.SlotByOp {
		m.SlotByOp[op] = make([]bool, n)
	}
	copy(m.SlotByOp[OpWait], slotMask)

	hasEmpty, blocked := false, false
	for i, st := range states {
		if !slotMask[i] {
			continue
		}
		if st == nil {
			hasEmpty = true
			continue
		}
		if blocksGermination(st.Stage) {
			blocked = true
		}
		if advanceable(st.Stage) && !in.DisableAdvance {
			m.SlotByOp[OpAdvance][i] = true
		}
		if IsValidTransition(st.Stage, StageFossilized) {
			m.SlotByOp[OpFossilize][i] = true
		}
		if IsValidTransition(st.Stage, StagePruned) && st.SeedAgeEpochs >= MinPruneAge &&
			(st.AlphaMode == AlphaHold || in.AllowGovernorOverride) {
			m.SlotByOp[OpPrune][i] = true
		}
		if (st.Stage == StageBlending || st.Stage == StageHolding) && st.AlphaMode == AlphaHold {
			m.SlotByOp[OpSetAlphaTarget][i] = true
		}
	}
	limit := in.MaxSeeds > 0 && in.TotalSeeds >= in.MaxSeeds
	if hasEmpty && !limit && !blocked {
		for i, st := range states {
			m.SlotByOp[OpGerminate][i] = slotMask[i] && st == nil
		}
	}

	opMask := make([]bool, NumOps)
	for op, row := range m.SlotByOp {
		for _, v := range row {
			if v {
				opMask[op] = true
				break
			}
		}
	}
	opMask[OpWait] = true

	bpMask := make([]bool, NumBlueprints)
	for _, b := range bps {
		bpMask[b] = true
	}
	// NOOP has no trainable parameters: germinating it is never useful.
	bpMask[BlueprintNoop] = false

	// Style and alpha target only matter when a seed is being created or
	// retargeted; otherwise they are pinned to their canonical options.
	open := opMask[OpGerminate] || opMask[OpSetAlphaTarget]
	styleMask := make([]bool, NumStyles)
	targetMask := make([]bool, NumAlphaTargets)
	if open {
		fill(styleMask, true)
		fill(targetMask, true)
	} else {
		styleMask[StyleSigmoidAdd] = true
		targetMask[AlphaTargetFull] = true
	}

	m.Heads[HeadSlot] = slotMask
	m.Heads[HeadBlueprint] = bpMask
	m.Heads[HeadStyle] = styleMask
	m.Heads[HeadTempo] = fill(make([]bool, NumTempos), true)
	m.Heads[HeadAlphaTarget] = targetMask
	m.Heads[HeadAlphaSpeed] = fill(make([]bool, NumAlphaSpeeds), true)
	m.Heads[HeadAlphaCurve] = fill(make([]bool, NumAlphaCurves), true)
	m.Heads[HeadOp] = opMask
	return m, nil
}

func fill(b []bool, v bool) []bool {
	for i := range b {
		b[i] = v
	}
	return b
}

// ComputeBatchMasks computes the masks of several environments, one per
// input, with the same rules. The first bad input stops it; the error
// names its position.
func ComputeBatchMasks(inputs []MaskInput) ([]ActionMasks, error) {
	out := make([]ActionMasks, len(inputs))
	for i, in := range inputs {
		m, err := ComputeActionMasks(in)
		if err != nil {
			return nil, fmt.Errorf("env %d: %w", i, err)
		}
		out[i] = m
	}
	return out, nil
}
