package data

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/tensor"
)

// fakeStagers stands in for the CUDA backend's pinned staging on sim: it
// checks the loader's use of the kernels.Stager contract and performs
// each copy at the latest moment the contract allows — when the batch is
// awaited — so that a batch read before its Await holds stale data.
type fakeStagers struct {
	made []*fakeStager
}

func (f *fakeStagers) NewStager(slots, bytes int) (kernels.Stager, error) {
	if slots < 1 || bytes < 1 {
		return nil, fmt.Errorf("fake: NewStager(%d, %d)", slots, bytes)
	}
	s := &fakeStager{slots: slots, bytes: bytes, bufs: map[*tensor.Storage]*fakeBuf{}}
	f.made = append(f.made, s)
	return s, nil
}

// The states of a device buffer under the contract: a copy staged ahead
// into it (ahead), awaited and so possibly read by enqueued steps
// (awaited), marked free by Release (released).
const (
	bufFresh = iota
	bufAhead
	bufAwaited
	bufReleased
)

type fakeBuf struct {
	state   int
	pending []byte // the bytes staged ahead, copied at Await
	dst     *tensor.Tensor
}

type fakeStager struct {
	slots, bytes int
	bufs         map[*tensor.Storage]*fakeBuf // by destination storage (a tail view shares its buffer's)
	log          []string                     // "ahead x0", "await y1", "release x0" …
	names        map[*tensor.Storage]string
	violations   []string
	closed       bool
}

// name is "x0", "y1", …: the dtype's letter and the order in which the
// buffer was first seen among those of its dtype.
func (s *fakeStager) name(dst *tensor.Tensor) string {
	if s.names == nil {
		s.names = map[*tensor.Storage]string{}
	}
	st := dst.Storage()
	if n, ok := s.names[st]; ok {
		return n
	}
	letter, k := "x", 0
	if dst.DType() == tensor.I64 {
		letter = "y"
	}
	for _, n := range s.names {
		if strings.HasPrefix(n, letter) {
			k++
		}
	}
	s.names[st] = fmt.Sprintf("%s%d", letter, k)
	return s.names[st]
}

func (s *fakeStager) buf(dst *tensor.Tensor) *fakeBuf {
	b, ok := s.bufs[dst.Storage()]
	if !ok {
		b = &fakeBuf{}
		s.bufs[dst.Storage()] = b
	}
	return b
}

func (s *fakeStager) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *fakeStager) StageAhead(dst *tensor.Tensor, fill func(pinned []byte)) error {
	if s.closed {
		return errors.New("fake: StageAhead after Close")
	}
	if dst.Device().Kind != tensor.KindSim || !dst.IsContiguous() {
		return fmt.Errorf("fake: StageAhead into %v %v", dst.Device(), dst.Shape())
	}
	if dst.Nbytes() > s.bytes {
		return fmt.Errorf("fake: %d bytes exceed the %d-byte pinned buffers", dst.Nbytes(), s.bytes)
	}
	n := s.name(dst)
	s.log = append(s.log, "ahead "+n)
	b := s.buf(dst)
	switch b.state {
	case bufAhead:
		s.violate("StageAhead into %s, whose previous copy was never awaited", n)
	case bufAwaited:
		s.violate("StageAhead into %s, awaited and not released: the copy would race with the steps reading it", n)
	}
	pinned := make([]byte, dst.Nbytes())
	for i := range pinned {
		pinned[i] = 0xA5 // what fill must overwrite
	}
	fill(pinned)
	b.state, b.pending, b.dst = bufAhead, pinned, dst
	return nil
}

func (s *fakeStager) Await(dst *tensor.Tensor) error {
	n := s.name(dst)
	s.log = append(s.log, "await "+n)
	b := s.buf(dst)
	if b.state != bufAhead {
		return fmt.Errorf("fake: Await of %s, with nothing staged ahead", n)
	}
	v := tensor.BackendView(b.dst) // the fake is the backend: it writes device memory
	copy(v.Storage().Bytes()[v.Offset()*v.DType().Size():], b.pending)
	b.state, b.pending = bufAwaited, nil
	return nil
}

func (s *fakeStager) Release(dst *tensor.Tensor) error {
	n := s.name(dst)
	s.log = append(s.log, "release "+n)
	b := s.buf(dst)
	if b.state == bufAhead {
		s.violate("Release of %s with a copy staged and not awaited", n)
		return nil
	}
	if b.state != bufFresh {
		b.state = bufReleased
	}
	return nil
}

func (s *fakeStager) Close() error {
	s.closed = true
	return nil
}

func (s *fakeStager) Stage(*tensor.Tensor, []byte) error {
	return errors.New("fake: the loader stages ahead only")
}

func (s *fakeStager) StageFunc(*tensor.Tensor, func([]byte)) error {
	return errors.New("fake: the loader stages ahead only")
}
func (s *fakeStager) StartTrace(int, int) error           { return nil }
func (s *fakeStager) BeginStep() error                    { return nil }
func (s *fakeStager) EndStep() error                      { return nil }
func (s *fakeStager) StopTrace() (kernels.Overlap, error) { return kernels.Overlap{}, nil }

// state returns the state of the buffer dst lives in.
func (s *fakeStager) state(dst *tensor.Tensor) int { return s.buf(dst).state }

func simDevice(t *testing.T) tensor.Device {
	t.Helper()
	d := tensor.Sim(0)
	if _, err := device.OpenDevice(d); err != nil {
		t.Fatal(err)
	}
	return d
}

func testSet(t *testing.T, n int) *TensorDataset {
	t.Helper()
	tr, _, err := Synthetic(SyntheticOptions{Train: n, Test: 1, Seed: 8})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestStagedPathOrdering drives the pinned staging path with a fake
// kernels.Stagers on sim: the batches are the CPU loader's bit for bit
// (the copies land only at Await, so a batch used before its Await would
// differ); each Next awaits its batch, releases the other buffer set and
// stages the next batch into it, in that order; two buffer sets of
// images and labels are used in turn (double buffering); the batch
// returned is never released nor overwritten before the next call; a
// break mid-epoch and the next epoch keep the contract; Close closes the
// Stager.
func TestStagedPathOrdering(t *testing.T) {
	dev := simDevice(t)
	ds := testSet(t, 29)
	o := LoaderOptions{BatchSize: 6, Shuffle: true, Seed: 2, Pinned: true} // 5 batches, the last of 5 rows
	cpu, err := NewLoader(ds, o)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	o.Device = dev
	fake := &fakeStagers{}
	l, err := newLoader(ds, o, fake)
	if err != nil {
		t.Fatal(err)
	}
	if len(fake.made) != 1 || fake.made[0].slots != 4 || fake.made[0].bytes != 6*28*28*4 {
		t.Fatalf("stagers made %d, want one of 4 slots of %d bytes", len(fake.made), 6*28*28*4)
	}
	st := fake.made[0]
	if !l.Pinned() {
		t.Fatal("Pinned() false with a Stagers backend")
	}
	check := func(e int, stopAfter int) {
		t.Helper()
		cpu.Reset(e)
		l.Reset(e)
		for i := 0; ; i++ {
			mark := len(st.log)
			s0 := tensor.HostSyncs(dev)
			b, ok := l.Next()
			if tensor.HostSyncs(dev) != s0 {
				t.Fatalf("epoch %d: Next synced the host", e)
			}
			want, okW := cpu.Next()
			if ok != okW {
				t.Fatalf("epoch %d batch %d: %v, cpu %v", e, i, ok, okW)
			}
			if !ok {
				if len(st.log) != mark {
					t.Fatalf("epoch %d: the call past the end staged %v", e, st.log[mark:])
				}
				return
			}
			gx, _ := b.X.ToDevice(tensor.CPU)
			gy, _ := b.Y.ToDevice(tensor.CPU)
			if !slices.Equal(gx.F32(), want.X.F32()) || !slices.Equal(gy.I64(), want.Y.I64()) || !slices.Equal(b.Indices, want.Indices) {
				t.Fatalf("epoch %d batch %d differs from the cpu's", e, i)
			}
			// This call's sequence: [first of the epoch: release, ahead
			// into set k], await set k, then release and ahead into the
			// other set unless this is the last batch.
			k, other := st.name(b.X)[1:], ""
			if k == "0" {
				other = "1"
			} else {
				other = "0"
			}
			var seq []string
			if i == 0 {
				seq = append(seq, "release x"+k, "release y"+k, "ahead x"+k, "ahead y"+k)
			}
			seq = append(seq, "await x"+k, "await y"+k)
			if i < l.Len()-1 {
				seq = append(seq, "release x"+other, "release y"+other, "ahead x"+other, "ahead y"+other)
			}
			if got := st.log[mark:]; !slices.Equal(got, seq) {
				t.Fatalf("epoch %d batch %d: calls %v, want %v", e, i, got, seq)
			}
			if k != fmt.Sprint(i%2) {
				t.Fatalf("epoch %d batch %d in set %s: the sets alternate from 0", e, i, k)
			}
			if st.state(b.X) != bufAwaited || st.state(b.Y) != bufAwaited {
				t.Fatalf("epoch %d batch %d: the batch returned is not in its awaited state", e, i)
			}
			if i == stopAfter {
				return
			}
		}
	}
	check(0, -1)
	check(1, 1) // break after batch 1: batch 2 is staged and never taken
	check(2, -1)
	check(1, -1)
	if len(st.violations) != 0 {
		t.Fatalf("contract violations:\n%s", strings.Join(st.violations, "\n"))
	}
	sets := map[string]bool{}
	for _, n := range st.names {
		sets[n] = true
	}
	if len(sets) != 4 || !sets["x0"] || !sets["x1"] || !sets["y0"] || !sets["y1"] {
		t.Fatalf("device buffers %v, want two sets of images and labels", sets)
	}
	if stats := l.Stats(); stats.Copies != 2*(5+3+5+5) || stats.CopyTime <= 0 {
		t.Fatalf("stats %+v: want %d copies", stats, 2*(5+3+5+5))
	}
	l.Close()
	if !st.closed {
		t.Fatal("Close left the Stager open")
	}
}

// TestFakeStagerCatchesRaces: the fake's checks can fail — staging into
// a buffer that was awaited and not released (a copy racing with the
// steps that read it), and releasing one whose copy was never awaited,
// are reported; awaiting nothing is an error.
func TestFakeStagerCatchesRaces(t *testing.T) {
	dev := simDevice(t)
	s, _ := (&fakeStagers{}).NewStager(2, 64)
	st := s.(*fakeStager)
	x, err := tensor.EmptyOn(dev, tensor.F32, 4)
	if err != nil {
		t.Fatal(err)
	}
	fill := func(p []byte) { clear(p) }
	if err := st.Await(x); err == nil {
		t.Fatal("Await with nothing staged accepted")
	}
	_ = st.StageAhead(x, fill)
	_ = st.Release(x)
	_ = st.Await(x)
	_ = st.StageAhead(x, fill)
	if len(st.violations) != 2 {
		t.Fatalf("violations %q, want 2", st.violations)
	}
}
