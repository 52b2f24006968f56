package tolaria

import (
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// recorder is an EventSink that keeps every event; safe for concurrent
// use because the deadline machinery may emit from its goroutines.
type recorder struct {
	mu     sync.Mutex
	events []leyline.TelemetryEvent
}

func (r *recorder) Emit(e leyline.TelemetryEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []leyline.TelemetryEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]leyline.TelemetryEvent(nil), r.events...)
}

func (r *recorder) count(t leyline.EventType) int {
	n := 0
	for _, e := range r.all() {
		if e.Type == t {
			n++
		}
	}
	return n
}

// named returns the METRICS events whose message starts with name.
func (r *recorder) named(name string) []leyline.TelemetryEvent {
	var out []leyline.TelemetryEvent
	for _, e := range r.all() {
		if e.Type == leyline.EventMetrics && strings.HasPrefix(e.Message, name) {
			out = append(out, e)
		}
	}
	return out
}

// panicSink is an EventSink that always panics.
type panicSink struct{}

func (panicSink) Emit(leyline.TelemetryEvent) { panic("telemetry backend exploded") }

// newModel is a 2-block CNN host over 1-channel images (4 and 8
// channels) with a seed slot at every cut point, on the test device
// (testdevice.Device: the seeds germinated later follow it).
func newModel(t *testing.T, sink kasmina.EventSink) *kasmina.MorphogeneticModel {
	t.Helper()
	host, err := kasmina.NewCNNHost(kasmina.CNNHostOptions{InChannels: 1, Classes: 3, Blocks: 2, BaseChannels: 4, RNG: tensor.NewRNG(7)})
	if err != nil {
		t.Fatal(err)
	}
	if err := nn.To(host, testdevice.Device(t)); err != nil {
		t.Fatal(err)
	}
	m, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: host.TimelineOrder(), Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.SlotIDs()) < 4 {
		t.Fatalf("want at least 4 slots, got %v", m.SlotIDs())
	}
	return m
}

func slot(t *testing.T, m *kasmina.MorphogeneticModel, id string) *kasmina.Slot {
	t.Helper()
	s, err := m.Slot(id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// germinate puts a conv_light seed into slot id.
func germinate(t *testing.T, m *kasmina.MorphogeneticModel, id string) *kasmina.Slot {
	t.Helper()
	if err := m.GerminateSeed(id, kasmina.GerminateOptions{Blueprint: "conv_light"}); err != nil {
		t.Fatal(err)
	}
	return slot(t, m, id)
}

// advanceTo drives a germinated seed to stage, making each gate pass.
func advanceTo(t *testing.T, s *kasmina.Slot, stage leyline.SeedStage) {
	t.Helper()
	for s.Stage() != stage {
		st := s.State()
		switch st.Stage {
		case leyline.StageTraining:
			st.Metrics.EpochsInCurrentStage = kasmina.MinBlendingEpochs
			st.Telemetry.HealthMeasured = true
			st.Telemetry.GradientHealth = 1
			r := 1.0
			st.Metrics.SeedGradientNormRatio = &r
			st.Metrics.CurrentValAccuracy = st.Metrics.AccuracyAtStageStart + 1
		case leyline.StageBlending:
			for !st.AlphaController.AtTarget() {
				s.StepEpoch()
			}
			st.Metrics.EpochsInCurrentStage = kasmina.MinBlendingEpochs
		case leyline.StageHolding:
			c := 2.0
			st.Metrics.CounterfactualContribution = &c
		}
		res, err := s.AdvanceStage(0)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Passed {
			t.Fatalf("advance %s from %v failed: %s", s.ID(), st.Stage, res.Message)
		}
	}
}

// sameBits reports whether two state maps hold the same keys and
// bit-identical tensors, on whatever device (read back with explicit
// copies).
func sameBits(t *testing.T, want, got map[string]*tensor.Tensor) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("state has %d entries, want %d", len(got), len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Fatalf("state lacks %q", k)
		}
		if !tensor.SameShape(w.Shape(), g.Shape()) || w.DType() != g.DType() {
			t.Fatalf("%s: shape/dtype %v %v, want %v %v", k, g.Shape(), g.DType(), w.Shape(), w.DType())
		}
		x, y := testdevice.F64(t, w), testdevice.F64(t, g)
		for i := range x {
			if math.Float64bits(x[i]) != math.Float64bits(y[i]) {
				t.Fatalf("%s[%d] = %v, want %v (bitwise)", k, i, y[i], x[i])
			}
		}
	}
}

// slotWeights copies a slot's parameters and buffers by name to the
// host.
func slotWeights(t *testing.T, s *kasmina.Slot) map[string]*tensor.Tensor {
	t.Helper()
	out := map[string]*tensor.Tensor{}
	for _, p := range s.NamedParameters() {
		out[p.Name] = hostClone(t, p.Var.Value)
	}
	for _, b := range s.NamedBuffers() {
		out[b.Name] = hostClone(t, b.Tensor)
	}
	return out
}

// hostClone returns a host copy of x that x's later changes leave alone.
func hostClone(t *testing.T, x *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	if x.Device().IsCPU() {
		return x.Clone()
	}
	return testdevice.Host(t, x)
}

// fill sets every element of x to v on x's device (the backend's Fill).
func fill(x *tensor.Tensor, v float64) { kernels.For(x.Device()).Fill(x, v) }

// filledLike returns a new tensor shaped like x, on x's device, holding v.
func filledLike(x *tensor.Tensor, v float64) *tensor.Tensor {
	y, err := tensor.EmptyOn(x.Device(), x.DType(), x.Shape()...)
	if err != nil {
		panic(err)
	}
	fill(y, v)
	return y
}

// scribbleSlot overwrites a slot's tensors with v.
func scribbleSlot(s *kasmina.Slot, v float64) {
	for _, p := range s.NamedParameters() {
		fill(p.Var.Value, v)
	}
	for _, b := range s.NamedBuffers() {
		fill(b.Tensor, v)
	}
}

func metricValue(t *testing.T, ms []leyline.Metric, name string) float64 {
	t.Helper()
	for _, m := range ms {
		if m.Name == name {
			return m.Value
		}
	}
	t.Fatalf("metric %q missing from %v", name, ms)
	return 0
}
