package tolaria

import (
	"fmt"
	"sync"
	"time"

	"github.com/esper-go/esper/leyline"
)

// Breaker defaults (esper-reference §2.6 "Circuit breaker"; the G1
// trainer config overrides SuccessThreshold with 1).
const (
	// DefaultBreakerFailureThreshold is how many failures open the
	// breaker (G1 failure_threshold 3).
	DefaultBreakerFailureThreshold = 3
	// DefaultBreakerSuccessThreshold is how many successes in HALF_OPEN
	// close it (G1 success_threshold 2).
	DefaultBreakerSuccessThreshold = 2
	// DefaultBreakerTimeout is how long the breaker stays OPEN (G1
	// timeout 60 s).
	DefaultBreakerTimeout = 60 * time.Second
)

// EventBreakerOpened is the Message prefix of the METRICS event a
// Breaker emits when it opens (esper-reference §3.1.7).
const EventBreakerOpened = "tolaria.breaker_opened"

// BreakerState is a circuit breaker's state. The values are leyline's G1
// CircuitBreakerState numbers, which tolaria.breaker.state reports.
type BreakerState int

// Breaker states.
const (
	BreakerClosed   BreakerState = 1
	BreakerOpen     BreakerState = 2
	BreakerHalfOpen BreakerState = 3
)

// String returns "CLOSED", "OPEN" or "HALF_OPEN".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "CLOSED"
	case BreakerOpen:
		return "OPEN"
	case BreakerHalfOpen:
		return "HALF_OPEN"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// BreakerOptions configure a Breaker. The zero value is the G1 default
// breaker (3 failures, 60 s, 2 successes) on the wall clock.
type BreakerOptions struct {
	// FailureThreshold failures in CLOSED open the breaker; zero means
	// DefaultBreakerFailureThreshold; negative is an error.
	FailureThreshold int
	// SuccessThreshold successes in HALF_OPEN close it; zero means
	// DefaultBreakerSuccessThreshold (the trainer uses 1); negative is
	// an error.
	SuccessThreshold int
	// Timeout is how long it stays OPEN; zero means
	// DefaultBreakerTimeout; negative is an error.
	Timeout time.Duration
	// Now is the clock; nil means time.Now. Tests inject a fake one.
	Now func() time.Time
	// Sink receives tolaria.breaker_opened; nil means none.
	Sink EventSink
}

// Breaker is the G1 circuit breaker: CLOSED counts failures and opens
// at FailureThreshold; OPEN denies until Timeout has passed since the
// last failure (failures while OPEN extend the window), then moves to
// HALF_OPEN with fresh counters; HALF_OPEN closes after SuccessThreshold
// successes and reopens on a failure. It is safe for concurrent use.
type Breaker struct {
	opts BreakerOptions

	mu        sync.Mutex
	state     BreakerState
	failures  int
	successes int
	openUntil time.Time
}

// NewBreaker returns a CLOSED breaker; negative options are an error.
func NewBreaker(o BreakerOptions) (*Breaker, error) {
	if o.FailureThreshold < 0 || o.SuccessThreshold < 0 || o.Timeout < 0 {
		return nil, fmt.Errorf("tolaria: NewBreaker: negative option (failures %d, successes %d, timeout %v)", o.FailureThreshold, o.SuccessThreshold, o.Timeout)
	}
	if o.FailureThreshold == 0 {
		o.FailureThreshold = DefaultBreakerFailureThreshold
	}
	if o.SuccessThreshold == 0 {
		o.SuccessThreshold = DefaultBreakerSuccessThreshold
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultBreakerTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Breaker{opts: o, state: BreakerClosed}, nil
}

// Options returns the options with their defaults filled in.
func (b *Breaker) Options() BreakerOptions { return b.opts }

// Allow reports whether a call may proceed. An OPEN breaker whose
// timeout has passed moves to HALF_OPEN (counters reset) and allows it.
func (b *Breaker) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked()
	return b.state != BreakerOpen
}

// expireLocked moves OPEN to HALF_OPEN once the window has passed.
func (b *Breaker) expireLocked() {
	if b.state == BreakerOpen && !b.opts.Now().Before(b.openUntil) {
		b.state, b.failures, b.successes = BreakerHalfOpen, 0, 0
	}
}

// RecordFailure records a failed call: in CLOSED it counts toward
// FailureThreshold and opens the breaker there; in HALF_OPEN it reopens
// it at once; in OPEN it extends the window.
func (b *Breaker) RecordFailure() {
	b.mu.Lock()
	opened := false
	switch b.state {
	case BreakerClosed:
		b.failures++
		if b.failures >= b.opts.FailureThreshold {
			b.openLocked()
			opened = true
		}
	case BreakerHalfOpen:
		b.failures++
		b.openLocked()
		opened = true
	case BreakerOpen:
		b.failures++
		b.openUntil = b.opts.Now().Add(b.opts.Timeout)
	}
	failures := b.failures
	b.mu.Unlock()
	if opened && b.opts.Sink != nil {
		ev := leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: metricsSource, Metrics: []leyline.Metric{
			{Name: leyline.MetricTolariaBreakerState, Value: float64(BreakerOpen), Unit: "state"},
		}})
		ev.Message = fmt.Sprintf("%s: after %d failure(s)", EventBreakerOpened, failures)
		ev.Severity = leyline.SeverityWarning
		_ = safeEmit(b.opts.Sink, ev)
	}
}

func (b *Breaker) openLocked() {
	b.state = BreakerOpen
	b.successes = 0
	b.openUntil = b.opts.Now().Add(b.opts.Timeout)
}

// RecordSuccess records a successful call: in CLOSED it clears the
// failure count; in HALF_OPEN it counts toward SuccessThreshold and
// closes the breaker there; in OPEN it does nothing.
func (b *Breaker) RecordSuccess() {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		b.failures = 0
	case BreakerHalfOpen:
		b.successes++
		if b.successes >= b.opts.SuccessThreshold {
			b.state, b.failures, b.successes = BreakerClosed, 0, 0
		}
	}
}

// ForceState sets the state: CLOSED and HALF_OPEN with fresh counters,
// OPEN with the failure count at the threshold and a fresh window. Any
// other value is an error.
func (b *Breaker) ForceState(s BreakerState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch s {
	case BreakerClosed, BreakerHalfOpen:
		b.state, b.failures, b.successes = s, 0, 0
	case BreakerOpen:
		b.openLocked()
		b.failures = b.opts.FailureThreshold
	default:
		return fmt.Errorf("tolaria: breaker: cannot force unknown state %v", s)
	}
	return nil
}

// State returns the current state, moving OPEN to HALF_OPEN if its
// window has passed.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked()
	return b.state
}

// Failures returns the failure count of the current state.
func (b *Breaker) Failures() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failures
}

// Metrics returns tolaria.breaker.state (the BreakerState number).
func (b *Breaker) Metrics() []leyline.Metric { return b.AppendMetrics(nil) }

// AppendMetrics appends Metrics' figures to dst.
func (b *Breaker) AppendMetrics(dst []leyline.Metric) []leyline.Metric {
	return append(dst, leyline.Metric{Name: leyline.MetricTolariaBreakerState, Value: float64(b.State()), Unit: "state"})
}
