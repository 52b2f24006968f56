package tamiyo

import (
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The host's share of an inference forward at W2's batch of 64 graphs
// (3 slots each): what runs on the CPU before the device's work is
// enqueued, on every forward. Graph.Validate checks the graph;
// stageGraph stages it into the kept buffers: the features into sim's
// mapped memory, as into a GPU's, and any changed indices through a
// stand-in Stager that copies into host memory as a pinned buffer
// would, so that the figure is the Go side's alone (no driver).

// benchGraph is a batch of n test graphs of 3 slots.
func benchGraph(b testing.TB, n int) *Graph {
	ins := make([]GraphInput, n)
	for i := range ins {
		ins[i] = testInput(b, 3, i)
	}
	g, err := BuildGraphBatch(ins)
	if err != nil {
		b.Fatal(err)
	}
	return g
}

func BenchmarkGraphValidate(b *testing.B) {
	g := benchGraph(b, 64)
	b.ReportAllocs()
	for b.Loop() {
		if err := g.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// hostStagers stands in for a device's Stagers: each Stage copies into a
// host buffer of the Stager's size.
type hostStagers struct{}

func (hostStagers) NewStager(slots, bytes int) (kernels.Stager, error) {
	return &hostStager{buf: make([]byte, bytes)}, nil
}

type hostStager struct {
	fakeStager
	buf []byte
}

func (s *hostStager) Stage(dst *tensor.Tensor, src []byte) error { copy(s.buf, src); return nil }
func (s *hostStager) Release(*tensor.Tensor) error               { return nil }
func (s *hostStager) Close() error                               { return nil }

func BenchmarkGraphUpload(b *testing.B) {
	restore := stagersFor
	b.Cleanup(func() { stagersFor = restore })
	stagersFor = func(tensor.Device) (kernels.Stagers, bool) { return hostStagers{}, true }
	pinsMu.Lock()
	clear(pins)
	pinsMu.Unlock()
	b.Cleanup(func() {
		pinsMu.Lock()
		clear(pins)
		pinsMu.Unlock()
	})
	g := benchGraph(b, 64)
	dev := tensor.Sim(0)
	var reuse stagingBuffers
	reuse.up = &pinnedUpload{dev: dev}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := stageGraph(g, tensor.F32, dev, &reuse); err != nil {
			b.Fatal(err)
		}
		reuse.up.release()
	}
}

// BenchmarkCapturedForward is a captured inference forward at W2's batch
// of 64 graphs on the sim device, graph check to logits read: its
// allocations are the host's per forward (sim's kernels are the CPU's,
// so its time is not a GPU's).
func BenchmarkCapturedForward(b *testing.B) {
	g := benchGraph(b, 64)
	p, err := NewPolicy(PolicyOptions{Seed: 4, NoDropout: true, Device: tensor.Sim(0)})
	if err != nil {
		b.Fatal(err)
	}
	in, err := NewInference(p, InferenceOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for range 3 { // warm-up, capture, replay
		if _, err := in.Forward(g); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.Forward(g); err != nil {
			b.Fatal(err)
		}
	}
}
