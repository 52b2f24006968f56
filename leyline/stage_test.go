package leyline

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEveryStageHasTransitionsEntry(t *testing.T) {
	for _, s := range ValidStages() {
		_, ok := validTransitions[s]
		assert.True(t, ok, "stage %v has no transitions entry", s)
	}
	assert.Len(t, validTransitions, NumStages)
	assert.Equal(t, []SeedStage{StageGerminated}, ValidTransitions(StageDormant))
	assert.Empty(t, ValidTransitions(StageFossilized))
	assert.Empty(t, ValidTransitions(SeedStage(5)))
}

func TestTransitions(t *testing.T) {
	cases := []struct {
		from, to SeedStage
		ok       bool
	}{
		{StageGerminated, StageTraining, true},
		{StageTraining, StageBlending, true},
		{StageBlending, StageHolding, true},
		{StageHolding, StageFossilized, true},
		{StageTraining, StagePruned, true},
		{StagePruned, StageEmbargoed, true},
		{StageEmbargoed, StageResetting, true},
		{StageResetting, StageDormant, true},
		{StageHolding, StageBlending, true},
		{StageGerminated, StageBlending, false},
		{StageTraining, StageTraining, false},
		{StageBlending, StageTraining, false},
		{StageFossilized, StagePruned, false},
		{StageTraining, StageFossilized, false},
		{StageDormant, StageTraining, false},
	}
	for _, c := range cases {
		assert.Equal(t, c.ok, IsValidTransition(c.from, c.to), "%v -> %v", c.from, c.to)
	}
}

func TestNextStage(t *testing.T) {
	cases := []struct {
		from, next SeedStage
		ok         bool
	}{
		{StageUnknown, StageDormant, true},
		{StageGerminated, StageTraining, true},
		{StageBlending, StageHolding, true},
		{StageHolding, StageFossilized, true},
		{StageResetting, StageDormant, true},
		{StageFossilized, 0, false},
		{StagePruned, 0, false},
		{StageEmbargoed, 0, false},
	}
	for _, c := range cases {
		n, ok := NextStage(c.from)
		assert.Equal(t, c.ok, ok, "%v", c.from)
		assert.Equal(t, c.next, n, "%v", c.from)
	}
}

func TestStageHelpers(t *testing.T) {
	for _, s := range ValidStages() {
		assert.Equal(t, s == StageFossilized, IsTerminalStage(s), "%v terminal", s)
		active := s == StageTraining || s == StageBlending || s == StageHolding || s == StageFossilized
		assert.Equal(t, active, IsActiveStage(s), "%v active", s)
		failure := s == StagePruned || s == StageEmbargoed || s == StageResetting
		assert.Equal(t, failure, IsFailureStage(s), "%v failure", s)
	}
}

func TestReservedStageRejected(t *testing.T) {
	_, err := ValidateStage(5, "checkpoint load of slot r0c1")
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrInvalidStage))
	assert.Contains(t, err.Error(), "checkpoint load of slot r0c1")
	assert.Contains(t, err.Error(), "reserved")

	_, err = StageOneHot(SeedStage(5))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "StageOneHot")
	_, err = StageToIndex(SeedStage(5))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "StageToIndex")
	assert.False(t, SeedStage(5).Valid())
	_, err = SeedStage(5).MarshalText()
	assert.Error(t, err)
	var s SeedStage
	assert.Error(t, s.UnmarshalText([]byte("SHADOWING")))
}

func TestOutOfRangeStagesRejected(t *testing.T) {
	for _, v := range []int{-1, 11, 12, 100} {
		_, err := ValidateStage(v, "ctx-xyz")
		require.Error(t, err, "%d", v)
		assert.Contains(t, err.Error(), "ctx-xyz")
		_, err = StageToIndex(SeedStage(v))
		assert.Error(t, err)
	}
	for _, i := range []int{-1, NumStages} {
		_, err := IndexToStage(i)
		assert.Error(t, err)
	}
}

func TestStageIndicesContiguousAndInvertible(t *testing.T) {
	want := []SeedStage{0, 1, 2, 3, 4, 6, 7, 8, 9, 10}
	assert.Equal(t, want, ValidStages())
	for i := range NumStages {
		s, err := IndexToStage(i)
		require.NoError(t, err)
		assert.Equal(t, want[i], s)
		j, err := StageToIndex(s)
		require.NoError(t, err)
		assert.Equal(t, i, j)
		oh, err := StageOneHot(s)
		require.NoError(t, err)
		for k, v := range oh {
			if k == i {
				assert.Equal(t, float32(1), v)
			} else {
				assert.Equal(t, float32(0), v)
			}
		}
	}
}

func TestStageText(t *testing.T) {
	for _, s := range ValidStages() {
		b, err := s.MarshalText()
		require.NoError(t, err)
		var back SeedStage
		require.NoError(t, back.UnmarshalText(b))
		assert.Equal(t, s, back)
	}
	assert.Equal(t, "HOLDING", StageHolding.String())
}
