package cuda

import "time"

// The arithmetic of a Stager trace (stage_trace.go): how much of the
// copy intervals the step intervals cover. It needs no GPU, so it builds
// and is tested without the cuda tag.

// Overlap is what a Stager's trace measured (Stager.StopTrace): when each
// timed copy ran on the copy stream and each timed step on the device's
// stream, on one clock, and how much of the copying ran while a step was
// running (PERF.md W8's overlap fraction).
type Overlap struct {
	Copies, Steps int // the copies and steps timed
	// Dropped counts copies and steps not timed because the trace's
	// capacity was used up.
	Dropped int
	// CopyTime is the time the copies took, summed; HiddenTime is the
	// part of it during which a step was running on the device's stream
	// (between its BeginStep and EndStep); StepTime is the time covered
	// by the steps (their union), and Span the time from the first begin
	// to the last end of anything timed.
	CopyTime, HiddenTime, StepTime, Span time.Duration
	// Fraction is HiddenTime / CopyTime: 1 when every copy ran entirely
	// behind a step, 0 when none overlapped one (and 0 with no copies).
	Fraction float64
}

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
