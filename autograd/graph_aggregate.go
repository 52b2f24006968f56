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
// kernels.BuildCSR). A relation without edges may leave all four nil
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

// fusedGraph reports whether a GraphAggregator launch may replace the
// unfused ops: nothing records a gradient, the backend has the fused
// kernels, every float operand is contiguous F32 and the CSR is given.
func fusedGraph(e GraphEdges, vs ...*Var) (kernels.GraphAggregator, bool) {
	if e.RowPtr == nil || e.Order == nil {
		return nil, false
	}
	for _, v := range vs {
		if v.Value.DType() != tensor.F32 || !v.Value.IsContiguous() {
			return nil, false
		}
		if GradEnabled() && v.RequiresGrad() {
			return nil, false
		}
	}
	g, ok := backendOf(vs[0].Value).(kernels.GraphAggregator)
	return g, ok
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
	if heads < 1 || bias.Value.Rank() != 1 {
		panic(fmt.Sprintf("autograd: gat_aggregate: heads %d and bias %v, want heads ≥ 1 and a [C] bias", heads, bias.Shape()))
	}
	c := bias.Shape()[0]
	nd := e.NumDst
	n := e.Len()
	if n == 0 {
		return Expand(Reshape(bias, 1, c), nd, c)
	}
	if g, ok := fusedGraph(e, hs, hd, attr, we, attSrc, attDst, attEdge, bias); ok {
		out := alloc(hs.Value, hs.Value.DType(), nd, c)
		g.GATAggregate(out, hs.Value, hd.Value, attr.Value, we.Value, attSrc.Value, attDst.Value, attEdge.Value,
			bias.Value, e.Src, e.RowPtr, e.Order, heads, slope)
		return Const(out)
	}
	ns := hs.Shape()[0]
	hsv := Reshape(hs, ns, heads, c)
	hdv := Reshape(hd, nd, heads, c)
	he := Reshape(MatMulT(attr, we, false, true), n, heads, c)
	logit := Add(Add(
		IndexSelect(attend(hsv, attSrc), 0, e.Src),
		IndexSelect(attend(hdv, attDst), 0, e.Dst)),
		attend(he, attEdge))
	leaky := Maximum(logit, MulScalar(logit, slope))
	alpha := SegmentSoftmax(leaky, e.Dst, nd) // [E, heads]
	msg := Mul(IndexSelect(hsv, 0, e.Src), Reshape(alpha, n, heads, 1))
	agg := SegmentSum(msg, e.Dst, nd) // [NumDst, heads, C]
	return Add(Mean(agg, []int{1}, false), bias)
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
	if g, ok := fusedGraph(e, x); ok {
		out := alloc(x.Value, x.Value.DType(), e.NumDst, f)
		g.GatherMean(out, x.Value, e.Src, e.RowPtr, e.Order)
		return Const(out)
	}
	return SegmentMean(IndexSelect(x, 0, e.Src), e.Dst, e.NumDst)
}
