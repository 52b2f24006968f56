package data_test

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/tensor"
)

// countingSet is a small dataset whose sample i is filled with i and
// labelled i mod classes.
func countingSet(t testing.TB, n int) *data.TensorDataset {
	t.Helper()
	x := tensor.Empty(tensor.F32, n, 1, 2, 3)
	y := tensor.Empty(tensor.I64, n)
	xs := x.F32()
	for i := range xs {
		xs[i] = float32(i / 6)
	}
	for i := range n {
		y.I64()[i] = int64(i % 10)
	}
	ds, err := data.NewTensorDataset("counting", x, y, 10, data.Normalization{Std: 1})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func newLoader(t testing.TB, ds data.Dataset, o data.LoaderOptions) *data.Loader {
	t.Helper()
	l, err := data.NewLoader(ds, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// epochOrder returns the sample indices of one epoch in delivery order,
// checking that X and Y hold those samples.
func epochOrder(t *testing.T, l *data.Loader, e int) (order []int, sizes []int) {
	t.Helper()
	for b := range l.Epoch(e) {
		if b.Epoch != e || b.Index != len(sizes) {
			t.Fatalf("batch (%d, %d), want (%d, %d)", b.Epoch, b.Index, e, len(sizes))
		}
		xs, ys := b.X.F32(), b.Y.I64()
		if len(xs) != 6*len(b.Indices) || len(ys) != len(b.Indices) {
			t.Fatalf("batch of %d indices has x %v y %v", len(b.Indices), b.X.Shape(), b.Y.Shape())
		}
		for r, idx := range b.Indices {
			if xs[6*r] != float32(idx) || xs[6*r+5] != float32(idx) || ys[r] != int64(idx%10) {
				t.Fatalf("epoch %d batch %d row %d: x %v y %d, want sample %d", e, b.Index, r, xs[6*r], ys[r], idx)
			}
		}
		order = append(order, b.Indices...)
		sizes = append(sizes, len(b.Indices))
	}
	return order, sizes
}

func TestLoaderOrderAndPartialBatches(t *testing.T) {
	ds := countingSet(t, 23)
	cases := []struct {
		name  string
		o     data.LoaderOptions
		sizes []int
	}{
		{"keep last", data.LoaderOptions{BatchSize: 5}, []int{5, 5, 5, 5, 3}},
		{"drop last", data.LoaderOptions{BatchSize: 5, DropLast: true}, []int{5, 5, 5, 5}},
		{"exact", data.LoaderOptions{BatchSize: 23}, []int{23}},
		{"bigger than set", data.LoaderOptions{BatchSize: 64}, []int{23}},
		{"one", data.LoaderOptions{BatchSize: 1, Prefetch: 5, Workers: 3}, slices.Repeat([]int{1}, 23)},
		{"shuffled keep last", data.LoaderOptions{BatchSize: 4, Shuffle: true, Seed: 9, Workers: 4}, []int{4, 4, 4, 4, 4, 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLoader(t, ds, c.o)
			if l.Len() != len(c.sizes) {
				t.Fatalf("Len %d, want %d", l.Len(), len(c.sizes))
			}
			for e := range 3 {
				order, sizes := epochOrder(t, l, e)
				if !slices.Equal(sizes, c.sizes) {
					t.Fatalf("epoch %d: batch sizes %v, want %v", e, sizes, c.sizes)
				}
				seen := make(map[int]bool)
				for _, i := range order {
					if seen[i] || i < 0 || i >= ds.Len() {
						t.Fatalf("epoch %d: index %d repeated or out of range in %v", e, i, order)
					}
					seen[i] = true
				}
				if !c.o.Shuffle && !slices.IsSorted(order) {
					t.Fatalf("unshuffled order %v", order)
				}
			}
		})
	}
}

func TestLoaderShuffleDeterministic(t *testing.T) {
	ds := countingSet(t, 100)
	o := data.LoaderOptions{BatchSize: 16, Shuffle: true, Seed: 42, Workers: 2}
	a, b := newLoader(t, ds, o), newLoader(t, ds, o)
	o.Seed = 43
	c := newLoader(t, ds, o)
	var prev []int
	for _, e := range []int{0, 1, 2, 7} {
		oa, _ := epochOrder(t, a, e)
		ob, _ := epochOrder(t, b, e)
		oc, _ := epochOrder(t, c, e)
		if !slices.Equal(oa, ob) {
			t.Fatalf("epoch %d: same seed, different orders", e)
		}
		if slices.Equal(oa, oc) {
			t.Fatalf("epoch %d: seeds 42 and 43 give the same order", e)
		}
		if slices.Equal(oa, prev) {
			t.Fatalf("epoch %d repeats the previous epoch's order", e)
		}
		if slices.IsSorted(oa) {
			t.Fatalf("epoch %d is not shuffled", e)
		}
		sorted := slices.Sorted(slices.Values(oa))
		if !slices.Equal(sorted, seq(100)) {
			t.Fatalf("epoch %d is not a permutation", e)
		}
		prev = oa
	}
	// An epoch's order depends on its number only, not on history.
	again, _ := epochOrder(t, b, 1)
	first, _ := epochOrder(t, newLoader(t, ds, data.LoaderOptions{BatchSize: 16, Shuffle: true, Seed: 42}), 1)
	if !slices.Equal(again, first) {
		t.Fatal("epoch 1 differs between a fresh loader and one that ran epochs 0–7")
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// The loader's bytes equal direct Batch copies of the same indices.
func TestLoaderMatchesBatch(t *testing.T) {
	train, _, err := data.Synthetic(data.SyntheticOptions{Train: 300, Test: 10, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	l := newLoader(t, train, data.LoaderOptions{BatchSize: 64, Shuffle: true, Seed: 1, Workers: 3, Prefetch: 3})
	x := tensor.Empty(tensor.F32, 64, 1, 28, 28)
	y := tensor.Empty(tensor.I64, 64)
	for e := range 2 {
		n := 0
		for b := range l.Epoch(e) {
			k := len(b.Indices)
			xv, yv := x.Narrow(0, 0, k), y.Narrow(0, 0, k)
			train.Batch(b.Indices, xv, yv)
			if !bytes.Equal(f32Bytes(xv.F32()), f32Bytes(b.X.F32())) || !slices.Equal(yv.I64(), b.Y.I64()) {
				t.Fatalf("epoch %d batch %d differs from Batch(%v)", e, b.Index, b.Indices)
			}
			n += k
		}
		if n != 300 {
			t.Fatalf("epoch %d delivered %d samples", e, n)
		}
	}
}

func f32Bytes(s []float32) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, s)
	return b.Bytes()
}

// slowSet delays every Batch, so that batches are still being assembled
// when the consumer resets or closes.
type slowSet struct {
	data.Dataset
	delay time.Duration
}

func (s slowSet) Batch(idx []int, x, y *tensor.Tensor) {
	time.Sleep(s.delay)
	s.Dataset.Batch(idx, x, y)
}

func TestLoaderCloseWithPendingPrefetch(t *testing.T) {
	before := runtime.NumGoroutine()
	ds := slowSet{countingSet(t, 200), 20 * time.Millisecond}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 5 {
			l, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 8, Prefetch: 4, Workers: 3, Shuffle: true})
			if err != nil {
				t.Error(err)
				return
			}
			if b, ok := l.Next(); !ok || b.Index != 0 {
				t.Error("no first batch")
			}
			l.Reset(3) // abandons batches in flight
			l.Next()
			l.Close() // workers are mid-copy and the ring is full
			l.Close()
			if _, ok := l.Next(); ok {
				t.Error("Next after Close returned a batch")
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close with pending prefetch deadlocked")
	}
	// Goroutines exit promptly after Close; allow the runtime a moment.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after Close, %d before: leak", n, before)
	}
}

// Release recycles a batch early; a second Release and a Release of a
// stale batch do nothing.
func TestLoaderRelease(t *testing.T) {
	ds := countingSet(t, 40)
	l := newLoader(t, ds, data.LoaderOptions{BatchSize: 10, Prefetch: 1})
	var got []int
	for {
		b, ok := l.Next()
		if !ok {
			break
		}
		got = append(got, b.Indices[0])
		b.Release()
		b.Release()
	}
	if !slices.Equal(got, []int{0, 10, 20, 30}) {
		t.Fatalf("first indices %v", got)
	}
	if l.Stats().Batches != 4 {
		t.Fatalf("stats %+v", l.Stats())
	}
}

// A stalled producer shows up as input wait.
func TestLoaderInputWait(t *testing.T) {
	l := newLoader(t, slowSet{countingSet(t, 30), 5 * time.Millisecond}, data.LoaderOptions{BatchSize: 10, Prefetch: 1})
	l.Reset(1) // restart now, so every batch is assembled while we wait
	var total time.Duration
	for b := range l.Epoch(1) {
		total += b.InputWait
	}
	st := l.Stats()
	if st.Batches != 3 || st.InputWait != total || st.InputWait < 5*time.Millisecond || st.MaxInputWait > st.InputWait {
		t.Fatalf("stats %+v, per-batch total %v", st, total)
	}
}

func TestLoaderSteadyStateAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ds := countingSet(t, 1000)
	l := newLoader(t, ds, data.LoaderOptions{BatchSize: 7, Shuffle: true, Workers: 2})
	l.Reset(0)
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := l.Next(); !ok {
			t.Fatal("epoch ended early")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch", allocs)
	}
}

func TestLoaderOptionsErrors(t *testing.T) {
	ds := countingSet(t, 10)
	for _, o := range []data.LoaderOptions{
		{BatchSize: -1},
		{Prefetch: -1},
		{Workers: -2},
		{BatchSize: 11, DropLast: true},
	} {
		if _, err := data.NewLoader(ds, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if _, err := data.NewLoader(nil, data.LoaderOptions{}); err == nil {
		t.Error("nil dataset accepted")
	}
	l := newLoader(t, ds, data.LoaderOptions{Pinned: true})
	if l.Pinned() {
		t.Error("Pinned reports page-locked buffers on the CPU")
	}
	if o := l.Options(); o.BatchSize != data.DefaultBatchSize || o.Prefetch != data.DefaultPrefetch || o.Workers != 1 {
		t.Errorf("defaults %+v", o)
	}
}

// A panic in a dataset's Batch on a worker reaches the consumer.
type panicSet struct{ data.Dataset }

func (panicSet) Batch([]int, *tensor.Tensor, *tensor.Tensor) { panic("boom") }

func TestLoaderWorkerPanic(t *testing.T) {
	l := newLoader(t, panicSet{countingSet(t, 10)}, data.LoaderOptions{BatchSize: 5})
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("no panic")
		}
	}()
	l.Next()
}

// TestLoaderBatches: Batches delivers the same pairs as Epoch (what the
// trainer reads through tolaria.Batches), and breaking out of it leaves
// the loader usable.
func TestLoaderBatches(t *testing.T) {
	ds := countingSet(t, 23)
	l := newLoader(t, ds, data.LoaderOptions{BatchSize: 5, Shuffle: true, Seed: 3, DropLast: true})
	want, _ := epochOrder(t, l, 2)
	var got []int
	for x, y := range l.Batches(2) {
		if x.Shape()[0] != y.Shape()[0] || x.Shape()[0] != 5 {
			t.Fatalf("batch x %v y %v", x.Shape(), y.Shape())
		}
		xs := x.F32()
		for r := range y.Shape()[0] {
			got = append(got, int(xs[6*r]))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Batches(2) visited %v, Epoch(2) %v", got, want)
	}
	n := 0
	for range l.Batches(0) {
		n++
		break
	}
	if again, _ := epochOrder(t, l, 2); n != 1 || !slices.Equal(again, want) {
		t.Fatalf("after a break: %d batches, then epoch 2 %v", n, again)
	}
}
