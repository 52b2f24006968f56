package rollback

import (
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/tensor"
)

func newFast(t *testing.T, capBytes int64) *FastCache {
	t.Helper()
	c, err := NewFastCache(FastOptions{CapBytes: capBytes})
	noErr(t, err)
	return c
}

func TestFastOptions(t *testing.T) {
	c, err := NewFastCache(FastOptions{})
	noErr(t, err)
	check(t, c.Cap() == 32<<20, "default capacity %d", c.Cap())
	c, err = NewFastCache(FastOptions{CapMB: 3})
	noErr(t, err)
	check(t, c.Cap() == 3<<20, "CapMB 3 gives %d bytes", c.Cap())
	c, err = NewFastCache(FastOptions{CapMB: 3, CapBytes: 100})
	noErr(t, err)
	check(t, c.Cap() == 100, "CapBytes does not override CapMB: %d", c.Cap())
	_, err = NewFastCache(FastOptions{CapMB: -1})
	check(t, err != nil, "negative CapMB accepted")
	_, err = NewFastCache(FastOptions{CapBytes: -1})
	check(t, err != nil, "negative CapBytes accepted")
}

// TestFastEvictsByCapacity checks eviction with exact sizes: 1000
// elements of F32 plus the zero Meta's JSON per state.
func TestFastEvictsByCapacity(t *testing.T) {
	unit := 4000 + zeroMetaLen(t)
	sz, err := sized(t, 1000, 0).Size()
	noErr(t, err)
	check(t, sz == unit, "Size = %d, want %d", sz, unit)

	c := newFast(t, 3*unit) // exactly three states
	for step := int64(1); step <= 3; step++ {
		noErr(t, c.Put(step, sized(t, 1000, float64(step))))
	}
	st := c.Stats()
	check(t, st.SizeBytes == 3*unit && st.Snapshots == 3 && st.Evictions == 0, "a full cache evicted: %+v", st)

	noErr(t, c.Put(4, sized(t, 1000, 4))) // evicts 1, the oldest
	check(t, reflect.DeepEqual(c.Steps(), []int64{4, 3, 2}), "steps %v after the 4th put", c.Steps())
	check(t, c.Stats().Evictions == 1 && c.Stats().SizeBytes == 3*unit, "stats %+v", c.Stats())

	_, _, ok := c.Nearest(2) // touching 2 makes 3 the least recently used
	check(t, ok, "Nearest(2) missed")
	noErr(t, c.Put(5, sized(t, 1000, 5)))
	check(t, reflect.DeepEqual(c.Steps(), []int64{5, 2, 4}), "steps %v: LRU did not evict 3", c.Steps())

	// A state of two units evicts the two least recently used.
	noErr(t, c.Put(6, sized(t, 2000, 6)))
	big := 8000 + zeroMetaLen(t)
	check(t, reflect.DeepEqual(c.Steps(), []int64{6, 5}), "steps %v after a double-size put", c.Steps())
	st = c.Stats()
	check(t, st.SizeBytes == big+unit && st.Evictions == 4 && st.SnapshotsTotal == 6, "stats %+v", st)

	// One byte over the capacity on its own is refused; nothing changes.
	over := State{Tensors: sized(t, 1000, 0).Tensors, Meta: Meta{GlobalStep: 1}}
	small := newFast(t, unit)
	err = small.Put(1, over) // "global_step":1 is as long as 0: still fits
	noErr(t, err)
	over.Meta.GlobalStep = 10 // one more byte of JSON
	err = small.Put(2, over)
	check(t, errors.Is(err, ErrTooLarge), "oversized state gave %v", err)
	check(t, reflect.DeepEqual(small.Steps(), []int64{1}) && small.Stats().SizeBytes == unit, "a refused put changed the cache: %+v", small.Stats())
}

func TestFastReplaceSameStep(t *testing.T) {
	unit := 4000 + zeroMetaLen(t)
	c := newFast(t, 3*unit)
	noErr(t, c.Put(7, sized(t, 1000, 1)))
	noErr(t, c.Put(7, sized(t, 500, 2)))
	st := c.Stats()
	half := 2000 + zeroMetaLen(t)
	check(t, st.SizeBytes == half && st.Snapshots == 1 && st.Evictions == 0 && st.SnapshotsTotal == 2, "after replacing: %+v", st)
	s, step, ok := c.Nearest(7)
	check(t, ok && step == 7 && s.Tensors["w"].Numel() == 500 && w0(t, s) == 2, "Nearest returned the replaced state")

	// Replacing in a full cache frees the old size first: 1,2,3 of one
	// unit, then 3 again with two units, evicts only 1.
	c = newFast(t, 3*unit)
	for step := int64(1); step <= 3; step++ {
		noErr(t, c.Put(step, sized(t, 1000, 0)))
	}
	double := sized(t, 2000, 0) // plus one Meta's worth of Bool bytes: exactly two units
	double.Tensors["pad"] = testdevice.To(t, tensor.Empty(tensor.Bool, int(zeroMetaLen(t))))
	dsz, err := double.Size()
	noErr(t, err)
	check(t, dsz == 2*unit, "double size %d, want %d", dsz, 2*unit)
	noErr(t, c.Put(3, double))
	check(t, reflect.DeepEqual(c.Steps(), []int64{3, 2}), "steps %v", c.Steps())
	check(t, c.Stats().Evictions == 1 && c.Stats().SizeBytes == 3*unit, "stats %+v", c.Stats())

	// An oversized replacement is refused and the old snapshot stays.
	err = c.Put(2, sized(t, 4000, 0))
	check(t, errors.Is(err, ErrTooLarge), "got %v", err)
	check(t, reflect.DeepEqual(c.Steps(), []int64{3, 2}), "refused replacement dropped the old one: %v", c.Steps())
}

func TestFastNearest(t *testing.T) {
	c := newFast(t, 1<<20)
	_, _, ok := c.Nearest(100)
	check(t, !ok, "empty cache hit")
	for _, s := range []int64{10, 30, 20} {
		noErr(t, c.Put(s, sized(t, 1, float64(s))))
	}
	for _, tc := range []struct {
		leq, want int64
		ok        bool
	}{{5, 0, false}, {-1, 0, false}, {10, 10, true}, {19, 10, true}, {20, 20, true}, {25, 20, true}, {30, 30, true}, {1 << 40, 30, true}} {
		s, step, ok := c.Nearest(tc.leq)
		check(t, ok == tc.ok && step == tc.want, "Nearest(%d) = %d, %v; want %d, %v", tc.leq, step, ok, tc.want, tc.ok)
		if ok {
			check(t, w0(t, s) == float32(tc.want), "Nearest(%d) returned the state of another step", tc.leq)
		}
	}
	st := c.Stats()
	check(t, st.Hits == 6 && st.Misses == 3, "hits %d misses %d", st.Hits, st.Misses)

	c.Clear()
	_, _, ok = c.Nearest(100)
	check(t, !ok && c.Stats().SizeBytes == 0, "Clear left %+v", c.Stats())
}

func TestFastCopiesAreIndependent(t *testing.T) {
	c := newFast(t, 1<<20)
	src := mixedState(t)
	want := src.Clone()
	noErr(t, c.Put(1, src))

	// Training goes on: the source changes in place.
	fill(src.Tensors["model/w.f64"], -1)
	src.Meta.RNG[0] = 7
	src.Meta.Extra["lr_controller"][2] = 'X'
	src.Tensors["model/new"] = src.Tensors["optim/step"]

	got, _, ok := c.Nearest(1)
	check(t, ok, "miss")
	check(t, sameTensors(got.Tensors, want.Tensors) == "", "cache saw a change of the source: %s", sameTensors(got.Tensors, want.Tensors))
	check(t, reflect.DeepEqual(got.Meta, want.Meta), "cache meta changed: %+v", got.Meta)

	// The restorer changes what it was given: the cache is unaffected.
	fill(got.Tensors["model/w.f32"], 123)
	got.Meta.RNG[1] = 5
	delete(got.Tensors, "model/w.bf16")
	again, _, _ := c.Nearest(1)
	check(t, sameTensors(again.Tensors, want.Tensors) == "", "a returned copy aliases the cache: %s", sameTensors(again.Tensors, want.Tensors))
	check(t, reflect.DeepEqual(again.Meta, want.Meta), "cache meta changed through a returned copy")
}

func TestFastConcurrent(t *testing.T) {
	unit := 400 + zeroMetaLen(t)
	c := newFast(t, 4*unit)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				step := int64(g*100 + i)
				if err := c.Put(step, sized(t, 100, float64(step))); err != nil {
					t.Error(err)
					return
				}
				if s, at, ok := c.Nearest(step); ok && w0(t, s) != float32(at) {
					t.Errorf("step %d holds the state of another", at)
				}
				c.Stats()
			}
		}()
	}
	wg.Wait()
	st := c.Stats()
	check(t, st.SizeBytes <= 4*unit && st.Snapshots == 4 && st.SnapshotsTotal == 400 && st.Evictions == 396, "stats %+v", st)
}
