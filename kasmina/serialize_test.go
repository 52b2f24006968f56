package kasmina

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// roundTrip saves s and loads it into a fresh slot with the same options.
func roundTrip(t *testing.T, s *Slot) *Slot {
	t.Helper()
	ck, err := s.SaveState()
	noErr(t, err)
	fresh, err := NewSlot(SlotOptions{ID: s.ID(), Channels: s.Channels(), Topology: s.Topology(), Device: s.Device()})
	noErr(t, err)
	noErr(t, fresh.LoadState(ck))
	return fresh
}

func TestSlotStateRoundTrip(t *testing.T) {
	s, _ := newSlot(t, SlotOptions{})
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light", BlendAlgorithmID: BlendGated, Tempo: 3, AlphaTarget: 0.7}))
	advanceTo(t, s, leyline.StageBlending)
	s.StepEpoch()
	s.RecordAccuracy(61.5)
	s.State().Metrics.RecordCounterfactual(1.25)
	got := roundTrip(t, s)

	a, b := s.State(), got.State()
	check(t, a.SeedID == b.SeedID && a.Stage == b.Stage && a.PreviousStage == b.PreviousStage && a.Alpha == b.Alpha, "state %+v vs %+v", b, a)
	check(t, *a.AlphaController == *b.AlphaController, "controller %+v vs %+v", b.AlphaController, a.AlphaController)
	check(t, reflect.DeepEqual(cloneMetrics(a.Metrics), cloneMetrics(b.Metrics)), "metrics %+v vs %+v", b.Metrics, a.Metrics)
	check(t, len(a.StageHistory) == len(b.StageHistory) && a.AlphaTarget == b.AlphaTarget && a.BlendTempoEpochs == b.BlendTempoEpochs, "history/germination fields")
	check(t, got.IsolateGradients() == s.IsolateGradients() && got.BlendAlgorithmID() == BlendGated, "slot extras")
	check(t, got.AlphaSchedule() != nil, "gate not restored")
	sa, sb := nn.StateDict(seedAndGate(s)), nn.StateDict(seedAndGate(got))
	check(t, len(sa) == len(sb) && len(sa) > 0, "weights")
	for k, v := range sa {
		check(t, bitwiseEqual(t, v, sb[k]), "weight %s differs", k)
	}
	h := input(t, 1, tensor.F32, 2, 4, 3, 3)
	o1, err := s.Forward(h, nil)
	noErr(t, err)
	o2, err := got.Forward(h, nil)
	noErr(t, err)
	check(t, bitwiseEqual(t, o1.Value, o2.Value), "restored slot computes differently")
	// The restored slot carries on.
	got.StepEpoch()
	s.StepEpoch()
	check(t, got.State().Alpha == s.State().Alpha, "ramp diverged after restore")
}

// seedAndGate wraps a slot's modules as one nn.Module for StateDict.
func seedAndGate(s *Slot) nn.Module {
	c := &nn.Sequential{}
	c.Register("seed", s.Seed())
	if s.AlphaSchedule() != nil {
		c.Register("alpha_schedule", s.AlphaSchedule())
	}
	return c
}

func TestEmptyAndPrunedSlotRoundTrip(t *testing.T) {
	s, _ := newSlot(t, SlotOptions{})
	got := roundTrip(t, s)
	check(t, got.State() == nil && got.Seed() == nil, "empty slot did not round-trip empty")

	noErr(t, s.Germinate(GerminateOptions{Blueprint: "norm"}))
	s.Prune("test", "")
	s.StepEpoch()
	got = roundTrip(t, s)
	check(t, got.Stage() == leyline.StageEmbargoed && got.Seed() == nil, "embargoed slot: %v", got.Stage())
	for i := 0; i < 6; i++ {
		got.StepEpoch()
	}
	check(t, got.State() == nil, "restored embargo did not finish")
}

func TestSlotLoadRejects(t *testing.T) {
	s, _ := newSlot(t, SlotOptions{})
	noErr(t, s.Germinate(GerminateOptions{Blueprint: "conv_light"}))
	ck, err := s.SaveState()
	noErr(t, err)
	var doc map[string]any
	noErr(t, json.Unmarshal(ck.Extra, &doc))
	mutate := func(f func(map[string]any)) []byte {
		b, _ := json.Marshal(doc)
		var d map[string]any
		_ = json.Unmarshal(b, &d)
		f(d)
		out, _ := json.Marshal(d)
		return out
	}
	target, _ := newSlot(t, SlotOptions{})
	for name, extra := range map[string][]byte{
		"no version":      mutate(func(d map[string]any) { delete(d, "schema_version") }),
		"wrong version":   mutate(func(d map[string]any) { d["schema_version"] = 99 }),
		"no isolate":      mutate(func(d map[string]any) { delete(d, "isolate_gradients") }),
		"no blend id":     mutate(func(d map[string]any) { delete(d, "blend_algorithm_id") }),
		"no state":        mutate(func(d map[string]any) { delete(d, "state") }),
		"other slot":      mutate(func(d map[string]any) { d["slot_id"] = "r0c1" }),
		"state version":   mutate(func(d map[string]any) { delete(d["state"].(map[string]any), "schema_version") }),
		"metrics version": mutate(func(d map[string]any) { d["state"].(map[string]any)["metrics"].(map[string]any)["schema_version"] = 0 }),
		"no steepness": mutate(func(d map[string]any) {
			delete(d["state"].(map[string]any)["alpha_controller"].(map[string]any), "alpha_steepness")
		}),
		"reserved stage":    mutate(func(d map[string]any) { d["state"].(map[string]any)["stage"] = "SHADOWING" }),
		"unknown blueprint": mutate(func(d map[string]any) { d["state"].(map[string]any)["blueprint_id"] = "nope" }),
	} {
		err := target.LoadState(SlotCheckpoint{Extra: extra, Weights: ck.Weights})
		check(t, err != nil, "%s: accepted", name)
		check(t, target.State() == nil, "%s: failed load changed the slot", name)
		if strings.Contains(name, "version") {
			check(t, errors.Is(err, ErrSchema), "%s: %v does not wrap ErrSchema", name, err)
		}
	}
	// Weights must match the rebuilt modules exactly.
	bad := map[string]*tensor.Tensor{}
	for k, v := range ck.Weights {
		bad[k] = v
	}
	bad["seed.extra"] = tensor.Zeros(tensor.F32, 1)
	check(t, target.LoadState(SlotCheckpoint{Extra: ck.Extra, Weights: bad}) != nil, "unexpected weight accepted")
	delete(bad, "seed.extra")
	for k := range bad {
		delete(bad, k)
		break
	}
	check(t, target.LoadState(SlotCheckpoint{Extra: ck.Extra, Weights: bad}) != nil, "missing weight accepted")
	check(t, target.State() == nil, "failed load changed the slot")
}

func TestSeedStateJSONRoundTrip(t *testing.T) {
	st := NewSeedState("s", "conv_light", "r0c0")
	noErr(t, st.Transition(leyline.StageGerminated))
	st.Metrics.RecordAccuracy(12)
	st.Telemetry.PrevGradientHealth = fptr(0.5)
	b, err := json.Marshal(st)
	noErr(t, err)
	var got SeedState
	noErr(t, json.Unmarshal(b, &got))
	check(t, got.Stage == st.Stage && got.Metrics.EpochsTotal == 1 && *got.Telemetry.PrevGradientHealth == 0.5 && *got.AlphaController == *st.AlphaController, "round trip %+v", got)
	check(t, got.Metrics.SeedGradientNormRatio == nil && got.Metrics.CounterfactualContribution == nil, "unmeasured became measured")
	check(t, strings.Contains(string(b), `"stage":"GERMINATED"`), "stage encoded by name: %s", b)

	mb, err := json.Marshal(st.Metrics)
	noErr(t, err)
	var m SeedMetrics
	noErr(t, json.Unmarshal(mb, &m))
	wantErr(t, json.Unmarshal([]byte(`{"epochs_total": 3}`), &m), ErrSchema)
	wantErr(t, json.Unmarshal([]byte(`{"schema_version": 2}`), &m), ErrSchema)
	wantErr(t, json.Unmarshal([]byte(`{"seed_id":"x"}`), &got), ErrSchema)
}

func TestModelSaveLoadSlots(t *testing.T) {
	m := newModel(t, 1, "r0c0", "r0c1")
	noErr(t, m.GerminateSeed("r0c1", GerminateOptions{Blueprint: "conv_light"}))
	s, _ := m.Slot("r0c1")
	advanceTo(t, s, leyline.StageTraining)
	cks, err := m.SaveSlots()
	noErr(t, err)
	hostSD := nn.StateDict(m.Host())

	m2 := newModel(t, 99, "r0c0", "r0c1")
	noErr(t, nn.LoadStateDict(m2.Host(), hostSD, true))
	noErr(t, m2.LoadSlots(cks))
	x := input(t, 1, tensor.F32, 2, 1, 8, 8)
	m.SetTraining(false)
	m2.SetTraining(false)
	check(t, bitwiseEqual(t, m.Forward(x).Value, m2.Forward(x).Value), "restored model computes differently")
	s2, _ := m2.Slot("r0c1")
	check(t, s2.Stage() == leyline.StageTraining && s2.IsolateGradients(), "restored stage")
	delete(cks, "r0c0")
	check(t, m2.LoadSlots(cks) != nil, "missing slot checkpoint accepted")
}
