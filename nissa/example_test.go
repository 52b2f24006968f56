package nissa_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nissa"
)

// A hub writing every event to a JSONL file. Emit never blocks; Flush
// waits for the file to hold everything emitted so far, and Close does
// the same before it stops the workers.
func ExampleHub() {
	dir, err := os.MkdirTemp("", "nissa-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "events.jsonl")

	hub := nissa.NewHub(nissa.HubOptions{})
	if err := hub.AddBackend(nissa.NewJSONLBackend(path, nissa.JSONLOptions{})); err != nil {
		panic(err)
	}

	ev := leyline.NewEvent(leyline.EventSeedGerminated, &leyline.SeedGerminatedPayload{
		SlotID: "r0c0", EnvID: leyline.EnvIDUnset, BlueprintID: "conv_light", Params: 37000,
	})
	ev.SlotID = "r0c0"
	hub.Emit(ev)
	hub.Emit(leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{
		Source:  "tolaria",
		Metrics: []leyline.Metric{{Name: "tolaria.training.latency_ms", Value: 12.5, Unit: "ms"}},
	}))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hub.Flush(ctx); err != nil {
		panic(err)
	}
	if err := hub.Close(5 * time.Second); err != nil {
		panic(err)
	}

	f, err := os.Open(path)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var got leyline.TelemetryEvent
		if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
			panic(err)
		}
		fmt.Println(got.Type)
	}
	h := hub.Health()
	fmt.Println(h.Status, h.Backends[0].Processed)
	// Output:
	// SEED_GERMINATED
	// METRICS
	// healthy 2
}

// Registering the Prometheus backend in a program's own registry. The
// backend is also added to the hub, which feeds it; ServeMetrics is the
// alternative when the program has no registry of its own.
func ExamplePrometheusBackend() {
	hub := nissa.NewHub(nissa.HubOptions{})
	pb := nissa.NewPrometheusBackend(nissa.PrometheusOptions{Hub: hub})
	if err := hub.AddBackend(pb); err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(pb)

	hub.Emit(leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{
		Source:  "tolaria",
		Metrics: []leyline.Metric{{Name: "tolaria.training.latency_ms", Value: 12.5, Unit: "ms"}},
	}))
	if err := hub.Close(5 * time.Second); err != nil {
		panic(err)
	}

	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP esper_tolaria_training_latency_seconds Last value of the Esper metric tolaria.training.latency_ms, in seconds.
# TYPE esper_tolaria_training_latency_seconds gauge
esper_tolaria_training_latency_seconds{source="tolaria"} 0.0125
`), "esper_tolaria_training_latency_seconds")
	fmt.Println(err)

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range families {
		fmt.Println(mf.GetName())
	}
	// Output:
	// <nil>
	// esper_nissa_backend_dropped_total
	// esper_nissa_backend_processed_total
	// esper_nissa_events_total
	// esper_nissa_hub_dropped_total
	// esper_nissa_hub_queue_depth
	// esper_nissa_metrics_skipped_total
	// esper_tolaria_training_latency_seconds
}
