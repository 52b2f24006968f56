package leyline

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// EventType names what a TelemetryEvent reports. Its JSON form is the
// upper-case name ("SEED_GERMINATED").
type EventType int

// Event types (esper-reference.md §1.6). The numbering is internal; the
// name is the contract.
const (
	EventUnknown EventType = iota
	EventSeedGerminated
	EventSeedStageChanged
	EventSeedGateEvaluated
	EventSeedFossilized
	EventSeedPruned
	EventEpochCompleted
	EventBatchEpochCompleted
	EventPhaseProfileCompleted
	EventPlateauDetected
	EventDegradationDetected
	EventImprovementDetected
	EventTamiyoInitiated
	EventGradientAnomaly
	EventPerformanceDegradation
	EventPPOUpdateCompleted
	EventMemoryWarning
	EventRewardHackingSuspected
	EventRatioExplosionDetected
	EventRatioCollapseDetected
	EventValueCollapseDetected
	EventGradientPathologyDetected
	EventNumericalInstabilityDetected
	EventGovernorRollback
	EventMorphologyCausalLog
	EventTopologyManifestRecorded
	EventTrainingStarted
	EventCheckpointLoaded
	EventCounterfactualMatrixComputed
	EventAnalyticsSnapshot
	EventEpisodeOutcome
	EventAllocatorStats
	// EventMetrics carries a batch of named metric values (MetricsPayload):
	// the Go home of the first generation's telemetry packets, used for
	// the tolaria.*, tamiyo.* and kasmina.* metric names.
	EventMetrics
	numEventTypes
)

var eventTypeNames = [numEventTypes]string{
	"UNKNOWN", "SEED_GERMINATED", "SEED_STAGE_CHANGED", "SEED_GATE_EVALUATED",
	"SEED_FOSSILIZED", "SEED_PRUNED", "EPOCH_COMPLETED", "BATCH_EPOCH_COMPLETED",
	"PHASE_PROFILE_COMPLETED", "PLATEAU_DETECTED", "DEGRADATION_DETECTED",
	"IMPROVEMENT_DETECTED", "TAMIYO_INITIATED", "GRADIENT_ANOMALY",
	"PERFORMANCE_DEGRADATION", "PPO_UPDATE_COMPLETED", "MEMORY_WARNING",
	"REWARD_HACKING_SUSPECTED", "RATIO_EXPLOSION_DETECTED", "RATIO_COLLAPSE_DETECTED",
	"VALUE_COLLAPSE_DETECTED", "GRADIENT_PATHOLOGY_DETECTED",
	"NUMERICAL_INSTABILITY_DETECTED", "GOVERNOR_ROLLBACK", "MORPHOLOGY_CAUSAL_LOG",
	"TOPOLOGY_MANIFEST_RECORDED", "TRAINING_STARTED", "CHECKPOINT_LOADED",
	"COUNTERFACTUAL_MATRIX_COMPUTED", "ANALYTICS_SNAPSHOT", "EPISODE_OUTCOME",
	"ALLOCATOR_STATS", "METRICS",
}

// EventTypes returns every event type except EventUnknown.
func EventTypes() []EventType {
	out := make([]EventType, 0, numEventTypes-1)
	for t := EventType(1); t < numEventTypes; t++ {
		out = append(out, t)
	}
	return out
}

// String returns the event type's upper-case name.
func (t EventType) String() string {
	if t >= 0 && t < numEventTypes {
		return eventTypeNames[t]
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// ParseEventType returns the event type with the given name.
func ParseEventType(name string) (EventType, error) {
	for t := EventType(0); t < numEventTypes; t++ {
		if eventTypeNames[t] == name {
			return t, nil
		}
	}
	return 0, fmt.Errorf("leyline: unknown event type %q", name)
}

// MarshalText encodes the type as its name.
func (t EventType) MarshalText() ([]byte, error) {
	if t < 0 || t >= numEventTypes {
		return nil, fmt.Errorf("leyline: cannot encode event type %d", int(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText decodes an event type name.
func (t *EventType) UnmarshalText(b []byte) error {
	v, err := ParseEventType(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// Severity grades an event. The zero value is SeverityInfo.
type Severity int

// Severities, lowest first.
const (
	SeverityInfo Severity = iota
	SeverityDebug
	SeverityWarning
	SeverityError
	SeverityCritical
)

// Rank orders severities from debug (0) to critical (4), for filters.
func (s Severity) Rank() int {
	switch s {
	case SeverityDebug:
		return 0
	case SeverityInfo:
		return 1
	case SeverityWarning:
		return 2
	case SeverityError:
		return 3
	case SeverityCritical:
		return 4
	}
	return -1
}

// String returns the lower-case name ("info").
func (s Severity) String() string {
	switch s {
	case SeverityDebug:
		return "debug"
	case SeverityInfo:
		return "info"
	case SeverityWarning:
		return "warning"
	case SeverityError:
		return "error"
	case SeverityCritical:
		return "critical"
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// ParseSeverity returns the severity with the given lower-case name.
func ParseSeverity(name string) (Severity, error) {
	for s := SeverityInfo; s <= SeverityCritical; s++ {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("leyline: unknown severity %q (debug, info, warning, error, critical)", name)
}

// MarshalText encodes the severity as its name.
func (s Severity) MarshalText() ([]byte, error) {
	if s.Rank() < 0 {
		return nil, fmt.Errorf("leyline: cannot encode severity %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes a severity name.
func (s *Severity) UnmarshalText(b []byte) error {
	v, err := ParseSeverity(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Payload is the typed data of an event. Each event type has one payload
// type (see payloads.go); Validate reports a missing or invalid required
// field.
type Payload interface {
	Validate() error
}

// TelemetryEvent is one thing that happened, as every backend sees it.
// Absent fields stay absent: an empty SeedID or SlotID and a nil Epoch
// encode as JSON null, never as a made-up value.
type TelemetryEvent struct {
	EventID   string
	Type      EventType
	Timestamp time.Time
	SeedID    string
	SlotID    string
	Epoch     *int
	// EpisodeIdx is the Simic episode the event belongs to, when known.
	EpisodeIdx *int
	GroupID    string
	Message    string
	Data       Payload
	Severity   Severity
}

// NewEvent returns an event of type t with data, a fresh random id, the
// current UTC time, group "default" and severity info.
func NewEvent(t EventType, data Payload) TelemetryEvent {
	return TelemetryEvent{
		EventID:   NewEventID(),
		Type:      t,
		Timestamp: time.Now().UTC(),
		GroupID:   "default",
		Data:      data,
		Severity:  SeverityInfo,
	}
}

// NewEventID returns a unique RFC 4122 version-4-formatted UUID string.
//
// It is cheap (no system call per id): the first 64 bits are a random
// prefix drawn once per process from crypto/rand (60 random bits after
// the version nibble); the last 64 bits hold the variant and a 62-bit
// per-process counter passed through a fixed bijection (so ids do not
// look sequential). Ids are therefore unique within a process (the
// counter never repeats before 2^62 ids) and across processes as long as
// their random prefixes differ (a collision needs two processes drawing
// the same 60 bits). They are not unpredictable: do not use them as
// secrets.
func NewEventID() string {
	idOnce.Do(initEventIDs)
	c := idCounter.Add(1)
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], idPrefix)
	binary.BigEndian.PutUint64(b[8:16], 2<<62|mix62(c))
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:36], b[10:16])
	return string(s[:])
}

var (
	idOnce    sync.Once
	idPrefix  uint64 // random, with the version-4 nibble set
	idKey     uint64 // random, mixed into the counter
	idCounter atomic.Uint64
)

func initEventIDs() {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("leyline: crypto/rand failed: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	idPrefix = binary.BigEndian.Uint64(b[0:8])
	idKey = binary.BigEndian.Uint64(b[8:16])
}

// mask62 keeps the low 62 bits.
const mask62 = 1<<62 - 1

// mix62 maps c to a 62-bit value; for c below 2^62 it is a bijection
// (an xor with a key, xor-shifts and a multiplication by an odd
// constant, all modulo 2^62), so distinct counters give distinct ids.
func mix62(c uint64) uint64 {
	x := (c ^ idKey) & mask62
	x ^= x >> 31
	x = x * 0xbf58476d1ce4e5b9 & mask62
	x ^= x >> 27
	x = x * 0x94d049bb133111eb & mask62
	x ^= x >> 31
	return x
}

// IntPtr returns a pointer to v, for the optional integer fields.
func IntPtr(v int) *int { return &v }
