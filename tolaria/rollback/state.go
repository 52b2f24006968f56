package rollback

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// Name prefixes the State helpers use, so that model, optimizer and slot
// tensors share one flat namespace without colliding ("model/0.weight",
// "optim/momentum_buffer.f32", "slots/r0c1/seed.0.weight"). nn and optim
// names never contain '/', so the split is unambiguous.
const (
	PrefixModel = "model/"
	PrefixOptim = "optim/"
	PrefixSlots = "slots/"
)

// State is one restorable snapshot of training: named tensors (model
// parameters and buffers, optimizer state, seed weights) and a small JSON
// document of everything else (Meta). The trainer fills it; this package
// only stores, copies and verifies it.
//
// A State is a value whose map and tensors are shared on copy: use Clone
// for an independent one.
type State struct {
	// Tensors maps names to tensors. Names must be non-empty and must not
	// be "__metadata__" (reserved by safetensors).
	Tensors map[string]*tensor.Tensor
	// Meta is the non-tensor part of the state.
	Meta Meta
}

// Meta is the JSON part of a State.
type Meta struct {
	// Epoch and GlobalStep locate the snapshot in training; neither is
	// negative (Store.Write refuses, and a checkpoint that holds one is
	// corrupt).
	Epoch      int   `json:"epoch"`
	GlobalStep int64 `json:"global_step"`
	// RNG holds the words of the trainer's random generators (PCG state,
	// data-order seeds, ...), restored verbatim. encoding/json round-trips
	// uint64 exactly.
	RNG []uint64 `json:"rng,omitempty"`
	// Slots holds each seed slot's kasmina.SlotCheckpoint.Extra document by
	// slot id; the slot weights live in Tensors under PrefixSlots (see
	// SetSlots).
	Slots map[string]json.RawMessage `json:"slots,omitempty"`
	// Extra is free-form trainer state by key (LR controller, breaker,
	// counters). Each value must be valid JSON.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// validate checks the ranges of Meta's numbers: an epoch or a step
// count is never negative.
func (m Meta) validate() error {
	switch {
	case m.Epoch < 0:
		return fmt.Errorf("epoch = %d is negative", m.Epoch)
	case m.GlobalStep < 0:
		return fmt.Errorf("global_step = %d is negative", m.GlobalStep)
	}
	return nil
}

// Size is the number of bytes the state accounts for in a FastCache: the
// element bytes of every tensor (numel × dtype size, regardless of
// strides) plus the length of the JSON encoding of Meta. It returns an
// error when Meta does not encode (an invalid json.RawMessage).
func (s State) Size() (int64, error) {
	m, err := s.encodeMeta()
	if err != nil {
		return 0, err
	}
	return s.tensorBytes() + int64(len(m)), nil
}

func (s State) tensorBytes() int64 {
	var n int64
	for _, t := range s.Tensors {
		if t != nil {
			n += int64(t.Nbytes())
		}
	}
	return n
}

func (s State) encodeMeta() ([]byte, error) {
	b, err := json.Marshal(s.Meta)
	if err != nil {
		return nil, fmt.Errorf("rollback: encode state metadata: %w", err)
	}
	return b, nil
}

// Clone returns a deep copy: every tensor is copied to fresh contiguous
// storage on its own device, and Meta's slices and maps are copied.
func (s State) Clone() State {
	out := State{Meta: s.Meta.clone()}
	if s.Tensors != nil {
		out.Tensors = make(map[string]*tensor.Tensor, len(s.Tensors))
		for n, t := range s.Tensors {
			out.Tensors[n] = cloneTensor(t)
		}
	}
	return out
}

func (m Meta) clone() Meta {
	out := m
	if m.RNG != nil {
		out.RNG = append([]uint64(nil), m.RNG...)
	}
	out.Slots = cloneRaw(m.Slots)
	out.Extra = cloneRaw(m.Extra)
	return out
}

func cloneRaw(m map[string]json.RawMessage) map[string]json.RawMessage {
	if m == nil {
		return nil
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		if v != nil {
			v = append(json.RawMessage(nil), v...)
		}
		out[k] = v
	}
	return out
}

// cloneTensor copies t to fresh contiguous storage on t's device.
func cloneTensor(t *tensor.Tensor) *tensor.Tensor {
	switch {
	case t == nil:
		return nil
	case t.Device().IsCPU():
		return t.Clone()
	}
	out := tensor.EmptyLike(t)
	kernels.For(t.Device()).Copy(out, t)
	return out
}

// hostTensors returns ts readable on the host: ts itself when every
// tensor is on the CPU, else a new map whose device tensors are host
// copies, gathered and copied at once (nn.HostCopies: one host sync per
// device and dtype).
func hostTensors(ts map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	var names []string
	var dev []*tensor.Tensor
	for n, t := range ts {
		if t != nil && !t.Device().IsCPU() {
			names, dev = append(names, n), append(dev, t)
		}
	}
	if len(dev) == 0 {
		return ts, nil
	}
	host, err := nn.HostCopies(dev)
	if err != nil {
		return nil, fmt.Errorf("rollback: copying the state to the host: %w", err)
	}
	out := make(map[string]*tensor.Tensor, len(ts))
	for n, t := range ts {
		out[n] = t
	}
	for i, n := range names {
		out[n] = host[i]
	}
	return out, nil
}

// onDevice returns ts with every tensor that lies elsewhere than dev
// copied there (host-to-device copies, no host sync; ts itself is left as
// it is): what a module's or an optimizer's LoadStateDict wants, whose
// tensors live on dev.
func onDevice(ts map[string]*tensor.Tensor, dev tensor.Device) (map[string]*tensor.Tensor, error) {
	moved := false
	for _, t := range ts {
		moved = moved || (t != nil && t.Device() != dev)
	}
	if !moved {
		return ts, nil
	}
	out := make(map[string]*tensor.Tensor, len(ts))
	for n, t := range ts {
		if t != nil && t.Device() != dev {
			c, err := t.ToDevice(dev)
			if err != nil {
				return nil, fmt.Errorf("rollback: copying state tensor %q to %v: %w", n, dev, err)
			}
			t = c
		}
		out[n] = t
	}
	return out, nil
}

// validate checks the tensor names, that every tensor is present, and
// Meta's ranges.
func (s State) validate() error {
	if err := s.Meta.validate(); err != nil {
		return fmt.Errorf("rollback: state metadata: %w", err)
	}
	for n, t := range s.Tensors {
		switch {
		case n == "":
			return fmt.Errorf("rollback: state has a tensor with an empty name")
		case n == "__metadata__":
			return fmt.Errorf("rollback: tensor name %q is reserved", n)
		case t == nil:
			return fmt.Errorf("rollback: state tensor %q is nil", n)
		}
	}
	return nil
}

// Put stores every tensor of sd under prefix+name, without copying:
// nn.StateDict, optim.Optimizer.StateDict and kasmina slot checkpoints
// already return copies. It allocates Tensors when nil.
func (s *State) Put(prefix string, sd map[string]*tensor.Tensor) {
	if s.Tensors == nil {
		s.Tensors = make(map[string]*tensor.Tensor, len(sd))
	}
	for n, t := range sd {
		s.Tensors[prefix+n] = t
	}
}

// Sub returns the tensors whose names start with prefix, keyed by the
// rest of the name. The tensors are shared with s, not copied.
func (s State) Sub(prefix string) map[string]*tensor.Tensor {
	out := map[string]*tensor.Tensor{}
	for n, t := range s.Tensors {
		if rest, ok := strings.CutPrefix(n, prefix); ok {
			out[rest] = t
		}
	}
	return out
}

// SetModule stores copies of m's parameters and buffers under
// PrefixModel.
func (s *State) SetModule(m nn.Module) { s.Put(PrefixModel, nn.StateDict(m)) }

// ApplyModule copies the PrefixModel tensors into m strictly (see
// nn.LoadStateDict): on error m is unchanged. Tensors that lie elsewhere
// than m (a checkpoint read to the host, m on a device) are copied to m's
// device first; a module whose tensors span several devices gets them as
// they are.
func (s State) ApplyModule(m nn.Module) error {
	sd := s.Sub(PrefixModel)
	if dev, err := nn.Device(m); err == nil {
		if sd, err = onDevice(sd, dev); err != nil {
			return err
		}
	}
	if err := nn.LoadStateDict(m, sd, true); err != nil {
		return fmt.Errorf("rollback: restore model: %w", err)
	}
	return nil
}

// SetOptimizer stores a copy of o's state dict (learning rate, step
// counter, momentum or moment buffers) under PrefixOptim.
func (s *State) SetOptimizer(o optim.Optimizer) { s.Put(PrefixOptim, o.StateDict()) }

// ApplyOptimizer loads the PrefixOptim tensors into o, which validates
// everything before changing anything. Tensors that lie elsewhere than
// o's parameter arena are copied to its device first.
func (s State) ApplyOptimizer(o optim.Optimizer) error {
	sd := s.Sub(PrefixOptim)
	if a := o.Arena(); a != nil {
		var err error
		if sd, err = onDevice(sd, a.Device()); err != nil {
			return err
		}
	}
	if err := o.LoadStateDict(sd); err != nil {
		return fmt.Errorf("rollback: restore optimizer: %w", err)
	}
	return nil
}

// SetSlots stores slot checkpoints (kasmina.MorphogeneticModel.SaveSlots):
// each Extra document in Meta.Slots and each weight under
// PrefixSlots+id+"/". Slot ids must be non-empty and free of '/'.
// Slots stored earlier are replaced.
func (s *State) SetSlots(cks map[string]kasmina.SlotCheckpoint) error {
	for id, ck := range cks {
		if id == "" || strings.Contains(id, "/") {
			return fmt.Errorf("rollback: slot id %q is empty or contains '/'", id)
		}
		if !json.Valid(ck.Extra) {
			return fmt.Errorf("rollback: slot %q: Extra is not valid JSON", id)
		}
	}
	for n := range s.Tensors {
		if strings.HasPrefix(n, PrefixSlots) {
			delete(s.Tensors, n)
		}
	}
	s.Meta.Slots = make(map[string]json.RawMessage, len(cks))
	for id, ck := range cks {
		s.Meta.Slots[id] = append(json.RawMessage(nil), ck.Extra...)
		s.Put(PrefixSlots+id+"/", ck.Weights)
	}
	return nil
}

// SlotCheckpoints rebuilds the checkpoints SetSlots stored, for
// kasmina.MorphogeneticModel.LoadSlots. The weights are shared with s.
func (s State) SlotCheckpoints() (map[string]kasmina.SlotCheckpoint, error) {
	out := make(map[string]kasmina.SlotCheckpoint, len(s.Meta.Slots))
	for id, extra := range s.Meta.Slots {
		out[id] = kasmina.SlotCheckpoint{Extra: append([]byte(nil), extra...), Weights: map[string]*tensor.Tensor{}}
	}
	for n, t := range s.Sub(PrefixSlots) {
		id, name, ok := strings.Cut(n, "/")
		ck, known := out[id]
		if !ok || !known {
			return nil, fmt.Errorf("rollback: slot tensor %q belongs to no slot in the metadata (slots %v)", PrefixSlots+n, sortedKeys(s.Meta.Slots))
		}
		ck.Weights[name] = t
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
