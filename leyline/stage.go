package leyline

import (
	"errors"
	"fmt"
)

// SeedStage is a seed's position in its lifecycle. The integer values are
// part of the contract (they appear in checkpoints, telemetry and the
// observation), so they never change; 5 is reserved.
type SeedStage int

// The G2 stages (esper-reference.md §1.1).
const (
	StageUnknown    SeedStage = 0
	StageDormant    SeedStage = 1
	StageGerminated SeedStage = 2
	StageTraining   SeedStage = 3
	StageBlending   SeedStage = 4
	// 5 is reserved: it was SHADOWING and must be rejected.
	StageHolding    SeedStage = 6
	StageFossilized SeedStage = 7
	StagePruned     SeedStage = 8
	StageEmbargoed  SeedStage = 9
	StageResetting  SeedStage = 10
)

// ReservedStageValue is the retired SHADOWING value, rejected everywhere.
const ReservedStageValue = 5

// NumStages is the number of valid stages and the width of the stage
// one-hot encoding (schema v1).
const NumStages = 10

// StageSchemaVersion is the version of the stage one-hot layout.
const StageSchemaVersion = 1

// ErrInvalidStage is wrapped by every error about a stage value that is
// reserved, out of range or unknown.
var ErrInvalidStage = errors.New("invalid seed stage")

// validStages lists the valid stages in one-hot order.
var validStages = [NumStages]SeedStage{
	StageUnknown, StageDormant, StageGerminated, StageTraining, StageBlending,
	StageHolding, StageFossilized, StagePruned, StageEmbargoed, StageResetting,
}

var stageNames = map[SeedStage]string{
	StageUnknown: "UNKNOWN", StageDormant: "DORMANT", StageGerminated: "GERMINATED",
	StageTraining: "TRAINING", StageBlending: "BLENDING", StageHolding: "HOLDING",
	StageFossilized: "FOSSILIZED", StagePruned: "PRUNED", StageEmbargoed: "EMBARGOED",
	StageResetting: "RESETTING",
}

// ValidStages returns the valid stages in one-hot (index) order.
func ValidStages() []SeedStage { return append([]SeedStage(nil), validStages[:]...) }

// String returns the stage's upper-case name ("TRAINING"), or
// "SeedStage(n)" for an invalid value.
func (s SeedStage) String() string {
	if n, ok := stageNames[s]; ok {
		return n
	}
	return fmt.Sprintf("SeedStage(%d)", int(s))
}

// Valid reports whether s is one of the ten valid stages.
func (s SeedStage) Valid() bool {
	_, ok := stageNames[s]
	return ok
}

// ValidateStage checks an integer stage value coming from outside (a
// checkpoint, a payload, a policy) and returns it as a SeedStage. The
// error wraps ErrInvalidStage and names context, so the caller's
// situation shows in the message.
func ValidateStage(v int, context string) (SeedStage, error) {
	if v == ReservedStageValue {
		return 0, fmt.Errorf("%s: %w: value 5 is reserved (retired SHADOWING stage); use BLENDING (4) or HOLDING (6)", context, ErrInvalidStage)
	}
	s := SeedStage(v)
	if !s.Valid() {
		return 0, fmt.Errorf("%s: %w: value %d is not a stage (valid: 0-4, 6-10)", context, ErrInvalidStage, v)
	}
	return s, nil
}

// ParseStage returns the stage with the given upper-case name.
func ParseStage(name string) (SeedStage, error) {
	for s, n := range stageNames {
		if n == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown stage name %q", ErrInvalidStage, name)
}

// StageToIndex maps a stage to its contiguous index 0..NumStages-1.
func StageToIndex(s SeedStage) (int, error) {
	if _, err := ValidateStage(int(s), "StageToIndex"); err != nil {
		return 0, err
	}
	for i, v := range validStages {
		if v == s {
			return i, nil
		}
	}
	panic("unreachable")
}

// IndexToStage is the exact inverse of StageToIndex.
func IndexToStage(i int) (SeedStage, error) {
	if i < 0 || i >= NumStages {
		return 0, fmt.Errorf("IndexToStage: %w: index %d outside 0..%d", ErrInvalidStage, i, NumStages-1)
	}
	return validStages[i], nil
}

// StageOneHot returns the ten-float one-hot encoding of s (schema v1).
func StageOneHot(s SeedStage) ([NumStages]float32, error) {
	var out [NumStages]float32
	if _, err := ValidateStage(int(s), "StageOneHot"); err != nil {
		return out, err
	}
	i, _ := StageToIndex(s)
	out[i] = 1
	return out, nil
}

// validTransitions is the G2 VALID_TRANSITIONS table. The order inside
// each row matters: advancing without a target takes the first entry that
// is not a failure stage.
var validTransitions = map[SeedStage][]SeedStage{
	StageUnknown:    {StageDormant},
	StageDormant:    {StageGerminated},
	StageGerminated: {StageTraining, StagePruned},
	StageTraining:   {StageBlending, StagePruned},
	StageBlending:   {StageHolding, StagePruned},
	// BLENDING only to support scheduled prune and partial retargets.
	StageHolding:    {StageFossilized, StageBlending, StagePruned},
	StageFossilized: {},
	StagePruned:     {StageEmbargoed},
	StageEmbargoed:  {StageResetting},
	StageResetting:  {StageDormant},
}

// ValidTransitions returns the stages s may move to, in table order (a
// copy). An invalid stage has none.
func ValidTransitions(s SeedStage) []SeedStage {
	return append([]SeedStage(nil), validTransitions[s]...)
}

// IsValidTransition reports whether from → to is in the table.
func IsValidTransition(from, to SeedStage) bool {
	for _, t := range validTransitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// NextStage returns the first non-failure entry of s's transitions: the
// target of "advance" without an explicit stage. ok is false when there
// is none: FOSSILIZED, and PRUNED and EMBARGOED, whose only way out is
// another failure stage.
func NextStage(s SeedStage) (next SeedStage, ok bool) {
	for _, t := range validTransitions[s] {
		if !IsFailureStage(t) {
			return t, true
		}
	}
	return 0, false
}

// IsTerminalStage reports whether s has no way out (FOSSILIZED).
func IsTerminalStage(s SeedStage) bool { return s == StageFossilized }

// IsActiveStage reports whether a seed in s takes part in the forward
// pass: TRAINING, BLENDING, HOLDING or FOSSILIZED.
func IsActiveStage(s SeedStage) bool {
	switch s {
	case StageTraining, StageBlending, StageHolding, StageFossilized:
		return true
	}
	return false
}

// IsFailureStage reports whether s is on the failure path: PRUNED,
// EMBARGOED or RESETTING.
func IsFailureStage(s SeedStage) bool {
	switch s {
	case StagePruned, StageEmbargoed, StageResetting:
		return true
	}
	return false
}

// MarshalText encodes the stage as its name, so JSON carries "TRAINING".
func (s SeedStage) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("%w: cannot encode %d", ErrInvalidStage, int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes a stage name; reserved and unknown names fail.
func (s *SeedStage) UnmarshalText(b []byte) error {
	v, err := ParseStage(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
