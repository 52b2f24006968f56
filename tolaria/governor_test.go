package tolaria

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

func newGovernor(t *testing.T, o GovernorOptions) (*Governor, *kasmina.MorphogeneticModel) {
	t.Helper()
	m := newModel(t, nil)
	g, err := NewGovernor(m, o)
	if err != nil {
		t.Fatal(err)
	}
	return g, m
}

// feed records losses that must not panic.
func feed(t *testing.T, g *Governor, losses ...float64) {
	t.Helper()
	for _, l := range losses {
		if p, r := g.CheckVitalSigns(l); p {
			t.Fatalf("loss %v panicked (%s)", l, r)
		}
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestGovernorDefaults(t *testing.T) {
	g, _ := newGovernor(t, GovernorOptions{})
	o := g.Options()
	if o.Sensitivity != 6 || o.Multiplier != 3 || o.AbsoluteThreshold != 12 || o.DeathPenalty != 10 ||
		o.HistoryWindow != 20 || o.MinPanics != 3 || o.MaxRollbacks != 3 || o.RandomGuessLoss != math.Log(10) {
		t.Fatalf("defaults %+v", o)
	}
	if got := g.PunishmentReward(); got != -10 {
		t.Fatalf("PunishmentReward = %v, want -10", got)
	}
	g2, _ := newGovernor(t, GovernorOptions{Classes: 100})
	if g2.Options().RandomGuessLoss != math.Log(100) {
		t.Fatalf("random guess loss %v, want ln(100)", g2.Options().RandomGuessLoss)
	}
}

func TestGovernorOptionErrors(t *testing.T) {
	m := newModel(t, nil)
	for name, o := range map[string]GovernorOptions{
		"window 9":           {HistoryWindow: 9},
		"window 1":           {HistoryWindow: 1},
		"negative window":    {HistoryWindow: -5},
		"negative sens":      {Sensitivity: -1},
		"nan threshold":      {AbsoluteThreshold: math.NaN()},
		"inf guess":          {RandomGuessLoss: math.Inf(1)},
		"one class":          {Classes: 1},
		"negative panics":    {MinPanics: -1},
		"negative rollbacks": {MaxRollbacks: -1},
		"negative penalty":   {DeathPenalty: -10},
		"negative multiple":  {Multiplier: -3},
	} {
		if _, err := NewGovernor(m, o); err == nil {
			t.Errorf("%s: expected an error", name)
		}
	}
	if _, err := NewGovernor(nil, GovernorOptions{}); err == nil {
		t.Error("nil model: expected an error")
	}
	if _, err := NewGovernor(m, GovernorOptions{HistoryWindow: 10}); err != nil {
		t.Errorf("window 10: %v", err)
	}
}

func TestVitalSignsNaNInfImmediate(t *testing.T) {
	for _, l := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		g, _ := newGovernor(t, GovernorOptions{})
		// Even with no history at all.
		p, r := g.CheckVitalSigns(l)
		if !p || r != leyline.PanicReasonNaN {
			t.Fatalf("loss %v: panic %v %q, want true governor_nan", l, p, r)
		}
		if g.ConsecutivePanics() != 0 || len(g.History()) != 0 {
			t.Fatalf("loss %v: counter %d history %v must be untouched", l, g.ConsecutivePanics(), g.History())
		}
	}
}

func TestVitalSignsFewSamplesNeverPanic(t *testing.T) {
	g, _ := newGovernor(t, GovernorOptions{})
	feed(t, g, repeat(1, 9)...)
	// The 10th sample is recorded whatever it is, short of absurd: no
	// statistics yet. 11.9 is ≥ 3·avg but not above the threshold 12.
	feed(t, g, 11.9)
	if n := len(g.History()); n != 10 {
		t.Fatalf("history %d, want 10", n)
	}
}

// TestVitalSignsAbsurdFirstLossIsNoBaseline (issue 20, point 6): a run
// that diverges from its first epoch used to record its first loss
// (4e30) as the baseline — the statistics then saw nothing wrong and
// the snapshots kept the diverged state. With fewer than
// MinHistoryWindow samples, a loss above AbsoluteThreshold and Multiplier
// times the random-guess loss (or the average so far, when higher) is an
// anomaly: not recorded, pending, a panic after MinPanics in a row.
func TestVitalSignsAbsurdFirstLossIsNoBaseline(t *testing.T) {
	g, _ := newGovernor(t, GovernorOptions{Classes: 3})
	for i := 1; i <= 3; i++ {
		p, r := g.CheckVitalSigns(3.97e30)
		if want := i == 3; p != want || (p && r != leyline.PanicReasonDivergence) {
			t.Fatalf("absurd loss %d: panic %v %q, want %v", i, p, r, want)
		}
		if !g.Pending() || len(g.History()) != 0 {
			t.Fatalf("absurd loss %d: pending %v history %v; want pending and nothing recorded", i, g.Pending(), g.History())
		}
	}
	// A sane loss after a few: recorded, and the count and pending
	// state cleared.
	g, _ = newGovernor(t, GovernorOptions{Classes: 3})
	feed(t, g, 40, 1.2)
	if g.Pending() || g.ConsecutivePanics() != 0 || len(g.History()) != 1 {
		t.Fatalf("pending %v, consecutive %d, history %v", g.Pending(), g.ConsecutivePanics(), g.History())
	}
	// The reference is the higher of ln(classes) and the average so far:
	// a task whose loss sits near 5 may see 14 (< 3·4.8) early on.
	feed(t, g, 6, 6, 6, 14)
	if g.Pending() || len(g.History()) != 5 {
		t.Fatalf("14 after an average of 4.8: pending %v, history %v", g.Pending(), g.History())
	}
	// Below the absolute threshold nothing is absurd, whatever the
	// ratio.
	g, _ = newGovernor(t, GovernorOptions{Classes: 3})
	feed(t, g, 11)
	if g.Pending() || len(g.History()) != 1 {
		t.Fatalf("11 < 12: pending %v, history %v", g.Pending(), g.History())
	}
}

func TestVitalSignsSpikeNeedsAllThreeConditions(t *testing.T) {
	cases := []struct {
		name    string
		history []float64
		loss    float64
		anomaly bool
	}{
		// avg 10, σ 0: 25 > 12 and > avg+6σ, but not > 3·avg = 30.
		{"not 3x average", repeat(10, 10), 25, false},
		// avg 4, σ 3: 20 > 12 and > 3·avg = 12, but not > avg+6σ = 22.
		{"not 6 sigma", []float64{1, 7, 1, 7, 1, 7, 1, 7, 1, 7}, 20, false},
		// avg 1, σ 0: 10 > 3 and > 1, but not > 12.
		{"not absolute", repeat(1, 10), 10, false},
		{"all three", repeat(1, 10), 100, true},
		{"all three with variance", []float64{1, 7, 1, 7, 1, 7, 1, 7, 1, 7}, 23, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, _ := newGovernor(t, GovernorOptions{})
			feed(t, g, c.history...)
			for i := 1; i <= 3; i++ {
				p, r := g.CheckVitalSigns(c.loss)
				want := c.anomaly && i == 3
				if p != want {
					t.Fatalf("call %d: panic %v (%q), want %v", i, p, r, want)
				}
				if want && r != leyline.PanicReasonDivergence {
					t.Fatalf("reason %q, want governor_divergence", r)
				}
				wantCount := 0
				if c.anomaly {
					wantCount = i
				}
				if g.ConsecutivePanics() != wantCount {
					t.Fatalf("call %d: consecutive %d, want %d", i, g.ConsecutivePanics(), wantCount)
				}
			}
			// An anomaly is never added to the history.
			wantLen := len(c.history)
			if !c.anomaly {
				wantLen += 3
			}
			if n := len(g.History()); n != wantLen {
				t.Fatalf("history %d, want %d", n, wantLen)
			}
		})
	}
}

func TestVitalSignsNormalLossResetsCounter(t *testing.T) {
	g, _ := newGovernor(t, GovernorOptions{})
	feed(t, g, repeat(1, 10)...)
	feed(t, g, 100, 100)
	if g.ConsecutivePanics() != 2 {
		t.Fatalf("consecutive %d, want 2", g.ConsecutivePanics())
	}
	feed(t, g, 1.1)
	if g.ConsecutivePanics() != 0 {
		t.Fatalf("a normal loss left the counter at %d", g.ConsecutivePanics())
	}
	feed(t, g, 100, 100)
	if p, _ := g.CheckVitalSigns(100); !p {
		t.Fatal("three consecutive anomalies after the reset must panic")
	}
}

func TestVitalSignsLobotomy(t *testing.T) {
	l := math.Log(10) // ≈ 2.3026; 0.6·L ≈ 1.3816; tolerance 0.065·L ≈ 0.1497
	cases := []struct {
		name  string
		avg   float64
		loss  float64
		panic bool
	}{
		{"low average, loss at ln(classes)", 1.0, l, true},
		{"low average, loss within tolerance", 1.0, l - 0.14, true},
		{"low average, loss outside tolerance", 1.0, l + 0.16, false},
		{"average above 0.6x", 1.5, l, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, _ := newGovernor(t, GovernorOptions{})
			feed(t, g, repeat(c.avg, 10)...)
			p, r := g.CheckVitalSigns(c.loss)
			if p != c.panic {
				t.Fatalf("panic %v (%q), want %v", p, r, c.panic)
			}
			if p && r != leyline.PanicReasonLobotomy {
				t.Fatalf("reason %q, want governor_lobotomy", r)
			}
		})
	}
	// The rule needs 10 samples first.
	g, _ := newGovernor(t, GovernorOptions{})
	feed(t, g, repeat(1, 9)...)
	feed(t, g, l)
	// A given random-guess loss replaces ln(classes).
	g, _ = newGovernor(t, GovernorOptions{RandomGuessLoss: 10.8})
	feed(t, g, repeat(3, 10)...)
	if p, r := g.CheckVitalSigns(10.5); !p || r != leyline.PanicReasonLobotomy {
		t.Fatalf("TinyStories-like lobotomy: %v %q", p, r)
	}
}

func TestGovernorHistoryWindow(t *testing.T) {
	g, _ := newGovernor(t, GovernorOptions{HistoryWindow: 12})
	for i := range 30 {
		feed(t, g, 1+float64(i)*0.01)
	}
	h := g.History()
	if len(h) != 12 || h[11] != 1.29 || h[0] != 1.18 {
		t.Fatalf("history %v, want the last 12 losses", h)
	}
}

// rollbackScene builds a model with a fossilized seed in the snapshot
// and three live seeds germinated after it, scribbles over the host and
// the fossilized seed, and returns what the snapshot held.
type rollbackScene struct {
	m        *kasmina.MorphogeneticModel
	g        *Governor
	sink     *recorder
	slotSink *recorder
	ids      []string
	host     map[string]*tensor.Tensor
	fossil   map[string]*tensor.Tensor
}

func newRollbackScene(t *testing.T, gsink EventSink) *rollbackScene {
	t.Helper()
	slotSink := &recorder{}
	m := newModel(t, slotSink)
	ids := m.SlotIDs()
	rec := &recorder{}
	if gsink == nil {
		gsink = rec
	}
	g, err := NewGovernor(m, GovernorOptions{Sink: gsink})
	if err != nil {
		t.Fatal(err)
	}
	advanceTo(t, germinate(t, m, ids[0]), leyline.StageFossilized)
	// A live seed at snapshot time is left out of the snapshot.
	germinate(t, m, ids[1])
	if err := g.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if got := g.SnapshotSlots(); !slices.Equal(got, []string{ids[0]}) {
		t.Fatalf("snapshot slots %v, want only the fossilized %s", got, ids[0])
	}
	sc := &rollbackScene{m: m, g: g, sink: rec, slotSink: slotSink, ids: ids,
		host: nn.StateDict(m.Host()), fossil: slotWeights(t, slot(t, m, ids[0]))}
	advanceTo(t, slot(t, m, ids[1]), leyline.StageTraining)
	advanceTo(t, germinate(t, m, ids[2]), leyline.StageBlending)
	advanceTo(t, germinate(t, m, ids[3]), leyline.StageHolding)
	// Training went wrong: every weight moved.
	for _, p := range m.Host().NamedParameters() {
		fill(p.Var.Value, 0.125)
	}
	for _, b := range m.Host().NamedBuffers() {
		fill(b.Tensor, 3)
	}
	scribbleSlot(slot(t, m, ids[0]), -0.5)
	return sc
}

func TestRollbackRestoresAndPrunes(t *testing.T) {
	sc := newRollbackScene(t, nil)
	g, m, ids := sc.g, sc.m, sc.ids
	feed(t, g, []float64{1, 3, 1, 3, 1, 3, 1, 3, 1, 3}...) // avg 2, σ 1
	feed(t, g, 100, 100)
	if p, r := g.CheckVitalSigns(100); !p || r != leyline.PanicReasonDivergence {
		t.Fatalf("expected a divergence panic, got %v %q", p, r)
	}
	dev := testdevice.Device(t).String()
	var hooked *RollbackReport
	g.opts.OnRollback = func(r RollbackReport) { hooked = &r }
	rep, err := g.ExecuteRollback(3, dev)
	if err != nil {
		t.Fatal(err)
	}
	// Host: bit for bit, parameters and buffers.
	sameBits(t, sc.host, nn.StateDict(m.Host()))
	// The fossilized seed is back, with its snapshot weights.
	f := slot(t, m, ids[0])
	if f.Stage() != leyline.StageFossilized {
		t.Fatalf("fossilized slot is %v", f.Stage())
	}
	sameBits(t, sc.fossil, slotWeights(t, f))
	// Every live non-fossilized seed is pruned by the governor.
	for _, id := range ids[1:4] {
		s := slot(t, m, id)
		if s.Stage() != leyline.StagePruned || s.Seed() != nil {
			t.Fatalf("slot %s is %v after rollback, want PRUNED without a module", id, s.Stage())
		}
		if s.State().Metrics.AutoPruneReason != leyline.PanicReasonDivergence {
			t.Fatalf("slot %s prune reason %q", id, s.State().Metrics.AutoPruneReason)
		}
	}
	var governorPrunes int
	for _, e := range sc.slotSink.all() {
		if p, ok := e.Data.(*leyline.SeedPrunedPayload); ok && p.Initiator == kasmina.InitiatorGovernor {
			governorPrunes++
		}
	}
	if governorPrunes != 3 {
		t.Fatalf("%d SEED_PRUNED events with initiator governor, want 3", governorPrunes)
	}
	// Exactly one GOVERNOR_ROLLBACK event.
	if n := sc.sink.count(leyline.EventGovernorRollback); n != 1 || len(sc.sink.all()) != 1 {
		t.Fatalf("%d GOVERNOR_ROLLBACK events (%d in all), want exactly 1", n, len(sc.sink.all()))
	}
	pl := sc.sink.all()[0].Data.(*leyline.GovernorRollbackPayload)
	if err := pl.Validate(); err != nil {
		t.Fatal(err)
	}
	if pl.EnvID != 3 || pl.Device != dev || pl.PanicReason != leyline.PanicReasonDivergence || *pl.LossAtPanic != 100 {
		t.Fatalf("payload %+v", pl)
	}
	// The report.
	if rep.Reason != "Structural Collapse" || !rep.RollbackOccurred || rep.EnvID != 3 || rep.Device != dev ||
		rep.LossAtPanic != 100 || rep.LossThreshold != 2+6*1 || rep.ConsecutivePanics != 0 || rep.PanicsAtRollback != 3 {
		t.Fatalf("report %+v", rep)
	}
	if !slices.Equal(rep.PrunedSlots, ids[1:4]) || !slices.Equal(rep.RestoredSlots, ids[:1]) || rep.TelemetryError != "" {
		t.Fatalf("report slots %+v", rep)
	}
	// Panic counters are reset; the history is kept.
	if g.ConsecutivePanics() != 0 || len(g.History()) != 10 {
		t.Fatalf("after rollback: consecutive %d, history %d", g.ConsecutivePanics(), len(g.History()))
	}
	feed(t, g, 100, 100) // a fresh count: two anomalies do not panic
	if hooked == nil || hooked.RollbackOccurred != true {
		t.Fatal("OnRollback was not called with the report")
	}
	if g.PunishmentReward() != -10 {
		t.Fatalf("punishment %v", g.PunishmentReward())
	}
}

func TestRollbackWithoutPanic(t *testing.T) {
	g, m := newGovernor(t, GovernorOptions{})
	germinate(t, m, m.SlotIDs()[0])
	rep, err := g.ExecuteRollback(0, testdevice.Device(t).String())
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(rep.LossAtPanic) || !math.IsNaN(rep.LossThreshold) || rep.PanicReason != leyline.PanicReasonRollback {
		t.Fatalf("report %+v: want NaN loss and threshold, reason governor_rollback", rep)
	}
	if s := slot(t, m, m.SlotIDs()[0]); s.Stage() != leyline.StagePruned {
		t.Fatalf("live seed is %v", s.Stage())
	}
}

func TestRollbackSurvivesPanickingSink(t *testing.T) {
	sc := newRollbackScene(t, panicSink{})
	if p, _ := sc.g.CheckVitalSigns(math.NaN()); !p {
		t.Fatal("NaN must panic")
	}
	rep, err := sc.g.ExecuteRollback(1, testdevice.Device(t).String())
	if err != nil {
		t.Fatalf("a failing telemetry sink aborted the rollback: %v", err)
	}
	if !rep.RollbackOccurred || !strings.Contains(rep.TelemetryError, "exploded") {
		t.Fatalf("report %+v", rep)
	}
	sameBits(t, sc.host, nn.StateDict(sc.m.Host()))
	if rep.PanicReason != leyline.PanicReasonNaN || len(rep.PrunedSlots) != 3 {
		t.Fatalf("report %+v", rep)
	}
}

func TestRollbackSlotMismatchTolerated(t *testing.T) {
	sc := newRollbackScene(t, nil)
	// A snapshot slot the model does not have is skipped.
	sc.g.snap.slots["r9c9"] = sc.g.snap.slots[sc.ids[0]]
	rep, err := sc.g.ExecuteRollback(0, testdevice.Device(t).String())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.MissingSlots, []string{"r9c9"}) || !slices.Equal(rep.RestoredSlots, sc.ids[:1]) {
		t.Fatalf("report %+v", rep)
	}
	sameBits(t, sc.host, nn.StateDict(sc.m.Host()))
	pl := sc.sink.all()[0].Data.(*leyline.GovernorRollbackPayload)
	if !slices.Equal(pl.MissingKeys, []string{"seed_slots.r9c9"}) {
		t.Fatalf("payload missing keys %v", pl.MissingKeys)
	}
}

func TestRollbackHostMismatchFails(t *testing.T) {
	for name, tamper := range map[string]func(*testing.T, map[string]*tensor.Tensor){
		"unexpected key": func(t *testing.T, sd map[string]*tensor.Tensor) {
			sd["bogus.weight"] = testdevice.To(t, tensor.Zeros(tensor.F32, 1))
		},
		"missing key": func(_ *testing.T, sd map[string]*tensor.Tensor) {
			for k := range sd {
				delete(sd, k)
				return
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			sc := newRollbackScene(t, nil)
			before := nn.StateDict(sc.m.Host())
			tamper(t, sc.g.snap.host)
			if _, err := sc.g.ExecuteRollback(0, testdevice.Device(t).String()); err == nil {
				t.Fatal("expected an error for a host key mismatch")
			}
			// Nothing changed: no restore, no prune, no event.
			sameBits(t, before, nn.StateDict(sc.m.Host()))
			if s := slot(t, sc.m, sc.ids[3]); s.Stage() != leyline.StageHolding {
				t.Fatalf("live seed is %v after a failed rollback", s.Stage())
			}
			if n := len(sc.sink.all()); n != 0 {
				t.Fatalf("%d events after a failed rollback", n)
			}
		})
	}
}

func TestSnapshotIsIndependentCopy(t *testing.T) {
	g, m := newGovernor(t, GovernorOptions{})
	want := nn.StateDict(m.Host())
	for _, p := range m.Host().NamedParameters() {
		fill(p.Var.Value, 9)
	}
	sameBits(t, want, g.snap.host)
}

func TestGovernorReset(t *testing.T) {
	g, m := newGovernor(t, GovernorOptions{})
	feed(t, g, repeat(1, 10)...)
	feed(t, g, 100)
	for _, p := range m.Host().NamedParameters() {
		fill(p.Var.Value, 0.5)
	}
	if err := g.Reset(); err != nil {
		t.Fatal(err)
	}
	if len(g.History()) != 0 || g.ConsecutivePanics() != 0 {
		t.Fatal("Reset kept history or panic state")
	}
	// The fresh snapshot is the current state.
	sameBits(t, nn.StateDict(m.Host()), g.snap.host)
}

type countingResetter struct{ n int }

func (c *countingResetter) ResetState() { c.n++ }

func TestClearOptimizerState(t *testing.T) {
	_, m := newGovernor(t, GovernorOptions{})
	sgd, err := optim.NewSGD(m.HostParameters(), optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	sgd.Step()
	if sgd.StepCount() != 1 {
		t.Fatalf("step count %d", sgd.StepCount())
	}
	c := &countingResetter{}
	ClearOptimizerState(sgd, nil, c)
	if sgd.StepCount() != 0 || c.n != 1 {
		t.Fatalf("step count %d, resets %d", sgd.StepCount(), c.n)
	}
}

func TestPreflight(t *testing.T) {
	g, m := newGovernor(t, GovernorOptions{})
	ids := m.SlotIDs()
	germinate(t, m, ids[1])
	ok := PreflightContext{ValLoss: 1, ValAccuracy: 50}
	germ := leyline.Decision{Op: leyline.OpGerminate, SlotID: ids[0], Blueprint: leyline.BlueprintConvLight}
	cases := []struct {
		name   string
		d      leyline.Decision
		c      PreflightContext
		factor string
	}{
		{"wait always", leyline.Wait("x"), PreflightContext{ValLoss: math.NaN()}, ""},
		{"germinate ok", germ, ok, ""},
		{"nan loss", germ, PreflightContext{ValLoss: math.NaN()}, BlockedValLoss},
		{"inf accuracy", germ, PreflightContext{ValAccuracy: math.Inf(1)}, BlockedValAccuracy},
		{"negative cooldown", germ, PreflightContext{CooldownEpochs: -1}, BlockedCooldown},
		{"at the seed cap", germ, PreflightContext{MaxSeeds: 1}, ""},
		{"unknown slot", leyline.Decision{Op: leyline.OpAdvance, SlotID: "r7c7"}, ok, BlockedSlot},
		{"no blueprint", leyline.Decision{Op: leyline.OpGerminate, SlotID: ids[0], Blueprint: -1}, ok, BlockedBlueprint},
		{"occupied", leyline.Decision{Op: leyline.OpGerminate, SlotID: ids[1], Blueprint: leyline.BlueprintNorm}, ok, BlockedSlotOccupied},
		{"alpha without target", leyline.Decision{Op: leyline.OpSetAlphaTarget, SlotID: ids[1], AlphaTarget: 7}, ok, BlockedAlphaTarget},
		{"alpha without speed", leyline.Decision{Op: leyline.OpSetAlphaTarget, SlotID: ids[1], AlphaSpeed: -1}, ok, BlockedAlphaSchedule},
		{"prune without curve", leyline.Decision{Op: leyline.OpPrune, SlotID: ids[1], AlphaCurve: 9}, ok, BlockedAlphaSchedule},
		{"prune ok", leyline.Decision{Op: leyline.OpPrune, SlotID: ids[1]}, ok, ""},
	}
	for _, c := range cases {
		v := g.Preflight(c.d, c.c)
		if v.Approved != (c.factor == "") || v.BlockedFactor != c.factor {
			t.Errorf("%s: verdict %+v, want blocked factor %q", c.name, v, c.factor)
		}
		if v.Reason == "" {
			t.Errorf("%s: empty reason", c.name)
		}
	}
	germinate(t, m, ids[2])
	if v := g.Preflight(germ, PreflightContext{MaxSeeds: 1}); v.Approved || v.BlockedFactor != BlockedMaxSeeds || v.Health.LiveSeeds != 2 {
		t.Fatalf("2 live seeds over a cap of 1: %+v", v)
	}
}
