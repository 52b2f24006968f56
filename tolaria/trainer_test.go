package tolaria

import (
	"context"
	"errors"
	"iter"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria/rollback"
)

// fixedBatches serves the same batches every epoch.
type fixedBatches struct{ x, y []*tensor.Tensor }

func (b fixedBatches) Batches(int) iter.Seq2[*tensor.Tensor, *tensor.Tensor] {
	return func(yield func(*tensor.Tensor, *tensor.Tensor) bool) {
		for i := range b.x {
			if !yield(b.x[i], b.y[i]) {
				return
			}
		}
	}
}

// toyData is hostToyData on the test device (testdevice.Device), as a
// source that yields device tensors hands them to the trainer.
func toyData(t testing.TB, seed uint64, batches, batch int) fixedBatches {
	t.Helper()
	return hostToyData(seed, batches, batch).to(t)
}

// to returns the batches copied to the test device.
func (b fixedBatches) to(t testing.TB) fixedBatches {
	t.Helper()
	var out fixedBatches
	for i := range b.x {
		out.x, out.y = append(out.x, testdevice.To(t, b.x[i])), append(out.y, testdevice.To(t, b.y[i]))
	}
	return out
}

// hostToyData is a learnable 3-class task on 1×8×8 images: the class is
// which third of the image (top, middle, bottom rows) is brightest. Its
// tensors are CPU tensors, as a data.Loader yields them.
func hostToyData(seed uint64, batches, batch int) fixedBatches {
	rng := tensor.NewRNG(seed)
	var out fixedBatches
	for b := 0; b < batches; b++ {
		x := tensor.Normal(rng, tensor.F32, 0, 0.5, batch, 1, 8, 8)
		y := tensor.RandInt(rng, 3, batch)
		xs, ys := x.F32(), y.I64()
		for i := 0; i < batch; i++ {
			r0 := int(ys[i]) * 8 / 3
			for r := r0; r < r0+2; r++ {
				for c := 0; c < 8; c++ {
					xs[i*64+r*8+c] += 1.5
				}
			}
		}
		out.x, out.y = append(out.x, x), append(out.y, y)
	}
	return out
}

// trainerModel is hostTrainerModel moved to the test device
// (testdevice.Device); the trainer takes the model's device.
func trainerModel(t testing.TB) *kasmina.MorphogeneticModel {
	t.Helper()
	m := hostTrainerModel(t)
	require.NoError(t, nn.To(m, testdevice.Device(t)))
	return m
}

// hostTrainerModel is a 2-block CNN host (4 and 8 channels) on the CPU
// with seed slots r0c0 and r0c1, for the toy task's 3 classes.
func hostTrainerModel(t testing.TB) *kasmina.MorphogeneticModel {
	t.Helper()
	host, err := kasmina.NewCNNHost(kasmina.CNNHostOptions{InChannels: 1, Classes: 3, Blocks: 2, BaseChannels: 4, RNG: tensor.NewRNG(11)})
	require.NoError(t, err)
	m, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c0", "r0c1"}})
	require.NoError(t, err)
	return m
}

// scripted is a stateless controller that decides by epoch number.
type scripted map[int]leyline.Decision

func (s scripted) EvaluateEpoch(ctx context.Context, st leyline.EpochState) (leyline.Decision, error) {
	if d, ok := s[st.Signals.Metrics.Epoch]; ok {
		return d, nil
	}
	return leyline.Wait("script"), nil
}

var script = scripted{
	0: {Op: leyline.OpGerminate, SlotID: "r0c1", Blueprint: leyline.BlueprintConvLight, Style: leyline.StyleLinearAdd, Tempo: leyline.TempoFast, AlphaTarget: leyline.AlphaTargetFull, Reason: "script", Confidence: 1},
	1: {Op: leyline.OpAdvance, SlotID: "r0c1", Reason: "script", Confidence: 1},
	2: {Op: leyline.OpGerminate, SlotID: "r0c0", Blueprint: leyline.BlueprintNorm, Style: leyline.StyleSigmoidAdd, Tempo: leyline.TempoFast, AlphaTarget: leyline.AlphaTargetFull, Reason: "script", Confidence: 1},
}

// params copies a model's parameters and F32 buffers, on any device, to
// the host (explicit copies), by name; buffers are named "buffer:NAME".
func params(t testing.TB, m nn.Module) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for _, p := range m.NamedParameters() {
		out[p.Name] = testdevice.F32(t, p.Var.Value)
	}
	for _, b := range m.NamedBuffers() {
		if b.Tensor.DType() == tensor.F32 {
			out["buffer:"+b.Name] = testdevice.F32(t, b.Tensor)
		}
	}
	return out
}

func TestTrainerLearnsAndRunsTheLifecycle(t *testing.T) {
	m := trainerModel(t)
	rec := &recorder{}
	tr, err := NewTrainer(TrainerOptions{
		Model: m, Train: toyData(t, 1, 6, 16), Val: toyData(t, 2, 2, 16), Epochs: 4,
		Controller: script, Sink: rec, HostLR: 0.05,
	})
	require.NoError(t, err)
	sum, err := tr.Fit(context.Background())
	require.NoError(t, err)
	require.Len(t, sum.Epochs, 4)
	first, last := sum.Epochs[0], sum.Final()
	require.Less(t, last.TrainLoss, first.TrainLoss, "training lowers the loss")
	require.Greater(t, last.ValAccuracy, 50.0, "the toy task is learnt")
	require.Equal(t, 2, sum.Germinated)
	s, _ := m.Slot("r0c1")
	require.Equal(t, leyline.StageTraining, s.Stage(), "germinated at epoch 0, advanced at epoch 1")
	require.Equal(t, ApplyApplied, sum.Epochs[1].Applied)
	require.Equal(t, 4, rec.count(leyline.EventEpochCompleted))
	latency := 0
	for _, e := range rec.all() {
		if p, ok := e.Data.(*leyline.MetricsPayload); ok && e.Type == leyline.EventMetrics {
			for _, mt := range p.Metrics {
				if mt.Name == leyline.MetricTolariaTrainingLatencyMs {
					require.Greater(t, mt.Value, 0.0)
					latency++
				}
			}
		}
	}
	require.Equal(t, 4, latency, "tolaria.training.latency_ms once per epoch")
	// Host syncs per epoch: none on the CPU; on sim the figures
	// TestTrainerOnSimEqualsCPU explains (the same lifecycle, 6 steps
	// per epoch putting the telemetry steps 10 and 20 in epochs 1 and 3);
	// a CUDA backend may add waits of its own (CountHostSync), not fewer.
	dev := testdevice.Device(t)
	want := []uint64{0, 0, 0, 0}
	if !dev.IsCPU() {
		want = []uint64{1, 1, 1, 1}
	}
	var syncs []uint64
	for i, r := range sum.Epochs {
		syncs = append(syncs, r.HostSyncs)
		require.GreaterOrEqual(t, r.HostSyncs, want[i], "host syncs of epoch %d on %v", i, dev)
	}
	if dev.IsCPU() || dev.Kind == tensor.KindSim {
		require.Equal(t, want, syncs, "host syncs per epoch on %v", dev)
	}
}

// TestTrainerReportsRefusedDecision: an ADVANCE that Kasmina's gate
// refuses is reported as rejected with the gate's reason, so a log can
// say what happened instead of repeating the controller's intent.
func TestTrainerReportsRefusedDecision(t *testing.T) {
	adv := leyline.Decision{Op: leyline.OpAdvance, SlotID: "r0c1", Reason: "Advance to BLENDING", Confidence: 1}
	tr, err := NewTrainer(TrainerOptions{
		Model: trainerModel(t), Train: toyData(t, 1, 2, 8), Val: toyData(t, 2, 1, 8), Epochs: 3,
		Controller: scripted{0: script[0], 1: script[1], 2: adv},
	})
	require.NoError(t, err)
	sum, err := tr.Fit(context.Background())
	require.NoError(t, err)
	require.Len(t, sum.Epochs, 3)
	require.Equal(t, ApplyApplied, sum.Epochs[1].Applied, "GERMINATED → TRAINING through G1")
	require.Empty(t, sum.Epochs[1].ApplyReason)
	require.Equal(t, ApplyRejected, sum.Epochs[2].Applied, "one epoch in TRAINING is too early for G2")
	require.Equal(t, "G2 failed: insufficient_epochs_in_stage, gradient_stats_never_measured", sum.Epochs[2].ApplyReason)
}

func TestTrainerRejectsBadOptions(t *testing.T) {
	m := trainerModel(t)
	d := toyData(t, 1, 1, 4)
	for _, o := range []TrainerOptions{
		{Train: d, Val: d, Epochs: 1},
		{Model: m, Val: d, Epochs: 1},
		{Model: m, Train: d, Val: d},
		{Model: m, Train: d, Val: d, Epochs: 1, HostLR: -1},
		{Model: m, Train: d, Val: d, Epochs: 1, HostSchedule: optim.Cosine{Base: 0.1}},
	} {
		_, err := NewTrainer(o)
		require.ErrorIs(t, err, ErrOptions)
	}
	tr, err := NewTrainer(TrainerOptions{Model: m, Train: fixedBatches{}, Val: d, Epochs: 1})
	require.NoError(t, err)
	_, err = tr.Fit(context.Background())
	require.ErrorContains(t, err, "empty")
}

// TestCapturedTrainingEqualsEager: the same run with the train step
// captured and replayed ends with bitwise the same parameters and
// buffers as the eager run, through a germination and a stage change
// (each forces a re-capture), with a host learning-rate schedule that
// changes the rate every epoch without re-capturing.
func TestCapturedTrainingEqualsEager(t *testing.T) {
	run := func(capture bool) (map[string][]float32, Summary) {
		m := trainerModel(t)
		tr, err := NewTrainer(TrainerOptions{
			Model: m, Train: toyData(t, 1, 5, 8), Val: toyData(t, 2, 1, 8), Epochs: 3,
			Controller: script, Capture: capture,
			HostSchedule: optim.StepLR{Base: 0.04, StepSize: 1, Gamma: 0.5},
		})
		require.NoError(t, err)
		sum, err := tr.Fit(context.Background())
		require.NoError(t, err)
		require.Equal(t, 0.01, tr.opt.host.LR(), "the schedule's rate of the last epoch (0.04·0.5²)")
		return params(t, m), sum
	}
	eager, esum := run(false)
	captured, sum := run(true)
	require.Zero(t, sum.CaptureFallbacks)
	require.True(t, sum.Final().Captured, "the last epoch's steps replayed a captured graph")
	require.Equal(t, len(esum.Epochs), len(sum.Epochs))
	for i, er := range esum.Epochs {
		cr := sum.Epochs[i]
		// Validation is captured too: its figures match bitwise.
		require.Equal(t, [4]float64{er.TrainLoss, er.TrainAccuracy, er.ValLoss, er.ValAccuracy},
			[4]float64{cr.TrainLoss, cr.TrainAccuracy, cr.ValLoss, cr.ValAccuracy}, "epoch %d", i)
	}
	require.Equal(t, len(eager), len(captured))
	for name, v := range eager {
		require.Equal(t, v, captured[name], "parameter %s", name)
	}
}

// pruneScript germinates a seed in r0c1 after two epochs of the host
// alone, advances it to TRAINING and prunes it two epochs later: from
// epoch 5 the model is the host alone again.
var pruneScript = scripted{
	1: {Op: leyline.OpGerminate, SlotID: "r0c1", Blueprint: leyline.BlueprintConvLight, Style: leyline.StyleLinearAdd, Tempo: leyline.TempoFast, AlphaTarget: leyline.AlphaTargetFull, Reason: "script", Confidence: 1},
	2: {Op: leyline.OpAdvance, SlotID: "r0c1", Reason: "script", Confidence: 1},
	4: {Op: leyline.OpPrune, SlotID: "r0c1", AlphaSpeed: leyline.AlphaSpeedInstant, Reason: "script", Confidence: 1},
}

// TestCapturedGraphsOutliveAPrunedSeed: once a seed is pruned, the
// train step and the validation batch replay the graphs captured for
// the host alone before it germinated — no warm-up, no capture — and
// the run stays bitwise the eager run, per batch and with the whole
// epoch as one graph (tolaria.Fixed). The germinated seed, outside the
// forward pass, gives the validation batch no graph of its own either.
func TestCapturedGraphsOutliveAPrunedSeed(t *testing.T) {
	const epochs = 8
	type result struct {
		params  map[string][]float32
		reports [][4]float64
		step    [2]autograd.CaptureStats // after epoch 4 (the prune), at the end
		val     [2]autograd.CaptureStats
		valAt2  autograd.CaptureStats // after epoch 1 (the host alone)
		stages  []leyline.SeedStage
	}
	run := func(capture, whole bool) result {
		m := trainerModel(t)
		var train, val Batches = toyData(t, 1, 2, 8), toyData(t, 2, 1, 8)
		if whole {
			h := hostToyData(1, 1, 16)
			f, err := NewFixed(testdevice.To(t, h.x[0]), testdevice.To(t, h.y[0]), FixedOptions{Size: 8})
			require.NoError(t, err)
			train, val = f, f
		}
		tr, err := NewTrainer(TrainerOptions{
			Model: m, Train: train, Val: val, Epochs: epochs, Controller: pruneScript, Capture: capture,
		})
		require.NoError(t, err)
		var res result
		for e := 0; e < epochs; e++ {
			r, err := tr.RunEpoch(context.Background(), e)
			require.NoError(t, err)
			res.reports = append(res.reports, [4]float64{r.TrainLoss, r.TrainAccuracy, r.ValLoss, r.ValAccuracy})
			res.stages = append(res.stages, tr.o.Model.Slots()[1].Stage())
			if capture && !whole {
				switch e {
				case 1:
					res.valAt2 = tr.eval.captured.Stats()
				case 4:
					res.step[0], res.val[0] = tr.step.captured.Stats(), tr.eval.captured.Stats()
				case epochs - 1:
					res.step[1], res.val[1] = tr.step.captured.Stats(), tr.eval.captured.Stats()
				}
			}
			if capture {
				require.Zero(t, tr.Summary().CaptureFallbacks)
			}
		}
		res.params = params(t, m)
		return res
	}
	for _, whole := range []bool{false, true} {
		eager, captured := run(false, whole), run(true, whole)
		require.Equal(t, leyline.StageGerminated, eager.stages[1])
		require.Equal(t, leyline.StageTraining, eager.stages[3])
		require.NotEqual(t, leyline.StageTraining, eager.stages[4], "pruned at the end of epoch 4")
		require.Equal(t, eager.stages, captured.stages)
		require.Equal(t, eager.reports, captured.reports, "epoch figures (whole epoch graphs: %v)", whole)
		require.Equal(t, eager.params, captured.params, "parameters (whole epoch graphs: %v)", whole)
		if whole {
			continue
		}
		for _, st := range [][2]autograd.CaptureStats{captured.step, captured.val} {
			require.Equal(t, st[0].Captures, st[1].Captures, "no capture after the prune: %+v", st)
			require.Equal(t, st[0].EagerCalls, st[1].EagerCalls, "no warm-up after the prune: %+v", st)
			require.Greater(t, st[1].Replays, st[0].Replays)
		}
		// Germinated (epoch 2) and in TRAINING (epochs 3, 4): the
		// validation batch captured once more, for the seed in TRAINING.
		require.Equal(t, captured.valAt2.Captures+1, captured.val[0].Captures, "validation captures: %+v then %+v", captured.valAt2, captured.val[0])
	}
}

// TestCaptureFailureFallsBackOnce: a step that cannot be captured runs
// eagerly, with exactly one tolaria.compile_fallback event.
func TestCaptureFailureFallsBackOnce(t *testing.T) {
	m := trainerModel(t)
	rec := &recorder{}
	tr, err := NewTrainer(TrainerOptions{
		Model: m, Train: toyData(t, 1, 4, 8), Val: toyData(t, 2, 1, 8), Epochs: 2, Capture: true, Sink: rec,
	})
	require.NoError(t, err)
	inner := tr.step.fn
	tr.step.captured = autograd.Capture(func(in []*tensor.Tensor) []*tensor.Tensor {
		if kernels.For(in[0].Device()).Capturing() {
			panic("forced capture failure")
		}
		return inner(in)
	}, autograd.CaptureOptions{Version: tr.step.guard, OnFallback: func(err error) {
		tr.summary.CaptureFallbacks++
		if !tr.step.fellBack {
			tr.step.fellBack = true
			tr.deadlines.emit(EventCompileFallback, leyline.SeverityWarning, err.Error(), nil)
		}
	}})
	sum, err := tr.Fit(context.Background())
	require.NoError(t, err)
	require.Len(t, rec.named(EventCompileFallback), 1)
	require.GreaterOrEqual(t, sum.CaptureFallbacks, 1)
	require.False(t, sum.Final().Captured)
	require.Less(t, sum.Final().TrainLoss, sum.Epochs[0].TrainLoss, "eager fallback still trains")
}

// lateGerminator blocks until released, then germinates.
type lateGerminator struct {
	release chan struct{}
	calls   int
	mu      sync.Mutex
}

func (c *lateGerminator) EvaluateEpoch(ctx context.Context, s leyline.EpochState) (leyline.Decision, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	<-c.release
	return leyline.Decision{Op: leyline.OpGerminate, SlotID: "r0c0", Blueprint: leyline.BlueprintConvLight, Style: leyline.StyleSigmoidAdd, Tempo: leyline.TempoStandard, AlphaTarget: leyline.AlphaTargetFull, Confidence: 1, Reason: "late"}, nil
}

// TestLateControllerIsNeverApplied: a controller past its deadline
// counts one tolaria.timeout.tamiyo_total, puts the trainer in
// conservative mode (the next epoch skips the controller), and its
// decision is never applied, even after it finally returns.
func TestLateControllerIsNeverApplied(t *testing.T) {
	m := trainerModel(t)
	c := &lateGerminator{release: make(chan struct{})}
	tr, err := NewTrainer(TrainerOptions{
		Model: m, Train: toyData(t, 1, 2, 8), Val: toyData(t, 2, 1, 8), Epochs: 2,
		Controller: c, Deadlines: DeadlineOptions{Controller: 20 * time.Millisecond},
	})
	require.NoError(t, err)
	r0, err := tr.RunEpoch(context.Background(), 0)
	require.NoError(t, err)
	require.Equal(t, OutcomeTimeout, r0.Outcome)
	require.Equal(t, leyline.OpWait, r0.Decision.Op)
	require.True(t, r0.Failed)
	require.Equal(t, FailureTamiyoTimeout, r0.FailureReason)
	require.True(t, tr.Deadlines().Conservative())
	r1, err := tr.RunEpoch(context.Background(), 1)
	require.NoError(t, err)
	require.Equal(t, OutcomeSkipped, r1.Outcome, "conservative mode skips the controller")
	require.False(t, r1.Failed)
	close(c.release)
	tr.Deadlines().Drain()
	require.Equal(t, 1, c.calls)
	for _, s := range m.Slots() {
		require.Nil(t, s.State(), "the late GERMINATE was applied to %s", s.ID())
	}
	got := map[string]float64{}
	for _, mt := range tr.Deadlines().Metrics() {
		got[mt.Name] = mt.Value
	}
	require.Equal(t, 1.0, got[leyline.MetricTolariaTimeoutTamiyoTotal])
	require.False(t, tr.Deadlines().Conservative(), "a clean epoch clears conservative mode")
}

// crashOptions is the run the crash test kills and resumes.
func crashOptions(t testing.TB, dir string) TrainerOptions {
	store, err := rollback.Open(dir, rollback.StoreOptions{})
	require.NoError(t, err)
	return TrainerOptions{
		Model: trainerModel(t), Train: toyData(t, 1, 5, 8), Val: toyData(t, 2, 1, 8), Epochs: 4,
		Controller: script, Checkpoints: store,
	}
}

// TestCrashChild is the process TestResumeAfterSIGKILL kills: it trains
// with checkpoints and SIGKILLs itself in the middle of epoch 2.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("ESPER_TOLARIA_CRASH_DIR")
	if dir == "" {
		t.Skip("helper process of TestResumeAfterSIGKILL")
	}
	o := crashOptions(t, dir)
	o.OnStep = func(s StepInfo) {
		if s.Epoch == 2 && s.Step == 3 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	tr, err := NewTrainer(o)
	require.NoError(t, err)
	_, _ = tr.Fit(context.Background())
	t.Fatal("still alive after SIGKILL")
}

// TestResumeAfterSIGKILL: a run killed with SIGKILL mid-epoch and resumed
// from its last checkpoint ends with parameters bitwise equal to an
// uninterrupted run; a corrupted newest checkpoint makes Resume fall back
// to the previous one, with a warning; with both corrupted it is refused.
func TestResumeAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ESPER_TOLARIA_CRASH_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "child: %s", out)
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child did not die of SIGKILL: %v\n%s", err, out)

	resumed, err := NewTrainer(crashOptions(t, dir))
	require.NoError(t, err)
	next, err := resumed.Resume()
	require.NoError(t, err)
	require.Equal(t, 2, next, "epochs 1 and 2 were checkpointed before the kill")
	_, err = resumed.Fit(context.Background())
	require.NoError(t, err)

	whole, err := NewTrainer(crashOptions(t, t.TempDir()))
	require.NoError(t, err)
	_, err = whole.Fit(context.Background())
	require.NoError(t, err)
	want, got := params(t, whole.model), params(t, resumed.model)
	require.Equal(t, len(want), len(got))
	for name, v := range want {
		require.Equal(t, v, got[name], "parameter %s differs after resume", name)
	}

	// Corrupt the newest checkpoint (one flipped byte): Resume falls back
	// to the previous one and says so.
	corrupt := func(name string) {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		data[len(data)/2] ^= 0xff
		require.NoError(t, os.WriteFile(path, data, 0o644))
	}
	corrupt("ckpt-epoch-4.safetensors")
	rec := &recorder{}
	o := crashOptions(t, dir)
	o.Sink = rec
	again, err := NewTrainer(o)
	require.NoError(t, err)
	next, err = again.Resume()
	require.NoError(t, err)
	require.Equal(t, 3, next, "the fallback is ckpt-epoch-3")
	var warned []string
	for _, e := range rec.all() {
		if e.Type == leyline.EventCheckpointLoaded && e.Severity == leyline.SeverityWarning {
			warned = append(warned, e.Message)
		}
	}
	require.Len(t, warned, 1)
	require.Contains(t, warned[0], "ckpt-epoch-4.safetensors is corrupt (CRC32 mismatch")
	require.Contains(t, warned[0], "resuming from the previous intact checkpoint, ckpt-epoch-3.safetensors")

	corrupt("ckpt-epoch-3.safetensors")
	_, err = mustTrainer(t, crashOptions(t, dir)).Resume()
	var ce *rollback.CorruptError
	require.True(t, errors.As(err, &ce), "want a CorruptError, got %v", err)
}

// TestEpochAccuracyIsCounted: the validation accuracy the trainer counts
// on the device (kernels.Backend.CountCorrect into per-row counters,
// captured, summed on the host) equals the one computed here on the host
// from the same model's eval-mode logits, and the training accuracy is a
// whole number of correct samples — with one batch size, with more sizes
// than the trainer keeps counters for (maxCorrectBufs), and with a batch
// larger than the counters' capacity (correctRows): the last two take the
// slow path for some batches.
func TestEpochAccuracyIsCounted(t *testing.T) {
	sized := func(seed uint64, sizes ...int) fixedBatches {
		var out fixedBatches
		for i, n := range sizes {
			b := toyData(t, seed+uint64(i), 1, n)
			out.x, out.y = append(out.x, b.x...), append(out.y, b.y...)
		}
		return out
	}
	for name, val := range map[string]fixedBatches{
		"one size":      toyData(t, 2, 3, 8),
		"many sizes":    sized(2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
		"over capacity": sized(2, correctRows+1, 5),
	} {
		m := trainerModel(t)
		tr, err := NewTrainer(TrainerOptions{Model: m, Train: toyData(t, 1, 5, 8), Val: val, Epochs: 2, Capture: true})
		require.NoError(t, err)
		sum, err := tr.Fit(context.Background())
		require.NoError(t, err)
		last := sum.Final()
		require.True(t, last.Captured, name)

		m.SetTraining(false)
		correct, total := 0, 0
		autograd.NoGrad(func() {
			for i, x := range val.x {
				logits := testdevice.F32(t, m.Forward(autograd.Const(x)).Value)
				for r, y := range testdevice.Host(t, val.y[i]).I64() {
					row := logits[r*3 : r*3+3]
					best := 0
					for j := range row {
						if row[j] > row[best] {
							best = j
						}
					}
					if int64(best) == y {
						correct++
					}
					total++
				}
			}
		})
		require.Equal(t, 100*float64(correct)/float64(total), last.ValAccuracy, name)
		trainCorrect := last.TrainAccuracy * 40 / 100
		require.InDelta(t, math.Round(trainCorrect), trainCorrect, 1e-9, "%s: train accuracy %v of 40 samples", name, last.TrainAccuracy)
	}
}

// lateOnce waits (WAIT) at once, except in epoch at, where it sleeps
// first.
type lateOnce struct {
	at    int
	sleep time.Duration
}

func (c lateOnce) EvaluateEpoch(ctx context.Context, s leyline.EpochState) (leyline.Decision, error) {
	if s.Signals.Metrics.Epoch == c.at {
		time.Sleep(c.sleep)
	}
	return leyline.Wait("nothing to do"), nil
}

// TestStatusMetricsSentOnChange: every epoch's METRICS event carries the
// training figures; the deadline/failure/rollback block and the
// aggregation block come in the first epoch and then only when a value
// changes (here the timeout counter, after a late controller).
func TestStatusMetricsSentOnChange(t *testing.T) {
	m := trainerModel(t)
	rec := &recorder{}
	ctl := lateOnce{at: 2, sleep: 80 * time.Millisecond}
	tr, err := NewTrainer(TrainerOptions{
		Model: m, Train: toyData(t, 1, 2, 8), Val: toyData(t, 2, 1, 8), Epochs: 4, Sink: rec,
		Controller: ctl, Deadlines: DeadlineOptions{Controller: 30 * time.Millisecond},
	})
	require.NoError(t, err)
	_, err = tr.Fit(context.Background())
	require.NoError(t, err)
	tr.deadlines.Drain()
	perEpoch := map[int]map[string]float64{}
	for _, e := range rec.all() {
		p, ok := e.Data.(*leyline.MetricsPayload)
		if !ok || e.Type != leyline.EventMetrics || p.Source != "tolaria" || e.Epoch == nil || e.Message != "" {
			continue
		}
		got := map[string]float64{}
		for _, mt := range p.Metrics {
			got[mt.Name] = mt.Value
		}
		perEpoch[*e.Epoch-1] = got // events number epochs from 1
	}
	require.Len(t, perEpoch, 4)
	for e := 0; e < 4; e++ {
		require.Contains(t, perEpoch[e], leyline.MetricTolariaTrainingLoss, "epoch %d", e)
	}
	require.Contains(t, perEpoch[0], leyline.MetricTolariaTimeoutTamiyoTotal)
	require.Contains(t, perEpoch[0], leyline.MetricTolariaBreakerState)
	require.Contains(t, perEpoch[0], leyline.MetricTolariaGradAggConflictRatio)
	require.NotContains(t, perEpoch[1], leyline.MetricTolariaTimeoutTamiyoTotal, "unchanged: not resent")
	require.NotContains(t, perEpoch[1], leyline.MetricTolariaGradAggConflictRatio, "unchanged: not resent")
	require.Equal(t, 1.0, perEpoch[2][leyline.MetricTolariaTimeoutTamiyoTotal], "the timeout at epoch 2 is sent")
}

// TestHistoryKeepsTheLatestEpochs: with History set, Summary holds the
// latest History reports, oldest first; a negative History is refused.
func TestHistoryKeepsTheLatestEpochs(t *testing.T) {
	_, err := NewTrainer(TrainerOptions{Model: trainerModel(t), Train: toyData(t, 1, 1, 4), Val: toyData(t, 2, 1, 4), Epochs: 1, History: -1})
	require.ErrorIs(t, err, ErrOptions)
	tr, err := NewTrainer(TrainerOptions{Model: trainerModel(t), Train: toyData(t, 1, 1, 4), Val: toyData(t, 2, 1, 4), Epochs: 7, History: 3})
	require.NoError(t, err)
	sum, err := tr.Fit(context.Background())
	require.NoError(t, err)
	require.Len(t, sum.Epochs, 3)
	for i, r := range sum.Epochs {
		require.Equal(t, 4+i, r.Epoch)
	}
	require.Equal(t, 6, sum.Final().Epoch)
}

// drainCounter is a controller that counts Drain calls and the epochs
// whose training started after one.
type drainCounter struct {
	drains, decisions int
}

func (d *drainCounter) EvaluateEpoch(ctx context.Context, s leyline.EpochState) (leyline.Decision, error) {
	d.decisions++
	return leyline.Wait("test"), nil
}

func (d *drainCounter) Drain() { d.drains++ }

// TestTrainerDrainsItsController: a controller that implements Drainer is
// drained at the start of every epoch, before its training (so a forward
// it abandoned at a deadline never runs beside the next training step).
func TestTrainerDrainsItsController(t *testing.T) {
	c := &drainCounter{}
	tr, err := NewTrainer(TrainerOptions{
		Model: trainerModel(t), Train: toyData(t, 1, 2, 8), Val: toyData(t, 2, 1, 8), Epochs: 3, Controller: c,
	})
	require.NoError(t, err)
	for e := 0; e < 3; e++ {
		_, err := tr.RunEpoch(context.Background(), e)
		require.NoError(t, err)
		require.Equal(t, e+1, c.drains, "epoch %d", e)
	}
	require.Equal(t, 3, c.decisions)
}

// TestGraphTelemetry: every epoch reports tolaria.train.graph_enabled,
// tolaria.graph_fallback, tolaria.graph.capture_ms and
// tolaria.graph.replays_total — with capture on, graphs are recorded
// (capture time > 0 after the first epoch) and replayed (the count grows
// every epoch); with capture off, all four are 0.
func TestGraphTelemetry(t *testing.T) {
	for _, capture := range []bool{true, false} {
		rec := &recorder{}
		tr, err := NewTrainer(TrainerOptions{
			Model: trainerModel(t), Train: toyData(t, 1, 4, 8), Val: toyData(t, 2, 2, 8),
			Epochs: 3, HostLR: 0.05, Capture: capture, Sink: rec,
		})
		require.NoError(t, err)
		for e := 0; e < 3; e++ {
			_, err := tr.RunEpoch(context.Background(), e)
			require.NoError(t, err)
		}
		var enabled, fallback, captureMs, replays []float64
		for _, e := range rec.all() {
			if p, ok := e.Data.(*leyline.MetricsPayload); ok && e.Type == leyline.EventMetrics && p.Source == "tolaria" {
				enabled = append(enabled, metricValue(t, p.Metrics, leyline.MetricTolariaTrainGraphEnabled))
				fallback = append(fallback, metricValue(t, p.Metrics, leyline.MetricTolariaGraphFallback))
				captureMs = append(captureMs, metricValue(t, p.Metrics, leyline.MetricTolariaGraphCaptureMs))
				replays = append(replays, metricValue(t, p.Metrics, leyline.MetricTolariaGraphReplaysTotal))
			}
		}
		require.Len(t, enabled, 3, "capture %v", capture)
		require.Equal(t, []float64{0, 0, 0}, fallback)
		if !capture {
			require.Equal(t, []float64{0, 0, 0}, enabled)
			require.Equal(t, []float64{0, 0, 0}, captureMs)
			require.Equal(t, []float64{0, 0, 0}, replays)
			continue
		}
		require.Equal(t, []float64{1, 1, 1}, enabled)
		require.Greater(t, captureMs[2], 0.0, "graphs were recorded")
		require.Less(t, replays[0], replays[1], "replays grow every epoch: %v", replays)
		require.Less(t, replays[1], replays[2], "replays grow every epoch: %v", replays)
	}
}

// TestDecisionsAreLogged: every structural decision goes out as
// MORPHOLOGY_CAUSAL_LOG with its epoch, slot, blueprint, the
// controller's reason and whether Kasmina carried it out (a refused one
// says why); WAITs send none.
func TestDecisionsAreLogged(t *testing.T) {
	rec := &recorder{}
	ctl := scripted{
		0: script[0],
		1: {Op: leyline.OpGerminate, SlotID: "r0c1", Blueprint: leyline.BlueprintNorm, Reason: "again", Confidence: 1},
		2: script[1],
	}
	tr, err := NewTrainer(TrainerOptions{Model: trainerModel(t), Train: toyData(t, 1, 2, 8), Val: toyData(t, 2, 1, 8), Epochs: 4, Controller: ctl, Sink: rec, HostLR: 0.05})
	require.NoError(t, err)
	sum, err := tr.Fit(context.Background())
	require.NoError(t, err)
	var logs []*leyline.MorphologyCausalLogPayload
	for _, e := range rec.all() {
		if p, ok := e.Data.(*leyline.MorphologyCausalLogPayload); ok {
			require.Equal(t, leyline.EventMorphologyCausalLog, e.Type)
			require.Equal(t, p.Epoch, *e.Epoch)
			logs = append(logs, p)
		}
	}
	require.Len(t, logs, 3, "three decisions, the WAIT of epoch 4 not logged")
	require.Equal(t, "GERMINATE", logs[0].Op)
	require.True(t, logs[0].Success)
	require.Equal(t, 1, logs[0].Epoch)
	require.Equal(t, "r0c1", logs[0].SlotID)
	require.Equal(t, leyline.BlueprintConvLight.String(), logs[0].BlueprintID)
	require.Equal(t, "script", logs[0].Reason)
	require.Equal(t, sum.Epochs[0].ValAccuracy, *logs[0].AccuracyBefore)
	require.False(t, logs[1].Success, "the slot is taken")
	require.Contains(t, logs[1].Reason, "again (refused: ")
	require.Equal(t, "ADVANCE", logs[2].Op)
	require.Empty(t, logs[2].BlueprintID)
}

// TestGraphKeyFollowsWhatAReplayReads: the captured graphs' keys
// (graphKey) change with what a replay reads and only with that. A seed
// germinated but not yet in the forward pass leaves the validation key
// as it was and, until its optimizer exists, the train key too; an
// optimizer made for a seed in the forward pass (which moves the seed's
// weights into its arena) changes both keys; so does a blend algorithm
// changed without a new slot version (ADD to MULTIPLY while HOLDING),
// and the prune gives back the keys of the host alone.
func TestGraphKeyFollowsWhatAReplayReads(t *testing.T) {
	m := newModel(t, nil)
	d := toyData(t, 1, 1, 4)
	tr, err := NewTrainer(TrainerOptions{Model: m, Train: d, Val: d, Epochs: 1, Capture: true})
	require.NoError(t, err)
	id := m.SlotIDs()[1]
	host := [2]uint64{tr.graphKey(false), tr.graphKey(true)}
	keys := func() [2]uint64 { return [2]uint64{tr.graphKey(false), tr.graphKey(true)} }
	require.NotEqual(t, host[0], host[1], "train and validation keys differ")

	s := germinate(t, m, id)
	require.Equal(t, host, keys(), "germinated, no optimizer yet: nothing a replay reads changed")
	require.NoError(t, tr.opt.sync(m))
	germ := keys()
	require.Equal(t, host[0], germ[0], "the validation pass does not read a germinated seed")
	require.NotEqual(t, host[1], germ[1], "the train step runs the seed's optimizer")

	// In the forward pass without an optimizer, then with one: the
	// weights moved into its arena (another slot: the pruned one is
	// embargoed).
	pruned, err := m.PruneSeed(id, "test", "test")
	require.NoError(t, err)
	require.True(t, pruned)
	require.NoError(t, tr.opt.sync(m))
	require.Equal(t, host, keys(), "pruned: the host alone again")
	id = m.SlotIDs()[2]
	s = germinate(t, m, id)
	advanceTo(t, s, leyline.StageTraining)
	before := keys()
	require.NotEqual(t, host[0], before[0], "a seed in the forward pass")
	require.NoError(t, tr.opt.sync(m))
	after := keys()
	require.NotEqual(t, before[0], after[0], "validation key after the optimizer moved the seed's weights")
	require.NotEqual(t, before[1], after[1], "train key after the optimizer moved the seed's weights")

	advanceTo(t, s, leyline.StageHolding)
	require.NoError(t, tr.opt.sync(m))
	hold := keys()
	v := s.Version()
	ok, err := s.SetAlphaTarget(1, leyline.BlendMultiply, kasmina.RampOptions{})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, v, s.Version(), "ADD to MULTIPLY keeps the slot version")
	require.NoError(t, tr.opt.sync(m))
	mult := keys()
	require.NotEqual(t, hold[0], mult[0], "validation key after the blend algorithm changed")
	require.NotEqual(t, hold[1], mult[1], "train key after the blend algorithm changed")

	pruned, err = m.PruneSeed(id, "test", "test")
	require.NoError(t, err)
	require.True(t, pruned)
	require.NoError(t, tr.opt.sync(m))
	require.Equal(t, host, keys(), "both pruned: the host alone again")
}
