package nissa

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/esper-go/esper/leyline"
)

// Prometheus family names of the backend's own metrics. Metric names of
// METRICS events that map onto the esper_nissa_ prefix are reserved and
// skipped.
const (
	metricPrefix         = "esper_"
	reservedPrefix       = "esper_nissa_"
	eventsTotalName      = "esper_nissa_events_total"
	skippedTotalName     = "esper_nissa_metrics_skipped_total"
	hubDroppedName       = "esper_nissa_hub_dropped_total"
	hubQueueDepthName    = "esper_nissa_hub_queue_depth"
	backendDroppedName   = "esper_nissa_backend_dropped_total"
	backendProcessedName = "esper_nissa_backend_processed_total"
)

// PrometheusOptions configures a PrometheusBackend. The zero value gives
// the defaults.
type PrometheusOptions struct {
	// Name is the backend's name; default "prometheus".
	Name string
	// Hub, if set, is the hub whose drop counters and queue depth the
	// collector exports alongside the events (usually the hub this
	// backend is added to).
	Hub *Hub
}

// PrometheusBackend turns events into Prometheus metrics. It is a
// prometheus.Collector: register it in a registry of your own
// (reg.MustRegister(pb)), or let ServeMetrics expose it on a registry of
// its own. It exports:
//
//   - esper_nissa_events_total{event_type, severity}: a counter of every
//     event it received;
//   - for each metric of a METRICS event, the last value received, named
//     by PrometheusMetricName and labelled by the payload's source plus
//     the metric's attributes (see below). A running count
//     (leyline.IsCounterMetric, such as tolaria.epochs.total) is a
//     counter named with "_total"; every other metric is a gauge, and a
//     gauge's name never ends in "_total" (tolaria.grad_agg.microbatches_total,
//     one epoch's steps, becomes esper_tolaria_grad_agg_microbatches).
//     Durations are in seconds, the base unit: a metric named in ms, µs
//     or ns ("tolaria.training.latency_ms") is exported as
//     esper_tolaria_training_latency_seconds, its value converted. So the
//     exposition passes promlint (client_golang's testutil/promlint);
//     the events themselves (JSONL, console) keep the Esper names and
//     units;
//   - esper_nissa_metrics_skipped_total: metrics not exported because their
//     name maps into the reserved esper_nissa_ space;
//   - with PrometheusOptions.Hub set: esper_nissa_hub_dropped_total,
//     esper_nissa_hub_queue_depth, and per backend
//     esper_nissa_backend_processed_total{backend} and
//     esper_nissa_backend_dropped_total{backend}.
//
// Label rule for metric gauges: a family's label names are fixed by the
// first sample that creates it: "source" followed by that sample's
// attribute keys, sanitised by PrometheusLabelName and sorted (keys that
// sanitise to "source" or to a name already taken are left out). Later
// samples of the family use those names only: an attribute the family
// lacks is ignored, and a label the sample lacks is the empty string. Each
// distinct label-value set is one series, so attributes with unbounded
// values (ids, timestamps) belong in the event, not in metric
// attributes.
//
// Per-seed series labelled with both seed_id and stage (the
// tolaria.grad_agg.seed.* metrics) follow the seed's current stage, so a
// scrape never shows seed_alpha{stage="TRAINING"} beside
// {stage="HOLDING"} for one seed. The backend learns the stage from
// SEED_GERMINATED and SEED_STAGE_CHANGED events: a stage change deletes
// the seed's series of every other stage, and a later sample from a
// stage the seed has left (an epoch's figures, measured before the
// epoch's decision moved the seed on) is not exported. A seed reset to
// DORMANT loses all its stage-labelled series. For a seed with no such
// event, a sample from a new stage deletes the seed's series of other
// stages in that family.
//
// The family set grows with the metric names seen, so the collector is
// "unchecked": Describe sends no descriptors, and the registry checks the
// families at gather time instead. A registry therefore cannot refuse a
// second registration of the same backend: register it once per
// registry.
type PrometheusBackend struct {
	name string
	hub  *Hub

	eventsDesc, skippedDesc                              *prometheus.Desc
	hubDroppedDesc, hubQueueDesc, bDroppedDesc, bProcDes *prometheus.Desc

	mu       sync.Mutex
	events   map[eventKey]uint64
	skipped  uint64
	families map[string]*gaugeFamily
	// stages holds each seed's stage (from its lifecycle events), by
	// seed id.
	stages map[string]string
}

var _ prometheus.Collector = (*PrometheusBackend)(nil)

type eventKey struct {
	t leyline.EventType
	s leyline.Severity
}

// gaugeFamily is one exported metric name and its series: a gauge, or
// a counter for a running count.
type gaugeFamily struct {
	desc      *prometheus.Desc
	valueType prometheus.ValueType
	perUnit   float64  // Esper units per exported unit: value / perUnit is exported
	attrKeys  []string // attribute key for each label after "source"
	// seedIdx and stageIdx are the positions of the seed_id and stage
	// labels, -1 when the family lacks one.
	seedIdx, stageIdx int
	series            map[string]*gaugeSeries
}

// Label names of per-seed series (the attributes the aggregation's
// tolaria.grad_agg.seed.* metrics carry).
const (
	seedLabel  = "seed_id"
	stageLabel = "stage"
)

type gaugeSeries struct {
	labels []string
	value  float64
}

// NewPrometheusBackend returns a backend with no metrics yet.
func NewPrometheusBackend(opts PrometheusOptions) *PrometheusBackend {
	if opts.Name == "" {
		opts.Name = "prometheus"
	}
	return &PrometheusBackend{
		name: opts.Name,
		hub:  opts.Hub,
		eventsDesc: prometheus.NewDesc(eventsTotalName,
			"Telemetry events received by the Nissa Prometheus backend.",
			[]string{"event_type", "severity"}, nil),
		skippedDesc: prometheus.NewDesc(skippedTotalName,
			"Metrics of METRICS events not exported because their name maps into the reserved esper_nissa_ space.",
			nil, nil),
		hubDroppedDesc: prometheus.NewDesc(hubDroppedName,
			"Events dropped by the Nissa hub (queue full or emitted after close).", nil, nil),
		hubQueueDesc: prometheus.NewDesc(hubQueueDepthName,
			"Entries waiting on the Nissa hub queue.", nil, nil),
		bDroppedDesc: prometheus.NewDesc(backendDroppedName,
			"Events dropped by a Nissa backend (queue full, or emit failed).", []string{"backend"}, nil),
		bProcDes: prometheus.NewDesc(backendProcessedName,
			"Events delivered to a Nissa backend.", []string{"backend"}, nil),
		events:   make(map[eventKey]uint64),
		families: make(map[string]*gaugeFamily),
		stages:   make(map[string]string),
	}
}

// Name returns the backend's name.
func (p *PrometheusBackend) Name() string { return p.name }

// Start does nothing.
func (p *PrometheusBackend) Start() error { return nil }

// Close does nothing; the collected values stay exported.
func (p *PrometheusBackend) Close() error { return nil }

// Emit counts ev, follows the seeds' stages through their lifecycle
// events and, for a METRICS event, sets each metric's series.
func (p *PrometheusBackend) Emit(ev leyline.TelemetryEvent) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events[eventKey{ev.Type, ev.Severity}]++
	switch d := ev.Data.(type) {
	case *leyline.SeedGerminatedPayload:
		p.seedStageLocked(ev.SeedID, leyline.StageGerminated)
	case *leyline.SeedStageChangedPayload:
		if d != nil {
			p.seedStageLocked(ev.SeedID, d.To)
		}
	}
	mp, ok := ev.Data.(*leyline.MetricsPayload)
	if !ok || mp == nil {
		return nil
	}
	for _, m := range mp.Metrics {
		p.setLocked(mp.Source, m)
	}
	return nil
}

func (p *PrometheusBackend) setLocked(source string, m leyline.Metric) {
	name := PrometheusMetricName(m.Name)
	if strings.HasPrefix(name, reservedPrefix) {
		p.skipped++
		return
	}
	fam := p.families[name]
	if fam == nil {
		fam = newGaugeFamily(name, m)
		p.families[name] = fam
	}
	labels := make([]string, 1+len(fam.attrKeys))
	// Label values must be UTF-8 or the registry rejects the metric.
	labels[0] = strings.ToValidUTF8(source, "\uFFFD")
	for i, k := range fam.attrKeys {
		labels[i+1] = strings.ToValidUTF8(m.Attributes[k], "\uFFFD")
	}
	if fam.seedIdx >= 0 && fam.stageIdx >= 0 && labels[fam.stageIdx] != "" {
		if cur, ok := p.stages[labels[fam.seedIdx]]; ok && cur != labels[fam.stageIdx] {
			return // measured in a stage the seed has left
		}
	}
	key := strings.Join(labels, "\xff")
	s := fam.series[key]
	if s == nil {
		s = &gaugeSeries{labels: labels}
		fam.series[key] = s
		if fam.seedIdx >= 0 && fam.stageIdx >= 0 && labels[fam.seedIdx] != "" && labels[fam.stageIdx] != "" {
			// The seed reports from a new stage: its other stages' series
			// of this family are stale (the stage-change event may have
			// been dropped, or not reached this family's labels).
			fam.retire(labels[fam.seedIdx], labels[fam.stageIdx])
		}
	}
	s.value = m.Value / fam.perUnit
}

// seedStageLocked records that seed is now in stage and deletes, in
// every family labelled by seed and stage, the seed's series of the
// other stages (all of them for DORMANT: the seed is gone).
func (p *PrometheusBackend) seedStageLocked(seed string, stage leyline.SeedStage) {
	if seed == "" {
		return
	}
	seed = strings.ToValidUTF8(seed, "\uFFFD")
	st := stage.String()
	p.stages[seed] = st
	for _, fam := range p.families {
		if fam.seedIdx >= 0 && fam.stageIdx >= 0 {
			fam.retire(seed, st)
		}
	}
}

// retire deletes the series of seed whose stage label is set and is not
// stage.
func (fam *gaugeFamily) retire(seed, stage string) {
	for k, s := range fam.series {
		if s.labels[fam.seedIdx] == seed && s.labels[fam.stageIdx] != "" && s.labels[fam.stageIdx] != stage {
			delete(fam.series, k)
		}
	}
}

func newGaugeFamily(name string, first leyline.Metric) *gaugeFamily {
	keys := make([]string, 0, len(first.Attributes))
	for k := range first.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	taken := map[string]bool{"source": true}
	type pair struct{ label, key string }
	var pairs []pair
	for _, k := range keys {
		l := PrometheusLabelName(k)
		if taken[l] {
			continue
		}
		taken[l] = true
		pairs = append(pairs, pair{l, k})
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].label < pairs[j].label })
	labelNames := []string{"source"}
	attrKeys := make([]string, len(pairs))
	for i, pr := range pairs {
		labelNames = append(labelNames, pr.label)
		attrKeys[i] = pr.key
	}
	_, counter, perUnit := prometheusFamily(first.Name)
	help := "Last value of the Esper metric " + first.Name
	vt := prometheus.GaugeValue
	if counter {
		help = "Running count of the Esper metric " + first.Name
		vt = prometheus.CounterValue
	}
	switch {
	case perUnit != 1:
		help += ", in seconds"
	case first.Unit != "":
		help += " (" + first.Unit + ")"
	}
	help += "."
	fam := &gaugeFamily{
		desc:      prometheus.NewDesc(name, help, labelNames, nil),
		valueType: vt,
		perUnit:   perUnit,
		attrKeys:  attrKeys,
		seedIdx:   -1,
		stageIdx:  -1,
		series:    make(map[string]*gaugeSeries),
	}
	for i, l := range labelNames {
		switch l {
		case seedLabel:
			fam.seedIdx = i
		case stageLabel:
			fam.stageIdx = i
		}
	}
	return fam
}

// Describe sends nothing: the collector is unchecked because its gauge
// families appear as metric names are first seen.
func (p *PrometheusBackend) Describe(chan<- *prometheus.Desc) {}

// Collect sends the current value of every exported metric.
func (p *PrometheusBackend) Collect(ch chan<- prometheus.Metric) {
	if p.hub != nil {
		h := p.hub.Health()
		ch <- prometheus.MustNewConstMetric(p.hubDroppedDesc, prometheus.CounterValue, float64(h.Dropped))
		ch <- prometheus.MustNewConstMetric(p.hubQueueDesc, prometheus.GaugeValue, float64(h.QueueDepth))
		for _, b := range h.Backends {
			name := strings.ToValidUTF8(b.Name, "\uFFFD")
			ch <- prometheus.MustNewConstMetric(p.bDroppedDesc, prometheus.CounterValue, float64(b.Dropped), name)
			ch <- prometheus.MustNewConstMetric(p.bProcDes, prometheus.CounterValue, float64(b.Processed), name)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, n := range p.events {
		ch <- prometheus.MustNewConstMetric(p.eventsDesc, prometheus.CounterValue, float64(n),
			k.t.String(), k.s.String())
	}
	ch <- prometheus.MustNewConstMetric(p.skippedDesc, prometheus.CounterValue, float64(p.skipped))
	for _, fam := range p.families {
		for _, s := range fam.series {
			ch <- prometheus.MustNewConstMetric(fam.desc, fam.valueType, s.value, s.labels...)
		}
	}
}

// PrometheusMetricName maps an Esper metric name to its Prometheus
// family name: "esper_" followed by the name with every character
// outside [A-Za-z0-9_] replaced by '_', then put in Prometheus' naming
// conventions: a duration unit (the word ms, us or ns) becomes
// "seconds", a running count (leyline.IsCounterMetric) ends in "_total"
// and any other metric does not. So "tolaria.training.latency_ms"
// becomes "esper_tolaria_training_latency_seconds", "tolaria.epochs.total"
// "esper_tolaria_epochs_total" (a counter) and
// "tamiyo.field_reports.pending_total" "esper_tamiyo_field_reports_pending"
// (a gauge).
func PrometheusMetricName(name string) string {
	n, _, _ := prometheusFamily(name)
	return n
}

// durationUnits are the duration words of Esper metric names and how
// many of each make a second. (A division by 1000 keeps 12.5 ms exactly
// 0.0125 s, which a multiplication by 1e-3 does not always.)
var durationUnits = map[string]float64{"ms": 1e3, "us": 1e6, "ns": 1e9}

// prometheusFamily returns the Prometheus family name of the Esper
// metric name, whether it is a counter, and how many of the name's units
// make one of the family's (1 unless the name is in a unit other than
// the base unit): the family's value is the Esper value / perUnit.
func prometheusFamily(name string) (family string, counter bool, perUnit float64) {
	words := strings.Split(sanitize(name), "_")
	perUnit = 1
	for i := len(words) - 1; i >= 0; i-- {
		if f, ok := durationUnits[words[i]]; ok {
			words[i], perUnit = "seconds", f
			break
		}
	}
	s := strings.Join(words, "_")
	counter = leyline.IsCounterMetric(name)
	switch {
	case counter && !strings.HasSuffix(s, "_total"):
		s += "_total"
	case !counter:
		for strings.HasSuffix(s, "_total") && len(s) > len("_total") {
			s = strings.TrimSuffix(s, "_total")
		}
	}
	return metricPrefix + s, counter, perUnit
}

// PrometheusLabelName maps an attribute key to a Prometheus label name:
// every character outside [A-Za-z0-9_] becomes '_', and a name that
// would start with a digit or with the reserved "__" (or is empty) gets
// the prefix "attr_".
func PrometheusLabelName(key string) string {
	s := sanitize(key)
	if s == "" || (s[0] >= '0' && s[0] <= '9') || strings.HasPrefix(s, "__") {
		s = "attr_" + s
	}
	return s
}

func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// Handler returns an http.Handler serving the Prometheus text exposition
// of this backend from a registry holding it alone.
func (p *PrometheusBackend) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(p)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// MetricsServer is the HTTP server ServeMetrics starts.
type MetricsServer struct {
	srv  *http.Server
	addr string
	done chan struct{}
	err  error // Serve's error other than http.ErrServerClosed; read after done
}

// ServeMetrics listens on addr (host:port; port 0 picks one) and serves
// the backend's metrics at /metrics until the server is shut down. It is
// what the CLI's --metrics-addr starts. Listening errors are returned
// at once.
func (p *PrometheusBackend) ServeMetrics(addr string) (*MetricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("nissa: metrics server: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", p.Handler())
	s := &MetricsServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		addr: ln.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s, nil
}

// Addr returns the address the server listens on (with the real port
// when addr asked for port 0).
func (s *MetricsServer) Addr() string { return s.addr }

// URL returns the metrics endpoint, http://<Addr>/metrics.
func (s *MetricsServer) URL() string { return "http://" + s.addr + "/metrics" }

// Shutdown stops the server gracefully (see http.Server.Shutdown) and
// returns the server's own error, if it failed while serving.
func (s *MetricsServer) Shutdown(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("nissa: metrics server: %w", err)
	}
	<-s.done
	if s.err != nil {
		return fmt.Errorf("nissa: metrics server: %w", s.err)
	}
	return nil
}

// Close stops the server at once (see http.Server.Close).
func (s *MetricsServer) Close() error {
	err := s.srv.Close()
	<-s.done
	return err
}
