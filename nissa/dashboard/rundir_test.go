package dashboard

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

// A corrupt line and a torn last line are left out with a warning each;
// every other event is read.
func TestReadRunDirCorrupt(t *testing.T) {
	_, dir := writeRunDir(t)
	path := filepath.Join(dir, "events.jsonl")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.SplitAfter(string(data), "\n")
	lines = append(lines[:1], append([]string{"{not json}\n", "\n", `{"event_type":"NO_SUCH_TYPE"}` + "\n"}, lines[1:]...)...)
	corrupt := strings.Join(lines, "") + `{"event_id":"x","event_ty`
	require.NoError(t, os.WriteFile(path, []byte(corrupt), 0o644))

	rd, err := ReadRunDir(dir)
	require.NoError(t, err)
	require.Len(t, rd.Events, 3)
	for i, ev := range rd.Events {
		assert.Equal(t, i+1, *ev.Epoch)
	}
	require.Len(t, rd.Info.Warnings, 2, "%q", rd.Info.Warnings)
	assert.Contains(t, rd.Info.Warnings[0], "torn line 7")
	assert.Contains(t, rd.Info.Warnings[1], "2 unreadable line(s)")
	assert.Contains(t, rd.Info.Warnings[1], "line 2:")
	assert.Contains(t, rd.Info.Warnings[1], "line 4:")
	assert.Contains(t, rd.Info.Warnings[1], "the 3 events that could be read")

	// The file itself may be named too.
	rd2, err := ReadRunDir(path)
	require.NoError(t, err)
	assert.Len(t, rd2.Events, 3)
	assert.Equal(t, dir, rd2.Info.Dir)
}

func TestReadRunDirErrorsAndLabels(t *testing.T) {
	empty := t.TempDir()
	_, err := ReadRunDir(empty)
	assert.ErrorContains(t, err, "holds no events.jsonl")
	_, err = ReadRunDir(filepath.Join(empty, "missing"))
	assert.Error(t, err)

	// An empty file is a warning; a config.json that does not parse too.
	require.NoError(t, os.WriteFile(filepath.Join(empty, "events.jsonl"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(empty, "config.json"), []byte("{"), 0o644))
	rd, err := ReadRunDir(empty)
	require.NoError(t, err)
	assert.Empty(t, rd.Events)
	assert.Len(t, rd.Info.Warnings, 2)
	assert.Empty(t, rd.Info.Kind)

	// The host alone, and a PPO run (METRICS from simic).
	_, dir := writeRunDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"flags": {"controller": "none", "epochs": "7"}}`), 0o644))
	rd, err = ReadRunDir(dir)
	require.NoError(t, err)
	assert.Equal(t, "2026-01-02_030405 (host alone)", rd.Info.Label)
	assert.Equal(t, 7, rd.Info.Total)

	ppo := t.TempDir()
	ev := leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: "simic", Metrics: []leyline.Metric{{Name: "simic.ppo.return_mean", Value: 1}}})
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ppo, "events.jsonl"), append(b, '\n'), 0o644))
	rd, err = ReadRunDir(ppo)
	require.NoError(t, err)
	assert.Equal(t, "ppo", rd.Info.Kind)
	assert.Empty(t, rd.Info.Warnings)
}

// The stream carries the metrics the page draws, and the event's own
// payload (shared with the other backends) is left as it was.
func TestEncodeEventCutsMetrics(t *testing.T) {
	p := &leyline.MetricsPayload{Source: "tolaria", Metrics: []leyline.Metric{
		{Name: leyline.MetricTolariaValidationAccuracy, Value: 12},
		{Name: "tolaria.graph.replays_total", Value: 100},
		{Name: "tolaria.grad_agg.seed.alpha", Value: 0.5, Attributes: map[string]string{"seed_id": "s"}},
		{Name: "tolaria.grad_agg.seed.norm", Value: 3},
	}}
	b, skip, err := encodeEvent(leyline.NewEvent(leyline.EventMetrics, p))
	require.NoError(t, err)
	require.False(t, skip)
	var ev leyline.TelemetryEvent
	require.NoError(t, json.Unmarshal(b, &ev))
	got := ev.Data.(*leyline.MetricsPayload).Metrics
	require.Len(t, got, 2)
	assert.Equal(t, leyline.MetricTolariaValidationAccuracy, got[0].Name)
	assert.Equal(t, "tolaria.grad_agg.seed.alpha", got[1].Name)
	assert.Len(t, p.Metrics, 4, "the shared payload was changed")

	// Nothing the page draws: left out.
	_, skip, err = encodeEvent(leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: "tamiyo", Metrics: []leyline.Metric{{Name: "tamiyo.gnn.x", Value: 1}}}))
	require.NoError(t, err)
	assert.True(t, skip)
	// Every other event whole; simic's metrics all kept.
	b, skip, err = encodeEvent(leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: "simic", Metrics: []leyline.Metric{{Name: "simic.ppo.entropy.op", Value: 1}}}))
	require.NoError(t, err)
	assert.False(t, skip)
	assert.Contains(t, string(b), "simic.ppo.entropy.op")
}
