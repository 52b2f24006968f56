package nissa

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

func TestConsoleSummaryLines(t *testing.T) {
	ts := time.Date(2025, 11, 26, 12, 4, 5, 123e6, time.UTC)
	cf := 0.25
	tests := []struct {
		name string
		ev   leyline.TelemetryEvent
		want string
	}{
		{
			name: "germinated, absent epoch, seed and env",
			ev: leyline.TelemetryEvent{Type: leyline.EventSeedGerminated, Timestamp: ts, SlotID: "r0c0",
				Data: &leyline.SeedGerminatedPayload{SlotID: "r0c0", EnvID: leyline.EnvIDUnset, BlueprintID: "conv_light", Params: 37000}},
			want: "12:04:05.123 info SEED_GERMINATED epoch=n/a seed=n/a slot=r0c0 blueprint=conv_light params=37000 env=n/a",
		},
		{
			name: "fossilized, unmeasured counterfactual",
			ev: leyline.TelemetryEvent{Type: leyline.EventSeedFossilized, Timestamp: ts, Epoch: leyline.IntPtr(7), SeedID: "s1", SlotID: "r0c1",
				Data: &leyline.SeedFossilizedPayload{SlotID: "r0c1", EnvID: 2, BlueprintID: "mlp", Improvement: 1.5, ParamsAdded: 10}},
			want: "12:04:05.123 info SEED_FOSSILIZED epoch=7 seed=s1 slot=r0c1 blueprint=mlp improvement=1.5 params_added=10 counterfactual=n/a env=2",
		},
		{
			name: "pruned, measured counterfactual, no blueprint",
			ev: leyline.TelemetryEvent{Type: leyline.EventSeedPruned, Timestamp: ts, Severity: leyline.SeverityWarning,
				Data: &leyline.SeedPrunedPayload{SlotID: "r0c1", EnvID: 0, Reason: "toxic", Counterfactual: &cf, Initiator: "policy"}},
			want: "12:04:05.123 warning SEED_PRUNED epoch=n/a seed=n/a slot=n/a reason=toxic blueprint=n/a improvement=0 counterfactual=0.25 initiator=policy env=0",
		},
		{
			name: "metrics",
			ev: leyline.TelemetryEvent{Type: leyline.EventMetrics, Timestamp: ts, Epoch: leyline.IntPtr(3),
				Data: &leyline.MetricsPayload{Source: "tolaria", Metrics: []leyline.Metric{
					{Name: "tolaria.training.latency_ms", Value: 12.5, Unit: "ms"},
					{Name: "tolaria.train.graph_enabled", Value: 1},
				}}},
			want: "12:04:05.123 info METRICS epoch=3 seed=n/a slot=n/a source=tolaria tolaria.training.latency_ms=12.5ms tolaria.train.graph_enabled=1",
		},
		{
			name: "no payload, message, no timestamp",
			ev:   leyline.TelemetryEvent{Type: leyline.EventPlateauDetected, EpisodeIdx: leyline.IntPtr(4), Message: "loss flat for 3 epochs"},
			want: "n/a info PLATEAU_DETECTED epoch=n/a seed=n/a slot=n/a episode=4 | loss flat for 3 epochs",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			c := NewConsoleBackend(&buf, ConsoleOptions{})
			require.NoError(t, c.Emit(tt.ev))
			assert.Equal(t, tt.want+"\n", buf.String())
			assert.Equal(t, tt.want, Summary(tt.ev))
		})
	}
}

func TestConsoleSeverityFilter(t *testing.T) {
	sevs := []leyline.Severity{leyline.SeverityDebug, leyline.SeverityInfo, leyline.SeverityWarning,
		leyline.SeverityError, leyline.SeverityCritical}
	tests := []struct {
		min  leyline.Severity
		want []string
	}{
		{leyline.SeverityDebug, []string{"debug", "info", "warning", "error", "critical"}},
		{leyline.SeverityInfo, []string{"info", "warning", "error", "critical"}}, // the zero value
		{leyline.SeverityWarning, []string{"warning", "error", "critical"}},
		{leyline.SeverityCritical, []string{"critical"}},
	}
	for _, tt := range tests {
		t.Run(tt.min.String(), func(t *testing.T) {
			var buf bytes.Buffer
			c := NewConsoleBackend(&buf, ConsoleOptions{MinSeverity: tt.min})
			assert.Equal(t, "console", c.Name())
			for _, s := range sevs {
				ev := msgEvent("m")
				ev.Severity = s
				require.NoError(t, c.Emit(ev))
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				got = append(got, strings.Fields(line)[1])
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestConsoleThroughHub(t *testing.T) {
	var buf syncBuffer
	h := NewHub(HubOptions{})
	require.NoError(t, h.AddBackend(NewConsoleBackend(&buf, ConsoleOptions{Name: "stderr"})))
	h.Emit(msgEvent("hello"))
	require.NoError(t, h.Close(longWait))
	assert.Contains(t, buf.String(), "PLATEAU_DETECTED")
	assert.Contains(t, buf.String(), "| hello\n")
}
