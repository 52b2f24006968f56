package tolaria

import (
	"context"
	"iter"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// poisonedVal serves toy validation batches, with NaN images (on the
// batches' device) at one epoch, so that the validation loss is NaN
// there.
type poisonedVal struct {
	fixedBatches
	at int
}

func (p poisonedVal) Batches(e int) iter.Seq2[*tensor.Tensor, *tensor.Tensor] {
	if e != p.at {
		return p.fixedBatches.Batches(e)
	}
	return func(yield func(*tensor.Tensor, *tensor.Tensor) bool) {
		for i := range p.x {
			if !yield(filledLike(p.x[i], math.NaN()), p.y[i]) {
				return
			}
		}
	}
}

// TestTrainerGovernorRollback: a NaN validation loss makes the governor
// restore the host bit-exactly to its last snapshot (taken after epoch
// 0), prune the live seed, and clear the optimizers' momentum.
func TestTrainerGovernorRollback(t *testing.T) {
	m := trainerModel(t)
	rec := &recorder{}
	tr, err := NewTrainer(TrainerOptions{
		Model: m, Train: toyData(t, 1, 3, 8), Val: poisonedVal{toyData(t, 2, 1, 8), 2}, Epochs: 3,
		Controller: script, Sink: rec, Governor: &GovernorOptions{Classes: 3},
	})
	require.NoError(t, err)
	r0, err := tr.RunEpoch(context.Background(), 0)
	require.NoError(t, err)
	require.False(t, r0.RolledBack)
	snapshot := nn.StateDict(m.Host()) // the governor snapshots at the end of epoch 0
	_, err = tr.RunEpoch(context.Background(), 1)
	require.NoError(t, err)
	s, _ := m.Slot("r0c1")
	require.Equal(t, leyline.StageTraining, s.Stage(), "the scripted seed is live before the rollback")
	mom := tr.opt.host.StateDict()["momentum_buffer.f32"]
	require.NotNil(t, mom)
	nonzero := false
	for _, x := range testdevice.F32(t, mom) {
		nonzero = nonzero || x != 0
	}
	require.True(t, nonzero, "momentum has built up before the rollback")

	r2, err := tr.RunEpoch(context.Background(), 2)
	require.NoError(t, err)
	require.True(t, r2.RolledBack)
	require.True(t, math.IsNaN(r2.ValLoss))
	require.Equal(t, leyline.OpWait, r2.Decision.Op, "no decision in a rollback epoch")
	for name, want := range snapshot {
		got := nn.StateDict(m.Host())[name]
		require.Equal(t, testdevice.F32(t, want), testdevice.F32(t, got), "host %s not restored bit-exactly", name)
	}
	require.True(t, s.Stage() == leyline.StagePruned || s.Stage() == leyline.StageEmbargoed, "live seed pruned (stage %v)", s.Stage())
	for _, x := range testdevice.F32(t, tr.opt.host.StateDict()["momentum_buffer.f32"]) {
		require.Zero(t, x, "host momentum not cleared by the rollback")
	}
	require.Equal(t, 1, rec.count(leyline.EventGovernorRollback))
}
