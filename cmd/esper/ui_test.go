package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/internal/syncbuf"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nissa"
	"github.com/esper-go/esper/nissa/dashboard"
	"github.com/esper-go/esper/simic"
)

// syncBuffer is a writer the test reads while the code under test writes.
type syncBuffer = syncbuf.Buffer

var dashboardURL = regexp.MustCompile(`dashboard at (http://\S+)`)

// waitURL waits for the command to print its dashboard's address.
func waitURL(t *testing.T, out *syncBuffer, done <-chan struct{}) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if m := dashboardURL.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case <-done:
			t.Fatalf("the command ended without serving a dashboard:\n%s", out.String())
		case <-deadline:
			t.Fatalf("no dashboard address printed:\n%s", out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// fetch GETs url and returns the body, failing on a status other than 200.
func fetch(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, b)
	return string(b)
}

// writeEvents writes an events.jsonl of n epochs into a new directory.
func writeEvents(t *testing.T, n int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "telemetry_2026-01-01_000000")
	require.NoError(t, os.Mkdir(dir, 0o755))
	var b bytes.Buffer
	for e := 1; e <= n; e++ {
		ev := leyline.NewEvent(leyline.EventEpochCompleted, &leyline.EpochCompletedPayload{InnerEpoch: e, ValAccuracy: float64(e)})
		ev.Epoch = leyline.IntPtr(e)
		row, err := json.Marshal(ev)
		require.NoError(t, err)
		b.Write(append(row, '\n'))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "events.jsonl"), b.Bytes(), 0o644))
	return dir
}

// esper ui serves the directories it is given, and stops when told.
func TestUICommandServesRunDirs(t *testing.T) {
	a, b := writeEvents(t, 3), writeEvents(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- serveUI(ctx, []string{"--addr", "127.0.0.1:0", a, b}, &out, nil) }()
	url := waitURL(t, &out, nil)
	assert.Contains(t, out.String(), a+": train, 3 events")
	var runs []dashboard.RunInfo
	require.NoError(t, json.Unmarshal([]byte(fetch(t, url+"api/runs")), &runs))
	require.Len(t, runs, 2)
	assert.Equal(t, a, runs[0].Dir)
	assert.Equal(t, b, runs[1].Dir)
	assert.Contains(t, fetch(t, url), "esper dashboard")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("esper ui did not stop")
	}
	_, err := http.Get(url)
	assert.Error(t, err, "still serving after it stopped")
}

func TestUICommandErrors(t *testing.T) {
	noEvents := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "give one or more run directories"},
		{[]string{filepath.Join(noEvents, "missing")}, "no such file"},
		{[]string{noEvents}, "holds no events.jsonl"},
		{[]string{"--addr", "nonsense", writeEvents(t, 1)}, "--addr: dashboard: address"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"ui"}, c.args...), &out, &errb)
		assert.Equal(t, 1, code, "%v", c.args)
		assert.Contains(t, errb.String(), c.want, "%v", c.args)
	}
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"ui", "-h"}, &out, &errb))
	assert.Contains(t, out.String(), "-addr")
}

// --ui with an address that cannot be used stops the run before it
// trains.
func TestTrainUIBadAddress(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"train", "--ui", "host:port", "--epochs", "1", "--run-dir", t.TempDir()}, &out, &errb)
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "--ui")
	assert.NotContains(t, out.String(), "epoch")
}

// A run with --ui trains to the end with a browser connected that never
// reads (the slow browser's drop is TestEventsSlowClientDroppedNotBlocking
// in nissa/dashboard).
func TestTrainUIWithIdleBrowser(t *testing.T) {
	var out, errOut syncBuffer
	done := make(chan struct{})
	var code int
	go func() {
		defer close(done)
		code = run([]string{"train", "--train-size", "256", "--test-size", "128", "--epochs", "4", "--batch", "64",
			"--base-channels", "2", "--baseline=false", "--run-dir", t.TempDir(), "--ui", "127.0.0.1:0"}, &out, &errOut)
	}()
	url := waitURL(t, &out, done)
	conn, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not finish")
	}
	require.Equal(t, 0, code, "%s\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "epoch   4/4")
}

// startPPOUI shows the run's rounds live and ends it on the page before
// the server goes.
func TestPPOUIWiring(t *testing.T) {
	dir := t.TempDir()
	hub := nissa.NewHub(nissa.HubOptions{})
	defer hub.Close(time.Second)
	dirb, err := nissa.NewDirBackend(dir, nissa.DirOptions{})
	require.NoError(t, err)
	require.NoError(t, hub.AddBackend(dirb))
	var out bytes.Buffer
	c := ppoConfig{ui: "127.0.0.1:0", rounds: 3, reward: "shaped"}
	stop, err := startPPOUI(c, hub, dirb, &out)
	require.NoError(t, err)
	url := dashboardURL.FindStringSubmatch(out.String())
	require.NotNil(t, url, out.String())

	resp, err := http.Get(url[1] + "api/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	simic.PPORound{Round: 1, Return: 0.5, KL: 1e-4}.Emit(hub)
	simic.PPORound{Round: 2, Return: 0.7, KL: 2e-4}.Emit(hub)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, hub.Flush(ctx))
	stop()

	var names []string
	var info dashboard.RunInfo
	rounds := 0
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		switch {
		case strings.HasPrefix(line, "event: "):
			names = append(names, strings.TrimSpace(line[len("event: "):]))
		case strings.HasPrefix(line, "data: ") && names[len(names)-1] == "run":
			require.NoError(t, json.Unmarshal([]byte(line[len("data: "):]), &info))
		case strings.HasPrefix(line, "data: ") && strings.Contains(line, "simic.ppo.round"):
			rounds++
		}
	}
	assert.Equal(t, 2, rounds)
	assert.Equal(t, "ppo", info.Kind)
	assert.Equal(t, 3, info.Total)
	assert.Equal(t, "3", info.Config["rounds"])
	require.NotEmpty(t, names)
	assert.Equal(t, []string{"end", "bye"}, names[len(names)-2:], "the run ends on the page, then the server: %v", names)

	// Without --ui: nothing.
	none, err := startPPOUI(ppoConfig{}, hub, dirb, &out)
	require.NoError(t, err)
	none()
}

// esper ppo --ui serves the dashboard during the run.
func TestPPOUISmoke(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run(tinyPPO(dir, "--rounds", "1", "--ui", "127.0.0.1:0"), &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	assert.Regexp(t, `dashboard at http://127\.0\.0\.1:\d+/`, out.String())
}
