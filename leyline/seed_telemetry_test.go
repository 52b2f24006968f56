package leyline

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleTelemetry() SeedTelemetry {
	return SeedTelemetry{
		SeedID: "env0_seed_1", BlueprintID: "norm", LayerID: "r0c1",
		GradientNorm: Float64Ptr(25), GradientHealth: Float64Ptr(0.9), HasExploding: true,
		Accuracy: 72, AccuracyDelta: -30, EpochsInStage: 80,
		Stage: StageHolding, Alpha: 0.7, AlphaTarget: 1, AlphaMode: AlphaDown,
		AlphaStepsTotal: 10, AlphaStepsDone: 99, TimeToTarget: 2, AlphaVelocity: -0.25,
		AlphaAlgorithm: BlendMultiply, Epoch: 5, MaxEpochs: 20,
		CapturedAt:       time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		BlendTempoEpochs: 5, BlendingVelocity: 0.1, AlphaCurve: "SIGMOID_SHARP",
	}
}

func TestSeedTelemetryToFeatures(t *testing.T) {
	f, err := sampleTelemetry().ToFeatures()
	require.NoError(t, err)
	assert.Len(t, f, 26)
	oh, _ := StageOneHot(StageHolding)
	assert.Equal(t, oh[:], f[:10])
	want := []float64{1, 0.9, 0, 1, 1, 0.72, -1, 0.7, 0.25, 1, 1, 0.5, 1, 0.1, -0.25, 0.5}
	for i, w := range want {
		assert.InDelta(t, w, f[10+i], 1e-6, "feature %d", 10+i)
	}
	for _, v := range f {
		assert.GreaterOrEqual(t, v, float32(-1))
		assert.LessOrEqual(t, v, float32(1))
	}
	g, _ := sampleTelemetry().ToFeatures()
	assert.Equal(t, f, g, "deterministic")

	u := sampleTelemetry()
	u.GradientNorm, u.GradientHealth = nil, nil
	f, err = u.ToFeatures()
	require.NoError(t, err)
	assert.Equal(t, float32(0), f[10])
	assert.Equal(t, float32(0), f[11], "unmeasured health is not healthy")

	u.GradientHealth = Float64Ptr(math.NaN())
	_, err = u.ToFeatures()
	assert.Error(t, err)
	u = sampleTelemetry()
	u.Stage = 5
	_, err = u.ToFeatures()
	assert.ErrorContains(t, err, "reserved")
}

func TestSeedTelemetryMapRoundTrip(t *testing.T) {
	s := sampleTelemetry()
	back, err := SeedTelemetryFromMap(s.ToMap())
	require.NoError(t, err)
	assert.Equal(t, s, back)

	// Through JSON with UseNumber, as a checkpoint would be read.
	b, err := json.Marshal(s.ToMap())
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var m map[string]any
	require.NoError(t, dec.Decode(&m))
	back, err = SeedTelemetryFromMap(m)
	require.NoError(t, err)
	assert.Equal(t, s, back)
}

func TestSeedTelemetryFromMapRejects(t *testing.T) {
	cases := []struct {
		name, contains string
		edit           func(map[string]any)
	}{
		{"stage 5", "SeedTelemetry.stage", func(m map[string]any) { m["stage"] = 5 }},
		{"stage 11", "SeedTelemetry.stage", func(m map[string]any) { m["stage"] = 11 }},
		{"stage bool", "stage", func(m map[string]any) { m["stage"] = true }},
		{"stage float", "stage", func(m map[string]any) { m["stage"] = 3.0 }},
		{"stage string", "stage", func(m map[string]any) { m["stage"] = "3" }},
		{"stage json float", "stage", func(m map[string]any) { m["stage"] = json.Number("3.5") }},
		{"alpha_mode bool", "alpha_mode", func(m map[string]any) { m["alpha_mode"] = false }},
		{"alpha_mode invalid", "alpha_mode", func(m map[string]any) { m["alpha_mode"] = 3 }},
		{"alpha_mode float", "alpha_mode", func(m map[string]any) { m["alpha_mode"] = 1.0 }},
		{"alpha_algorithm invalid", "alpha_algorithm", func(m map[string]any) { m["alpha_algorithm"] = 0 }},
		{"alpha_algorithm bool", "alpha_algorithm", func(m map[string]any) { m["alpha_algorithm"] = true }},
		{"missing alpha_curve", "alpha_curve", func(m map[string]any) { delete(m, "alpha_curve") }},
		{"unknown alpha_curve", "alpha_curve", func(m map[string]any) { m["alpha_curve"] = "WOBBLY" }},
		{"missing stage", "stage", func(m map[string]any) { delete(m, "stage") }},
		{"schema version", "schema_version", func(m map[string]any) { m["schema_version"] = 2 }},
		{"unknown key", "unknown keys", func(m map[string]any) { m["stagee"] = 1 }},
		{"accuracy bool", "accuracy", func(m map[string]any) { m["accuracy"] = true }},
		{"captured_at", "captured_at", func(m map[string]any) { m["captured_at"] = "yesterday" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := sampleTelemetry().ToMap()
			c.edit(m)
			_, err := SeedTelemetryFromMap(m)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.contains)
		})
	}
}
