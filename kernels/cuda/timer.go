//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"time"

	"gorgonia.org/cu"
)

// Timer measures the device time of work enqueued on a Device's stream
// with a pair of CUDA events, the way benchmarks on the GPU are timed
// (GPU.md: CUDA events after warm-up, medians reported). The time runs
// from the moment the stream reaches the start event to the moment it
// passes the stop event, so it counts the kernels and copies in between
// and any gap in which the stream waited for the host to enqueue them. A
// Timer is not safe for concurrent use.
type Timer struct {
	d           *Device
	start, stop cu.Event
	closed      bool
}

// NewTimer creates the Timer's two events.
func (d *Device) NewTimer() (*Timer, error) {
	release := d.enter()
	defer release()
	t := &Timer{d: d}
	var err error
	if t.start, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
		return nil, fmt.Errorf("cuda: NewTimer: %w", err)
	}
	if t.stop, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
		cu.DestroyEvent(&t.start)
		return nil, fmt.Errorf("cuda: NewTimer: %w", err)
	}
	return t, nil
}

// Time records the start event on the stream, calls f (which enqueues
// work on the device's stream, or makes it wait for other streams),
// records the stop event, waits for it and returns the elapsed device
// time (the events' resolution is about half a microsecond). An error
// from f is returned as it is. Time must not be called during a capture.
func (t *Timer) Time(f func() error) (time.Duration, error) {
	if t.closed {
		return 0, errors.New("cuda: Time on a closed Timer")
	}
	if t.d.Capturing() {
		return 0, errors.New("cuda: Time during a graph capture (events would be captured, not timed)")
	}
	release := t.d.enter()
	defer release()
	if err := t.start.Record(t.d.stream); err != nil {
		return 0, fmt.Errorf("cuda: Timer: %w", err)
	}
	if err := f(); err != nil {
		return 0, err
	}
	t.d.flushHeld() // steps f left held back are part of what is timed
	if err := t.stop.Record(t.d.stream); err != nil {
		return 0, fmt.Errorf("cuda: Timer: %w", err)
	}
	if err := t.stop.Synchronize(); err != nil {
		return 0, fmt.Errorf("cuda: Timer: %w", err)
	}
	ms, err := t.start.Elapsed(t.stop)
	if err != nil {
		return 0, fmt.Errorf("cuda: Timer: %w", err)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// Close destroys the events; the Timer may not be used afterwards.
func (t *Timer) Close() error {
	if t.closed {
		return nil
	}
	t.closed = true
	release := t.d.enter()
	defer release()
	err := cu.DestroyEvent(&t.start)
	if e := cu.DestroyEvent(&t.stop); err == nil {
		err = e
	}
	return err
}
