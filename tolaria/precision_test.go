package tolaria

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria/rollback"
)

// TestAMPTrains: bf16 and fp16 runs of the toy task learn it, with and
// without a captured step, and report tolaria.train.amp_enabled.
func TestAMPTrains(t *testing.T) {
	for _, tc := range []struct {
		amp     AMPMode
		capture bool
	}{{AMPBF16, false}, {AMPFP16, false}, {AMPBF16, true}, {AMPFP16, true}} {
		t.Run(fmt.Sprintf("%s/capture=%v", tc.amp, tc.capture), func(t *testing.T) {
			rec := &recorder{}
			tr, err := NewTrainer(TrainerOptions{
				Model: trainerModel(t), Train: toyData(t, 1, 6, 16), Val: toyData(t, 2, 2, 16), Epochs: 4,
				Controller: script, HostLR: 0.05, AMP: tc.amp, Capture: tc.capture, TF32: true, Sink: rec,
			})
			require.NoError(t, err)
			sum, err := tr.Fit(context.Background())
			require.NoError(t, err)
			require.Zero(t, sum.CaptureFallbacks)
			require.Equal(t, tc.capture, sum.Final().Captured)
			first, last := sum.Epochs[0], sum.Final()
			require.Less(t, last.TrainLoss, first.TrainLoss, "training lowers the loss")
			require.Greater(t, last.ValAccuracy, 50.0, "the toy task is learnt")
			ms := epochMetrics(t, rec, 3)
			require.Equal(t, 1.0, metricValue(t, ms, leyline.MetricTolariaTrainAMPEnabled))
			require.Equal(t, 1.0, metricValue(t, ms, leyline.MetricTolariaTrainTF32Enabled))
			if tc.amp == AMPFP16 {
				require.NotNil(t, tr.Scaler())
			} else {
				require.Nil(t, tr.Scaler(), "bf16 needs no scaler")
			}
		})
	}
}

func TestAMPRejectsUnknownMode(t *testing.T) {
	d := toyData(t, 1, 1, 4)
	_, err := NewTrainer(TrainerOptions{Model: trainerModel(t), Train: d, Val: d, Epochs: 1, AMP: "fp8"})
	require.ErrorIs(t, err, ErrOptions)
}

// TestFP16InfGradientSkipsTheStep: an inf gradient injected after
// backward makes every optimizer skip the step (parameters and optimizer
// state unchanged) and halves the loss scale; the next clean step trains
// again.
func TestFP16InfGradientSkipsTheStep(t *testing.T) {
	m := twoSeedModel(t, 1)
	d := toyData(t, 1, 4, 8)
	tr, err := NewTrainer(TrainerOptions{Model: m, Train: d, Val: d, Epochs: 1, AMP: AMPFP16})
	require.NoError(t, err)
	_, err = tr.RunEpoch(context.Background(), 0)
	require.NoError(t, err)

	before := weightsOnly(params(t, m))
	hostSteps, seedSteps := tr.opt.host.StepCount(), tr.opt.seeds["r0c1"].sgd.StepCount()
	scale := tr.Scaler().CurrentScale()
	tr.step.afterBackward = func() {
		setFirst(tr.opt.host.Arena().Params()[0].Grad, math.Inf(1))
	}
	_, _, err = tr.step.run(d.x[0], d.y[0])
	require.NoError(t, err)
	// The forward pass still updates batch-norm statistics, as PyTorch's
	// does on a skipped step; the parameters do not move.
	require.Equal(t, before, weightsOnly(params(t, m)), "a skipped step changes no parameter")
	require.Equal(t, hostSteps, tr.opt.host.StepCount())
	require.Equal(t, seedSteps, tr.opt.seeds["r0c1"].sgd.StepCount(), "the seed skips too")
	require.Equal(t, scale*0.5, tr.Scaler().CurrentScale(), "the scale backs off")
	require.Zero(t, tr.Scaler().GrowthTracker())

	tr.step.afterBackward = nil
	_, _, err = tr.step.run(d.x[1], d.y[1])
	require.NoError(t, err)
	require.NotEqual(t, before, weightsOnly(params(t, m)), "a clean step trains")
	require.Equal(t, hostSteps+1, tr.opt.host.StepCount())
	require.Equal(t, 1, tr.Scaler().GrowthTracker())
}

// TestFP16ResumeIsExact: the GradScaler's scale and growth tracker travel
// in the checkpoint, so a resumed fp16 run ends bitwise where the
// uninterrupted one does, at the same scale. An inf gradient injected in
// epoch 1 moves the saved scale off its initial value, so a resume that
// forgot it would differ.
func TestFP16ResumeIsExact(t *testing.T) {
	opts := func(dir string) TrainerOptions {
		store, err := rollback.Open(dir, rollback.StoreOptions{})
		require.NoError(t, err)
		return TrainerOptions{
			Model: trainerModel(t), Train: toyData(t, 1, 5, 8), Val: toyData(t, 2, 1, 8), Epochs: 4,
			Controller: script, Checkpoints: store, AMP: AMPFP16,
		}
	}
	dir := t.TempDir()
	whole, err := NewTrainer(opts(dir))
	require.NoError(t, err)
	_, err = whole.RunEpoch(context.Background(), 0)
	require.NoError(t, err)
	initial := whole.Scaler().CurrentScale()
	steps := 0
	whole.step.afterBackward = func() {
		if steps++; steps == 2 {
			setFirst(whole.opt.host.Arena().Params()[0].Grad, math.NaN())
		}
	}
	_, err = whole.RunEpoch(context.Background(), 1)
	require.NoError(t, err)
	whole.step.afterBackward = nil
	saved := whole.Scaler().CurrentScale()
	require.Equal(t, initial/2, saved)
	st, err := whole.State(1)
	require.NoError(t, err)
	sd := st.Sub(scalerPrefix)
	require.Len(t, sd, 2)
	require.Equal(t, saved, float64(sd["scale"].F32()[0]))

	resumed, err := NewTrainer(opts(dir))
	require.NoError(t, err)
	next, err := resumed.Resume()
	require.NoError(t, err)
	require.Equal(t, 2, next)
	require.Equal(t, saved, resumed.Scaler().CurrentScale())
	require.Equal(t, whole.Scaler().GrowthTracker(), resumed.Scaler().GrowthTracker())
	_, err = resumed.Fit(context.Background())
	require.NoError(t, err)
	for e := 2; e < 4; e++ {
		_, err = whole.RunEpoch(context.Background(), e)
		require.NoError(t, err)
	}
	require.Equal(t, whole.Scaler().CurrentScale(), resumed.Scaler().CurrentScale())
	require.Equal(t, whole.Scaler().GrowthTracker(), resumed.Scaler().GrowthTracker())
	want, got := params(t, whole.model), params(t, resumed.model)
	require.Equal(t, len(want), len(got))
	for name, v := range want {
		require.Equal(t, v, got[name], "parameter %s differs after resume", name)
	}

	// An fp16 trainer refuses a checkpoint without scaler state.
	plain := opts(t.TempDir())
	plain.AMP = AMPOff
	p, err := NewTrainer(plain)
	require.NoError(t, err)
	st, err = p.State(0)
	require.NoError(t, err)
	f16, err := NewTrainer(opts(t.TempDir()))
	require.NoError(t, err)
	require.ErrorContains(t, f16.LoadState(st), "GradScaler")
}

// TestAMPAutocastsTheForward: under bf16 and fp16 the logits come out in
// the low-precision dtype while the loss stays fp32.
func TestAMPAutocastsTheForward(t *testing.T) {
	d := toyData(t, 1, 1, 4)
	for _, tc := range []struct {
		amp  AMPMode
		want tensor.DType
	}{{AMPOff, tensor.F32}, {AMPBF16, tensor.BF16}, {AMPFP16, tensor.F16}} {
		tr, err := NewTrainer(TrainerOptions{Model: trainerModel(t), Train: d, Val: d, Epochs: 1, AMP: tc.amp})
		require.NoError(t, err)
		var logits, loss *autograd.Var
		tr.prec.forward(func() {
			logits = tr.model.Forward(autograd.Const(d.x[0]))
			loss = autograd.CrossEntropy(logits, d.y[0], kernels.CrossEntropyParams{})
		})
		require.Equal(t, tc.want, logits.DType(), "%q logits", tc.amp)
		require.Equal(t, tensor.F32, loss.DType(), "%q loss", tc.amp)
	}
}

// setFirst sets the first element of the contiguous tensor x to v, on
// x's device.
func setFirst(x *tensor.Tensor, v float64) {
	fill(x.Reshape(x.Numel()).Narrow(0, 0, 1), v)
}

// weightsOnly drops the buffers from a params map.
func weightsOnly(ps map[string][]float32) map[string][]float32 {
	for k := range ps {
		if strings.HasPrefix(k, "buffer:") {
			delete(ps, k)
		}
	}
	return ps
}
