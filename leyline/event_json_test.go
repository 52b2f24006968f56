package leyline

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fillValue sets every field of the struct v points to a distinct non-zero
// value; fixPayload then repairs fields with validated vocabularies.
func fillValue(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		nv := reflect.New(v.Type().Elem())
		fillValue(nv.Elem(), n)
		v.Set(nv)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n)*1.37 + 1e-9)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Type() == reflect.TypeFor[SeedStage]() {
			v.SetInt(int64(StageHolding))
			return
		}
		v.SetInt(int64(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.String:
		v.SetString("s" + strings.Repeat("x", *n%5))
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fillValue(s.Index(0), n)
		fillValue(s.Index(1), n)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for _, k := range []string{"a", "b"} {
			e := reflect.New(v.Type().Elem()).Elem()
			fillValue(e, n)
			m.SetMapIndex(reflect.ValueOf(k), e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillValue(v.Field(i), n)
			}
		}
	}
}

func fixPayload(p Payload) {
	switch x := p.(type) {
	case *RewardHackingSuspectedPayload:
		x.Pattern = RewardHackingRansomware
	case *GovernorRollbackPayload:
		x.PanicReason = PanicReasonDivergence
	case *MorphologyCausalLogPayload:
		x.Op = "FOSSILIZE"
	case *SeedStageChangedPayload:
		x.From, x.To = StageBlending, StageHolding
	}
}

func fullPayload(t testing.TB, et EventType) Payload {
	p, err := NewPayload(et)
	require.NoError(t, err)
	n := int(et) * 10
	fillValue(reflect.ValueOf(p).Elem(), &n)
	fixPayload(p)
	require.NoError(t, p.Validate(), "%v", et)
	return p
}

func fullEvent(t testing.TB, et EventType) TelemetryEvent {
	e := NewEvent(et, fullPayload(t, et))
	e.Timestamp = time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)
	e.SeedID, e.SlotID = "env1_seed_2", "r0c1"
	e.Epoch, e.EpisodeIdx = IntPtr(0), IntPtr(42)
	e.Message, e.Severity, e.GroupID = "hello", SeverityWarning, "B"
	return e
}

func roundTrip(t *testing.T, e TelemetryEvent) TelemetryEvent {
	b, err := json.Marshal(e)
	require.NoError(t, err)
	var back TelemetryEvent
	require.NoError(t, json.Unmarshal(b, &back), "%s", b)
	return back
}

func TestEveryEventTypeHasPayload(t *testing.T) {
	for _, et := range EventTypes() {
		p, err := NewPayload(et)
		require.NoError(t, err, "%v", et)
		assert.True(t, PayloadMatches(et, p))
		assert.Contains(t, EventTypesFor(p), et)
	}
	_, err := NewPayload(EventUnknown)
	assert.Error(t, err)
	assert.Equal(t, []EventType{EventGradientAnomaly, EventRatioExplosionDetected, EventRatioCollapseDetected,
		EventValueCollapseDetected, EventGradientPathologyDetected, EventNumericalInstabilityDetected},
		EventTypesFor(&AnomalyDetectedPayload{}))
}

func TestEveryPayloadRoundTripsLosslessly(t *testing.T) {
	for _, et := range EventTypes() {
		t.Run(et.String(), func(t *testing.T) {
			e := fullEvent(t, et)
			back := roundTrip(t, e)
			assert.True(t, reflect.DeepEqual(e, back), "want %#v\ngot  %#v", e.Data, back.Data)
			assert.Equal(t, 42, *back.EpisodeIdx)
			assert.Equal(t, 0, *back.Epoch)
		})
	}
}

func TestFloatsRoundTripExactly(t *testing.T) {
	vals := []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0.1, 1e-310,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 1.0 / 3, -123456789.123456789}
	for _, v := range vals {
		p := &EpochCompletedPayload{EnvID: 1, ValAccuracy: v, ValLoss: 2, InnerEpoch: 3, HostGradNorm: Float64Ptr(v),
			Seeds: map[string]map[string]float64{"r0c0": {"x": v}}}
		back := roundTrip(t, NewEvent(EventEpochCompleted, p)).Data.(*EpochCompletedPayload)
		for _, got := range []float64{back.ValAccuracy, *back.HostGradNorm, back.Seeds["r0c0"]["x"]} {
			assert.Equal(t, math.Float64bits(v), math.Float64bits(got), "%v", v)
		}
	}
	b, err := MarshalPayload(&MemoryWarningPayload{GPUUtilization: math.NaN(), GPUAllocatedGB: math.Inf(1), GPUTotalGB: math.Inf(-1)})
	require.NoError(t, err)
	assert.JSONEq(t, `{"gpu_utilization":"NaN","gpu_allocated_gb":"Infinity","gpu_total_gb":"-Infinity","threshold":0}`, string(b))
}

func TestEventEnvelopeJSON(t *testing.T) {
	e := NewEvent(EventSeedPruned, &SeedPrunedPayload{SlotID: "r0c0", EnvID: EnvIDUnset, Reason: "governor"})
	e.Timestamp = time.Date(2026, 1, 1, 0, 0, 0, 5, time.FixedZone("X", 3600))
	b, err := json.Marshal(e)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Nil(t, m["seed_id"])
	assert.Nil(t, m["slot_id"])
	assert.Nil(t, m["epoch"])
	assert.Nil(t, m["episode_idx"])
	assert.Contains(t, m, "seed_id")
	assert.Equal(t, "SEED_PRUNED", m["event_type"])
	assert.Equal(t, "2025-12-31T23:00:00.000000005Z", m["timestamp"])
	assert.Equal(t, "info", m["severity"])
	assert.Equal(t, "default", m["group_id"])
	data := m["data"].(map[string]any)
	assert.Equal(t, "r0c0", data["slot_id"])
	assert.Equal(t, -1.0, data["env_id"])
	assert.Nil(t, data["counterfactual"], "absent measurement stays null")
	assert.Contains(t, data, "counterfactual")

	back := roundTrip(t, e)
	assert.True(t, e.Timestamp.Equal(back.Timestamp))
	assert.Equal(t, time.UTC, back.Timestamp.Location())
	assert.Nil(t, back.Epoch)
	assert.Nil(t, back.EpisodeIdx)
	assert.Equal(t, "", back.SeedID)
	assert.Nil(t, back.Data.(*SeedPrunedPayload).Counterfactual)
}

// mutateData marshals e, applies f to its data object and returns the
// resulting JSON.
func mutateData(t *testing.T, e TelemetryEvent, f func(data map[string]any)) []byte {
	b, err := json.Marshal(e)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	f(m["data"].(map[string]any))
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

func TestMissingRequiredFieldFailsLoudly(t *testing.T) {
	for _, et := range EventTypes() {
		e := fullEvent(t, et)
		typ := reflect.TypeOf(e.Data).Elem()
		name := payloadName(typ)
		nreq := 0
		for i := range typ.NumField() {
			key, required, ok := fieldKey(typ.Field(i))
			if !ok || !required {
				continue
			}
			nreq++
			for _, mode := range []string{"absent", "null"} {
				b := mutateData(t, e, func(d map[string]any) {
					if mode == "absent" {
						delete(d, key)
					} else {
						d[key] = nil
					}
				})
				var back TelemetryEvent
				err := json.Unmarshal(b, &back)
				require.Error(t, err, "%v %s %s", et, key, mode)
				assert.True(t, errors.Is(err, ErrMissingField), "%v %s: %v", et, key, err)
				assert.Contains(t, err.Error(), name)
				assert.Contains(t, err.Error(), `"`+key+`"`)
			}
		}
		assert.Positive(t, nreq, "%v has no required field", et)
	}
}

func TestRequiredZeroIsPresent(t *testing.T) {
	p := &EpochCompletedPayload{EnvID: 0, ValAccuracy: 0, ValLoss: 0, InnerEpoch: 0}
	back := roundTrip(t, NewEvent(EventEpochCompleted, p))
	assert.Equal(t, p, back.Data)
	g := &SeedGateEvaluatedPayload{SlotID: "r0c0", Gate: "G2", Passed: false, TargetStage: StageBlending,
		ChecksPassed: []string{}, ChecksFailed: []string{"gradient_ratio"}}
	back = roundTrip(t, NewEvent(EventSeedGateEvaluated, g))
	assert.Equal(t, g, back.Data)
}

func TestAbsentOptionalStaysNil(t *testing.T) {
	for _, et := range EventTypes() {
		e := fullEvent(t, et)
		typ := reflect.TypeOf(e.Data).Elem()
		for i := range typ.NumField() {
			f := typ.Field(i)
			key, required, ok := fieldKey(f)
			if !ok || required || f.Type.Kind() != reflect.Pointer {
				continue
			}
			for _, mode := range []string{"absent", "null"} {
				b := mutateData(t, e, func(d map[string]any) {
					if mode == "absent" {
						delete(d, key)
					} else {
						d[key] = nil
					}
				})
				var back TelemetryEvent
				require.NoError(t, json.Unmarshal(b, &back), "%v %s", et, key)
				assert.True(t, reflect.ValueOf(back.Data).Elem().Field(i).IsNil(), "%v %s %s", et, key, mode)
			}
		}
	}
}

func TestAbsentOptionalDefaults(t *testing.T) {
	b := []byte(`{"event_id":"x","event_type":"SEED_GERMINATED","timestamp":"2026-01-01T00:00:00Z","severity":"info",
		"data":{"slot_id":"r0c0","env_id":-1,"blueprint_id":"norm","params":0}}`)
	var e TelemetryEvent
	require.NoError(t, json.Unmarshal(b, &e))
	p := e.Data.(*SeedGerminatedPayload)
	assert.Equal(t, 5, p.BlendTempoEpochs)
	assert.Equal(t, "LINEAR", p.AlphaCurve)
	assert.Equal(t, "default", e.GroupID)
	assert.Nil(t, e.EpisodeIdx)
}

func TestEventDecodeErrors(t *testing.T) {
	base := `"event_id":"x","timestamp":"2026-01-01T00:00:00Z","severity":"info"`
	cases := []struct{ name, json, contains string }{
		{"unknown event type", `{` + base + `,"event_type":"SEED_EXPLODED","data":null}`, "unknown event type"},
		{"unknown type UNKNOWN", `{` + base + `,"event_type":"UNKNOWN","data":null}`, "UNKNOWN"},
		{"missing event_type", `{` + base + `,"data":null}`, "event_type"},
		{"missing timestamp", `{"event_id":"x","event_type":"METRICS","severity":"info"}`, "timestamp"},
		{"bad severity", `{"event_id":"x","event_type":"METRICS","timestamp":"2026-01-01T00:00:00Z","severity":"loud"}`, "severity"},
		{"unknown envelope key", `{` + base + `,"event_type":"METRICS","colour":1}`, "colour"},
		{"unknown payload key", `{` + base + `,"event_type":"METRICS","data":{"source":"x","metrics":[],"sorce":1}}`, "sorce"},
		{"int as float", `{` + base + `,"event_type":"TAMIYO_INITIATED","data":{"env_id":1.5,"epoch":1,"stable_count":3,"stabilization_epochs":3,"val_loss":1}}`, "env_id"},
		{"bool as int", `{` + base + `,"event_type":"TAMIYO_INITIATED","data":{"env_id":true,"epoch":1,"stable_count":3,"stabilization_epochs":3,"val_loss":1}}`, "env_id"},
		{"bad float string", `{` + base + `,"event_type":"TAMIYO_INITIATED","data":{"env_id":1,"epoch":1,"stable_count":3,"stabilization_epochs":3,"val_loss":"nan"}}`, "val_loss"},
		{"reserved stage name", `{` + base + `,"event_type":"SEED_STAGE_CHANGED","data":{"slot_id":"r0c0","env_id":1,"from_stage":"BLENDING","to_stage":"SHADOWING"}}`, "SHADOWING"},
		{"nested required", `{` + base + `,"event_type":"COUNTERFACTUAL_MATRIX_COMPUTED","data":{"env_id":1,"slot_ids":["r0c0"],"configs":[{"val_accuracy":1}]}}`, "configs[0].enabled"},
		{"duplicate envelope key", `{` + base + `,"event_type":"METRICS","event_type":"METRICS","data":null}`, `duplicate JSON key "event_type"`},
		{"duplicate payload key", `{` + base + `,"event_type":"METRICS","data":{"source":"x","source":"y","metrics":[]}}`, `duplicate JSON key "source"`},
		{"invalid payload", `{` + base + `,"event_type":"REWARD_HACKING_SUSPECTED","data":{"pattern":"greed","slot_id":"r0c0","seed_id":"s","seed_contribution":1,"total_improvement":1}}`, "pattern"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e TelemetryEvent
			err := json.Unmarshal([]byte(c.json), &e)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.contains)
		})
	}
}

func TestEventEncodeErrors(t *testing.T) {
	_, err := json.Marshal(NewEvent(EventSeedPruned, &MetricsPayload{Source: "x"}))
	assert.ErrorContains(t, err, "MetricsPayload")
	_, err = json.Marshal(NewEvent(EventSeedPruned, &SeedPrunedPayload{SlotID: "r0c0"}))
	assert.ErrorIs(t, err, ErrMissingField)
	_, err = json.Marshal(NewEvent(EventUnknown, nil))
	assert.Error(t, err)
	// No data is allowed and stays nil.
	back := roundTrip(t, NewEvent(EventTrainingStarted, nil))
	assert.Nil(t, back.Data)
}

func TestUnmarshalPayload(t *testing.T) {
	p, err := UnmarshalPayload(EventCheckpointLoaded, []byte(`{"path":"/x","start_episode":0}`))
	require.NoError(t, err)
	assert.Equal(t, &CheckpointLoadedPayload{Path: "/x"}, p)
	_, err = UnmarshalPayload(EventCheckpointLoaded, []byte(`{"path":"/x"}`))
	assert.ErrorContains(t, err, `CheckpointLoaded payload: required field missing: "start_episode"`)
	_, err = UnmarshalPayload(EventCheckpointLoaded, []byte(`{"path":"/x","start_episode":0,"path":"/y"}`))
	assert.ErrorContains(t, err, `duplicate JSON key "path"`)
}
