package nissa

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

func metricsEvent(source string, ms ...leyline.Metric) leyline.TelemetryEvent {
	return leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: source, Metrics: ms})
}

func TestPrometheusNames(t *testing.T) {
	for in, want := range map[string]string{
		"tolaria.training.latency_ms":       "esper_tolaria_training_latency_ms",
		"tamiyo.gnn.compile_fallback_total": "esper_tamiyo_gnn_compile_fallback_total",
		"kasmina.rollback-latency ms":       "esper_kasmina_rollback_latency_ms",
		"tolaria.timeout.végétal":           "esper_tolaria_timeout_v__g__tal",
		"3d.thing":                          "esper_3d_thing",
	} {
		assert.Equal(t, want, PrometheusMetricName(in), in)
	}
	for in, want := range map[string]string{
		"device":    "device",
		"seed.slot": "seed_slot",
		"0rank":     "attr_0rank",
		"__name__":  "attr___name__",
		"":          "attr_",
	} {
		assert.Equal(t, want, PrometheusLabelName(in), in)
	}
}

func TestPrometheusCollectorInFreshRegistry(t *testing.T) {
	pb := NewPrometheusBackend(PrometheusOptions{})
	assert.Equal(t, "prometheus", pb.Name())
	reg := prometheus.NewRegistry()
	reg.MustRegister(pb)

	events := []leyline.TelemetryEvent{
		leyline.NewEvent(leyline.EventSeedGerminated, &leyline.SeedGerminatedPayload{
			SlotID: "r0c0", EnvID: -1, BlueprintID: "conv_light", Params: 37000}),
		// The first sample fixes the family's labels: source + device.
		metricsEvent("tolaria",
			leyline.Metric{Name: "tolaria.training.latency_ms", Value: 12.5, Unit: "ms",
				Attributes: map[string]string{"device": "cpu"}},
			leyline.Metric{Name: "tolaria.train.graph_enabled", Value: 1}),
		// Last value wins; an attribute the family lacks is ignored.
		metricsEvent("tolaria",
			leyline.Metric{Name: "tolaria.training.latency_ms", Value: 15, Unit: "ms",
				Attributes: map[string]string{"device": "cpu", "rank": "0"}}),
		// A missing attribute is the empty label; another source is
		// another series.
		metricsEvent("tamiyo",
			leyline.Metric{Name: "tolaria.training.latency_ms", Value: 3}),
		// Reserved names are skipped, not exported.
		metricsEvent("rogue", leyline.Metric{Name: "nissa.events_total", Value: 99}),
	}
	events[4].Severity = leyline.SeverityWarning
	for _, ev := range events {
		require.NoError(t, pb.Emit(ev))
	}

	const want = `
# HELP esper_nissa_events_total Telemetry events received by the Nissa Prometheus backend.
# TYPE esper_nissa_events_total counter
esper_nissa_events_total{event_type="METRICS",severity="info"} 3
esper_nissa_events_total{event_type="METRICS",severity="warning"} 1
esper_nissa_events_total{event_type="SEED_GERMINATED",severity="info"} 1
# HELP esper_nissa_metrics_skipped_total Metrics of METRICS events not exported because their name maps into the reserved esper_nissa_ space.
# TYPE esper_nissa_metrics_skipped_total counter
esper_nissa_metrics_skipped_total 1
# HELP esper_tolaria_train_graph_enabled Last value of the Esper metric tolaria.train.graph_enabled.
# TYPE esper_tolaria_train_graph_enabled gauge
esper_tolaria_train_graph_enabled{source="tolaria"} 1
# HELP esper_tolaria_training_latency_ms Last value of the Esper metric tolaria.training.latency_ms (ms).
# TYPE esper_tolaria_training_latency_ms gauge
esper_tolaria_training_latency_ms{device="cpu",source="tolaria"} 15
esper_tolaria_training_latency_ms{device="",source="tamiyo"} 3
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	assert.Equal(t, 7, n)
	require.NoError(t, testutil.CollectAndCompare(pb, strings.NewReader(want)), "pedantic registry agrees")
}

func TestPrometheusHubMetrics(t *testing.T) {
	resume := make(chan struct{})
	h := newHub(HubOptions{QueueSize: 2}, resume)
	closeHub(t, h)
	pb := NewPrometheusBackend(PrometheusOptions{Name: "prom", Hub: h})
	require.NoError(t, h.AddBackend(pb))
	for range 5 {
		h.Emit(msgEvent("x"))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(pb)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP esper_nissa_hub_dropped_total Events dropped by the Nissa hub (queue full or emitted after close).
# TYPE esper_nissa_hub_dropped_total counter
esper_nissa_hub_dropped_total 3
# HELP esper_nissa_hub_queue_depth Entries waiting on the Nissa hub queue.
# TYPE esper_nissa_hub_queue_depth gauge
esper_nissa_hub_queue_depth 2
`), "esper_nissa_hub_dropped_total", "esper_nissa_hub_queue_depth"))

	close(resume)
	require.NoError(t, h.Flush(flushCtx(t, longWait)))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP esper_nissa_backend_processed_total Events delivered to a Nissa backend.
# TYPE esper_nissa_backend_processed_total counter
esper_nissa_backend_processed_total{backend="prom"} 2
# HELP esper_nissa_events_total Telemetry events received by the Nissa Prometheus backend.
# TYPE esper_nissa_events_total counter
esper_nissa_events_total{event_type="PLATEAU_DETECTED",severity="info"} 2
`), "esper_nissa_backend_processed_total", "esper_nissa_events_total"))
}

func TestPrometheusInvalidUTF8Label(t *testing.T) {
	pb := NewPrometheusBackend(PrometheusOptions{})
	require.NoError(t, pb.Emit(metricsEvent("bad\xff", leyline.Metric{Name: "m", Value: 1})))
	reg := prometheus.NewRegistry()
	reg.MustRegister(pb)
	_, err := reg.Gather()
	assert.NoError(t, err)
}

func TestPrometheusHandler(t *testing.T) {
	pb := NewPrometheusBackend(PrometheusOptions{})
	require.NoError(t, pb.Emit(metricsEvent("tolaria", leyline.Metric{Name: "tolaria.training.latency_ms", Value: 12.5})))
	srv := httptest.NewServer(pb.Handler())
	defer srv.Close()
	body := get(t, srv.URL)
	assert.Contains(t, body, `esper_tolaria_training_latency_ms{source="tolaria"} 12.5`)
}

func TestServeMetrics(t *testing.T) {
	pb := NewPrometheusBackend(PrometheusOptions{})
	ms, err := pb.ServeMetrics("127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, pb.Emit(metricsEvent("tamiyo", leyline.Metric{Name: "tamiyo.gnn.compile_enabled", Value: 1})))

	assert.NotContains(t, ms.Addr(), ":0")
	body := get(t, ms.URL())
	assert.Contains(t, body, `esper_tamiyo_gnn_compile_enabled{source="tamiyo"} 1`)
	assert.Contains(t, body, `esper_nissa_events_total{event_type="METRICS",severity="info"} 1`)

	resp, err := http.Get("http://" + ms.Addr() + "/nope")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	require.NoError(t, ms.Shutdown(context.Background()))
	_, err = http.Get(ms.URL())
	assert.Error(t, err, "server is down")

	_, err = pb.ServeMetrics("127.0.0.1:-1")
	assert.Error(t, err, "bad address is reported at once")
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
