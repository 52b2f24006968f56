package nissa

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/internal/syncbuf"
	"github.com/esper-go/esper/leyline"
)

// Kasmina and the other domains see the hub only as an emitter.
var _ interface{ Emit(leyline.TelemetryEvent) } = (*Hub)(nil)

// Generous bounds: the race detector and a loaded CI machine are slow,
// but none of these should ever be approached by a correct hub.
const (
	longWait  = 10 * time.Second
	shortWait = 100 * time.Millisecond
)

// stallBackend blocks in Emit until release is closed, and reports on
// entered the first time it blocks.
type stallBackend struct {
	name      string
	entered   chan struct{}
	release   chan struct{}
	once      sync.Once
	closeOnce sync.Once
}

func newStallBackend(name string) *stallBackend {
	return &stallBackend{name: name, entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *stallBackend) Name() string { return s.name }
func (s *stallBackend) Start() error { return nil }
func (s *stallBackend) Close() error { return nil }
func (s *stallBackend) Emit(leyline.TelemetryEvent) error {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return nil
}

// unstall lets the backend go; safe to call more than once.
func (s *stallBackend) unstall() { s.closeOnce.Do(func() { close(s.release) }) }

// waitEntered fails the test unless the backend is blocked in Emit.
func (s *stallBackend) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-s.entered:
	case <-time.After(longWait):
		t.Fatal("backend never received an event")
	}
}

// funcBackend delegates Emit, Start and Close to functions.
type funcBackend struct {
	name  string
	start func() error
	emit  func(leyline.TelemetryEvent) error
	close func() error
}

func (f *funcBackend) Name() string { return f.name }
func (f *funcBackend) Start() error {
	if f.start != nil {
		return f.start()
	}
	return nil
}
func (f *funcBackend) Emit(ev leyline.TelemetryEvent) error {
	if f.emit != nil {
		return f.emit(ev)
	}
	return nil
}
func (f *funcBackend) Close() error {
	if f.close != nil {
		return f.close()
	}
	return nil
}

// syncBuffer is a writer the test reads while the code under test writes.
type syncBuffer = syncbuf.Buffer

func testLogger() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewTextHandler(buf, nil)), buf
}

func msgEvent(msg string) leyline.TelemetryEvent {
	ev := leyline.NewEvent(leyline.EventPlateauDetected, nil)
	ev.Message = msg
	return ev
}

func flushCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func closeHub(t *testing.T, h *Hub) {
	t.Helper()
	t.Cleanup(func() { _ = h.Close(longWait) })
}

func TestHubDeliversInOrderToEveryBackend(t *testing.T) {
	h := NewHub(HubOptions{BackendQueueSize: 1000})
	closeHub(t, h)
	a, b := NewMemoryBackend("a"), NewMemoryBackend("b")
	require.NoError(t, h.AddBackend(a))
	require.NoError(t, h.AddBackend(b))
	assert.Equal(t, []string{"a", "b"}, h.Backends())

	for i := range 500 {
		h.Emit(msgEvent(fmt.Sprint(i)))
	}
	require.NoError(t, h.Flush(flushCtx(t, longWait)))
	for _, m := range []*MemoryBackend{a, b} {
		evs := m.Events()
		require.Len(t, evs, 500)
		for i, ev := range evs {
			assert.Equal(t, fmt.Sprint(i), ev.Message)
		}
	}
	hl := h.Health()
	assert.Equal(t, StatusHealthy, hl.Status)
	assert.EqualValues(t, 500, hl.Emitted)
	assert.Zero(t, hl.Dropped)
	st, ok := hl.Backend("a")
	require.True(t, ok)
	assert.EqualValues(t, 500, st.Processed)
	assert.Greater(t, st.TotalProcessingS, 0.0, "processing time is measured")
	assert.Greater(t, st.AvgProcessingMs, 0.0)
	assert.InDelta(t, st.TotalProcessingS*1000/500, st.AvgProcessingMs, 1e-9, "average = total / processed")
}

// Emit must not block however stuck a backend is, and every event must be
// accounted for: dropped (hub or backend), queued, in flight or processed.
func TestEmitNeverBlocksOnStalledBackend(t *testing.T) {
	const n = 10_000
	h := NewHub(HubOptions{})
	closeHub(t, h)
	stall := newStallBackend("stall")
	t.Cleanup(stall.unstall)
	require.NoError(t, h.AddBackend(stall))

	h.Emit(msgEvent("first"))
	stall.waitEntered(t) // one event is now in flight, blocked

	// The backend stays stalled throughout: a blocking Emit would never
	// return, so the emitting goroutine not finishing within longWait is
	// the failure (a liveness bound, not a speed target).
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i < n; i++ {
			h.Emit(msgEvent("x"))
		}
	}()
	select {
	case <-done:
	case <-time.After(longWait):
		t.Fatalf("Emit blocked behind a stalled backend (not done after %v)", longWait)
	}

	// Once the hub goroutine has dispatched everything, the books
	// balance: emitted = hub drops + backend drops + backend queue + 1 in
	// flight, with nothing processed yet.
	_, err := h.barrier(flushCtx(t, longWait))
	require.NoError(t, err)
	hl := h.Health()
	st, _ := hl.Backend("stall")
	assert.Zero(t, st.Processed)
	assert.Zero(t, hl.QueueDepth)
	assert.Equal(t, DefaultBackendQueueSize, st.QueueDepth)
	assert.EqualValues(t, n, hl.Emitted)
	assert.EqualValues(t, n, hl.Dropped+st.Dropped+uint64(st.QueueDepth)+1)
	assert.GreaterOrEqual(t, hl.Dropped+st.Dropped, uint64(n-DefaultBackendQueueSize-1))
	assert.Equal(t, StatusDegraded, hl.Status)

	stall.unstall()
	require.NoError(t, h.Flush(flushCtx(t, longWait)))
	hl = h.Health()
	st, _ = hl.Backend("stall")
	assert.EqualValues(t, DefaultBackendQueueSize+1, st.Processed)
	assert.EqualValues(t, n, hl.Dropped+st.Dropped+st.Processed)
}

func TestHubQueueDropsAreCountedExactly(t *testing.T) {
	log, logs := testLogger()
	resume := make(chan struct{})
	h := newHub(HubOptions{QueueSize: 10, BackendQueueSize: 100, Logger: log}, resume)
	closeHub(t, h)
	mem := NewMemoryBackend("")
	require.NoError(t, h.AddBackend(mem))

	for range 25 {
		h.Emit(msgEvent("x"))
	}
	hl := h.Health()
	assert.EqualValues(t, 15, hl.Dropped)
	assert.Equal(t, 10, hl.QueueDepth)
	assert.Equal(t, StatusDegraded, hl.Status)
	assert.Equal(t, 1, strings.Count(logs.String(), "hub queue full"), "first drop is logged, the next 14 are not")

	close(resume)
	require.NoError(t, h.Flush(flushCtx(t, longWait)))
	assert.Equal(t, 10, mem.Len())
}

// The hub logs its 1st drop and every 1000th after it, not each one.
func TestHubDropLogCadence(t *testing.T) {
	log, logs := testLogger()
	resume := make(chan struct{})
	h := newHub(HubOptions{QueueSize: 1, Logger: log}, resume)
	closeHub(t, h)
	h.Emit(msgEvent("queued"))
	for range 2001 {
		h.Emit(msgEvent("dropped"))
	}
	assert.EqualValues(t, 2001, h.Health().Dropped)
	assert.Equal(t, 3, strings.Count(logs.String(), "hub queue full"), "drops 1, 1000 and 2000 are logged")
	close(resume)
}

func TestBackendQueueDropsAreCountedExactly(t *testing.T) {
	log, logs := testLogger()
	h := NewHub(HubOptions{BackendQueueSize: 5, Logger: log})
	closeHub(t, h)
	stall := newStallBackend("stall")
	t.Cleanup(stall.unstall)
	require.NoError(t, h.AddBackend(stall))

	h.Emit(msgEvent("x"))
	stall.waitEntered(t)
	for range 120 {
		h.Emit(msgEvent("x"))
	}
	_, err := h.barrier(flushCtx(t, longWait))
	require.NoError(t, err)
	hl := h.Health()
	st, _ := hl.Backend("stall")
	assert.EqualValues(t, 115, st.Dropped)
	assert.Zero(t, st.Failed)
	assert.Equal(t, 5, st.QueueDepth)
	assert.Zero(t, hl.Dropped)
	assert.Equal(t, StatusDegraded, hl.Status)
	// The first and the 100th drop are logged.
	assert.Equal(t, 2, strings.Count(logs.String(), "backend queue full"))

	stall.unstall()
	require.NoError(t, h.Flush(flushCtx(t, longWait)))
	st, _ = h.Health().Backend("stall")
	assert.EqualValues(t, 6, st.Processed)
	assert.EqualValues(t, 115, st.Dropped)
}

func TestFlushTimesOutOnStuckBackend(t *testing.T) {
	h := NewHub(HubOptions{})
	closeHub(t, h)
	stall := newStallBackend("stall")
	t.Cleanup(stall.unstall)
	require.NoError(t, h.AddBackend(stall))
	h.Emit(msgEvent("x"))

	start := time.Now()
	err := h.Flush(flushCtx(t, shortWait))
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), `"stall"`)
	assert.Less(t, time.Since(start), longWait)

	stall.unstall()
	assert.NoError(t, h.Flush(flushCtx(t, longWait)))
}

func TestFlushOnIdleHub(t *testing.T) {
	h := NewHub(HubOptions{})
	closeHub(t, h)
	assert.NoError(t, h.Flush(flushCtx(t, longWait)), "no backends")
	require.NoError(t, h.AddBackend(NewMemoryBackend("")))
	assert.NoError(t, h.Flush(flushCtx(t, longWait)), "no events")
}

func TestCloseProcessesEverythingEmittedBefore(t *testing.T) {
	h := NewHub(HubOptions{BackendQueueSize: 2000})
	mem := NewMemoryBackend("")
	closed := make(chan struct{})
	require.NoError(t, h.AddBackend(mem))
	require.NoError(t, h.AddBackend(&funcBackend{name: "closer", close: func() error {
		close(closed)
		return nil
	}}))
	for i := range 1000 {
		h.Emit(msgEvent(fmt.Sprint(i)))
	}
	require.NoError(t, h.Close(longWait))
	assert.Equal(t, 1000, mem.Len())
	select {
	case <-closed:
	default:
		t.Fatal("backend Close was not called")
	}
	assert.True(t, h.Health().Closed)
	assert.NoError(t, h.Close(longWait), "second Close is a no-op")
}

func TestCloseReturnsWithinDeadlineWithStuckBackend(t *testing.T) {
	h := NewHub(HubOptions{})
	stall := newStallBackend("stuck")
	t.Cleanup(stall.unstall)
	mem := NewMemoryBackend("")
	require.NoError(t, h.AddBackend(stall))
	require.NoError(t, h.AddBackend(mem))
	for range 10 {
		h.Emit(msgEvent("x"))
	}
	stall.waitEntered(t)
	require.True(t, mem.WaitFor(10, longWait))

	const deadline = 200 * time.Millisecond
	start := time.Now()
	err := h.Close(deadline)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrStuckBackend)
	assert.Contains(t, err.Error(), "stuck")
	assert.NotContains(t, err.Error(), "memory")
	assert.GreaterOrEqual(t, elapsed, deadline)
	assert.Less(t, elapsed, deadline+5*time.Second)
	assert.Equal(t, 10, mem.Len(), "the healthy backend still got everything")
}

func TestCloseReportsBackendCloseError(t *testing.T) {
	h := NewHub(HubOptions{})
	boom := errors.New("disk gone")
	require.NoError(t, h.AddBackend(&funcBackend{name: "f", close: func() error { return boom }}))
	err := h.Close(longWait)
	assert.ErrorIs(t, err, boom)
}

func TestEmitAfterCloseIsDroppedAndLoggedOnce(t *testing.T) {
	log, logs := testLogger()
	h := NewHub(HubOptions{Logger: log})
	mem := NewMemoryBackend("")
	require.NoError(t, h.AddBackend(mem))
	require.NoError(t, h.Close(longWait))
	for range 3 {
		h.Emit(msgEvent("late"))
	}
	hl := h.Health()
	assert.EqualValues(t, 3, hl.Dropped)
	assert.EqualValues(t, 3, hl.DroppedAfterClose)
	assert.Equal(t, StatusDegraded, hl.Status)
	assert.Equal(t, 0, mem.Len())
	assert.Equal(t, 1, strings.Count(logs.String(), "after hub close"))
	assert.ErrorIs(t, h.Flush(flushCtx(t, longWait)), ErrClosed)
}

func TestAddBackend(t *testing.T) {
	t.Run("after close", func(t *testing.T) {
		h := NewHub(HubOptions{})
		require.NoError(t, h.Close(longWait))
		started := false
		err := h.AddBackend(&funcBackend{name: "late", start: func() error { started = true; return nil }})
		assert.ErrorIs(t, err, ErrClosed)
		assert.False(t, started, "a backend refused by a closed hub is not started")
	})
	t.Run("start failure", func(t *testing.T) {
		h := NewHub(HubOptions{})
		closeHub(t, h)
		boom := errors.New("no such device")
		err := h.AddBackend(&funcBackend{name: "bad", start: func() error { return boom }})
		assert.ErrorIs(t, err, boom)
		assert.Empty(t, h.Backends())
	})
	t.Run("duplicate name", func(t *testing.T) {
		h := NewHub(HubOptions{})
		closeHub(t, h)
		require.NoError(t, h.AddBackend(NewMemoryBackend("m")))
		assert.ErrorIs(t, h.AddBackend(NewMemoryBackend("m")), ErrDuplicateBackend)
	})
}

func TestPanickingBackendDoesNotKillWorker(t *testing.T) {
	h := NewHub(HubOptions{})
	closeHub(t, h)
	var mu sync.Mutex
	var got []string
	require.NoError(t, h.AddBackend(&funcBackend{name: "p", emit: func(ev leyline.TelemetryEvent) error {
		switch ev.Message {
		case "panic":
			panic("backend bug")
		case "error":
			return errors.New("write failed")
		}
		mu.Lock()
		got = append(got, ev.Message)
		mu.Unlock()
		return nil
	}}))
	for _, m := range []string{"a", "panic", "b", "error", "c"} {
		h.Emit(msgEvent(m))
	}
	require.NoError(t, h.Flush(flushCtx(t, longWait)))
	mu.Lock()
	assert.Equal(t, []string{"a", "b", "c"}, got)
	mu.Unlock()
	hl := h.Health()
	st, _ := hl.Backend("p")
	assert.EqualValues(t, 3, st.Processed)
	assert.EqualValues(t, 2, st.Dropped)
	assert.EqualValues(t, 2, st.Failed)
	assert.Equal(t, StatusDegraded, hl.Status)
}

func TestRemoveBackendDuringEmission(t *testing.T) {
	h := NewHub(HubOptions{})
	closeHub(t, h)
	keep := NewMemoryBackend("keep")
	require.NoError(t, h.AddBackend(keep))
	closed := make(chan struct{})
	require.NoError(t, h.AddBackend(&funcBackend{name: "gone", close: func() error {
		close(closed)
		return nil
	}}))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					h.Emit(msgEvent("x"))
				}
			}
		}()
	}
	require.True(t, keep.WaitFor(100, longWait))
	require.NoError(t, h.RemoveBackend("gone"))
	<-closed
	assert.Equal(t, []string{"keep"}, h.Backends())
	assert.ErrorIs(t, h.RemoveBackend("gone"), ErrUnknownBackend)
	close(stop)
	wg.Wait()
	require.NoError(t, h.Flush(flushCtx(t, longWait)))
	_, ok := h.Health().Backend("gone")
	assert.False(t, ok)
}

func TestConcurrentEmitFlushClose(t *testing.T) {
	h := NewHub(HubOptions{QueueSize: 64, BackendQueueSize: 8})
	mem := NewMemoryBackend("")
	require.NoError(t, h.AddBackend(mem))
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				h.Emit(msgEvent("x"))
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			err := h.Flush(flushCtx(t, longWait))
			if err != nil {
				assert.ErrorIs(t, err, ErrClosed)
			}
		}
	}()
	require.NoError(t, h.Close(longWait))
	wg.Wait()
	hl := h.Health()
	ms, _ := hl.Backend("memory")
	assert.EqualValues(t, 8000, hl.Emitted)
	assert.EqualValues(t, 8000, hl.Dropped+ms.Dropped+ms.Processed)
	assert.EqualValues(t, mem.Len(), ms.Processed)
}

func TestHealthCapacities(t *testing.T) {
	h := NewHub(HubOptions{})
	closeHub(t, h)
	require.NoError(t, h.AddBackend(NewMemoryBackend("")))
	hl := h.Health()
	assert.Equal(t, DefaultQueueSize, hl.QueueCapacity)
	st, ok := hl.Backend("memory")
	require.True(t, ok)
	assert.Equal(t, DefaultBackendQueueSize, st.QueueCapacity)
	_, ok = hl.Backend("nope")
	assert.False(t, ok)
}
