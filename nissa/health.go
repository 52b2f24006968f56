package nissa

// Health statuses (G2 NissaHub health snapshot).
const (
	// StatusHealthy means nothing has been dropped anywhere.
	StatusHealthy = "healthy"
	// StatusDegraded means the hub or at least one backend dropped an
	// event.
	StatusDegraded = "degraded"
)

// Health is a point-in-time snapshot of a hub. The counters are read one
// by one while events flow, so they are individually exact but only
// mutually consistent when the hub is idle (after Flush, say).
type Health struct {
	// Status is StatusDegraded if any drop was counted (hub or backend),
	// else StatusHealthy.
	Status string `json:"status"`
	// Closed reports whether Close has been called.
	Closed bool `json:"closed"`
	// Emitted counts every Emit call.
	Emitted uint64 `json:"emitted"`
	// Dropped counts events the hub dropped: queue full, or emitted after
	// Close (those are also in DroppedAfterClose).
	Dropped uint64 `json:"dropped"`
	// DroppedAfterClose counts events emitted after Close.
	DroppedAfterClose uint64 `json:"dropped_after_close"`
	// QueueDepth is the number of entries on the hub queue now.
	QueueDepth int `json:"queue_depth"`
	// QueueCapacity is the hub queue's size.
	QueueCapacity int `json:"queue_capacity"`
	// Backends holds one entry per backend, in the order they were added.
	Backends []BackendStats `json:"backends"`
}

// BackendStats are one backend's counters (G2 BackendWorker stats).
type BackendStats struct {
	// Name is the backend's name.
	Name string `json:"name"`
	// Processed counts events the backend accepted (Emit returned nil).
	Processed uint64 `json:"processed_events"`
	// Dropped counts events the backend lost: its queue was full, or
	// Emit failed or panicked (those are also in Failed).
	Dropped uint64 `json:"dropped_events"`
	// Failed counts Emit calls that returned an error or panicked.
	Failed uint64 `json:"failed_events"`
	// QueueDepth is the number of events waiting on the backend's queue.
	QueueDepth int `json:"queue_depth"`
	// QueueCapacity is the backend queue's size.
	QueueCapacity int `json:"queue_capacity"`
	// AvgProcessingMs is the mean time of an Emit call (successful or
	// not), in milliseconds.
	AvgProcessingMs float64 `json:"avg_processing_time_ms"`
	// TotalProcessingS is the total time spent in Emit, in seconds.
	TotalProcessingS float64 `json:"total_processing_time_s"`
}

// Health returns a snapshot of the hub's queue and drop counters and of
// every backend's stats.
func (h *Hub) Health() Health {
	h.emitMu.RLock()
	closed := h.closed
	h.emitMu.RUnlock()
	out := Health{
		Closed:            closed,
		Emitted:           h.emitted.Load(),
		Dropped:           h.dropped.Load(),
		DroppedAfterClose: h.droppedAfterClose.Load(),
		QueueDepth:        len(h.queue),
		QueueCapacity:     cap(h.queue),
	}
	degraded := out.Dropped > 0
	ws := *h.workers.Load()
	out.Backends = make([]BackendStats, len(ws))
	for i, w := range ws {
		out.Backends[i] = w.stats()
		if out.Backends[i].Dropped > 0 {
			degraded = true
		}
	}
	out.Status = StatusHealthy
	if degraded {
		out.Status = StatusDegraded
	}
	return out
}

// Backend returns the stats of the named backend, and whether it is on
// the hub.
func (h Health) Backend(name string) (BackendStats, bool) {
	for _, b := range h.Backends {
		if b.Name == name {
			return b, true
		}
	}
	return BackendStats{}, false
}
