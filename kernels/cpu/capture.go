package cpu

import (
	"errors"

	"github.com/esper-go/esper/kernels"
)

// The capture family (kernels.CaptureFamily): while a capture is in
// progress, launch (backend.go) records each launch closure instead of
// running it; the recorded list is the graph, replayed in order over the
// same static buffers.

// graph is the CPU capture: the launches in order, each a closure over
// static buffers.
type graph struct{ launches []func() }

func (g *graph) Replay() {
	for _, f := range g.launches {
		f()
	}
}

func (g *graph) Len() int { return len(g.launches) }

// ErrCaptureActive is returned by BeginCapture when a capture is running.
var ErrCaptureActive = errors.New("cpu: a capture is already in progress")

// ErrNoCapture is returned by EndCapture without a BeginCapture.
var ErrNoCapture = errors.New("cpu: no capture in progress")

// BeginCapture implements kernels.Backend. Capture is process-wide on the
// CPU backend: eager work issued from other goroutines during a capture
// would be recorded too, so capture from one goroutine at a time.
func (b *Backend) BeginCapture() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec != nil {
		return ErrCaptureActive
	}
	b.rec = &graph{}
	return nil
}

// EndCapture implements kernels.Backend.
func (b *Backend) EndCapture() (kernels.Graph, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec == nil {
		return nil, ErrNoCapture
	}
	g := b.rec
	b.rec = nil
	return g, nil
}

// Capturing implements kernels.Backend.
func (b *Backend) Capturing() bool { return b.rec != nil }

// Synchronize implements kernels.Backend; CPU launches are synchronous.
func (b *Backend) Synchronize() error { return nil }
