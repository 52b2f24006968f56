package tamiyo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tensor"
)

// The inference service makes the learned policy a Controller (G1
// TamiyoService, esper-reference.md §4.3–4.4, over the G2 action space):
// each epoch it builds the graph of the training state, runs the policy
// (captured per batch shape, eager on a capture failure) under a
// deadline, samples or takes the most probable masked action, and maps it
// to the Decision the trainer applies.

// DefaultServiceDeadline bounds one decision when ServiceOptions.Deadline
// is zero. The G1 budget is a p95 of 45 ms for the policy alone; the
// first decision per graph shape also warms up and captures (two eager
// forwards), and the trainer's own controller deadline (2 s) still
// applies on top.
const DefaultServiceDeadline = 500 * time.Millisecond

// PolicyVersion names the policy in decision reasons and telemetry (G1
// policy_version "tamiyo_gnn_v1").
const PolicyVersion = "tamiyo_gnn_v1"

// Telemetry of the service that leyline does not name: the timeout event
// (G1 CRITICAL "timeout_inference" packet) and the capture-fallback event.
// They travel as METRICS events from source "tamiyo" whose Message starts
// with the name.
const (
	// EventInferenceTimeout is the message prefix of the event emitted
	// when a decision misses its deadline.
	EventInferenceTimeout = "tamiyo.timeout_inference"
	// EventCompileFallback is the message prefix of the event emitted when
	// a batch shape's capture fails and the policy runs eagerly.
	EventCompileFallback = "tamiyo.gnn.compile_fallback"
	// MetricInferenceTimeoutTotal counts decisions that missed their
	// deadline.
	MetricInferenceTimeoutTotal = "tamiyo.gnn.inference.timeout_total"
)

// metricsSource is the source of the service's METRICS payloads.
const metricsSource = "tamiyo"

// ErrInferenceTimeout is wrapped (together with the context's error, so
// errors.Is(err, context.DeadlineExceeded) holds for a missed deadline)
// by the error EvaluateEpoch returns when the policy did not answer in
// time.
var ErrInferenceTimeout = errors.New("policy inference missed its deadline")

// ErrServiceInput is wrapped when EvaluateEpoch's state cannot be turned
// into a graph or masks (an inconsistent state).
var ErrServiceInput = errors.New("invalid state for the policy")

// ServiceOptions configure NewService. Policy and Layers are required;
// the other zero values are the defaults.
type ServiceOptions struct {
	// Policy is the network. NewService switches it to evaluation mode.
	// The service runs it on its device (Policy.Device).
	Policy *Policy
	// Layers returns the host's blocks for each decision, with their
	// weight and gradient norms where measured (nil norms are encoded as
	// unmeasured). Slots a block lists that are not in the epoch's slot
	// configuration are ignored. BlockLayers adapts a static
	// kasmina host description.
	Layers func() []LayerState
	// Deterministic takes the most probable masked option of every head
	// instead of sampling.
	Deterministic bool
	// Seed seeds the sampling (unused when Deterministic).
	Seed uint64
	// Floors are the per-head probability floors (nil: the G2 defaults,
	// ProbabilityFloorPerHead).
	Floors *[leyline.NumActionHeads]float32
	// Deadline bounds one decision, graph building to sampled action
	// (default DefaultServiceDeadline); the caller's context deadline
	// applies too, whichever is earlier. Negative is an error.
	Deadline time.Duration
	// NoCapture runs the policy eagerly (InferenceOptions.NoCapture).
	NoCapture bool
	// MaxEpochs is the episode length the observation scales epoch counts
	// by (default leyline.DefaultEpisodeLength, 150).
	MaxEpochs int
	// MaxSeeds caps the live seeds for the germination mask (0 =
	// unlimited).
	MaxSeeds int
	// Sink receives the service's METRICS events; nil means none.
	Sink EventSink
}

// BlockLayers returns a Layers function that reports the given blocks
// without norms, for hosts whose blocks do not change (kasmina
// Host.Blocks()).
func BlockLayers(blocks []leyline.BlockInfo) func() []LayerState {
	ls := make([]LayerState, len(blocks))
	for i, b := range blocks {
		b.Slots = append([]string(nil), b.Slots...)
		ls[i] = LayerState{Block: b}
	}
	return func() []LayerState { return ls }
}

// ServiceStats counts what a Service has done.
type ServiceStats struct {
	// Decisions counts successful EvaluateEpoch calls.
	Decisions int
	// Timeouts counts decisions that missed their deadline.
	Timeouts int
	// CaptureFallbacks counts batch shapes whose capture failed.
	CaptureFallbacks int
	// LastLatency is the latency of the last successful decision.
	LastLatency time.Duration
	// Capture holds the capture counters of the policy's Inference.
	Capture autograd.CaptureStats
}

// Service is the learned controller: a Controller whose EvaluateEpoch
// runs the policy on the epoch's graph under a deadline (G1
// TamiyoService over the G2 action space).
//
// Each call converts the leyline.EpochState (signals, seeds, slots,
// topology) and the host's layers into a graph and action masks, runs the
// policy through an Inference (captured per graph shape, eager fallback),
// chooses the action (sampled from the masked, floored distributions, or
// their modes when Deterministic) and returns it as a Decision whose
// Confidence is the probability of the op chosen. Wrap it in a Tracked
// so that the signals carry histories, deltas and the plateau counter as
// the observation expects.
//
// Deadline: the forward runs in its own goroutine; when the deadline (or
// the caller's context) ends first EvaluateEpoch returns WAIT with an
// error wrapping ErrInferenceTimeout and the context's error, counts it,
// and emits EventInferenceTimeout (CRITICAL). The abandoned forward
// finishes in the background and its result is dropped; the service's
// state (sampling RNG, last op) only changes on success. A call that
// finds an abandoned forward still running waits for it within its own
// deadline.
//
// Telemetry per decision (METRICS, source "tamiyo"):
// tamiyo.gnn.compile_enabled (1 while capture is on and no shape has
// fallen back), tamiyo.gnn.compile_fallback_total (once it is positive),
// tamiyo.gnn.inference.latency_ms, tamiyo.gnn.feature_coverage (mean of
// the families) and tamiyo.gnn.feature_coverage.<family>, and
// tamiyo.policy.value_estimate.
//
// Its methods are safe for concurrent use, but one Service serves one
// environment (the last op feeds the next observation).
type Service struct {
	opts  ServiceOptions
	infer *Inference
	// sem holds the Inference: one forward at a time, abandoned ones
	// included.
	sem chan struct{}

	mu        sync.Mutex
	rng       *rand.Rand
	lastOp    leyline.LifecycleOp
	fallbacks int
	stats     ServiceStats
}

var _ Controller = (*Service)(nil)

// NewService validates o and builds the service.
func NewService(o ServiceOptions) (*Service, error) {
	switch {
	case o.Policy == nil:
		return nil, errors.New("tamiyo: NewService: nil Policy")
	case o.Layers == nil:
		return nil, errors.New("tamiyo: NewService: nil Layers (the graph needs the host's blocks)")
	case o.Deadline < 0:
		return nil, fmt.Errorf("tamiyo: NewService: negative deadline %v", o.Deadline)
	case o.MaxEpochs < 0 || o.MaxSeeds < 0:
		return nil, fmt.Errorf("tamiyo: NewService: negative MaxEpochs %d or MaxSeeds %d", o.MaxEpochs, o.MaxSeeds)
	}
	if err := checkFloors(headFloors(o.Floors)); err != nil {
		return nil, fmt.Errorf("tamiyo: NewService: %w", err)
	}
	if o.Deadline == 0 {
		o.Deadline = DefaultServiceDeadline
	}
	if o.MaxEpochs == 0 {
		o.MaxEpochs = leyline.DefaultEpisodeLength
	}
	s := &Service{opts: o, sem: make(chan struct{}, 1), rng: tensor.NewRNG(o.Seed)}
	var err error
	s.infer, err = NewInference(o.Policy, InferenceOptions{NoCapture: o.NoCapture, OnFallback: s.captureFallback})
	if err != nil {
		return nil, fmt.Errorf("tamiyo: NewService: %w", err)
	}
	return s, nil
}

// Options returns the options with defaults filled in.
func (s *Service) Options() ServiceOptions { return s.opts }

// Stats returns the counters. The capture counters are left zero while
// an abandoned forward is still running (Stats does not wait for it).
func (s *Service) Stats() ServiceStats {
	s.mu.Lock()
	st := s.stats
	st.CaptureFallbacks = s.fallbacks
	s.mu.Unlock()
	select {
	case s.sem <- struct{}{}:
		st.Capture = s.infer.Stats()
		<-s.sem
	default:
	}
	return st
}

// Drain waits until an abandoned forward (one whose decision missed its
// deadline) has returned. Call it before shutting down, and before
// capturing anything else on the same backend: CPU capture records every
// launch of the process, so a forward still running in the background
// while another region is captured would be recorded into it.
func (s *Service) Drain() {
	s.sem <- struct{}{}
	<-s.sem
}

// captureFallback is the Inference's OnFallback: it runs inside a
// forward, once per shape whose capture failed.
func (s *Service) captureFallback(err error) {
	s.mu.Lock()
	s.fallbacks++
	n := s.fallbacks
	s.mu.Unlock()
	s.emit(EventCompileFallback+": capture failed, running eagerly: "+err.Error(), leyline.SeverityWarning, []leyline.Metric{
		{Name: leyline.MetricTamiyoGNNCompileEnabled, Value: 0, Unit: "bool"},
		{Name: leyline.MetricTamiyoGNNCompileFallbackTotal, Value: float64(n), Unit: "count"},
	})
}

// inferred is what the forward goroutine hands back.
type inferred struct {
	lg  *Logits
	err error
}

// EvaluateEpoch decides the epoch's lifecycle op with the policy; see
// Service for the flow, the deadline and the telemetry. An error means
// no decision: the state could not be encoded (wrapping ErrServiceInput),
// the deadline or ctx ended (wrapping ErrInferenceTimeout and ctx's
// error; the decision returned alongside is WAIT), or the forward failed.
func (s *Service) EvaluateEpoch(ctx context.Context, st leyline.EpochState) (leyline.Decision, error) {
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return leyline.Decision{}, fmt.Errorf("tamiyo: Service.EvaluateEpoch: %w", err)
	}
	s.mu.Lock()
	lastOp := s.lastOp
	s.mu.Unlock()
	g, masks, err := s.encode(st, lastOp)
	if err != nil {
		return leyline.Decision{}, err
	}

	dctx, cancel := context.WithTimeout(ctx, s.opts.Deadline)
	defer cancel()
	done := make(chan inferred, 1)
	select {
	case s.sem <- struct{}{}:
	case <-dctx.Done():
		return s.timedOut(dctx, start, "waiting for an abandoned forward")
	}
	go func() {
		lg, err := s.infer.forward(g) // recovers its own panics
		<-s.sem                       // released before the result is seen
		done <- inferred{lg, err}
	}()
	var res inferred
	select {
	case res = <-done:
	case <-dctx.Done():
		return s.timedOut(dctx, start, "forward")
	}
	if res.err != nil {
		return leyline.Decision{}, fmt.Errorf("tamiyo: Service.EvaluateEpoch: %w", res.err)
	}

	// Sampling is cheap and changes the RNG: it runs here, on the caller's
	// goroutine, after the deadline check, so that a late forward never
	// advances the service's state.
	if dctx.Err() != nil {
		return s.timedOut(dctx, start, "forward")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ar, err := selectActions(res.lg, masks, ActOptions{Deterministic: s.opts.Deterministic, Rand: s.rng, Floors: s.opts.Floors}, headFloors(s.opts.Floors))
	if err != nil {
		return leyline.Decision{}, fmt.Errorf("tamiyo: Service.EvaluateEpoch: %w", err)
	}
	d := s.decision(st, ar)
	s.lastOp = d.Op
	lat := time.Since(start)
	s.stats.Decisions++
	s.stats.LastLatency = lat
	metrics := s.metricsLocked(lat, g.Coverage[0], ar.Values[0])
	s.emit(fmt.Sprintf("tamiyo.gnn.decision: %v", d), leyline.SeverityInfo, metrics)
	return d, nil
}

// timedOut counts and reports a missed deadline and returns WAIT with the
// error.
func (s *Service) timedOut(ctx context.Context, start time.Time, phase string) (leyline.Decision, error) {
	lat := time.Since(start)
	s.mu.Lock()
	s.stats.Timeouts++
	n := s.stats.Timeouts
	s.mu.Unlock()
	cause := ctx.Err()
	s.emit(fmt.Sprintf("%s: %s after %v (deadline %v): %v", EventInferenceTimeout, phase, lat, s.opts.Deadline, cause), leyline.SeverityCritical, []leyline.Metric{
		{Name: MetricInferenceTimeoutTotal, Value: float64(n), Unit: "count"},
		{Name: leyline.MetricTamiyoGNNInferenceLatencyMs, Value: ms(lat), Unit: "ms"},
	})
	return leyline.Wait(EventInferenceTimeout), fmt.Errorf("tamiyo: Service.EvaluateEpoch: %w (%s, after %v): %w", ErrInferenceTimeout, phase, lat, cause)
}

// metricsLocked returns one decision's metrics; s.mu is held.
func (s *Service) metricsLocked(lat time.Duration, cov Coverage, value float32) []leyline.Metric {
	enabled := 0.0
	if s.infer.Captures() && s.fallbacks == 0 {
		enabled = 1
	}
	m := []leyline.Metric{
		{Name: leyline.MetricTamiyoGNNCompileEnabled, Value: enabled, Unit: "bool"},
		{Name: leyline.MetricTamiyoGNNInferenceLatencyMs, Value: ms(lat), Unit: "ms"},
		{Name: leyline.MetricTamiyoGNNFeatureCoverage, Value: cov.Mean(), Unit: "ratio"},
	}
	if s.infer.Captures() {
		// The time spent capturing the forward graphs so far (each
		// batch shape's once): Go's counterpart of torch.compile's
		// warm-up.
		m = append(m, leyline.Metric{Name: leyline.MetricTamiyoGNNCompileWarmMs, Value: ms(s.infer.Stats().CaptureTime), Unit: "ms"})
	}
	if s.fallbacks > 0 {
		m = append(m, leyline.Metric{Name: leyline.MetricTamiyoGNNCompileFallbackTotal, Value: float64(s.fallbacks), Unit: "count"})
	}
	for _, fam := range []string{"node.global", "node.slot", "node.layer", "edges.attachment"} {
		m = append(m, leyline.Metric{Name: leyline.MetricTamiyoGNNFeatureCoverage + "." + fam, Value: cov.Families()[fam], Unit: "ratio"})
	}
	return append(m, leyline.Metric{Name: leyline.MetricTamiyoPolicyValueEstimate, Value: float64(value)})
}

func (s *Service) emit(msg string, sev leyline.Severity, metrics []leyline.Metric) {
	if s.opts.Sink == nil {
		return
	}
	ev := leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: metricsSource, Metrics: metrics})
	ev.Message = msg
	ev.Severity = sev
	defer func() { _ = recover() }() // a faulty sink never breaks a decision
	s.opts.Sink.Emit(ev)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// encode turns an epoch state into the policy's graph and masks.
func (s *Service) encode(st leyline.EpochState, lastOp leyline.LifecycleOp) (*Graph, []leyline.ActionMasks, error) {
	// The trainer does not tell a controller whether its last decision
	// took effect: reported as a success.
	g, m, err := EncodeState(st, EncodeOptions{Layers: s.opts.Layers(), LastOp: lastOp, MaxEpochs: s.opts.MaxEpochs, MaxSeeds: s.opts.MaxSeeds})
	if err != nil {
		return nil, nil, fmt.Errorf("tamiyo: Service.EvaluateEpoch: %w", err)
	}
	return g, []leyline.ActionMasks{m}, nil
}

// keepSlots returns the ids of slots that are in cfg.
func keepSlots(slots []string, cfg leyline.SlotConfig) []string {
	var out []string
	for _, id := range slots {
		if cfg.Contains(id) {
			out = append(out, id)
		}
	}
	return out
}

// decision maps environment 0's factored action to a Decision.
func (s *Service) decision(st leyline.EpochState, ar *ActResult) leyline.Decision {
	a := ar.Action(0)
	conf := math.Exp(float64(ar.LogProbs[0][leyline.HeadOp]))
	d := leyline.Decision{
		Op: a.Op, Blueprint: a.Blueprint, Style: a.Style, Tempo: a.Tempo,
		AlphaTarget: a.AlphaTarget, AlphaSpeed: a.AlphaSpeed, AlphaCurve: a.AlphaCurve,
		Reason:     fmt.Sprintf("%s (p=%.3f, V=%.3f)", PolicyVersion, conf, ar.Values[0]),
		Confidence: min(1, max(0, conf)),
	}
	if a.Op != leyline.OpWait {
		d.SlotID, _ = st.Slots.At(a.Slot)
		for _, r := range st.Seeds {
			if r.SlotID == d.SlotID && !isEmptySlotStage(r.Stage) {
				d.SeedID = r.SeedID
			}
		}
	}
	return d
}
