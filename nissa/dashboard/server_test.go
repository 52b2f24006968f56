package dashboard

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// get fetches path from the test server and returns the status and body.
func get(t *testing.T, ts *httptest.Server, method, path string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// rawGet sends a request line as written (no client-side cleaning of
// the path) and returns the status code and the body.
func rawGet(t *testing.T, addr, target string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(longWait)))
	_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, addr)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// writeRunDir makes a finished run directory with a training.png, beside
// a secret file that must never be served.
func writeRunDir(t *testing.T) (root, dir string) {
	t.Helper()
	root = t.TempDir()
	dir = filepath.Join(root, "telemetry_2026-01-02_030405")
	require.NoError(t, os.Mkdir(dir, 0o755))
	var lines []string
	for e := 1; e <= 3; e++ {
		b, err := json.Marshal(epochEvent(e, ""))
		require.NoError(t, err)
		lines = append(lines, string(b))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "events.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"flags": {"controller": "heuristic", "epochs": "45"}}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "training.png"), []byte("\x89PNG training"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "secret.txt"), []byte("SECRET-CONTENT"), 0o644))
	// A plot name that links out of the directory.
	require.NoError(t, os.Symlink(filepath.Join(root, "secret.txt"), filepath.Join(dir, "alpha.png")))
	return root, dir
}

// Only what the dashboard names can be fetched: the assets by name and a
// run's plots inside its directory; every traversal attempt fails and
// never returns a byte of what lies outside.
func TestTraversalRefused(t *testing.T) {
	_, dir := writeRunDir(t)
	srv := New(Options{})
	info, err := srv.AddRunDir(dir)
	require.NoError(t, err)
	require.Equal(t, "r0", info.ID)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	addr := ts.Listener.Addr().String()

	code, body := rawGet(t, addr, "/api/runs/r0/files/training.png")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "\x89PNG training", body)

	for _, target := range []string{
		"/api/runs/r0/files/../../secret.txt",
		"/api/runs/r0/files/..%2f..%2fsecret.txt",
		"/api/runs/r0/files/%2e%2e%2f%2e%2e%2fsecret.txt",
		"/api/runs/r0/files/..%5c..%5csecret.txt",
		"/api/runs/r0/files/alpha.png", // a symbolic link out of the directory
		"/api/runs/r0/files/events.jsonl",
		"/api/runs/r0/files/config.json",
		"/api/runs/r0/files/",
		"/api/runs/..%2f..%2f/files/secret.txt",
		"/api/runs/r1/files/training.png",
		"/assets/../../secret.txt",
		"/assets/..%2f..%2fsecret.txt",
		"/assets/%2e%2e%2fserver.go",
		"/assets/server.go",
		"/assets/index.html/..",
		"/../secret.txt",
		"/secret.txt",
		"/" + filepath.ToSlash(dir) + "/training.png",
		"//etc/passwd",
		"/etc/passwd",
	} {
		code, body := rawGet(t, addr, target)
		assert.NotEqual(t, http.StatusOK, code, "%s was served", target)
		assert.NotContains(t, body, "SECRET", target)
		assert.NotContains(t, body, "root:", target)
		assert.NotContains(t, body, "package dashboard", target)
	}
}

// The dashboard is read-only: only GET and HEAD are answered.
func TestReadOnly(t *testing.T) {
	srv := New(Options{})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		for _, p := range []string{"/", "/api/runs", "/api/events", "/api/health", "/assets/dashboard.js"} {
			code, hdr, _ := get(t, ts, m, p, nil)
			assert.Equal(t, http.StatusMethodNotAllowed, code, "%s %s", m, p)
			assert.Equal(t, "GET, HEAD", hdr.Get("Allow"))
		}
	}
	code, _, body := get(t, ts, http.MethodHead, "/", nil)
	assert.Equal(t, http.StatusOK, code)
	assert.Empty(t, body)
}

// On loopback only loopback names are answered, so that a page elsewhere
// cannot read the dashboard by rebinding its own name to 127.0.0.1.
func TestHostCheck(t *testing.T) {
	srv := New(Options{})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	for host, want := range map[string]int{
		"localhost:8080":        http.StatusOK,
		"LOCALHOST":             http.StatusOK,
		"127.0.0.1:1":           http.StatusOK,
		"127.1.2.3":             http.StatusOK,
		"[::1]:8080":            http.StatusOK,
		"evil.example":          http.StatusMisdirectedRequest,
		"evil.example:8080":     http.StatusMisdirectedRequest,
		"192.168.1.10:8080":     http.StatusMisdirectedRequest,
		"localhost.evil.com:80": http.StatusMisdirectedRequest,
	} {
		code, _, _ := get(t, ts, http.MethodGet, "/api/runs", map[string]string{"Host": host})
		assert.Equal(t, want, code, host)
	}
	any := httptest.NewServer(New(Options{AnyHost: true}).Handler())
	defer any.Close()
	code, _, _ := get(t, any, http.MethodGet, "/api/runs", map[string]string{"Host": "dashboard.lab:8080"})
	assert.Equal(t, http.StatusOK, code)
}

func TestResolveAddr(t *testing.T) {
	for _, c := range []struct {
		in, want string
		loopback bool
	}{
		{"8080", "127.0.0.1:8080", true},
		{":8080", "127.0.0.1:8080", true},
		{":0", "127.0.0.1:0", true},
		{"127.0.0.1:9000", "127.0.0.1:9000", true},
		{"localhost:9000", "localhost:9000", true},
		{"[::1]:9000", "[::1]:9000", true},
		{"0.0.0.0:8080", "0.0.0.0:8080", false},
		{"192.168.1.5:8080", "192.168.1.5:8080", false},
	} {
		got, loop, err := ResolveAddr(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
		assert.Equal(t, c.loopback, loop, c.in)
	}
	for _, bad := range []string{"", "localhost", "host:port", "1.2.3.4:99999", "::1"} {
		_, _, err := ResolveAddr(bad)
		assert.Error(t, err, bad)
	}
}

// Start on a non-loopback address answers any Host.
func TestStartAnyInterface(t *testing.T) {
	srv := New(Options{})
	require.NoError(t, srv.Start("0.0.0.0:0"))
	defer srv.Close()
	assert.True(t, srv.opts.AnyHost)
	assert.True(t, strings.HasPrefix(srv.URL(), "http://127.0.0.1:"), srv.URL())
	assert.Error(t, srv.Start("127.0.0.1:0"), "started twice")
}

// The page and its assets are served from the binary, with a content
// security policy that allows only the server's own.
func TestAssets(t *testing.T) {
	ts := httptest.NewServer(New(Options{}).Handler())
	defer ts.Close()
	for path, ctype := range map[string]string{
		"/":                     "text/html; charset=utf-8",
		"/assets/dashboard.js":  "text/javascript; charset=utf-8",
		"/assets/dashboard.css": "text/css; charset=utf-8",
	} {
		code, hdr, body := get(t, ts, http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, code, path)
		assert.Equal(t, ctype, hdr.Get("Content-Type"), path)
		assert.Contains(t, hdr.Get("Content-Security-Policy"), "script-src 'self'")
		assert.Equal(t, "nosniff", hdr.Get("X-Content-Type-Options"))
		assert.NotEmpty(t, body, path)
		// No CDN, no other site: the only URL is SVG's namespace name.
		rest := strings.ReplaceAll(body, "http://www.w3.org/2000/svg", "")
		assert.False(t, strings.Contains(rest, "http://") || strings.Contains(rest, "https://") || strings.Contains(rest, "//cdn"),
			"%s refers to another site", path)
	}
	code, _, body := get(t, ts, http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `<script src="/assets/dashboard.js"`)
	code, _, _ = get(t, ts, http.MethodGet, "/assets/index.html", nil)
	assert.Equal(t, http.StatusNotFound, code)
	code, _, _ = get(t, ts, http.MethodGet, "/nothing", nil)
	assert.Equal(t, http.StatusNotFound, code)
}

// /api/runs and /api/health describe the runs.
func TestRunsAndHealth(t *testing.T) {
	_, dir := writeRunDir(t)
	srv := New(Options{})
	_, err := srv.AddRunDir(dir)
	require.NoError(t, err)
	srv.AddLive(RunInfo{Label: "live one", Kind: "ppo", Total: 10}, "")
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	code, _, body := get(t, ts, http.MethodGet, "/api/runs", nil)
	require.Equal(t, http.StatusOK, code)
	var runs []RunInfo
	require.NoError(t, json.Unmarshal([]byte(body), &runs))
	require.Len(t, runs, 2)
	assert.Equal(t, "2026-01-02_030405 (heuristic)", runs[0].Label)
	assert.Equal(t, "train", runs[0].Kind)
	assert.Equal(t, 45, runs[0].Total)
	assert.False(t, runs[0].Live)
	assert.Equal(t, "r1", runs[1].ID)
	assert.True(t, runs[1].Live)
	code, _, body = get(t, ts, http.MethodGet, "/api/health", nil)
	require.Equal(t, http.StatusOK, code)
	var h Health
	require.NoError(t, json.Unmarshal([]byte(body), &h))
	assert.Equal(t, uint64(3), h.Runs["r0"].Items)
	assert.True(t, h.Runs["r0"].Ended)
	assert.False(t, h.Runs["r1"].Ended)
}

// A live run's preload (a resumed run's events.jsonl) comes first; a
// history beyond the bound is cut and the page told.
func TestAddLivePreloadAndHistoryBound(t *testing.T) {
	_, dir := writeRunDir(t)
	srv := New(Options{HistoryBytes: 1})
	st := srv.AddLive(RunInfo{}, filepath.Join(dir, "events.jsonl"))
	assert.Equal(t, uint64(3), st.Stats().Items)
	assert.Equal(t, uint64(2), srv.Runs()[0].Info().HistoryDropped)
	missing := srv.AddLive(RunInfo{}, filepath.Join(dir, "nothing.jsonl"))
	assert.Zero(t, missing.Stats().Items)
	assert.Empty(t, srv.Runs()[1].Info().Warnings)
}
