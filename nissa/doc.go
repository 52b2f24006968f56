// Package nissa is Esper's telemetry hub: it takes the events every other
// domain emits (leyline.TelemetryEvent) and fans them out to backends —
// a console summary, a JSONL file, a per-run directory, an in-memory
// recorder for tests, Prometheus, and a stream for live readers (the
// dashboard of package nissa/dashboard) — without ever blocking the
// training loop that emits them.
//
// # Delivery model
//
// Hub.Emit never blocks. It puts the event on a bounded hub queue; when
// the queue is full the event is dropped and counted. One hub goroutine
// takes events off that queue and hands each to one worker per backend.
// Every worker has its own bounded queue (full: drop and count) and its
// own goroutine, so a slow or stuck backend loses its own events and
// nobody else's. While events keep coming the hub goroutine batches them
// (it naps about a millisecond between drains instead of being woken by
// every Emit), so an event reaches the backends within about a
// millisecond; Flush, Close and a half-full queue wake it at once. A backend that returns an error or panics loses that one
// event (counted as a drop for that backend); its worker carries on.
//
// Delivery is best effort by design: telemetry must never slow training
// down. Hub.Health reports every drop, and a hub with any drop reports
// itself "degraded". Hub.Flush waits until everything emitted before the
// call has reached every backend; Hub.Close does the same for everything
// emitted before it and then stops the workers, abandoning (and naming)
// any backend that does not finish within the deadline.
//
// # Backends
//
// A Backend's Emit, Flush and Close run on its worker goroutine only, one
// call at a time, so a backend needs no locking of its own except for
// what it shares with other goroutines (MemoryBackend's Events,
// PrometheusBackend's Collect).
//
// The behaviour follows the second generation of the Python Esper
// (NissaHub, esper-reference.md §6.1); the Prometheus exposition follows
// the first generation's ingestor (§6.2).
package nissa
