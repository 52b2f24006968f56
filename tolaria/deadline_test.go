package tolaria

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/esper-go/esper/leyline"
)

// funcController adapts a function to Controller and counts calls.
type funcController struct {
	calls atomic.Int32
	f     func(ctx context.Context, s leyline.EpochState) (leyline.Decision, error)
}

func (c *funcController) EvaluateEpoch(ctx context.Context, s leyline.EpochState) (leyline.Decision, error) {
	c.calls.Add(1)
	return c.f(ctx, s)
}

func answer(d leyline.Decision, err error) *funcController {
	return &funcController{f: func(context.Context, leyline.EpochState) (leyline.Decision, error) { return d, err }}
}

// slowController blocks until release is closed, ignoring its context
// (the worst case), then returns GERMINATE.
func slowController(release <-chan struct{}, slotID string) *funcController {
	return &funcController{f: func(context.Context, leyline.EpochState) (leyline.Decision, error) {
		<-release
		return leyline.Decision{Op: leyline.OpGerminate, SlotID: slotID, Blueprint: leyline.BlueprintConvLight, Reason: "late"}, nil
	}}
}

func newDeadlines(t *testing.T, o DeadlineOptions) *Deadlines {
	t.Helper()
	d, err := NewDeadlines(o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDeadlinesDefaults(t *testing.T) {
	d := newDeadlines(t, DeadlineOptions{})
	if o := d.Options(); o.Controller != 2*time.Second || o.Apply != 2*time.Second {
		t.Fatalf("defaults %+v", o)
	}
	if _, err := NewDeadlines(DeadlineOptions{Controller: -time.Second}); err == nil {
		t.Fatal("negative deadline: expected an error")
	}
	for _, name := range []string{
		leyline.MetricTolariaTimeoutTamiyoTotal, leyline.MetricTolariaTimeoutKasminaTotal,
		leyline.MetricTolariaTimeoutTamiyoLastMs, leyline.MetricTolariaTimeoutKasminaLastMs,
		leyline.MetricTolariaModeConservative, MetricTamiyoErrorsTotal, MetricKasminaErrorsTotal, MetricLateResultsTotal,
	} {
		if v := metricValue(t, d.Metrics(), name); v != 0 {
			t.Fatalf("%s = %v initially", name, v)
		}
	}
}

func TestDecideInTime(t *testing.T) {
	rec := &recorder{}
	d := newDeadlines(t, DeadlineOptions{Sink: rec})
	want := leyline.Decision{Op: leyline.OpAdvance, SlotID: "r0c0", Reason: "ready"}
	got, out := d.Decide(context.Background(), answer(want, nil), leyline.EpochState{})
	if out.Status != OutcomeOK || out.Err != nil || got != want {
		t.Fatalf("got %v, %+v", got, out)
	}
	if d.Conservative() || len(rec.all()) != 0 {
		t.Fatal("an in-time decision changed the mode or emitted events")
	}
}

func TestDecideTimeoutDiscardsLateDecision(t *testing.T) {
	rec := &recorder{}
	m := newModel(t, nil)
	target := m.SlotIDs()[0]
	d := newDeadlines(t, DeadlineOptions{Controller: 20 * time.Millisecond, Sink: rec})
	release := make(chan struct{})
	slow := slowController(release, target)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
		d.Drain()
	}()

	// apply is what a trainer does with whatever Decide returns.
	applied := 0
	apply := func(dec leyline.Decision) {
		res, err := ApplyDecision(m, dec, ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Applied() {
			applied++
		}
	}

	dec, out := d.Decide(context.Background(), slow, leyline.EpochState{})
	if out.Status != OutcomeTimeout || !errors.Is(out.Err, context.DeadlineExceeded) {
		t.Fatalf("outcome %+v, want timeout", out)
	}
	if dec.Op != leyline.OpWait || dec.Reason != ConservativeReason {
		t.Fatalf("decision %v, want WAIT (conservative)", dec)
	}
	apply(dec)
	ms := d.Metrics()
	if metricValue(t, ms, leyline.MetricTolariaTimeoutTamiyoTotal) != 1 || metricValue(t, ms, leyline.MetricTolariaModeConservative) != 1 {
		t.Fatalf("metrics %v", ms)
	}
	if last := metricValue(t, ms, leyline.MetricTolariaTimeoutTamiyoLastMs); last < 20 {
		t.Fatalf("tamiyo_last_ms %v, want ≥ the 20 ms deadline", last)
	}
	if !d.Conservative() {
		t.Fatal("a timeout must enter conservative mode")
	}
	ev := rec.named(EventTamiyoTimeout)
	if len(ev) != 1 || ev[0].Severity != leyline.SeverityWarning {
		t.Fatalf("tamiyo_timeout events %v", ev)
	}
	if p := ev[0].Data.(*leyline.MetricsPayload); p.Source != "tolaria" || metricValue(t, p.Metrics, leyline.MetricTolariaTimeoutTamiyoTotal) != 1 ||
		metricValue(t, p.Metrics, leyline.MetricTolariaModeConservative) != 1 {
		t.Fatalf("payload %+v", p)
	}
	if n := len(rec.named(EventConservativeModeEntered)); n != 1 {
		t.Fatalf("%d conservative_mode_entered events", n)
	}

	// Conservative mode: WAIT without asking the controller.
	dec, out = d.Decide(context.Background(), slow, leyline.EpochState{})
	if out.Status != OutcomeSkipped || dec.Op != leyline.OpWait || slow.calls.Load() != 1 {
		t.Fatalf("conservative Decide: %v %+v, controller calls %d", dec, out, slow.calls.Load())
	}
	apply(dec)

	// The late GERMINATE arrives and is dropped.
	close(release)
	d.Drain()
	if v := metricValue(t, d.Metrics(), MetricLateResultsTotal); v != 1 {
		t.Fatalf("late results %v, want 1", v)
	}
	if applied != 0 || slot(t, m, target).State() != nil {
		t.Fatalf("the late decision was applied (applied %d, slot %v)", applied, slot(t, m, target).Stage())
	}

	// After a good epoch the controller is asked again, and its new
	// answer (not the stale GERMINATE) is what comes back.
	d.ClearConservative()
	if n := len(rec.named(EventConservativeModeCleared)); n != 1 {
		t.Fatalf("%d conservative_mode_cleared events", n)
	}
	fresh := answer(leyline.Wait("fresh"), nil)
	dec, out = d.Decide(context.Background(), fresh, leyline.EpochState{})
	if out.Status != OutcomeOK || dec.Reason != "fresh" {
		t.Fatalf("after clearing: %v %+v", dec, out)
	}
	apply(dec)
	if applied != 0 || slot(t, m, target).State() != nil {
		t.Fatal("a seed appeared although no GERMINATE was ever returned")
	}
	if metricValue(t, d.Metrics(), leyline.MetricTolariaTimeoutTamiyoTotal) != 1 {
		t.Fatal("timeout count changed")
	}
}

func TestDecideError(t *testing.T) {
	rec := &recorder{}
	d := newDeadlines(t, DeadlineOptions{Sink: rec})
	boom := errors.New("policy exploded")
	dec, out := d.Decide(context.Background(), answer(leyline.Decision{Op: leyline.OpPrune, SlotID: "r0c0"}, boom), leyline.EpochState{})
	if out.Status != OutcomeError || !errors.Is(out.Err, boom) || dec.Op != leyline.OpWait {
		t.Fatalf("%v %+v", dec, out)
	}
	if !d.Conservative() || metricValue(t, d.Metrics(), MetricTamiyoErrorsTotal) != 1 ||
		metricValue(t, d.Metrics(), leyline.MetricTolariaTimeoutTamiyoTotal) != 0 {
		t.Fatalf("metrics %v", d.Metrics())
	}
	if ev := rec.named(EventTamiyoError); len(ev) != 1 || ev[0].Severity != leyline.SeverityError {
		t.Fatalf("tamiyo_error events %v", ev)
	}

	// A panicking controller is an error too, not a crash.
	d.ClearConservative()
	panicky := &funcController{f: func(context.Context, leyline.EpochState) (leyline.Decision, error) { panic("nil map") }}
	_, out = d.Decide(context.Background(), panicky, leyline.EpochState{})
	if out.Status != OutcomeError || !strings.Contains(out.Err.Error(), "nil map") {
		t.Fatalf("panicking controller: %+v", out)
	}
	d.ClearConservative()
	if _, out = d.Decide(context.Background(), nil, leyline.EpochState{}); out.Status != OutcomeError {
		t.Fatalf("nil controller: %+v", out)
	}
}

func TestDecideCancelled(t *testing.T) {
	d := newDeadlines(t, DeadlineOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := answer(leyline.Decision{Op: leyline.OpAdvance}, nil)
	dec, out := d.Decide(ctx, c, leyline.EpochState{})
	if out.Status != OutcomeCancelled || dec.Op != leyline.OpWait || d.Conservative() || c.calls.Load() != 0 {
		t.Fatalf("%v %+v conservative %v calls %d", dec, out, d.Conservative(), c.calls.Load())
	}
}

func TestApplyInTime(t *testing.T) {
	m := newModel(t, nil)
	id := m.SlotIDs()[0]
	d := newDeadlines(t, DeadlineOptions{})
	var res ApplyResult
	out := d.Apply(context.Background(), func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		res, err = ApplyDecision(m, leyline.Decision{Op: leyline.OpGerminate, SlotID: id, Blueprint: leyline.BlueprintNorm}, ApplyOptions{})
		return err
	})
	if out.Status != OutcomeOK || !res.Applied() || slot(t, m, id).State() == nil {
		t.Fatalf("%+v %+v", out, res)
	}
}

func TestApplyTimeout(t *testing.T) {
	rec := &recorder{}
	d := newDeadlines(t, DeadlineOptions{Apply: 20 * time.Millisecond, Sink: rec})
	release := make(chan struct{})
	defer close(release)
	var mutated atomic.Bool
	out := d.Apply(context.Background(), func(ctx context.Context) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		// The apply contract: check the context before every change.
		if err := ctx.Err(); err != nil {
			return err
		}
		mutated.Store(true)
		return nil
	})
	if out.Status != OutcomeTimeout {
		t.Fatalf("outcome %+v, want timeout", out)
	}
	d.Drain()
	if mutated.Load() {
		t.Fatal("an abandoned apply changed the model")
	}
	ms := d.Metrics()
	if metricValue(t, ms, leyline.MetricTolariaTimeoutKasminaTotal) != 1 || metricValue(t, ms, leyline.MetricTolariaTimeoutTamiyoTotal) != 0 ||
		metricValue(t, ms, leyline.MetricTolariaTimeoutKasminaLastMs) < 20 || metricValue(t, ms, MetricLateResultsTotal) != 1 {
		t.Fatalf("metrics %v", ms)
	}
	if !d.Conservative() {
		t.Fatal("an apply timeout must enter conservative mode")
	}
	if ev := rec.named(EventKasminaTimeout); len(ev) != 1 || ev[0].Severity != leyline.SeverityWarning {
		t.Fatalf("kasmina_timeout events %v", ev)
	}
}

func TestApplyError(t *testing.T) {
	rec := &recorder{}
	d := newDeadlines(t, DeadlineOptions{Sink: rec})
	boom := errors.New("unknown slot")
	out := d.Apply(context.Background(), func(context.Context) error { return boom })
	if out.Status != OutcomeError || !errors.Is(out.Err, boom) {
		t.Fatalf("%+v", out)
	}
	if metricValue(t, d.Metrics(), MetricKasminaErrorsTotal) != 1 || len(rec.named(EventKasminaError)) != 1 {
		t.Fatalf("metrics %v events %v", d.Metrics(), rec.all())
	}
	if d.Conservative() {
		t.Fatal("a Kasmina error does not enter conservative mode (§3.1.3)")
	}
	if out := d.Apply(context.Background(), nil); out.Status != OutcomeError {
		t.Fatalf("nil fn: %+v", out)
	}
}

func TestDeadlinesSurvivePanickingSink(t *testing.T) {
	d := newDeadlines(t, DeadlineOptions{Sink: panicSink{}})
	_, out := d.Decide(context.Background(), answer(leyline.Decision{}, errors.New("x")), leyline.EpochState{})
	if out.Status != OutcomeError || !d.Conservative() {
		t.Fatalf("%+v", out)
	}
}
