package tolaria

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
)

// counterfactualModel has a BLENDING seed with alpha > 0 in r0c0, a
// HOLDING seed in r0c1 and a BLENDING seed still at alpha 0 in the third
// slot: the three cases of the trainer's counterfactual measurements.
func counterfactualModel(t *testing.T) (m *kasmina.MorphogeneticModel, blending, holding, fresh *kasmina.Slot) {
	t.Helper()
	m = newModel(t, nil)
	ids := m.SlotIDs()
	leyline.SortSlotIDs(ids)
	blending, holding, fresh = germinate(t, m, ids[0]), germinate(t, m, ids[1]), germinate(t, m, ids[2])
	advanceTo(t, blending, leyline.StageBlending)
	blending.StepEpoch() // alpha ramps up from 0
	advanceTo(t, holding, leyline.StageHolding)
	advanceTo(t, fresh, leyline.StageBlending)
	require.Greater(t, blending.Alpha(), 0.0)
	require.Equal(t, leyline.StageBlending, blending.Stage())
	require.Greater(t, holding.Alpha(), 0.0)
	require.Equal(t, 0.0, fresh.Alpha())
	return m, blending, holding, fresh
}

// TestCounterfactualsHookReplacesAblationPasses: the Counterfactuals hook
// runs every epoch with the seeds that need a measurement; what it
// provides is recorded without a validation pass, what it leaves out is
// measured by the trainer exactly as without a hook, and a seed at alpha
// 0 needs no pass at all.
func TestCounterfactualsHookReplacesAblationPasses(t *testing.T) {
	data := toyData(t, 3, 2, 8)
	run := func(hook CounterfactualFunc) (EpochReport, *Trainer, [3]*kasmina.Slot) {
		m, b, h, f := counterfactualModel(t)
		tr, err := NewTrainer(TrainerOptions{Model: m, Train: data, Val: data, Epochs: 1, Counterfactuals: hook})
		require.NoError(t, err)
		r, err := tr.RunEpoch(context.Background(), 0)
		require.NoError(t, err)
		return r, tr, [3]*kasmina.Slot{b, h, f}
	}
	contribution := func(s *kasmina.Slot) float64 {
		c := s.State().Metrics.CounterfactualContribution
		require.NotNil(t, c, s.ID())
		return *c
	}

	ref, refTr, refSlots := run(nil)
	require.Equal(t, 2, refTr.AblationPasses(), "one pass per seed with alpha > 0")
	require.Equal(t, 0.0, contribution(refSlots[2]), "a seed at alpha 0 contributes nothing")

	calls := 0
	r, tr, slots := run(func(e int, valAcc float64, want []*kasmina.Slot) (map[string]float64, error) {
		calls++
		require.Equal(t, 0, e)
		require.Equal(t, ref.ValAccuracy, valAcc)
		require.Len(t, want, 2)
		require.Equal(t, []string{refSlots[0].ID(), refSlots[1].ID()}, []string{want[0].ID(), want[1].ID()})
		return map[string]float64{want[0].ID(): 12.5}, nil
	})
	require.Equal(t, 1, calls)
	require.Equal(t, ref.ValAccuracy, r.ValAccuracy)
	require.Equal(t, 1, tr.AblationPasses(), "only the seed the hook left out")
	require.Equal(t, r.ValAccuracy-12.5, contribution(slots[0]))
	require.Equal(t, contribution(refSlots[1]), contribution(slots[1]), "measured as without the hook")
	require.Equal(t, 0.0, contribution(slots[2]))
}

// TestCounterfactualsHookErrorFailsTheEpoch: the hook's error is the
// epoch's.
func TestCounterfactualsHookErrorFailsTheEpoch(t *testing.T) {
	data := toyData(t, 3, 1, 8)
	boom := errors.New("boom")
	tr, err := NewTrainer(TrainerOptions{Model: trainerModel(t), Train: data, Val: data, Epochs: 1,
		Counterfactuals: func(int, float64, []*kasmina.Slot) (map[string]float64, error) { return nil, boom }})
	require.NoError(t, err)
	_, err = tr.RunEpoch(context.Background(), 0)
	require.ErrorIs(t, err, boom)
}
