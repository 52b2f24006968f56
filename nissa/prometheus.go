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
//   - for each metric of a METRICS event, a gauge holding the last value
//     received, named by PrometheusMetricName ("tolaria.training.latency_ms"
//     becomes esper_tolaria_training_latency_ms) and labelled by the
//     payload's source plus the metric's attributes (see below);
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
}

var _ prometheus.Collector = (*PrometheusBackend)(nil)

type eventKey struct {
	t leyline.EventType
	s leyline.Severity
}

// gaugeFamily is one exported gauge name and its series.
type gaugeFamily struct {
	desc     *prometheus.Desc
	attrKeys []string // attribute key for each label after "source"
	series   map[string]*gaugeSeries
}

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
	}
}

// Name returns the backend's name.
func (p *PrometheusBackend) Name() string { return p.name }

// Start does nothing.
func (p *PrometheusBackend) Start() error { return nil }

// Close does nothing; the collected values stay exported.
func (p *PrometheusBackend) Close() error { return nil }

// Emit counts ev and, for a METRICS event, sets a gauge per metric.
func (p *PrometheusBackend) Emit(ev leyline.TelemetryEvent) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events[eventKey{ev.Type, ev.Severity}]++
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
	key := strings.Join(labels, "\xff")
	s := fam.series[key]
	if s == nil {
		s = &gaugeSeries{labels: labels}
		fam.series[key] = s
	}
	s.value = m.Value
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
	help := "Last value of the Esper metric " + first.Name
	if first.Unit != "" {
		help += " (" + first.Unit + ")"
	}
	help += "."
	return &gaugeFamily{
		desc:     prometheus.NewDesc(name, help, labelNames, nil),
		attrKeys: attrKeys,
		series:   make(map[string]*gaugeSeries),
	}
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
			ch <- prometheus.MustNewConstMetric(fam.desc, prometheus.GaugeValue, s.value, s.labels...)
		}
	}
}

// PrometheusMetricName maps an Esper metric name to its Prometheus
// family name: "esper_" followed by the name with every character
// outside [A-Za-z0-9_] replaced by '_'. So "tolaria.training.latency_ms"
// becomes "esper_tolaria_training_latency_ms".
func PrometheusMetricName(name string) string {
	return metricPrefix + sanitize(name)
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
