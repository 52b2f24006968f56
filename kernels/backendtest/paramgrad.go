package backendtest

import (
	"fmt"
	"slices"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The optional ParamGradAccumulator: each method against its overwriting
// op into new tensors followed by Binary Add, on the same backend, bit
// for bit.

var paramGradCases = []conformance{
	optional[kernels.ParamGradAccumulator](checkParamGradAccumulator, "Conv2dBackwardWeightAdd", "BatchNormBackwardAdd",
		"BatchNormReluBackwardAdd", "BatchNormReluMaxPool2x2BackwardAdd", "GroupNormBackwardAdd", "GroupNormReluBackwardAdd"),
}

// addCase is one call of an accumulating method: writes are its outputs
// (dx, then dw and db, the ones not nil), fused the call and unfused its
// overwriting op, which writes into the tensors it is given.
type addCase struct {
	what    string
	writes  []*T
	fused   func()
	unfused func(outs []*T)
}

// check runs c: the unfused op into new tensors, with each accumulated
// output (all but the first nOver, which are overwritten) added to its
// starting value with Binary Add, against the fused call from the same
// starting values.
func (c addCase) check(s *suite, nOver int) {
	s.t.Helper()
	start := s.read(c.writes)
	outs := make([]*T, len(c.writes))
	for i, w := range c.writes {
		outs[i] = s.out(w.DType(), w.Shape()...)
	}
	c.unfused(outs)
	// An accumulated output must change where the gradient added to it
	// is not all zeros (a ReLU can mask a whole small case).
	grads := s.read(outs)
	for i := nOver; i < len(c.writes); i++ {
		acc := s.clone(c.writes[i])
		s.b.Binary(kernels.Add, acc, acc, outs[i])
		outs[i] = acc
	}
	want := s.read(outs)
	s.check(call{what: c.what, launch: c.fused, writes: c.writes}, func(got [][]float64) {
		for i := range got {
			same(s.t, fmt.Sprintf("%s: output %d (against the overwriting op and Binary Add)", c.what, i), got[i], want[i])
		}
		for i := nOver; i < len(got); i++ {
			nonzero := slices.ContainsFunc(grads[i], func(v float64) bool { return v != 0 })
			if nonzero && slices.Equal(got[i], start[i]) {
				s.t.Errorf("%s: accumulated output %d is unchanged", c.what, i)
			}
		}
	})
}

func checkParamGradAccumulator(s *suite) {
	pa := s.b.(kernels.ParamGradAccumulator)
	for _, c := range convCases2d {
		os, p := c.geom()
		for _, d := range s.floats("Conv2dBackwardWeightAdd") {
			x, _ := s.in(d, c.x...)
			dy, _ := s.in(d, os...)
			dw, _ := s.in(d, c.w...)
			addCase{
				what:    name("Conv2dBackwardWeightAdd", d, c.x, c.w, p),
				writes:  []*T{dw},
				fused:   func() { pa.Conv2dBackwardWeightAdd(dw, x, dy, p) },
				unfused: func(o []*T) { s.b.Conv2dBackwardWeight(o[0], x, dy, p) },
			}.check(s, 0)
		}
	}
	_, relu := s.b.(kernels.BatchNormReluer)
	pooler, pool := s.b.(kernels.BatchNormReluPooler)
	for _, shape := range [][]int{{4, 3, 6, 6}, {5, 3, 38, 42}} {
		n, ch := shape[0], shape[1]
		for _, d := range s.floats("BatchNormBackwardAdd") {
			sd := wideOf(d)
			for _, training := range []bool{true, false} {
				for _, affine := range [][2]bool{{true, true}, {true, false}, {false, true}} {
					x, _ := s.in(d, shape...)
					w, _ := s.in(d, ch)
					b, _ := s.in(d, ch)
					mean, _ := s.in(sd, ch)
					rstd, _ := s.put(sd, s.uniform(ch, 0.5, 2), ch)
					dy, _ := s.in(d, shape...)
					dx, dw, db, writes, split := affineOuts(s, d, shape, affine)
					what := name("BatchNormBackwardAdd", d, shape, "training", training, "affine", affine)
					addCase{what: what, writes: writes,
						fused: func() { pa.BatchNormBackwardAdd(dx, dw, db, dy, x, mean, rstd, w, training) },
						unfused: func(o []*T) {
							ox, ow, ob := split(o)
							s.b.BatchNormBackward(ox, ow, ob, dy, x, mean, rstd, w, training)
						}}.check(s, 1)
					if relu {
						what := name("BatchNormReluBackwardAdd", d, shape, "training", training, "affine", affine)
						addCase{what: what, writes: writes,
							fused: func() { pa.BatchNormReluBackwardAdd(dx, dw, db, dy, x, b, mean, rstd, w, training) },
							unfused: func(o []*T) {
								ox, ow, ob := split(o)
								s.b.(kernels.BatchNormReluer).BatchNormReluBackward(ox, ow, ob, dy, x, b, mean, rstd, w, training)
							}}.check(s, 1)
					}
					if pool && relu {
						// The pool's argmax from the fused forward.
						ps := []int{n, ch, shape[2] / 2, shape[3] / 2}
						pooled, argmax := s.out(d, ps...), s.out(tensor.I32, ps...)
						sm, sr := s.out(sd, ch), s.out(sd, ch)
						rm, _ := s.in(sd, ch)
						rv, _ := s.put(sd, s.uniform(ch, 0.5, 2), ch)
						pooler.BatchNormReluMaxPool2x2(pooled, argmax, sm, sr, x, w, b, rm, rv, training, 0.1, normEps)
						g, _ := s.in(d, ps...)
						what := name("BatchNormReluMaxPool2x2BackwardAdd", d, shape, "training", training, "affine", affine)
						addCase{what: what, writes: writes,
							fused: func() { pa.BatchNormReluMaxPool2x2BackwardAdd(dx, dw, db, g, argmax, x, b, sm, sr, w, training) },
							unfused: func(o []*T) {
								ox, ow, ob := split(o)
								pooler.BatchNormReluMaxPool2x2Backward(ox, ow, ob, g, argmax, x, b, sm, sr, w, training)
							}}.check(s, 1)
					}
				}
			}
		}
	}
	checkGroupNormAdd(s, pa)
}

// checkGroupNormAdd: GroupNormBackwardAdd and GroupNormReluBackwardAdd
// (with a GroupNormReluer) against the overwriting backward and Binary
// Add, with dw and db each present or not; the statistics are the
// forward's.
func checkGroupNormAdd(s *suite, pa kernels.ParamGradAccumulator) {
	gr, relu := s.b.(kernels.GroupNormReluer)
	const groups = 3
	for _, shape := range [][]int{{4, 6, 5, 5}, {2, 6, 3, 7}} {
		n, ch := shape[0], shape[1]
		for _, d := range s.floats("GroupNormBackwardAdd") {
			sd := wideOf(d)
			x, _ := s.in(d, shape...)
			w, _ := s.in(d, ch)
			b, _ := s.in(d, ch)
			mean, rstd := s.out(sd, n*groups), s.out(sd, n*groups)
			s.b.GroupNorm(s.out(d, shape...), mean, rstd, x, w, b, groups, normEps)
			dy, _ := s.in(d, shape...)
			for _, affine := range [][2]bool{{true, true}, {true, false}, {false, true}} {
				dx, dw, db, writes, split := affineOuts(s, d, shape, affine)
				addCase{what: name("GroupNormBackwardAdd", d, shape, "affine", affine), writes: writes,
					fused: func() { pa.GroupNormBackwardAdd(dx, dw, db, dy, x, mean, rstd, w, groups) },
					unfused: func(o []*T) {
						ox, ow, ob := split(o)
						s.b.GroupNormBackward(ox, ow, ob, dy, x, mean, rstd, w, groups)
					}}.check(s, 1)
				if relu {
					addCase{what: name("GroupNormReluBackwardAdd", d, shape, "affine", affine), writes: writes,
						fused: func() { pa.GroupNormReluBackwardAdd(dx, dw, db, dy, x, b, mean, rstd, w, groups) },
						unfused: func(o []*T) {
							ox, ow, ob := split(o)
							gr.GroupNormReluBackward(ox, ow, ob, dy, x, b, mean, rstd, w, groups)
						}}.check(s, 1)
				}
			}
		}
	}
}

// affineOuts makes a norm backward's outputs for x of shape (channels
// on axis 1): dx to overwrite, and dw and db to accumulate into (each
// when affine says, nil otherwise); writes lists those that exist, and
// split hands the unfused op its dx, dw and db among a list like writes.
func affineOuts(s *suite, d tensor.DType, shape []int, affine [2]bool) (dx, dw, db *T, writes []*T, split func([]*T) (dx, dw, db *T)) {
	ch := shape[1]
	dx = s.out(d, shape...)
	writes = []*T{dx}
	if affine[0] {
		dw, _ = s.in(d, ch)
		writes = append(writes, dw)
	}
	if affine[1] {
		db, _ = s.in(d, ch)
		writes = append(writes, db)
	}
	split = func(o []*T) (dx, dw, db *T) {
		dx, o = o[0], o[1:]
		if affine[0] {
			dw, o = o[0], o[1:]
		}
		if affine[1] {
			db = o[0]
		}
		return dx, dw, db
	}
	return dx, dw, db, writes, split
}
