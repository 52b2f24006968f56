package leyline

import (
	"regexp"
	"testing"
)

// TestNewEventIDUniqueV4: ids are RFC 4122 version-4 formatted and never
// repeat within a process.
func TestNewEventIDUniqueV4(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := make(map[string]bool, 100000)
	for i := 0; i < 100000; i++ {
		id := NewEventID()
		if !re.MatchString(id) {
			t.Fatalf("id %q is not a version-4 UUID", id)
		}
		if seen[id] {
			t.Fatalf("id %q repeated after %d ids", id, i)
		}
		seen[id] = true
	}
}

// TestMix62Bijective: the counter mix maps distinct counters to distinct
// 62-bit values (spot check on consecutive and widely spaced counters).
func TestMix62Bijective(t *testing.T) {
	idOnce.Do(initEventIDs)
	seen := map[uint64]uint64{}
	for _, base := range []uint64{0, 1 << 20, 1 << 40, 1<<62 - 5000} {
		for c := base; c < base+5000; c++ {
			v := mix62(c)
			if v>>62 != 0 {
				t.Fatalf("mix62(%d) = %#x has more than 62 bits", c, v)
			}
			if prev, ok := seen[v]; ok {
				t.Fatalf("mix62(%d) == mix62(%d)", c, prev)
			}
			seen[v] = c
		}
	}
}

func BenchmarkNewEventID(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = NewEventID()
	}
}
