package nissa

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/esper-go/esper/leyline"
)

// Defaults for HubOptions and the hub's deadlines (G2 NissaHub).
const (
	// DefaultQueueSize is the hub queue's capacity (G2 max_queue_size).
	DefaultQueueSize = 1000
	// DefaultBackendQueueSize is each backend queue's capacity (G2
	// backend_queue_size).
	DefaultBackendQueueSize = 100
	// DefaultCloseTimeout is what Close waits when given no timeout (G2
	// close timeout).
	DefaultCloseTimeout = 10 * time.Second
	// DefaultRemoveTimeout is how long RemoveBackend waits for the
	// backend's worker to finish (G2 BackendWorker.stop timeout).
	DefaultRemoveTimeout = 5 * time.Second
)

// Errors returned by the hub; match them with errors.Is.
var (
	// ErrClosed is returned when the hub has been closed.
	ErrClosed = errors.New("nissa: hub closed")
	// ErrDuplicateBackend is returned by AddBackend for a name already
	// on the hub.
	ErrDuplicateBackend = errors.New("nissa: duplicate backend name")
	// ErrUnknownBackend is returned by RemoveBackend for a name not on
	// the hub.
	ErrUnknownBackend = errors.New("nissa: unknown backend")
	// ErrStuckBackend is wrapped by Close and RemoveBackend when a
	// backend did not finish within the deadline; its goroutine is
	// abandoned.
	ErrStuckBackend = errors.New("nissa: backend did not stop in time")
)

// HubOptions configures a Hub. The zero value gives the defaults.
type HubOptions struct {
	// QueueSize is the hub queue's capacity; default DefaultQueueSize.
	QueueSize int
	// BackendQueueSize is each backend queue's capacity; default
	// DefaultBackendQueueSize.
	BackendQueueSize int
	// Logger receives drop warnings and backend errors. Nil discards
	// them: a library should not write to stderr unasked, and every drop
	// is visible through Health anyway. The CLI passes its own logger.
	Logger *slog.Logger
}

// Hub fans telemetry events out to backends without blocking the caller
// (see the package documentation). Create it with NewHub; it is safe for
// concurrent use.
type Hub struct {
	log        *slog.Logger
	queue      chan hubItem
	backendCap int

	// emitMu orders Emit against Close: Emit sends under the read lock,
	// Close flips closed under the write lock, so nothing is accepted
	// after Close has started and everything accepted before it is
	// ahead of the stop token in the queue.
	emitMu sync.RWMutex
	closed bool // written under emitMu and mu both

	// mu serialises AddBackend, RemoveBackend and Close.
	mu      sync.Mutex
	workers atomic.Pointer[[]*worker] // copy-on-write, read by the hub goroutine

	emitted           atomic.Uint64
	dropped           atomic.Uint64
	droppedAfterClose atomic.Uint64
	warnedAfterClose  atomic.Bool
	resume            chan struct{} // tests only: nil, or the hub goroutine waits for it
	// kick wakes the hub goroutine from its batching nap (see run):
	// control tokens and a half-full queue send it.
	kick chan struct{}
	done chan struct{} // closed when the hub goroutine returns
}

// hubItem is one entry of the hub queue: an event, or a control token.
type hubItem struct {
	ev    leyline.TelemetryEvent
	flush chan []flushTarget // barrier: reply with each worker's target
	stop  bool
}

// flushTarget says how many events a worker must have handled for a
// barrier to have passed it.
type flushTarget struct {
	w      *worker
	target uint64
}

// prefaulted fills c to capacity with zero values and drains it, so that
// the operating system has mapped every page of its buffer: otherwise the
// first lap of events through a large queue takes a page fault every few
// dozen events, a stall of microseconds on the emitting goroutine. c must
// not be in use yet.
func prefaulted[T any](c chan T) chan T {
	var z T
	for len(c) < cap(c) {
		c <- z
	}
	for len(c) > 0 {
		<-c
	}
	return c
}

// NewHub returns a running hub with no backends.
func NewHub(opts HubOptions) *Hub {
	return newHub(opts, nil)
}

// newHub lets internal tests hold the hub goroutine until resume closes.
func newHub(opts HubOptions, resume chan struct{}) *Hub {
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.BackendQueueSize <= 0 {
		opts.BackendQueueSize = DefaultBackendQueueSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Hub{
		log:        opts.Logger,
		queue:      prefaulted(make(chan hubItem, opts.QueueSize)),
		backendCap: opts.BackendQueueSize,
		resume:     resume,
		kick:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	h.workers.Store(&[]*worker{})
	go h.run()
	return h
}

// Emit hands ev to the hub without blocking: the only lock it takes is
// never held across a blocking operation. When the hub queue is full,
// or the hub is closed, the event is dropped and counted; the first drop
// and every 1000th are logged, and so is the first emit after Close.
func (h *Hub) Emit(ev leyline.TelemetryEvent) {
	h.emitted.Add(1)
	h.emitMu.RLock()
	if h.closed {
		h.emitMu.RUnlock()
		h.dropped.Add(1)
		h.droppedAfterClose.Add(1)
		if !h.warnedAfterClose.Swap(true) {
			h.log.Warn("nissa: event emitted after hub close; dropped",
				"event_type", ev.Type.String())
		}
		return
	}
	select {
	case h.queue <- hubItem{ev: ev}:
		h.emitMu.RUnlock()
		if len(h.queue) >= cap(h.queue)/2 {
			h.wake() // do not let a napping hub fill up and drop
		}
	default:
		h.emitMu.RUnlock()
		n := h.dropped.Add(1)
		if n == 1 || n%1000 == 0 {
			h.log.Warn("nissa: hub queue full; event dropped",
				"event_type", ev.Type.String(), "dropped_total", n, "queue_size", cap(h.queue))
		}
	}
}

// AddBackend starts b and adds it to the fan-out; events emitted from now
// on reach it. A Start failure is logged and returned, and b is not
// added. Adding to a closed hub, or under a name already present, fails
// without starting b.
func (h *Hub) AddBackend(b Backend) error {
	name := b.Name()
	h.mu.Lock()
	err := h.checkAddLocked(name)
	h.mu.Unlock()
	if err != nil {
		return err
	}
	// Start may be slow (it opens files); it runs outside the lock.
	if err := b.Start(); err != nil {
		h.log.Error("nissa: backend failed to start", "backend", name, "error", err)
		return fmt.Errorf("nissa: start backend %q: %w", name, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.checkAddLocked(name); err != nil {
		// Lost a race with Close or another AddBackend of the same name.
		if cerr := b.Close(); cerr != nil {
			h.log.Error("nissa: backend close failed", "backend", name, "error", cerr)
		}
		return err
	}
	w := newWorker(b, h.backendCap, h.log)
	old := *h.workers.Load()
	next := make([]*worker, len(old), len(old)+1)
	copy(next, old)
	next = append(next, w)
	h.workers.Store(&next)
	go w.run()
	return nil
}

func (h *Hub) checkAddLocked(name string) error {
	if h.closed {
		return fmt.Errorf("nissa: add backend %q: %w", name, ErrClosed)
	}
	for _, w := range *h.workers.Load() {
		if w.name == name {
			return fmt.Errorf("nissa: add backend %q: %w", name, ErrDuplicateBackend)
		}
	}
	return nil
}

// RemoveBackend takes the named backend off the fan-out, lets its worker
// finish what it had queued, then closes the backend. It is safe while
// other goroutines emit. It waits at most DefaultRemoveTimeout; a backend
// still busy then is abandoned and ErrStuckBackend is returned. A close
// error from the backend is returned too.
func (h *Hub) RemoveBackend(name string) error {
	h.mu.Lock()
	old := *h.workers.Load()
	idx := -1
	for i, w := range old {
		if w.name == name {
			idx = i
			break
		}
	}
	if idx < 0 {
		h.mu.Unlock()
		return fmt.Errorf("nissa: remove backend %q: %w", name, ErrUnknownBackend)
	}
	w := old[idx]
	next := make([]*worker, 0, len(old)-1)
	next = append(next, old[:idx]...)
	next = append(next, old[idx+1:]...)
	h.workers.Store(&next)
	h.mu.Unlock()

	// The hub goroutine may still hand the worker an event it picked up
	// before the swap; the worker drains what it can and exits, and any
	// straggler is simply never read.
	w.signalStop()
	t := time.NewTimer(DefaultRemoveTimeout)
	defer t.Stop()
	select {
	case <-w.done:
		if w.closeErr != nil {
			return fmt.Errorf("nissa: close backend %q: %w", name, w.closeErr)
		}
		return nil
	case <-t.C:
		h.log.Error("nissa: backend did not stop in time; abandoned", "backend", name)
		return fmt.Errorf("nissa: remove backend %q after %v: %w", name, DefaultRemoveTimeout, ErrStuckBackend)
	}
}

// Backends returns the names of the backends on the hub, in the order
// they were added.
func (h *Hub) Backends() []string {
	ws := *h.workers.Load()
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.name
	}
	return out
}

// Flush waits until every event emitted before the call has been handled
// by every backend (delivered, or failed and counted), then calls Flush
// on the backends that buffer. Events the hub or a backend queue dropped
// are not waited for. It returns nil on success, an error wrapping
// ctx.Err() when ctx ends first (for example, a stuck backend), ErrClosed
// on a closed hub, and the backends' flush errors joined.
func (h *Hub) Flush(ctx context.Context) error {
	targets, err := h.barrier(ctx)
	if err != nil {
		return err
	}
	for _, t := range targets {
		if err := t.w.waitFor(ctx, t.target); err != nil {
			return fmt.Errorf("nissa: flush: backend %q: %w", t.w.name, err)
		}
	}
	var errs []error
	for _, t := range targets {
		if err := t.w.flushBackend(ctx); err != nil {
			errs = append(errs, fmt.Errorf("nissa: flush backend %q: %w", t.w.name, err))
		}
	}
	return errors.Join(errs...)
}

// barrier sends a token through the hub queue and returns, once the hub
// goroutine has dispatched everything ahead of it, how far each worker
// must get for the token to have passed it.
func (h *Hub) barrier(ctx context.Context) ([]flushTarget, error) {
	h.emitMu.RLock()
	closed := h.closed
	h.emitMu.RUnlock()
	if closed {
		return nil, fmt.Errorf("nissa: flush: %w", ErrClosed)
	}
	reply := make(chan []flushTarget, 1)
	select {
	case h.queue <- hubItem{flush: reply}:
		h.wake()
	case <-ctx.Done():
		return nil, fmt.Errorf("nissa: flush: %w", ctx.Err())
	case <-h.done:
		return nil, fmt.Errorf("nissa: flush: %w", ErrClosed)
	}
	select {
	case t := <-reply:
		return t, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("nissa: flush: %w", ctx.Err())
	case <-h.done:
		// Close overtook the token; the reply may still have been sent.
		select {
		case t := <-reply:
			return t, nil
		default:
			return nil, fmt.Errorf("nissa: flush: %w", ErrClosed)
		}
	}
}

// Close stops accepting events, lets every backend handle what was
// emitted before the call, closes the backends and stops their workers.
// It returns within timeout (DefaultCloseTimeout when timeout ≤ 0): a
// backend still busy then is abandoned, named in the returned error
// (wrapping ErrStuckBackend), and its goroutine left to finish on its
// own. Backend close errors are returned joined. Closing a closed hub
// returns nil.
func (h *Hub) Close(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultCloseTimeout
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()

	h.mu.Lock()
	h.emitMu.Lock()
	already := h.closed
	h.closed = true
	h.emitMu.Unlock()
	h.mu.Unlock()
	if already {
		return nil
	}

	// The hub goroutine never blocks, so this send only waits for it to
	// drain events accepted before the flag flipped.
	select {
	case h.queue <- hubItem{stop: true}:
		h.wake()
	case <-h.done:
	case <-deadline.C:
		return fmt.Errorf("nissa: close: hub queue not drained within %v: %w", timeout, ErrStuckBackend)
	}
	select {
	case <-h.done:
	case <-deadline.C:
		return fmt.Errorf("nissa: close: hub dispatcher not stopped within %v: %w", timeout, ErrStuckBackend)
	}

	var errs []error
	var stuck []string
	expired := false
	for _, w := range *h.workers.Load() {
		if !expired {
			select {
			case <-w.done:
			case <-deadline.C:
				expired = true
			}
		}
		select {
		case <-w.done:
			if w.closeErr != nil {
				errs = append(errs, fmt.Errorf("nissa: close backend %q: %w", w.name, w.closeErr))
			}
		default:
			stuck = append(stuck, w.name)
		}
	}
	if len(stuck) > 0 {
		h.log.Error("nissa: backends did not stop in time; abandoned", "backends", stuck, "timeout", timeout)
		errs = append(errs, fmt.Errorf("nissa: close: backends [%s] did not stop within %v: %w",
			strings.Join(stuck, ", "), timeout, ErrStuckBackend))
	}
	return errors.Join(errs...)
}

// hubNap is how long the hub goroutine waits, after draining its queue
// while events keep coming, before looking again; hubNaps empty looks in
// a row put it back to sleep until the next event.
const (
	hubNap  = time.Millisecond
	hubNaps = 4
)

// wake cuts the hub goroutine's nap short (non-blocking).
func (h *Hub) wake() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// run is the hub goroutine: it dispatches events to the workers in queue
// order and answers control tokens.
//
// Waking a parked goroutine costs the emitter a scheduler hand-off (on
// a small machine, also CPU taken from it), so the hub batches: once it
// has drained the queue it naps for hubNap, during which Emit only
// buffers; while events keep arriving it wakes once per nap, not once
// per event. After hubNaps empty naps it blocks on the queue again, so
// an idle hub costs nothing, and the next event wakes it at once. Flush
// and Close wake it immediately, and so does a queue half full. Events
// therefore reach the backends within about hubNap of their Emit.
func (h *Hub) run() {
	defer close(h.done)
	if h.resume != nil {
		<-h.resume
	}
	nap := time.NewTimer(time.Hour)
	nap.Stop()
	empty := hubNaps
	for {
		var it hubItem
		select {
		case it = <-h.queue:
		default:
			if empty < hubNaps {
				// Events came recently: nap, then look again.
				empty++
				nap.Reset(hubNap)
				select {
				case <-nap.C:
				case <-h.kick:
					nap.Stop()
				}
				continue
			}
			select {
			case it = <-h.queue:
			case <-h.kick:
				continue
			}
		}
		empty = 0
		if !h.dispatch(it) {
			return
		}
	}
}

// dispatch handles one queue item; false after the stop token.
func (h *Hub) dispatch(it hubItem) bool {
	ws := *h.workers.Load()
	switch {
	case it.stop:
		for _, w := range ws {
			w.signalStop()
		}
		return false
	case it.flush != nil:
		targets := make([]flushTarget, len(ws))
		for i, w := range ws {
			targets[i] = flushTarget{w: w, target: w.enqueued.Load()}
		}
		it.flush <- targets
	default:
		for _, w := range ws {
			w.offer(it.ev)
		}
	}
	return true
}
