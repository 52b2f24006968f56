package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nissa"
)

const longWait = 20 * time.Second

// sse is one event of the stream.
type sse struct {
	name string
	data string
}

// evData is the data of an "ev" event.
type evData struct {
	Run string          `json:"run"`
	Seq uint64          `json:"seq"`
	E   json.RawMessage `json:"e"`
}

// epoch decodes the telemetry event of an "ev" and returns its epoch.
func (d evData) epoch(t *testing.T) int {
	t.Helper()
	var ev leyline.TelemetryEvent
	require.NoError(t, json.Unmarshal(d.E, &ev))
	require.NotNil(t, ev.Epoch, "event without epoch: %s", d.E)
	return *ev.Epoch
}

// openStream connects to /api/events and returns its events as they come
// (the channel closes when the stream does).
func openStream(t *testing.T, url string) (<-chan sse, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/events", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	out := make(chan sse, 100000)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		readSSE(bufio.NewReader(resp.Body), out)
	}()
	return out, cancel
}

// readSSE parses Server-Sent Events from r onto out until r ends.
func readSSE(r *bufio.Reader, out chan<- sse) {
	var cur sse
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if cur.name != "" {
				out <- cur
			}
			cur = sse{}
		case strings.HasPrefix(line, "event: "):
			cur.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[len("data: "):]
		}
	}
}

// next returns the stream's next event, failing after longWait.
func next(t *testing.T, c <-chan sse) sse {
	t.Helper()
	select {
	case e, ok := <-c:
		require.True(t, ok, "the stream ended")
		return e
	case <-time.After(longWait):
		t.Fatal("no event within the wait")
		return sse{}
	}
}

// expect reads the next event, checks its name and returns its data.
func expect(t *testing.T, c <-chan sse, name string) string {
	t.Helper()
	e := next(t, c)
	require.Equal(t, name, e.name, "data: %s", e.data)
	return e.data
}

func expectEv(t *testing.T, c <-chan sse) evData {
	t.Helper()
	var d evData
	require.NoError(t, json.Unmarshal([]byte(expect(t, c, "ev")), &d))
	return d
}

func epochEvent(e int, msg string) leyline.TelemetryEvent {
	ev := leyline.NewEvent(leyline.EventEpochCompleted, &leyline.EpochCompletedPayload{InnerEpoch: e, ValAccuracy: float64(e)})
	ev.Epoch = leyline.IntPtr(e)
	ev.Message = msg
	return ev
}

func flush(t *testing.T, hub *nissa.Hub) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), longWait)
	defer cancel()
	require.NoError(t, hub.Flush(ctx))
}

// A browser gets the run's history, then the live events as they are
// emitted, then the run's end; one that joins later gets the whole
// history and the end at once.
func TestEventsHistoryThenLive(t *testing.T) {
	srv := New(Options{})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	hub := nissa.NewHub(nissa.HubOptions{})
	defer hub.Close(longWait)
	require.NoError(t, hub.AddBackend(srv.AddLive(RunInfo{Label: "with seeds (heuristic)", Kind: "train", Total: 5}, "")))
	for e := 1; e <= 3; e++ {
		hub.Emit(epochEvent(e, ""))
	}
	flush(t, hub)

	c, stop := openStream(t, ts.URL)
	defer stop()
	assert.JSONEq(t, `{"title":"esper"}`, expect(t, c, "hello"))
	var info RunInfo
	require.NoError(t, json.Unmarshal([]byte(expect(t, c, "run")), &info))
	assert.Equal(t, "r0", info.ID)
	assert.Equal(t, "with seeds (heuristic)", info.Label)
	assert.True(t, info.Live)
	assert.Equal(t, 5, info.Total)
	for e := 1; e <= 3; e++ {
		d := expectEv(t, c)
		assert.Equal(t, "r0", d.Run)
		assert.Equal(t, uint64(e), d.Seq)
		assert.Equal(t, e, d.epoch(t))
	}
	expect(t, c, "live")

	// Live: each event as it is emitted.
	for e := 4; e <= 5; e++ {
		hub.Emit(epochEvent(e, ""))
		d := expectEv(t, c)
		assert.Equal(t, e, d.epoch(t))
	}
	// A run added later (the baseline) is announced on the open stream.
	hub2 := nissa.NewHub(nissa.HubOptions{})
	require.NoError(t, hub2.AddBackend(srv.AddLive(RunInfo{Label: "host alone"}, "")))
	require.NoError(t, json.Unmarshal([]byte(expect(t, c, "run")), &info))
	assert.Equal(t, "r1", info.ID)
	hub2.Emit(epochEvent(1, ""))
	d := expectEv(t, c)
	assert.Equal(t, "r1", d.Run)
	require.NoError(t, hub2.Close(longWait))
	assert.JSONEq(t, `{"run":"r1"}`, expect(t, c, "end"))

	require.NoError(t, hub.Close(longWait))
	assert.JSONEq(t, `{"run":"r0"}`, expect(t, c, "end"))

	// A late joiner: hello, both runs with their histories, their ends.
	late, stopLate := openStream(t, ts.URL)
	defer stopLate()
	expect(t, late, "hello")
	require.NoError(t, json.Unmarshal([]byte(expect(t, late, "run")), &info))
	assert.False(t, info.Live)
	for e := 1; e <= 5; e++ {
		assert.Equal(t, e, expectEv(t, late).epoch(t))
	}
	expect(t, late, "run")
	assert.Equal(t, "r1", expectEv(t, late).Run)
	expect(t, late, "live")
	got := []string{expect(t, late, "end"), expect(t, late, "end")}
	assert.ElementsMatch(t, []string{`{"run":"r0"}`, `{"run":"r1"}`}, got)

	h := srv.Health()
	assert.Equal(t, uint64(2), h.Served)
	assert.Equal(t, uint64(5), h.Runs["r0"].Items)
}

// A browser that stops reading is dropped without holding up the hub,
// and a browser that keeps up meanwhile gets every event.
func TestEventsSlowClientDroppedNotBlocking(t *testing.T) {
	const buf = 64
	srv := New(Options{ClientBuffer: buf, WriteTimeout: time.Second})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	hub := nissa.NewHub(nissa.HubOptions{QueueSize: 10000, BackendQueueSize: 10000})
	defer hub.Close(longWait)
	live := srv.AddLive(RunInfo{Label: "run"}, "")
	require.NoError(t, hub.AddBackend(live))

	// The slow browser: asks for the stream, then never reads, with a
	// small receive buffer so that the server's writes soon block.
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	_, err = fmt.Fprintf(conn, "GET /api/events HTTP/1.1\r\nHost: %s\r\n\r\n", ts.Listener.Addr())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return srv.Health().Clients == 1 }, longWait, time.Millisecond)

	fast, stop := openStream(t, ts.URL)
	defer stop()
	expect(t, fast, "hello")
	expect(t, fast, "run")
	expect(t, fast, "live")

	// Events of 8 KiB, in bursts of half a queue: the fast browser reads
	// each burst before the next; the slow one's queue and socket fill.
	pad := strings.Repeat("x", 8<<10)
	const n = 1500
	var slowest time.Duration
	read := 0
	for e := 1; e <= n; e++ {
		t0 := time.Now()
		hub.Emit(epochEvent(e, pad))
		slowest = max(slowest, time.Since(t0))
		if e%(buf/2) == 0 || e == n {
			t0 := time.Now()
			flush(t, hub)
			slowest = max(slowest, time.Since(t0))
			for ; read < e; read++ {
				d := expectEv(t, fast)
				require.Equal(t, uint64(read+1), d.Seq)
				require.Equal(t, read+1, d.epoch(t))
			}
		}
	}
	st := live.Stats()
	assert.Equal(t, uint64(1), st.SlowDropped, "the slow browser was not dropped")
	assert.Equal(t, uint64(n), st.Items)
	hh := hub.Health()
	bs, ok := hh.Backend("dashboard")
	require.True(t, ok)
	assert.Zero(t, bs.Dropped, "the hub dropped events for the dashboard")
	// Flush waits for the backend: with the slow browser stuck it still
	// took no longer than the fast browser's reading.
	assert.Less(t, slowest, 5*time.Second, "an Emit or Flush waited on the slow browser")
	require.Eventually(t, func() bool { return srv.Health().Dropped == 1 && srv.Health().Clients == 1 }, longWait, 10*time.Millisecond,
		"the slow browser's stream is counted and closed: %+v", srv.Health())
	t.Logf("%d events of 8 KiB, slowest Emit or Flush %v; health %+v", n, slowest, srv.Health())
}

// Close sends what the streams hold, says goodbye and ends them.
func TestServerCloseEndsStreams(t *testing.T) {
	srv := New(Options{})
	require.NoError(t, srv.Start("127.0.0.1:0"))
	url := strings.TrimSuffix(srv.URL(), "/")
	hub := nissa.NewHub(nissa.HubOptions{})
	defer hub.Close(longWait)
	require.NoError(t, hub.AddBackend(srv.AddLive(RunInfo{}, "")))
	c, stop := openStream(t, url)
	defer stop()
	expect(t, c, "hello")
	expect(t, c, "run")
	expect(t, c, "live")
	hub.Emit(epochEvent(1, ""))
	flush(t, hub)
	t0 := time.Now()
	require.NoError(t, srv.Close())
	assert.Less(t, time.Since(t0), 5*time.Second)
	assert.Equal(t, 1, expectEv(t, c).epoch(t))
	expect(t, c, "bye")
	select {
	case _, ok := <-c:
		assert.False(t, ok, "the stream goes on after bye")
	case <-time.After(longWait):
		t.Fatal("the stream did not end")
	}
}

// Many browsers and runs coming and going while events flow (run with
// -race).
func TestEventsConcurrentClients(t *testing.T) {
	srv := New(Options{})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	hub := nissa.NewHub(nissa.HubOptions{QueueSize: 10000, BackendQueueSize: 10000})
	require.NoError(t, hub.AddBackend(srv.AddLive(RunInfo{}, "")))
	const n = 300
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 3 * time.Millisecond)
			c, stop := openStream(t, ts.URL)
			defer stop()
			seen := 0
			for e := range c {
				switch e.name {
				case "ev":
					seen++
				case "end":
					assert.Equal(t, n, seen, "client %d", i)
					return
				}
			}
			t.Errorf("client %d: the stream ended before the run", i)
		}()
	}
	for e := 1; e <= n; e++ {
		hub.Emit(epochEvent(e, ""))
		if e%50 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	require.NoError(t, hub.Close(longWait))
	wg.Wait()
}
