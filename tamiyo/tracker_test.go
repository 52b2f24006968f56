package tamiyo

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

func newTracker(t *testing.T, opts TrackerOptions) *SignalTracker {
	t.Helper()
	tr, err := NewSignalTracker(opts)
	require.NoError(t, err)
	return tr
}

// feed updates tr with one epoch per loss/accuracy pair and returns the
// signals of each.
func feed(t *testing.T, tr *SignalTracker, losses, accs []float64) []leyline.TrainingSignals {
	t.Helper()
	require.Len(t, accs, len(losses))
	out := make([]leyline.TrainingSignals, len(losses))
	for i := range losses {
		sig, err := tr.Update(EpochResult{Epoch: i, GlobalStep: 10 * i, ValLoss: losses[i], ValAccuracy: accs[i], AvailableSlots: 3})
		require.NoError(t, err)
		out[i] = sig
	}
	return out
}

func constant(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestTrackerDefaults(t *testing.T) {
	tr := newTracker(t, TrackerOptions{})
	o := tr.Options()
	assert.Equal(t, 0.5, o.PlateauThresholdPct)
	assert.Equal(t, 10, o.HistoryWindow)
	assert.Equal(t, 0.03, o.StabilizationThreshold)
	assert.Equal(t, 3, o.StabilizationEpochs)
	assert.Equal(t, 0.05, o.RegressionThreshold)
	assert.False(t, tr.IsStabilized())
}

func TestTrackerOptionsRejected(t *testing.T) {
	cases := []struct {
		name string
		opts TrackerOptions
	}{
		{"NaN plateau", TrackerOptions{PlateauThresholdPct: math.NaN()}},
		{"Inf stabilization", TrackerOptions{StabilizationThreshold: math.Inf(1)}},
		{"negative stabilization", TrackerOptions{StabilizationThreshold: -0.01}},
		{"negative regression", TrackerOptions{RegressionThreshold: -0.05}},
		{"negative window", TrackerOptions{HistoryWindow: -1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewSignalTracker(c.opts)
			assert.Error(t, err)
		})
	}
}

func TestTrackerDeltasAndPlateau(t *testing.T) {
	tr := newTracker(t, TrackerOptions{})
	accs := []float64{50, 50.25, 50.5, 51, 50.5, 50.75}
	losses := []float64{2, 1.5, 1.25, 1.25, 1.5, 1}
	sig := feed(t, tr, losses, accs)

	wantLossDelta := []float64{math.Inf(1), 0.5, 0.25, 0, -0.25, 0.5}
	wantAccDelta := []float64{50, 0.25, 0.25, 0.5, -0.5, 0.25}
	// 50 resets, 0.25 < 0.5 counts, exactly 0.5 resets, drops count.
	wantPlateau := []int{0, 1, 2, 0, 1, 2}
	for i, s := range sig {
		assert.Equal(t, wantLossDelta[i], s.Metrics.LossDelta, "epoch %d loss delta", i)
		assert.Equal(t, wantAccDelta[i], s.Metrics.AccuracyDelta, "epoch %d accuracy delta", i)
		assert.Equal(t, wantPlateau[i], s.Metrics.PlateauEpochs, "epoch %d plateau", i)
		assert.Equal(t, i, s.Metrics.Epoch)
		assert.Equal(t, 10*i, s.Metrics.GlobalStep)
		assert.Equal(t, 3, s.AvailableSlots)
	}
	assert.Equal(t, 51.0, sig[5].Metrics.BestValAccuracy)
	assert.Equal(t, 1.0, sig[5].Metrics.BestValLoss)
}

func TestTrackerStabilization(t *testing.T) {
	cases := []struct {
		name   string
		opts   TrackerOptions
		losses []float64
		want   []int // HostStabilized per epoch
	}{
		{
			// The first epoch has no previous loss; three relative
			// improvements under 3% latch on the fourth epoch.
			name:   "three small improvements latch",
			losses: []float64{2, 1.96, 1.94, 1.93, 1.0, 5.0},
			want:   []int{0, 0, 0, 1, 1, 1},
		},
		{
			// 100 → 97 is exactly 3%: not stable.
			name:   "exactly 3% improvement is not stable",
			losses: []float64{100, 97, 96, 95, 94},
			want:   []int{0, 0, 0, 0, 1},
		},
		{
			name:   "just under 3% is stable",
			losses: []float64{100, 97.01, 96.5, 96},
			want:   []int{0, 0, 0, 1},
		},
		{
			// 0.99 → 1.02 is a 3.03% regression: within 5%, stable.
			name:   "small regression counts as stable",
			losses: []float64{1, 0.99, 1.02, 1.01},
			want:   []int{0, 0, 0, 1},
		},
		{
			// 0.98 → 1.04 regresses 6.1%: the count restarts.
			name:   "regression over 5% resets",
			losses: []float64{1, 0.99, 0.98, 1.04, 1.03, 1.02, 1.01},
			want:   []int{0, 0, 0, 0, 0, 0, 1},
		},
		{
			// 20 → 21 is exactly −5%: the bound is strict, so it resets.
			name:   "exactly 5% regression resets",
			losses: []float64{20.2, 20, 21, 20.9, 20.8, 20.7},
			want:   []int{0, 0, 0, 0, 0, 1},
		},
		{
			name:   "large improvement resets",
			losses: []float64{1, 0.99, 0.98, 0.9, 0.89, 0.88, 0.87},
			want:   []int{0, 0, 0, 0, 0, 0, 1},
		},
		{
			name:   "previous loss at or below 1e-8 is not judged",
			losses: constant(6, 1e-9),
			want:   []int{0, 0, 0, 0, 0, 0},
		},
		{
			name:   "infinite loss is not judged",
			losses: []float64{1, math.Inf(1), 1, 0.99, 0.98},
			want:   []int{0, 0, 0, 0, 0},
		},
		{
			name:   "one stable epoch when configured",
			opts:   TrackerOptions{StabilizationEpochs: 1},
			losses: []float64{1, 0.99},
			want:   []int{0, 1},
		},
		{
			name:   "stabilization disabled: stabilised from the start",
			opts:   TrackerOptions{StabilizationEpochs: -1},
			losses: []float64{10, 1, 20},
			want:   []int{1, 1, 1},
		},
		{
			name:   "wider threshold",
			opts:   TrackerOptions{StabilizationThreshold: 0.5},
			losses: []float64{2, 1.5, 1.2, 1},
			want:   []int{0, 0, 0, 1},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracker(t, c.opts)
			sig := feed(t, tr, c.losses, constant(len(c.losses), 50))
			got := make([]int, len(sig))
			for i, s := range sig {
				got[i] = s.Metrics.HostStabilized
			}
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.want[len(c.want)-1] == 1, tr.IsStabilized())
		})
	}
}

type recordingSink struct{ events []leyline.TelemetryEvent }

func (r *recordingSink) Emit(ev leyline.TelemetryEvent) { r.events = append(r.events, ev) }

func TestTrackerEmitsTamiyoInitiatedOnce(t *testing.T) {
	sink := &recordingSink{}
	tr := newTracker(t, TrackerOptions{EnvID: 7, Sink: sink})
	losses := []float64{2, 1.96, 1.94}
	feed(t, tr, losses, constant(3, 50))
	require.Empty(t, sink.events)

	// Peek at the latching epoch: same signals, no event, no latch.
	r := EpochResult{Epoch: 3, ValLoss: 1.93, ValAccuracy: 50}
	peeked, err := tr.Peek(r)
	require.NoError(t, err)
	assert.Equal(t, 1, peeked.Metrics.HostStabilized)
	assert.Empty(t, sink.events)
	assert.False(t, tr.IsStabilized())

	_, err = tr.Update(r)
	require.NoError(t, err)
	require.Len(t, sink.events, 1)
	ev := sink.events[0]
	assert.Equal(t, leyline.EventTamiyoInitiated, ev.Type)
	require.NotNil(t, ev.Epoch)
	assert.Equal(t, 4, *ev.Epoch, "events number epochs from 1: index 3 is epoch 4")
	assert.Equal(t, &leyline.TamiyoInitiatedPayload{EnvID: 7, Epoch: 4, StableCount: 3, StabilizationEpochs: 3, ValLoss: 1.93}, ev.Data)
	assert.NoError(t, ev.Data.Validate())
	assert.NotEmpty(t, ev.EventID)

	// The latch holds: later stable epochs emit nothing more.
	for i := 4; i < 8; i++ {
		_, err = tr.Update(EpochResult{Epoch: i, ValLoss: 1.93 - 0.001*float64(i), ValAccuracy: 50})
		require.NoError(t, err)
	}
	assert.Len(t, sink.events, 1)
}

func TestTrackerHistoriesBounded(t *testing.T) {
	tr := newTracker(t, TrackerOptions{})
	n := 25
	losses := make([]float64, n)
	accs := make([]float64, n)
	for i := range losses {
		losses[i] = float64(i)    // rising: the global minimum leaves the window
		accs[i] = 90 - float64(i) // falling: the best accuracy is the first
	}
	sig := feed(t, tr, losses, accs)
	last := sig[n-1]
	assert.Equal(t, []float64{20, 21, 22, 23, 24}, last.LossHistory)
	assert.Equal(t, []float64{70, 69, 68, 67, 66}, last.AccuracyHistory)
	assert.Equal(t, 15.0, last.Metrics.BestValLoss, "min of the last 10 losses")
	assert.Equal(t, 90.0, last.Metrics.BestValAccuracy, "running max")
	assert.Len(t, tr.st.losses, 10)
	assert.Len(t, tr.st.accuracies, 10)

	// Early epochs expose what there is.
	assert.Equal(t, []float64{0, 1}, sig[1].LossHistory)

	got, err := tr.StableValAccuracy(3)
	require.NoError(t, err)
	assert.Equal(t, 66.0, got)
	got, err = tr.StableValAccuracy(100)
	require.NoError(t, err)
	assert.Equal(t, 66.0, got)

	small := newTracker(t, TrackerOptions{HistoryWindow: 3})
	s := feed(t, small, []float64{5, 4, 3, 2, 1}, []float64{10, 20, 30, 40, 50})
	assert.Equal(t, []float64{3, 2, 1}, s[4].LossHistory)
	got, err = small.StableValAccuracy(10)
	require.NoError(t, err)
	assert.Equal(t, 30.0, got, "min over the 3-epoch window")
}

func TestStableValAccuracy(t *testing.T) {
	tr := newTracker(t, TrackerOptions{})
	_, err := tr.StableValAccuracy(1)
	assert.Error(t, err, "empty history")

	feed(t, tr, []float64{1, 1, 1, 1}, []float64{60, 55, 70, 65})
	for _, c := range []struct {
		k    int
		want float64
	}{{1, 65}, {2, 65}, {3, 55}, {4, 55}, {9, 55}} {
		got, err := tr.StableValAccuracy(c.k)
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "k=%d", c.k)
	}
	for _, k := range []int{0, -1} {
		_, err := tr.StableValAccuracy(k)
		assert.Error(t, err, "k=%d", k)
	}
}

func cf(v float64) *float64 { return &v }

func TestSummarySeedOrdering(t *testing.T) {
	seed := func(id string, stage leyline.SeedStage, alpha float64, c *float64) leyline.SeedReport {
		return leyline.SeedReport{SeedID: id, SlotID: "r0c0", Stage: stage, Alpha: alpha, Counterfactual: c, EpochsInStage: len(id), ImprovementSinceStageStart: alpha * 10}
	}
	cases := []struct {
		name  string
		seeds []leyline.SeedReport
		want  string
	}{
		{"none", nil, ""},
		{"stage beats alpha", []leyline.SeedReport{
			seed("a", leyline.StageBlending, 0.9, nil), seed("b", leyline.StageHolding, 0.1, nil)}, "b"},
		{"fossilized is the highest stage", []leyline.SeedReport{
			seed("a", leyline.StageFossilized, 1, nil), seed("b", leyline.StageHolding, 1, nil)}, "a"},
		{"alpha breaks a stage tie", []leyline.SeedReport{
			seed("a", leyline.StageBlending, 0.6, nil), seed("b", leyline.StageBlending, 0.4, nil)}, "a"},
		{"most negative counterfactual wins", []leyline.SeedReport{
			seed("a", leyline.StageHolding, 1, cf(2)), seed("b", leyline.StageHolding, 1, cf(-1)), seed("c", leyline.StageHolding, 1, cf(0))}, "b"},
		{"unmeasured counts as +Inf and loses", []leyline.SeedReport{
			seed("a", leyline.StageHolding, 1, nil), seed("b", leyline.StageHolding, 1, cf(100))}, "b"},
		{"seed id breaks the last tie", []leyline.SeedReport{
			seed("a", leyline.StageTraining, 0, nil), seed("c", leyline.StageTraining, 0, nil), seed("b", leyline.StageTraining, 0, nil)}, "c"},
		{"empty-slot reports are ignored", []leyline.SeedReport{
			{Stage: leyline.StageDormant, SlotID: "r0c1"}, seed("a", leyline.StageGerminated, 0, nil)}, "a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracker(t, TrackerOptions{})
			sig, err := tr.Update(EpochResult{ValLoss: 1, ValAccuracy: 10, Seeds: c.seeds, AvailableSlots: 1})
			require.NoError(t, err)
			assert.Equal(t, c.want, sig.SummarySeedID)
			if c.want == "" {
				assert.Equal(t, leyline.StageUnknown, sig.SummarySeedStage)
				assert.Empty(t, sig.ActiveSeeds)
				return
			}
			var w leyline.SeedReport
			var ids []string
			for _, s := range c.seeds {
				if s.SeedID == c.want {
					w = s
				}
				if s.SeedID != "" {
					ids = append(ids, s.SeedID)
				}
			}
			assert.Equal(t, ids, sig.ActiveSeeds)
			assert.Equal(t, w.Stage, sig.SummarySeedStage)
			assert.Equal(t, w.Alpha, sig.SummarySeedAlpha)
			assert.Equal(t, w.EpochsInStage, sig.SummarySeedEpochsInStage)
			assert.Equal(t, w.ImprovementSinceStageStart, sig.SummarySeedImprovement)
		})
	}
}

func TestTrackerRejectsBadSeeds(t *testing.T) {
	cases := []struct {
		name  string
		r     EpochResult
		error string
	}{
		{"duplicate id", EpochResult{Seeds: []leyline.SeedReport{
			{SeedID: "s", SlotID: "r0c0", Stage: leyline.StageTraining},
			{SeedID: "s", SlotID: "r0c1", Stage: leyline.StageHolding}}}, "duplicate seed id"},
		{"empty id", EpochResult{Seeds: []leyline.SeedReport{{SlotID: "r0c0", Stage: leyline.StageTraining}}}, "no seed id"},
		{"reserved stage", EpochResult{Seeds: []leyline.SeedReport{{SeedID: "s", Stage: leyline.SeedStage(5)}}}, "invalid seed stage"},
		{"negative slots", EpochResult{AvailableSlots: -1}, "AvailableSlots"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracker(t, TrackerOptions{})
			_, err := tr.Update(c.r)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.error)
			_, err = tr.Peek(c.r)
			assert.Error(t, err)
			assert.Empty(t, tr.st.losses, "a rejected update changes nothing")
		})
	}
}

func TestPeekIsUpdateWithoutMutation(t *testing.T) {
	tr := newTracker(t, TrackerOptions{})
	losses := []float64{2, 1.96, 1.94, 1.93, 1.92, 1.5, 1.49}
	accs := []float64{30, 30.2, 30.3, 31, 31.1, 40, 39}
	seeds := []leyline.SeedReport{{SeedID: "s1", SlotID: "r0c1", Stage: leyline.StageTraining, Alpha: 0}}
	for i := range losses {
		r := EpochResult{Epoch: i, ValLoss: losses[i], ValAccuracy: accs[i], TrainLoss: 2 * losses[i], Seeds: seeds, AvailableSlots: 2}
		p1, err := tr.Peek(r)
		require.NoError(t, err)
		p2, err := tr.Peek(r)
		require.NoError(t, err)
		assert.Equal(t, p1, p2, "epoch %d: peek is repeatable", i)
		u, err := tr.Update(r)
		require.NoError(t, err)
		assert.Equal(t, p1, u, "epoch %d: peek equals update", i)
	}
}

func TestTrackerReset(t *testing.T) {
	tr := newTracker(t, TrackerOptions{})
	feed(t, tr, []float64{2, 1.96, 1.94, 1.93}, []float64{50, 50, 50, 50})
	require.True(t, tr.IsStabilized())
	tr.Reset()
	assert.False(t, tr.IsStabilized())
	_, err := tr.StableValAccuracy(1)
	assert.Error(t, err)
	sig, err := tr.Update(EpochResult{ValLoss: 3, ValAccuracy: 20})
	require.NoError(t, err)
	assert.Equal(t, math.Inf(1), sig.Metrics.LossDelta)
	assert.Equal(t, 20.0, sig.Metrics.AccuracyDelta)
	assert.Equal(t, 0, sig.Metrics.PlateauEpochs)
	assert.Equal(t, 20.0, sig.Metrics.BestValAccuracy)
	assert.Equal(t, []float64{3}, sig.LossHistory)
}
