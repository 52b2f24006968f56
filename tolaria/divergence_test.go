package tolaria

import (
	"context"
	"errors"
	"iter"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria/rollback"
)

// poisonedFrom serves toy validation batches, with NaN images from epoch
// index from on: the validation loss is NaN there, the weights intact.
type poisonedFrom struct {
	fixedBatches
	from int
}

func (p poisonedFrom) Batches(e int) iter.Seq2[*tensor.Tensor, *tensor.Tensor] {
	if e < p.from {
		return p.fixedBatches.Batches(e)
	}
	return poisonedVal{p.fixedBatches, e}.Batches(e)
}

func hostFinite(t *testing.T, m nn.Module) {
	t.Helper()
	for name, x := range nn.StateDict(m) {
		for _, v := range testdevice.F32(t, x) {
			require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "host %s is not finite", name)
		}
	}
}

// TestFitFailsWhenTrainingDivergesFromTheStart (issue 20, point 6): with
// a learning rate of 1e6 the first epoch's loss is ~5e30 and every later
// one NaN. The governor used to take the first as its baseline, roll
// every later epoch back to it, and Fit reported success. Now the absurd
// first loss is an anomaly (the snapshot stays the initial model), each
// NaN epoch rolls back to it, and after MaxRollbacks rollbacks in a row
// Fit fails with ErrDiverged, naming the epoch, with no checkpoint
// written for any diverged epoch and the model left finite.
func TestFitFailsWhenTrainingDivergesFromTheStart(t *testing.T) {
	m := trainerModel(t)
	initial := nn.StateDict(m.Host())
	store, err := rollback.Open(t.TempDir(), rollback.StoreOptions{})
	require.NoError(t, err)
	rec := &recorder{}
	tr, err := NewTrainer(TrainerOptions{
		Model: m, Train: toyData(t, 1, 3, 8), Val: toyData(t, 2, 1, 8), Epochs: 20, HostLR: 1e6,
		Governor: &GovernorOptions{Classes: 3}, Checkpoints: store, Sink: rec,
	})
	require.NoError(t, err)
	sum, err := tr.Fit(context.Background())
	require.ErrorIs(t, err, ErrDiverged)
	var de *DivergenceError
	require.ErrorAs(t, err, &de)
	// 1: anomaly; 2: NaN, rollback 1; 3: anomaly; 4: rollback 2; 5;
	// 6: rollback 3; 7; 8: the fourth rollback in a row ends the run.
	require.Equal(t, 8, de.Epoch)
	require.Equal(t, leyline.PanicReasonNaN, de.Reason)
	require.Equal(t, 4, de.Rollbacks)
	require.Empty(t, de.Checkpoint)
	require.ErrorContains(t, err, "training diverged at epoch 8")
	require.ErrorContains(t, err, "after 3 rollbacks in a row; no epoch was good enough to checkpoint")
	require.Len(t, sum.Epochs, 8, "the summary has every epoch run, the last included")
	require.True(t, sum.Final().RolledBack)
	require.Greater(t, sum.Epochs[0].ValLoss, 1e20, "the first epoch is absurd")
	require.False(t, sum.Epochs[0].RolledBack)
	eps, err := store.Checkpoints()
	require.NoError(t, err)
	require.Empty(t, eps, "no diverged epoch is checkpointed")
	hostFinite(t, m.Host())
	sameBits(t, initial, nn.StateDict(m.Host()))
	require.Equal(t, 1, rec.count(leyline.EventNumericalInstabilityDetected))
	require.Equal(t, 4, rec.count(leyline.EventGovernorRollback))
}

// TestDivergenceNamesTheLastGoodCheckpoint (issue 20, point 6): two
// healthy epochs, then NaN validation losses: the governor rolls back
// MaxRollbacks times, then RunEpoch fails naming the epoch and the last
// good checkpoint, and only healthy epochs were checkpointed. A smaller
// MaxRollbacks gives up sooner. Without a governor the first NaN epoch
// fails the run.
func TestDivergenceNamesTheLastGoodCheckpoint(t *testing.T) {
	for _, c := range []struct {
		name      string
		gov       *GovernorOptions
		wantEpoch int
		wantMsg   string
	}{
		{"governor", &GovernorOptions{Classes: 3}, 6, "(governor_nan), after 3 rollbacks in a row"},
		{"governor, MaxRollbacks 1", &GovernorOptions{Classes: 3, MaxRollbacks: 1}, 4, "(governor_nan), after 1 rollback in a row"},
		{"no governor", nil, 3, "no governor watches the run"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			store, err := rollback.Open(dir, rollback.StoreOptions{})
			require.NoError(t, err)
			tr, err := NewTrainer(TrainerOptions{
				Model: trainerModel(t), Train: toyData(t, 1, 3, 8), Val: poisonedFrom{toyData(t, 2, 1, 8), 2}, Epochs: 10,
				Governor: c.gov, Checkpoints: store,
			})
			require.NoError(t, err)
			sum, err := tr.Fit(context.Background())
			var de *DivergenceError
			require.ErrorAs(t, err, &de)
			require.True(t, errors.Is(err, ErrDiverged))
			require.Equal(t, c.wantEpoch, de.Epoch)
			require.Len(t, sum.Epochs, c.wantEpoch)
			require.ErrorContains(t, err, c.wantMsg)
			last := filepath.Join(dir, "ckpt-epoch-2.safetensors")
			require.Equal(t, last, de.Checkpoint)
			if c.gov != nil {
				require.ErrorContains(t, err, "the last good checkpoint is "+last+" (epoch 2)")
			} else {
				require.ErrorContains(t, err, "the last checkpoint with a finite loss is "+last+" (epoch 2)")
			}
			eps, err := store.Checkpoints()
			require.NoError(t, err)
			require.Equal(t, []int{1, 2}, eps, "only the healthy epochs are checkpointed")
		})
	}
}

// TestResumeRefusesADivergedCheckpoint (issue 20, point 6): a checkpoint
// whose weights hold NaN (an older esper checkpointed diverged epochs) is
// refused, naming the tensor, instead of training on at NaN.
func TestResumeRefusesADivergedCheckpoint(t *testing.T) {
	st := trainedCheckpoint(t, t.TempDir())
	w := st.Tensors[rollback.PrefixModel+"classifier.weight"].Clone()
	w.F32()[2] = float32(math.NaN())
	st.Tensors[rollback.PrefixModel+"classifier.weight"] = w
	dir := t.TempDir()
	store, err := rollback.Open(dir, rollback.StoreOptions{})
	require.NoError(t, err)
	require.NoError(t, store.Write(1, st))
	tr := mustTrainer(t, crashOptions(t, dir))
	_, err = tr.Resume()
	require.ErrorContains(t, err, "checkpoint tensor model/classifier.weight holds NaN (element 2): the run had diverged")
	require.Zero(t, tr.StartEpoch())
}

// TestResumedGovernorRollsBackToTheCheckpoint: the governor's snapshot
// is the resumed state, not the untrained model NewTrainer saw, so a
// rollback right after a resume restores the checkpoint's host.
func TestResumedGovernorRollsBackToTheCheckpoint(t *testing.T) {
	dir := t.TempDir()
	o := crashOptions(t, dir)
	o.Epochs, o.Controller = 2, nil
	_, err := mustTrainer(t, o).Fit(context.Background())
	require.NoError(t, err)
	st, _, err := o.Checkpoints.Latest()
	require.NoError(t, err)

	o = crashOptions(t, dir)
	o.Epochs, o.Controller = 4, nil
	o.Val = poisonedFrom{toyData(t, 2, 1, 8), 2}
	o.Governor = &GovernorOptions{Classes: 3}
	tr := mustTrainer(t, o)
	next, err := tr.Resume()
	require.NoError(t, err)
	require.Equal(t, 2, next)
	r, err := tr.RunEpoch(context.Background(), next)
	require.NoError(t, err)
	require.True(t, r.RolledBack)
	require.Equal(t, leyline.PanicReasonNaN, r.PanicReason)
	want := st.Sub(rollback.PrefixModel)
	sameBits(t, want, nn.StateDict(o.Model.Host()))
}

// deviceState returns a copy of st whose tensors all live on dev.
func deviceState(t *testing.T, st rollback.State, dev tensor.Device) rollback.State {
	t.Helper()
	out := st
	out.Tensors = map[string]*tensor.Tensor{}
	for name, x := range st.Tensors {
		d, err := x.ToDevice(dev)
		require.NoError(t, err)
		out.Tensors[name] = d
	}
	return out
}

// TestResumeFromADeviceState: ResumeFrom takes a State whose tensors a
// caller put on a device (a Trainer's own States are host memory): it
// checks them with one gathered copy per dtype, read together in one host
// sync of that device (nn.HostCopies), instead of reading device tensors on the
// host, refuses a NaN weight naming it as for a host State, and resumes
// a finite one exactly as from the host State, on the test device;
// LoadState loads one as it loads the host State.
func TestResumeFromADeviceState(t *testing.T) {
	st := trainedCheckpoint(t, t.TempDir())
	sim := tensor.Sim(3)
	dtypes := map[tensor.DType]bool{}
	for _, x := range st.Tensors {
		dtypes[x.DType()] = true
	}

	bad := deviceState(t, st, sim)
	var err error
	w := st.Tensors[rollback.PrefixModel+"classifier.weight"].Clone()
	w.F32()[2] = float32(math.NaN())
	bad.Tensors[rollback.PrefixModel+"classifier.weight"], err = w.ToDevice(sim)
	require.NoError(t, err)
	tr := mustTrainer(t, crashOptions(t, t.TempDir()))
	syncs := tensor.HostSyncs(sim)
	_, err = tr.ResumeFrom(bad)
	require.ErrorContains(t, err, "checkpoint tensor model/classifier.weight holds NaN (element 2): the run had diverged")
	require.Greater(t, len(dtypes), 1, "the state holds several dtypes")
	require.Equal(t, uint64(1), tensor.HostSyncs(sim)-syncs, "one host sync for every dtype's gathered copy")

	want := mustTrainer(t, crashOptions(t, t.TempDir()))
	next, err := want.ResumeFrom(st)
	require.NoError(t, err)
	got := mustTrainer(t, crashOptions(t, t.TempDir()))
	gotNext, err := got.ResumeFrom(deviceState(t, st, sim))
	require.NoError(t, err)
	require.Equal(t, next, gotNext)
	ws, err := want.State(next - 1)
	require.NoError(t, err)
	gs, err := got.State(next - 1)
	require.NoError(t, err)
	requireSameState(t, ws, gs)

	// LoadState, too, takes a State on a device.
	loaded := mustTrainer(t, crashOptions(t, t.TempDir()))
	require.NoError(t, loaded.LoadState(deviceState(t, st, sim)))
	ls, err := loaded.State(next - 1)
	require.NoError(t, err)
	requireSameState(t, ws, ls)
}
