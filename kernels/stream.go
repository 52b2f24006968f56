package kernels

import "time"

// The stream interfaces: what a device with a queue of its own (a CUDA
// stream) offers beside the op families, for the code that measures and
// feeds it — naming the device, timing enqueued work with events,
// staging host batches through pinned buffers on a copy stream, and
// plain byte copies. Each is an optional capability, as the fused
// interfaces are: check with a type assertion on the Backend, and fail
// with an error naming the capability when it is missing. The CUDA
// backend implements them all; the CPU and sim backends, whose work is
// done when a call returns, implement none.

// DeviceDescriber is implemented by a backend that can say what its
// device is.
type DeviceDescriber interface {
	// DeviceName is the device's model name as its driver reports it
	// ("NVIDIA H100 80GB HBM3").
	DeviceName() string
	// ComputeCapability is the device's compute capability, major and
	// minor (8, 0 for an A100; TF32 needs major ≥ 8).
	ComputeCapability() (major, minor int, err error)
}

// EventTimer measures the device time of work enqueued on the backend's
// stream with a pair of events: from the moment the stream reaches the
// start event to the moment it passes the stop event, the kernels and
// copies in between and any gap in which the stream waited for the host.
// It is not safe for concurrent use.
type EventTimer interface {
	// Time records the start event, calls f (which enqueues work, or
	// makes the stream wait for another stream), records the stop event,
	// waits for it and returns the elapsed device time. An error from f
	// is returned as it is. Not during a capture.
	Time(f func() error) (time.Duration, error)
	// Close frees the events.
	Close() error
}

// EventTimers is implemented by a backend that times work on its stream
// with events (the way GPU benchmarks are timed: events after warm-up,
// medians reported).
type EventTimers interface {
	// NewEventTimer creates an EventTimer on the backend's stream.
	NewEventTimer() (EventTimer, error)
}

// Stager copies host batches to the device on a copy stream of its own
// through a ring of page-locked (pinned) host buffers, so that a batch's
// copy overlaps the kernels still running on the device's stream. A copy
// into a device buffer waits (on the copy stream, not the host) for the
// work Release marked as the buffer's last reader; StageAhead and Await
// split a copy in two so that the copy of batch i+1 hides behind step i:
//
//	StageAhead(buf[0], batch 0)
//	for i := range steps {
//		Await(buf[i%2])
//		Release(buf[(i+1)%2])               // read by step i−1, enqueued already
//		StageAhead(buf[(i+1)%2], batch i+1) // runs while step i computes
//		enqueue step i over buf[i%2]
//	}
//
// StartTrace, BeginStep, EndStep and StopTrace measure how much of the
// copying hid behind the steps (Overlap). A Stager is not safe for
// concurrent use. dst is always a contiguous device tensor of the
// backend's device.
type Stager interface {
	// Stage copies src (exactly dst's bytes) into dst: into the next
	// pinned buffer at once, then on the copy stream, the device's stream
	// waiting for it. src may be reused when Stage returns.
	Stage(dst *T, src []byte) error
	// StageFunc is Stage for a batch written straight into the pinned
	// buffer: fill receives it (dst's size) and must fill it completely,
	// and must not keep it.
	StageFunc(dst *T, fill func(pinned []byte)) error
	// StageAhead is StageFunc without the device stream's wait, which
	// Await(dst) adds later.
	StageAhead(dst *T, fill func(pinned []byte)) error
	// Await makes the device's stream wait for the StageAhead copy into
	// dst. The host does not wait.
	Await(dst *T) error
	// Release marks the work enqueued so far as the last reader of dst:
	// the next copy into it waits for that work on the copy stream.
	Release(dst *T) error
	// StartTrace starts timing the next maxCopies copies and maxSteps
	// steps (marked with BeginStep and EndStep) on one clock.
	StartTrace(maxCopies, maxSteps int) error
	// BeginStep and EndStep mark a step of the running trace on the
	// device's stream; without a trace they do nothing.
	BeginStep() error
	EndStep() error
	// StopTrace ends the trace, waits for both streams and returns what
	// it measured.
	StopTrace() (Overlap, error)
	// Close waits for the copies in flight and frees the pinned buffers
	// and the copy stream.
	Close() error
}

// InlineStager is implemented by a Stager that can also copy a batch on
// the device's own stream: StageInline copies src (exactly dst's bytes)
// into the next pinned buffer, then into dst on the device's stream,
// ordered after everything enqueued there before it and before
// everything enqueued after, with no copy stream, no event for the
// device's stream to wait on and no Release to make: for a caller whose
// copy has nothing to hide behind (an inference forward that reads its
// results before the next one). src may be reused when it returns. Not
// during a graph capture.
type InlineStager interface {
	StageInline(dst *T, src []byte) error
}

// Stagers is implemented by a backend that stages host batches through
// pinned buffers on a copy stream of its own.
type Stagers interface {
	// NewStager makes a Stager with slots pinned buffers of bytes each
	// (slots ≥ 2 lets the next batch be filled while the last copies).
	NewStager(slots, bytes int) (Stager, error)
}

// Overlap is what a Stager's trace measured (Stager.StopTrace): when
// each timed copy ran on the copy stream and each timed step on the
// device's stream, on one clock, and how much of the copying ran while a
// step was running.
type Overlap struct {
	Copies, Steps int // the copies and steps timed
	// Dropped counts copies and steps not timed because the trace's
	// capacity was used up.
	Dropped int
	// CopyTime is the time the copies took, summed; HiddenTime is the
	// part of it during which a step was running on the device's stream
	// (between its BeginStep and EndStep); StepTime is the time covered
	// by the steps (their union), and Span the time from the first begin
	// to the last end of anything timed.
	CopyTime, HiddenTime, StepTime, Span time.Duration
	// Fraction is HiddenTime / CopyTime: 1 when every copy ran entirely
	// behind a step, 0 when none overlapped one (and 0 with no copies).
	Fraction float64
}

// ByteCopier is implemented by a backend that copies whole buffers with
// its driver's copy engines: the reference paths that staged and fused
// copies are measured against.
type ByteCopier interface {
	// CopyHostToDevice copies src, pageable host memory of exactly dst's
	// bytes, into dst (contiguous) after the work already enqueued, and
	// waits for the copy. Not during a capture.
	CopyHostToDevice(dst *T, src []byte) error
	// CopyDeviceToDevice enqueues a copy of src into dst (both
	// contiguous, of one dtype and element count, not overlapping) and
	// does not wait.
	CopyDeviceToDevice(dst, src *T) error
}
