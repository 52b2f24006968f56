package nissa

import (
	"testing"

	"github.com/esper-go/esper/leyline"
)

// BenchmarkHubEmit is the emitter's cost of one event into a hub with one
// bounded in-memory backend, the backend worker running alongside.
func BenchmarkHubEmit(b *testing.B) {
	h := NewHub(HubOptions{QueueSize: 1 << 16, BackendQueueSize: 1 << 16})
	defer h.Close(longWait)
	if err := h.AddBackend(NewBoundedMemoryBackend("m", 256)); err != nil {
		b.Fatal(err)
	}
	ev := leyline.NewEvent(leyline.EventEpochCompleted, &leyline.EpochCompletedPayload{})
	for b.Loop() {
		h.Emit(ev)
	}
}
