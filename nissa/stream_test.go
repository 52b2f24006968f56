package nissa

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/leyline"
)

// epochEvent is an EPOCH_COMPLETED event of epoch e.
func epochEvent(e int) leyline.TelemetryEvent {
	ev := leyline.NewEvent(leyline.EventEpochCompleted, &leyline.EpochCompletedPayload{InnerEpoch: e, ValAccuracy: float64(e)})
	ev.Epoch = leyline.IntPtr(e)
	return ev
}

// itemEpoch decodes the epoch of an item the default encoder wrote.
func itemEpoch(t *testing.T, it StreamItem) int {
	t.Helper()
	var ev leyline.TelemetryEvent
	require.NoError(t, json.Unmarshal(it.Data, &ev))
	require.NotNil(t, ev.Epoch)
	return *ev.Epoch
}

// recv takes the next item of sub, failing after longWait.
func recv(t *testing.T, sub *StreamSubscription) (StreamItem, bool) {
	t.Helper()
	select {
	case it, ok := <-sub.C():
		return it, ok
	case <-time.After(longWait):
		t.Fatal("no stream item within the wait")
		return StreamItem{}, false
	}
}

// A late subscriber gets the history, then the live items, in order and
// numbered without gaps; the end of the stream closes its channel.
func TestStreamHistoryThenLive(t *testing.T) {
	s := NewStreamBackend(StreamOptions{})
	for e := 1; e <= 3; e++ {
		require.NoError(t, s.Emit(epochEvent(e)))
	}
	sub := s.Subscribe()
	require.Len(t, sub.History, 3)
	for i, it := range sub.History {
		assert.Equal(t, uint64(i+1), it.Seq)
		assert.Equal(t, i+1, itemEpoch(t, it))
	}
	require.NoError(t, s.Emit(epochEvent(4)))
	it, ok := recv(t, sub)
	require.True(t, ok)
	assert.Equal(t, uint64(4), it.Seq)
	assert.Equal(t, 4, itemEpoch(t, it))
	assert.NoError(t, sub.Err())

	// A second subscriber now sees the four items as history.
	late := s.Subscribe()
	assert.Len(t, late.History, 4)

	require.NoError(t, s.Close())
	_, ok = recv(t, sub)
	assert.False(t, ok)
	assert.ErrorIs(t, sub.Err(), ErrStreamEnded)
	_, ok = recv(t, late)
	assert.False(t, ok)

	// After the end: the history and a closed channel.
	after := s.Subscribe()
	assert.Len(t, after.History, 4)
	_, ok = recv(t, after)
	assert.False(t, ok)
	assert.ErrorIs(t, after.Err(), ErrStreamEnded)
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	st := s.Stats()
	assert.True(t, st.Ended)
	assert.Equal(t, uint64(4), st.Items)
	assert.Equal(t, 0, st.Subscribers)
}

// A subscriber that never reads is dropped when its queue is full, the
// hub feeding the stream is never held up by it, and a subscriber that
// keeps up gets every event.
func TestStreamSlowSubscriberDroppedNotBlocking(t *testing.T) {
	const buf = 64
	s := NewStreamBackend(StreamOptions{ClientBuffer: buf})
	hub := NewHub(HubOptions{BackendQueueSize: 10000, QueueSize: 10000})
	defer hub.Close(longWait)
	require.NoError(t, hub.AddBackend(s))

	stalled := s.Subscribe() // never read
	fast := s.Subscribe()
	const n = 2000
	var got []int
	var gotMu sync.Mutex
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for it := range fast.C() {
			var ev leyline.TelemetryEvent
			if json.Unmarshal(it.Data, &ev) == nil && ev.Epoch != nil {
				gotMu.Lock()
				got = append(got, *ev.Epoch)
				gotMu.Unlock()
			}
		}
	}()
	received := func() int {
		gotMu.Lock()
		defer gotMu.Unlock()
		return len(got)
	}

	// Bursts of half a queue, each read before the next: the reader
	// keeps up, the stalled subscriber does not.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), longWait)
	defer cancel()
	for e := 1; e <= n; e++ {
		hub.Emit(epochEvent(e))
		if e%(buf/2) == 0 || e == n {
			require.NoError(t, hub.Flush(ctx), "the stream backend kept up although one subscriber never reads")
			require.Eventually(t, func() bool { return received() == e }, longWait, time.Millisecond)
		}
	}
	elapsed := time.Since(start)

	// The stalled subscriber was dropped: its channel holds a queue's
	// worth of items and is closed.
	held := 0
	for range stalled.C() {
		held++
	}
	assert.Equal(t, buf, held)
	assert.ErrorIs(t, stalled.Err(), ErrSlowSubscriber)

	require.NoError(t, s.Close())
	<-readDone
	require.Len(t, got, n, "the subscriber that reads lost events")
	for i, e := range got {
		require.Equal(t, i+1, e)
	}
	st := s.Stats()
	assert.Equal(t, uint64(1), st.SlowDropped)
	h := hub.Health()
	bs, _ := h.Backend(s.Name())
	assert.Zero(t, bs.Dropped, "the hub dropped events for the stream backend")
	t.Logf("%d events through a hub with a stalled subscriber in %v", n, elapsed)
}

// The history stays within its byte bound by forgetting the oldest
// items, and says how many a subscriber missed.
func TestStreamHistoryBound(t *testing.T) {
	item := make([]byte, 100)
	s := NewStreamBackend(StreamOptions{HistoryBytes: 10 * (100 + streamItemOverhead)})
	for range 25 {
		s.Publish(item)
	}
	st := s.Stats()
	assert.Equal(t, 10, st.HistoryItems)
	assert.Equal(t, uint64(15), st.HistoryDropped)
	assert.LessOrEqual(t, st.HistoryBytes, 10*(100+streamItemOverhead))
	sub := s.Subscribe()
	require.Len(t, sub.History, 10)
	assert.Equal(t, uint64(16), sub.History[0].Seq)
	assert.Equal(t, uint64(15), sub.HistoryDropped)

	// One item larger than the whole bound is still kept (alone).
	s.Publish(make([]byte, 5000))
	assert.Equal(t, 1, s.Stats().HistoryItems)
}

// Encode may leave events out or fail; failures count as the backend's
// drops on the hub.
func TestStreamEncode(t *testing.T) {
	s := NewStreamBackend(StreamOptions{Encode: func(ev leyline.TelemetryEvent) ([]byte, bool, error) {
		switch ev.Type {
		case leyline.EventMetrics:
			return nil, true, nil
		case leyline.EventSeedPruned:
			return nil, false, errors.New("cannot encode")
		}
		return []byte(ev.Type.String()), false, nil
	}})
	require.NoError(t, s.Emit(epochEvent(1)))
	require.NoError(t, s.Emit(leyline.NewEvent(leyline.EventMetrics, &leyline.MetricsPayload{Source: "x"})))
	assert.Error(t, s.Emit(leyline.NewEvent(leyline.EventSeedPruned, nil)))
	sub := s.Subscribe()
	require.Len(t, sub.History, 1)
	assert.Equal(t, "EPOCH_COMPLETED", string(sub.History[0].Data))
	assert.Equal(t, uint64(1), s.Stats().Skipped)
}

// Close on a subscription ends only that subscription.
func TestStreamUnsubscribe(t *testing.T) {
	s := NewStreamBackend(StreamOptions{})
	a, b := s.Subscribe(), s.Subscribe()
	a.Close()
	a.Close()
	_, ok := <-a.C()
	assert.False(t, ok)
	assert.ErrorIs(t, a.Err(), ErrUnsubscribed)
	s.Publish([]byte("x"))
	it, ok := recv(t, b)
	require.True(t, ok)
	assert.Equal(t, "x", string(it.Data))
	assert.Equal(t, 1, s.Stats().Subscribers)
}

// Subscribers coming and going while events are published (run with
// -race): each sees its history and live items without gap or repeat.
func TestStreamConcurrent(t *testing.T) {
	s := NewStreamBackend(StreamOptions{ClientBuffer: 100000})
	const n = 3000
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for r := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(r) * time.Millisecond)
			sub := s.Subscribe()
			next := uint64(1)
			if len(sub.History) > 0 {
				next = sub.History[0].Seq
			}
			for _, it := range sub.History {
				if it.Seq != next {
					errs <- fmt.Errorf("reader %d: history seq %d, want %d", r, it.Seq, next)
					return
				}
				next++
			}
			for it := range sub.C() {
				if it.Seq != next {
					errs <- fmt.Errorf("reader %d: live seq %d, want %d", r, it.Seq, next)
					return
				}
				next++
			}
			if next != n+1 {
				errs <- fmt.Errorf("reader %d: ended at %d, want %d (%v)", r, next-1, n, sub.Err())
			}
		}()
	}
	for range n {
		s.Publish([]byte("e"))
	}
	require.NoError(t, s.Close())
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
