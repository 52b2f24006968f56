package kasmina

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/esper-go/esper/kasmina/blueprint"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
)

// ErrSchema is wrapped by errors about a missing or unsupported schema
// version in serialised state.
var ErrSchema = errors.New("unsupported schema version")

// SlotSchemaVersion is the version of a slot checkpoint's Extra JSON.
const SlotSchemaVersion = 1

// SlotCheckpoint is everything needed to restore a slot: Extra, a JSON
// document with the seed state (metrics and alpha controller included),
// the isolation flag, the blend algorithm id and which modules exist;
// and Weights, the seed's and gate's parameters and buffers by their
// names in Slot.NamedParameters / NamedBuffers ("seed.…",
// "alpha_schedule.…"). An empty slot has a null state and no weights.
type SlotCheckpoint struct {
	Extra   []byte
	Weights map[string]*tensor.Tensor
}

// slotExtra is the Extra document. Pointers tell absent from zero for
// the fields a checkpoint must carry.
type slotExtra struct {
	SchemaVersion    *int       `json:"schema_version"`
	SlotID           string     `json:"slot_id"`
	Topology         string     `json:"topology"`
	Channels         int        `json:"channels"`
	State            *SeedState `json:"state"`
	IsolateGradients *bool      `json:"isolate_gradients"`
	BlendAlgorithmID *string    `json:"blend_algorithm_id"`
	HasSeed          bool       `json:"has_seed"`
	HasAlphaSchedule bool       `json:"has_alpha_schedule"`
	Frozen           bool       `json:"frozen"`
	PendingReason    string     `json:"pending_prune_reason"`
	PendingInitiator string     `json:"pending_prune_initiator"`
}

// SaveState returns a checkpoint of the slot. The weights are copies.
func (s *Slot) SaveState() (SlotCheckpoint, error) {
	v := SlotSchemaVersion
	iso, id := s.isolate, s.blendID
	ex := slotExtra{
		SchemaVersion: &v, SlotID: s.id, Topology: s.topology, Channels: s.channels,
		State: s.state, IsolateGradients: &iso, BlendAlgorithmID: &id,
		HasSeed: s.seed != nil, HasAlphaSchedule: s.schedule != nil, Frozen: s.frozen,
		PendingReason: s.pendingReason, PendingInitiator: s.pendingInitiator,
	}
	b, err := json.Marshal(ex)
	if err != nil {
		return SlotCheckpoint{}, fmt.Errorf("kasmina: save slot %s: %w", s.id, err)
	}
	// Host copies of the weights: clones on the CPU; on a device gathered
	// and copied at once (nn.HostCopies, one host sync per slot).
	var names []string
	var ts []*tensor.Tensor
	for _, p := range s.NamedParameters() {
		names, ts = append(names, p.Name), append(ts, p.Var.Value)
	}
	for _, b := range s.NamedBuffers() {
		names, ts = append(names, b.Name), append(ts, b.Tensor)
	}
	host, err := nn.HostCopies(ts)
	if err != nil {
		return SlotCheckpoint{}, fmt.Errorf("kasmina: save slot %s: %w", s.id, err)
	}
	w := make(map[string]*tensor.Tensor, len(names))
	for i, name := range names {
		if ts[i].Device().IsCPU() {
			w[name] = ts[i].Clone()
		} else {
			w[name] = host[i]
		}
	}
	return SlotCheckpoint{Extra: b, Weights: w}, nil
}

// LoadState restores a checkpoint written by SaveState into the slot,
// replacing whatever it held: the seed module is rebuilt from the
// blueprint catalog and its weights loaded strictly. Everything is
// checked before the slot changes, so on error it is untouched: a
// missing or different schema version (wrapping ErrSchema), a
// checkpoint of another slot, topology or width, a missing required
// field (isolate_gradients, blend_algorithm_id, alpha controller fields,
// …), or weights that do not match the modules.
func (s *Slot) LoadState(ck SlotCheckpoint) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(ck.Extra, &raw); err != nil {
		return fmt.Errorf("kasmina: load slot %s: %w", s.id, err)
	}
	var ex slotExtra
	if err := json.Unmarshal(ck.Extra, &ex); err != nil {
		return fmt.Errorf("kasmina: load slot %s: %w", s.id, err)
	}
	if err := checkSchema("slot "+s.id, ex.SchemaVersion, SlotSchemaVersion); err != nil {
		return err
	}
	if _, ok := raw["state"]; !ok {
		return fmt.Errorf("kasmina: load slot %s: required field \"state\" is missing (null for an empty slot)", s.id)
	}
	switch {
	case ex.IsolateGradients == nil:
		return fmt.Errorf("kasmina: load slot %s: required field \"isolate_gradients\" is missing", s.id)
	case ex.BlendAlgorithmID == nil:
		return fmt.Errorf("kasmina: load slot %s: required field \"blend_algorithm_id\" is missing", s.id)
	case ex.SlotID != s.id || ex.Topology != s.topology || ex.Channels != s.channels:
		return fmt.Errorf("kasmina: load slot %s (%s, %d channels): checkpoint is of slot %q (%s, %d channels)", s.id, s.topology, s.channels, ex.SlotID, ex.Topology, ex.Channels)
	case ex.State == nil && (ex.HasSeed || ex.HasAlphaSchedule):
		return fmt.Errorf("kasmina: load slot %s: modules without a seed state", s.id)
	case ex.State != nil && ex.State.SlotID != s.id:
		return fmt.Errorf("kasmina: load slot %s: seed state belongs to slot %q", s.id, ex.State.SlotID)
	}
	if st := ex.State; st != nil {
		if err := st.AlphaController.validate(); err != nil {
			return fmt.Errorf("kasmina: load slot %s: %w", s.id, err)
		}
		if st.AlphaAlgorithm == leyline.BlendGate && ex.HasSeed && !ex.HasAlphaSchedule {
			return fmt.Errorf("kasmina: load slot %s: GATE seed without its gate", s.id)
		}
	}
	var seed nn.Module
	var gate *GatedBlend
	if ex.HasSeed {
		var err error
		seed, err = blueprint.Build(s.topology, ex.State.BlueprintID, blueprint.Options{Channels: s.channels, RNG: tensor.NewRNG(0), DType: s.dtype})
		if err != nil {
			return fmt.Errorf("kasmina: load slot %s: %w", s.id, err)
		}
	}
	if ex.HasAlphaSchedule {
		var err error
		gate, err = NewGatedBlend(GatedBlendOptions{Channels: s.channels, Topology: s.topology, DType: s.dtype})
		if err != nil {
			return fmt.Errorf("kasmina: load slot %s: %w", s.id, err)
		}
	}
	seedW, gateW := map[string]*tensor.Tensor{}, map[string]*tensor.Tensor{}
	var unexpected []string
	for k, t := range ck.Weights {
		switch {
		case strings.HasPrefix(k, "seed.") && seed != nil:
			seedW[strings.TrimPrefix(k, "seed.")] = t
		case strings.HasPrefix(k, "alpha_schedule.") && gate != nil:
			gateW[strings.TrimPrefix(k, "alpha_schedule.")] = t
		default:
			unexpected = append(unexpected, k)
		}
	}
	if len(unexpected) > 0 {
		sort.Strings(unexpected)
		return fmt.Errorf("kasmina: load slot %s: unexpected weights %q", s.id, unexpected)
	}
	if seed != nil {
		if err := nn.LoadStateDict(seed, seedW, true); err != nil {
			return fmt.Errorf("kasmina: load slot %s seed: %w", s.id, err)
		}
		seed.SetTraining(s.training)
	}
	if gate != nil {
		if err := nn.LoadStateDict(gate, gateW, true); err != nil {
			return fmt.Errorf("kasmina: load slot %s gate: %w", s.id, err)
		}
		gate.SetTraining(s.training)
	}
	if err := s.toHostDevice(seed, gate); err != nil {
		return fmt.Errorf("kasmina: load slot %s: %w", s.id, err)
	}
	s.state, s.seed, s.schedule = ex.State, seed, gate
	s.isolate, s.blendID = *ex.IsolateGradients, *ex.BlendAlgorithmID
	s.pendingReason, s.pendingInitiator = ex.PendingReason, ex.PendingInitiator
	s.forced = nil
	s.rng = nil
	s.frozen = ex.Frozen
	if s.frozen {
		setRequiresGrad(s.Parameters(), false)
	}
	s.version++
	return nil
}

// SaveSlots returns a checkpoint of every slot by id. The host's weights
// are not included: save them with nn.StateDict(model.Host()).
func (m *MorphogeneticModel) SaveSlots() (map[string]SlotCheckpoint, error) {
	out := make(map[string]SlotCheckpoint, len(m.slots))
	for _, s := range m.slots {
		ck, err := s.SaveState()
		if err != nil {
			return nil, err
		}
		out[s.id] = ck
	}
	return out, nil
}

// LoadSlots restores the checkpoints of SaveSlots; every model slot must
// have one and no other may be present. The checkpoints are applied slot
// by slot: a failing slot leaves the slots before it restored.
func (m *MorphogeneticModel) LoadSlots(cks map[string]SlotCheckpoint) error {
	for id := range cks {
		if _, ok := m.byID[id]; !ok {
			return fmt.Errorf("kasmina: load slots: checkpoint for unknown slot %q (model slots: %v)", id, m.SlotIDs())
		}
	}
	for _, s := range m.slots {
		if _, ok := cks[s.id]; !ok {
			return fmt.Errorf("kasmina: load slots: no checkpoint for slot %q", s.id)
		}
	}
	for _, s := range m.slots {
		if err := s.LoadState(cks[s.id]); err != nil {
			return err
		}
	}
	return nil
}
