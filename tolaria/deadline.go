package tolaria

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/esper-go/esper/leyline"
)

// DefaultDeadline is the controller and apply deadline when
// DeadlineOptions leaves it zero (G1 tamiyo_timeout_s 2.0, also used for
// the Kasmina apply).
const DefaultDeadline = 2 * time.Second

// Metric names of the deadline machinery that the reference does not
// define (the G1 prototype only had events for these); leyline holds
// them with the others: tolaria.timeout.{tamiyo,kasmina}_total,
// tolaria.timeout.{tamiyo,kasmina}_last_ms and tolaria.mode.conservative.
const (
	// MetricTamiyoErrorsTotal counts controller calls that failed.
	MetricTamiyoErrorsTotal = leyline.MetricTolariaErrorTamiyoTotal
	// MetricKasminaErrorsTotal counts apply calls that failed.
	MetricKasminaErrorsTotal = leyline.MetricTolariaErrorKasminaTotal
	// MetricLateResultsTotal counts results (decisions or applies) that
	// arrived after their deadline and were discarded.
	MetricLateResultsTotal = leyline.MetricTolariaTimeoutLateDiscardedTotal
)

// Event names of the deadline machinery (esper-reference §3.1.7). They
// travel as METRICS events from source "tolaria" whose Message starts
// with the name and whose payload is the Metrics snapshot.
const (
	EventTamiyoTimeout           = "tolaria.tamiyo_timeout"
	EventTamiyoError             = "tolaria.tamiyo_error"
	EventKasminaTimeout          = "tolaria.kasmina_timeout"
	EventKasminaError            = "tolaria.kasmina_error"
	EventConservativeModeEntered = "tolaria.conservative_mode_entered"
	EventConservativeModeCleared = "tolaria.conservative_mode_cleared"
)

// ConservativeReason is the reason of the WAIT Decide returns when it
// does not use the controller's decision.
const ConservativeReason = "conservative"

// metricsSource is the source of tolaria's METRICS payloads.
const metricsSource = "tolaria"

// Controller decides a lifecycle op from an epoch's state. It has the
// method set of tamiyo.Controller, which tolaria may not import; any
// Tamiyo controller satisfies it. EvaluateEpoch should return promptly
// once ctx is done: its result is discarded after the deadline anyway.
type Controller interface {
	EvaluateEpoch(ctx context.Context, s leyline.EpochState) (leyline.Decision, error)
}

// Drainer is implemented by controllers that may leave work running after
// a missed deadline (a policy's forward abandoned by EvaluateEpoch): Drain
// returns once it has finished. The trainer drains its controller before
// each epoch's training, so that no abandoned tensor work runs on the
// shared backend beside the training step (which may be capturing).
type Drainer interface {
	Drain()
}

// DeadlineOptions configure Deadlines. The zero value gives both calls
// DefaultDeadline and emits no events.
type DeadlineOptions struct {
	// Controller is the deadline of one EvaluateEpoch; zero means
	// DefaultDeadline; negative is an error.
	Controller time.Duration
	// Apply is the deadline of one Apply; zero means DefaultDeadline;
	// negative is an error.
	Apply time.Duration
	// Sink receives the timeout, error and conservative-mode events (METRICS
	// events whose Message is the event name); nil means none.
	Sink EventSink
}

// OutcomeStatus says how a deadline-bound call ended.
type OutcomeStatus int

// Outcome statuses.
const (
	// OutcomeOK: the call finished in time without error.
	OutcomeOK OutcomeStatus = iota
	// OutcomeSkipped: conservative mode was on, the controller was not
	// called.
	OutcomeSkipped
	// OutcomeTimeout: the deadline passed; conservative mode is now on.
	OutcomeTimeout
	// OutcomeError: the call failed (or panicked) in time.
	OutcomeError
	// OutcomeCancelled: the caller's context ended first; nothing was
	// counted.
	OutcomeCancelled
)

// String returns "ok", "skipped", "timeout", "error" or "cancelled".
func (s OutcomeStatus) String() string {
	switch s {
	case OutcomeOK:
		return "ok"
	case OutcomeSkipped:
		return "skipped"
	case OutcomeTimeout:
		return "timeout"
	case OutcomeError:
		return "error"
	case OutcomeCancelled:
		return "cancelled"
	}
	return fmt.Sprintf("OutcomeStatus(%d)", int(s))
}

// Outcome describes one deadline-bound call.
type Outcome struct {
	Status OutcomeStatus
	// Err is the call's error (OutcomeError), context.DeadlineExceeded
	// (OutcomeTimeout) or the caller's context error (OutcomeCancelled).
	Err error
	// Latency is how long the caller waited.
	Latency time.Duration
}

// Deadlines runs the controller and the Kasmina apply of each step under
// a deadline (esper-reference §3.1.3 "Control loop"). A call that misses
// its deadline is abandoned: its result, whenever it comes, is discarded
// and never applied; the miss is counted (tolaria.timeout.*), reported
// as an event, and puts the trainer into conservative mode, in which
// Decide returns WAIT without asking the controller until
// ClearConservative (the trainer clears it after a successful epoch).
//
// Its methods are safe for concurrent use; a trainer normally calls
// Decide and Apply from its one training goroutine.
type Deadlines struct {
	opts DeadlineOptions

	mu           sync.Mutex
	conservative bool
	tamiyoTotal  int
	kasminaTotal int
	tamiyoLast   time.Duration
	kasminaLast  time.Duration
	tamiyoErrs   int
	kasminaErrs  int
	late         int

	// inflight tracks abandoned calls still running, for Drain.
	inflight sync.WaitGroup
}

// NewDeadlines returns deadline machinery with the options' defaults
// filled in; a negative deadline is an error.
func NewDeadlines(o DeadlineOptions) (*Deadlines, error) {
	if o.Controller < 0 || o.Apply < 0 {
		return nil, fmt.Errorf("tolaria: NewDeadlines: negative deadline (controller %v, apply %v)", o.Controller, o.Apply)
	}
	if o.Controller == 0 {
		o.Controller = DefaultDeadline
	}
	if o.Apply == 0 {
		o.Apply = DefaultDeadline
	}
	return &Deadlines{opts: o}, nil
}

// Options returns the options with their defaults filled in.
func (d *Deadlines) Options() DeadlineOptions { return d.opts }

// Decide asks c for the epoch's decision under the controller deadline.
// In conservative mode it returns WAIT ("conservative") at once without
// calling c. On a timeout it counts tolaria.timeout.tamiyo_total, emits
// tolaria.tamiyo_timeout (WARNING), enters conservative mode and returns
// WAIT; the late decision is discarded when it arrives. On an error (or
// a panic in c) it emits tolaria.tamiyo_error, enters conservative mode
// and returns WAIT. If ctx ends first it returns WAIT with
// OutcomeCancelled and counts nothing. A nil controller is an error
// outcome.
func (d *Deadlines) Decide(ctx context.Context, c Controller, s leyline.EpochState) (leyline.Decision, Outcome) {
	if d.Conservative() {
		return leyline.Wait(ConservativeReason), Outcome{Status: OutcomeSkipped}
	}
	if c == nil {
		out := Outcome{Status: OutcomeError, Err: errors.New("tolaria: Decide: nil controller")}
		d.failed(true, out)
		return leyline.Wait(ConservativeReason), out
	}
	dec, out := runDeadline(ctx, d, d.opts.Controller, func(ctx context.Context) (leyline.Decision, error) {
		return c.EvaluateEpoch(ctx, s)
	})
	switch out.Status {
	case OutcomeOK:
		d.mu.Lock()
		d.tamiyoLast = out.Latency
		d.mu.Unlock()
		return dec, out
	case OutcomeTimeout, OutcomeError:
		d.failed(true, out)
	}
	return leyline.Wait(ConservativeReason), out
}

// Apply runs fn, the Kasmina side of a decision, under the apply
// deadline. On a timeout it counts tolaria.timeout.kasmina_total, emits
// tolaria.kasmina_timeout (WARNING) and enters conservative mode; on an
// error (or a panic in fn) it emits tolaria.kasmina_error. Apply runs
// even in conservative mode.
//
// Go cannot stop a goroutine, so fn keeps running after a timeout: it
// must check its context immediately before each change it makes and
// give up once the context is done, so that an abandoned apply never
// changes the model behind the trainer's back. Drain waits for abandoned
// calls to return.
func (d *Deadlines) Apply(ctx context.Context, fn func(ctx context.Context) error) Outcome {
	if fn == nil {
		out := Outcome{Status: OutcomeError, Err: errors.New("tolaria: Apply: nil function")}
		d.failed(false, out)
		return out
	}
	_, out := runDeadline(ctx, d, d.opts.Apply, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, fn(ctx)
	})
	switch out.Status {
	case OutcomeOK:
		d.mu.Lock()
		d.kasminaLast = out.Latency
		d.mu.Unlock()
	case OutcomeTimeout, OutcomeError:
		d.failed(false, out)
	}
	return out
}

// failed counts a timeout or error of the controller (tamiyo) or the
// apply, emits its event and, where the reference does, enters
// conservative mode.
func (d *Deadlines) failed(tamiyo bool, out Outcome) {
	d.mu.Lock()
	var name string
	sev := leyline.SeverityError
	enter := false
	switch {
	case tamiyo && out.Status == OutcomeTimeout:
		d.tamiyoTotal++
		d.tamiyoLast = out.Latency
		name, sev, enter = EventTamiyoTimeout, leyline.SeverityWarning, true
	case tamiyo:
		d.tamiyoErrs++
		d.tamiyoLast = out.Latency
		name, enter = EventTamiyoError, true
	case out.Status == OutcomeTimeout:
		d.kasminaTotal++
		d.kasminaLast = out.Latency
		name, sev, enter = EventKasminaTimeout, leyline.SeverityWarning, true
	default:
		d.kasminaErrs++
		d.kasminaLast = out.Latency
		name = EventKasminaError
	}
	was := d.conservative
	if enter {
		d.conservative = true
	}
	metrics := d.metricsLocked()
	d.mu.Unlock()
	d.emit(name, sev, fmt.Sprintf("after %v: %v", out.Latency, out.Err), metrics)
	if enter && !was {
		d.emit(EventConservativeModeEntered, leyline.SeverityWarning, "reason "+name, metrics)
	}
}

// EnterConservative turns conservative mode on (emitting
// tolaria.conservative_mode_entered when it was off); the trainer calls
// it for failures of its own, such as an open breaker.
func (d *Deadlines) EnterConservative(reason string) {
	d.mu.Lock()
	was := d.conservative
	d.conservative = true
	metrics := d.metricsLocked()
	d.mu.Unlock()
	if !was {
		d.emit(EventConservativeModeEntered, leyline.SeverityWarning, "reason "+reason, metrics)
	}
}

// ClearConservative turns conservative mode off (emitting
// tolaria.conservative_mode_cleared when it was on); the trainer calls it
// after a successful epoch.
func (d *Deadlines) ClearConservative() {
	d.mu.Lock()
	was := d.conservative
	d.conservative = false
	var metrics []leyline.Metric
	if was {
		metrics = d.metricsLocked()
	}
	d.mu.Unlock()
	if was {
		d.emit(EventConservativeModeCleared, leyline.SeverityInfo, "after a successful epoch", metrics)
	}
}

// Conservative reports whether conservative mode is on.
func (d *Deadlines) Conservative() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conservative
}

// Drain waits until every abandoned call has returned (their results are
// discarded). Use it at shutdown and in tests.
func (d *Deadlines) Drain() { d.inflight.Wait() }

// Metrics returns the current figures: tolaria.timeout.tamiyo_total,
// tolaria.timeout.kasmina_total, tolaria.timeout.tamiyo_last_ms,
// tolaria.timeout.kasmina_last_ms (the latency of the last call, the
// deadline for a timeout), tolaria.mode.conservative (0 or 1), and the
// local MetricTamiyoErrorsTotal, MetricKasminaErrorsTotal and
// MetricLateResultsTotal.
func (d *Deadlines) Metrics() []leyline.Metric {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.metricsLocked()
}

func (d *Deadlines) metricsLocked() []leyline.Metric {
	return d.appendMetricsLocked(make([]leyline.Metric, 0, numDeadlineMetrics))
}

// numDeadlineMetrics is the number of metrics Metrics returns.
const numDeadlineMetrics = 8

// appendMetrics appends Metrics' figures to dst.
func (d *Deadlines) appendMetrics(dst []leyline.Metric) []leyline.Metric {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.appendMetricsLocked(dst)
}

func (d *Deadlines) appendMetricsLocked(dst []leyline.Metric) []leyline.Metric {
	b2f := 0.0
	if d.conservative {
		b2f = 1
	}
	return append(dst,
		leyline.Metric{Name: leyline.MetricTolariaTimeoutTamiyoTotal, Value: float64(d.tamiyoTotal), Unit: "count"},
		leyline.Metric{Name: leyline.MetricTolariaTimeoutKasminaTotal, Value: float64(d.kasminaTotal), Unit: "count"},
		leyline.Metric{Name: leyline.MetricTolariaTimeoutTamiyoLastMs, Value: ms(d.tamiyoLast), Unit: "ms"},
		leyline.Metric{Name: leyline.MetricTolariaTimeoutKasminaLastMs, Value: ms(d.kasminaLast), Unit: "ms"},
		leyline.Metric{Name: leyline.MetricTolariaModeConservative, Value: b2f, Unit: "bool"},
		leyline.Metric{Name: MetricTamiyoErrorsTotal, Value: float64(d.tamiyoErrs), Unit: "count"},
		leyline.Metric{Name: MetricKasminaErrorsTotal, Value: float64(d.kasminaErrs), Unit: "count"},
		leyline.Metric{Name: MetricLateResultsTotal, Value: float64(d.late), Unit: "count"},
	)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// emit sends a METRICS event named name; a panicking sink is ignored.
func (d *Deadlines) emit(name string, sev leyline.Severity, msg string, metrics []leyline.Metric) {
	if d.opts.Sink == nil {
		return
	}
	ev := leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: metricsSource, Metrics: metrics})
	ev.Message = name + ": " + msg
	ev.Severity = sev
	_ = safeEmit(d.opts.Sink, ev)
}

// result is what a deadline-bound call produced.
type result[T any] struct {
	v   T
	err error
}

// runDeadline runs fn in a goroutine under timeout. If the deadline (or
// ctx) ends first, the call is abandoned: fn's context is cancelled, and
// its result is counted in d.late and dropped when it comes.
func runDeadline[T any](ctx context.Context, d *Deadlines, timeout time.Duration, fn func(context.Context) (T, error)) (T, Outcome) {
	var zero T
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return zero, Outcome{Status: OutcomeCancelled, Err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ch := make(chan result[T], 1)
	var mu sync.Mutex
	abandoned := false
	d.inflight.Add(1)
	go func() {
		defer d.inflight.Done()
		var r result[T]
		func() {
			defer func() {
				if p := recover(); p != nil {
					r.err = fmt.Errorf("tolaria: call panicked: %v", p)
				}
			}()
			r.v, r.err = fn(cctx)
		}()
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			d.mu.Lock()
			d.late++
			d.mu.Unlock()
			return
		}
		ch <- r // buffered: never blocks
	}()
	select {
	case r := <-ch:
		out := Outcome{Status: OutcomeOK, Latency: time.Since(start)}
		if r.err != nil {
			out.Status, out.Err = OutcomeError, r.err
		}
		return r.v, out
	case <-cctx.Done():
	}
	mu.Lock()
	abandoned = true
	if len(ch) == 1 {
		// The result raced the deadline; it is late all the same.
		<-ch
		d.mu.Lock()
		d.late++
		d.mu.Unlock()
	}
	mu.Unlock()
	out := Outcome{Status: OutcomeTimeout, Err: context.DeadlineExceeded, Latency: time.Since(start)}
	if err := ctx.Err(); err != nil {
		out = Outcome{Status: OutcomeCancelled, Err: err, Latency: out.Latency}
	}
	return zero, out
}
