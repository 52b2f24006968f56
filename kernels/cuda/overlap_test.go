package cuda

import (
	"testing"
	"time"
)

// TestOverlapOf: the hidden part of each copy is its intersection with
// the union of the steps (overlapping steps counted once), and the
// fraction is hidden over copy time.
func TestOverlapOf(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for _, c := range []struct {
		name           string
		copies, steps  []interval
		copyT, hidden  float64
		stepT, span    float64
		fraction       float64
		nCopies, nStep int
	}{
		{"fully hidden", []interval{{1, 2}, {5, 6}}, []interval{{0, 4}, {4, 8}}, 2, 2, 8, 8, 1, 2, 2},
		{"none hidden", []interval{{4, 5}}, []interval{{0, 4}, {5, 9}}, 1, 0, 8, 9, 0, 1, 2},
		{"half hidden", []interval{{3, 5}}, []interval{{0, 4}}, 2, 1, 4, 5, 0.5, 1, 1},
		{"overlapping steps counted once", []interval{{1, 3}}, []interval{{2, 6}, {0, 4}}, 2, 2, 6, 6, 1, 1, 2},
		{"copy across a gap", []interval{{3, 7}}, []interval{{0, 4}, {6, 9}}, 4, 2, 7, 9, 0.5, 1, 2},
		{"no copies", nil, []interval{{0, 1}}, 0, 0, 1, 1, 0, 0, 1},
		{"no steps", []interval{{0, 1}}, nil, 1, 0, 0, 1, 0, 1, 0},
	} {
		o := overlapOf(c.copies, c.steps)
		want := Overlap{Copies: c.nCopies, Steps: c.nStep, CopyTime: ms(c.copyT), HiddenTime: ms(c.hidden),
			StepTime: ms(c.stepT), Span: ms(c.span), Fraction: c.fraction}
		if o != want {
			t.Errorf("%s: got %+v, want %+v", c.name, o, want)
		}
	}
}
