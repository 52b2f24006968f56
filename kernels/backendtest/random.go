package backendtest

import (
	"math"

	"github.com/esper-go/esper/tensor"
)

// The random family: Dropout.

var randomCases = []conformance{
	of(checkDropout, "Dropout"),
}

// checkDropout: the mask holds 0 or 1/(1−p), about a fraction p of it
// 0; dst is x times the mask; the counter advances by one per call; the
// draw is a function of (seed, counter, element) alone (the same state
// gives the same mask, the next counter another); p = 0 keeps
// everything and p = 1 drops everything.
func checkDropout(s *suite) {
	for _, d := range s.floats("Dropout") {
		for _, p := range []float64{0.3, 0, 1} {
			n := 4000
			x, xv := s.in(d, 40, 100)
			state, _ := s.put(tensor.I64, []float64{1234, 7}, 2)
			dst, mask := s.out(d, 40, 100), s.out(d, 40, 100)
			what := name("Dropout", d, "p", p)
			keep := 0.0
			if p < 1 {
				keep = 1 / (1 - p)
			}
			var first []float64
			s.check(call{what: what, launch: func() { s.b.Dropout(dst, mask, x, state, p) }, writes: []*T{dst, mask, state}}, func(got [][]float64) {
				first = got[1]
				k := float64(0)
				for i, m := range got[1] {
					if m != 0 {
						k++
						if math.Abs(m-keep) > tol(d)*keep {
							s.t.Errorf("%s: mask element %d is %v, want 0 or %v", what, i, m, keep)
							return
						}
					}
				}
				if frac := 1 - k/float64(n); math.Abs(frac-p) > 0.05 {
					s.t.Errorf("%s: %.3f of the elements dropped, want about %v", what, frac, p)
				}
				want := make([]float64, n)
				for i := range want {
					want[i] = xv[i] * got[1][i]
				}
				s.close(what+" dst", got[0], want, tol(d))
				same(s.t, what+" state", got[2], []float64{1234, 8})
			})
			if first == nil || p == 0 || p == 1 {
				continue
			}
			// The same {seed, counter} draws the same mask; the next
			// counter, another.
			again, _ := s.put(tensor.I64, []float64{1234, 7}, 2)
			s.b.Dropout(dst, mask, x, again, p)
			same(s.t, what+" replayed state", s.get(mask), first)
			s.b.Dropout(dst, mask, x, again, p)
			if m := s.get(mask); closeMsg(m, first, 0) == "" {
				s.t.Errorf("%s: the next counter drew the same mask", what)
			}
		}
	}
	s.panics("Dropout", func() {
		s.b.Dropout(s.out(tensor.F32, 4), nil, s.out(tensor.F32, 4), s.full(tensor.I64, 0, 2), 1.5)
	})
}
