package cuda

import (
	"time"

	"github.com/esper-go/esper/kernels"
)

// The arithmetic of a Stager trace (stage_trace.go): how much of the
// copy intervals the step intervals cover. It needs no GPU, so it builds
// and is tested without the cuda tag.

// Overlap is what a Stager's trace measured (Stager.StopTrace): see
// kernels.Overlap, the type the kernels.Stager interface returns.
type Overlap = kernels.Overlap

// interval is a time span in milliseconds since a trace's origin.
type interval struct{ a, b float64 }

// overlapOf measures how much of the copy intervals the union of the
// step intervals covers.
func overlapOf(copies, steps []interval) Overlap {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	union := unionOf(steps)
	var copyT, hidden, stepT float64
	first, last, seen := 0.0, 0.0, false
	note := func(iv interval) {
		if !seen || iv.a < first {
			first = iv.a
		}
		if !seen || iv.b > last {
			last = iv.b
		}
		seen = true
	}
	for _, c := range copies {
		if c.b < c.a {
			c.b = c.a
		}
		note(c)
		copyT += c.b - c.a
		for _, u := range union {
			if lo, hi := max(c.a, u.a), min(c.b, u.b); hi > lo {
				hidden += hi - lo
			}
		}
	}
	for _, u := range union {
		note(u)
		stepT += u.b - u.a
	}
	o := Overlap{Copies: len(copies), Steps: len(steps), CopyTime: ms(copyT), HiddenTime: ms(hidden), StepTime: ms(stepT), Span: ms(last - first)}
	if copyT > 0 {
		o.Fraction = min(1, hidden/copyT)
	}
	return o
}

// unionOf merges intervals into disjoint ones, in order of time (an
// interval ending before it begins counts as empty).
func unionOf(ivs []interval) []interval {
	s := append([]interval(nil), ivs...)
	for i := 1; i < len(s); i++ { // insertion sort by start: traces come nearly sorted
		for j := i; j > 0 && s[j].a < s[j-1].a; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	var out []interval
	for _, iv := range s {
		if iv.b < iv.a {
			iv.b = iv.a
		}
		if n := len(out); n > 0 && iv.a <= out[n-1].b {
			out[n-1].b = max(out[n-1].b, iv.b)
			continue
		}
		out = append(out, iv)
	}
	return out
}
