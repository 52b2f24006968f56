//go:build cuda

package cuda

import (
	"errors"
	"fmt"

	"gorgonia.org/cu"
)

// A Stager's trace: CUDA timing events recorded around its copies (on the
// copy stream) and around the steps the caller marks (on the device's
// stream), all measured from one origin event, so that StopTrace can say
// how much of the copying ran while a step computed (overlap.go does the
// arithmetic).

// stageTrace is a running trace: a pool of timing events, the origin
// every time is measured from, and the intervals of the copies and of
// the steps.
type stageTrace struct {
	origin        cu.Event
	evs           []cu.Event
	used          int
	copies, steps traceList
	open          bool // a step has begun and not ended
}

// traceList is the (begin, end) event indices of one kind of interval
// (end -1 while open), at most max of them; skipEnd is set while the
// interval under way was dropped for want of room.
type traceList struct {
	iv      [][2]int
	max     int
	dropped int
	skipEnd bool
}

// mark records the next event of the pool on stream as the begin (or the
// end) of the latest interval of l. Past l's capacity the interval is
// counted as dropped instead, and its end is ignored.
func (t *stageTrace) mark(l *traceList, stream cu.Stream, begin bool) error {
	if begin {
		l.skipEnd = len(l.iv) >= l.max
		if l.skipEnd {
			l.dropped++
			return nil
		}
	} else if l.skipEnd || len(l.iv) == 0 {
		l.skipEnd = false
		return nil
	}
	if t.used == len(t.evs) { // cannot happen: the pool holds 2·max per list
		return errors.New("cuda: Stager trace: out of events")
	}
	if err := t.evs[t.used].Record(stream); err != nil {
		return fmt.Errorf("cuda: Stager trace: %w", err)
	}
	if begin {
		l.iv = append(l.iv, [2]int{t.used, -1})
	} else {
		l.iv[len(l.iv)-1][1] = t.used
	}
	t.used++
	return nil
}

// copyMark marks the begin or end of a copy (called by StageFunc, with
// the context current).
func (t *stageTrace) copyMark(stream cu.Stream, begin bool) error {
	return t.mark(&t.copies, stream, begin)
}

// destroy frees the trace's events.
func (t *stageTrace) destroy() {
	cu.DestroyEvent(&t.origin)
	for i := range t.evs {
		cu.DestroyEvent(&t.evs[i])
	}
	t.evs = nil
}

// StartTrace starts timing, with CUDA events on one clock, the next
// maxCopies copies of the Stager and the next maxSteps steps the caller
// marks on the device's stream with BeginStep and EndStep (what lies
// beyond is counted in Overlap.Dropped); StopTrace returns the Overlap.
// The traced copies are ordered after the work enqueued on the device's
// stream before StartTrace (the copy stream waits for it once). It may
// not be called during a capture or while a trace runs.
func (s *Stager) StartTrace(maxCopies, maxSteps int) error {
	if s.slots == nil {
		return errors.New("cuda: StartTrace on a closed Stager")
	}
	if s.trace != nil {
		return errors.New("cuda: StartTrace: a trace is already running")
	}
	if maxCopies < 1 || maxSteps < 1 {
		return fmt.Errorf("cuda: StartTrace: capacity of %d copies and %d steps (want ≥ 1 each)", maxCopies, maxSteps)
	}
	if s.d.Capturing() {
		return errors.New("cuda: StartTrace during a graph capture")
	}
	release := s.d.enter()
	defer release()
	t := &stageTrace{copies: traceList{max: maxCopies}, steps: traceList{max: maxSteps}}
	var err error
	if t.origin, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
		return fmt.Errorf("cuda: StartTrace: %w", err)
	}
	for i := 0; i < 2*(maxCopies+maxSteps); i++ {
		ev, err := cu.MakeEvent(cu.DefaultEvent)
		if err != nil {
			t.destroy()
			return fmt.Errorf("cuda: StartTrace: %w", err)
		}
		t.evs = append(t.evs, ev)
	}
	// Every traced event comes after the origin on its stream, so every
	// time measured from the origin is ≥ 0.
	if err := t.origin.Record(s.d.stream); err != nil {
		t.destroy()
		return fmt.Errorf("cuda: StartTrace: %w", err)
	}
	if err := s.copy.Wait(t.origin, 0); err != nil {
		t.destroy()
		return fmt.Errorf("cuda: StartTrace: %w", err)
	}
	s.trace = t
	return nil
}

// BeginStep marks, on the device's stream, the start of a step of the
// running trace: the work enqueued from here to EndStep. Without a trace
// it does nothing.
func (s *Stager) BeginStep() error {
	t := s.trace
	if t == nil {
		return nil
	}
	if t.open {
		return errors.New("cuda: BeginStep: the previous step has not ended (EndStep)")
	}
	if s.d.Capturing() {
		return errors.New("cuda: BeginStep during a graph capture")
	}
	release := s.d.enter()
	defer release()
	if err := t.mark(&t.steps, s.d.stream, true); err != nil {
		return err
	}
	t.open = true
	return nil
}

// EndStep marks, on the device's stream, the end of the step begun by
// BeginStep. Without a trace it does nothing.
func (s *Stager) EndStep() error {
	t := s.trace
	if t == nil {
		return nil
	}
	if !t.open {
		return errors.New("cuda: EndStep without BeginStep")
	}
	if s.d.Capturing() {
		return errors.New("cuda: EndStep during a graph capture")
	}
	release := s.d.enter()
	defer release()
	t.open = false
	return t.mark(&t.steps, s.d.stream, false)
}

// StopTrace ends the trace, waits for the copy stream and the device's
// stream, and returns what was measured. A step still open is an error
// (and the trace is discarded).
func (s *Stager) StopTrace() (Overlap, error) {
	t := s.trace
	if t == nil {
		return Overlap{}, errors.New("cuda: StopTrace without StartTrace")
	}
	s.trace = nil
	release := s.d.enter()
	defer release()
	defer t.destroy()
	if t.open {
		return Overlap{}, errors.New("cuda: StopTrace: a step has begun and not ended (EndStep)")
	}
	if err := s.copy.Synchronize(); err != nil {
		return Overlap{}, fmt.Errorf("cuda: StopTrace: %w", err)
	}
	if err := s.d.stream.Synchronize(); err != nil {
		return Overlap{}, fmt.Errorf("cuda: StopTrace: %w", err)
	}
	spans := func(l traceList) ([]interval, error) {
		var out []interval
		for _, p := range l.iv {
			if p[1] < 0 {
				continue
			}
			a, err := t.origin.Elapsed(t.evs[p[0]])
			if err != nil {
				return nil, fmt.Errorf("cuda: StopTrace: %w", err)
			}
			b, err := t.origin.Elapsed(t.evs[p[1]])
			if err != nil {
				return nil, fmt.Errorf("cuda: StopTrace: %w", err)
			}
			out = append(out, interval{a, b})
		}
		return out, nil
	}
	copies, err := spans(t.copies)
	if err != nil {
		return Overlap{}, err
	}
	steps, err := spans(t.steps)
	if err != nil {
		return Overlap{}, err
	}
	o := overlapOf(copies, steps)
	o.Dropped = t.copies.dropped + t.steps.dropped
	return o, nil
}
