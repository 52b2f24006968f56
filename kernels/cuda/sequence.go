//go:build cuda

package cuda

import (
	"errors"
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The block sequence (kernels.BlockSequencer): while one is on, the calls
// that are one block on their own (LinearCESGDStep, LinearCrossEntropyCount,
// a small ZeroMany) are held back in a blockSeq and launched together as
// one block_seq_f32 — when a step no longer fits, when a sequence ends,
// and at every other call on the device: each of those runs enter, which
// launches what is held back first, so the stream receives the work in
// the calls' order.

// seqState is a device's block sequence (under its mutex).
type seqState struct {
	// depth counts the sequences on: goroutines that share the device
	// may each run one, and calls are held back while any is on.
	depth int
	seq   blockSeq
	// keep holds the tensors the held-back steps use, so that none is
	// collected before the steps run. A block freed explicitly (as
	// optim.SGD.LinearCEStep frees its scratch) may be handed on, but
	// only to a later stream use, which launches the held-back steps
	// first, or to a later held-back step; and the allocator launches
	// them before it gives memory back to the driver.
	keep []*tensor.Tensor
	// err is the first failed launch of held-back steps not yet returned
	// by an EndSequence.
	err error
}

// BeginSequence implements kernels.BlockSequencer.
func (b *Backend) BeginSequence() { b.d.BeginSequence() }

// EndSequence implements kernels.BlockSequencer.
func (b *Backend) EndSequence() error { return b.d.EndSequence() }

var _ kernels.BlockSequencer = (*Backend)(nil)

// BeginSequence starts holding back the calls a block_seq_f32 launch can
// join (kernels.BlockSequencer).
func (d *Device) BeginSequence() {
	d.seqMu.Lock()
	d.seq.depth++
	d.seqOn.Store(true)
	d.seqMu.Unlock()
}

// EndSequence launches what is held back, ends one sequence and returns
// the first error a launch of held-back steps met (an error outside a
// sequence).
func (d *Device) EndSequence() error {
	release := d.enterQuiet()
	defer release()
	d.seqMu.Lock()
	defer d.seqMu.Unlock()
	s := &d.seq
	if s.depth == 0 {
		return errors.New("cuda: EndSequence outside a sequence")
	}
	d.flushSeqLocked()
	s.depth--
	d.seqOn.Store(s.depth > 0)
	err := s.err
	s.err = nil
	return err
}

// deferStep holds a step back when a sequence is on, launching what is
// held back first when the step does not fit beside it, and reports
// whether it did; keep are the tensors the step reads or writes.
func (d *Device) deferStep(kind int, args []uint64, threads int, keep ...*tensor.Tensor) bool {
	if sequencesOff.Load() || !d.seqOn.Load() || 1+len(args) > blockSeqWords {
		return false
	}
	d.seqMu.Lock()
	defer d.seqMu.Unlock()
	s := &d.seq
	if s.depth == 0 {
		return false
	}
	if !s.seq.fits(len(args), threads) {
		release := d.enterQuiet()
		d.flushSeqLocked()
		release()
	}
	s.seq.add(kind, args, threads)
	for _, t := range keep {
		if t != nil {
			s.keep = append(s.keep, t)
		}
	}
	d.seqHeld.Store(true)
	return true
}

// flushHeld launches the held-back steps, if any (the context current:
// enter calls it).
func (d *Device) flushHeld() {
	if !d.seqHeld.Load() {
		return
	}
	d.seqMu.Lock()
	defer d.seqMu.Unlock()
	d.flushSeqLocked()
}

// flushSeqLocked launches the held-back steps as one block_seq_f32 (the
// context current, d.seqMu held; it takes no other lock, since enter,
// which calls it, runs under d.mu and the allocator's lock). A failed
// launch is kept for EndSequence.
func (d *Device) flushSeqLocked() {
	s := &d.seq
	if s.seq.empty() {
		return
	}
	err := launchStruct(d.seqFn, [3]int{1, 1, 1}, [3]int{s.seq.block(), 1, 1}, d.stream, s.seq.words())
	if err != nil && s.err == nil {
		s.err = fmt.Errorf("cuda: a sequence of %d launches: %w", s.seq.n, err)
	}
	s.seq.reset()
	clear(s.keep)
	s.keep = s.keep[:0]
	d.seqHeld.Store(false)
}
