package main

import (
	"bytes"
	"io"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// demoFlags are `make demo`'s settings, spelled out (the Makefile's
// DEMO_FLAGS relies on them being the defaults).
var demoFlags = []string{"--kernel", "1", "--base-channels", "4", "--blocks", "2", "--lr", "0.05", "--schedule", "cosine",
	"--train-size", "3000", "--epochs", "45", "--baseline"}

// TestTrainDefaultsAreTheDemo: a plain `esper train` is `make demo`: the
// impaired host that seeds grow into, compared with the host alone.
func TestTrainDefaultsAreTheDemo(t *testing.T) {
	plain, err := parseTrain(nil, io.Discard)
	require.NoError(t, err)
	demo, err := parseTrain(demoFlags, io.Discard)
	require.NoError(t, err)
	require.Equal(t, demo, plain)
}

// TestTrainDefaultsGrowASeed: with the default task, host and schedule
// (only shortened to 12 epochs) the heuristic germinates a seed, and the
// log says why its early ADVANCE is refused. (The whole default run, 45
// epochs and the baseline, takes about 8 s: its figures are in
// taskDefaults' comment.)
func TestTrainDefaultsGrowASeed(t *testing.T) {
	var out bytes.Buffer
	code := run([]string{"train", "--epochs", "12", "--baseline=false", "--run-dir", t.TempDir()}, &out, &out)
	require.Equal(t, 0, code, out.String())
	s := out.String()
	require.Contains(t, s, "GERMINATE r0c0")
	require.Contains(t, s, "→ refused: G2 failed: insufficient_epochs_in_stage")
	require.Regexp(t, regexp.MustCompile(`with seeds \(heuristic\)\s+\S+\s+\S+\s+\d+\s+1\s`), s, "one seed germinated")
}
