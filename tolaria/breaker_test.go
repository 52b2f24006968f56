package tolaria

import (
	"testing"
	"time"

	"github.com/esper-go/esper/leyline"
)

// fakeClock is a manually advanced clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newBreaker(t *testing.T, o BreakerOptions) (*Breaker, *fakeClock) {
	t.Helper()
	c := &fakeClock{t: time.Unix(1000, 0)}
	o.Now = c.now
	b, err := NewBreaker(o)
	if err != nil {
		t.Fatal(err)
	}
	return b, c
}

func wantState(t *testing.T, b *Breaker, s BreakerState) {
	t.Helper()
	if got := b.State(); got != s {
		t.Fatalf("state %v, want %v", got, s)
	}
	if v := metricValue(t, b.Metrics(), leyline.MetricTolariaBreakerState); v != float64(s) {
		t.Fatalf("tolaria.breaker.state = %v, want %v", v, float64(s))
	}
}

func TestBreakerDefaults(t *testing.T) {
	b, _ := newBreaker(t, BreakerOptions{})
	o := b.Options()
	if o.FailureThreshold != 3 || o.SuccessThreshold != 2 || o.Timeout != 60*time.Second {
		t.Fatalf("defaults %+v", o)
	}
	wantState(t, b, BreakerClosed)
	for _, o := range []BreakerOptions{{FailureThreshold: -1}, {SuccessThreshold: -1}, {Timeout: -time.Second}} {
		if _, err := NewBreaker(o); err == nil {
			t.Errorf("%+v: expected an error", o)
		}
	}
}

func TestBreakerFullCycle(t *testing.T) {
	rec := &recorder{}
	b, clock := newBreaker(t, BreakerOptions{Sink: rec})
	b.RecordFailure()
	b.RecordFailure()
	wantState(t, b, BreakerClosed)
	if !b.Allow() {
		t.Fatal("CLOSED must allow")
	}
	b.RecordFailure()
	wantState(t, b, BreakerOpen)
	if b.Allow() {
		t.Fatal("OPEN must deny")
	}
	if ev := rec.named(EventBreakerOpened); len(ev) != 1 {
		t.Fatalf("breaker_opened events %v", rec.all())
	}
	clock.advance(59 * time.Second)
	if b.Allow() {
		t.Fatal("OPEN must deny until the timeout")
	}
	clock.advance(time.Second)
	if !b.Allow() {
		t.Fatal("after the timeout the breaker must allow a trial")
	}
	wantState(t, b, BreakerHalfOpen)
	if b.Failures() != 0 {
		t.Fatal("HALF_OPEN starts with fresh counters")
	}
	b.RecordSuccess()
	wantState(t, b, BreakerHalfOpen)
	b.RecordSuccess()
	wantState(t, b, BreakerClosed)
}

func TestBreakerFailuresWhileOpenExtend(t *testing.T) {
	b, clock := newBreaker(t, BreakerOptions{FailureThreshold: 1})
	b.RecordFailure()
	wantState(t, b, BreakerOpen)
	clock.advance(30 * time.Second)
	b.RecordFailure() // window now ends 60 s from here
	clock.advance(45 * time.Second)
	if b.Allow() {
		t.Fatal("a failure while OPEN must extend the window")
	}
	clock.advance(15 * time.Second)
	if !b.Allow() {
		t.Fatal("the extended window has passed")
	}
}

func TestBreakerHalfOpenFailureReopens(t *testing.T) {
	rec := &recorder{}
	b, clock := newBreaker(t, BreakerOptions{Sink: rec})
	if err := b.ForceState(BreakerHalfOpen); err != nil {
		t.Fatal(err)
	}
	b.RecordFailure()
	wantState(t, b, BreakerOpen)
	clock.advance(59 * time.Second)
	wantState(t, b, BreakerOpen)
	if len(rec.named(EventBreakerOpened)) != 1 {
		t.Fatal("reopening must emit breaker_opened")
	}
}

func TestBreakerTrainerConfig(t *testing.T) {
	// The G1 trainer closes after a single success.
	b, clock := newBreaker(t, BreakerOptions{SuccessThreshold: 1, Timeout: 30 * time.Second})
	for range 3 {
		b.RecordFailure()
	}
	clock.advance(30 * time.Second)
	wantState(t, b, BreakerHalfOpen)
	b.RecordSuccess()
	wantState(t, b, BreakerClosed)
}

func TestBreakerSuccessResetsClosedCount(t *testing.T) {
	b, _ := newBreaker(t, BreakerOptions{})
	b.RecordFailure()
	b.RecordFailure()
	b.RecordSuccess()
	b.RecordFailure()
	b.RecordFailure()
	wantState(t, b, BreakerClosed)
}

func TestBreakerForceState(t *testing.T) {
	b, _ := newBreaker(t, BreakerOptions{})
	if err := b.ForceState(BreakerOpen); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, BreakerOpen)
	if b.Failures() != 3 {
		t.Fatalf("forced OPEN failures %d, want the threshold", b.Failures())
	}
	if err := b.ForceState(BreakerClosed); err != nil {
		t.Fatal(err)
	}
	wantState(t, b, BreakerClosed)
	if err := b.ForceState(BreakerState(0)); err == nil {
		t.Fatal("unknown state: expected an error")
	}
	if BreakerHalfOpen.String() != "HALF_OPEN" {
		t.Fatal(BreakerHalfOpen.String())
	}
}
