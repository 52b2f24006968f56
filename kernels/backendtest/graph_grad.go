package backendtest

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The optional GATMeanGradder: GATMeanGrad's gradients against central
// differences of a float64 GATMean computed from the definition, every
// element of every gradient for the small layouts, a sample of each for
// the wider ones (the policy's widths among them), over layouts with a
// relation without edges, more relations than a CUDA launch takes and
// more heads than a CUDA block has warps.

var graphGradCases = []conformance{
	optional[kernels.GATMeanGradder](checkGATMeanGrad, "GATMeanGrad", "GATMeanGradFits"),
	optional[kernels.GatherMeanGradder](checkGatherMeanGrad, "GatherMeanGrad", "GatherMeanGradAdd"),
}

// checkGatherMeanGrad holds GatherMeanGrad to its definition in float64
// — dx[j] = Σ over the edges j→i of g[i]/n_i — over graphLayouts (a
// relation without edges among them: dx all zeros; a destination without
// incoming edges; one of 20 and more).
func checkGatherMeanGrad(s *suite) {
	gm := s.b.(kernels.GatherMeanGradder)
	for _, op := range []string{"GatherMeanGrad", "GatherMeanGradAdd"} {
		checkGatherMeanGradOp(s, op, gm)
	}
	s.panics("GatherMeanGrad", func() { // dx of the wrong width
		gm.GatherMeanGrad(s.out(tensor.F32, 3, 3), s.out(tensor.F32, 2, 2), s.out(tensor.I64, 2), s.out(tensor.I64, 3), s.out(tensor.I64, 2))
	})
	s.panics("GatherMeanGradAdd", func() { // dx of the wrong width
		gm.GatherMeanGradAdd(s.out(tensor.F32, 3, 3), s.out(tensor.F32, 2, 2), s.out(tensor.I64, 2), s.out(tensor.I64, 3), s.out(tensor.I64, 2))
	})
}

// checkGatherMeanGradOp is checkGatherMeanGrad's check of op: dx written
// (GatherMeanGrad) or added to (GatherMeanGradAdd, dx random).
func checkGatherMeanGradOp(s *suite, op string, gm kernels.GatherMeanGradder) {
	add := op == "GatherMeanGradAdd"
	for _, d := range s.floats(op, tensor.F64, tensor.F32) {
		for _, l := range graphLayouts {
			src, dst, srcT, rowPtr, order := s.graphEdges(l)
			g, gv := s.in(d, l.nd, l.c)
			dx := s.out(d, l.ns, l.c)
			base := make([]float64, l.ns*l.c) // dx before the call
			launch := func() { gm.GatherMeanGrad(dx, g, srcT, rowPtr, order) }
			if add {
				var dxv []float64
				dx, dxv = s.in(d, l.ns, l.c)
				copy(base, dxv)
				launch = func() { gm.GatherMeanGradAdd(dx, g, srcT, rowPtr, order) }
			}
			what := name(op, d, l.ns, l.nd, l.e, l.c)
			// GatherMeanGradAdd over no edges adds nothing: a backend may
			// launch nothing (CUDA does not).
			empty := func() bool { return add && l.e == 0 }
			s.check(call{what: what, atomic: true, launch: launch, writes: []*T{dx}, declined: empty}, func(got [][]float64) {
				count := make([]int, l.nd)
				for _, i := range dst {
					count[i]++
				}
				want := append([]float64(nil), base...)
				for k := range src {
					j, i := int(src[k]), int(dst[k])
					for c := 0; c < l.c; c++ {
						want[j*l.c+c] += gv[i*l.c+c] / float64(count[i])
					}
				}
				s.close(what, got[0], want, 4*tol(d))
			})
		}
	}
}

// gatRel is one relation of a GATMeanGrad check: its edges and its float
// operands' values (hs, hd, attr, we, attSrc, attDst, attEdge, bias, each
// row-major, hs and hd packed even when the device's are strided).
type gatRel struct {
	ns, e    int
	src, dst []int64
	v        [8][]float64
}

// gatMeanRef is the float64 GATMean of rels into nd nodes: the mean over
// the relations of bias + (1/H)·Σ_h Σ_k α[k,h]·hs[j,h,·].
func gatMeanRef(rels []gatRel, nd, heads, c, f int, slope float64) []float64 {
	out := make([]float64, nd*c)
	hc := heads * c
	for _, r := range rels {
		hsv, hdv, av, wv, asv, adv, aev, bv := r.v[0], r.v[1], r.v[2], r.v[3], r.v[4], r.v[5], r.v[6], r.v[7]
		acc := make([]float64, nd*c)
		for i := 0; i < nd; i++ {
			copy(acc[i*c:(i+1)*c], bv)
		}
		for h := 0; h < heads; h++ {
			logit := make([]float64, r.e)
			m := make([]float64, nd)
			for i := range m {
				m[i] = math.Inf(-1)
			}
			for k := 0; k < r.e; k++ {
				j, i := int(r.src[k]), int(r.dst[k])
				var z float64
				for cc := 0; cc < c; cc++ {
					o := h*c + cc
					var he float64
					for ff := 0; ff < f; ff++ {
						he += av[k*f+ff] * wv[o*f+ff]
					}
					z += hsv[j*hc+o]*asv[o] + hdv[i*hc+o]*adv[o] + he*aev[o]
				}
				logit[k] = math.Max(z, slope*z)
				m[i] = math.Max(m[i], logit[k])
			}
			sum := make([]float64, nd)
			for k := range logit {
				logit[k] = math.Exp(logit[k] - m[r.dst[k]])
				sum[r.dst[k]] += logit[k]
			}
			for k := range logit {
				j, i := int(r.src[k]), int(r.dst[k])
				for cc := 0; cc < c; cc++ {
					acc[i*c+cc] += logit[k] / sum[i] * hsv[j*hc+h*c+cc] / float64(heads)
				}
			}
		}
		for q := range out {
			out[q] += acc[q] / float64(len(rels))
		}
	}
	return out
}

func checkGATMeanGrad(s *suite) {
	gg := s.b.(kernels.GATMeanGradder)
	const slope = 0.2
	for _, d := range s.floats("GATMeanGrad", tensor.F64, tensor.F32) {
		for li, ml := range multiLayouts {
			// Every layout here, the policy's widths among them, must fit.
			if !gg.GATMeanGradFits(ml.heads, ml.c, ml.f) {
				s.t.Errorf("GATMeanGradFits(%d, %d, %d) is false: the policy's layers could not train fused", ml.heads, ml.c, ml.f)
				continue
			}
			hc := ml.heads * ml.c
			ops, rels := s.gatOpsValues(d, li)
			g, gv := s.in(d, ml.nd, ml.c)
			// The gradients: one of each per relation, the first relation
			// asking for none of attEdge's and we's (nil: not wanted).
			shapes := func(k int) [7][]int {
				return [7][]int{{rels[k].ns, hc}, {ml.nd, hc}, {hc, ml.f}, {1, ml.heads, ml.c}, {1, ml.heads, ml.c}, {1, ml.heads, ml.c}, {ml.c}}
			}
			var grads [7][]*T
			var writes []*T
			type slot struct{ grad, rel, op int } // op: the operand's index in gatRel.v
			var slots []slot
			for k := range rels {
				for gi, op := range []int{0, 1, 3, 4, 5, 6, 7} {
					var t *T
					if !(k == 0 && (op == 3 || op == 6)) {
						t = s.out(d, shapes(k)[gi]...)
						writes = append(writes, t)
						slots = append(slots, slot{gi, k, op})
					}
					grads[gi] = append(grads[gi], t)
				}
			}
			what := name("GATMeanGrad", d, li, "relations", len(rels), "heads", ml.heads, "C", ml.c)
			s.check(call{what: what, atomic: true, launch: func() {
				gg.GATMeanGrad(grads[0], grads[1], grads[2], grads[3], grads[4], grads[5], grads[6], g,
					ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], ml.heads, slope)
			}, writes: writes}, func(got [][]float64) {
				loss := func() float64 {
					out := gatMeanRef(rels, ml.nd, ml.heads, ml.c, ml.f, slope)
					var l float64
					for q := range out {
						l += gv[q] * out[q]
					}
					return l
				}
				for w, sl := range slots {
					for q, v := range got[w] {
						if math.IsNaN(v) || math.IsInf(v, 0) {
							s.t.Errorf("%s: gradient %d of relation %d, element %d is %v (unwritten?)", what, sl.grad, sl.rel, q, v)
							return
						}
					}
					vals := rels[sl.rel].v[sl.op]
					// Every element for the small layouts; for the wider
					// (each a float64 forward of them all) 6 spread from
					// an offset of the check's own, and the last (every
					// head's block reached).
					var idx []int
					if ml.c <= 8 {
						for q := range vals {
							idx = append(idx, q)
						}
					} else {
						step := max(1, len(vals)/6)
						for q := s.rng.IntN(step); q < len(vals); q += step {
							idx = append(idx, q)
						}
						idx = append(idx, len(vals)-1)
					}
					// The central difference at step h.
					diff := func(q int, h float64) float64 {
						x := vals[q]
						vals[q] = x + h
						lp := loss()
						vals[q] = x - h
						lm := loss()
						vals[q] = x
						return (lp - lm) / (2 * h)
					}
					var gotv, want []float64
					for _, q := range idx {
						want = append(want, diff(q, 1e-5))
						gotv = append(gotv, got[w][q])
					}
					// Against each gradient's own scale, at least 0.01
					// (closeMsg's floor of 1 would let a gradient of
					// magnitude 0.01 err by 15 % in F32): the differences
					// err by about 1e-9, and float32's sums, whose terms
					// cancel in the softmax's backward, by 1e-6 of the
					// terms.
					scale := 1e-2
					for _, w := range want {
						scale = max(scale, math.Abs(w))
					}
					rtol := 1e-6
					if d != tensor.F64 {
						rtol = 1e-3
					}
					for q := range want {
						if math.Abs(gotv[q]-want[q]) <= rtol*scale {
							continue
						}
						// The loss's rounding, divided by the step, can
						// pass the tolerance at 1e-5 (the loss sums many
						// terms): a wrong gradient misses the difference at
						// a step ten times larger too, which rounds ten
						// times less (and errs by its h², 1e-8 relative).
						if alt := diff(idx[q], 1e-4); math.Abs(gotv[q]-alt) <= rtol*scale {
							continue
						}
						s.t.Errorf("%s: gradient %d of relation %d, element %d: %v, want %v (tolerance %.3g)", what, sl.grad, sl.rel, idx[q], gotv[q], want[q], rtol*scale)
						break
					}
				}
			})
		}
	}
	s.panics("GATMeanGrad", func() { // a gradient of the wrong shape
		ops := s.gatOps(tensor.F32, 0)
		ml := multiLayouts[0]
		r := len(ml.rels)
		nils := make([]*T, r)
		bad := append([]*T{s.out(tensor.F32, ml.c+1)}, nils[1:]...)
		gg.GATMeanGrad(nils, nils, nils, nils, nils, nils, bad, s.out(tensor.F32, ml.nd, ml.c),
			ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], ml.heads, 0.2)
	})
}
