package kernels

import (
	"testing"

	"github.com/esper-go/esper/tensor"
)

// TestCheckWritesApart: views of one storage that do not meet pass,
// however many (an arena's state dict), and so do sources that share
// memory with each other; a destination that meets a source or another
// destination is refused, whichever comes first in the storage; a CPU
// alias of the same memory (tensor.BackendView of a sim tensor) counts
// as the same memory.
func TestCheckWritesApart(t *testing.T) {
	arena := tensor.Zeros(tensor.F32, 3000)
	var views, own []*T
	for i := range 300 {
		views = append(views, arena.Narrow(0, 10*i, 10))
		own = append(own, tensor.Zeros(tensor.F32, 10))
	}
	for _, c := range []struct {
		what       string
		dsts, srcs []*T
		bad        bool
	}{
		{"an arena's views loaded from their own tensors", views, own, false},
		{"an arena's views copied out", own, views, false},
		{"sources that overlap each other", own[:2], []*T{arena.Narrow(0, 0, 10), arena.Narrow(0, 5, 10)}, false},
		{"a destination inside a source (after it in memory)", []*T{arena.Narrow(0, 12, 3)}, []*T{arena.Narrow(0, 10, 10)}, true},
		{"a destination before a source it meets", []*T{arena.Narrow(0, 0, 11)}, []*T{arena.Narrow(0, 10, 10)}, true},
		{"two destinations that meet, a source between", []*T{arena.Narrow(0, 0, 30), arena.Narrow(0, 29, 2)}, []*T{arena.Narrow(0, 10, 5), own[0]}, true},
		{"a source far behind a short destination", []*T{arena.Narrow(0, 50, 5)}, []*T{arena.Narrow(0, 0, 100), own[1]}, true},
	} {
		err := checkWritesApart("ConcatMany", c.dsts, c.srcs)
		if (err != nil) != c.bad {
			t.Errorf("%s: error %v, want one: %v", c.what, err, c.bad)
		}
	}
	sim, err := tensor.EmptyOn(tensor.Sim(0), tensor.F32, 20)
	if err != nil {
		t.Fatal(err)
	}
	a, b := tensor.BackendView(sim.Narrow(0, 0, 10)), tensor.BackendView(sim.Narrow(0, 5, 10))
	if checkWritesApart("ConcatMany", []*T{a}, []*T{b}) == nil {
		t.Error("two CPU aliases of one sim storage that meet: no error")
	}
}
