package tolaria

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// simRun trains a fresh hostTrainerModel on dev (moved there before the
// trainer is built; the batches are o's, hostToyData's CPU tensors but
// for crashOptions' test-device ones, which the trainer copies to dev)
// under the lifecycle script, and returns the summary and the final
// parameters (copied to the host).
func simRun(t *testing.T, dev tensor.Device, o TrainerOptions) (Summary, map[string][]float32) {
	t.Helper()
	m := hostTrainerModel(t)
	require.NoError(t, nn.To(m, dev))
	o.Model = m
	tr, err := NewTrainer(o)
	require.NoError(t, err)
	sum, err := tr.Fit(context.Background())
	require.NoError(t, err)
	return sum, params(t, m)
}

// sameReports requires the epoch reports of two runs to be equal bit
// for bit, the wall times (copy time included) and host syncs aside.
func sameReports(t *testing.T, want, got []EpochReport) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	for i := range want {
		w, g := want[i], got[i]
		for _, r := range []*EpochReport{&w, &g} {
			r.Duration, r.StepP50, r.StepP95, r.HostSyncs, r.H2DCopy = 0, 0, 0, 0, 0
		}
		if math.IsNaN(w.ValLoss) && math.IsNaN(g.ValLoss) {
			w.ValLoss, g.ValLoss = 0, 0 // NaN on both: equal, as far as a run goes
		}
		require.Equal(t, w, g, "epoch %d", i)
	}
}

// TestTrainerOnSimEqualsCPU: the lifecycle run (germinate r0c1 after
// epoch 0, advance it to TRAINING after epoch 1, germinate r0c0 after
// epoch 2) with the model moved to sim gives the CPU's epoch reports
// (losses, accuracies, decisions, seeds, aggregation figures) and final
// parameters bit for bit — the same kernels on device tensors, every
// host read explicit — and a bounded number of host syncs per epoch.
//
// The syncs per epoch on sim (5 steps of 8, GradientTelemetryStride 10,
// so the gradient telemetry runs at global steps 10 and 20, the last
// steps of epochs 1 and 3): exactly 1, the training pass's loss sum and
// correct count and the validation pass's, copied side by side after the
// last validation batch. A telemetry step reads nothing: kasmina's
// gradient telemetry of every slot computes the per-parameter norms of
// the seeds' and the host's gradients on the device
// (MorphogeneticModel.LaunchGradientTelemetry), with one TRAINING seed
// the per-seed aggregation metrics' norms among them, and they come to
// the host with the epoch's metrics in the same read (tensor.ToHostMany).
// The telemetry's figures stay host computations because they are
// float64 reductions the CPU computes on the host: doing them on the
// device would change their bits.
func TestTrainerOnSimEqualsCPU(t *testing.T) {
	o := TrainerOptions{Train: hostToyData(1, 5, 8), Val: hostToyData(2, 2, 8), Epochs: 4, Controller: script, HostLR: 0.05}
	want, wp := simRun(t, tensor.CPU, o)
	got, gp := simRun(t, tensor.Sim(0), o)
	sameReports(t, want.Epochs, got.Epochs)
	require.Equal(t, wp, gp, "final parameters")
	require.Equal(t, want.Germinated, got.Germinated)
	syncs := make([]uint64, len(got.Epochs))
	for i, r := range got.Epochs {
		require.Zero(t, want.Epochs[i].HostSyncs, "the cpu never syncs")
		syncs[i] = r.HostSyncs
	}
	t.Logf("host syncs per epoch on sim: %v", syncs)
	require.Equal(t, []uint64{1, 1, 1, 1}, syncs)
}

// TestTrainerOnSimNoSeedsOneSync: without seeds (no controller) every
// epoch on sim costs exactly one host sync — the training and the
// validation accumulators, read together — and tolaria.host_syncs says
// so; the CPU run it equals bit for bit sends 0.
func TestTrainerOnSimNoSeedsOneSync(t *testing.T) {
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(1)} {
		rec := &recorder{}
		o := TrainerOptions{Train: hostToyData(1, 5, 8), Val: hostToyData(2, 2, 8), Epochs: 3, Sink: rec}
		sum, _ := simRun(t, dev, o)
		want := 1.0
		if dev.IsCPU() {
			want = 0
		}
		for _, r := range sum.Epochs {
			require.Equal(t, uint64(want), r.HostSyncs, "%v epoch %d", dev, r.Epoch)
		}
		var sent []float64
		for _, e := range rec.all() {
			if p, ok := e.Data.(*leyline.MetricsPayload); ok && e.Type == leyline.EventMetrics && p.Source == "tolaria" {
				sent = append(sent, metricValue(t, p.Metrics, leyline.MetricTolariaHostSyncs))
			}
		}
		require.Equal(t, []float64{want, want, want}, sent, "%v: tolaria.host_syncs per epoch", dev)
	}
}

// TestPCGradOnSimAgreesWithCPU: two seeds in TRAINING under PCGrad on
// sim take the device path (flat buffer, per-seed split, projections
// and the epoch's sums on the device) and agree with the CPU's host path
// within float32 rounding: the same steps combined, losses, accuracies,
// conflict ratio and teacher share within 1e-4 relative, the final
// parameters within 1e-4. The combining steps read nothing back, nor do
// the telemetry steps: each epoch costs one read, the accumulators' and
// the aggregation's device sums together, whatever the number of steps,
// with kasmina's gradient telemetry (every 10 steps) or without.
func TestPCGradOnSimAgreesWithCPU(t *testing.T) {
	run := func(dev tensor.Device, steps, stride int) (Summary, map[string][]float32) {
		m := twoSeedModelOn(t, dev, 2)
		tr, err := NewTrainer(TrainerOptions{
			Model: m, Train: toyDataOn(t, dev, 1, steps, 16), Val: toyDataOn(t, dev, 2, 2, 16),
			Epochs: 3, PCGrad: true, Seed: 5, HostLR: 0.05, GradientTelemetryStride: stride,
		})
		require.NoError(t, err)
		sum, err := tr.Fit(context.Background())
		require.NoError(t, err)
		return sum, params(t, m)
	}
	want, wp := run(tensor.CPU, 6, 0)
	got, gp := run(tensor.Sim(0), 6, 0)
	close := func(what string, w, g float64) {
		t.Helper()
		require.InDelta(t, w, g, 1e-4*math.Max(1, math.Abs(w)), what)
	}
	for i := range want.Epochs {
		w, g := want.Epochs[i], got.Epochs[i]
		require.Equal(t, w.Steps, w.AggregatedSteps, "every CPU step combined")
		require.Equal(t, w.AggregatedSteps, g.AggregatedSteps, "epoch %d", i)
		close("train loss", w.TrainLoss, g.TrainLoss)
		close("val loss", w.ValLoss, g.ValLoss)
		close("train accuracy", w.TrainAccuracy, g.TrainAccuracy)
		close("conflict ratio", w.ConflictRatio, g.ConflictRatio)
		close("teacher share", w.TeacherShare, g.TeacherShare)
		require.Zero(t, w.HostSyncs)
	}
	for name, v := range wp {
		for j := range v {
			require.InDelta(t, v[j], gp[name][j], 1e-4, "%s[%d]", name, j)
		}
	}
	// 6 or 12 steps, telemetry or not: one sync per epoch — no per-step
	// read.
	for _, steps := range []int{6, 12} {
		for _, stride := range []int{-1, 0} {
			few, _ := run(tensor.Sim(0), steps, stride)
			for i, r := range few.Epochs {
				require.Equal(t, uint64(1), r.HostSyncs, "%d steps, stride %d, epoch %d", steps, stride, i)
			}
		}
	}
}

// TestCheckpointResumeOnSim: a run on sim that stops after 2 of 4
// epochs, resumed on sim from its checkpoint by a fresh trainer, ends
// with the uninterrupted CPU run's reports and parameters bit for bit.
func TestCheckpointResumeOnSim(t *testing.T) {
	cpu := crashOptions(t, t.TempDir())
	want, wp := simRun(t, tensor.CPU, cpu)

	dir := t.TempDir()
	first := crashOptions(t, dir)
	first.Epochs = 2
	simRun(t, tensor.Sim(0), first)

	o := crashOptions(t, dir)
	m := o.Model
	require.NoError(t, nn.To(m, tensor.Sim(0)))
	tr, err := NewTrainer(o)
	require.NoError(t, err)
	next, err := tr.Resume()
	require.NoError(t, err)
	require.Equal(t, 2, next)
	got, err := tr.Fit(context.Background())
	require.NoError(t, err)
	sameReports(t, want.Epochs, got.Epochs)
	require.Equal(t, wp, params(t, m), "final parameters")
}

// TestTrainerVariantsOnSimEqualCPU: the lifecycle run of
// TestTrainerOnSimEqualsCPU with the governor, fp16 and bf16 autocast,
// the captured step, and the fast rollback tier: on sim each gives the
// CPU's reports and final parameters bit for bit, and syncs once per
// epoch, as the plain run does: fp16 too, whose telemetry steps (the
// last of epochs 1 and 3) queue the scaler's found-inf flag with the
// seeds' norms, read with the epoch's accumulators.
func TestTrainerVariantsOnSimEqualCPU(t *testing.T) {
	plain := []uint64{1, 1, 1, 1}
	for _, tc := range []struct {
		name  string
		o     TrainerOptions
		syncs []uint64
	}{
		{"governor", TrainerOptions{Governor: &GovernorOptions{Classes: 3}}, plain},
		{"fp16", TrainerOptions{AMP: AMPFP16}, plain},
		{"bf16", TrainerOptions{AMP: AMPBF16}, plain},
		{"capture", TrainerOptions{Capture: true}, plain},
		{"fast rollback", TrainerOptions{FastRollbackMB: 8, RollbackOnFailure: true}, plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Train, o.Val, o.Epochs, o.Controller, o.HostLR = hostToyData(1, 5, 8), hostToyData(2, 2, 8), 4, script, 0.05
			want, wp := simRun(t, tensor.CPU, o)
			got, gp := simRun(t, tensor.Sim(0), o)
			sameReports(t, want.Epochs, got.Epochs)
			require.Equal(t, wp, gp, "final parameters")
			var syncs []uint64
			for _, r := range got.Epochs {
				syncs = append(syncs, r.HostSyncs)
			}
			require.Equal(t, tc.syncs, syncs, "host syncs per epoch")
		})
	}
}

// TestFP16OverflowAtATelemetryStepOnSim: under fp16 a telemetry step
// whose gradients overflowed is not observed by the gradient
// aggregation, though its norms come to the host only with the epoch's
// read. The lifecycle run's last telemetry step (global step 20, epoch
// 3's last, one TRAINING seed taking part) is made to overflow by a loss
// scale of 3e38 loaded just before it (and 65536 again after it): that
// epoch records no teacher share, where the run without the overflow
// records one. On sim each run gives the CPU's reports and parameters
// bit for bit and syncs once per epoch.
func TestFP16OverflowAtATelemetryStepOnSim(t *testing.T) {
	run := func(dev tensor.Device, overflow bool) (Summary, map[string][]float32) {
		m := hostTrainerModel(t)
		require.NoError(t, nn.To(m, dev))
		var tr *Trainer
		steps := 0
		setScale := func(scale float32) {
			sd := map[string]*tensor.Tensor{"scale": tensor.FromSlice([]float32{scale}, 1), "growth_tracker": tensor.Zeros(tensor.I32, 1)}
			require.NoError(t, tr.Scaler().LoadStateDict(sd))
		}
		o := TrainerOptions{Model: m, AMP: AMPFP16, Train: hostToyData(1, 5, 8), Val: hostToyData(2, 2, 8), Epochs: 4, Controller: script, HostLR: 0.05}
		o.OnStep = func(StepInfo) {
			steps++
			switch {
			case overflow && steps == 19:
				setScale(3e38)
			case overflow && steps == 20:
				setScale(65536)
			}
		}
		var err error
		tr, err = NewTrainer(o)
		require.NoError(t, err)
		sum, err := tr.Fit(context.Background())
		require.NoError(t, err)
		require.Equal(t, 20, steps)
		return sum, params(t, m)
	}
	var share [2]float64
	for k, overflow := range []bool{false, true} {
		want, wp := run(tensor.CPU, overflow)
		got, gp := run(tensor.Sim(0), overflow)
		sameReports(t, want.Epochs, got.Epochs)
		require.Equal(t, wp, gp, "final parameters")
		for i, r := range got.Epochs {
			require.Equal(t, uint64(1), r.HostSyncs, "overflow %v, epoch %d", overflow, i)
		}
		share[k] = got.Epochs[3].TeacherShare
	}
	require.Positive(t, share[0], "the clean run observes its telemetry step")
	require.Zero(t, share[1], "the overflowed telemetry step is not observed")
}

// TestTwoTrainingSeedsOnSim: with both seeds TRAINING (r0c0 advanced
// after epoch 3), the per-seed aggregation metrics go through the
// device path (two participants: the flattened gradient split per seed,
// the sums kept on the device); the run still equals the CPU's bit for
// bit, aggregation figures included. Epoch 5's last step (global step
// 30) is a telemetry step with two participants, and reads nothing
// there: the seeds' norms wait on the device and the aggregation's
// device sums come with the epoch's one read, so every epoch syncs once.
func TestTwoTrainingSeedsOnSim(t *testing.T) {
	sc := scripted{3: {Op: leyline.OpAdvance, SlotID: "r0c0", Reason: "script", Confidence: 1}}
	for k, v := range script {
		sc[k] = v
	}
	o := TrainerOptions{Train: hostToyData(1, 5, 8), Val: hostToyData(2, 2, 8), Epochs: 6, Controller: sc, HostLR: 0.05}
	want, wp := simRun(t, tensor.CPU, o)
	got, gp := simRun(t, tensor.Sim(0), o)
	sameReports(t, want.Epochs, got.Epochs)
	require.Equal(t, wp, gp, "final parameters")
	var syncs []uint64
	for _, r := range got.Epochs {
		syncs = append(syncs, r.HostSyncs)
	}
	require.Equal(t, []uint64{1, 1, 1, 1, 1, 1}, syncs)
	require.Positive(t, got.Epochs[5].TeacherShare, "the two participants are observed")
	for _, s := range got.Final().Seeds {
		require.Equal(t, leyline.StageTraining, s.Stage, s.SlotID)
	}
}

// TestGovernorRollbackOnSim: a NaN validation loss at epoch 2 makes the
// governor roll the model on sim back to its snapshot, as on the CPU:
// the same reports (the rollback, its reason, the pruned seed) and final
// parameters bit for bit; GOVERNOR_ROLLBACK names sim:0.
func TestGovernorRollbackOnSim(t *testing.T) {
	o := TrainerOptions{
		Train: hostToyData(1, 3, 8), Val: poisonedVal{hostToyData(2, 1, 8), 2}, Epochs: 4,
		Controller: script, Governor: &GovernorOptions{Classes: 3},
	}
	want, wp := simRun(t, tensor.CPU, o)
	rec := &recorder{}
	o.Sink = rec
	got, gp := simRun(t, tensor.Sim(0), o)
	require.True(t, want.Epochs[2].RolledBack)
	sameReports(t, want.Epochs, got.Epochs)
	require.Equal(t, wp, gp, "final parameters")
	var devices []string
	for _, e := range rec.all() {
		if p, ok := e.Data.(*leyline.GovernorRollbackPayload); ok {
			devices = append(devices, p.Device)
		}
	}
	require.Equal(t, []string{"sim:0"}, devices, "the rollback event names the model's device")
}

// TestHostReadInsideAStepOnSim: the sync counter catches a host read the
// step should not make. An explicit copy of a gradient after backward
// (the test hook) adds one host sync per step to the epoch's count; a
// host accessor on a device tensor instead fails the epoch, naming the
// device.
func TestHostReadInsideAStepOnSim(t *testing.T) {
	build := func() *Trainer {
		m := hostTrainerModel(t)
		require.NoError(t, nn.To(m, tensor.Sim(0)))
		tr, err := NewTrainer(TrainerOptions{Model: m, Train: hostToyData(1, 5, 8), Val: hostToyData(2, 2, 8), Epochs: 1})
		require.NoError(t, err)
		return tr
	}
	tr := build()
	w := tr.model.HostParameters()[0]
	tr.step.afterBackward = func() {
		_, err := w.Grad.ToDevice(tensor.CPU)
		require.NoError(t, err)
	}
	r, err := tr.RunEpoch(context.Background(), 0)
	require.NoError(t, err)
	require.Equal(t, uint64(1+5), r.HostSyncs, "the accumulators' one read and one per step")

	tr = build()
	w = tr.model.HostParameters()[0]
	tr.step.afterBackward = func() { _ = w.Grad.F32() }
	_, err = tr.RunEpoch(context.Background(), 0)
	require.ErrorContains(t, err, "sim:0")
}
