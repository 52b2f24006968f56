package tamiyo

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

// --- a deterministic environment for Tracked+Heuristic ---

// simSeed is one seed of the simulated host.
type simSeed struct {
	id, slot, bp     string
	stage            leyline.SeedStage
	inStage, total   int
	fossilizedBefore bool
}

// sim is a host whose seeds react to the controller's decisions by
// blueprint: conv_light fails in BLENDING (pruned), attention reaches
// HOLDING without contributing (pruned), depthwise is "ransomware"
// (pruned), norm and conv_heavy are fossilized. The loss falls fast at
// first (no stabilisation) then flattens; accuracy creeps up (plateau)
// and jumps after each fossilisation (plateau reset).
type sim struct {
	epoch  int
	seeds  []*simSeed
	nextID int
	boost  float64
}

func (m *sim) state() leyline.EpochState {
	e := m.epoch
	loss := 2 * math.Pow(0.8, float64(min(e, 6))) * math.Pow(0.99, float64(max(0, e-6)))
	acc := 50 + 0.1*float64(e) + m.boost
	slots := leyline.DefaultSlotConfig()
	var reports []leyline.SeedReport
	for _, s := range m.seeds {
		r := leyline.SeedReport{SeedID: s.id, SlotID: s.slot, BlueprintID: s.bp, Stage: s.stage,
			EpochsInStage: s.inStage, EpochsTotal: s.total, AlphaTarget: 1, AlphaMode: leyline.AlphaUp}
		bad := s.bp == "conv_light"
		switch s.stage {
		case leyline.StageTraining:
			r.ImprovementSinceStageStart = 1
			if bad {
				r.ImprovementSinceStageStart = -3
			}
		case leyline.StageBlending:
			if bad {
				r.Alpha = min(0.9, 0.1*float64(s.inStage))
				r.ImprovementSinceStageStart = -3
			} else {
				r.Alpha = min(1, float64(s.inStage)/3)
				r.ImprovementSinceStageStart = 0.5
				if r.Alpha == 1 {
					r.AlphaMode = leyline.AlphaHold
				}
			}
		case leyline.StageHolding, leyline.StageFossilized:
			r.Alpha, r.AlphaMode = 1, leyline.AlphaHold
			c := 1.0
			r.TotalImprovement = 2
			switch s.bp {
			case "attention":
				c, r.TotalImprovement = 0.2, 0.5
			case "depthwise":
				c, r.TotalImprovement = 0.3, -1
			}
			if s.stage == leyline.StageHolding && s.inStage == 0 {
				break // counterfactual not measured yet: WAIT
			}
			r.Counterfactual = &c
		}
		reports = append(reports, r)
	}
	return leyline.EpochState{
		Signals: leyline.TrainingSignals{
			Metrics: leyline.TrainingMetrics{Epoch: e, GlobalStep: 100 * e,
				TrainLoss: loss * 0.9, ValLoss: loss, TrainAccuracy: acc + 1, ValAccuracy: acc},
			AvailableSlots: len(slots.IDs()) - len(m.seeds),
		},
		Seeds: reports, Slots: slots, Topology: leyline.TopologyCNN,
	}
}

// apply carries out d and moves to the next epoch.
func (m *sim) apply(t *testing.T, d leyline.Decision) {
	t.Helper()
	find := func() int {
		for i, s := range m.seeds {
			if s.slot == d.SlotID {
				return i
			}
		}
		t.Fatalf("epoch %d: %v names slot %q without a seed", m.epoch, d, d.SlotID)
		return -1
	}
	switch d.Op {
	case leyline.OpGerminate:
		m.nextID++
		m.seeds = append(m.seeds, &simSeed{id: fmt.Sprintf("seed%d", m.nextID), slot: d.SlotID, bp: d.Blueprint.ID(), stage: leyline.StageGerminated})
	case leyline.OpAdvance:
		s := m.seeds[find()]
		next := map[leyline.SeedStage]leyline.SeedStage{
			leyline.StageGerminated: leyline.StageTraining,
			leyline.StageTraining:   leyline.StageBlending,
			leyline.StageBlending:   leyline.StageHolding,
		}[s.stage]
		require.NotZero(t, next, "advance from %v", s.stage)
		s.stage, s.inStage = next, -1
	case leyline.OpFossilize:
		s := m.seeds[find()]
		s.stage, s.inStage = leyline.StageFossilized, -1
		m.boost += 2
	case leyline.OpPrune:
		i := find()
		m.seeds = append(m.seeds[:i], m.seeds[i+1:]...)
	}
	for _, s := range m.seeds {
		s.inStage++
		s.total++
	}
	m.epoch++
}

var simOptions = HeuristicOptions{
	PlateauEpochsToGerminate: 2,
	MinEpochsBeforeGerminate: 3,
	EmbargoEpochsAfterPrune:  2,
	BlueprintPenaltyDecay:    0.97,
	BlueprintRotation:        []string{"conv_light", "conv_light", "conv_light", "attention", "depthwise", "norm", "conv_heavy"},
}

func newSimController(t *testing.T) (*Tracked, *Heuristic) {
	t.Helper()
	h := newHeuristic(t, simOptions)
	c, err := NewTracked(h, TrackerOptions{})
	require.NoError(t, err)
	return c, h
}

// runSim decides epochs [m.epoch, n) with c, applying each decision.
func runSim(t *testing.T, c Controller, m *sim, n int) []leyline.Decision {
	t.Helper()
	var out []leyline.Decision
	for m.epoch < n {
		d, err := c.EvaluateEpoch(context.Background(), m.state())
		require.NoError(t, err, "epoch %d", m.epoch)
		out = append(out, d)
		m.apply(t, d)
	}
	return out
}

const simEpochs = 80

// TestSimExercisesState: the scenario germinates, prunes (in BLENDING,
// in HOLDING, as ransomware), embargoes, skips a penalised blueprint and
// fossilizes, so the state's every part matters to its decisions.
func TestSimExercisesState(t *testing.T) {
	c, h := newSimController(t)
	m := &sim{}
	var ops = map[leyline.LifecycleOp]int{}
	var germinated []string
	embargo, skipped := false, false
	for m.epoch < simEpochs {
		before := h.Penalties()
		d, err := c.EvaluateEpoch(context.Background(), m.state())
		require.NoError(t, err)
		ops[d.Op]++
		if d.Op == leyline.OpGerminate {
			germinated = append(germinated, d.Blueprint.ID())
			if before["conv_light"]*simOptions.BlueprintPenaltyDecay >= leyline.BlueprintPenaltyThreshold {
				skipped = true
			}
		}
		embargo = embargo || strings.HasPrefix(d.Reason, "Embargo")
		m.apply(t, d)
	}
	t.Logf("ops %v, germinated %v", ops, germinated)
	assert.GreaterOrEqual(t, ops[leyline.OpPrune], 4)
	assert.GreaterOrEqual(t, ops[leyline.OpFossilize], 2)
	assert.True(t, embargo, "an embargo WAIT")
	assert.True(t, skipped, "a germination while conv_light was over the threshold")
	require.GreaterOrEqual(t, len(germinated), 5)
	assert.Equal(t, []string{"conv_light", "conv_light", "attention", "depthwise"}, germinated[:4],
		"the third conv_light is skipped for its penalty")
	assert.True(t, c.Tracker().IsStabilized())
}

// TestResumeDecidesAsUninterrupted: a run interrupted after any number of
// epochs k, its state marshalled and restored into a fresh Tracked and
// Heuristic, decides epochs k..N−1 exactly as the uninterrupted run.
func TestResumeDecidesAsUninterrupted(t *testing.T) {
	c, _ := newSimController(t)
	want := runSim(t, c, &sim{}, simEpochs)
	for k := 0; k < simEpochs; k++ {
		a, _ := newSimController(t)
		m := &sim{}
		got := runSim(t, a, m, k)
		raw, err := a.MarshalState()
		require.NoError(t, err)
		require.True(t, json.Valid(raw))
		// Through a checkpoint-like JSON container, as tolaria stores it.
		meta, err := json.Marshal(map[string]json.RawMessage{"controller": raw})
		require.NoError(t, err)
		var back map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(meta, &back))

		b, _ := newSimController(t)
		require.NoError(t, b.UnmarshalState(back["controller"]), "k = %d", k)
		got = append(got, runSim(t, b, m, simEpochs)...)
		require.Equal(t, want, got, "interrupted after %d epochs", k)
	}
}

// --- round trips ---

func TestTrackerStateRoundTrip(t *testing.T) {
	tr := newTracker(t, TrackerOptions{HistoryWindow: 4})
	// Fresh: previous loss +Inf, empty histories.
	raw, err := tr.MarshalState()
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"prev_loss":"+Inf"`)
	fresh := newTracker(t, TrackerOptions{HistoryWindow: 4})
	fresh.st.plateau = 7
	require.NoError(t, fresh.UnmarshalState(raw))
	assert.Equal(t, tr.st, fresh.st)

	feed(t, tr, []float64{3, 2.9, math.NaN(), math.Inf(1), 2.8, math.Copysign(0, -1)}, []float64{10, 10.2, 11, 5e-324, 12, 1e300})
	raw, err = tr.MarshalState()
	require.NoError(t, err)
	got := newTracker(t, TrackerOptions{HistoryWindow: 4})
	require.NoError(t, got.UnmarshalState(raw))
	assertSameTrackerState(t, tr.st, got.st)
	require.True(t, math.Signbit(got.st.prevLoss), "−0 survives")

	// Peek agrees after the round trip.
	r := EpochResult{Epoch: 6, ValLoss: 2.7, ValAccuracy: 12.1}
	s1, err := tr.Peek(r)
	require.NoError(t, err)
	s2, err := got.Peek(r)
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprint(s1), fmt.Sprint(s2))

	// And the encoding is stable.
	raw2, err := got.MarshalState()
	require.NoError(t, err)
	assert.Equal(t, string(raw), string(raw2))
}

// assertSameTrackerState compares bit for bit (NaN equals NaN).
func assertSameTrackerState(t *testing.T, want, got trackerState) {
	t.Helper()
	bits := func(v []float64) []uint64 {
		out := make([]uint64, len(v))
		for i, x := range v {
			out[i] = math.Float64bits(x)
		}
		return out
	}
	assert.Equal(t, bits(want.losses), bits(got.losses))
	assert.Equal(t, bits(want.accuracies), bits(got.accuracies))
	assert.Equal(t, bits([]float64{want.bestAccuracy, want.prevLoss, want.prevAcc}), bits([]float64{got.bestAccuracy, got.prevLoss, got.prevAcc}))
	assert.Equal(t, want.plateau, got.plateau)
	assert.Equal(t, want.stabilized, got.stabilized)
	assert.Equal(t, want.stableCount, got.stableCount)
}

func TestHeuristicStateRoundTrip(t *testing.T) {
	h := newHeuristic(t, HeuristicOptions{})
	raw, err := h.MarshalState()
	require.NoError(t, err)
	fresh := newHeuristic(t, HeuristicOptions{})
	require.NoError(t, fresh.UnmarshalState(raw))
	assert.Equal(t, h.st, fresh.st)

	h.st = heuristicState{blueprintIndex: 13, germinations: 9, lastPruneEpoch: 41, lastDecayEpoch: 44,
		penalties: map[string]float64{"norm": 2.375, "attention": 0.1 + 0.2, "conv_light": math.Inf(1)}}
	raw, err = h.MarshalState()
	require.NoError(t, err)
	require.True(t, json.Valid(raw))
	got := newHeuristic(t, HeuristicOptions{})
	require.NoError(t, got.UnmarshalState(raw))
	assert.Equal(t, h.st, got.st)
	assert.Equal(t, 9, got.GerminationCount())
	assert.Equal(t, 41, got.LastPruneEpoch())
	// The restored penalties are the heuristic's own, not shared.
	got.st.penalties["norm"] = 0
	assert.Equal(t, 2.375, h.st.penalties["norm"])
}

func TestTrackedStateRoundTrip(t *testing.T) {
	c, h := newSimController(t)
	runSim(t, c, &sim{}, 30)
	raw, err := c.MarshalState()
	require.NoError(t, err)
	d, h2 := newSimController(t)
	require.NoError(t, d.UnmarshalState(raw))
	assertSameTrackerState(t, c.tracker.st, d.tracker.st)
	assert.Equal(t, h.st, h2.st)
	var j map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &j))
	assert.Equal(t, "1", string(j["version"]))
	assert.Contains(t, j, "tracker")
	assert.Contains(t, j, "inner")
}

// --- refusals leave the receiver unchanged ---

// statelessController keeps no state.
type statelessController struct{}

func (statelessController) EvaluateEpoch(context.Context, leyline.EpochState) (leyline.Decision, error) {
	return leyline.Wait("stateless"), nil
}

func TestUnmarshalStateRefusals(t *testing.T) {
	// A populated Tracked+Heuristic whose state every refusal must leave.
	c, h := newSimController(t)
	runSim(t, c, &sim{}, 25)
	good, err := c.MarshalState()
	require.NoError(t, err)
	hGood, err := h.MarshalState()
	require.NoError(t, err)
	tGood, err := c.tracker.MarshalState()
	require.NoError(t, err)

	// edit returns s with its JSON object's key set to v (deleted for nil).
	edit := func(s []byte, key string, v any) []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal(s, &m))
		if v == nil {
			delete(m, key)
		} else {
			m[key] = v
		}
		out, err := json.Marshal(m)
		require.NoError(t, err)
		return out
	}
	nest := func(tracker []byte) []byte {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(good, &m))
		m["tracker"] = tracker
		out, err := json.Marshal(m)
		require.NoError(t, err)
		return out
	}

	type target struct {
		name string
		c    interface{ UnmarshalState([]byte) error }
	}
	cases := []struct {
		name string
		on   target
		data []byte
		want string
	}{
		{"malformed", target{"tracked", c}, []byte(`{"version":1,`), "invalid controller state"},
		{"not an object", target{"heuristic", h}, []byte(`[1,2]`), "invalid controller state"},
		{"empty", target{"tracker", c.tracker}, []byte(``), "invalid controller state"},
		{"null", target{"heuristic", h}, []byte(`null`), "missing schema version"},
		{"trailing data", target{"heuristic", h}, append(append([]byte(nil), hGood...), []byte(` {}`)...), "data after"},
		{"missing version", target{"tracked", c}, edit(good, "version", nil), "missing schema version"},
		{"unknown version", target{"tracked", c}, edit(good, "version", 2), "unknown schema version 2"},
		{"heuristic missing version", target{"heuristic", h}, edit(hGood, "version", nil), "missing schema version"},
		{"heuristic unknown version", target{"heuristic", h}, edit(hGood, "version", 99), "unknown schema version 99"},
		{"tracker missing version", target{"tracker", c.tracker}, edit(tGood, "version", nil), "missing schema version"},
		{"tracker unknown version", target{"tracker", c.tracker}, edit(tGood, "version", 7), "unknown schema version 7"},
		{"nested tracker bad version", target{"tracked", c}, nest(edit(tGood, "version", 3)), "unknown schema version 3"},
		{"unknown field", target{"heuristic", h}, edit(hGood, "extra", 1), "unknown field"},
		{"missing penalties", target{"heuristic", h}, edit(hGood, "penalties", nil), `missing field "penalties"`},
		{"missing index", target{"heuristic", h}, edit(hGood, "blueprint_index", nil), `missing field "blueprint_index"`},
		{"other topology", target{"heuristic", h}, edit(hGood, "topology", "mlp"), `made for topology "mlp"`},
		{"other rotation", target{"heuristic", h}, edit(hGood, "rotation", []string{"norm"}), "blueprint rotation [norm]"},
		{"negative index", target{"heuristic", h}, edit(hGood, "blueprint_index", -1), "blueprint_index = -1"},
		{"negative penalty", target{"heuristic", h}, edit(hGood, "penalties", map[string]any{"norm": -1}), "negative"},
		{"bad float string", target{"heuristic", h}, edit(hGood, "penalties", map[string]any{"norm": "inf"}), `"inf"`},
		{"null float", target{"tracker", c.tracker}, edit(edit(tGood, "losses", []any{nil}), "accuracies", []any{1}), "float is null"},
		{"null field", target{"tracker", c.tracker}, edit(tGood, "prev_loss", json.RawMessage(`null`)), `missing field "prev_loss"`},
		{"missing prev_loss", target{"tracker", c.tracker}, edit(tGood, "prev_loss", nil), `missing field "prev_loss"`},
		{"history too long", target{"tracker", c.tracker}, edit(edit(tGood, "losses", make([]int, 11)), "accuracies", make([]int, 11)), "HistoryWindow 10"},
		{"histories differ", target{"tracker", c.tracker}, edit(tGood, "losses", []int{1}), "losses but"},
		{"nested tracker invalid", target{"tracked", c}, nest(edit(tGood, "plateau", -2)), "plateau = -2"},
		{"missing tracker", target{"tracked", c}, edit(good, "tracker", nil), `missing field "tracker"`},
		{"missing inner", target{"tracked", c}, edit(good, "inner", nil), "has no inner controller state"},
		{"inner refused", target{"tracked", c}, edit(good, "inner", json.RawMessage(edit(hGood, "topology", "mlp"))), `made for topology "mlp"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.on.c.UnmarshalState(tc.data)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrState)
			assert.Contains(t, err.Error(), tc.want)
			// Nothing changed.
			now, err := c.MarshalState()
			require.NoError(t, err)
			assert.Equal(t, string(good), string(now))
		})
	}

	// Inner state for an inner controller that keeps none.
	s, err := NewTracked(statelessController{}, TrackerOptions{})
	require.NoError(t, err)
	before, err := s.MarshalState()
	require.NoError(t, err)
	assert.NotContains(t, string(before), `"inner"`)
	err = s.UnmarshalState(good)
	require.ErrorIs(t, err, ErrState)
	assert.Contains(t, err.Error(), "cannot load it")
	after, err := s.MarshalState()
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after))

	// A stateless inner round-trips the tracker alone.
	runSim(t, s, &sim{}, 5)
	raw, err := s.MarshalState()
	require.NoError(t, err)
	s2, err := NewTracked(statelessController{}, TrackerOptions{})
	require.NoError(t, err)
	require.NoError(t, s2.UnmarshalState(raw))
	assertSameTrackerState(t, s.tracker.st, s2.tracker.st)
}

// TestTrackerStateMustFitOptions: a tracker refuses states its options
// could not have produced.
func TestTrackerStateMustFitOptions(t *testing.T) {
	tr := newTracker(t, TrackerOptions{})
	raw, err := tr.MarshalState() // not stabilised yet
	require.NoError(t, err)
	off := newTracker(t, TrackerOptions{StabilizationEpochs: -1})
	err = off.UnmarshalState(raw)
	require.ErrorIs(t, err, ErrState)
	assert.Contains(t, err.Error(), "disable stabilisation")
	assert.True(t, off.IsStabilized())

	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	m["stable_count"] = 3
	bad, err := json.Marshal(m)
	require.NoError(t, err)
	err = tr.UnmarshalState(bad)
	require.ErrorIs(t, err, ErrState)
	assert.Contains(t, err.Error(), "would have latched")
}

// TestHeuristicStateConcurrentUse: marshalling and restoring while other
// goroutines decide is race-free (run with -race).
func TestHeuristicStateConcurrentUse(t *testing.T) {
	h := newHeuristic(t, HeuristicOptions{})
	raw, err := h.MarshalState()
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := 0; e < 200; e++ {
			h.Decide(epochState(e, 0, true, failingTraining("a", "r0c0", "norm")))
		}
	}()
	for i := 0; i < 200; i++ {
		if _, err := h.MarshalState(); err != nil {
			t.Error(err)
		}
		if err := h.UnmarshalState(raw); err != nil {
			t.Error(err)
		}
	}
	<-done
}

// TestResumeNeedsEveryPart: the scenario is sensitive to each part of the
// state Decide depends on: dropping any one of them on resume changes
// some continued run's decisions.
func TestResumeNeedsEveryPart(t *testing.T) {
	c, _ := newSimController(t)
	want := runSim(t, c, &sim{}, simEpochs)
	parts := map[string]func(*Tracked, *Heuristic){
		"blueprint index":  func(_ *Tracked, h *Heuristic) { h.st.blueprintIndex = 0 },
		"last prune epoch": func(_ *Tracked, h *Heuristic) { h.st.lastPruneEpoch = initialLastPruneEpoch },
		"penalties":        func(_ *Tracked, h *Heuristic) { h.st.penalties = map[string]float64{} },
		"previous loss":    func(c *Tracked, _ *Heuristic) { c.tracker.st.prevLoss = math.Inf(1) },
		"previous acc":     func(c *Tracked, _ *Heuristic) { c.tracker.st.prevAcc = 0 },
		"plateau":          func(c *Tracked, _ *Heuristic) { c.tracker.st.plateau = 0 },
		"stable count":     func(c *Tracked, _ *Heuristic) { c.tracker.st.stableCount = 0 },
		// The latch with its count (the count alone would re-latch at once).
		"stabilized": func(c *Tracked, _ *Heuristic) { c.tracker.st.stabilized, c.tracker.st.stableCount = false, 0 },
	}
	for name, drop := range parts {
		diverged := false
		for k := 0; k < simEpochs && !diverged; k++ {
			a, _ := newSimController(t)
			m := &sim{}
			runSim(t, a, m, k)
			raw, err := a.MarshalState()
			require.NoError(t, err)
			b, hb := newSimController(t)
			require.NoError(t, b.UnmarshalState(raw))
			drop(b, hb)
			for m.epoch < simEpochs {
				d, err := b.EvaluateEpoch(context.Background(), m.state())
				require.NoError(t, err)
				if d != want[m.epoch] {
					diverged = true
					break
				}
				m.apply(t, d)
			}
		}
		assert.True(t, diverged, "dropping the %s on resume changes nothing: the scenario does not test it", name)
	}
}
