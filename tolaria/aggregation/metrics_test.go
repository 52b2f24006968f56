package aggregation

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

// metricValue finds the metric name for seed ("" for epoch metrics).
func metricValue(ms []leyline.Metric, name, seed string) (float64, bool) {
	for _, m := range ms {
		if m.Name == name && m.Attributes[AttrSeedID] == seed {
			return m.Value, true
		}
	}
	return 0, false
}

func expectMetrics(t *testing.T, ms []leyline.Metric, seed string, want map[string]float64) {
	t.Helper()
	for name, v := range want {
		got, ok := metricValue(ms, name, seed)
		if !ok {
			t.Errorf("%s (seed %q) missing", name, seed)
			continue
		}
		if !near(got, v, 1e-12) {
			t.Errorf("%s (seed %q) = %v, want %v", name, seed, got, v)
		}
	}
}

func expectAbsent(t *testing.T, ms []leyline.Metric, seed string, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, ok := metricValue(ms, n, seed); ok {
			t.Errorf("%s (seed %q) present, want absent", n, seed)
		}
	}
}

func eventNames(evs []Event) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e.Name+":"+e.Attributes[AttrSeedID])
	}
	return out
}

// pad places v at the front of a 10-element flat (the masks' size).
func pad(v ...float32) []float32 { return append(v, make([]float32, 10-len(v))...) }

// Two seeds over two epochs, every figure computed by hand.
func TestAccumulatorTwoSeedsTwoEpochs(t *testing.T) {
	acc, err := NewSeedMetricsAccumulator(AccumulatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps := []*autograd.Var{
		autograd.Param(tensor.Zeros(tensor.F32, 6)), autograd.Param(tensor.Zeros(tensor.F32, 2)),
		autograd.Param(tensor.Zeros(tensor.F32, 2)),
	}
	masks, err := SegmentMasks(ps, []string{"host", "s1", "s2"})
	if err != nil {
		t.Fatal(err)
	}
	acc.SetMasks(masks)
	names := []string{"s1", "s2"}
	weights := []float64{1, 0.5}
	alphas := map[string]float64{"s1": 0.2, "s2": 0.6}

	// Step 1: s1=(3,4) |5|, s2=(0,-5) |5|, s1·s2 = -20: one conflict,
	// shares 0.5/0.5, teacher split 1:3.
	if err := acc.Record(names, [][]float32{pad(3, 4), pad(0, -5)}, weights, alphas, map[string]float64{"s1": 1, "s2": 3}, 2); err != nil {
		t.Fatal(err)
	}
	_ = acc.RecordTeacherNorm(2)
	_ = acc.RecordCombine(1, 1)
	// Step 2: s1=(6,8) |10|, s2=(0,30) |30|, no conflict, shares
	// 0.25/0.75, teacher split 1:1 (running sums 2:2 over 4 uses).
	if err := acc.Record(names, [][]float32{pad(6, 8), pad(0, 30)}, weights, alphas, map[string]float64{"s1": 2, "s2": 2}, 4); err != nil {
		t.Fatal(err)
	}
	_ = acc.RecordTeacherNorm(4)
	_ = acc.RecordCombine(1, 0)

	stages := map[string]leyline.SeedStage{"s1": leyline.StageTraining, "s2": leyline.StageBlending}
	r := acc.Finalize(stages)
	expectMetrics(t, r.Metrics, "", map[string]float64{
		leyline.MetricTolariaGradAggMicrobatchesTotal: 2,
		leyline.MetricTolariaGradAggConflicts:         1,
		leyline.MetricTolariaGradAggWeightsMean:       0.75,
		leyline.MetricTolariaGradAggPCGradApplied:     1,
		// participants recorded: s1, s2 and the teacher → 1/(3−1).
		leyline.MetricTolariaGradAggConflictRatio: 0.5,
		// mean teacher norm (2+4)/2.
		leyline.MetricTolariaGradAggTeacherShare: 3,
	})
	if r.ConflictRatio != 0.5 {
		t.Fatalf("ConflictRatio %v", r.ConflictRatio)
	}
	expectMetrics(t, r.Metrics, "s1", map[string]float64{
		leyline.MetricTolariaGradAggSeedWeight:        1,
		leyline.MetricTolariaGradAggSeedNorm:          7.5,   // (5+10)/2
		leyline.MetricTolariaGradAggSeedShare:         0.375, // (0.5+0.25)/2
		leyline.MetricTolariaGradAggSeedShareDelta:    0.375, // first epoch: vs 0
		leyline.MetricTolariaGradAggSeedAlpha:         0.2,
		leyline.MetricTolariaGradAggSeedConflicts:     1,
		leyline.MetricTolariaGradAggSeedConflictRatio: 0.25, // (1/2 uses)/(3 seen − 1)
		leyline.MetricTolariaGradAggSeedParams:        2,
		leyline.MetricTolariaGradAggSeedMaskFraction:  0.2,
		leyline.MetricTolariaGradAggSeedTeacherShare:  0.1875, // (0.25+0.5)/4 uses
	})
	expectMetrics(t, r.Metrics, "s2", map[string]float64{
		leyline.MetricTolariaGradAggSeedWeight:        0.5,
		leyline.MetricTolariaGradAggSeedNorm:          17.5,
		leyline.MetricTolariaGradAggSeedShare:         0.625,
		leyline.MetricTolariaGradAggSeedShareDelta:    0.625,
		leyline.MetricTolariaGradAggSeedAlpha:         0.6,
		leyline.MetricTolariaGradAggSeedConflicts:     1,
		leyline.MetricTolariaGradAggSeedConflictRatio: 0.25,
		leyline.MetricTolariaGradAggSeedTeacherShare:  0.3125, // (0.75+0.5)/4
	})
	expectMetrics(t, r.Metrics, TeacherID, map[string]float64{
		leyline.MetricTolariaGradAggSeedWeight:       0,
		leyline.MetricTolariaGradAggSeedNorm:         3,
		leyline.MetricTolariaGradAggSeedParams:       6,
		leyline.MetricTolariaGradAggSeedMaskFraction: 0.6,
	})
	expectAbsent(t, r.Metrics, TeacherID, leyline.MetricTolariaGradAggSeedShare, leyline.MetricTolariaGradAggSeedConflictRatio)
	for _, m := range r.Metrics {
		switch m.Attributes[AttrSeedID] {
		case "s1":
			if m.Attributes[AttrStage] != "TRAINING" {
				t.Fatalf("%s: stage %q", m.Name, m.Attributes[AttrStage])
			}
		case TeacherID:
			if m.Attributes[AttrStage] != TeacherStage {
				t.Fatalf("teacher stage %q", m.Attributes[AttrStage])
			}
		}
	}
	if got := eventNames(r.Events); !slices.Equal(got, []string{EventSeedShareJump + ":s1", EventSeedShareJump + ":s2"}) {
		t.Fatalf("events %v", got)
	}
	if e := r.Events[0]; e.Severity != leyline.SeverityWarning || e.Attributes["delta"] != "0.3750" || e.Attributes[AttrStage] != "TRAINING" {
		t.Fatalf("share jump event %+v", e)
	}

	// Epoch 2: one step, shares 0.5/0.5, no attribution.
	acc.Reset()
	if err := acc.Record(names, [][]float32{pad(1, 0), pad(0, 1)}, []float64{1, 1}, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	_ = acc.RecordCombine(1, 0)
	r = acc.Finalize(stages)
	expectMetrics(t, r.Metrics, "", map[string]float64{
		leyline.MetricTolariaGradAggMicrobatchesTotal: 1,
		leyline.MetricTolariaGradAggConflicts:         0,
		leyline.MetricTolariaGradAggWeightsMean:       1,
		leyline.MetricTolariaGradAggPCGradApplied:     0,
		leyline.MetricTolariaGradAggConflictRatio:     0,
		leyline.MetricTolariaGradAggTeacherShare:      0,
	})
	expectMetrics(t, r.Metrics, "s1", map[string]float64{
		leyline.MetricTolariaGradAggSeedShare:      0.5,
		leyline.MetricTolariaGradAggSeedShareDelta: 0.125,
		leyline.MetricTolariaGradAggSeedAlpha:      0,
	})
	expectMetrics(t, r.Metrics, "s2", map[string]float64{
		leyline.MetricTolariaGradAggSeedShare:      0.5,
		leyline.MetricTolariaGradAggSeedShareDelta: -0.125,
	})
	expectAbsent(t, r.Metrics, "s1", leyline.MetricTolariaGradAggSeedTeacherShare)
	// The teacher owns masks but recorded nothing this epoch.
	expectMetrics(t, r.Metrics, TeacherID, map[string]float64{
		leyline.MetricTolariaGradAggSeedWeight: 0, leyline.MetricTolariaGradAggSeedNorm: 0,
		leyline.MetricTolariaGradAggSeedParams: 6,
	})
	if len(r.Events) != 0 {
		t.Fatalf("events %v", eventNames(r.Events))
	}
}

// Three seeds in one step, with every warning raised.
func TestAccumulatorThreeSeeds(t *testing.T) {
	acc, err := NewSeedMetricsAccumulator(AccumulatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"c", "a", "b"}
	// a=(1,0), b=(-1,0), c=(-2,0): a·b<0, a·c<0, b·c>0 → a 2, b 1, c 1.
	// norms 1, 1, 2 → shares .25, .25, .5.
	flats := [][]float32{{-2, 0}, {1, 0}, {-1, 0}}
	weights := []float64{0.25, 1, 0.5}
	if err := acc.Record(names, flats, weights, map[string]float64{"a": 1}, nil, 0); err != nil {
		t.Fatal(err)
	}
	_, conflicts, err := Combine(flats, true, weights, tensor.NewRNG(1))
	if err != nil {
		t.Fatal(err)
	}
	_ = acc.RecordCombine(1, conflicts)
	r := acc.Finalize(map[string]leyline.SeedStage{"a": leyline.StageTraining, "b": leyline.StageBlending})

	ratio := float64(conflicts) / 2
	expectMetrics(t, r.Metrics, "", map[string]float64{
		leyline.MetricTolariaGradAggConflicts:     float64(conflicts),
		leyline.MetricTolariaGradAggWeightsMean:   (0.25 + 1 + 0.5) / 3,
		leyline.MetricTolariaGradAggConflictRatio: ratio,
	})
	if conflicts < 1 || conflicts > 2 {
		t.Fatalf("Combine found %d conflict pairs; (a,b) and (a,c) are the only candidates", conflicts)
	}
	expectMetrics(t, r.Metrics, "a", map[string]float64{
		leyline.MetricTolariaGradAggSeedShare: 0.25, leyline.MetricTolariaGradAggSeedConflicts: 2,
		leyline.MetricTolariaGradAggSeedConflictRatio: 1, leyline.MetricTolariaGradAggSeedAlpha: 1,
		leyline.MetricTolariaGradAggSeedWeight: 1,
	})
	expectMetrics(t, r.Metrics, "b", map[string]float64{
		leyline.MetricTolariaGradAggSeedShare: 0.25, leyline.MetricTolariaGradAggSeedConflicts: 1,
		leyline.MetricTolariaGradAggSeedConflictRatio: 0.5,
	})
	expectMetrics(t, r.Metrics, "c", map[string]float64{
		leyline.MetricTolariaGradAggSeedShare: 0.5, leyline.MetricTolariaGradAggSeedConflicts: 1,
		leyline.MetricTolariaGradAggSeedConflictRatio: 0.5, leyline.MetricTolariaGradAggSeedNorm: 2,
	})
	// No masks: no params metrics; no attribution: no teacher shares.
	expectAbsent(t, r.Metrics, "a", leyline.MetricTolariaGradAggSeedParams, leyline.MetricTolariaGradAggSeedTeacherShare)
	for _, m := range r.Metrics {
		if m.Attributes[AttrSeedID] == "c" {
			if _, ok := m.Attributes[AttrStage]; ok {
				t.Fatal("a seed without a known stage got a stage attribute")
			}
		}
	}
	// Seeds in id order, events after their seed's metrics.
	want := []string{EventSeedConflictHigh + ":a", EventSeedConflictHigh + ":b", EventSeedShareJump + ":c", EventSeedConflictHigh + ":c"}
	if ratio >= DefaultConflictWarn {
		want = append(want, EventGradConflictHigh+":")
	}
	if got := eventNames(r.Events); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

func TestAccumulatorGradConflictHigh(t *testing.T) {
	acc, _ := NewSeedMetricsAccumulator(AccumulatorOptions{})
	_ = acc.Record([]string{"a", "b"}, [][]float32{{1}, {-1}}, []float64{1, 1}, nil, nil, 0)
	_ = acc.RecordCombine(1, 1)
	r := acc.Finalize(nil)
	if r.ConflictRatio != 1 {
		t.Fatalf("ratio %v", r.ConflictRatio)
	}
	last := r.Events[len(r.Events)-1]
	if last.Name != EventGradConflictHigh || last.Attributes["conflict_ratio"] != "1.000" || last.Threshold != 0.75 {
		t.Fatalf("event %+v", last)
	}
}

func TestAccumulatorSkipsPairwiseConflictsAbove16(t *testing.T) {
	acc, _ := NewSeedMetricsAccumulator(AccumulatorOptions{})
	var names []string
	var flats [][]float32
	var weights []float64
	for i := range 17 {
		names = append(names, string(rune('a'+i)))
		flats = append(flats, []float32{float32(1 - 2*(i%2))})
		weights = append(weights, 1)
	}
	if err := acc.Record(names, flats, weights, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	r := acc.Finalize(nil)
	if v, _ := metricValue(r.Metrics, leyline.MetricTolariaGradAggSeedConflicts, "a"); v != 0 {
		t.Fatalf("17 participants: %v conflicts counted for a, want none", v)
	}
}

func TestAccumulatorLayerNorms(t *testing.T) {
	layers := []Layer{{"w1", Range{0, 2}}, {"w2", Range{2, 3}}, {"w3", Range{3, 4}}}
	acc, err := NewSeedMetricsAccumulator(AccumulatorOptions{Layers: layers, LayerTopK: 2})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := acc.Record([]string{"s"}, [][]float32{{3, 4, 1, -7}}, []float64{1}, nil, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	r := acc.Finalize(nil)
	var got []string
	for _, m := range r.Metrics {
		if m.Name == leyline.MetricTolariaGradAggSeedLayerNorm {
			got = append(got, m.Attributes[AttrLayer])
			if want := map[string]float64{"w1": 5, "w3": 7}[m.Attributes[AttrLayer]]; m.Value != want {
				t.Fatalf("layer %s norm %v, want %v", m.Attributes[AttrLayer], m.Value, want)
			}
		}
	}
	if !slices.Equal(got, []string{"w3", "w1"}) {
		t.Fatalf("top-2 layers %v", got)
	}
	if err := acc.Record([]string{"s"}, [][]float32{{1, 2}}, []float64{1}, nil, nil, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("layer beyond the gradient: %v", err)
	}
	if ls := ParamLayers([]*autograd.Var{autograd.Param(tensor.Zeros(tensor.F32, 2, 3)), autograd.Param(tensor.Zeros(tensor.F32, 4))}); ls[1].Name != "param_1" || ls[1].Range != (Range{6, 10}) {
		t.Fatalf("ParamLayers %+v", ls)
	}
}

func TestAccumulatorRecordAllocatesNothing(t *testing.T) {
	acc, _ := NewSeedMetricsAccumulator(AccumulatorOptions{Layers: []Layer{{"x", Range{0, 512}}}})
	rng := tensor.NewRNG(2)
	names := []string{"a", "b", "c"}
	flats := [][]float32{randVec(rng, 4096), randVec(rng, 4096), randVec(rng, 4096)}
	weights := []float64{1, 0.5, 0.25}
	alphas := map[string]float64{"a": 0.3}
	attrib := map[string]float64{"a": 1, "b": 2}
	_ = acc.Record(names, flats, weights, alphas, attrib, 1)
	allocs := testing.AllocsPerRun(20, func() {
		if err := acc.Record(names, flats, weights, alphas, attrib, 1); err != nil {
			t.Fatal(err)
		}
		_ = acc.RecordTeacherNorm(1)
		_ = acc.RecordCombine(1, 2)
	})
	if allocs != 0 {
		t.Fatalf("per-step recording: %v allocations, want 0", allocs)
	}
}

func TestAccumulatorRejects(t *testing.T) {
	if _, err := NewSeedMetricsAccumulator(AccumulatorOptions{ShareJumpWarn: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative threshold: %v", err)
	}
	if _, err := NewSeedMetricsAccumulator(AccumulatorOptions{Layers: []Layer{{"x", Range{3, 1}}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("inverted layer: %v", err)
	}
	acc, _ := NewSeedMetricsAccumulator(AccumulatorOptions{})
	for name, err := range map[string]error{
		"lengths":     acc.Record([]string{"a", "b"}, [][]float32{{1}}, []float64{1, 1}, nil, nil, 0),
		"flat sizes":  acc.Record([]string{"a", "b"}, [][]float32{{1}, {1, 2}}, []float64{1, 1}, nil, nil, 0),
		"NaN weight":  acc.Record([]string{"a"}, [][]float32{{1}}, []float64{math.NaN()}, nil, nil, 0),
		"duplicate":   acc.Record([]string{"a", "a"}, [][]float32{{1}, {1}}, []float64{1, 1}, nil, nil, 0),
		"teacher NaN": acc.RecordTeacherNorm(math.NaN()),
		"combine":     acc.RecordCombine(-1, 0),
		"weights":     acc.RecordWeights([]float64{math.Inf(-1)}),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if r := acc.Finalize(nil); len(r.Metrics) != 6 {
		t.Fatalf("rejected records left traces: %d metrics", len(r.Metrics))
	}
}

func TestAccumulatorMicrobatchPathWeights(t *testing.T) {
	acc, _ := NewSeedMetricsAccumulator(AccumulatorOptions{})
	_ = acc.RecordWeights([]float64{0.5, 0.5})
	_ = acc.RecordWeights([]float64{1})
	_ = acc.RecordCombine(3, 0)
	r := acc.Finalize(nil)
	expectMetrics(t, r.Metrics, "", map[string]float64{
		leyline.MetricTolariaGradAggWeightsMean:       0.75,
		leyline.MetricTolariaGradAggMicrobatchesTotal: 3,
	})
}

// TestAccumulatorEmpty: Empty holds for a fresh or reset accumulator and
// fails after any record; its Finalize is the six zero totals.
func TestAccumulatorEmpty(t *testing.T) {
	acc, err := NewSeedMetricsAccumulator(AccumulatorOptions{})
	require.NoError(t, err)
	require.True(t, acc.Empty())
	rep := acc.Finalize(nil)
	require.Len(t, rep.Metrics, 6)
	for _, m := range rep.Metrics {
		require.Zero(t, m.Value, m.Name)
	}
	require.NoError(t, acc.RecordCombine(2, 0))
	require.False(t, acc.Empty())
	acc.Reset()
	require.True(t, acc.Empty())
	require.NoError(t, acc.RecordTeacherNorm(0.5))
	require.False(t, acc.Empty())
	acc.Reset()
	require.NoError(t, acc.Record([]string{"a"}, [][]float32{{1, 2}}, []float64{1}, nil, nil, 0))
	require.False(t, acc.Empty())
}
