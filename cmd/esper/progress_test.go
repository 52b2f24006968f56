package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFormatETA(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                    "0s",
		1400 * time.Millisecond:              "1s",
		59 * time.Second:                     "59s",
		65 * time.Second:                     "1m05s",
		59*time.Minute + 59*time.Second:      "59m59s",
		time.Hour + 2*time.Minute + 29e9:     "1h02m",
		27*time.Hour + 59*time.Minute + 31e9: "28h00m",
	} {
		require.Equal(t, want, formatETA(d), "%v", d)
	}
}

func TestETAFromMeanIteration(t *testing.T) {
	e := &eta{start: time.Now().Add(-10 * time.Second)}
	require.Equal(t, "ETA 50s", e.step(5)) // 10 s for one, five left
	e.start = e.start.Add(-10 * time.Second)
	require.Equal(t, "ETA 10s", e.step(1)) // 20 s for two, one left
	require.Equal(t, "ETA 0s", e.step(0))
}

func TestIsTerminal(t *testing.T) {
	require.False(t, isTerminal(&bytes.Buffer{}))
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f), "a log file")
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	require.False(t, isTerminal(w), "a pipe")
}

// smallTrain are the flags of a sub-second esper train run.
func smallTrain(dir string, extra ...string) []string {
	return append([]string{"train", "--train-size", "256", "--test-size", "128", "--epochs", "3", "--batch", "64",
		"--base-channels", "2", "--run-dir", dir}, extra...)
}

// TestTrainProgressLines: written to something that is not a terminal
// (a log file, a pipe, here a buffer), esper train prints whole epoch
// lines with an ETA and no \r progress bar.
func TestTrainProgressLines(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(smallTrain(t.TempDir(), "--baseline=false"), &out, &errb), "%s\n%s", out.String(), errb.String())
	s := out.String()
	require.NotContains(t, s, "\r")
	for e := 1; e <= 3; e++ {
		require.Regexp(t, regexp.MustCompile(`(?m)^  epoch   `+string(rune('0'+e))+`/3  .*s  ETA \d+s  `), s)
	}
	require.Regexp(t, `(?m)^  epoch   3/3  .*  ETA 0s  `, s)
}

// TestTrainQuiet: --quiet prints the final result only: no header, no
// epoch lines, no baseline announcement.
func TestTrainQuiet(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(smallTrain(t.TempDir(), "--quiet"), &out, &errb), "%s\n%s", out.String(), errb.String())
	s := out.String()
	require.True(t, strings.HasPrefix(s, "run "), "the summary table first:\n%s", s)
	require.NotRegexp(t, `(?m)^ *epoch `, s)
	require.NotContains(t, s, "esper train:")
	require.NotContains(t, s, "baseline:")
	require.Contains(t, s, "host alone")
	require.Contains(t, s, "run directory: ")
	require.Empty(t, errb.String())
}

// TestPPOProgress: each round line ends with an ETA; --quiet leaves the
// final result only.
func TestPPOProgress(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(tinyPPO(t.TempDir(), "--rounds", "2"), &out, &errb), "%s\n%s", out.String(), errb.String())
	require.Regexp(t, `(?m)^round   1/2  .*  ETA \d+s$`, out.String())
	require.Regexp(t, `(?m)^round   2/2  .*  ETA 0s$`, out.String())

	out.Reset()
	require.Equal(t, 0, run(tinyPPO(t.TempDir(), "--rounds", "1", "--quiet"), &out, &errb), "%s\n%s", out.String(), errb.String())
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 2, out.String())
	require.True(t, strings.HasPrefix(lines[0], "policy: "), lines[0])
	require.True(t, strings.HasPrefix(lines[1], "run directory: "), lines[1])
}
