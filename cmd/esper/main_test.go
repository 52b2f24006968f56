package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBenchW1WritesReport(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--workload", "w1", "--epochs", "20", "--warmup", "2", "--json", dir}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "esper captured")
	data, err := os.ReadFile(filepath.Join(dir, "W1.json"))
	require.NoError(t, err)
	var rep map[string]any
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Equal(t, "W1", rep["workload"])
	res := rep["results"].(map[string]any)
	require.Contains(t, res, "eager")
	require.Contains(t, res, "captured")
	require.Equal(t, 0.0, res["captured"].(map[string]any)["allocs_per_epoch"])
}

func TestBenchW3WritesReport(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--workload", "W3", "--requests", "8", "--concurrency", "2", "--json", dir}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "the PERF.md target of 1000 µs")
	data, err := os.ReadFile(filepath.Join(dir, "W3.json"))
	require.NoError(t, err)
	var rep map[string]any
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Equal(t, "W3", rep["workload"])
	germ := rep["results"].(map[string]any)["germinate"].(map[string]any)
	lat := germ["latency"].(map[string]any)
	require.Equal(t, 8.0, lat["n"])
	require.Greater(t, lat["p95_us"].(float64), 0.0)
	require.Equal(t, "conv_light", germ["blueprint"])
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "usage"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"bench", "--workload", "W9"}, 1, "unknown workload"},
		{[]string{"bench", "--epochs", "0"}, 1, "--epochs"},
		{[]string{"bench", "--workload", "W3", "--requests", "0"}, 1, "--requests"},
		{[]string{"bench", "--device", "tpu"}, 1, "not available"},
		{[]string{"bench", "--compare", "jax"}, 1, "unknown peer"},
		{[]string{"bench", "--bogus"}, 1, "flag provided but not defined"},
		{[]string{"train"}, 2, "not built yet"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		require.Equal(t, tc.code, code, "%v", tc.args)
		require.Contains(t, out.String()+errb.String(), tc.msg, "%v", tc.args)
	}
}
