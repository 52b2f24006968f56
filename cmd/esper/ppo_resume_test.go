package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/simic"
)

// stopAfterRound is the ppo command's stdout; it cancels the run's
// context once round n's progress line has been written, so the run
// ends after that round's checkpoint, as kill -9 right after it would
// leave it.
type stopAfterRound struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	line   string
	cancel context.CancelFunc
}

func (s *stopAfterRound) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.buf.Write(p)
	if s.line != "" && strings.Contains(s.buf.String(), s.line) {
		s.cancel()
	}
	return n, err
}

// runPPOFunc runs the ppo command's function on args (tinyPPO's, without
// the command name), stopping after round stop when stop > 0. Every call
// builds its run from the flags and the checkpoint on disk alone, as a
// new process would.
func runPPOFunc(t *testing.T, args []string, stop int) (string, error) {
	t.Helper()
	var errb bytes.Buffer
	c, err := parsePPO(args[1:], &errb)
	require.NoError(t, err, errb.String())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &stopAfterRound{cancel: cancel}
	if stop > 0 {
		w.line = fmt.Sprintf("round %3d/%d", stop, c.rounds)
	}
	err = runPPO(ctx, c, w)
	return w.buf.String(), err
}

// TestPPOResumeIsBitwise: a 4-round run stopped after round 1 or round
// 2 and resumed from its checkpoint writes a policy byte-identical to
// the uninterrupted run's, and its rounds report the same returns.
func TestPPOResumeIsBitwise(t *testing.T) {
	dir := t.TempDir()
	flags := []string{"--rounds", "4", "--seed", "9"}
	want := filepath.Join(dir, "uninterrupted.safetensors")
	full, err := runPPOFunc(t, tinyPPO(dir, append(flags, "--out", want)...), 0)
	require.NoError(t, err, full)
	wantBytes, err := os.ReadFile(want)
	require.NoError(t, err)
	returns := roundReturns(full)
	require.Len(t, returns, 4, full)

	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprintf("killed after round %d", k), func(t *testing.T) {
			ck := filepath.Join(dir, fmt.Sprintf("ck%d", k))
			got := filepath.Join(dir, fmt.Sprintf("resumed%d.safetensors", k))
			args := tinyPPO(dir, append(flags, "--checkpoint", ck, "--checkpoint-every", "1", "--out", got)...)
			out, err := runPPOFunc(t, args, k)
			require.ErrorIs(t, err, context.Canceled, out)
			require.NoFileExists(t, got, "the stopped run must not reach its end")
			out2, err := runPPOFunc(t, append(args, "--resume"), 0)
			require.NoError(t, err, out2)
			require.Contains(t, out2, fmt.Sprintf("after round %d", k))
			gotBytes, err := os.ReadFile(got)
			require.NoError(t, err)
			require.Equal(t, returns, append(roundReturns(out)[:k], roundReturns(out2)...), "per-round returns\n%s\n%s", out, out2)
			require.True(t, bytes.Equal(wantBytes, gotBytes), "the resumed run's policy differs from the uninterrupted run's")
		})
	}
}

// roundReturns are the "return" figures of the progress lines in out.
func roundReturns(out string) []string {
	var r []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == "round" && f[2] == "return" {
			r = append(r, f[3])
		}
	}
	return r
}

// TestPPOResumeRefusesOldCheckpoint: a state file without the
// environments' and the sampler's state (written before version 2) is
// refused with the reason, not continued inexactly; so is a checkpoint of
// another number of environments.
func TestPPOResumeRefusesOldCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(tinyPPO(dir, "--rounds", "1", "--checkpoint", ck), &out, &errb), "%s\n%s", out.String(), errb.String())
	errb.Reset()
	require.Equal(t, 1, run(append(tinyPPO(dir, "--rounds", "2", "--checkpoint", ck, "--resume"), "--envs", "3"), &out, &errb))
	require.Contains(t, errb.String(), "has 2 environments, the run 3")

	path := filepath.Join(ck, simic.PPOStateFile)
	js, err := os.ReadFile(path)
	require.NoError(t, err)
	var st map[string]any
	require.NoError(t, json.Unmarshal(js, &st))
	delete(st, "version")
	js, err = json.Marshal(st)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, js, 0o644))
	errb.Reset()
	require.Equal(t, 1, run(tinyPPO(dir, "--rounds", "2", "--checkpoint", ck, "--resume"), &out, &errb))
	require.Contains(t, errb.String(), "cannot be continued exactly")
}

// TestPPOResumeRefusesForgedState: a state.json out of range (round
// -1000000, which printed "after round -1000000" and ran a million rounds)
// is refused before any work in one line naming the field; the library's
// test (simic) goes through every field.
func TestPPOResumeRefusesForgedState(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(tinyPPO(dir, "--rounds", "1", "--checkpoint", ck), &out, &errb), "%s\n%s", out.String(), errb.String())
	path := filepath.Join(ck, simic.PPOStateFile)
	js, err := os.ReadFile(path)
	require.NoError(t, err)
	var st map[string]any
	require.NoError(t, json.Unmarshal(js, &st))
	st["round"] = -1000000
	js, err = json.Marshal(st)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, js, 0o644))
	out.Reset()
	errb.Reset()
	require.Equal(t, 1, run(tinyPPO(dir, "--rounds", "2", "--checkpoint", ck, "--resume"), &out, &errb))
	require.Contains(t, errb.String(), "round -1000000")
	require.Equal(t, 1, strings.Count(errb.String(), "\n"), errb.String())
	require.NotContains(t, out.String(), "round ", "no round ran")
}

// TestPPOResumeContinuesTheRunDirectory: a resumed esper ppo writes into
// the run directory it started (it wrote a new one on every resume), its
// events.jsonl cut back to the checkpoint (a torn or later line goes) and
// marked with the resume, one round event per round.
func TestPPOResumeContinuesTheRunDirectory(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(tinyPPO(dir, "--rounds", "1", "--checkpoint", ck), &out, &errb), "%s\n%s", out.String(), errb.String())
	runs, err := filepath.Glob(filepath.Join(dir, "telemetry_*"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	log := filepath.Join(runs[0], "events.jsonl")
	f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"event_type":"METRICS","torn`)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	out.Reset()
	require.Equal(t, 0, run(tinyPPO(dir, "--rounds", "2", "--checkpoint", ck, "--resume"), &out, &errb), "%s\n%s", out.String(), errb.String())
	again, err := filepath.Glob(filepath.Join(dir, "telemetry_*"))
	require.NoError(t, err)
	require.Equal(t, runs, again, "the resume continues the run's directory")
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	require.NotContains(t, string(data), "torn")
	require.Equal(t, 2, strings.Count(string(data), "simic.ppo.round "), "one round event per round")
	require.Contains(t, string(data), "resumed after round 1")
	require.Contains(t, out.String(), "--epochs 3 --blocks 3 --base-channels 2 --kernel 1 --lr 0.05 --schedule cosine", "the load hint gives the host PPO trained")
}
