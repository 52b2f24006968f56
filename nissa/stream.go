package nissa

import (
	"encoding/json"
	"errors"
	"sync"

	"github.com/esper-go/esper/leyline"
)

// Defaults for StreamOptions.
const (
	// DefaultStreamHistoryBytes bounds the history a StreamBackend keeps
	// for late subscribers: 64 MiB, a long run's whole telemetry.
	DefaultStreamHistoryBytes = 64 << 20
	// DefaultStreamClientBuffer is each subscriber's queue: far more than
	// a run emits between two reads of a reader that keeps up (a few
	// events an epoch), so only a stalled reader fills it.
	DefaultStreamClientBuffer = 1024
)

// streamItemOverhead is what one history entry costs besides its data
// (the StreamItem itself), counted against HistoryBytes.
const streamItemOverhead = 32

// Errors a StreamSubscription ends with; see StreamSubscription.Err.
var (
	// ErrStreamEnded: the backend was closed (the run is over); every
	// item was delivered.
	ErrStreamEnded = errors.New("nissa: stream ended")
	// ErrSlowSubscriber: the subscriber's queue was full when an item
	// came, so it was dropped rather than let it hold the backend up.
	ErrSlowSubscriber = errors.New("nissa: stream subscriber too slow; dropped")
	// ErrUnsubscribed: the subscriber called Close.
	ErrUnsubscribed = errors.New("nissa: stream subscription closed")
)

// StreamOptions configures a StreamBackend. The zero value gives the
// defaults.
type StreamOptions struct {
	// Name is the backend's name; default "stream".
	Name string
	// Encode turns an event into the bytes subscribers receive; skip
	// leaves the event out of the stream. Default: json.Marshal of the
	// event, every event kept. An error counts the event as failed for
	// the backend (Hub.Health).
	Encode func(ev leyline.TelemetryEvent) (data []byte, skip bool, err error)
	// HistoryBytes bounds the history kept for late subscribers (the
	// items' data plus a small overhead each); when it would be passed,
	// the oldest items are forgotten and counted. Default
	// DefaultStreamHistoryBytes.
	HistoryBytes int
	// ClientBuffer is each subscriber's queue; a subscriber whose queue is
	// full when an item comes is dropped (ErrSlowSubscriber) and counted.
	// Default DefaultStreamClientBuffer.
	ClientBuffer int
}

// StreamItem is one encoded event of a stream. Seq numbers the items of
// one backend from 1, in order; Data must not be modified (every
// subscriber shares it).
type StreamItem struct {
	Seq  uint64
	Data []byte
}

// StreamStats are a StreamBackend's counters.
type StreamStats struct {
	// Items counts the items published (events encoded and kept).
	Items uint64 `json:"items"`
	// Skipped counts the events Encode left out.
	Skipped uint64 `json:"skipped"`
	// HistoryItems and HistoryBytes are what the history holds now;
	// HistoryDropped counts the oldest items it forgot to stay within
	// StreamOptions.HistoryBytes.
	HistoryItems   int    `json:"history_items"`
	HistoryBytes   int    `json:"history_bytes"`
	HistoryDropped uint64 `json:"history_dropped"`
	// Subscribers is the number of subscribers now; SlowDropped counts
	// those dropped for a full queue.
	Subscribers int    `json:"subscribers"`
	SlowDropped uint64 `json:"slow_dropped"`
	// Ended reports whether the backend was closed.
	Ended bool `json:"ended"`
}

// StreamBackend keeps a run's events for readers that come and go — a
// live dashboard's browsers: every subscriber gets the history so far
// and then each new event, through its own bounded queue.
//
// Nothing a subscriber does can slow the hub down: an event is handed to
// each subscriber's queue without waiting, and a subscriber whose queue
// is full is dropped (its channel closed, ErrSlowSubscriber, counted in
// SlowDropped); it may subscribe again and get the history anew. With no
// subscriber at all the backend only appends to its bounded history.
// Encoding runs on the backend's worker goroutine, never the emitter's.
type StreamBackend struct {
	name      string
	encode    func(leyline.TelemetryEvent) ([]byte, bool, error)
	histCap   int
	clientBuf int

	mu          sync.Mutex
	hist        []StreamItem
	histBytes   int
	seq         uint64
	skipped     uint64
	histDropped uint64
	slowDropped uint64
	subs        map[*StreamSubscription]struct{}
	closed      bool
	done        chan struct{}
}

// NewStreamBackend returns an empty stream.
func NewStreamBackend(opts StreamOptions) *StreamBackend {
	if opts.Name == "" {
		opts.Name = "stream"
	}
	if opts.Encode == nil {
		opts.Encode = func(ev leyline.TelemetryEvent) ([]byte, bool, error) {
			b, err := json.Marshal(ev)
			return b, false, err
		}
	}
	if opts.HistoryBytes <= 0 {
		opts.HistoryBytes = DefaultStreamHistoryBytes
	}
	if opts.ClientBuffer <= 0 {
		opts.ClientBuffer = DefaultStreamClientBuffer
	}
	return &StreamBackend{
		name: opts.Name, encode: opts.Encode, histCap: opts.HistoryBytes, clientBuf: opts.ClientBuffer,
		subs: map[*StreamSubscription]struct{}{}, done: make(chan struct{}),
	}
}

// Name returns the backend's name.
func (s *StreamBackend) Name() string { return s.name }

// Start does nothing.
func (s *StreamBackend) Start() error { return nil }

// Emit encodes ev and publishes it (see StreamBackend).
func (s *StreamBackend) Emit(ev leyline.TelemetryEvent) error {
	data, skip, err := s.encode(ev)
	if err != nil {
		return err
	}
	if skip {
		s.mu.Lock()
		s.skipped++
		s.mu.Unlock()
		return nil
	}
	s.Publish(data)
	return nil
}

// Publish appends data to the history and hands it to every subscriber
// without waiting; a subscriber with a full queue is dropped. It does
// nothing once the backend is closed. data must not be modified
// afterwards. Emit calls it; it is exported for streams fed from
// elsewhere than a hub (a finished run read back from its file).
func (s *StreamBackend) Publish(data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.seq++
	it := StreamItem{Seq: s.seq, Data: data}
	s.hist = append(s.hist, it)
	s.histBytes += len(data) + streamItemOverhead
	for s.histBytes > s.histCap && len(s.hist) > 1 {
		s.histBytes -= len(s.hist[0].Data) + streamItemOverhead
		s.hist[0] = StreamItem{} // let the data go (subscribers hold copies of the slice)
		s.hist = s.hist[1:]
		s.histDropped++
	}
	for sub := range s.subs {
		select {
		case sub.c <- it:
		default:
			s.slowDropped++
			s.endLocked(sub, ErrSlowSubscriber)
		}
	}
}

// Close ends the stream: every subscriber's channel is closed after the
// items it holds (ErrStreamEnded), and later subscribers get the history
// and a closed channel. Items published before Close stay readable.
func (s *StreamBackend) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for sub := range s.subs {
		s.endLocked(sub, ErrStreamEnded)
	}
	close(s.done)
	return nil
}

// Done is closed when the backend is closed.
func (s *StreamBackend) Done() <-chan struct{} { return s.done }

// endLocked removes sub and closes its channel with err; s.mu is held.
func (s *StreamBackend) endLocked(sub *StreamSubscription, err error) {
	delete(s.subs, sub)
	sub.err = err
	close(sub.c)
}

// Subscribe returns a subscription: the history so far (copied, oldest
// first) and a channel of every later item. On a closed backend the
// channel is already closed (ErrStreamEnded).
func (s *StreamBackend) Subscribe() *StreamSubscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := &StreamSubscription{
		History:        append([]StreamItem(nil), s.hist...),
		HistoryDropped: s.histDropped,
		c:              make(chan StreamItem, s.clientBuf),
		s:              s,
	}
	if s.closed {
		sub.err = ErrStreamEnded
		close(sub.c)
		return sub
	}
	s.subs[sub] = struct{}{}
	return sub
}

// Stats returns the backend's counters.
func (s *StreamBackend) Stats() StreamStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StreamStats{
		Items: s.seq, Skipped: s.skipped, HistoryItems: len(s.hist), HistoryBytes: s.histBytes,
		HistoryDropped: s.histDropped, Subscribers: len(s.subs), SlowDropped: s.slowDropped, Ended: s.closed,
	}
}

// StreamSubscription is one reader of a StreamBackend.
type StreamSubscription struct {
	// History holds the items published before Subscribe, oldest first.
	History []StreamItem
	// HistoryDropped is the number of items that had already left the
	// history (StreamOptions.HistoryBytes): History starts after them.
	HistoryDropped uint64

	c   chan StreamItem
	s   *StreamBackend
	err error // set, under s.mu, before c is closed
}

// C delivers the items published after Subscribe. It is closed when the
// stream ends, the subscriber is dropped for being slow, or Close is
// called; Err then says which.
func (sub *StreamSubscription) C() <-chan StreamItem { return sub.c }

// Err returns why C was closed: ErrStreamEnded, ErrSlowSubscriber or
// ErrUnsubscribed; nil while it is open.
func (sub *StreamSubscription) Err() error {
	sub.s.mu.Lock()
	defer sub.s.mu.Unlock()
	return sub.err
}

// Close unsubscribes; C is closed (if it is not already). Safe to call
// more than once.
func (sub *StreamSubscription) Close() {
	sub.s.mu.Lock()
	defer sub.s.mu.Unlock()
	if _, ok := sub.s.subs[sub]; ok {
		sub.s.endLocked(sub, ErrUnsubscribed)
	}
}
