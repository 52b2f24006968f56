package tamiyo

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// syncSink records events; safe for the service's goroutines.
type syncSink struct {
	mu     sync.Mutex
	events []leyline.TelemetryEvent
}

func (s *syncSink) Emit(ev leyline.TelemetryEvent) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
}

func (s *syncSink) all() []leyline.TelemetryEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]leyline.TelemetryEvent(nil), s.events...)
}

// metric returns the value of a named metric in ev (ok false when absent).
func metric(ev leyline.TelemetryEvent, name string) (float64, bool) {
	p, _ := ev.Data.(*leyline.MetricsPayload)
	if p == nil {
		return 0, false
	}
	for _, m := range p.Metrics {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

// testLayers is a three-block CNN host with one slot after each block
// (the default slots r0c0..r0c2) and a slot id the configuration lacks.
func testLayers() func() []LayerState {
	return BlockLayers([]leyline.BlockInfo{
		{Depth: 0, Channels: 16, Slots: []string{"r0c0"}},
		{Depth: 1, Channels: 32, Slots: []string{"r0c1", "r9c9"}},
		{Depth: 2, Channels: 64, Slots: []string{"r0c2"}},
	})
}

func newTestService(t *testing.T, o ServiceOptions) *Service {
	t.Helper()
	if o.Policy == nil {
		o.Policy = mustPolicy(t, smallOptions(tensor.F32))
	}
	if o.Layers == nil {
		o.Layers = testLayers()
	}
	s, err := NewService(o)
	require.NoError(t, err)
	t.Cleanup(s.Drain) // no abandoned forward runs into the next test
	return s
}

// serviceStates are epoch states over the default slots covering empty,
// developing, blending, holding, fossilized and embargoed slots.
func serviceStates() []leyline.EpochState {
	cf := 2.5
	return []leyline.EpochState{
		epochState(3, 0, false),
		epochState(8, 3, true, training("s1", "r0c0", "conv_light", 2, 0.5)),
		epochState(12, 1, true, blending("s1", "r0c0", 0.4, 1, leyline.AlphaUp), holding("s2", "r0c2", "norm", &cf, 3)),
		epochState(20, 4, true, holding("s1", "r0c1", "conv_light", &cf, 4),
			leyline.SeedReport{SeedID: "s0", SlotID: "r0c0", BlueprintID: "norm", Stage: leyline.StageFossilized, Alpha: 1, EpochsTotal: 30}),
		epochState(25, 0, true, leyline.SeedReport{SeedID: "s3", SlotID: "r0c2", BlueprintID: "attention", Stage: leyline.StageEmbargoed, EpochsTotal: 12}),
	}
}

// masksFor recomputes the masks the service must respect for st.
func masksFor(t *testing.T, st leyline.EpochState) leyline.ActionMasks {
	t.Helper()
	in := leyline.MaskInput{Slots: st.Slots, EnabledSlots: st.Slots.IDs(), SlotStates: map[string]*leyline.MaskSlotState{}, Topology: st.Topology}
	for _, id := range st.Slots.IDs() {
		in.SlotStates[id] = nil
	}
	for _, r := range st.Seeds {
		in.SlotStates[r.SlotID] = &leyline.MaskSlotState{Stage: r.Stage, SeedAgeEpochs: r.EpochsTotal, AlphaMode: r.AlphaMode}
		if !leyline.IsFailureStage(r.Stage) {
			in.TotalSeeds++
		}
	}
	m, err := leyline.ComputeActionMasks(in)
	require.NoError(t, err)
	return m
}

// checkDecision verifies the Controller contract and the masks.
func checkDecision(t *testing.T, d leyline.Decision, st leyline.EpochState) {
	t.Helper()
	m := masksFor(t, st)
	require.True(t, m.OpValid(d.Op), "op %v masked (%v)", d.Op, d)
	require.NotEmpty(t, d.Reason)
	require.True(t, d.Confidence >= 0 && d.Confidence <= 1, "confidence %v", d.Confidence)
	if d.Op == leyline.OpWait {
		require.Empty(t, d.SlotID)
		return
	}
	i, err := st.Slots.Index(d.SlotID)
	require.NoError(t, err, "decision %v", d)
	require.True(t, m.SlotByOp[d.Op][i], "op %v not valid in slot %s", d.Op, d.SlotID)
	if d.Op == leyline.OpGerminate {
		require.True(t, m.Heads[leyline.HeadBlueprint][d.Blueprint], "blueprint %v masked", d.Blueprint)
		require.True(t, d.Style.Valid() && d.Tempo.Valid() && d.AlphaTarget.Valid())
	}
}

// TestServiceDecisionsRespectMasks: sampled and deterministic decisions
// over states in every slot situation are valid for their masks, name
// the seed they act on, and deterministic ones repeat.
func TestServiceDecisionsRespectMasks(t *testing.T) {
	for _, det := range []bool{false, true} {
		s := newTestService(t, ServiceOptions{Deterministic: det, Seed: 5, Floors: &[leyline.NumActionHeads]float32{0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}})
		ops := map[leyline.LifecycleOp]bool{}
		for rep := 0; rep < 6; rep++ {
			for _, st := range serviceStates() {
				d, err := s.EvaluateEpoch(context.Background(), st)
				require.NoError(t, err)
				checkDecision(t, d, st)
				ops[d.Op] = true
				for _, r := range st.Seeds {
					if d.Op != leyline.OpWait && r.SlotID == d.SlotID {
						assert.Equal(t, r.SeedID, d.SeedID)
					}
				}
			}
		}
		if !det {
			// High floors make every valid op likely: the sampling
			// explores beyond WAIT.
			assert.Greater(t, len(ops), 1, "sampled ops %v", ops)
		}
		assert.Equal(t, 6*len(serviceStates()), s.Stats().Decisions)
	}
}

// TestServiceFollowsCausalMasks: with only WAIT and GERMINATE valid
// (nothing to act on), a germination targets an empty slot.
func TestServiceOnlyWaitOrGerminateOnEmptySlots(t *testing.T) {
	s := newTestService(t, ServiceOptions{Seed: 9, Floors: &[leyline.NumActionHeads]float32{0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2}})
	st := epochState(5, 2, true)
	for i := 0; i < 20; i++ {
		d, err := s.EvaluateEpoch(context.Background(), st)
		require.NoError(t, err)
		require.Contains(t, []leyline.LifecycleOp{leyline.OpWait, leyline.OpGerminate}, d.Op)
		checkDecision(t, d, st)
	}
}

// TestServiceDeadline: a forward slower than the deadline yields WAIT and
// an error wrapping ErrInferenceTimeout and context.DeadlineExceeded, a
// CRITICAL timeout event and a count; the abandoned forward leaves the
// service usable, and the next call (which waits for it) succeeds.
func TestServiceDeadline(t *testing.T) {
	sink := &syncSink{}
	s := newTestService(t, ServiceOptions{Deadline: 5 * time.Millisecond, Sink: sink, Deterministic: true})
	var slow atomic.Bool
	slow.Store(true)
	s.infer.stepHook = func() {
		if slow.Load() {
			time.Sleep(60 * time.Millisecond)
		}
	}
	st := serviceStates()[1]
	d, err := s.EvaluateEpoch(context.Background(), st)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInferenceTimeout)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, leyline.OpWait, d.Op)
	assert.Equal(t, 1, s.Stats().Timeouts)
	assert.Zero(t, s.Stats().Decisions)

	var timeouts int
	for _, ev := range sink.all() {
		if strings.HasPrefix(ev.Message, EventInferenceTimeout) {
			timeouts++
			assert.Equal(t, leyline.SeverityCritical, ev.Severity)
			v, ok := metric(ev, MetricInferenceTimeoutTotal)
			assert.True(t, ok)
			assert.Equal(t, 1.0, v)
		}
	}
	assert.Equal(t, 1, timeouts)

	// The slow forward is still running; a call with room to wait for
	// it decides normally.
	slow.Store(false)
	s.opts.Deadline = 5 * time.Second
	d, err = s.EvaluateEpoch(context.Background(), st)
	require.NoError(t, err)
	checkDecision(t, d, st)
}

// TestServiceHonoursContext: a cancelled context decides nothing, and a
// caller deadline shorter than the service's applies.
func TestServiceHonoursContext(t *testing.T) {
	s := newTestService(t, ServiceOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.EvaluateEpoch(ctx, serviceStates()[0])
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, s.Stats().Timeouts, "a call cancelled before it starts is not a timeout")

	// The caller's deadline must outlast the encoding (slow under the
	// race detector on a loaded machine) and expire in the forward.
	s.infer.stepHook = func() { time.Sleep(time.Second) }
	ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err = s.EvaluateEpoch(ctx, serviceStates()[0])
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrInferenceTimeout)
}

// TestServiceRejectsBadInput: options and states that cannot be encoded
// are errors, not panics.
func TestServiceRejectsBadInput(t *testing.T) {
	p := mustPolicy(t, smallOptions(tensor.F32))
	for _, o := range []ServiceOptions{
		{Layers: testLayers()},
		{Policy: p},
		{Policy: p, Layers: testLayers(), Deadline: -time.Second},
		{Policy: p, Layers: testLayers(), MaxSeeds: -1},
		{Policy: p, Layers: testLayers(), Floors: &[leyline.NumActionHeads]float32{-1}},
	} {
		_, err := NewService(o)
		assert.Error(t, err, "%+v", o)
	}
	s := newTestService(t, ServiceOptions{Policy: p})
	bad := []leyline.EpochState{
		epochState(1, 0, true, training("s1", "r7c7", "conv_light", 1, 0)), // unknown slot
		func() leyline.EpochState { st := epochState(1, 0, true); st.Topology = "nope"; return st }(),
		func() leyline.EpochState { st := epochState(1, 0, true); st.Slots = leyline.SlotConfig{}; return st }(),
	}
	for _, st := range bad {
		_, err := s.EvaluateEpoch(context.Background(), st)
		require.ErrorIs(t, err, ErrServiceInput)
	}
	empty := newTestService(t, ServiceOptions{Policy: p, Layers: func() []LayerState { return nil }})
	_, err := empty.EvaluateEpoch(context.Background(), serviceStates()[0])
	require.ErrorIs(t, err, ErrServiceInput)
}

// TestServiceTelemetry: every decision reports the capture state, the
// latency and the feature coverage (mean and per family).
func TestServiceTelemetry(t *testing.T) {
	sink := &syncSink{}
	s := newTestService(t, ServiceOptions{Sink: sink})
	for _, st := range serviceStates()[:2] {
		_, err := s.EvaluateEpoch(context.Background(), st)
		require.NoError(t, err)
	}
	evs := sink.all()
	require.Len(t, evs, 2)
	for _, ev := range evs {
		assert.True(t, strings.HasPrefix(ev.Message, "tamiyo.gnn.decision"), ev.Message)
		v, ok := metric(ev, leyline.MetricTamiyoGNNCompileEnabled)
		assert.True(t, ok)
		assert.Equal(t, 1.0, v)
		lat, ok := metric(ev, leyline.MetricTamiyoGNNInferenceLatencyMs)
		assert.True(t, ok)
		assert.Greater(t, lat, 0.0)
		cov, ok := metric(ev, leyline.MetricTamiyoGNNFeatureCoverage)
		assert.True(t, ok)
		assert.True(t, cov >= 0 && cov <= 1)
		_, ok = metric(ev, leyline.MetricTamiyoGNNFeatureCoverage+".node.layer")
		assert.True(t, ok)
		_, ok = metric(ev, leyline.MetricTamiyoGNNCompileFallbackTotal)
		assert.False(t, ok, "the fallback total is reported once positive (G1)")
	}
	// The layers have no norms and the seeds no gradient telemetry.
	v, _ := metric(evs[0], leyline.MetricTamiyoGNNFeatureCoverage+".node.layer")
	assert.Equal(t, 0.0, v)
	// tamiyo.gnn.compile_warm_ms: nothing captured at the warm-up
	// decision, the capture's time from the second on.
	warm0, ok0 := metric(evs[0], leyline.MetricTamiyoGNNCompileWarmMs)
	warm1, ok1 := metric(evs[1], leyline.MetricTamiyoGNNCompileWarmMs)
	require.True(t, ok0 && ok1)
	assert.Equal(t, 0.0, warm0)
	assert.Greater(t, warm1, 0.0)
	assert.Equal(t, ms(s.infer.Stats().CaptureTime), warm1)
}

// TestInferenceCapturedEqualsEager: captured forwards (warm-up, capture,
// replays) give bitwise the eager logits for every graph, including new
// graphs of an already captured shape, batched graphs and another slot
// count.
func TestInferenceCapturedEqualsEager(t *testing.T) {
	p := mustPolicy(t, smallOptions(tensor.F32))
	eager, err := NewInference(p, InferenceOptions{NoCapture: true})
	require.NoError(t, err)
	capt, err := NewInference(p, InferenceOptions{})
	require.NoError(t, err)
	var graphs []*Graph
	for seed := 0; seed < 4; seed++ {
		graphs = append(graphs, mustGraph(t, testInput(t, 3, 2*seed))) // one shape, other values
	}
	batch, err := BuildGraphBatch([]GraphInput{testInput(t, 3, 0), testInput(t, 1, 1), testInput(t, 5, 2)})
	require.NoError(t, err)
	graphs = append(graphs, batch, mustGraph(t, testInput(t, 5, 1)))
	for round := 0; round < 3; round++ {
		for i, g := range graphs {
			want, err := eager.Forward(g)
			require.NoError(t, err)
			got, err := capt.Forward(g)
			require.NoError(t, err)
			require.Equal(t, want, got, "round %d graph %d", round, i)
		}
	}
	st := capt.Stats()
	assert.Equal(t, 3, st.Captures, "one capture per shape")
	assert.Positive(t, st.Replays)

	// Through the service: the same decisions.
	se := newTestService(t, ServiceOptions{Policy: p, NoCapture: true, Seed: 3})
	sc := newTestService(t, ServiceOptions{Policy: p, Seed: 3})
	for rep := 0; rep < 3; rep++ {
		for _, st := range serviceStates() {
			de, err := se.EvaluateEpoch(context.Background(), st)
			require.NoError(t, err)
			dc, err := sc.EvaluateEpoch(context.Background(), st)
			require.NoError(t, err)
			de.Reason, dc.Reason = "", "" // the latency is not in it, but be safe
			require.Equal(t, de, dc)
		}
	}
	assert.Positive(t, sc.Stats().Capture.Replays)
	assert.Zero(t, se.Stats().Capture.Replays)
}

// TestServiceCaptureFallback: a capture that fails falls back to eager
// forwards with the same decisions, is counted once however many calls
// follow, and is reported in tamiyo.gnn.compile_fallback_total.
func TestServiceCaptureFallback(t *testing.T) {
	p := mustPolicy(t, smallOptions(tensor.F32))
	sink := &syncSink{}
	s := newTestService(t, ServiceOptions{Policy: p, Sink: sink, Deterministic: true})
	s.infer.stepHook = func() {
		if kernels.For(p.Device()).Capturing() {
			panic("injected capture failure")
		}
	}
	ref := newTestService(t, ServiceOptions{Policy: p, NoCapture: true, Deterministic: true})
	st := serviceStates()[2]
	for i := 0; i < 5; i++ {
		d, err := s.EvaluateEpoch(context.Background(), st)
		require.NoError(t, err)
		want, err := ref.EvaluateEpoch(context.Background(), st)
		require.NoError(t, err)
		assert.Equal(t, want, d)
	}
	stats := s.Stats()
	assert.Equal(t, 1, stats.CaptureFallbacks)
	assert.Zero(t, stats.Capture.Captures)
	assert.Equal(t, 5, stats.Capture.EagerCalls)

	var fallbackEvents int
	var last leyline.TelemetryEvent
	for _, ev := range sink.all() {
		if strings.HasPrefix(ev.Message, EventCompileFallback) {
			fallbackEvents++
			assert.Contains(t, ev.Message, "injected capture failure")
		} else {
			last = ev
		}
	}
	assert.Equal(t, 1, fallbackEvents)
	v, ok := metric(last, leyline.MetricTamiyoGNNCompileFallbackTotal)
	assert.True(t, ok)
	assert.Equal(t, 1.0, v)
	v, _ = metric(last, leyline.MetricTamiyoGNNCompileEnabled)
	assert.Equal(t, 0.0, v)
}

// TestServiceIsAController: wrapped in Tracked, as the trainer uses it,
// the service decides from raw epoch figures.
func TestServiceIsAController(t *testing.T) {
	s := newTestService(t, ServiceOptions{Seed: 1})
	c, err := NewTracked(s, TrackerOptions{})
	require.NoError(t, err)
	var ctl Controller = c
	for e := 0; e < 4; e++ {
		st := epochState(e, 0, false)
		st.Signals.Metrics.ValLoss, st.Signals.Metrics.ValAccuracy = 2-0.1*float64(e), 30+float64(e)
		d, err := ctl.EvaluateEpoch(context.Background(), st)
		require.NoError(t, err)
		checkDecision(t, d, st)
	}
	assert.False(t, errors.Is(nil, ErrInferenceTimeout))
}

// TestInferenceReplayLast: ReplayLast is an error for an Inference that
// does not capture, and before its first replay; after one it runs the
// latest forward's graph again (a replay counted), leaving the logits
// Forward returned as they were and the next forward's the same; once
// the parameters have moved it is an error.
func TestInferenceReplayLast(t *testing.T) {
	p := mustPolicy(t, smallOptions(tensor.F32))
	eager, err := NewInference(p, InferenceOptions{NoCapture: true})
	require.NoError(t, err)
	require.Error(t, eager.ReplayLast())
	capt, err := NewInference(p, InferenceOptions{})
	require.NoError(t, err)
	require.Error(t, capt.ReplayLast(), "no forward yet")
	g := mustGraph(t, testInput(t, 3, 1))
	var got *Logits
	for range 3 { // the warm-up, the capture, a replay
		got, err = capt.Forward(g)
		require.NoError(t, err)
	}
	want, err := eager.Forward(g)
	require.NoError(t, err)
	replays := capt.Stats().Replays
	require.NoError(t, capt.ReplayLast())
	require.Equal(t, replays+1, capt.Stats().Replays)
	require.Equal(t, want, got, "the logits the latest Forward returned")
	again, err := capt.Forward(g)
	require.NoError(t, err)
	require.Equal(t, want, again)

	// An optimizer's arena moves the parameters: the graph would read
	// where they were, so ReplayLast refuses until a forward recaptures.
	_, err = optim.NewSGD(p.Parameters(), optim.SGDOptions{LR: 0.1})
	require.NoError(t, err)
	require.ErrorContains(t, capt.ReplayLast(), "parameter version")
}
