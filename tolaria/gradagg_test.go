package tolaria

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria/aggregation"
	"github.com/esper-go/esper/tolaria/rollback"
)

// twoSeedModel is trainerModel (on the test device) with a conv_light
// seed in TRAINING in each of its two slots (or only r0c1 with one seed).
func twoSeedModel(t *testing.T, seeds int) *kasmina.MorphogeneticModel {
	t.Helper()
	return twoSeedModelOn(t, testdevice.Device(t), seeds)
}

// twoSeedModelOn is twoSeedModel on dev.
func twoSeedModelOn(t *testing.T, dev tensor.Device, seeds int) *kasmina.MorphogeneticModel {
	t.Helper()
	m := hostTrainerModel(t)
	require.NoError(t, nn.To(m, dev))
	for _, id := range []string{"r0c1", "r0c0"}[:seeds] {
		advanceTo(t, germinate(t, m, id), leyline.StageTraining)
	}
	return m
}

// pcgradDevice is where a test with PCGrad on or off builds its model:
// the test device either way (PCGrad combines on the device there).
func pcgradDevice(t *testing.T, _ bool) tensor.Device { return testdevice.Device(t) }

// toyDataOn is the toy task's batches for a model on dev: host tensors
// for the CPU, the test device's otherwise.
func toyDataOn(t *testing.T, dev tensor.Device, seed uint64, batches, batch int) fixedBatches {
	t.Helper()
	if dev.IsCPU() {
		return hostToyData(seed, batches, batch)
	}
	return toyData(t, seed, batches, batch)
}

// epochMetrics returns the metrics of the METRICS event (the one without
// a Message) of the epoch of index epoch, which events number epoch+1.
func epochMetrics(t *testing.T, rec *recorder, epoch int) []leyline.Metric {
	t.Helper()
	for _, e := range rec.all() {
		p, ok := e.Data.(*leyline.MetricsPayload)
		if ok && e.Type == leyline.EventMetrics && e.Message == "" && e.Epoch != nil && *e.Epoch == epoch+1 {
			return p.Metrics
		}
	}
	t.Fatalf("no METRICS event for epoch %d", epoch)
	return nil
}

// TestPCGradTwoSeedsEmitsAggregationMetrics: with two seeds in TRAINING
// and PCGrad on, every step combines the seeds' gradients through one
// pooled buffer, and the epoch's METRICS event carries tolaria.grad_agg.*
// and per-seed tolaria.grad_agg.seed.* metrics with seed_id and stage.
func TestPCGradTwoSeedsEmitsAggregationMetrics(t *testing.T) {
	m := twoSeedModel(t, 2)
	rec := &recorder{}
	tr, err := NewTrainer(TrainerOptions{
		Model: m, Train: toyData(t, 1, 6, 16), Val: toyData(t, 2, 2, 16), Epochs: 3,
		PCGrad: true, Seed: 5, Sink: rec, HostLR: 0.05,
	})
	require.NoError(t, err)
	sum, err := tr.Fit(context.Background())
	require.NoError(t, err)
	for _, r := range sum.Epochs {
		require.Equal(t, r.Steps, r.AggregatedSteps, "every step combined")
		require.Greater(t, r.TeacherShare, 0.0, "the host's gradient was redistributed")
		require.False(t, r.Captured)
	}
	require.Less(t, sum.Final().TrainLoss, sum.Epochs[0].TrainLoss, "still trains")
	ps := tr.PoolStats()
	require.Equal(t, 1, ps.Allocated, "one flat buffer, reused")
	require.Zero(t, ps.InUse)

	ms := epochMetrics(t, rec, 0)
	global := map[string]float64{}
	perSeed := map[string]map[string]string{} // name|seed → stage
	for _, mt := range ms {
		if mt.Attributes == nil {
			global[mt.Name] = mt.Value
			continue
		}
		if strings.HasPrefix(mt.Name, "tolaria.grad_agg.seed.") {
			key := mt.Name + "|" + mt.Attributes[aggregation.AttrSeedID]
			perSeed[key] = mt.Attributes
		}
	}
	for _, name := range []string{
		leyline.MetricTolariaGradAggMicrobatchesTotal, leyline.MetricTolariaGradAggConflicts,
		leyline.MetricTolariaGradAggWeightsMean, leyline.MetricTolariaGradAggPCGradApplied,
		leyline.MetricTolariaGradAggConflictRatio, leyline.MetricTolariaGradAggTeacherShare,
	} {
		require.Contains(t, global, name)
	}
	require.Equal(t, float64(sum.Epochs[0].Steps), global[leyline.MetricTolariaGradAggMicrobatchesTotal])
	require.Equal(t, sum.Epochs[0].TeacherShare, global[leyline.MetricTolariaGradAggTeacherShare])
	require.Equal(t, 1.0, global[leyline.MetricTolariaTrainForeachEnabled])
	for _, sid := range seedIDs(m) {
		for _, name := range []string{
			leyline.MetricTolariaGradAggSeedWeight, leyline.MetricTolariaGradAggSeedNorm,
			leyline.MetricTolariaGradAggSeedShare, leyline.MetricTolariaGradAggSeedConflictRatio,
			leyline.MetricTolariaGradAggSeedTeacherShare, leyline.MetricTolariaGradAggSeedParams,
			leyline.MetricTolariaGradAggSeedMaskFraction,
		} {
			attrs, ok := perSeed[name+"|"+sid]
			require.True(t, ok, "%s for seed %s", name, sid)
			require.Equal(t, "TRAINING", attrs[aggregation.AttrStage])
		}
	}
	attrs, ok := perSeed[leyline.MetricTolariaGradAggSeedNorm+"|"+aggregation.TeacherID]
	require.True(t, ok, "the teacher reports its norm")
	require.Equal(t, aggregation.TeacherStage, attrs[aggregation.AttrStage])

	// First epoch: each seed's share jumps from the 0 baseline to ~0.5.
	jumps := rec.named(aggregation.EventSeedShareJump)
	require.Len(t, jumps, 2)
	require.Equal(t, leyline.SeverityWarning, jumps[0].Severity)
}

func seedIDs(m *kasmina.MorphogeneticModel) []string {
	var out []string
	for _, s := range m.Slots() {
		if st := s.State(); st != nil {
			out = append(out, st.SeedID)
		}
	}
	return out
}

// fillGrads writes reproducible random values into the gradients of the
// aggregation layout's parameters and returns the flat gradient.
func fillGrads(t *testing.T, tr *Trainer, seed uint64) []float32 {
	t.Helper()
	require.Equal(t, 2, tr.agg.participants(tr.model, tr.opt))
	l, err := tr.agg.layout(tr.model, tr.opt)
	require.NoError(t, err)
	rng := tensor.NewRNG(seed)
	for _, p := range l.params {
		g := p.Grad.F32()
		for i := range g {
			g[i] = float32(rng.NormFloat64())
		}
	}
	flat := make([]float32, l.masks.Total())
	require.NoError(t, aggregation.GradsToFlat(l.params, flat))
	return flat
}

// TestCombineStepCountsConflicts drives the combining step directly. With
// kasmina's uniform attribution the per-seed vectors cannot conflict:
// each seed's own parameters are disjoint from the others' and every seed
// gets a non-negative share of the same teacher vector, so PCGrad finds
// nothing and the gradient comes back as it was. An attribution that
// credits one seed negatively (a seed that hurt the batch) makes the two
// vectors' teacher parts opposed: one conflict, and the gradient written
// back is PCGrad's, as aggregation.Combine computes it with the same
// generator.
func TestCombineStepCountsConflicts(t *testing.T) {
	m := twoSeedModelOn(t, tensor.CPU, 2)
	tr, err := NewTrainer(TrainerOptions{Model: m, Train: hostToyData(1, 1, 4), Val: hostToyData(2, 1, 4), Epochs: 1, PCGrad: true, Seed: 9})
	require.NoError(t, err)
	require.NoError(t, tr.opt.sync(m))
	tr.agg.beginEpoch()
	ids := seedIDs(m)

	// Uniform attribution: no conflict, gradient unchanged.
	before := fillGrads(t, tr, 1)
	res, err := tr.agg.combine(m, tr.opt, nil, nil, nil)
	require.NoError(t, err)
	require.Equal(t, aggStepResult{Participants: 2, Conflicts: 0}, res)
	after := make([]float32, len(before))
	require.NoError(t, aggregation.GradsToFlat(tr.agg.lay.params, after))
	require.Equal(t, before, after, "halves of the teacher add back exactly")

	// Opposed attribution: one conflict, PCGrad's result written back.
	before = fillGrads(t, tr, 2)
	attrib := map[string]float64{ids[0]: 2, ids[1]: -1}
	var split aggregation.SeedGrads
	seeds := map[string]aggregation.SeedInfo{}
	for _, s := range tr.agg.cur {
		seeds[s.id] = aggregation.SeedInfo{Stage: s.stage, Alpha: s.alpha}
	}
	require.NoError(t, aggregation.PerSeed(&split, [][]float32{before}, tr.agg.lay.masks, attrib, 1, seeds))
	var flats [][]float32
	for _, f := range split.Flats {
		flats = append(flats, append([]float32(nil), f...))
	}
	// The trainer's generator has drawn one order so far (the first
	// combine); replay that draw on a twin.
	twin := rand.New(rand.NewPCG(9, 9^aggregationRNGSalt))
	_, _, err = aggregation.Combine([][]float32{{1}, {1}}, true, nil, twin)
	require.NoError(t, err)
	want, conflicts, err := aggregation.Combine(flats, true, nil, twin)
	require.NoError(t, err)
	require.Equal(t, 1, conflicts)

	res, err = tr.agg.combine(m, tr.opt, nil, nil, attrib)
	require.NoError(t, err)
	require.Equal(t, aggStepResult{Participants: 2, Conflicts: 1}, res)
	require.NoError(t, aggregation.GradsToFlat(tr.agg.lay.params, after))
	require.Equal(t, want, after)
	require.NotEqual(t, before, after, "the projection changed the gradient")

	var r EpochReport
	rep := tr.agg.finalize(&r)
	require.True(t, r.PCGradApplied)
	require.Equal(t, 2, r.AggregatedSteps)
	// The accumulator divides by the participants it saw minus one: the
	// two seeds and the teacher (whose norm it recorded).
	require.Equal(t, 0.5, r.ConflictRatio, "1 conflict / (3 − 1)")
	require.Equal(t, 1.0, metricValue(t, rep.Metrics, leyline.MetricTolariaGradAggConflicts))
	for _, mt := range rep.Metrics {
		if mt.Name == leyline.MetricTolariaGradAggSeedConflicts && mt.Attributes[aggregation.AttrSeedID] != aggregation.TeacherID {
			require.Equal(t, 1.0, mt.Value, "seed %s", mt.Attributes[aggregation.AttrSeedID])
		}
	}
}

// TestSingleSeedFastPath: with one seed, PCGrad on (on the CPU) or off
// (on the test device), no step combines and no buffer is acquired, yet
// the per-seed metrics are kept (share 1, the whole gradient's norm).
func TestSingleSeedFastPath(t *testing.T) {
	for _, pc := range []bool{true, false} {
		dev := pcgradDevice(t, pc)
		m := twoSeedModelOn(t, dev, 1)
		rec := &recorder{}
		tr, err := NewTrainer(TrainerOptions{
			Model: m, Train: toyDataOn(t, dev, 1, 6, 8), Val: toyDataOn(t, dev, 2, 1, 8), Epochs: 2,
			PCGrad: pc, Capture: true, GradientTelemetryStride: 2, Sink: rec,
		})
		require.NoError(t, err)
		sum, err := tr.Fit(context.Background())
		require.NoError(t, err)
		require.Equal(t, aggregation.PoolStats{}, tr.PoolStats(), "PCGrad %v: no buffer acquired", pc)
		require.Zero(t, sum.Final().AggregatedSteps)
		require.True(t, sum.Final().Captured, "PCGrad %v: one seed keeps the captured step", pc)
		require.Greater(t, sum.Final().TeacherShare, 0.0)
		ms := epochMetrics(t, rec, 1)
		share := math.NaN()
		for _, mt := range ms {
			if mt.Name == leyline.MetricTolariaGradAggSeedShare {
				share = mt.Value
			}
		}
		require.Equal(t, 1.0, share, "PCGrad %v", pc)
	}
}

// TestAggregationPoolDoesNotGrow: a thousand combining steps use one
// pooled buffer and hold none between steps.
func TestAggregationPoolDoesNotGrow(t *testing.T) {
	if testing.Short() {
		t.Skip("1000 training steps")
	}
	m := twoSeedModel(t, 2)
	d := toyData(t, 1, 4, 4)
	tr, err := NewTrainer(TrainerOptions{Model: m, Train: d, Val: d, Epochs: 1, PCGrad: true})
	require.NoError(t, err)
	require.NoError(t, tr.opt.sync(m))
	tr.agg.beginEpoch()
	for i := range 1000 {
		_, combined, err := tr.step.run(d.x[i%4], d.y[i%4])
		require.NoError(t, err)
		require.True(t, combined)
		ps := tr.PoolStats()
		require.Equal(t, 1, ps.Allocated, "step %d", i)
		require.Zero(t, ps.InUse, "step %d", i)
		require.Equal(t, 1, ps.Cached)
	}
	require.Equal(t, 999, tr.PoolStats().Reused)
}

// TestPCGradStepsRunEagerUnderCapture: with Capture on, a two-seed PCGrad
// epoch runs eagerly (no replay, no fallback; on the CPU), and PCGrad off
// keeps the captured step with the metrics-only accounting (on the test
// device).
func TestPCGradStepsRunEagerUnderCapture(t *testing.T) {
	for _, pc := range []bool{true, false} {
		dev := pcgradDevice(t, pc)
		m := twoSeedModelOn(t, dev, 2)
		tr, err := NewTrainer(TrainerOptions{Model: m, Train: toyDataOn(t, dev, 1, 5, 8), Val: toyDataOn(t, dev, 2, 1, 8), Epochs: 2, PCGrad: pc, Capture: true, GradientTelemetryStride: 1})
		require.NoError(t, err)
		sum, err := tr.Fit(context.Background())
		require.NoError(t, err)
		require.Zero(t, sum.CaptureFallbacks)
		require.Equal(t, !pc, sum.Final().Captured, "PCGrad %v", pc)
		if pc {
			require.Equal(t, 5, sum.Final().AggregatedSteps)
		} else {
			require.Zero(t, sum.Final().AggregatedSteps)
			require.Equal(t, 1, tr.PoolStats().Allocated, "observing steps reuse one buffer")
		}
	}
}

// TestPCGradCheckpointResumeIsExact: the PCGrad generator travels in the
// checkpoint, so a resumed two-seed PCGrad run ends bitwise where an
// uninterrupted one does.
func TestPCGradCheckpointResumeIsExact(t *testing.T) {
	opts := func(dir string) TrainerOptions {
		store, err := rollback.Open(dir, rollback.StoreOptions{})
		require.NoError(t, err)
		return TrainerOptions{Model: twoSeedModel(t, 2), Train: toyData(t, 1, 4, 8), Val: toyData(t, 2, 1, 8), Epochs: 3, PCGrad: true, Seed: 3, Checkpoints: store}
	}
	dir := t.TempDir()
	first, err := NewTrainer(opts(dir))
	require.NoError(t, err)
	_, err = first.RunEpoch(context.Background(), 0)
	require.NoError(t, err)
	resumed, err := NewTrainer(opts(dir))
	require.NoError(t, err)
	next, err := resumed.Resume()
	require.NoError(t, err)
	require.Equal(t, 1, next)
	_, err = resumed.Fit(context.Background())
	require.NoError(t, err)

	whole, err := NewTrainer(opts(t.TempDir()))
	require.NoError(t, err)
	_, err = whole.Fit(context.Background())
	require.NoError(t, err)
	want, got := params(t, whole.model), params(t, resumed.model)
	for name, v := range want {
		require.Equal(t, v, got[name], "parameter %s differs after resume", name)
	}
}

// BenchmarkTrainStepAggregation times one eager training step of the toy
// model with two seeds in TRAINING, PCGrad off and on (the combining
// path's overhead), and the observing path alone (the metrics-only
// accounting that runs every GradientTelemetryStride steps with PCGrad
// off), and the combining path alone.
func BenchmarkTrainStepAggregation(b *testing.B) {
	setup := func(b *testing.B, pcgrad bool) (*Trainer, fixedBatches) {
		t := &testing.T{} // the germination helpers take a *testing.T; they do not fail here
		m := twoSeedModelOn(t, tensor.CPU, 2)
		d := hostToyData(1, 4, 16)
		tr, err := NewTrainer(TrainerOptions{Model: m, Train: d, Val: d, Epochs: 1, PCGrad: pcgrad})
		if err != nil {
			b.Fatal(err)
		}
		if err := tr.opt.sync(m); err != nil {
			b.Fatal(err)
		}
		return tr, d
	}
	for _, pc := range []bool{false, true} {
		name := "pcgrad=off"
		if pc {
			name = "pcgrad=on"
		}
		b.Run(name, func(b *testing.B) {
			tr, d := setup(b, pc)
			i := 0
			for b.Loop() {
				if _, _, err := tr.step.run(d.x[i%4], d.y[i%4]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
	b.Run("combine", func(b *testing.B) {
		tr, d := setup(b, true)
		if _, _, err := tr.step.run(d.x[0], d.y[0]); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			tr.agg.participants(tr.model, tr.opt)
			if _, err := tr.agg.combine(tr.model, tr.opt, d.x[0], d.y[0], nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("observe", func(b *testing.B) {
		tr, d := setup(b, false)
		if _, _, err := tr.step.run(d.x[0], d.y[0]); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := tr.agg.observe(tr.model, tr.opt, d.x[0], d.y[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
