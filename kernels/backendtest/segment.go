package backendtest

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The segment family: SegmentReduce, SegmentMaxBackward,
// SegmentSoftmax and SegmentSoftmaxBackward.

var segmentCases = []conformance{
	of(checkSegmentReduce, "SegmentReduce", "SegmentMaxBackward"),
	of(checkSegmentSoftmax, "SegmentSoftmax", "SegmentSoftmaxBackward"),
}

// segmentLayouts are rows [E, F...] and a segment count S.
var segmentLayouts = []struct {
	src []int
	s   int
}{{[]int{9, 4}, 5}, {[]int{7, 2, 3}, 3}, {[]int{40, 1}, 6}}

// segmentIDs are e ids in [0, s) leaving segment 2 empty (when s > 3).
func (s *suite) segmentIDs(e, segs int) []float64 {
	out := make([]float64, e)
	for i := range out {
		v := s.rng.IntN(segs)
		if segs > 3 && v == 2 {
			v = 0
		}
		out[i] = float64(v)
	}
	return out
}

func checkSegmentReduce(s *suite) {
	for _, c := range segmentLayouts {
		e, f := c.src[0], tensor.Numel(c.src[1:])
		dshape := append([]int{c.s}, c.src[1:]...)
		for _, d := range s.floats("SegmentReduce") {
			for _, idt := range []tensor.DType{tensor.I64, tensor.I32} {
				ids := s.segmentIDs(e, c.s)
				seg, _ := s.put(idt, ids, e)
				sv := s.normals(e * f)
				sv[f] = sv[0] // a tie between rows 0 and 1 when they share a segment
				src, sr := s.put(d, sv, c.src...)
				for _, op := range []kernels.ReduceOp{kernels.Sum, kernels.Mean, kernels.Max} {
					want := make([]float64, c.s*f)
					wantArg := make([]float64, c.s*f)
					count := make([]int, c.s)
					for i := range wantArg {
						wantArg[i] = -1
					}
					for r := 0; r < e; r++ {
						g := int(ids[r])
						count[g]++
						for j := 0; j < f; j++ {
							v, o := sr[r*f+j], g*f+j
							switch {
							case op != kernels.Max:
								want[o] += v
							case wantArg[o] < 0 || v > want[o]:
								want[o], wantArg[o] = v, float64(r)
							}
						}
					}
					if op == kernels.Mean {
						for o := range want {
							if n := count[o/f]; n > 0 {
								want[o] /= float64(n)
							}
						}
					}
					dst := s.out(d, dshape...)
					var arg *T
					writes := []*T{dst}
					if op == kernels.Max {
						arg = s.out(tensor.I64, dshape...)
						writes = append(writes, arg)
					}
					what := name("SegmentReduce", op, d, idt, c.src, c.s)
					s.check(call{what: what, launch: func() { s.b.SegmentReduce(op, dst, arg, src, seg) }, writes: writes}, func(got [][]float64) {
						s.close(what, got[0], want, 2*tol(d))
						if op == kernels.Max {
							same(s.t, what+" argmax", got[1], wantArg)
						}
					})
					if op != kernels.Max {
						continue
					}
					// SegmentMaxBackward routes dy to the argmax rows.
					argIn, _ := s.put(tensor.I64, wantArg, dshape...)
					dy, gv := s.in(d, dshape...)
					wantDx := make([]float64, e*f)
					for o, a := range wantArg {
						if a >= 0 {
							wantDx[int(a)*f+o%f] += gv[o]
						}
					}
					dsrc := s.out(d, c.src...)
					what = name("SegmentMaxBackward", d, c.src, c.s)
					s.check(call{what: what, launch: func() { s.b.SegmentMaxBackward(dsrc, dy, argIn) }, writes: []*T{dsrc}}, func(got [][]float64) {
						s.close(what, got[0], wantDx, tol(d))
					})
				}
			}
		}
	}
}

func checkSegmentSoftmax(s *suite) {
	for _, c := range segmentLayouts {
		e, f := c.src[0], tensor.Numel(c.src[1:])
		for _, d := range s.floats("SegmentSoftmax") {
			ids := s.segmentIDs(e, c.s)
			seg, _ := s.put(tensor.I64, ids, e)
			src, sv := s.in(d, c.src...)
			want := make([]float64, e*f)
			for g := 0; g < c.s; g++ {
				for j := 0; j < f; j++ {
					m := math.Inf(-1)
					for r := 0; r < e; r++ {
						if int(ids[r]) == g {
							m = math.Max(m, sv[r*f+j])
						}
					}
					var sum float64
					for r := 0; r < e; r++ {
						if int(ids[r]) == g {
							sum += math.Exp(sv[r*f+j] - m)
						}
					}
					for r := 0; r < e; r++ {
						if int(ids[r]) == g {
							want[r*f+j] = math.Exp(sv[r*f+j]-m) / sum
						}
					}
				}
			}
			dst := s.out(d, c.src...)
			what := name("SegmentSoftmax", d, c.src, c.s)
			s.check(call{what: what, launch: func() { s.b.SegmentSoftmax(dst, src, seg, c.s) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], want, 2*tol(d))
			})

			y, yv := s.put(d, want, c.src...)
			dy, gv := s.in(d, c.src...)
			sums := make([]float64, c.s*f)
			for r := 0; r < e; r++ {
				for j := 0; j < f; j++ {
					sums[int(ids[r])*f+j] += yv[r*f+j] * gv[r*f+j]
				}
			}
			wantDx := make([]float64, e*f)
			for r := 0; r < e; r++ {
				for j := 0; j < f; j++ {
					wantDx[r*f+j] = yv[r*f+j] * (gv[r*f+j] - sums[int(ids[r])*f+j])
				}
			}
			dx := s.out(d, c.src...)
			what = name("SegmentSoftmaxBackward", d, c.src, c.s)
			s.check(call{what: what, launch: func() { s.b.SegmentSoftmaxBackward(dx, y, dy, seg, c.s) }, writes: []*T{dx}}, func(got [][]float64) {
				s.close(what, got[0], wantDx, 4*tol(d))
			})
		}
	}
}
