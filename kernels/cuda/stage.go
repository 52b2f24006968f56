//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/tensor"
)

// Stager copies host batches to the device on a stream of its own through
// a ring of page-locked (pinned) buffers, so that a batch's copy overlaps
// the kernels still running on the device's stream (PERF.md W8). Each
// Stage fills the next buffer (after the copy that last used it has
// finished), enqueues the copy on the copy stream, and makes the device's
// stream wait for it: kernels enqueued afterwards see the batch, and no
// host thread waits for the copy.
type Stager struct {
	d     *Device
	copy  cu.Stream
	slots []pinnedSlot
	next  int
}

// pinnedSlot is one page-locked buffer and the event recorded after the
// copy out of it.
type pinnedSlot struct {
	p    unsafe.Pointer
	n    int
	done cu.Event
	used bool
}

// NewStager makes a Stager with slots pinned buffers of bytes each
// (slots ≥ 2 lets the next batch be filled while the last one copies).
func (d *Device) NewStager(slots, bytes int) (*Stager, error) {
	if slots < 1 || bytes < 1 {
		return nil, fmt.Errorf("cuda: NewStager: %d slots of %d bytes (want ≥ 1 of ≥ 1)", slots, bytes)
	}
	release := d.enter()
	defer release()
	s := &Stager{d: d}
	var err error
	if s.copy, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return nil, fmt.Errorf("cuda: NewStager: copy stream: %w", err)
	}
	for i := 0; i < slots; i++ {
		p, err := hostAlloc(bytes)
		if err != nil {
			s.closeLocked()
			return nil, fmt.Errorf("cuda: NewStager: %w", err)
		}
		ev, err := cu.MakeEvent(cu.DisableTiming)
		if err != nil {
			hostFree(p)
			s.closeLocked()
			return nil, fmt.Errorf("cuda: NewStager: %w", err)
		}
		s.slots = append(s.slots, pinnedSlot{p: p, n: bytes, done: ev})
	}
	return s, nil
}

// Stage copies src into dst, a contiguous device tensor of exactly
// len(src) bytes, asynchronously as the Stager's documentation says. src
// may be reused as soon as Stage returns (it was copied into a pinned
// buffer).
func (s *Stager) Stage(dst *tensor.Tensor, src []byte) error {
	if dst != nil && dst.Nbytes() != len(src) {
		return fmt.Errorf("cuda: Stage: %d bytes into dst %v %v (%d bytes)", len(src), dst.DType(), dst.Shape(), dst.Nbytes())
	}
	return s.StageFunc(dst, func(pinned []byte) { copy(pinned, src) })
}

// StageFunc is Stage for a batch written straight into the pinned
// buffer, saving Stage's host copy: fill receives the next pinned buffer,
// dst.Nbytes() long, once the copy that last used it has finished, and
// must fill it completely (a loader decoding a batch into it, say); the
// buffer is then copied to dst as Stage copies. fill must not keep the
// slice: the buffer is reused by later calls.
func (s *Stager) StageFunc(dst *tensor.Tensor, fill func(pinned []byte)) error {
	if s.slots == nil {
		return errors.New("cuda: Stage on a closed Stager")
	}
	if fill == nil || dst == nil {
		return errors.New("cuda: StageFunc with a nil dst or fill function")
	}
	pd, err := s.d.ptrOf("Stage", "dst", dst, dst.DType())
	if err != nil {
		return err
	}
	n := dst.Nbytes()
	sl := &s.slots[s.next]
	if n > sl.n {
		return fmt.Errorf("cuda: Stage: %d bytes exceed the Stager's %d-byte buffers", n, sl.n)
	}
	s.next = (s.next + 1) % len(s.slots)
	release := s.d.enter()
	defer release()
	if sl.used {
		if err := sl.done.Synchronize(); err != nil { // the buffer's last copy has left it
			return err
		}
	}
	fill(unsafe.Slice((*byte)(sl.p), n))
	if n == 0 {
		return nil
	}
	if err := copyH2DAsync(pd, sl.p, n, s.copy); err != nil {
		return err
	}
	if err := sl.done.Record(s.copy); err != nil {
		return err
	}
	sl.used = true
	return s.d.stream.Wait(sl.done, 0)
}

// Close waits for the copies in flight and frees the pinned buffers and
// the copy stream.
func (s *Stager) Close() error {
	if s.slots == nil {
		return nil
	}
	release := s.d.enter()
	defer release()
	err := s.copy.Synchronize()
	if e := s.closeLocked(); err == nil {
		err = e
	}
	return err
}

func (s *Stager) closeLocked() error {
	var first error
	for i := range s.slots {
		if err := hostFree(s.slots[i].p); err != nil && first == nil {
			first = err
		}
		if err := cu.DestroyEvent(&s.slots[i].done); err != nil && first == nil {
			first = err
		}
	}
	s.slots = nil
	if err := s.copy.Destroy(); err != nil && first == nil {
		first = err
	}
	return first
}
