package autograd

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// GraphEdges are one relation's edges for GATAggregate and GatherMean,
// on the device of the values they index: Src and Dst [E] I64, and the
// same edges grouped by destination (kernels.GraphAggregator's CSR:
// RowPtr [NumDst+1] and Order [E] I64, built on the host with
// kernels.BuildCSR; Order nil where the edges are sorted by destination
// already, Dst non-decreasing, so that a device reads each edge's source
// one load sooner). A relation without edges may leave all four nil
// (GATAggregate then reads only its bias).
type GraphEdges struct {
	Src, Dst, RowPtr, Order *tensor.Tensor
	// NumDst is the number of destination nodes.
	NumDst int
}

// Len returns the number of edges.
func (e GraphEdges) Len() int {
	if e.Src == nil {
		return 0
	}
	return e.Src.Numel()
}

// csr reports whether e's CSR is given (Src and RowPtr; Order may be
// nil). A nil Order says the edges are sorted by destination: where Dst
// is on the CPU that is checked, and edges that are not sorted panic
// (on a device Dst cannot be read without a sync: the caller's word is
// taken, as for the CSR's other values).
func (e GraphEdges) csr(op string) bool {
	if e.Src == nil || e.RowPtr == nil {
		return false
	}
	if e.Order == nil && e.Dst != nil && e.Dst.Device().IsCPU() && e.Dst.DType() == tensor.I64 && e.Dst.IsContiguous() {
		d := tensor.Data[int64](e.Dst)
		for k := 1; k < len(d); k++ {
			if d[k] < d[k-1] {
				panic(fmt.Sprintf("autograd: %s: edges with no Order must be sorted by destination; Dst[%d] = %d follows %d", op, k, d[k], d[k-1]))
			}
		}
	}
	return true
}

// fusedGraph reports whether GraphAggregator launches may replace the
// unfused ops: nothing records a gradient, the backend has the fused
// kernels, every float operand is F32 and contiguous (strided ones may be
// row-strided views, kernels.RowStride) and every relation's CSR is
// given.
func fusedGraph(es []GraphEdges, vs, strided []*Var) (kernels.GraphAggregator, bool) {
	for _, e := range es {
		if !e.csr("graph aggregation") {
			return nil, false
		}
	}
	for _, v := range vs {
		if v.Value.DType() != tensor.F32 || !v.Value.IsContiguous() || (GradEnabled() && v.RequiresGrad()) {
			return nil, false
		}
	}
	for _, v := range strided {
		if _, ok := kernels.RowStride(v.Value); !ok || v.Value.DType() != tensor.F32 || (GradEnabled() && v.RequiresGrad()) {
			return nil, false
		}
	}
	g, ok := backendOf(vs[0].Value).(kernels.GraphAggregator)
	return g, ok
}

// GATRelation is one relation's operands of a GAT layer (GATAggregate
// documents them): the projections Hs [Ns, heads·C] and Hd [NumDst,
// heads·C] (column blocks of a stacked projection, LinearStack, are
// fine), the edge attributes Attr [E, F] with the edge projection's
// weight We [heads·C, F], the attention vectors [1, heads, C] and Bias
// [C]. For a relation without edges only Bias and Edges.NumDst are read.
type GATRelation struct {
	Hs, Hd, Attr, We        *Var
	AttSrc, AttDst, AttEdge *Var
	Bias                    *Var
	Edges                   GraphEdges
}

// GATAggregate is one relation of a GAT layer (PyG GATConv with separate
// source and destination projections, edge attributes, no self loops,
// heads averaged), given the projections: hs [Ns, heads·C] the sources',
// hd [NumDst, heads·C] the destinations', attr [E, F] the edge
// attributes with we [heads·C, F] the edge projection's weight (applied
// here), attSrc, attDst and attEdge [1, heads, C] the attention vectors
// and bias [C]. The logit of edge j→i and head h is the leaky ReLU (slope)
// of a_src·hs_j + a_dst·hd_i + a_edge·(we·attr_ji); a softmax over i's
// incoming edges weighs the messages hs_j; heads are averaged and the
// bias added: the result is [NumDst, C], the bias alone for a node
// without incoming edges.
//
// When no input records a gradient (inference) and the device has
// kernels.GraphAggregator, it is one launch; otherwise the gather,
// segment-softmax and reduction ops, with their gradients.
func GATAggregate(hs, hd, attr, we, attSrc, attDst, attEdge, bias *Var, e GraphEdges, heads int, slope float64) *Var {
	return GATMean([]GATRelation{{Hs: hs, Hd: hd, Attr: attr, We: we, AttSrc: attSrc, AttDst: attDst, AttEdge: attEdge, Bias: bias, Edges: e}}, heads, slope)
}

// GATMean is the mean of GATAggregate over relations into one node type
// (all of one NumDst and width C), as a heterogeneous GAT layer combines
// them. Fused (no gradient recorded, a kernels.GraphAggregator device,
// F32, every relation's CSR given), it is one launch per relation, each
// adding its share into one output, or one launch for them all on a
// kernels.GraphMultiAggregator device; otherwise GATAggregate per relation,
// summed left to right and scaled by 1/len(rels).
func GATMean(rels []GATRelation, heads int, slope float64) *Var {
	return gatMean(rels, heads, slope, nil)
}

// gatEpilogue is GATMeanAct's activation and residual.
type gatEpilogue struct {
	act kernels.UnaryOp
	res *Var
}

// GATMeanAct is ScaleActAdd(GATMean(rels, heads, slope), 1, act, res): a
// GAT layer's output with its activation and residual (res may be nil).
// Fused on a kernels.GraphMultiAggregator device (as GATMean is, and res
// F32 and contiguous), the relations, the activation and the residual
// are one launch; otherwise GATMean then ScaleActAdd, with their
// gradients where they are recorded.
func GATMeanAct(rels []GATRelation, heads int, slope float64, act kernels.UnaryOp, res *Var) *Var {
	return gatMean(rels, heads, slope, &gatEpilogue{act: act, res: res})
}

// gatMean is GATMean, with the epilogue ep when not nil.
func gatMean(rels []GATRelation, heads int, slope float64, ep *gatEpilogue) *Var {
	nd, c := gatCheck(rels, heads, ep)
	if g, ok := fusedGATMean(rels); ok {
		out := alloc(rels[0].Bias.Value, rels[0].Bias.Value.DType(), nd, c)
		ops := gatOperands(rels, heads, nd, c)
		gm, multi := g.(kernels.GraphMultiAggregator)
		if multi && fusedEpilogue(ep) {
			gm.GATMeanAct(out, ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], heads, slope, ep.act, ep.resValue())
			return Const(out)
		}
		if multi && len(rels) > 1 {
			gm.GATMean(out, ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], heads, slope)
		} else {
			kernels.GATMeanOps(g, out, ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], heads, slope)
		}
		return withEpilogue(Const(out), ep)
	}
	if gg, g, ok := trainedGATMean(rels, heads, c); ok {
		return withEpilogue(gatMeanTrained(gg, g, rels, heads, slope, nd, c), ep)
	}
	var acc *Var
	for i, r := range rels {
		o := gatUnfused(r, heads, slope, c)
		if i == 0 {
			acc = o
		} else {
			acc = Add(acc, o)
		}
	}
	if len(rels) > 1 {
		acc = MulScalar(acc, 1/float64(len(rels)))
	}
	return withEpilogue(acc, ep)
}

// withEpilogue applies ep to x (ScaleActAdd with s = 1), or returns x
// when ep is nil.
func withEpilogue(x *Var, ep *gatEpilogue) *Var {
	if ep == nil {
		return x
	}
	return ScaleActAdd(x, 1, ep.act, ep.res)
}

// gatCheck checks a GATMean's relations (and ep's residual, when ep is
// set) and returns their NumDst and width C; it panics on a mistake.
func gatCheck(rels []GATRelation, heads int, ep *gatEpilogue) (nd, c int) {
	if len(rels) == 0 {
		panic("autograd: gat_mean: no relations")
	}
	c, nd = -1, rels[0].Edges.NumDst
	for _, r := range rels {
		if heads < 1 || r.Bias == nil || r.Bias.Value.Rank() != 1 || (c >= 0 && r.Bias.Shape()[0] != c) || r.Edges.NumDst != nd {
			panic(fmt.Sprintf("autograd: gat_mean: heads %d, want ≥ 1, and relations into one node type (%d nodes) with [C] biases of one width", heads, nd))
		}
		c = r.Bias.Shape()[0]
	}
	if ep != nil && ep.res != nil && !tensor.SameShape(ep.res.Shape(), []int{nd, c}) {
		panic(fmt.Sprintf("autograd: gat_mean_act: residual shape %v, want [%d, %d]", ep.res.Shape(), nd, c))
	}
	return nd, c
}

// gatOperands are the fused launch's operand lists: hs, hd, attr, we,
// attSrc, attDst, attEdge, bias, src, rowPtr, order, relation by
// relation, in one backing array (a relation without edges reads only
// its bias: stand-ins of the right shapes for the rest, emptyGAT).
func gatOperands(rels []GATRelation, heads, nd, c int) [11][]*tensor.Tensor {
	all := make([]*tensor.Tensor, 11*len(rels))
	var ops [11][]*tensor.Tensor
	for i := range ops {
		ops[i] = all[i*len(rels) : (i+1)*len(rels)]
	}
	for k, r := range rels {
		hs, hd, attr, we, as, ad, ae := r.Hs, r.Hd, r.Attr, r.We, r.AttSrc, r.AttDst, r.AttEdge
		if r.Edges.Len() == 0 {
			hs, hd, attr, we, as, ad, ae = emptyGAT(r.Bias.Value, heads, c, nd)
		}
		ops[0][k], ops[1][k], ops[2][k], ops[3][k] = hs.Value, hd.Value, attr.Value, we.Value
		ops[4][k], ops[5][k], ops[6][k], ops[7][k] = as.Value, ad.Value, ae.Value, r.Bias.Value
		ops[8][k], ops[9][k], ops[10][k] = r.Edges.Src, r.Edges.RowPtr, r.Edges.Order
	}
	return ops
}

// fusedEpilogue reports whether ep joins the fused launch
// (GraphMultiAggregator.GATMeanAct): set, and its residual, if any, F32,
// contiguous and not recording a gradient.
func fusedEpilogue(ep *gatEpilogue) bool {
	return ep != nil && (ep.res == nil || (ep.res.Value.DType() == tensor.F32 && ep.res.Value.IsContiguous() && !(GradEnabled() && ep.res.RequiresGrad())))
}

// resValue is the epilogue's residual tensor, or nil.
func (ep *gatEpilogue) resValue() *tensor.Tensor {
	if ep.res == nil {
		return nil
	}
	return ep.res.Value
}

// GATMeanActs is GATMeanAct(types[k], heads, slope, act, res[k]) for
// each k: a heterogeneous GAT layer's outputs, one per node type. Where
// every one would be a single fused launch (GATMeanAct's conditions) on
// one device that is a kernels.GATMeansJoiner, they are one join (one
// launch on CUDA for up to four types); otherwise each is GATMeanAct,
// with its gradients where they are recorded. The results are the same
// bits either way.
func GATMeanActs(types [][]GATRelation, heads int, slope float64, act kernels.UnaryOp, res []*Var) []*Var {
	if len(res) != len(types) {
		panic(fmt.Sprintf("autograd: gat_mean_acts: %d relation lists and %d residuals", len(types), len(res)))
	}
	outs := make([]*Var, len(types))
	eps := make([]*gatEpilogue, len(types))
	for k := range types {
		eps[k] = &gatEpilogue{act: act, res: res[k]}
	}
	// Where the device cannot join (the CPU), each type as it is.
	joined := len(types) > 1 && len(types[0]) > 0 && types[0][0].Bias != nil
	if joined {
		_, joined = backendOf(types[0][0].Bias.Value).(kernels.GATMeansJoiner)
	}
	shapes := make([][2]int, len(types))
	var j kernels.GATMeansJoiner
	for k, rels := range types {
		if !joined {
			break
		}
		nd, c := gatCheck(rels, heads, eps[k])
		shapes[k] = [2]int{nd, c}
		g, ok := fusedGATMean(rels)
		_, multi := g.(kernels.GraphMultiAggregator)
		gj, can := g.(kernels.GATMeansJoiner)
		joined = ok && multi && can && fusedEpilogue(eps[k]) && (j == nil || gj == j)
		j = gj
	}
	if !joined {
		for k, rels := range types {
			outs[k] = gatMean(rels, heads, slope, eps[k])
		}
		return outs
	}
	calls := make([]kernels.GATMeanCall, len(types))
	for k, rels := range types {
		nd, c := shapes[k][0], shapes[k][1]
		out := alloc(rels[0].Bias.Value, rels[0].Bias.Value.DType(), nd, c)
		o := gatOperands(rels, heads, nd, c)
		calls[k] = kernels.GATMeanCall{Out: out, Hs: o[0], Hd: o[1], Attr: o[2], We: o[3], AttSrc: o[4], AttDst: o[5], AttEdge: o[6],
			Bias: o[7], Src: o[8], RowPtr: o[9], Order: o[10], Heads: heads, Slope: slope, Act: act, Res: eps[k].resValue()}
		outs[k] = Const(out)
	}
	j.GATMeansAct(calls)
	return outs
}

// unfusedGraphGrad makes a GATMean or a GatherMean recording gradients
// take the unfused ops (tests compare the two paths).
var unfusedGraphGrad bool

// trainedGATMean reports whether a GATMean recording gradients runs as
// its fused forward with kernels.GATMeanGradder's backward (one launch
// or so each way instead of about 18 ops a relation and twice as many in
// backward): grad mode on and an operand recording a gradient, the
// backend has both and its GATMeanGrad fits the layer's widths
// (GATMeanGradFits), every CSR is given, the edge attributes record no
// gradient, and the float operands are F32 (or F64 on the CPU and sim,
// whose kernels have it), contiguous, the projections possibly
// row-strided views.
func trainedGATMean(rels []GATRelation, heads, c int) (kernels.GATMeanGradder, kernels.GraphAggregator, bool) {
	if unfusedGraphGrad {
		return nil, nil, false
	}
	var vs, strided []*Var
	for _, r := range rels {
		if !r.Edges.csr("gat_mean") {
			return nil, nil, false
		}
		vs = append(vs, r.Bias)
		if r.Edges.Len() > 0 {
			if r.Attr.RequiresGrad() {
				return nil, nil, false
			}
			vs = append(vs, r.Attr, r.We, r.AttSrc, r.AttDst, r.AttEdge)
			strided = append(strided, r.Hs, r.Hd)
		}
	}
	if !needsGrad(append(append([]*Var(nil), vs...), strided...)...) {
		return nil, nil, false
	}
	dt, dev := vs[0].Value.DType(), vs[0].Value.Device()
	if dt != tensor.F32 && (dt != tensor.F64 || (dev.Kind != tensor.KindCPU && dev.Kind != tensor.KindSim)) {
		return nil, nil, false
	}
	for _, v := range vs {
		if v.Value.DType() != dt || !v.Value.IsContiguous() {
			return nil, nil, false
		}
	}
	for _, v := range strided {
		if _, ok := kernels.RowStride(v.Value); !ok || v.Value.DType() != dt {
			return nil, nil, false
		}
	}
	b := backendOf(vs[0].Value)
	gg, ok1 := b.(kernels.GATMeanGradder)
	g, ok2 := b.(kernels.GraphAggregator)
	if !ok1 || !ok2 {
		return nil, nil, false
	}
	for _, r := range rels {
		if r.Edges.Len() > 0 && !gg.GATMeanGradFits(heads, c, r.Attr.Shape()[1]) {
			return nil, nil, false
		}
	}
	return gg, g, true
}

// gatMeanTrained is a GATMean recording gradients through the fused
// kernels: the forward as in inference (GraphMultiAggregator.GATMean, or
// its GraphAggregator calls), the backward one GATMeanGrad for every
// relation's hs, hd, we, attSrc, attDst, attEdge and bias that needs a
// gradient (a relation without edges gives its bias's alone).
func gatMeanTrained(gg kernels.GATMeanGradder, g kernels.GraphAggregator, rels []GATRelation, heads int, slope float64, nd, c int) *Var {
	like := rels[0].Bias.Value
	out := alloc(like, like.DType(), nd, c)
	ops := gatOperands(rels, heads, nd, c)
	if gm, multi := g.(kernels.GraphMultiAggregator); multi && len(rels) > 1 {
		gm.GATMean(out, ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], heads, slope)
	} else {
		kernels.GATMeanOps(g, out, ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], heads, slope)
	}
	inputs := make([]*Var, 0, 7*len(rels))
	for _, r := range rels {
		inputs = append(inputs, r.Hs, r.Hd, r.We, r.AttSrc, r.AttDst, r.AttEdge, r.Bias)
	}
	return result("gat_mean", out, inputs, 11*len(rels), func() backwardFunc {
		return func(gOut *tensor.Tensor) []*tensor.Tensor {
			gOut = contig(gOut)
			grads := make([]*tensor.Tensor, len(inputs))
			var lists [7][]*tensor.Tensor
			for i := range lists {
				lists[i] = make([]*tensor.Tensor, len(rels))
			}
			for k, r := range rels {
				for i, v := range inputs[7*k : 7*k+7] {
					if !needs(v) || (i < 6 && r.Edges.Len() == 0) {
						continue
					}
					t := alloc(gOut, gOut.DType(), v.Shape()...)
					grads[7*k+i], lists[i][k] = t, t
				}
			}
			gg.GATMeanGrad(lists[0], lists[1], lists[2], lists[3], lists[4], lists[5], lists[6], gOut,
				ops[0], ops[1], ops[2], ops[3], ops[4], ops[5], ops[6], ops[7], ops[8], ops[9], ops[10], heads, slope)
			return grads
		}
	})
}

// fusedGATMean is fusedGraph over every operand of rels.
func fusedGATMean(rels []GATRelation) (kernels.GraphAggregator, bool) {
	es := make([]GraphEdges, len(rels))
	var vs, strided []*Var
	for i, r := range rels {
		es[i] = r.Edges
		vs = append(vs, r.Bias)
		if r.Edges.Len() > 0 {
			vs = append(vs, r.Attr, r.We, r.AttSrc, r.AttDst, r.AttEdge)
			strided = append(strided, r.Hs, r.Hd)
		}
	}
	return fusedGraph(es, vs, strided)
}

// emptyGAT returns stand-ins for the operands of a relation without
// edges: GATAggregate reads only its bias then, so they are allocated
// without being written (no launch), and the edge attributes have no
// columns.
func emptyGAT(like *tensor.Tensor, heads, c, nd int) (hs, hd, attr, we, as, ad, ae *Var) {
	dt := like.DType()
	z := func(shape ...int) *Var { return Const(alloc(like, dt, shape...)) }
	hc := heads * c
	as = z(hc)
	return z(0, hc), z(nd, hc), z(0, 0), z(hc, 0), as, as, as
}

// gatUnfused is one relation through the unfused ops (with gradients).
func gatUnfused(r GATRelation, heads int, slope float64, c int) *Var {
	e, nd, n := r.Edges, r.Edges.NumDst, r.Edges.Len()
	if n == 0 {
		return Expand(Reshape(r.Bias, 1, c), nd, c)
	}
	ns := r.Hs.Shape()[0]
	hsv := Reshape(r.Hs, ns, heads, c)
	hdv := Reshape(r.Hd, nd, heads, c)
	he := Reshape(Linear(r.Attr, r.We, nil), n, heads, c)
	logit := Add(Add(
		IndexSelect(attend(hsv, r.AttSrc), 0, e.Src),
		IndexSelect(attend(hdv, r.AttDst), 0, e.Dst)),
		attend(he, r.AttEdge))
	leaky := Maximum(logit, MulScalar(logit, slope))
	alpha := SegmentSoftmax(leaky, e.Dst, nd) // [E, heads]
	msg := Mul(IndexSelect(hsv, 0, e.Src), Reshape(alpha, n, heads, 1))
	agg := SegmentSum(msg, e.Dst, nd) // [NumDst, heads, C]
	return Add(Mean(agg, []int{1}, false), r.Bias)
}

// attend returns Σ_c x[n, h, c]·att[h, c]: [N, H].
func attend(x, att *Var) *Var {
	return Sum(Mul(x, att), []int{2}, false)
}

// GatherMean returns the mean of x's rows [Ns, F] over each destination
// node's incoming edges, [NumDst, F] (zeros for a node without any): the
// aggregation of a GraphSAGE layer. When no input records a gradient and
// the device has kernels.GraphAggregator, it is one launch; otherwise
// IndexSelect then SegmentMean, with their gradients.
func GatherMean(x *Var, e GraphEdges) *Var {
	if x.Value.Rank() != 2 {
		panic(fmt.Sprintf("autograd: gather_mean: x has shape %v, want [N, F]", x.Shape()))
	}
	f := x.Shape()[1]
	if e.Len() == 0 {
		return Const(full(x.Value, x.Value.DType(), 0, e.NumDst, f))
	}
	if g, ok := fusedGraph([]GraphEdges{e}, []*Var{x}, nil); ok {
		out := alloc(x.Value, x.Value.DType(), e.NumDst, f)
		g.GatherMean(out, x.Value, e.Src, e.RowPtr, e.Order)
		return Const(out)
	}
	if gg, g, ok := trainedGatherMean(x, e); ok {
		out := alloc(x.Value, x.Value.DType(), e.NumDst, f)
		g.GatherMean(out, x.Value, e.Src, e.RowPtr, e.Order)
		return resultWith("gather_mean", out, []*Var{x}, 3, true, func(bufs *opBufs) backwardFunc { // src, rowPtr, order
			return func(gOut *tensor.Tensor) []*tensor.Tensor {
				if s := bufs.sink[0]; s != nil && s.DType() == gOut.DType() {
					// Into the sum of x's gradients Backward holds.
					gg.GatherMeanGradAdd(s, contig(gOut), e.Src, e.RowPtr, e.Order)
					return nil
				}
				dx := alloc(gOut, gOut.DType(), x.Shape()...)
				gg.GatherMeanGrad(dx, contig(gOut), e.Src, e.RowPtr, e.Order)
				bufs.fresh[0] = true
				return append(bufs.grads[:0], dx)
			}
		})
	}
	return SegmentMean(IndexSelect(x, 0, e.Src), e.Dst, e.NumDst)
}

// trainedGatherMean reports whether a GatherMean recording gradients
// runs as the fused gather with kernels.GatherMeanGradder's backward
// (one launch each way instead of IndexSelect and SegmentMean, and their
// backward): grad mode on and x recording a gradient, the backend has
// both, the CSR is given, and x is F32 (or F64 on the CPU and sim) and
// contiguous.
func trainedGatherMean(x *Var, e GraphEdges) (kernels.GatherMeanGradder, kernels.GraphAggregator, bool) {
	if unfusedGraphGrad || !needsGrad(x) || !e.csr("gather_mean") || !x.Value.IsContiguous() {
		return nil, nil, false
	}
	dt, dev := x.Value.DType(), x.Value.Device()
	if dt != tensor.F32 && (dt != tensor.F64 || (dev.Kind != tensor.KindCPU && dev.Kind != tensor.KindSim)) {
		return nil, nil, false
	}
	b := backendOf(x.Value)
	gg, ok1 := b.(kernels.GatherMeanGradder)
	g, ok2 := b.(kernels.GraphAggregator)
	return gg, g, ok1 && ok2
}
