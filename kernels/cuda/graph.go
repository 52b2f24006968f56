//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
)

// Graph is work captured from the device's stream as a CUDA graph,
// replayed with one launch. Replays read and write the same device
// addresses as the captured calls did: the tensors used must stay alive,
// and new inputs are copied into them (the static buffers of a captured
// step), never swapped for other tensors.
type Graph struct {
	d *Device
	g *graph
}

// Capture runs step with the device's stream in capture mode and returns
// the captured graph, instantiated. Nothing runs during the capture: the
// kernels step enqueues are recorded. The allocator serves only cached
// blocks meanwhile (warm a step up eagerly before capturing it). An error
// from step, or from the driver, ends the capture and is returned.
func (d *Device) Capture(step func() error) (*Graph, error) {
	runtime.LockOSThread() // the capture is this thread's (thread-local mode)
	defer runtime.UnlockOSThread()
	release := d.enter()
	defer release()
	if err := beginCapture(d.stream); err != nil {
		return nil, err
	}
	d.alloc.setCapturing(true)
	stepErr := step()
	d.alloc.setCapturing(false)
	g, err := endCapture(d.stream)
	if stepErr != nil {
		if g != nil {
			g.destroy()
		}
		return nil, fmt.Errorf("cuda: capture: %w", stepErr)
	}
	if err != nil {
		return nil, fmt.Errorf("cuda: capture: %w", err)
	}
	return &Graph{d: d, g: g}, nil
}

// Replay launches the graph on the device's stream (asynchronously, like
// every other launch).
func (g *Graph) Replay() error {
	if g.g == nil {
		return errors.New("cuda: replaying a closed graph")
	}
	release := g.d.enter()
	defer release()
	return g.g.launch(g.d.stream)
}

// Close frees the graph; it may not be replayed afterwards.
func (g *Graph) Close() error {
	if g.g == nil {
		return nil
	}
	release := g.d.enter()
	defer release()
	err := g.g.destroy()
	g.g = nil
	return err
}
