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
//
// The copy stream does not wait for the device's stream on its own: a
// Stage into a device buffer that kernels still queued there are reading
// would race with them. Stage batches into a ring of at least two device
// buffers and Release a buffer once the steps reading it are enqueued;
// the next Stage into it then waits (on the copy stream, not the host)
// for those steps only. StageAhead and Await split a Stage in two, so
// that the copy of batch i+1 can be enqueued before step i and hide
// behind it, the device's stream waiting for it only before step i+1:
//
//	StageAhead(buf[0], batch 0)
//	for i := range steps {
//		Await(buf[i%2])
//		Release(buf[(i+1)%2])             // read by step i−1, enqueued already
//		StageAhead(buf[(i+1)%2], batch i+1) // runs while step i computes
//		enqueue step i over buf[i%2]
//	}
//
// StartTrace measures how much of the copying hides behind the steps
// (PERF.md W8: "copy fully hidden behind compute in W5").
//
// A Stager is not safe for concurrent use.
type Stager struct {
	d        *Device
	copy     cu.Stream
	slots    []pinnedSlot
	next     int
	released map[cu.DevicePtr]*releaseMark // by destination address
	ahead    map[cu.DevicePtr]*pinnedSlot  // StageAhead copies not yet awaited, by destination
	trace    *stageTrace                   // nil unless tracing
}

// releaseMark is an event recorded on the device's stream after the last
// reader of a destination buffer; pending until a copy into it waited.
type releaseMark struct {
	ev      cu.Event
	pending bool
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
	s := &Stager{d: d, released: map[cu.DevicePtr]*releaseMark{}, ahead: map[cu.DevicePtr]*pinnedSlot{}}
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
	return s.stage("StageFunc", dst, fill, false)
}

// StageAhead is StageFunc without the device stream's wait: the copy is
// enqueued on the copy stream (after dst's Release, if any), and the
// device's stream waits for it only at Await(dst). A training loop
// enqueues the copy of the next batch this way before enqueuing the step
// that should hide it, and Awaits it just before the step that reads it
// (StageFunc's wait, inserted at once, would hold up that first step
// until the copy is done).
func (s *Stager) StageAhead(dst *tensor.Tensor, fill func(pinned []byte)) error {
	return s.stage("StageAhead", dst, fill, true)
}

// Await makes the device's stream wait for the copy that StageAhead
// enqueued into dst (the same tensor, or a view at the same device
// address): kernels enqueued afterwards see the batch. The host does not
// wait. dst with no StageAhead since its last Await is an error, as is a
// call during a graph capture.
func (s *Stager) Await(dst *tensor.Tensor) error {
	if s.slots == nil {
		return errors.New("cuda: Await on a closed Stager")
	}
	if dst == nil {
		return errors.New("cuda: Await of a nil dst")
	}
	pd, err := s.d.ptrOf("Await", "dst", dst, dst.DType())
	if err != nil {
		return err
	}
	sl, ok := s.ahead[pd]
	if !ok {
		return fmt.Errorf("cuda: Await: nothing was staged ahead into dst %v %v", dst.DType(), dst.Shape())
	}
	if s.d.Capturing() {
		return errors.New("cuda: Await during a graph capture")
	}
	delete(s.ahead, pd)
	if sl == nil { // an empty batch: nothing was copied
		return nil
	}
	release := s.d.enter()
	defer release()
	// The slot's event may have been recorded again since, by a later
	// copy on the same stream: waiting for that one waits for this too.
	if err := s.d.stream.Wait(sl.done, 0); err != nil {
		return fmt.Errorf("cuda: Await: %w", err)
	}
	return nil
}

// takeSlot returns dst's device address and the next pinned buffer for
// a copy of n bytes into it, once the copy that last used the buffer has
// left it, with the device entered (release leaves it), and moves the
// ring on; an error, the ring unmoved, for a dst that is not the
// device's or n past the buffers.
func (s *Stager) takeSlot(op string, dst *tensor.Tensor, n int) (cu.DevicePtr, *pinnedSlot, func(), error) {
	pd, err := s.d.ptrOf(op, "dst", dst, dst.DType())
	if err != nil {
		return 0, nil, nil, err
	}
	sl := &s.slots[s.next]
	if n > sl.n {
		return 0, nil, nil, fmt.Errorf("cuda: %s: %d bytes exceed the Stager's %d-byte buffers", op, n, sl.n)
	}
	s.next = (s.next + 1) % len(s.slots)
	release := s.d.enter()
	if sl.used {
		if err := sl.done.Synchronize(); err != nil { // the buffer's last copy has left it
			release()
			return 0, nil, nil, err
		}
	}
	return pd, sl, release, nil
}

// stage is StageFunc (ahead false) and StageAhead (ahead true).
func (s *Stager) stage(op string, dst *tensor.Tensor, fill func(pinned []byte), ahead bool) error {
	if s.slots == nil {
		return fmt.Errorf("cuda: %s on a closed Stager", op)
	}
	if fill == nil || dst == nil {
		return fmt.Errorf("cuda: %s with a nil dst or fill function", op)
	}
	n := dst.Nbytes()
	pd, sl, release, err := s.takeSlot(op, dst, n)
	if err != nil {
		return err
	}
	defer release()
	fill(unsafe.Slice((*byte)(sl.p), n))
	if n == 0 {
		if ahead {
			s.ahead[pd] = nil
		}
		return nil
	}
	if r := s.released[pd]; r != nil && r.pending {
		// The step that last read dst must be done with it first.
		if err := s.copy.Wait(r.ev, 0); err != nil {
			return fmt.Errorf("cuda: %s: waiting for dst's release: %w", op, err)
		}
		r.pending = false
	}
	tr := s.trace
	if tr != nil {
		if err := tr.copyMark(s.copy, true); err != nil {
			return err
		}
	}
	if err := copyH2DAsync(pd, sl.p, n, s.copy); err != nil {
		return err
	}
	if tr != nil {
		if err := tr.copyMark(s.copy, false); err != nil {
			return err
		}
	}
	if err := sl.done.Record(s.copy); err != nil {
		return err
	}
	sl.used = true
	if ahead {
		s.ahead[pd] = sl
		return nil
	}
	delete(s.ahead, pd) // this copy comes after any staged ahead
	return s.d.stream.Wait(sl.done, 0)
}

// StageInline implements kernels.InlineStager: src into the next pinned
// buffer (once the copy that last used it has left it), then into dst on
// the device's stream, the buffer's event recorded there after the copy.
// Three driver calls where Stage makes five (and its Release another):
// the stream's order does what the copy stream's events do. A copy
// staged ahead into dst and not awaited yet is forgotten (this one comes
// after it), as is a Release pending on dst (the stream orders this copy
// after the work it marked).
func (s *Stager) StageInline(dst *tensor.Tensor, src []byte) error {
	const op = "StageInline"
	if s.slots == nil {
		return fmt.Errorf("cuda: %s on a closed Stager", op)
	}
	if dst == nil {
		return fmt.Errorf("cuda: %s of a nil dst", op)
	}
	if dst.Nbytes() != len(src) {
		return fmt.Errorf("cuda: %s: %d bytes into dst %v %v (%d bytes)", op, len(src), dst.DType(), dst.Shape(), dst.Nbytes())
	}
	if s.d.Capturing() {
		return fmt.Errorf("cuda: %s during a graph capture", op)
	}
	n := len(src)
	if n == 0 {
		return nil
	}
	pd, sl, release, err := s.takeSlot(op, dst, n)
	if err != nil {
		return err
	}
	defer release()
	copy(unsafe.Slice((*byte)(sl.p), n), src)
	if err := copyH2DAsync(pd, sl.p, n, s.d.stream); err != nil {
		return err
	}
	if err := sl.done.Record(s.d.stream); err != nil {
		return err
	}
	sl.used = true
	delete(s.ahead, pd)
	if r := s.released[pd]; r != nil {
		r.pending = false
	}
	return nil
}

// Release records, on the device's stream, that the work enqueued there
// so far is the last to read dst (typically the step just enqueued, which
// consumes a staged batch): the next Stage, StageFunc or StageAhead into
// dst (the same tensor, or any view starting at the same device address)
// makes its copy wait for that work on the copy stream. The host does not
// wait. Release dst after the steps that read it are enqueued, before
// staging into it again; the wait applies to the next copy into dst only.
// It may not be called during a graph capture.
func (s *Stager) Release(dst *tensor.Tensor) error {
	if s.slots == nil {
		return errors.New("cuda: Release on a closed Stager")
	}
	if dst == nil {
		return errors.New("cuda: Release of a nil dst")
	}
	pd, err := s.d.ptrOf("Release", "dst", dst, dst.DType())
	if err != nil {
		return err
	}
	if s.d.Capturing() {
		return errors.New("cuda: Release during a graph capture (the event would be captured, not recorded)")
	}
	release := s.d.enter()
	defer release()
	r := s.released[pd]
	if r == nil {
		ev, err := cu.MakeEvent(cu.DisableTiming)
		if err != nil {
			return fmt.Errorf("cuda: Release: %w", err)
		}
		r = &releaseMark{ev: ev}
		s.released[pd] = r
	}
	if err := r.ev.Record(s.d.stream); err != nil {
		return fmt.Errorf("cuda: Release: %w", err)
	}
	r.pending = true
	return nil
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
	if s.trace != nil {
		s.trace.destroy()
		s.trace = nil
	}
	for _, r := range s.released {
		if err := cu.DestroyEvent(&r.ev); err != nil && first == nil {
			first = err
		}
	}
	s.released = nil
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
