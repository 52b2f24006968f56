package nissa

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

func metricsEvent(source string, ms ...leyline.Metric) leyline.TelemetryEvent {
	return leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: source, Metrics: ms})
}

func TestPrometheusNames(t *testing.T) {
	for in, want := range map[string]string{
		"tolaria.training.latency_ms":          "esper_tolaria_training_latency_seconds",
		"kasmina.rollback-latency ms":          "esper_kasmina_rollback_latency_seconds",
		"tolaria.graph.stage_copy_ms":          "esper_tolaria_graph_stage_copy_seconds",
		"x.us_per_step":                        "esper_x_seconds_per_step",
		"tamiyo.gnn.compile_fallback_total":    "esper_tamiyo_gnn_compile_fallback_total",
		"tolaria.epochs.total":                 "esper_tolaria_epochs_total",
		"tolaria.grad_agg.microbatches_total":  "esper_tolaria_grad_agg_microbatches",
		"tamiyo.field_reports.pending_total":   "esper_tamiyo_field_reports_pending",
		"some.gauge_total_total":               "esper_some_gauge",
		"total":                                "esper_total",
		"tolaria.timeout.végétal":              "esper_tolaria_timeout_v__g__tal",
		"3d.thing":                             "esper_3d_thing",
		"tolaria.validation.accuracy":          "esper_tolaria_validation_accuracy",
		"simic.env_epochs_per_second":          "esper_simic_env_epochs_per_second",
		"tolaria.timeout.late_discarded_total": "esper_tolaria_timeout_late_discarded_total",
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
# HELP esper_tolaria_training_latency_seconds Last value of the Esper metric tolaria.training.latency_ms, in seconds.
# TYPE esper_tolaria_training_latency_seconds gauge
esper_tolaria_training_latency_seconds{device="cpu",source="tolaria"} 0.015
esper_tolaria_training_latency_seconds{device="",source="tamiyo"} 0.003
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
	assert.Contains(t, body, `esper_tolaria_training_latency_seconds{source="tolaria"} 0.0125`)
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

// readEvents decodes a JSONL telemetry log.
func readEvents(t *testing.T, path string) []leyline.TelemetryEvent {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var evs []leyline.TelemetryEvent
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev leyline.TelemetryEvent
		require.NoError(t, json.Unmarshal([]byte(line), &ev), "%s line %d", path, i+1)
		evs = append(evs, ev)
	}
	return evs
}

// labelsOf returns a metric's labels by name.
func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

// TestPrometheusExpositionLintClean feeds the events of a real run (the
// first 24 epochs of `make demo`'s run, testdata/demo-events.jsonl: a
// seed germinated, trained, blended, held and fossilized) to the backend
// and runs client_golang's promlint over the text exposition its handler
// serves: no problem. The exposition has the validation figures, running
// counts as counters and durations in seconds, and after every event
// each seed's per-stage series are of the seed's current stage only.
func TestPrometheusExpositionLintClean(t *testing.T) {
	hub := NewHub(HubOptions{})
	t.Cleanup(func() { _ = hub.Close(time.Second) })
	pb := NewPrometheusBackend(PrometheusOptions{Hub: hub})
	require.NoError(t, hub.AddBackend(pb)) // for the hub and backend figures; the events go to pb directly
	reg := prometheus.NewRegistry()
	reg.MustRegister(pb)

	var lastEpoch *leyline.EpochCompletedPayload
	stages := map[string]string{}
	perStage := 0
	for i, ev := range readEvents(t, filepath.Join("testdata", "demo-events.jsonl")) {
		require.NoError(t, pb.Emit(ev))
		switch p := ev.Data.(type) {
		case *leyline.EpochCompletedPayload:
			lastEpoch = p
		case *leyline.SeedGerminatedPayload:
			stages[ev.SeedID] = leyline.StageGerminated.String()
		case *leyline.SeedStageChangedPayload:
			stages[ev.SeedID] = p.To.String()
		}
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				l := labelsOf(m)
				if l["seed_id"] == "" || l["stage"] == "" || l["stage"] == "TEACHER" {
					continue
				}
				perStage++
				assert.Equal(t, stages[l["seed_id"]], l["stage"], "event %d: %s%v: a series of a stage the seed is not in", i+1, f.GetName(), l)
			}
		}
	}
	require.NotNil(t, lastEpoch)
	require.Equal(t, map[string]string{"r0c0-conv_light": "FOSSILIZED"}, stages, "the fixture walks a seed to FOSSILIZED")
	assert.Greater(t, perStage, 100, "the seed's per-stage series were exported")

	srv := httptest.NewServer(pb.Handler())
	defer srv.Close()
	text := get(t, srv.URL)
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	require.NoError(t, err)
	require.Empty(t, problems, "promlint over:\n%s", text)

	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err)
	value := func(name string) (float64, dto.MetricType) {
		t.Helper()
		f := fams[name]
		require.NotNil(t, f, "%s is exported", name)
		require.Len(t, f.GetMetric(), 1, name)
		m := f.GetMetric()[0]
		if f.GetType() == dto.MetricType_COUNTER {
			return m.GetCounter().GetValue(), f.GetType()
		}
		return m.GetGauge().GetValue(), f.GetType()
	}
	v, typ := value("esper_tolaria_validation_loss")
	assert.Equal(t, lastEpoch.ValLoss, v)
	assert.Equal(t, dto.MetricType_GAUGE, typ)
	v, _ = value("esper_tolaria_validation_accuracy")
	assert.Equal(t, lastEpoch.ValAccuracy, v)
	v, typ = value("esper_tolaria_epochs_total")
	assert.Equal(t, 24.0, v)
	assert.Equal(t, dto.MetricType_COUNTER, typ)
	_, typ = value("esper_tolaria_training_latency_seconds")
	assert.Equal(t, dto.MetricType_GAUGE, typ)
	_, typ = value("esper_tolaria_grad_agg_microbatches")
	assert.Equal(t, dto.MetricType_GAUGE, typ, "one epoch's count is a gauge")
}

// TestPrometheusStaleSeedSeries: a seed's series of the stages it left
// are deleted when its SEED_STAGE_CHANGED event arrives, later samples
// from a stage it left are not exported, and a seed reset to DORMANT
// loses its per-stage series until it germinates again. For a seed
// without lifecycle events, a sample from a new stage deletes the old
// stage's series of that family. Other seeds, the teacher and families
// without a stage label keep theirs.
func TestPrometheusStaleSeedSeries(t *testing.T) {
	pb := NewPrometheusBackend(PrometheusOptions{})
	sample := func(name, seed, stage string, v float64) {
		t.Helper()
		attrs := map[string]string{"seed_id": seed, "stage": stage}
		require.NoError(t, pb.Emit(metricsEvent("tolaria", leyline.Metric{Name: name, Value: v, Attributes: attrs})))
	}
	lifecycle := func(seed string, typ leyline.EventType, data leyline.Payload) {
		t.Helper()
		ev := leyline.NewEvent(typ, data)
		ev.SeedID = seed
		require.NoError(t, pb.Emit(ev))
	}
	changed := func(seed string, from, to leyline.SeedStage) {
		t.Helper()
		lifecycle(seed, leyline.EventSeedStageChanged, &leyline.SeedStageChangedPayload{SlotID: "r0c0", EnvID: -1, From: from, To: to})
	}
	series := func() []string {
		t.Helper()
		reg := prometheus.NewRegistry()
		reg.MustRegister(pb)
		fams, err := reg.Gather()
		require.NoError(t, err)
		var out []string
		for _, f := range fams {
			if !strings.HasPrefix(f.GetName(), "esper_tolaria") {
				continue
			}
			for _, m := range f.GetMetric() {
				l := labelsOf(m)
				out = append(out, strings.Join(strings.Fields(fmt.Sprintf("%s %s %s %g", strings.TrimPrefix(f.GetName(), "esper_tolaria_"), l["seed_id"], l["stage"], m.GetGauge().GetValue())), " "))
			}
		}
		sort.Strings(out)
		return out
	}
	const alpha, norm = "tolaria.grad_agg.seed.alpha", "tolaria.grad_agg.seed.norm"
	lifecycle("a", leyline.EventSeedGerminated, &leyline.SeedGerminatedPayload{SlotID: "r0c0", EnvID: -1, BlueprintID: "conv_light"})
	changed("a", leyline.StageGerminated, leyline.StageTraining)
	sample(alpha, "a", "TRAINING", 0)
	sample(norm, "a", "TRAINING", 0.2)
	sample(alpha, "b", "TRAINING", 0)
	sample(norm, "b", "TRAINING", 0.1)
	sample(norm, "__teacher__", "TEACHER", 0.5)
	require.NoError(t, pb.Emit(metricsEvent("tolaria", leyline.Metric{Name: "tolaria.seeds.active", Value: 2})))

	changed("a", leyline.StageTraining, leyline.StageBlending)
	sample(alpha, "a", "TRAINING", 0.1) // the last TRAINING epoch's figures, after the decision
	sample(alpha, "b", "BLENDING", 0.3) // b has no events: the sample retires b's TRAINING alpha
	assert.Equal(t, []string{
		"grad_agg_seed_alpha b BLENDING 0.3",
		"grad_agg_seed_norm __teacher__ TEACHER 0.5",
		"grad_agg_seed_norm b TRAINING 0.1",
		"seeds_active 2",
	}, series())

	sample(alpha, "a", "BLENDING", 0.5)
	sample(norm, "a", "BLENDING", 0.3)
	assert.Equal(t, []string{
		"grad_agg_seed_alpha a BLENDING 0.5",
		"grad_agg_seed_alpha b BLENDING 0.3",
		"grad_agg_seed_norm __teacher__ TEACHER 0.5",
		"grad_agg_seed_norm a BLENDING 0.3",
		"grad_agg_seed_norm b TRAINING 0.1",
		"seeds_active 2",
	}, series())

	changed("a", leyline.StageBlending, leyline.StagePruned)
	changed("a", leyline.StageResetting, leyline.StageDormant)
	sample(alpha, "a", "BLENDING", 0.4) // no stage is current: a is gone
	want := []string{
		"grad_agg_seed_alpha b BLENDING 0.3",
		"grad_agg_seed_norm __teacher__ TEACHER 0.5",
		"grad_agg_seed_norm b TRAINING 0.1",
		"seeds_active 2",
	}
	assert.Equal(t, want, series())

	lifecycle("a", leyline.EventSeedGerminated, &leyline.SeedGerminatedPayload{SlotID: "r0c0", EnvID: -1, BlueprintID: "conv_light"})
	sample(alpha, "a", "GERMINATED", 0)
	assert.Equal(t, append([]string{"grad_agg_seed_alpha a GERMINATED 0"}, want...), series())
}
