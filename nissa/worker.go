package nissa

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/esper-go/esper/leyline"
)

// worker owns one backend: a bounded queue and the goroutine that feeds
// the backend from it. Only the hub goroutine offers events.
type worker struct {
	name  string
	b     Backend
	log   *slog.Logger
	queue chan leyline.TelemetryEvent
	// flushReq carries Hub.Flush's request to run b.Flush on this
	// goroutine, so backends never see concurrent calls.
	flushReq chan chan error
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{} // closed when run returns
	closeErr error         // b.Close's error; read only after done

	enqueued     atomic.Uint64 // events accepted onto queue
	processed    atomic.Uint64 // Emit returned nil
	failed       atomic.Uint64 // Emit returned an error or panicked
	queueDropped atomic.Uint64 // queue was full
	busyNanos    atomic.Int64  // time spent in b.Emit

	mu      sync.Mutex
	handled uint64 // processed + failed, under mu for the waiters
	exited  bool
	waiters []waiter
}

// waiter is a Flush waiting for handled to reach target.
type waiter struct {
	target uint64
	ch     chan struct{}
}

func newWorker(b Backend, queueSize int, log *slog.Logger) *worker {
	return &worker{
		name:     b.Name(),
		b:        b,
		log:      log,
		queue:    prefaulted(make(chan leyline.TelemetryEvent, queueSize)),
		flushReq: make(chan chan error),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// offer enqueues ev without blocking; a full queue drops it. The first
// drop and every 100th are logged (G2 warns on every 100th).
func (w *worker) offer(ev leyline.TelemetryEvent) {
	select {
	case w.queue <- ev:
		w.enqueued.Add(1)
	default:
		n := w.queueDropped.Add(1)
		if n == 1 || n%100 == 0 {
			w.log.Warn("nissa: backend queue full; event dropped",
				"backend", w.name, "event_type", ev.Type.String(), "queue_dropped_total", n)
		}
	}
}

// signalStop asks the worker to drain its queue and exit; safe to call
// more than once.
func (w *worker) signalStop() {
	w.stopOnce.Do(func() { close(w.stop) })
}

func (w *worker) run() {
	defer close(w.done)
	defer w.exit()
	for {
		select {
		case ev := <-w.queue:
			w.handle(ev)
		case reply := <-w.flushReq:
			reply <- w.safeFlush()
		case <-w.stop:
			// Everything the hub goroutine queued before signalling
			// stop is already in the buffer.
			for {
				select {
				case ev := <-w.queue:
					w.handle(ev)
				default:
					w.closeErr = w.safeClose()
					return
				}
			}
		}
	}
}

func (w *worker) handle(ev leyline.TelemetryEvent) {
	start := time.Now()
	err := w.safeEmit(ev)
	w.busyNanos.Add(int64(time.Since(start)))
	if err != nil {
		n := w.failed.Add(1)
		if n == 1 || n%100 == 0 {
			w.log.Error("nissa: backend failed to emit; event dropped",
				"backend", w.name, "event_type", ev.Type.String(), "error", err, "failed_total", n)
		}
	} else {
		w.processed.Add(1)
	}
	w.mu.Lock()
	w.handled++
	kept := w.waiters[:0]
	for _, wt := range w.waiters {
		if w.handled >= wt.target {
			close(wt.ch)
		} else {
			kept = append(kept, wt)
		}
	}
	w.waiters = kept
	w.mu.Unlock()
}

func (w *worker) safeEmit(ev leyline.TelemetryEvent) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in Emit: %v", r)
		}
	}()
	return w.b.Emit(ev)
}

func (w *worker) safeFlush() (err error) {
	f, ok := w.b.(Flusher)
	if !ok {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in Flush: %v", r)
		}
	}()
	return f.Flush()
}

func (w *worker) safeClose() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in Close: %v", r)
		}
	}()
	err = w.b.Close()
	if err != nil {
		w.log.Error("nissa: backend close failed", "backend", w.name, "error", err)
	}
	return err
}

// exit releases every Flush still waiting: nothing more will be handled.
func (w *worker) exit() {
	w.mu.Lock()
	w.exited = true
	for _, wt := range w.waiters {
		close(wt.ch)
	}
	w.waiters = nil
	w.mu.Unlock()
}

// waitFor blocks until the worker has handled target events, has exited,
// or ctx ends.
func (w *worker) waitFor(ctx context.Context, target uint64) error {
	w.mu.Lock()
	if w.handled >= target || w.exited {
		w.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	w.waiters = append(w.waiters, waiter{target: target, ch: ch})
	w.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flushBackend runs the backend's Flush on the worker goroutine.
func (w *worker) flushBackend(ctx context.Context) error {
	if _, ok := w.b.(Flusher); !ok {
		return nil
	}
	reply := make(chan error, 1)
	select {
	case w.flushReq <- reply:
	case <-w.done:
		return nil // Close already flushed it
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stats snapshots the worker's counters.
func (w *worker) stats() BackendStats {
	processed := w.processed.Load()
	failed := w.failed.Load()
	busy := time.Duration(w.busyNanos.Load())
	s := BackendStats{
		Name:             w.name,
		Processed:        processed,
		Dropped:          w.queueDropped.Load() + failed,
		Failed:           failed,
		QueueDepth:       len(w.queue),
		QueueCapacity:    cap(w.queue),
		TotalProcessingS: busy.Seconds(),
	}
	if n := processed + failed; n > 0 {
		s.AvgProcessingMs = float64(busy) / float64(n) / float64(time.Millisecond)
	}
	return s
}
