package backendtest

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The optional GraphAggregator: GATAggregate and GatherMean against a
// float64 reference computed from the definition, over edges in no
// particular order, nodes without incoming edges, a node with many, and
// relations without edges.

var graphCases = []conformance{
	optional[kernels.GraphAggregator](checkGraphAggregate, "GATAggregate", "GatherMean"),
	optional[kernels.GraphMultiAggregator](checkGraphMulti, "GATMean", "GATMeanAct", "GatherConcat"),
	optional[kernels.GatherSummer](checkGatherSum, "GatherSum"),
	optional[kernels.GatherSumsJoiner](checkGatherSums, "GatherSums"),
	optional[kernels.GATMeansJoiner](checkGATMeans, "GATMeansAct"),
}

// graphLayout is a relation: ns sources, nd destinations, e edges, and
// for GATAggregate heads, per-head width c and edge attribute width f.
type graphLayout struct{ ns, nd, e, heads, c, f int }

var graphLayouts = []graphLayout{
	{ns: 5, nd: 4, e: 9, heads: 2, c: 3, f: 3},
	{ns: 7, nd: 6, e: 0, heads: 1, c: 4, f: 2},       // no edges: bias (GAT), zeros (mean)
	{ns: 3, nd: 5, e: 40, heads: 4, c: 33, f: 3},     // one node takes 20+ edges: 80+ weights per node
	{ns: 64, nd: 70, e: 150, heads: 4, c: 128, f: 3}, // the policy's widths
	{ns: 9, nd: 7, e: 30, heads: 8, c: 24, f: 2},     // more heads than a block of CUDA's has warps
}

// graphEdges draws e edges src → dst leaving destination 1 (when nd > 2)
// without incoming edges and sending half the edges to destination 0,
// and returns them with their CSR on the device. Every other call sorts
// the edges by destination (stably) and returns a nil order, the
// identity (kernels.GraphAggregator), so that every graph op is checked
// both ways.
func (s *suite) graphEdges(l graphLayout) (src, dst []int64, srcT, rowPtrT, orderT *T) {
	s.edges++
	sorted := s.edges%2 == 0
	src, dst = make([]int64, l.e), make([]int64, l.e)
	for k := range src {
		src[k] = int64(s.rng.IntN(l.ns))
		d := s.rng.IntN(l.nd)
		if k%2 == 0 {
			d = 0
		}
		if l.nd > 2 && d == 1 {
			d = 2
		}
		dst[k] = int64(d)
	}
	rowPtr, order, err := kernels.BuildCSR(dst, l.nd)
	if err != nil {
		s.t.Fatalf("BuildCSR: %v", err)
	}
	put := func(v []int64) *T {
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		t, _ := s.put(tensor.I64, f, len(v))
		return t
	}
	if sorted {
		ss, ds := make([]int64, l.e), make([]int64, l.e)
		for p, k := range order {
			ss[p], ds[p] = src[k], dst[k]
		}
		src, dst = ss, ds
		if rowPtr, order, err = kernels.BuildCSR(dst, l.nd); err != nil || !kernels.IsIdentity(order) {
			s.t.Fatalf("BuildCSR of sorted edges: %v, order %v", err, order)
		}
		return src, dst, put(src), put(rowPtr), nil
	}
	return src, dst, put(src), put(rowPtr), put(order)
}

// block returns columns [off, off+w) of a fresh [rows, cols] device
// tensor as a row-strided view, with the view's values row by row.
func (s *suite) block(d tensor.DType, rows, cols, off, w int) (*T, []float64) {
	t, v := s.in(d, rows, cols)
	vals := make([]float64, 0, rows*w)
	for r := 0; r < rows; r++ {
		vals = append(vals, v[r*cols+off:r*cols+off+w]...)
	}
	return t.Narrow(1, off, w), vals
}

// gatVariant is how a GATAggregate check passes its projections and
// stores its result.
type gatVariant struct {
	strided    bool // hs and hd column blocks of wider tensors
	alpha      float64
	accumulate bool
}

var gatVariants = []gatVariant{{alpha: 1}, {strided: true, alpha: 0.25, accumulate: true}}

func checkGraphAggregate(s *suite) {
	ga := s.b.(kernels.GraphAggregator)
	for _, d := range s.floats("GATAggregate", tensor.F64, tensor.F32) {
		for _, l := range graphLayouts {
			for _, vr := range gatVariants {
				s.checkGAT(ga, d, l, vr)
			}
		}
		for _, l := range graphLayouts {
			// GatherMean: rows of the sources averaged over the edges.
			src, dst, srcT, rowPtr, order := s.graphEdges(l)
			x, xv := s.in(d, l.ns, l.c)
			mean := s.out(d, l.nd, l.c)
			mwhat := name("GatherMean", d, l.ns, l.nd, l.e, l.c)
			s.check(call{what: mwhat, launch: func() { ga.GatherMean(mean, x, srcT, rowPtr, order) }, writes: []*T{mean}}, func(got [][]float64) {
				want := make([]float64, l.nd*l.c)
				count := make([]int, l.nd)
				for k := range src {
					count[dst[k]]++
					for c := 0; c < l.c; c++ {
						want[int(dst[k])*l.c+c] += xv[int(src[k])*l.c+c]
					}
				}
				for i, n := range count {
					for c := 0; c < l.c && n > 0; c++ {
						want[i*l.c+c] /= float64(n)
					}
				}
				s.close(mwhat, got[0], want, tol(d))
			})
		}
	}
	s.panics("GATAggregate", func() { // hd's rows differ from out's
		src, rp, ord := s.out(tensor.I64, 2), s.out(tensor.I64, 4), s.out(tensor.I64, 2)
		f := func(shape ...int) *T { return s.out(tensor.F32, shape...) }
		ga.GATAggregate(f(3, 2), f(2, 4), f(4, 4), f(2, 3), f(4, 3), f(4), f(4), f(4), f(2), src, rp, ord, 2, 0.2, 1, false)
	})
	s.panics("GatherMean", func() { // rowPtr of the wrong length
		ga.GatherMean(s.out(tensor.F32, 3, 2), s.out(tensor.F32, 2, 2), s.out(tensor.I64, 2), s.out(tensor.I64, 3), s.out(tensor.I64, 2))
	})
}

// gatInputs are one GAT relation's float operands on the device (hs,
// hd, attr, we, attSrc, attDst, attEdge, bias), with their values.
type gatInputs struct {
	t [8]*T
	v [8][]float64
}

// gatInputs draws the float operands of relation l (hs and hd column
// blocks of wider tensors when strided).
func (s *suite) gatInputs(d tensor.DType, l graphLayout, strided bool) gatInputs {
	var g gatInputs
	hc := l.heads * l.c
	if strided {
		g.t[0], g.v[0] = s.block(d, l.ns, 3*hc+1, hc+1, hc) // the middle of three
		g.t[1], g.v[1] = s.block(d, l.nd, 2*hc, hc, hc)     // the second of two
	} else {
		g.t[0], g.v[0] = s.in(d, l.ns, hc)
		g.t[1], g.v[1] = s.in(d, l.nd, hc)
	}
	for i, shape := range [][]int{{l.e, l.f}, {hc, l.f}, {1, l.heads, l.c}, {1, l.heads, l.c}, {1, l.heads, l.c}, {l.c}} {
		g.t[2+i], g.v[2+i] = s.in(d, shape...)
	}
	return g
}

// checkGATAggregate checks one GATAggregate variant against the float64
// reference: out = alpha·r, or out₀ + alpha·r with accumulate over an out
// holding normal values.
func (s *suite) checkGAT(ga kernels.GraphAggregator, d tensor.DType, l graphLayout, vr gatVariant) {
	src, dst, srcT, rowPtr, order := s.graphEdges(l)
	hc := l.heads * l.c
	g := s.gatInputs(d, l, vr.strided)
	hs, hd, attr, we, aS, aD, aE, bias := g.t[0], g.t[1], g.t[2], g.t[3], g.t[4], g.t[5], g.t[6], g.t[7]
	hsv, hdv, av, wv, asv, adv, aev, bv := g.v[0], g.v[1], g.v[2], g.v[3], g.v[4], g.v[5], g.v[6], g.v[7]
	const slope = 0.2
	out := s.out(d, l.nd, l.c)
	outv := make([]float64, l.nd*l.c)
	if vr.accumulate {
		out, outv = s.in(d, l.nd, l.c)
	}
	what := name("GATAggregate", d, l.ns, l.nd, l.e, l.heads, l.c, l.f, "strided", vr.strided, "alpha", vr.alpha, "accumulate", vr.accumulate)
	s.check(call{what: what, launch: func() {
		ga.GATAggregate(out, hs, hd, attr, we, aS, aD, aE, bias, srcT, rowPtr, order, l.heads, slope, vr.alpha, vr.accumulate)
	}, writes: []*T{out}}, func(got [][]float64) {
		want := make([]float64, l.nd*l.c)
		for i := 0; i < l.nd; i++ {
			for c := 0; c < l.c; c++ {
				want[i*l.c+c] = bv[c]
			}
		}
		for h := 0; h < l.heads; h++ {
			// he = attr·weᵀ, then the three attention terms.
			logit := make([]float64, l.e)
			m := make([]float64, l.nd)
			for i := range m {
				m[i] = math.Inf(-1)
			}
			for k := 0; k < l.e; k++ {
				j, i := int(src[k]), int(dst[k])
				var z float64
				for c := 0; c < l.c; c++ {
					o := h*l.c + c
					var he float64
					for f := 0; f < l.f; f++ {
						he += av[k*l.f+f] * wv[o*l.f+f]
					}
					z += hsv[j*hc+o]*asv[o] + hdv[i*hc+o]*adv[o] + he*aev[o]
				}
				logit[k] = math.Max(z, slope*z)
				m[i] = math.Max(m[i], logit[k])
			}
			sum := make([]float64, l.nd)
			for k := range logit {
				logit[k] = math.Exp(logit[k] - m[dst[k]])
				sum[dst[k]] += logit[k]
			}
			for k := range logit {
				j, i := int(src[k]), int(dst[k])
				alpha := logit[k] / sum[i]
				for c := 0; c < l.c; c++ {
					want[i*l.c+c] += alpha * hsv[j*hc+h*l.c+c] / float64(l.heads)
				}
			}
		}
		for i := range want {
			want[i] = outv[i] + vr.alpha*want[i]
		}
		s.close(what, got[0], want, 4*tol(d))
	})
}

// multiLayouts are the relations of a GraphMultiAggregator check, all
// into nd destination nodes: a few of mixed sizes (one without edges),
// the policy's widths, and more relations (pieces) than a device launch
// takes at once.
var multiLayouts = []struct {
	nd, heads, c, f int
	rels            []graphLayout // ns and e of each relation
}{
	{nd: 6, heads: 2, c: 5, f: 3, rels: []graphLayout{{ns: 5, e: 9}, {ns: 7, e: 0}, {ns: 4, e: 20}}},
	{nd: 70, heads: 4, c: 128, f: 3, rels: []graphLayout{{ns: 64, e: 150}, {ns: 70, e: 140}, {ns: 70, e: 140}, {ns: 20, e: 70}}},
	{nd: 5, heads: 1, c: 4, f: 2, rels: []graphLayout{{ns: 3, e: 7}, {ns: 4, e: 5}, {ns: 2, e: 9}, {ns: 6, e: 0}, {ns: 5, e: 11},
		{ns: 3, e: 4}, {ns: 4, e: 8}, {ns: 2, e: 6}, {ns: 5, e: 10}, {ns: 3, e: 3}, {ns: 6, e: 12}}},
	{nd: 9, heads: 6, c: 40, f: 3, rels: []graphLayout{{ns: 8, e: 25}, {ns: 5, e: 12}}}, // more heads than a CUDA block has warps
}

// gatOps are the operand lists of a GATMean over multiLayouts[li]'s
// relations: hs, hd, attr, we, attSrc, attDst, attEdge, bias, src,
// rowPtr and order, one entry per relation (odd relations' projections
// column blocks of wider tensors, as the stacked products are).
func (s *suite) gatOps(d tensor.DType, li int) [][]*T {
	ops, _ := s.gatOpsValues(d, li)
	return ops
}

// gatOpsValues is gatOps with each relation's edges and float values on
// the host (gatRel).
func (s *suite) gatOpsValues(d tensor.DType, li int) ([][]*T, []gatRel) {
	ml := multiLayouts[li]
	ops := make([][]*T, 11)
	var rels []gatRel
	for k, rl := range ml.rels {
		l := graphLayout{ns: rl.ns, nd: ml.nd, e: rl.e, heads: ml.heads, c: ml.c, f: ml.f}
		src, dst, srcT, rowPtr, order := s.graphEdges(l)
		g := s.gatInputs(d, l, k%2 == 1)
		for i, t := range append(g.t[:], srcT, rowPtr, order) {
			ops[i] = append(ops[i], t)
		}
		rels = append(rels, gatRel{ns: rl.ns, e: rl.e, src: src, dst: dst, v: g.v})
	}
	return ops, rels
}

// checkGATMeans holds GATMeansAct to GATMeanAct on the same backend, bit
// for bit (each output its own call's): multiLayouts' means in an order
// that gives CUDA a join of three (the layouts of one block size), one
// of more relations than a launch takes and ones alone, then five means
// of one block size, more than one CUDA launch joins.
func checkGATMeans(s *suite) {
	gm, ok := prerequisite[kernels.GraphMultiAggregator](s, "GATMeansJoiner")
	if !ok {
		return
	}
	gj := s.b.(kernels.GATMeansJoiner)
	const slope = 0.2
	for _, d := range s.floats("GATMeansAct", tensor.F64, tensor.F32) {
		for _, order := range [][]int{{1, 3, 1, 0, 2, 3}, {1, 3, 1, 3, 1}} {
			var calls []kernels.GATMeanCall
			var want [][]float64
			var outs []*T
			for k, li := range order {
				ml, o := multiLayouts[li], s.gatOps(d, li)
				c := kernels.GATMeanCall{Out: s.out(d, ml.nd, ml.c), Hs: o[0], Hd: o[1], Attr: o[2], We: o[3], AttSrc: o[4], AttDst: o[5],
					AttEdge: o[6], Bias: o[7], Src: o[8], RowPtr: o[9], Order: o[10], Heads: ml.heads, Slope: slope,
					Act: []kernels.UnaryOp{kernels.GeluErf, kernels.Tanh, kernels.Relu}[k%3]}
				if k%2 == 0 {
					c.Res, _ = s.in(d, ml.nd, ml.c)
				}
				gm.GATMeanAct(c.Out, c.Hs, c.Hd, c.Attr, c.We, c.AttSrc, c.AttDst, c.AttEdge, c.Bias, c.Src, c.RowPtr, c.Order, c.Heads, slope, c.Act, c.Res)
				want = append(want, s.get(c.Out))
				c.Out = s.out(d, ml.nd, ml.c)
				calls, outs = append(calls, c), append(outs, c.Out)
			}
			what := name("GATMeansAct", d, "layouts", order)
			s.check(call{what: what, launch: func() { gj.GATMeansAct(calls) }, writes: outs}, func(got [][]float64) {
				for k := range got {
					same(s.t, name(what, "call", k), got[k], want[k])
				}
			})
		}
	}
	s.panics("GATMeansAct", func() { // the second mean reads the first's out as its residual
		o := s.gatOps(tensor.F32, 0)
		ml := multiLayouts[0]
		a := kernels.GATMeanCall{Out: s.out(tensor.F32, ml.nd, ml.c), Hs: o[0], Hd: o[1], Attr: o[2], We: o[3], AttSrc: o[4], AttDst: o[5],
			AttEdge: o[6], Bias: o[7], Src: o[8], RowPtr: o[9], Order: o[10], Heads: ml.heads, Slope: slope, Act: kernels.Relu}
		b := a
		b.Out, b.Res = s.out(tensor.F32, ml.nd, ml.c), a.Out
		gj.GATMeansAct([]kernels.GATMeanCall{a, b})
	})
	// A relation of the second mean that does not fit its heads: nothing
	// is written, the first mean's output included.
	o := s.gatOps(tensor.F32, 0)
	ml := multiLayouts[0]
	a := kernels.GATMeanCall{Out: s.out(tensor.F32, ml.nd, ml.c), Hs: o[0], Hd: o[1], Attr: o[2], We: o[3], AttSrc: o[4], AttDst: o[5],
		AttEdge: o[6], Bias: o[7], Src: o[8], RowPtr: o[9], Order: o[10], Heads: ml.heads, Slope: slope, Act: kernels.Relu}
	b := a
	b.Out, b.Heads = s.out(tensor.F32, ml.nd, ml.c), ml.heads+1
	untouched := s.read([]*T{a.Out})
	s.panics("GATMeansAct", func() { gj.GATMeansAct([]kernels.GATMeanCall{a, b}) })
	same(s.t, "GATMeansAct: the first mean's output after the second's refusal", s.read([]*T{a.Out})[0], untouched[0])
}

// checkGraphMulti holds GATMean to GATMeanOps and GatherConcat to
// GatherMean per block on the same backend, bit for bit (each is the
// same arithmetic in fewer launches); checkGraphAggregate holds those to
// the float64 definition.
func checkGraphMulti(s *suite) {
	ga, ok := prerequisite[kernels.GraphAggregator](s, "GraphMultiAggregator")
	if !ok {
		return
	}
	gm := s.b.(kernels.GraphMultiAggregator)
	for _, d := range s.floats("GATMean", tensor.F64, tensor.F32) {
		for li, ml := range multiLayouts {
			r := len(ml.rels)
			ops := s.gatOps(d, li)
			const slope = 0.2
			ref := s.out(d, ml.nd, ml.c)
			kernels.GATMeanOps(ga, ref, ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], ml.heads, slope)
			want := s.get(ref)
			out := s.out(d, ml.nd, ml.c)
			what := name("GATMean", d, li, "relations", r, "heads", ml.heads, "C", ml.c)
			s.check(call{what: what, launch: func() {
				gm.GATMean(out, ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], ml.heads, slope)
			}, writes: []*T{out}}, func(got [][]float64) {
				same(s.t, what, got[0], want)
			})
			// With the layer's activation and a residual (none in the
			// second layout), against GATMeanActOps.
			act := []kernels.UnaryOp{kernels.GeluErf, kernels.Tanh, kernels.Relu}[li%3]
			var res *T
			if li != 1 {
				res, _ = s.in(d, ml.nd, ml.c)
			}
			refAct := s.out(d, ml.nd, ml.c)
			kernels.GATMeanActOps(s.b, ga, refAct, ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], ml.heads, slope, act, res)
			wantAct := s.get(refAct)
			outAct := s.out(d, ml.nd, ml.c)
			awhat := name("GATMeanAct", d, li, "relations", r, act, "residual", res != nil)
			s.check(call{what: awhat, launch: func() {
				gm.GATMeanAct(outAct, ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], ml.heads, slope, act, res)
			}, writes: []*T{outAct}}, func(got [][]float64) {
				same(s.t, awhat, got[0], wantAct)
			})
		}
		for li, ml := range multiLayouts {
			// GatherConcat: every relation's mean, with the destination's
			// own rows after every other piece and two columns of ones.
			var xs, src, rowPtr, order []*T
			var ws []int
			for k, rl := range ml.rels {
				l := graphLayout{ns: rl.ns, nd: ml.nd, e: rl.e}
				_, _, srcT, rp, ord := s.graphEdges(l)
				w := ml.c + k%3
				x, _ := s.in(d, l.ns, w)
				xs, src, rowPtr, order, ws = append(xs, x), append(src, srcT), append(rowPtr, rp), append(order, ord), append(ws, w)
				if k%2 == 0 {
					own, _ := s.in(d, ml.nd, ml.c)
					xs, src, rowPtr, order, ws = append(xs, own), append(src, nil), append(rowPtr, nil), append(order, nil), append(ws, ml.c)
				}
			}
			const ones = 2
			total := ones
			for _, w := range ws {
				total += w
			}
			want := make([]float64, ml.nd*total)
			col := 0
			for i, x := range xs {
				block := s.get(x)
				if src[i] != nil {
					m := s.out(d, ml.nd, ws[i])
					ga.GatherMean(m, x, src[i], rowPtr[i], order[i])
					block = s.get(m)
				}
				for n := 0; n < ml.nd; n++ {
					copy(want[n*total+col:n*total+col+ws[i]], block[n*ws[i]:(n+1)*ws[i]])
				}
				col += ws[i]
			}
			for n := 0; n < ml.nd; n++ {
				for j := total - ones; j < total; j++ {
					want[n*total+j] = 1
				}
			}
			out := s.out(d, ml.nd, total)
			what := name("GatherConcat", d, li, "pieces", len(xs), "ones", ones)
			s.check(call{what: what, launch: func() { gm.GatherConcat(out, xs, src, rowPtr, order, ones) }, writes: []*T{out}}, func(got [][]float64) {
				same(s.t, what, got[0], want)
			})
		}
	}
	s.panics("GATMean", func() { // lists of different lengths
		f := s.out(tensor.F32, 2, 2)
		one := []*T{f}
		gm.GATMean(f, one, one, one, one, one, one, one, one, one, one, nil, 1, 0.2)
	})
	s.panics("GatherConcat", func() { // out narrower than the pieces
		gm.GatherConcat(s.out(tensor.F32, 3, 2), []*T{s.out(tensor.F32, 3, 2)}, []*T{nil}, []*T{nil}, []*T{nil}, 1)
	})
}

// gatherSumCase is checkGatherSum's call over multiLayouts[li] (a
// fresh out) and its float64 definition.
func gatherSumCase(s *suite, d tensor.DType, li int) (kernels.GatherSumCall, []float64) {
	ml := multiLayouts[li]
	c := ml.c
	var xs, src, rowPtr, order []*T
	var vals [][]float64
	var gathered [][3][]int64 // src, rowPtr, order of a gathered piece
	for k, rl := range ml.rels {
		l := graphLayout{ns: rl.ns, nd: ml.nd, e: rl.e}
		sv, dv, srcT, rp, ord := s.graphEdges(l)
		var x *T
		var v []float64
		if k%2 == 1 {
			x, v = s.block(d, l.ns, 3*c+1, c+1, c)
		} else {
			x, v = s.in(d, l.ns, c)
		}
		rpv, ordv, err := kernels.BuildCSR(dv, ml.nd)
		if err != nil {
			s.t.Fatalf("BuildCSR: %v", err)
		}
		xs, src, rowPtr, order = append(xs, x), append(src, srcT), append(rowPtr, rp), append(order, ord)
		vals, gathered = append(vals, v), append(gathered, [3][]int64{sv, rpv, ordv})
		if k%2 == 0 {
			own, ov := s.in(d, ml.nd, c)
			xs, src, rowPtr, order = append(xs, own), append(src, nil), append(rowPtr, nil), append(order, nil)
			vals, gathered = append(vals, ov), append(gathered, [3][]int64{})
		}
	}
	var biases []*T
	var bvals [][]float64
	if li != 1 {
		for range 2 {
			b, bv := s.in(d, c)
			biases, bvals = append(biases, b), append(bvals, bv)
		}
	}
	var res *T
	var rv []float64
	if li != 2 {
		res, rv = s.in(d, ml.nd, c)
	}
	scale := 1.0
	if li != 0 {
		scale = 1 / float64(len(ml.rels))
	}
	act := kernels.GeluErf
	if li == 1 {
		act = kernels.Relu
	}
	want := make([]float64, ml.nd*c)
	for i := 0; i < ml.nd; i++ {
		for f := 0; f < c; f++ {
			var t float64
			for p, v := range vals {
				g := gathered[p]
				if g[0] == nil {
					t += v[i*c+f]
					continue
				}
				a, b := g[1][i], g[1][i+1]
				if b == a {
					continue
				}
				var m float64
				for q := a; q < b; q++ {
					m += v[int(g[0][g[2][q]])*c+f]
				}
				t += m / float64(b-a)
			}
			for _, bv := range bvals {
				t += bv[f]
			}
			t = refUnary(act, scale*t)
			if rv != nil {
				t += rv[i*c+f]
			}
			want[i*c+f] = t
		}
	}
	return kernels.GatherSumCall{Out: s.out(d, ml.nd, c), Xs: xs, Src: src, RowPtr: rowPtr, Order: order, Biases: biases, Scale: scale, Act: act, Res: res}, want
}

// checkGatherSums holds GatherSums to GatherSum on the same backend, bit
// for bit (each output its own call's): every multiLayouts case at once
// (one of them of more terms than a CUDA launch takes) and then the
// first two again, more calls than one CUDA launch joins.
func checkGatherSums(s *suite) {
	gs, ok := prerequisite[kernels.GatherSummer](s, "GatherSumsJoiner")
	if !ok {
		return
	}
	gj := s.b.(kernels.GatherSumsJoiner)
	for _, d := range s.floats("GatherSums", tensor.F64, tensor.F32) {
		var calls []kernels.GatherSumCall
		var want [][]float64
		var outs []*T
		for _, li := range []int{0, 1, 2, 3, 0, 1} {
			c, _ := gatherSumCase(s, d, li)
			gs.GatherSum(c.Out, c.Xs, c.Src, c.RowPtr, c.Order, c.Biases, c.Scale, c.Act, c.Res)
			want = append(want, s.get(c.Out))
			c.Out = s.out(d, c.Out.Shape()...)
			calls, outs = append(calls, c), append(outs, c.Out)
		}
		for _, n := range []int{2, len(calls)} {
			what := name("GatherSums", d, "calls", n)
			s.check(call{what: what, launch: func() { gj.GatherSums(calls[:n]) }, writes: outs[:n]}, func(got [][]float64) {
				for k := range got {
					same(s.t, name(what, "call", k), got[k], want[k])
				}
			})
		}
	}
	s.panics("GatherSums", func() { // two calls write one out
		out := s.out(tensor.F32, 3, 2)
		b := s.out(tensor.F32, 2)
		gj.GatherSums([]kernels.GatherSumCall{{Out: out, Biases: []*T{b}, Scale: 1, Act: kernels.Relu}, {Out: out, Biases: []*T{b}, Scale: 1, Act: kernels.Relu}})
	})
	s.panics("GatherSums", func() { // the second call reads the first's out
		out := s.out(tensor.F32, 3, 2)
		gj.GatherSums([]kernels.GatherSumCall{{Out: out, Biases: []*T{s.out(tensor.F32, 2)}, Scale: 1, Act: kernels.Relu},
			{Out: s.out(tensor.F32, 3, 2), Xs: []*T{out}, Src: []*T{nil}, RowPtr: []*T{nil}, Order: []*T{nil}, Scale: 1, Act: kernels.Relu}})
	})
}

// checkGatherSum: GatherSum against the float64 definition over
// multiLayouts' relations, each a gathered piece (odd ones a column
// block of a wider tensor, as the stacked products are) and every other
// one followed by a piece of the destination's own rows; with and
// without biases, residual and scale, and (the third layout) more pieces
// than a CUDA launch takes.
func checkGatherSum(s *suite) {
	gs := s.b.(kernels.GatherSummer)
	for _, d := range s.floats("GatherSum", tensor.F64, tensor.F32) {
		for li := range multiLayouts {
			c, want := gatherSumCase(s, d, li)
			what := name("GatherSum", d, li, "pieces", len(c.Xs), "biases", len(c.Biases), "scale", c.Scale, c.Act, "residual", c.Res != nil)
			s.check(call{what: what, launch: func() { gs.GatherSum(c.Out, c.Xs, c.Src, c.RowPtr, c.Order, c.Biases, c.Scale, c.Act, c.Res) }, writes: []*T{c.Out}}, func(got [][]float64) {
				s.close(what, got[0], want, 8*tol(d))
			})
		}
	}
	s.panics("GatherSum", func() { // a piece of the wrong width
		gs.GatherSum(s.out(tensor.F32, 3, 2), []*T{s.out(tensor.F32, 3, 3)}, []*T{nil}, []*T{nil}, []*T{nil}, nil, 1, kernels.Relu, nil)
	})
	s.panics("GatherSum", func() { // a bias of the wrong width
		gs.GatherSum(s.out(tensor.F32, 3, 2), nil, nil, nil, nil, []*T{s.out(tensor.F32, 3)}, 1, kernels.Relu, nil)
	})
	s.panics("GatherSum", func() { // the residual is out
		out := s.out(tensor.F32, 3, 2)
		gs.GatherSum(out, []*T{s.out(tensor.F32, 3, 2)}, []*T{nil}, []*T{nil}, []*T{nil}, nil, 1, kernels.Relu, out)
	})
	s.panics("GatherSum", func() { // a piece, a row-strided block, reaches into out
		both := s.out(tensor.F32, 3, 4)
		gs.GatherSum(both.Narrow(0, 0, 1).Reshape(2, 2), []*T{both.Narrow(1, 1, 2).Narrow(0, 0, 2)}, []*T{nil}, []*T{nil}, []*T{nil}, nil, 1, kernels.Relu, nil)
	})
}
