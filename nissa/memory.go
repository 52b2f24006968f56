package nissa

import (
	"sync"
	"time"

	"github.com/esper-go/esper/leyline"
)

// MemoryBackend records events in memory: every event (NewMemoryBackend,
// for tests) or the newest few (NewBoundedMemoryBackend, for long runs
// and benchmarks, whose memory then stays flat). It is safe to read from
// any goroutine while the hub writes to it.
type MemoryBackend struct {
	name    string
	mu      sync.Mutex
	events  []leyline.TelemetryEvent
	keep    int // 0: every event; else a ring of keep events starting at head
	head    int
	total   int           // events received since creation or Reset
	changed chan struct{} // closed and replaced on an append or Reset after WaitFor took it
	waited  bool          // WaitFor holds changed
}

// NewMemoryBackend returns an empty recorder named name ("memory" if
// empty).
func NewMemoryBackend(name string) *MemoryBackend {
	if name == "" {
		name = "memory"
	}
	return &MemoryBackend{name: name, changed: make(chan struct{})}
}

// NewBoundedMemoryBackend returns an empty recorder named name ("memory"
// if empty) that holds only the newest keep events (keep > 0; it panics
// otherwise), in memory allocated once; Total still counts every event.
func NewBoundedMemoryBackend(name string, keep int) *MemoryBackend {
	if keep <= 0 {
		panic("nissa: NewBoundedMemoryBackend: keep must be > 0")
	}
	m := NewMemoryBackend(name)
	m.keep = keep
	m.events = make([]leyline.TelemetryEvent, 0, keep)
	return m
}

// Name returns the backend's name.
func (m *MemoryBackend) Name() string { return m.name }

// Start does nothing.
func (m *MemoryBackend) Start() error { return nil }

// Close does nothing; the recorded events stay readable.
func (m *MemoryBackend) Close() error { return nil }

// Emit records ev (replacing the oldest held event when bounded and
// full).
func (m *MemoryBackend) Emit(ev leyline.TelemetryEvent) error {
	m.mu.Lock()
	m.total++
	if m.keep == 0 || len(m.events) < m.keep {
		m.events = append(m.events, ev)
	} else {
		m.events[m.head] = ev
		m.head = (m.head + 1) % m.keep
	}
	m.notifyLocked()
	m.mu.Unlock()
	return nil
}

func (m *MemoryBackend) notifyLocked() {
	if !m.waited {
		return // nobody waits: no channel to close, nothing to allocate
	}
	close(m.changed)
	m.changed = make(chan struct{})
	m.waited = false
}

// Events returns a copy of the held events, oldest first.
func (m *MemoryBackend) Events() []leyline.TelemetryEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]leyline.TelemetryEvent, 0, len(m.events))
	out = append(out, m.events[m.head:]...)
	return append(out, m.events[:m.head]...)
}

// Total returns the number of events received since creation or the last
// Reset, held or not.
func (m *MemoryBackend) Total() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}

// Len returns the number of held events (all received ones unless
// bounded).
func (m *MemoryBackend) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.events)
}

// Reset forgets every recorded event.
func (m *MemoryBackend) Reset() {
	m.mu.Lock()
	if m.keep == 0 {
		m.events = nil
	} else {
		m.events = m.events[:0]
	}
	m.head, m.total = 0, 0
	m.notifyLocked()
	m.mu.Unlock()
}

// WaitFor blocks until at least n events have been received (Total) or
// timeout passes, and reports whether n were reached.
func (m *MemoryBackend) WaitFor(n int, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		m.mu.Lock()
		if m.total >= n {
			m.mu.Unlock()
			return true
		}
		ch := m.changed
		m.waited = true
		m.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return m.Total() >= n
		}
	}
}
