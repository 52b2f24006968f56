package optim

import (
	"fmt"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// flatState holds an optimizer's per-element state (a momentum buffer, or
// AdamW's two moments) laid out like its arena: per bucket, one flat
// buffer per state name, in stateDType of the bucket. When the arena's
// parameter set changes (Arena.Rebuild) sync lays the buffers out again
// and carries the state of the parameters that stayed over; new
// parameters start from zero state.
type flatState struct {
	arena   *Arena
	names   []string
	version uint64
	where   map[*autograd.Var]stateSlot
	bufs    [][]*tensor.Tensor // [bucket][name]
}

type stateSlot struct {
	dtype  tensor.DType // parameter dtype (the bucket key)
	bucket int
	offset int
}

func newFlatState(a *Arena, names ...string) *flatState {
	s := &flatState{arena: a, names: names}
	s.layout()
	return s
}

// layout allocates zeroed buffers for the arena's current layout and
// copies over the state of parameters present in the previous one.
func (s *flatState) layout() {
	a := s.arena
	bufs := make([][]*tensor.Tensor, len(a.buckets))
	where := make(map[*autograd.Var]stateSlot, len(a.params))
	for bi, b := range a.buckets {
		bufs[bi] = make([]*tensor.Tensor, len(s.names))
		for ni := range s.names {
			bufs[bi][ni] = emptyOn(a.device, stateDType(b.dtype), b.Len())
		}
		for pi, v := range b.params {
			where[v] = stateSlot{dtype: b.dtype, bucket: bi, offset: b.offsets[pi]}
		}
	}
	for v, ns := range where {
		os, ok := s.where[v]
		if !ok || os.dtype != ns.dtype {
			continue
		}
		n := v.Value.Numel()
		for ni := range s.names {
			copyTensor(bufs[ns.bucket][ni].Narrow(0, ns.offset, n), s.bufs[os.bucket][ni].Narrow(0, os.offset, n))
		}
	}
	s.bufs, s.where, s.version = bufs, where, a.version
}

// sync re-lays the buffers out if the arena changed since the last call.
func (s *flatState) sync() {
	if s.version != s.arena.version {
		s.layout()
	}
}

// buf returns state name index ni of bucket bi.
func (s *flatState) buf(bi, ni int) *tensor.Tensor { return s.bufs[bi][ni] }

// reset zeroes every buffer in place.
func (s *flatState) reset() {
	for _, bs := range s.bufs {
		for _, t := range bs {
			fillTensor(t, 0)
		}
	}
}

// key is the state-dict key of state name ni for the bucket of dtype dt,
// e.g. "momentum_buffer.f32" (the parameter dtype names the bucket).
func (s *flatState) key(ni int, dt tensor.DType) string { return s.names[ni] + "." + dt.String() }

// stateDict adds copies of every buffer to sd.
func (s *flatState) stateDict(sd map[string]*tensor.Tensor) {
	s.sync()
	for bi, b := range s.arena.buckets {
		for ni := range s.names {
			sd[s.key(ni, b.dtype)] = cloneTensor(s.bufs[bi][ni])
		}
	}
}

// check validates that sd has a buffer of the right size for every state
// name and bucket, and returns those buffers on the arena's device, ready
// for load: a buffer on another device (a state dict read from a file on
// the host, for an optimizer on a device) is copied there explicitly, so
// a failed copy is an error before anything changed.
func (s *flatState) check(sd map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	s.sync()
	out := make(map[string]*tensor.Tensor, len(s.arena.buckets)*len(s.names))
	for bi, b := range s.arena.buckets {
		for ni := range s.names {
			k := s.key(ni, b.dtype)
			t, ok := sd[k]
			if !ok || t == nil {
				return nil, fmt.Errorf("optim: state dict has no %q", k)
			}
			want := s.bufs[bi][ni]
			if !tensor.SameShape(t.Shape(), want.Shape()) {
				return nil, fmt.Errorf("optim: state dict %q has shape %v, want %v", k, t.Shape(), want.Shape())
			}
			if !t.DType().IsFloat() {
				return nil, fmt.Errorf("optim: state dict %q has non-float dtype %v", k, t.DType())
			}
			if dev := want.Device(); t.Device() != dev {
				if !t.IsContiguous() {
					t = cloneTensor(t)
				}
				moved, err := t.ToDevice(dev)
				if err != nil {
					return nil, fmt.Errorf("optim: state dict %q: copying it from %v to %v: %w", k, t.Device(), dev, err)
				}
				t = moved
			}
			out[k] = t
		}
	}
	return out, nil
}

// load copies the buffers check returned into the state in place.
func (s *flatState) load(sd map[string]*tensor.Tensor) {
	for bi, b := range s.arena.buckets {
		for ni := range s.names {
			copyTensor(s.bufs[bi][ni], sd[s.key(ni, b.dtype)])
		}
	}
}
