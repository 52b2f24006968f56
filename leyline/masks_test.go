package leyline

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func seed(stage SeedStage, age int, mode AlphaMode) *MaskSlotState {
	return &MaskSlotState{Stage: stage, SeedAgeEpochs: age, AlphaMode: mode}
}

// maskInput builds an input over the default three slots, all enabled,
// with the given states (missing → empty).
func maskInput(states map[string]*MaskSlotState) MaskInput {
	cfg := DefaultSlotConfig()
	all := map[string]*MaskSlotState{}
	for _, id := range cfg.IDs() {
		all[id] = states[id]
	}
	return MaskInput{Slots: cfg, EnabledSlots: cfg.IDs(), SlotStates: all, Topology: "cnn"}
}

func opsOf(m ActionMasks) []string {
	var out []string
	for op, v := range m.Op() {
		if v {
			out = append(out, OpNames[op])
		}
	}
	return out
}

func TestMasksOpRules(t *testing.T) {
	cases := []struct {
		name   string
		states map[string]*MaskSlotState
		edit   func(*MaskInput)
		ops    []string
	}{
		{"all empty", nil, nil, []string{"WAIT", "GERMINATE"}},
		{"training blocks germinate", map[string]*MaskSlotState{"r0c0": seed(StageTraining, 1, AlphaHold)}, nil,
			[]string{"WAIT", "ADVANCE"}},
		{"germinated blocks germinate", map[string]*MaskSlotState{"r0c0": seed(StageGerminated, 0, AlphaHold)}, nil,
			[]string{"WAIT", "ADVANCE"}},
		{"training age 5 prunable", map[string]*MaskSlotState{"r0c0": seed(StageTraining, 5, AlphaHold)}, nil,
			[]string{"WAIT", "PRUNE", "ADVANCE"}},
		{"age 4 blocks prune", map[string]*MaskSlotState{"r0c0": seed(StageBlending, 4, AlphaHold)}, nil,
			[]string{"WAIT", "GERMINATE", "SET_ALPHA_TARGET", "ADVANCE"}},
		{"blending moving alpha", map[string]*MaskSlotState{"r0c0": seed(StageBlending, 9, AlphaUp)}, nil,
			[]string{"WAIT", "GERMINATE", "ADVANCE"}},
		{"governor override prunes moving alpha", map[string]*MaskSlotState{"r0c0": seed(StageBlending, 9, AlphaUp)},
			func(in *MaskInput) { in.AllowGovernorOverride = true },
			[]string{"WAIT", "GERMINATE", "PRUNE", "ADVANCE"}},
		{"holding", map[string]*MaskSlotState{"r0c0": seed(StageHolding, 12, AlphaHold)}, nil,
			[]string{"WAIT", "GERMINATE", "SET_ALPHA_TARGET", "PRUNE", "FOSSILIZE"}},
		{"fossilized never prunable", map[string]*MaskSlotState{"r0c0": seed(StageFossilized, 50, AlphaHold)}, nil,
			[]string{"WAIT", "GERMINATE"}},
		{"embargoed blocks germinate", map[string]*MaskSlotState{"r0c0": seed(StageEmbargoed, 7, AlphaHold)}, nil,
			[]string{"WAIT"}},
		{"pruned blocks germinate", map[string]*MaskSlotState{"r0c0": seed(StagePruned, 7, AlphaDown)}, nil,
			[]string{"WAIT"}},
		{"resetting blocks germinate", map[string]*MaskSlotState{"r0c0": seed(StageResetting, 7, AlphaHold)}, nil,
			[]string{"WAIT"}},
		{"seed limit", nil, func(in *MaskInput) { in.TotalSeeds, in.MaxSeeds = 2, 2 }, []string{"WAIT"}},
		{"under seed limit", nil, func(in *MaskInput) { in.TotalSeeds, in.MaxSeeds = 1, 2 }, []string{"WAIT", "GERMINATE"}},
		{"unlimited seeds", nil, func(in *MaskInput) { in.TotalSeeds, in.MaxSeeds = 100, 0 }, []string{"WAIT", "GERMINATE"}},
		{"advance disabled", map[string]*MaskSlotState{"r0c0": seed(StageTraining, 1, AlphaHold)},
			func(in *MaskInput) { in.DisableAdvance = true }, []string{"WAIT"}},
		{"all slots full", map[string]*MaskSlotState{
			"r0c0": seed(StageHolding, 9, AlphaUp), "r0c1": seed(StageFossilized, 9, AlphaHold), "r0c2": seed(StageFossilized, 9, AlphaHold)},
			nil, []string{"WAIT", "FOSSILIZE"}},
		{"disabled slot ignored", map[string]*MaskSlotState{"r0c2": seed(StageTraining, 9, AlphaHold)},
			func(in *MaskInput) { in.EnabledSlots = []string{"r0c0", "r0c1"}; delete(in.SlotStates, "r0c2") },
			[]string{"WAIT", "GERMINATE"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := maskInput(c.states)
			if c.edit != nil {
				c.edit(&in)
			}
			m, err := ComputeActionMasks(in)
			require.NoError(t, err)
			assert.Equal(t, c.ops, opsOf(m))
			assert.True(t, m.OpValid(OpWait))
			// The op mask is the OR of the slot_by_op rows, and every row
			// selects only enabled slots.
			for op := range NumOps {
				any := false
				for i, v := range m.SlotByOp[op] {
					any = any || v
					if v {
						assert.True(t, m.Slot()[i], "op %s slot %d not enabled", OpNames[op], i)
					}
				}
				if op != int(OpWait) {
					assert.Equal(t, any, m.Op()[op], "op %s", OpNames[op])
				}
			}
			assert.Equal(t, m.Slot(), m.SlotByOp[OpWait])
		})
	}
}

func TestMasksSlotByOp(t *testing.T) {
	in := maskInput(map[string]*MaskSlotState{
		"r0c0": seed(StageHolding, 10, AlphaHold),
		"r0c2": seed(StageBlending, 6, AlphaUp),
	})
	m, err := ComputeActionMasks(in)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true, true}, m.SlotByOp[OpWait])
	assert.Equal(t, []bool{false, true, false}, m.SlotByOp[OpGerminate])
	assert.Equal(t, []bool{true, false, false}, m.SlotByOp[OpFossilize])
	assert.Equal(t, []bool{true, false, false}, m.SlotByOp[OpPrune])
	assert.Equal(t, []bool{true, false, false}, m.SlotByOp[OpSetAlphaTarget])
	assert.Equal(t, []bool{false, false, true}, m.SlotByOp[OpAdvance])

	// An invalid op's row is all false even though an empty slot exists.
	in = maskInput(map[string]*MaskSlotState{"r0c0": seed(StageTraining, 1, AlphaHold)})
	m, err = ComputeActionMasks(in)
	require.NoError(t, err)
	assert.False(t, m.OpValid(OpGerminate))
	assert.Equal(t, []bool{false, false, false}, m.SlotByOp[OpGerminate])
}

func TestMasksHeadRules(t *testing.T) {
	count := func(b []bool) int {
		n := 0
		for _, v := range b {
			if v {
				n++
			}
		}
		return n
	}
	// GERMINATE possible: style and alpha_target open.
	m, err := ComputeActionMasks(maskInput(nil))
	require.NoError(t, err)
	assert.Equal(t, 4, count(m.Heads[HeadStyle]))
	assert.Equal(t, 3, count(m.Heads[HeadAlphaTarget]))
	assert.Equal(t, 3, count(m.Heads[HeadTempo]))
	assert.Equal(t, 4, count(m.Heads[HeadAlphaSpeed]))
	assert.Equal(t, 5, count(m.Heads[HeadAlphaCurve]))
	assert.False(t, m.Heads[HeadBlueprint][BlueprintNoop], "NOOP always masked")
	assert.Equal(t, 7, count(m.Heads[HeadBlueprint]))
	assert.True(t, m.Heads[HeadBlueprint][BlueprintConvHeavy])
	assert.False(t, m.Heads[HeadBlueprint][BlueprintLora])

	// Neither germination nor a HOLD retarget: pinned to SIGMOID_ADD / FULL.
	m, err = ComputeActionMasks(maskInput(map[string]*MaskSlotState{"r0c0": seed(StageTraining, 1, AlphaHold)}))
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false, true, false}, m.Heads[HeadStyle])
	assert.Equal(t, []bool{false, false, true}, m.Heads[HeadAlphaTarget])

	// A retargetable HOLD slot opens them although GERMINATE is blocked.
	m, err = ComputeActionMasks(maskInput(map[string]*MaskSlotState{
		"r0c0": seed(StageHolding, 1, AlphaHold), "r0c1": seed(StageTraining, 1, AlphaHold)}))
	require.NoError(t, err)
	assert.False(t, m.OpValid(OpGerminate))
	assert.Equal(t, 4, count(m.Heads[HeadStyle]))
	assert.Equal(t, 3, count(m.Heads[HeadAlphaTarget]))

	for _, topo := range []string{"mlp", "transformer"} {
		in := maskInput(nil)
		in.Topology = topo
		m, err := ComputeActionMasks(in)
		require.NoError(t, err)
		bps, _ := TopologyBlueprints(topo)
		assert.Equal(t, len(bps)-1, count(m.Heads[HeadBlueprint]), topo)
		for _, b := range bps {
			assert.Equal(t, b != BlueprintNoop, m.Heads[HeadBlueprint][b], "%s %v", topo, b)
		}
	}
}

func TestMasksErrors(t *testing.T) {
	cases := []struct {
		name, contains string
		edit           func(*MaskInput)
	}{
		{"unknown topology", "unknown topology", func(in *MaskInput) { in.Topology = "resnet" }},
		{"topology case", "unknown topology", func(in *MaskInput) { in.Topology = "CNN" }},
		{"topology whitespace", "unknown topology", func(in *MaskInput) { in.Topology = " cnn" }},
		{"empty topology", "unknown topology", func(in *MaskInput) { in.Topology = "" }},
		{"empty enabled", "no enabled slots", func(in *MaskInput) { in.EnabledSlots = nil }},
		{"unknown enabled slot", "r4c4", func(in *MaskInput) { in.EnabledSlots = []string{"r0c0", "r4c4"} }},
		{"missing state entry", "r0c1", func(in *MaskInput) { delete(in.SlotStates, "r0c1") }},
		{"nil states map", "no slot state", func(in *MaskInput) { in.SlotStates = nil }},
		{"reserved stage", "reserved", func(in *MaskInput) { in.SlotStates["r0c0"] = seed(5, 1, AlphaHold) }},
		{"bad alpha mode", "alpha mode", func(in *MaskInput) { in.SlotStates["r0c0"] = seed(StageTraining, 1, 7) }},
		{"empty config", "empty slot configuration", func(in *MaskInput) { in.Slots = SlotConfig{} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := maskInput(nil)
			c.edit(&in)
			_, err := ComputeActionMasks(in)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrMaskInput))
			assert.Contains(t, err.Error(), c.contains)
		})
	}
}

func TestMasksAnySlotCount(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 9, 25} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ids := make([]string, n)
			for i := range ids {
				ids[i] = FormatSlotID(i/5, i%5)
			}
			cfg, err := NewSlotConfig(ids...)
			require.NoError(t, err)
			states := map[string]*MaskSlotState{}
			for i, id := range ids {
				if i%2 == 1 {
					states[id] = seed(StageHolding, 6, AlphaHold)
				} else {
					states[id] = nil
				}
			}
			// Enable every slot but the last (when there is more than one).
			enabled := ids
			if n > 1 {
				enabled = ids[:n-1]
				delete(states, ids[n-1])
			}
			m, err := ComputeActionMasks(MaskInput{Slots: cfg, EnabledSlots: enabled, SlotStates: states, Topology: "mlp"})
			require.NoError(t, err)
			assert.Len(t, m.Slot(), n)
			for op := range NumOps {
				assert.Len(t, m.SlotByOp[op], n)
			}
			for i := range n {
				on := n == 1 || i < n-1
				assert.Equal(t, on, m.Slot()[i], "slot %d", i)
				assert.Equal(t, on && i%2 == 0, m.SlotByOp[OpGerminate][i], "germinate slot %d", i)
				assert.Equal(t, on && i%2 == 1, m.SlotByOp[OpFossilize][i], "fossilize slot %d", i)
			}
			assert.True(t, m.OpValid(OpGerminate))
			assert.Equal(t, n > 2, m.OpValid(OpFossilize))
		})
	}
}

func TestComputeBatchMasks(t *testing.T) {
	a := maskInput(nil)
	b := maskInput(map[string]*MaskSlotState{"r0c0": seed(StageTraining, 1, AlphaHold)})
	out, err := ComputeBatchMasks([]MaskInput{a, b})
	require.NoError(t, err)
	require.Len(t, out, 2)
	assert.True(t, out[0].OpValid(OpGerminate))
	assert.False(t, out[1].OpValid(OpGerminate))
	bad := maskInput(nil)
	bad.Topology = "x"
	_, err = ComputeBatchMasks([]MaskInput{a, bad})
	assert.ErrorContains(t, err, "env 1")
	out, err = ComputeBatchMasks(nil)
	require.NoError(t, err)
	assert.Empty(t, out)
}
