//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The capture family: the device's stream capture becomes a CUDA graph
// (Graph), which kernels.Graph's Replay launches once per replay.

// BeginCapture implements kernels.Backend: the stream enters capture
// mode (Device.BeginCapture), for the calling goroutine.
func (b *Backend) BeginCapture() error { return b.d.BeginCapture() }

// EndCapture implements kernels.Backend: the captured launches become a
// CUDA graph, which the returned kernels.Graph replays.
func (b *Backend) EndCapture() (kernels.Graph, error) {
	g, err := b.d.EndCapture()
	if err != nil {
		return nil, err
	}
	return backendGraph{g}, nil
}

// Capturing implements kernels.Backend.
func (b *Backend) Capturing() bool { return b.d.Capturing() }

// Synchronize implements kernels.Backend: it waits for the stream and
// counts a host sync of the device.
func (b *Backend) Synchronize() error {
	return b.d.syncCounted()
}

// syncCounted waits for the device's stream, a host sync counted as sim
// counts its own (tensor.HostSyncs), with the time it took;
// ErrSyncInCapture during a capture.
func (d *Device) syncCounted() error {
	if d.Capturing() {
		return ErrSyncInCapture
	}
	start := time.Now()
	if err := d.Synchronize(); err != nil {
		return err
	}
	tensor.CountHostSync(tensor.CUDA(d.ordinal))
	tensor.AddHostSyncTime(tensor.CUDA(d.ordinal), time.Since(start))
	return nil
}

// ErrSyncInCapture is returned by Synchronize during a capture, where
// waiting for the stream would invalidate the capture.
var ErrSyncInCapture = errors.New("cuda: Synchronize during a graph capture")

// backendGraph is a captured Graph as a kernels.Graph.
type backendGraph struct{ g *Graph }

// Replay implements kernels.Graph: one graph launch on the stream. A
// failed launch panics (kernels.Graph.Replay returns nothing).
func (g backendGraph) Replay() { must(g.g.Replay()) }

// Len implements kernels.Graph: the graph's node count.
func (g backendGraph) Len() int { return g.g.Nodes() }

// Graph is work captured from the device's stream as a CUDA graph,
// replayed with one launch. Replays read and write the same device
// addresses as the captured calls did: the tensors used must stay alive,
// and new inputs are copied into them (the static buffers of a captured
// step), never swapped for other tensors. Blocks the allocator handed out
// during the capture (the step's intermediates and scratch) are kept for
// the graph until it is closed or collected, even once their tensors are
// gone.
type Graph struct {
	d      *Device
	g      *graph
	blocks []cu.DevicePtr
	nodes  int
}

// ErrCaptureActive is returned by BeginCapture while a capture runs.
var ErrCaptureActive = errors.New("cuda: a capture is already in progress")

// ErrNoCapture is returned by EndCapture without a BeginCapture.
var ErrNoCapture = errors.New("cuda: no capture in progress")

// BeginCapture puts the device's stream in capture mode: from here to
// EndCapture nothing runs, the launches are recorded. The capture belongs
// to the calling goroutine, which stays locked to its OS thread until
// EndCapture (the driver ties a capture to its thread); call EndCapture
// from the same goroutine. Blocks the allocator hands out meanwhile
// (cached ones, or fresh from the driver) belong to the graph as well.
func (d *Device) BeginCapture() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.capturing {
		return ErrCaptureActive
	}
	runtime.LockOSThread() // released by EndCapture
	release := d.enter()
	defer release()
	if err := beginCapture(d.stream); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	d.alloc.beginRecording()
	d.capturing = true
	return nil
}

// EndCapture ends the capture and instantiates the graph. When the
// capture was invalidated (an illegal call during it, such as a
// synchronising copy) the error says so and the stream is usable again.
func (d *Device) EndCapture() (*Graph, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.capturing {
		return nil, ErrNoCapture
	}
	d.capturing = false
	defer runtime.UnlockOSThread()
	release := d.enter()
	defer release()
	blocks := d.alloc.endRecording()
	g, err := endCapture(d.stream)
	if err != nil {
		d.alloc.release(blocks)
		return nil, fmt.Errorf("cuda: capture: %w", err)
	}
	nodes, err := g.nodes()
	if err != nil {
		g.destroy()
		d.alloc.release(blocks)
		return nil, fmt.Errorf("cuda: capture: %w", err)
	}
	gr := &Graph{d: d, g: g, blocks: blocks, nodes: nodes}
	runtime.SetFinalizer(gr, func(gr *Graph) {
		if gr.g != nil {
			gr.d.alloc.queueGraph(gr.g, gr.blocks)
		}
	})
	return gr, nil
}

// Capturing reports whether a capture is in progress.
func (d *Device) Capturing() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.capturing
}

// Capture runs step with the device's stream in capture mode and returns
// the captured graph, instantiated (BeginCapture, step, EndCapture). An
// error from step, or from the driver, ends the capture and is returned.
func (d *Device) Capture(step func() error) (*Graph, error) {
	if err := d.BeginCapture(); err != nil {
		return nil, err
	}
	stepErr := step()
	g, err := d.EndCapture()
	if stepErr != nil {
		if g != nil {
			g.Close()
		}
		return nil, fmt.Errorf("cuda: capture: %w", stepErr)
	}
	return g, err
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

// Nodes is the number of nodes (kernel launches and copies) in the graph.
func (g *Graph) Nodes() int { return g.nodes }

// Close frees the graph and gives the blocks it held back to the
// allocator; it may not be replayed afterwards.
func (g *Graph) Close() error {
	if g.g == nil {
		return nil
	}
	runtime.SetFinalizer(g, nil)
	release := g.d.enter()
	defer release()
	err := g.g.destroy()
	g.g = nil
	g.d.alloc.release(g.blocks)
	g.blocks = nil
	return err
}
