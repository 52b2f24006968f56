package tamiyo

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// fakeStagers stands a kernels.Stagers in for sim (which has none): its
// Stager copies synchronously, as the bytes it is handed say, and counts
// what it is asked.
type fakeStagers struct {
	made, closed, stages, releases int
	byDType                        map[tensor.DType]int
	bytes                          []int
	refuse                         bool
}

func (f *fakeStagers) NewStager(slots, bytes int) (kernels.Stager, error) {
	if f.refuse {
		return nil, errors.New("no pinned memory")
	}
	f.made++
	f.bytes = append(f.bytes, bytes)
	return &fakeStager{f: f, n: bytes}, nil
}

type fakeStager struct {
	f *fakeStagers
	n int
}

func (s *fakeStager) Stage(dst *tensor.Tensor, src []byte) error {
	if len(src) != dst.Nbytes() || len(src) > s.n {
		return errors.New("fakeStager: wrong size")
	}
	var host *tensor.Tensor
	switch dst.DType() {
	case tensor.F32:
		host = tensor.FromSlice(unsafe.Slice((*float32)(unsafe.Pointer(&src[0])), len(src)/4), dst.Numel())
	case tensor.I64:
		host = tensor.FromSlice(unsafe.Slice((*int64)(unsafe.Pointer(&src[0])), len(src)/8), dst.Numel())
	case tensor.Bool:
		host = tensor.FromSlice(unsafe.Slice((*bool)(unsafe.Pointer(&src[0])), len(src)), dst.Numel())
	default:
		return errors.New("fakeStager: dtype")
	}
	s.f.stages++
	if s.f.byDType == nil {
		s.f.byDType = map[tensor.DType]int{}
	}
	s.f.byDType[dst.DType()]++
	return tensor.CopyFromHost(dst, host)
}
func (s *fakeStager) StageFunc(*tensor.Tensor, func([]byte)) error  { return errors.New("unused") }
func (s *fakeStager) StageAhead(*tensor.Tensor, func([]byte)) error { return errors.New("unused") }
func (s *fakeStager) Await(*tensor.Tensor) error                    { return errors.New("unused") }
func (s *fakeStager) Release(*tensor.Tensor) error                  { s.f.releases++; return nil }
func (s *fakeStager) StartTrace(int, int) error                     { return nil }
func (s *fakeStager) BeginStep() error                              { return nil }
func (s *fakeStager) EndStep() error                                { return nil }
func (s *fakeStager) StopTrace() (kernels.Overlap, error)           { return kernels.Overlap{}, nil }
func (s *fakeStager) Close() error                                  { s.f.closed++; return nil }

// fakeInlineStager is fakeStager that also copies inline
// (kernels.InlineStager), counting those copies apart.
type fakeInlineStager struct {
	fakeStager
	inline int
}

func (s *fakeInlineStager) StageInline(dst *tensor.Tensor, src []byte) error {
	if err := s.fakeStager.Stage(dst, src); err != nil {
		return err
	}
	s.f.stages--
	s.inline++
	return nil
}

// inlineStagers is fakeStagers making fakeInlineStagers (the last one
// made kept in last).
type inlineStagers struct {
	fakeStagers
	last *fakeInlineStager
}

func (f *inlineStagers) NewStager(slots, bytes int) (kernels.Stager, error) {
	f.made++
	f.bytes = append(f.bytes, bytes)
	f.last = &fakeInlineStager{fakeStager: fakeStager{f: &f.fakeStagers, n: bytes}}
	return f.last, nil
}

// useFakeStagers stands fake in for sim's Stagers, with pinned buffers
// of at least minBytes, for the rest of t, the process's device Stagers
// forgotten before and after. Sim's mapped memory is off meanwhile, so
// that the features go through the Stager too (as on CUDA with
// ESPER_CUDA_MAPPED_INPUTS=off).
func useFakeStagers(t *testing.T, fake kernels.Stagers, minBytes int) {
	mapped := tensor.SetSimMapped(false)
	t.Cleanup(func() { tensor.SetSimMapped(mapped) })
	restore, restoreMin := stagersFor, pinMinBytes
	forget := func() {
		pinsMu.Lock()
		clear(pins)
		pinsMu.Unlock()
	}
	forget()
	stagersFor = func(tensor.Device) (kernels.Stagers, bool) { return fake, true }
	pinMinBytes = minBytes
	t.Cleanup(func() {
		stagersFor, pinMinBytes = restore, restoreMin
		forget()
	})
}

// TestInferenceStagesThroughAStager: where the device's backend has a
// Stager, an Inference copies each forward's graph into its kept
// buffers through it — the float and the index buffer — and releases
// every kept buffer once the forward is enqueued, and computes what the
// CPU computes; a graph larger than the pinned buffers gets a larger
// Stager (the device waited for first); where none can be made, the
// copies are synchronous, with the same results.
func TestInferenceStagesThroughAStager(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		fake := &fakeStagers{refuse: refuse}
		useFakeStagers(t, fake, 64<<10)
		dev := tensor.Sim(0)
		want, in, _ := inferencePair(t, dev)
		forward := func(call int, sizes []int) {
			var inputs []GraphInput
			for i, n := range sizes {
				inputs = append(inputs, testInput(t, n, i+call))
			}
			g, err := BuildGraphBatch(inputs)
			require.NoError(t, err)
			sameForward(t, want, in, g, "call %d", call)
		}
		for call := 0; call < 5; call++ {
			forward(call, []int{3, 1, 5, 2})
		}
		big := make([]int, 400)
		for i := range big {
			big[i] = 1 + i%5
		}
		forward(5, big) // new buffers: copied as they are made
		forward(6, big) // reused: staged, past the first Stager's buffers
		syncs := tensor.HostSyncs(dev)
		forward(7, big)
		if refuse {
			require.Zero(t, fake.stages, "no Stager: synchronous copies")
			continue
		}
		require.Equal(t, uint64(1), tensor.HostSyncs(dev)-syncs, "a forward staged as before syncs once (its read)")
		// The first forward of each size makes its buffers; each later
		// one stages the float and the index buffer. Every forward from
		// the second (the first Stager's) releases its two.
		require.Equal(t, 2*4+2*2, fake.stages)
		require.Equal(t, 2*7, fake.releases)
		require.Equal(t, 2, fake.made, "a larger Stager for the larger graph")
		require.Equal(t, 1, fake.closed, "the smaller one closed")
		require.Greater(t, fake.bytes[1], fake.bytes[0])
		// A replay of the latest forward's graph reads its two kept
		// buffers again: it releases them again, so the next copies into
		// them wait for it.
		require.NoError(t, in.ReplayLast())
		require.Equal(t, 2*8, fake.releases, "ReplayLast releases the latest forward's kept buffers")
	}
}

// TestInferenceStagesInline: where the device's Stager copies on the
// device's own stream (kernels.InlineStager), every staged copy of a
// forward goes that way and no kept buffer is released (the stream
// orders the copies after the forwards that read the buffers), ReplayLast
// included; the results are the CPU's.
func TestInferenceStagesInline(t *testing.T) {
	fake := &inlineStagers{}
	useFakeStagers(t, fake, 64<<10)
	dev := tensor.Sim(0)
	want, in, _ := inferencePair(t, dev)
	for call := 0; call < 5; call++ {
		var inputs []GraphInput
		for i, n := range []int{3, 1, 5, 2} {
			inputs = append(inputs, testInput(t, n, i+call))
		}
		g, err := BuildGraphBatch(inputs)
		require.NoError(t, err)
		sameForward(t, want, in, g, "call %d", call)
	}
	require.NoError(t, in.ReplayLast())
	require.Equal(t, 1, fake.made)
	// The first forward makes the buffers; each later one copies the
	// float and the index buffer, inline.
	require.Equal(t, 2*4, fake.last.inline)
	require.Zero(t, fake.stages, "a copy through the copy stream")
	require.Zero(t, fake.releases, "a release with inline copies")
}

// TestInferenceFollowsAMovedPolicy: an Inference whose policy moves to
// another device drops the buffers it kept on the old one.
func TestInferenceFollowsAMovedPolicy(t *testing.T) {
	want, in, onDev := inferencePair(t, tensor.Sim(0))
	_, _, g, _ := devicePair(t, tensor.Sim(0))
	// A batch whose graphs all have the widest slot count also takes
	// the joined output, a mapped tensor of the device's.
	var full []GraphInput
	for i := range 4 {
		full = append(full, testInput(t, 3, i))
	}
	fg, err := BuildGraphBatch(full)
	require.NoError(t, err)
	for _, dev := range []tensor.Device{tensor.Sim(0), tensor.Sim(1), tensor.Sim(0)} {
		require.NoError(t, onDev.To(dev))
		for i := 0; i < 3; i++ {
			sameForward(t, want, in, g, "on %v", dev)
			sameForward(t, want, in, fg, "full slots on %v", dev)
			require.NotNil(t, in.into)
			require.Equal(t, dev, in.into.Device())
		}
	}
}

// TestInferenceSkipsUnchangedIndices: a graph of the last one's
// topology stages its features but not its indices (the device buffer
// holds them already), and its CSRs are the last ones; a graph of
// another topology of the same sizes stages both; every forward
// computes what the CPU computes.
func TestInferenceSkipsUnchangedIndices(t *testing.T) {
	fake := &fakeStagers{}
	useFakeStagers(t, fake, 64<<10)
	want, in, _ := inferencePair(t, tensor.Sim(0))
	graph := func(seed int) *Graph {
		var inputs []GraphInput
		for i, n := range []int{3, 1, 5, 2} {
			inputs = append(inputs, testInput(t, n, i+seed))
		}
		g, err := BuildGraphBatch(inputs)
		require.NoError(t, err)
		return g
	}
	a, b := graph(0), graph(1)
	// b: a's shapes, other features; and one edge of a relation moved
	// within its destinations, so that its topology differs.
	moved := -1
	for r := range b.Edges {
		if d := b.Edges[r].Dst; len(d) > 1 && d[0] != d[1] {
			d[0], d[1] = d[1], d[0]
			moved = r
			break
		}
	}
	require.GreaterOrEqual(t, moved, 0, "a relation with two destinations to swap")
	for i, g := range []*Graph{a, a, a, b, b, a} {
		sameForward(t, want, in, g, "forward %d", i)
	}
	// Forward 0 makes the buffers; 1 and 2 stage the features alone; 3
	// (b) both; 4 (b again) the features; 5 (a) both.
	require.Equal(t, 5, fake.byDType[tensor.F32])
	require.Equal(t, 2, fake.byDType[tensor.I64])
}

// TestInferenceMappedInputsAndOutputs: where the device gives mapped
// memory (sim, as CUDA), an Inference keeps its features in a mapped
// buffer written with no Stager copy (only the indices are staged) and,
// for a batch whose graphs all have the widest slot count, reads its
// logits from the mapped tensor the heads' launch wrote, with one host
// sync a forward; every forward computes what the CPU computes. With
// mapped memory off, the same forwards stage the features through the
// Stager and keep no mapped tensor, with the same results.
func TestInferenceMappedInputsAndOutputs(t *testing.T) {
	for _, mapped := range []bool{true, false} {
		fake := &inlineStagers{}
		useFakeStagers(t, fake, 64<<10)
		tensor.SetSimMapped(mapped) // useFakeStagers's cleanup puts the setting back
		dev := tensor.Sim(0)
		want, in, _ := inferencePair(t, dev)
		for _, counts := range [][]int{{3, 3, 3, 3}, {3, 1, 5, 2}} {
			var g *Graph
			for call := 0; call < 4; call++ {
				var inputs []GraphInput
				for i, n := range counts {
					inputs = append(inputs, testInput(t, n, i+call))
				}
				var err error
				g, err = BuildGraphBatch(inputs)
				require.NoError(t, err)
				syncs := tensor.HostSyncs(dev)
				sameForward(t, want, in, g, "mapped %v, %v slots, call %d", mapped, counts, call)
				require.Equal(t, uint64(1), tensor.HostSyncs(dev)-syncs, "one host sync a forward")
			}
			full := counts[1] == 3
			require.Equal(t, mapped && full, in.into != nil, "mapped %v, %v slots: a mapped joined output", mapped, counts)
			mIn, mOut := in.LastMapped()
			require.Equal(t, mapped, mIn, "mapped %v, %v slots: features mapped", mapped, counts)
			require.Equal(t, mapped && full, mOut, "mapped %v, %v slots: logits read from mapped memory", mapped, counts)
			if in.into == nil {
				continue
			}
			require.True(t, in.into.IsMapped())
			// The heads' launch wrote the latest forward's logits and
			// values there, a graph a row.
			got, err := in.Forward(g)
			require.NoError(t, err)
			host, err := in.into.ToDevice(tensor.CPU)
			require.NoError(t, err)
			vals := tensor.Data[float32](host)
			width := host.Shape()[1]
			for b := range g.NumGraphs {
				var row []float32
				for hd := range got.Heads {
					row = append(row, got.Heads[hd][b]...)
				}
				row = append(row, got.Values[b])
				require.Equal(t, row, vals[b*width:(b+1)*width], "graph %d's joined row", b)
			}
		}
		var mappedBufs int
		for _, k := range in.staged.bufs {
			if k.t.IsMapped() {
				require.Equal(t, tensor.F32, k.t.DType(), "only the features are mapped")
				mappedBufs++
			}
		}
		if mapped {
			require.Equal(t, 2, mappedBufs, "a mapped feature buffer per graph size")
			require.Zero(t, fake.byDType[tensor.F32], "features staged through the Stager")
			require.NotEmpty(t, in.outs)
		} else {
			require.Zero(t, mappedBufs)
			require.Positive(t, fake.byDType[tensor.F32], "features staged through the Stager")
			require.Empty(t, in.outs)
		}
		require.NoError(t, in.Close())
		require.Empty(t, in.outs, "Close frees the mapped outputs")
	}
}
