package kasmina_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nissa"
	"github.com/esper-go/esper/nn"
)

// TestLifecycleEventsThroughNissa drives a seed from germination to
// fossilization and a second one to prune with a real nissa hub as the
// sink: every event Kasmina emits must pass leyline validation (a JSONL
// backend counts an event that fails to encode as a failure), reach both
// backends, and decode back from the JSONL file to the same event.
func TestLifecycleEventsThroughNissa(t *testing.T) {
	hub := nissa.NewHub(nissa.HubOptions{})
	mem := nissa.NewMemoryBackend("mem")
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := hub.AddBackend(mem); err != nil {
		t.Fatal(err)
	}
	if err := hub.AddBackend(nissa.NewJSONLBackend(path, nissa.JSONLOptions{})); err != nil {
		t.Fatal(err)
	}

	host := kasmina.MustCNNHost(kasmina.CNNHostOptions{InChannels: 1, Blocks: 2, BaseChannels: 4})
	if err := nn.To(host, testdevice.Device(t)); err != nil {
		t.Fatal(err)
	}
	model, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c0", "r0c1"}, Sink: hub})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(model.GerminateSeed("r0c0", kasmina.GerminateOptions{Blueprint: "conv_light", BlendAlgorithmID: kasmina.BlendLinear, Tempo: 2}))
	must(model.GerminateSeed("r0c1", kasmina.GerminateOptions{Blueprint: "norm"}))
	a, _ := model.Slot("r0c0")
	b, _ := model.Slot("r0c1")
	if _, err := a.AdvanceStage(0); err != nil { // TRAINING
		t.Fatal(err)
	}
	for e := 0; e < kasmina.MinBlendingEpochs; e++ {
		a.RecordAccuracy(40 + float64(e))
	}
	a.State().Telemetry = kasmina.SeedTelemetry{HealthMeasured: true, GradientHealth: 0.9}
	if _, err := a.AdvanceStage(0); err != nil { // BLENDING
		t.Fatal(err)
	}
	model.StepEpoch()
	model.StepEpoch()
	if _, err := a.AdvanceStage(0); err != nil { // HOLDING
		t.Fatal(err)
	}
	a.State().Metrics.RecordCounterfactual(1.5)
	if res, err := a.AdvanceStage(leyline.StageFossilized); err != nil || !res.Passed {
		t.Fatalf("fossilize: %+v, %v", res, err)
	}
	if !b.Prune("test_prune", "policy") {
		t.Fatal("prune of a GERMINATED seed refused")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(hub.Flush(ctx))
	must(hub.Close(10 * time.Second))

	events := mem.Events()
	counts := map[leyline.EventType]int{}
	for _, ev := range events {
		counts[ev.Type]++
		if err := ev.Data.Validate(); err != nil {
			t.Errorf("%v event fails validation: %v", ev.Type, err)
		}
	}
	for _, want := range []leyline.EventType{
		leyline.EventSeedGerminated, leyline.EventSeedGateEvaluated, leyline.EventSeedStageChanged,
		leyline.EventSeedFossilized, leyline.EventSeedPruned,
	} {
		if counts[want] == 0 {
			t.Errorf("no %v event (counts %v)", want, counts)
		}
	}
	if counts[leyline.EventSeedGerminated] != 2 || counts[leyline.EventSeedFossilized] != 1 || counts[leyline.EventSeedPruned] != 1 {
		t.Errorf("event counts %v", counts)
	}
	health := hub.Health()
	if health.Dropped != 0 {
		t.Errorf("hub dropped %d events", health.Dropped)
	}
	for _, bs := range health.Backends {
		if bs.Dropped != 0 || bs.Failed != 0 {
			t.Errorf("backend %s dropped %d, failed %d", bs.Name, bs.Dropped, bs.Failed)
		}
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	i := 0
	for ; sc.Scan(); i++ {
		var got leyline.TelemetryEvent
		if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		want := events[i]
		if got.EventID != want.EventID || got.Type != want.Type || got.SlotID != want.SlotID || !got.Timestamp.Equal(want.Timestamp) {
			t.Errorf("row %d: decoded %v %s %s, want %v %s %s", i, got.Type, got.SlotID, got.EventID, want.Type, want.SlotID, want.EventID)
		}
		gj, _ := json.Marshal(got.Data)
		wj, _ := json.Marshal(want.Data)
		if string(gj) != string(wj) {
			t.Errorf("row %d (%v): payload %s, want %s", i, got.Type, gj, wj)
		}
	}
	if i != len(events) {
		t.Errorf("JSONL has %d rows, memory backend %d events", i, len(events))
	}
}
