package kernels

import (
	"fmt"
	"slices"
)

// Memory overlap between operands: the checks of the ops whose backends
// disagree when an input shares memory with what they write (GatherSum,
// ConcatMany, ForeachScale). A tensor's span is its elements' range in
// its storage, from its first element to its last (for a strided view,
// a superset of what it touches: the checks are conservative).

// span returns t's range [lo, hi] of storage elements.
func span(t *T) (lo, hi int) {
	lo, hi = t.Offset(), t.Offset()
	for i, d := range t.Shape() {
		if st := t.Strides()[i]; st >= 0 {
			hi += (d - 1) * st
		} else {
			lo += (d - 1) * st
		}
	}
	return lo, hi
}

// spansOverlap reports whether a and b (either may be nil) are views of
// one memory (tensor.Storage.SameMemory) whose spans meet.
func spansOverlap(a, b *T) bool {
	if a == nil || b == nil || a.Numel() == 0 || b.Numel() == 0 || !a.Storage().SameMemory(b.Storage()) {
		return false
	}
	alo, ahi := span(a)
	blo, bhi := span(b)
	return alo <= bhi && blo <= ahi
}

// checkWritesApart returns an error naming the first pair it finds of a
// destination sharing memory with a source or another destination. It
// groups the tensors by memory (tensor.Storage.MemoryKey) and sweeps
// each group's spans in order, so a state dict of hundreds of tensors in
// one arena costs a sort, not every pair.
func checkWritesApart(name string, dsts, srcs []*T) error {
	type piece struct {
		lo, hi, i int
		dst       bool
	}
	groups := map[any][]piece{}
	add := func(t *T, i int, dst bool) {
		if t == nil || t.Numel() == 0 {
			return
		}
		if k := t.Storage().MemoryKey(); k != nil {
			lo, hi := span(t)
			groups[k] = append(groups[k], piece{lo, hi, i, dst})
		}
	}
	for i, d := range dsts {
		add(d, i, true)
	}
	for i, x := range srcs {
		add(x, i, false)
	}
	what := func(p piece) string {
		if p.dst {
			return fmt.Sprintf("destination %d", p.i)
		}
		return fmt.Sprintf("source %d", p.i)
	}
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		slices.SortFunc(g, func(a, b piece) int { return a.lo - b.lo })
		// The pieces so far that reach furthest: any piece, and any
		// destination. A piece meets an earlier one exactly when it
		// starts at or before that one's end.
		var far, farDst *piece
		for i := range g {
			p := &g[i]
			if far != nil && p.dst && p.lo <= far.hi {
				return fmt.Errorf("%s: %s shares memory with %s", name, what(*p), what(*far))
			}
			if farDst != nil && p.lo <= farDst.hi {
				return fmt.Errorf("%s: %s shares memory with %s", name, what(*p), what(*farDst))
			}
			if far == nil || p.hi > far.hi {
				far = p
			}
			if p.dst && (farDst == nil || p.hi > farDst.hi) {
				farDst = p
			}
		}
	}
	return nil
}

// callsApart checks the calls of a join (GatherSumsJoiner,
// GATMeansJoiner, LinearActLayerNormsJoiner): call k writes outs[k] and
// touches tensors[k] (nil entries allowed); no call's output may share
// memory with any tensor of another call, or the join's result would
// depend on the order its calls run in.
func callsApart(name string, outs []*T, tensors [][]*T) error {
	for k, out := range outs {
		for j, ts := range tensors {
			if j == k {
				continue
			}
			for _, x := range ts {
				if spansOverlap(out, x) {
					return fmt.Errorf("%s: call %d's output shares memory with a tensor of call %d", name, k, j)
				}
			}
		}
	}
	return nil
}
