package tamiyo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// Controller state for checkpoints (tolaria.StatefulController). A checkpoint stores what
// MarshalState returns as a JSON value, and a resumed run restores it with
// UnmarshalState into a controller built with the same options, so that
// it decides exactly as an uninterrupted run would. The formats (schema
// version 1) are:
//
//	SignalTracker: {"version":1, "losses":[…], "accuracies":[…],
//	                "best_accuracy":x, "plateau":n, "stabilized":b,
//	                "stable_count":n, "prev_loss":x, "prev_acc":x}
//	Heuristic:     {"version":1, "topology":"cnn", "rotation":[…],
//	                "blueprint_index":n, "germinations":n,
//	                "last_prune_epoch":n, "last_decay_epoch":n,
//	                "penalties":{"blueprint":x, …},
//	                "tracker":{SignalTracker state}}   (tracker: only when
//	                the heuristic tracks its own signals, not in a Tracked)
//	Tracked:       {"version":1, "tracker":{SignalTracker state},
//	                "inner":{inner controller state}}   (inner optional)
//
// Every float x is a JSON number when finite (shortest round-tripping
// form, so the value comes back bit for bit, −0 included) and one of the
// strings "+Inf", "-Inf", "NaN" otherwise (a NaN comes back as NaN, its
// payload bits aside): JSON has no infinities, and a tracker's previous
// loss starts at +Inf.
//
// Options are not part of the state. The heuristic's state names the
// topology and rotation it was made under so that a state is refused by a
// heuristic whose topology or rotation differ (the rotation index would
// mean another blueprint); the tracker refuses a state its options could
// not have produced (histories longer than its window, stabilisation not
// latched when it is disabled). UnmarshalState rejects malformed JSON,
// unknown fields, a missing field, a missing or unknown version and
// inconsistent values, and leaves the receiver unchanged when it fails.
//
// StateVersion is the schema version MarshalState writes and the only one
// UnmarshalState accepts.
const StateVersion = 1

// ErrState is wrapped by every UnmarshalState error.
var ErrState = errors.New("invalid controller state")

// statefulController is a Controller whose state can be saved and
// restored: the method set of tolaria.StatefulController. Tracked saves
// and restores an inner controller that has it.
type statefulController interface {
	Controller
	MarshalState() ([]byte, error)
	UnmarshalState([]byte) error
}

var (
	_ statefulController = (*Heuristic)(nil)
	_ statefulController = (*Tracked)(nil)
)

// stateFloat is a float64 that JSON-encodes non-finite values as the
// strings "+Inf", "-Inf" and "NaN".
type stateFloat float64

func (f stateFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

func (f *stateFloat) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "NaN":
			*f = stateFloat(math.NaN())
		case "+Inf":
			*f = stateFloat(math.Inf(1))
		case "-Inf":
			*f = stateFloat(math.Inf(-1))
		default:
			return fmt.Errorf("float %q: want a number, \"+Inf\", \"-Inf\" or \"NaN\"", s)
		}
		return nil
	}
	if string(b) == "null" {
		return errors.New("float is null")
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = stateFloat(v)
	return nil
}

func toStateFloats(v []float64) []stateFloat {
	out := make([]stateFloat, len(v))
	for i, x := range v {
		out[i] = stateFloat(x)
	}
	return out
}

func fromStateFloats(v []stateFloat) []float64 {
	if len(v) == 0 {
		return nil
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// decodeState decodes data into v strictly (no unknown fields, nothing
// after the value) and checks its version. what names the state in
// errors.
func decodeState(what string, data []byte, v any, version func() int) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("tamiyo: %s state: %w: %v", what, ErrState, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("tamiyo: %s state: %w: data after the JSON value", what, ErrState)
	}
	switch ver := version(); ver {
	case StateVersion:
		return nil
	case 0:
		return fmt.Errorf("tamiyo: %s state: %w: missing schema version", what, ErrState)
	default:
		return fmt.Errorf("tamiyo: %s state: %w: unknown schema version %d (want %d)", what, ErrState, ver, StateVersion)
	}
}

// field is a state field and whether the JSON had it.
type field struct {
	name    string
	present bool
}

// missing returns an error naming the first field not present.
func missing(what string, fields ...field) error {
	for _, f := range fields {
		if !f.present {
			return fmt.Errorf("tamiyo: %s state: %w: missing field %q", what, ErrState, f.name)
		}
	}
	return nil
}

// --- SignalTracker ---

type trackerStateJSON struct {
	Version      int          `json:"version"`
	Losses       []stateFloat `json:"losses"`
	Accuracies   []stateFloat `json:"accuracies"`
	BestAccuracy *stateFloat  `json:"best_accuracy"`
	Plateau      *int         `json:"plateau"`
	Stabilized   *bool        `json:"stabilized"`
	StableCount  *int         `json:"stable_count"`
	PrevLoss     *stateFloat  `json:"prev_loss"`
	PrevAcc      *stateFloat  `json:"prev_acc"`
}

// MarshalState returns the tracker's state (histories, best accuracy,
// plateau and stable counts, stabilisation latch, previous loss and
// accuracy) as JSON; see StateVersion for the format. Options, including
// the Sink, are not part of it.
func (t *SignalTracker) MarshalState() ([]byte, error) {
	s := t.st
	best, prevLoss, prevAcc := stateFloat(s.bestAccuracy), stateFloat(s.prevLoss), stateFloat(s.prevAcc)
	plateau, stabilized, stable := s.plateau, s.stabilized, s.stableCount
	return json.Marshal(trackerStateJSON{
		Version:      StateVersion,
		Losses:       toStateFloats(s.losses),
		Accuracies:   toStateFloats(s.accuracies),
		BestAccuracy: &best,
		Plateau:      &plateau,
		Stabilized:   &stabilized,
		StableCount:  &stable,
		PrevLoss:     &prevLoss,
		PrevAcc:      &prevAcc,
	})
}

// UnmarshalState replaces the tracker's state with one made by
// MarshalState. It fails, leaving the tracker unchanged, on malformed
// JSON, a missing or unknown version, a missing field, or a state the
// tracker's options could not have produced. It emits nothing: a latch
// restored as set was announced by the run that latched it.
func (t *SignalTracker) UnmarshalState(data []byte) error {
	st, err := t.decodeState(data)
	if err != nil {
		return err
	}
	t.st = st
	return nil
}

// decodeState parses and checks a tracker state against t's options
// without changing t.
func (t *SignalTracker) decodeState(data []byte) (trackerState, error) {
	const what = "SignalTracker"
	var j trackerStateJSON
	if err := decodeState(what, data, &j, func() int { return j.Version }); err != nil {
		return trackerState{}, err
	}
	if err := missing(what,
		field{"losses", j.Losses != nil}, field{"accuracies", j.Accuracies != nil},
		field{"best_accuracy", j.BestAccuracy != nil}, field{"plateau", j.Plateau != nil},
		field{"stabilized", j.Stabilized != nil}, field{"stable_count", j.StableCount != nil},
		field{"prev_loss", j.PrevLoss != nil}, field{"prev_acc", j.PrevAcc != nil},
	); err != nil {
		return trackerState{}, err
	}
	bad := func(format string, args ...any) (trackerState, error) {
		return trackerState{}, fmt.Errorf("tamiyo: %s state: %w: %s", what, ErrState, fmt.Sprintf(format, args...))
	}
	switch {
	case len(j.Losses) != len(j.Accuracies):
		return bad("%d losses but %d accuracies", len(j.Losses), len(j.Accuracies))
	case len(j.Losses) > t.opts.HistoryWindow:
		return bad("history of %d epochs exceeds the tracker's HistoryWindow %d", len(j.Losses), t.opts.HistoryWindow)
	case !(float64(*j.BestAccuracy) >= 0):
		return bad("best_accuracy = %v must be a non-negative number", float64(*j.BestAccuracy))
	case *j.Plateau < 0:
		return bad("plateau = %d is negative", *j.Plateau)
	case *j.StableCount < 0:
		return bad("stable_count = %d is negative", *j.StableCount)
	case !*j.Stabilized && t.opts.StabilizationEpochs == 0:
		return bad("stabilisation not latched, but the tracker's options disable stabilisation (it is latched from the start)")
	case !*j.Stabilized && *j.StableCount >= t.opts.StabilizationEpochs:
		return bad("stable_count = %d would have latched stabilisation (StabilizationEpochs %d)", *j.StableCount, t.opts.StabilizationEpochs)
	}
	return trackerState{
		losses:       fromStateFloats(j.Losses),
		accuracies:   fromStateFloats(j.Accuracies),
		bestAccuracy: float64(*j.BestAccuracy),
		plateau:      *j.Plateau,
		stabilized:   *j.Stabilized,
		stableCount:  *j.StableCount,
		prevLoss:     float64(*j.PrevLoss),
		prevAcc:      float64(*j.PrevAcc),
	}, nil
}

// --- Heuristic ---

type heuristicStateJSON struct {
	Version        int                   `json:"version"`
	Topology       string                `json:"topology"`
	Rotation       []string              `json:"rotation"`
	BlueprintIndex *int                  `json:"blueprint_index"`
	Germinations   *int                  `json:"germinations"`
	LastPruneEpoch *int                  `json:"last_prune_epoch"`
	LastDecayEpoch *int                  `json:"last_decay_epoch"`
	Penalties      map[string]stateFloat `json:"penalties"`
	Tracker        json.RawMessage       `json:"tracker,omitempty"`
}

// MarshalState returns the heuristic's state (rotation position,
// germination count, last prune and decay epochs, blueprint penalties,
// and its tracker's state when it tracks its own signals), with its
// topology and rotation for checking, as JSON; see StateVersion for the
// format.
func (h *Heuristic) MarshalState() ([]byte, error) {
	h.mu.Lock()
	st := h.st.clone()
	var tr json.RawMessage
	if h.tracker != nil {
		var err error
		if tr, err = h.tracker.MarshalState(); err != nil {
			h.mu.Unlock()
			return nil, fmt.Errorf("tamiyo: Heuristic state: %w", err)
		}
	}
	h.mu.Unlock()
	pen := make(map[string]stateFloat, len(st.penalties))
	for k, v := range st.penalties {
		pen[k] = stateFloat(v)
	}
	return json.Marshal(heuristicStateJSON{
		Version:        StateVersion,
		Topology:       h.opts.Topology,
		Rotation:       h.opts.BlueprintRotation,
		BlueprintIndex: &st.blueprintIndex,
		Germinations:   &st.germinations,
		LastPruneEpoch: &st.lastPruneEpoch,
		LastDecayEpoch: &st.lastDecayEpoch,
		Penalties:      pen,
		Tracker:        tr,
	})
}

// UnmarshalState replaces the heuristic's state with one made by
// MarshalState. It fails, leaving the heuristic unchanged, on malformed
// JSON, a missing or unknown version, a missing field, a negative
// rotation index, germination count or penalty, a state made under
// another topology or blueprint rotation, a tracker state for a
// heuristic wrapped in a Tracked or none for one that tracks its own
// signals, or an invalid tracker state.
func (h *Heuristic) UnmarshalState(data []byte) error {
	const what = "Heuristic"
	var j heuristicStateJSON
	if err := decodeState(what, data, &j, func() int { return j.Version }); err != nil {
		return err
	}
	if err := missing(what,
		field{"topology", j.Topology != ""}, field{"rotation", j.Rotation != nil},
		field{"blueprint_index", j.BlueprintIndex != nil}, field{"germinations", j.Germinations != nil},
		field{"last_prune_epoch", j.LastPruneEpoch != nil}, field{"last_decay_epoch", j.LastDecayEpoch != nil},
		field{"penalties", j.Penalties != nil},
	); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("tamiyo: %s state: %w: %s", what, ErrState, fmt.Sprintf(format, args...))
	}
	if j.Topology != h.opts.Topology {
		return bad("made for topology %q, but the heuristic was built for %q", j.Topology, h.opts.Topology)
	}
	if !slices.Equal(j.Rotation, h.opts.BlueprintRotation) {
		return bad("made with blueprint rotation %v, but the heuristic's rotation is %v", j.Rotation, h.opts.BlueprintRotation)
	}
	if *j.BlueprintIndex < 0 {
		return bad("blueprint_index = %d is negative", *j.BlueprintIndex)
	}
	if *j.Germinations < 0 {
		return bad("germinations = %d is negative", *j.Germinations)
	}
	st := heuristicState{
		blueprintIndex: *j.BlueprintIndex,
		germinations:   *j.Germinations,
		lastPruneEpoch: *j.LastPruneEpoch,
		lastDecayEpoch: *j.LastDecayEpoch,
		penalties:      make(map[string]float64, len(j.Penalties)),
	}
	for k, v := range j.Penalties {
		if k == "" {
			return bad("penalty for an empty blueprint id")
		}
		if v < 0 {
			return bad("penalty of %q = %v is negative", k, float64(v))
		}
		st.penalties[k] = float64(v)
	}
	hasTracker := j.Tracker != nil && string(j.Tracker) != "null"
	h.mu.Lock()
	defer h.mu.Unlock()
	var ts trackerState
	switch {
	case hasTracker && h.tracker == nil:
		return bad("carries a tracker state, but the heuristic's signals are derived by a Tracked")
	case !hasTracker && h.tracker != nil:
		return bad("missing field %q (the heuristic tracks its own signals)", "tracker")
	case hasTracker:
		var err error
		if ts, err = h.tracker.decodeState(j.Tracker); err != nil {
			return fmt.Errorf("tamiyo: %s state: tracker: %w", what, err)
		}
		h.tracker.st = ts
	}
	h.st = st
	return nil
}

// --- Tracked ---

type trackedStateJSON struct {
	Version int             `json:"version"`
	Tracker json.RawMessage `json:"tracker"`
	Inner   json.RawMessage `json:"inner,omitempty"`
}

// MarshalState returns the tracker's state and, when the inner controller
// implements MarshalState and UnmarshalState, the inner controller's, as
// JSON; see StateVersion for the format. Call it between epochs (as the
// trainer does): a state taken while EvaluateEpoch runs may hold the
// epoch's tracker update without the inner controller's decision.
func (c *Tracked) MarshalState() ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tr, err := c.tracker.MarshalState()
	if err != nil {
		return nil, fmt.Errorf("tamiyo: Tracked state: %w", err)
	}
	j := trackedStateJSON{Version: StateVersion, Tracker: tr}
	if sc, ok := c.inner.(statefulController); ok {
		in, err := sc.MarshalState()
		if err != nil {
			return nil, fmt.Errorf("tamiyo: Tracked state: inner controller (%T): %w", c.inner, err)
		}
		if !json.Valid(in) {
			return nil, fmt.Errorf("tamiyo: Tracked state: inner controller (%T) returned invalid JSON", c.inner)
		}
		j.Inner = in
	}
	return json.Marshal(j)
}

// UnmarshalState restores a state made by MarshalState: the tracker's and,
// when the state carries one, the inner controller's. A state with inner
// state for an inner controller that cannot load it, or without inner
// state for one that keeps state, is refused. On error nothing changes,
// provided the inner controller's UnmarshalState also leaves it unchanged
// on error (the tracker's state is checked first and committed last).
func (c *Tracked) UnmarshalState(data []byte) error {
	const what = "Tracked"
	var j trackedStateJSON
	if err := decodeState(what, data, &j, func() int { return j.Version }); err != nil {
		return err
	}
	if j.Tracker == nil || string(j.Tracker) == "null" {
		return fmt.Errorf("tamiyo: %s state: %w: missing field %q", what, ErrState, "tracker")
	}
	hasInner := j.Inner != nil && string(j.Inner) != "null"
	sc, stateful := c.inner.(statefulController)
	switch {
	case hasInner && !stateful:
		return fmt.Errorf("tamiyo: %s state: %w: carries inner controller state, but the inner controller (%T) cannot load it", what, ErrState, c.inner)
	case !hasInner && stateful:
		return fmt.Errorf("tamiyo: %s state: %w: has no inner controller state, but the inner controller (%T) keeps state", what, ErrState, c.inner)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.tracker.decodeState(j.Tracker)
	if err != nil {
		return fmt.Errorf("tamiyo: %s state: tracker: %w", what, err)
	}
	if hasInner {
		if err := sc.UnmarshalState(j.Inner); err != nil {
			return fmt.Errorf("tamiyo: %s state: %w: inner controller (%T): %w", what, ErrState, c.inner, err)
		}
	}
	c.tracker.st = st
	return nil
}
