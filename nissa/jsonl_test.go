package nissa

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

// readLines returns the file's lines, failing the test if it is missing.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.NoError(t, sc.Err())
	return lines
}

func sampleEvents() []leyline.TelemetryEvent {
	g := leyline.NewEvent(leyline.EventSeedGerminated, &leyline.SeedGerminatedPayload{
		SlotID: "r0c0", EnvID: leyline.EnvIDUnset, BlueprintID: "conv_light", Params: 37000,
		BlendTempoEpochs: 5, AlphaCurve: "LINEAR",
	})
	g.SlotID = "r0c0"
	g.SeedID = "seed-1"
	g.Epoch = leyline.IntPtr(3)
	m := leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: "tolaria", Metrics: []leyline.Metric{
		{Name: "tolaria.training.latency_ms", Value: 12.5, Unit: "ms", Attributes: map[string]string{"device": "cpu"}},
		{Name: "tolaria.train.graph_enabled", Value: 1},
	}})
	m.Severity = leyline.SeverityWarning
	m.Message = "epoch metrics"
	return []leyline.TelemetryEvent{g, m}
}

func TestJSONLRowsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "events.jsonl")
	h := NewHub(HubOptions{})
	closeHub(t, h)
	j := NewJSONLBackend(path, JSONLOptions{})
	require.NoError(t, h.AddBackend(j))
	want := sampleEvents()
	for _, ev := range want {
		h.Emit(ev)
	}
	require.NoError(t, h.Flush(flushCtx(t, longWait)))
	st, _ := h.Health().Backend("jsonl")
	require.Zero(t, st.Failed, "every event must encode")

	lines := readLines(t, path)
	require.Len(t, lines, len(want))
	for i, line := range lines {
		var got leyline.TelemetryEvent
		require.NoError(t, json.Unmarshal([]byte(line), &got), "row %d: %s", i, line)
		w := want[i]
		assert.Equal(t, w.EventID, got.EventID)
		assert.Equal(t, w.Type, got.Type)
		assert.True(t, w.Timestamp.Equal(got.Timestamp), "timestamp %v != %v", got.Timestamp, w.Timestamp)
		assert.Equal(t, w.SeedID, got.SeedID)
		assert.Equal(t, w.SlotID, got.SlotID)
		assert.Equal(t, w.Epoch, got.Epoch)
		assert.Equal(t, w.EpisodeIdx, got.EpisodeIdx)
		assert.Equal(t, w.GroupID, got.GroupID)
		assert.Equal(t, w.Message, got.Message)
		assert.Equal(t, w.Severity, got.Severity)
		assert.Equal(t, w.Data, got.Data)
	}
}

func TestJSONLBuffersThenFlushesEveryN(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	j := NewJSONLBackend(path, JSONLOptions{})
	assert.Equal(t, "jsonl", j.Name())
	assert.Equal(t, path, j.Path())
	assert.Error(t, j.Emit(msgEvent("x")), "emit before start")
	require.NoError(t, j.Start())

	for range DefaultJSONLFlushEvery - 1 {
		require.NoError(t, j.Emit(msgEvent("x")))
	}
	assert.Empty(t, readLines(t, path), "nothing written before the 10th event")
	require.NoError(t, j.Emit(msgEvent("x")))
	assert.Len(t, readLines(t, path), DefaultJSONLFlushEvery)

	require.NoError(t, j.Emit(msgEvent("x")))
	require.NoError(t, j.Flush())
	assert.Len(t, readLines(t, path), DefaultJSONLFlushEvery+1)

	require.NoError(t, j.Emit(msgEvent("x")))
	require.NoError(t, j.Close())
	assert.Len(t, readLines(t, path), DefaultJSONLFlushEvery+2, "Close flushes")
	require.NoError(t, j.Close(), "second Close is a no-op")
}

func TestJSONLAppendsAndCreatesWith0644(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	for run := 1; run <= 2; run++ {
		j := NewJSONLBackend(path, JSONLOptions{Name: "file"})
		require.NoError(t, j.Start())
		require.NoError(t, j.Emit(msgEvent("x")))
		require.NoError(t, j.Close())
		assert.Len(t, readLines(t, path), run, "run %d appends", run)
	}
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Zero(t, fi.Mode().Perm()&^0o644, "mode %v has bits beyond 0644", fi.Mode().Perm())
	assert.NotZero(t, fi.Mode().Perm()&0o600, "owner can read and write")
}

func TestJSONLEncodeFailureIsADrop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	h := NewHub(HubOptions{})
	closeHub(t, h)
	require.NoError(t, h.AddBackend(NewJSONLBackend(path, JSONLOptions{})))
	bad := leyline.NewEvent(leyline.EventType(9999), nil) // no name: cannot encode
	h.Emit(bad)
	h.Emit(msgEvent("ok"))
	require.NoError(t, h.Flush(flushCtx(t, longWait)))
	st, _ := h.Health().Backend("jsonl")
	assert.EqualValues(t, 1, st.Failed)
	assert.EqualValues(t, 1, st.Processed)
	lines := readLines(t, path)
	require.Len(t, lines, 1)
	assert.True(t, strings.Contains(lines[0], "PLATEAU_DETECTED"), lines[0])
}
