package leyline

import (
	"encoding/json"
	"testing"

	"github.com/esper-go/esper/internal/fuzzcheck"
)

// FuzzEventJSON feeds the event decoder arbitrary JSON (seeded with one
// full event of every type): it decodes or errs, never panics, allocates
// in proportion to the input, and what decodes re-encodes to an event
// that decodes to the same thing.
func FuzzEventJSON(f *testing.F) {
	for _, et := range EventTypes() {
		b, err := json.Marshal(fullEvent(f, et))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"event_id":"x","event_type":"METRICS","timestamp":"2026-01-01T00:00:00Z","severity":"info","event_type":"METRICS"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var e TelemetryEvent
		var err error
		fuzzcheck.Budget(t, "TelemetryEvent.UnmarshalJSON", len(data), fuzzcheck.Linear(len(data), 32, 64<<10), func() {
			err = json.Unmarshal(data, &e)
		})
		if err != nil {
			return
		}
		again, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("a decoded event does not encode: %v", err)
		}
		var back TelemetryEvent
		if err := json.Unmarshal(again, &back); err != nil {
			t.Fatalf("a re-encoded event does not decode: %v\n%s", err, again)
		}
		if b2, _ := json.Marshal(back); string(b2) != string(again) {
			t.Fatalf("round trip changed the event:\n%s\n%s", again, b2)
		}
	})
}

// FuzzPayload feeds UnmarshalPayload arbitrary JSON for every event type.
func FuzzPayload(f *testing.F) {
	for _, et := range EventTypes() {
		b, err := MarshalPayload(fullPayload(f, et))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(et), b)
	}
	f.Fuzz(func(t *testing.T, typ uint8, data []byte) {
		et := EventType(int(typ) % int(numEventTypes))
		fuzzcheck.Budget(t, "UnmarshalPayload", len(data), fuzzcheck.Linear(len(data), 32, 64<<10), func() {
			p, err := UnmarshalPayload(et, data)
			if (p == nil) == (err == nil) {
				t.Fatalf("%v: payload %v with error %v", et, p, err)
			}
		})
	})
}
