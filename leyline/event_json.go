package leyline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/esper-go/esper/internal/strictjson"
)

// The JSON form of a TelemetryEvent is one object with the keys
// event_id, event_type (the type's name), timestamp (RFC 3339 with
// nanoseconds, UTC), seed_id, slot_id, epoch, episode_idx, group_id,
// message, data (the typed payload, see payload_codec.go) and severity
// (lower-case name). An empty SeedID or SlotID and a nil Epoch or
// EpisodeIdx are written as null. Floats in data round-trip exactly;
// NaN and ±Inf are written as "NaN", "Infinity" and "-Infinity".

type eventEnvelope struct {
	EventID    string          `json:"event_id"`
	EventType  string          `json:"event_type"`
	Timestamp  string          `json:"timestamp"`
	SeedID     *string         `json:"seed_id"`
	SlotID     *string         `json:"slot_id"`
	Epoch      *int            `json:"epoch"`
	EpisodeIdx *int            `json:"episode_idx"`
	GroupID    string          `json:"group_id"`
	Message    string          `json:"message"`
	Data       json.RawMessage `json:"data"`
	Severity   string          `json:"severity"`
}

// eventRequiredKeys must be present when an event is decoded.
var eventRequiredKeys = []string{"event_id", "event_type", "timestamp", "severity"}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// MarshalJSON encodes the event. The payload must match the event type
// (see NewPayload) and pass its Validate; an event that could not be read
// back is an error, not a file full of surprises.
func (e TelemetryEvent) MarshalJSON() ([]byte, error) {
	name, err := e.Type.MarshalText()
	if err != nil {
		return nil, err
	}
	if e.Type == EventUnknown {
		return nil, fmt.Errorf("leyline: cannot encode an event of type UNKNOWN")
	}
	sev, err := e.Severity.MarshalText()
	if err != nil {
		return nil, err
	}
	env := eventEnvelope{
		EventID:    e.EventID,
		EventType:  string(name),
		Timestamp:  e.Timestamp.UTC().Format(time.RFC3339Nano),
		SeedID:     optString(e.SeedID),
		SlotID:     optString(e.SlotID),
		Epoch:      e.Epoch,
		EpisodeIdx: e.EpisodeIdx,
		GroupID:    e.GroupID,
		Message:    e.Message,
		Data:       json.RawMessage("null"),
		Severity:   string(sev),
	}
	if e.Data != nil {
		if !PayloadMatches(e.Type, e.Data) {
			return nil, fmt.Errorf("leyline: event %s carries a %T payload", e.Type, e.Data)
		}
		if err := e.Data.Validate(); err != nil {
			return nil, fmt.Errorf("leyline: event %s: %w", e.Type, err)
		}
		if env.Data, err = encodePayload(e.Data); err != nil {
			return nil, err
		}
	}
	return json.Marshal(env)
}

// UnmarshalJSON decodes an event. The payload type follows event_type;
// an unknown event type, a missing envelope key (event_id, event_type,
// timestamp, severity), an unknown key, a key given twice in one object
// (anywhere in the event: encoding/json would keep the last silently), or
// a missing required payload field is an error naming the payload and the
// field.
func (e *TelemetryEvent) UnmarshalJSON(b []byte) error {
	if err := strictjson.NoDuplicateKeys(b); err != nil {
		return fmt.Errorf("leyline: TelemetryEvent: %w", err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return fmt.Errorf("leyline: TelemetryEvent: %w", err)
	}
	if keys == nil {
		return fmt.Errorf("leyline: TelemetryEvent: null")
	}
	for _, k := range eventRequiredKeys {
		if v, ok := keys[k]; !ok || string(v) == "null" {
			return fmt.Errorf("leyline: TelemetryEvent: %w: %q", ErrMissingField, k)
		}
	}
	var env eventEnvelope
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return fmt.Errorf("leyline: TelemetryEvent: %w", err)
	}
	typ, err := ParseEventType(env.EventType)
	if err != nil {
		return err
	}
	if typ == EventUnknown {
		return fmt.Errorf("leyline: TelemetryEvent: event type UNKNOWN cannot be decoded")
	}
	ts, err := time.Parse(time.RFC3339Nano, env.Timestamp)
	if err != nil {
		return fmt.Errorf("leyline: TelemetryEvent: timestamp: %w", err)
	}
	sev, err := ParseSeverity(env.Severity)
	if err != nil {
		return err
	}
	out := TelemetryEvent{
		EventID:    env.EventID,
		Type:       typ,
		Timestamp:  ts.UTC(),
		Epoch:      env.Epoch,
		EpisodeIdx: env.EpisodeIdx,
		GroupID:    env.GroupID,
		Message:    env.Message,
		Severity:   sev,
	}
	if _, ok := keys["group_id"]; !ok {
		out.GroupID = "default"
	}
	if env.SeedID != nil {
		out.SeedID = *env.SeedID
	}
	if env.SlotID != nil {
		out.SlotID = *env.SlotID
	}
	if len(env.Data) > 0 && string(env.Data) != "null" {
		p, err := NewPayload(typ)
		if err != nil {
			return err
		}
		if err := decodePayload(env.Data, p); err != nil {
			return fmt.Errorf("leyline: event %s: %w", typ, err)
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("leyline: event %s: %w", typ, err)
		}
		out.Data = p
	}
	*e = out
	return nil
}

// MarshalPayload encodes a payload alone, with the event codec's rules.
func MarshalPayload(p Payload) ([]byte, error) {
	if p == nil {
		return []byte("null"), nil
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return encodePayload(p)
}

// UnmarshalPayload decodes the payload of event type t from its JSON
// object, failing on missing required fields, unknown keys and keys given
// twice.
func UnmarshalPayload(t EventType, b []byte) (Payload, error) {
	if err := strictjson.NoDuplicateKeys(b); err != nil {
		return nil, fmt.Errorf("leyline: payload %s: %w", t, err)
	}
	p, err := NewPayload(t)
	if err != nil {
		return nil, err
	}
	if err := decodePayload(b, p); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}
