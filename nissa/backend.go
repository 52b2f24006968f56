package nissa

import "github.com/esper-go/esper/leyline"

// Backend is where a Hub delivers events.
//
// Start is called once, by Hub.AddBackend, before any event; an error
// keeps the backend off the hub. Emit, Flush (if the backend is a Flusher)
// and Close are then called from the backend's own worker goroutine only,
// never concurrently with one another. Emit returning an error (or
// panicking) counts that one event as dropped for this backend; it does
// not stop the worker. Close is called once, after the last Emit, when the
// backend is removed or the hub is closed.
type Backend interface {
	// Name identifies the backend within a hub; it must be unique there.
	Name() string
	// Start acquires what the backend needs (files, connections).
	Start() error
	// Emit delivers one event.
	Emit(ev leyline.TelemetryEvent) error
	// Close flushes what the backend buffers and releases its resources.
	Close() error
}

// Flusher is implemented by backends that buffer output (JSONLBackend,
// DirBackend). Hub.Flush calls Flush on its worker goroutine after the
// backend has received every event emitted before the Hub.Flush call.
type Flusher interface {
	Flush() error
}

// Every backend in this package satisfies Backend; the buffered ones are
// Flushers.
var (
	_ Backend = (*ConsoleBackend)(nil)
	_ Backend = (*JSONLBackend)(nil)
	_ Backend = (*DirBackend)(nil)
	_ Backend = (*MemoryBackend)(nil)
	_ Backend = (*PrometheusBackend)(nil)
	_ Backend = (*StreamBackend)(nil)
	_ Flusher = (*JSONLBackend)(nil)
	_ Flusher = (*DirBackend)(nil)
)
