package nissa

import (
	"sync"
	"time"

	"github.com/esper-go/esper/leyline"
)

// MemoryBackend records every event in memory, for tests. It is safe to
// read from any goroutine while the hub writes to it.
type MemoryBackend struct {
	name    string
	mu      sync.Mutex
	events  []leyline.TelemetryEvent
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

// Name returns the backend's name.
func (m *MemoryBackend) Name() string { return m.name }

// Start does nothing.
func (m *MemoryBackend) Start() error { return nil }

// Close does nothing; the recorded events stay readable.
func (m *MemoryBackend) Close() error { return nil }

// Emit records ev.
func (m *MemoryBackend) Emit(ev leyline.TelemetryEvent) error {
	m.mu.Lock()
	m.events = append(m.events, ev)
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

// Events returns a copy of the recorded events, oldest first.
func (m *MemoryBackend) Events() []leyline.TelemetryEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]leyline.TelemetryEvent, len(m.events))
	copy(out, m.events)
	return out
}

// Len returns the number of recorded events.
func (m *MemoryBackend) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.events)
}

// Reset forgets every recorded event.
func (m *MemoryBackend) Reset() {
	m.mu.Lock()
	m.events = nil
	m.notifyLocked()
	m.mu.Unlock()
}

// WaitFor blocks until at least n events are recorded or timeout passes,
// and reports whether n were reached.
func (m *MemoryBackend) WaitFor(n int, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		m.mu.Lock()
		if len(m.events) >= n {
			m.mu.Unlock()
			return true
		}
		ch := m.changed
		m.waited = true
		m.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return m.Len() >= n
		}
	}
}
