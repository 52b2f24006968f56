package autograd

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// gatCase is a random relation: ns sources, nd destinations (node 1
// without incoming edges), e edges.
func gatCase(t *testing.T, rng interface{ IntN(int) int }, ns, nd, e int) GraphEdges {
	src, dst := make([]int64, e), make([]int64, e)
	for k := range src {
		src[k] = int64(rng.IntN(ns))
		d := rng.IntN(nd)
		if d == 1 {
			d = 0
		}
		dst[k] = int64(d)
	}
	rowPtr, order, err := kernels.BuildCSR(dst, nd)
	require.NoError(t, err)
	return GraphEdges{Src: tensor.FromSlice(src, e), Dst: tensor.FromSlice(dst, e),
		RowPtr: tensor.FromSlice(rowPtr, nd+1), Order: tensor.FromSlice(order, e), NumDst: nd}
}

// TestGATAggregateFusedMatchesUnfused: in inference mode GATAggregate and
// GatherMean are one launch each on the CPU (kernels.GraphAggregator)
// and agree with the unfused ops (the path that records gradients) to
// float32 rounding; a relation without edges gives the bias (zeros for
// the mean) in no launch beyond the fill.
func TestGATAggregateFusedMatchesUnfused(t *testing.T) {
	rng := tensor.NewRNG(5)
	const ns, nd, e, heads, c, f = 6, 5, 17, 4, 8, 3
	edges := gatCase(t, rng, ns, nd, e)
	p := func(shape ...int) *Var { return Param(tensor.Normal(rng, tensor.F32, 0, 1, shape...)) }
	hs, hd, attr, we := p(ns, heads*c), p(nd, heads*c), p(e, f), p(heads*c, f)
	as, ad, ae, bias := p(1, heads, c), p(1, heads, c), p(1, heads, c), p(c)
	x := p(ns, c)

	t.Cleanup(func() { unfusedGraphGrad = false })
	unfusedGraphGrad = true
	unfused := GATAggregate(hs, hd, attr, we, as, ad, ae, bias, edges, heads, 0.2)
	unfusedMean := GatherMean(x, edges)
	unfusedGraphGrad = false
	require.True(t, unfused.RequiresGrad(), "with gradients: the unfused ops")
	var fused, fusedMean *Var
	fn := func([]*tensor.Tensor) []*tensor.Tensor {
		InferenceMode(func() {
			fused = GATAggregate(hs, hd, attr, we, as, ad, ae, bias, edges, heads, 0.2)
			fusedMean = GatherMean(x, edges)
		})
		return []*tensor.Tensor{fused.Value, fusedMean.Value}
	}
	cap := Capture(fn, CaptureOptions{OnFallback: func(err error) { t.Fatal(err) }})
	for i := 0; i < 3; i++ {
		_, err := cap.Run(hs.Value) // an input to pick the device
		require.NoError(t, err)
	}
	require.Equal(t, 2, cap.Launches(), "one launch per op")
	fn(nil)
	for _, pair := range [][2]*Var{{fused, unfused}, {fusedMean, unfusedMean}} {
		got, want := pair[0].Value.Float64s(), pair[1].Value.Float64s()
		require.Len(t, got, len(want))
		for i := range got {
			require.InDelta(t, want[i], got[i], 1e-5*math.Max(1, math.Abs(want[i])), "element %d", i)
		}
	}
	// Node 1 has no incoming edge: the bias, and a zero mean.
	require.Equal(t, bias.Value.Float64s(), fused.Value.Float64s()[c:2*c])
	require.Equal(t, make([]float64, c), fusedMean.Value.Float64s()[c:2*c])

	empty := GraphEdges{NumDst: 3}
	InferenceMode(func() {
		require.Equal(t, []int{3, c}, GATAggregate(hs, hd, attr, we, as, ad, ae, bias, empty, heads, 0.2).Shape())
		require.Equal(t, make([]float64, 3*c), GatherMean(x, empty).Value.Float64s())
	})
}

// TestGATAggregateGradients: both paths that record gradients — the
// fused kernels (kernels.GATMeanGradder), and the unfused ops, taken
// when attr records a gradient too — agree with float64 finite
// differences for every input.
func TestGATAggregateGradients(t *testing.T) {
	rng := tensor.NewRNG(6)
	const ns, nd, e, heads, c, f = 4, 4, 9, 2, 3, 2
	edges := gatCase(t, rng, ns, nd, e)
	n := func(shape ...int) *tensor.Tensor { return tensor.Normal(rng, tensor.F64, 0, 1, shape...) }
	ins := []*tensor.Tensor{n(ns, heads*c), n(nd, heads*c), n(e, f), n(heads*c, f), n(1, heads, c), n(1, heads, c), n(1, heads, c), n(c)}
	w := Const(n(nd, c)) // a weighted sum, so that every output element counts
	// Fused: the edge attributes a constant (the graph's features).
	attr := Const(ins[2])
	fusedIns := []*tensor.Tensor{ins[0], ins[1], ins[3], ins[4], ins[5], ins[6], ins[7]}
	recorded := 0
	require.NoError(t, GradCheck(func(in []*Var) *Var {
		out := GATAggregate(in[0], in[1], attr, in[2], in[3], in[4], in[5], in[6], edges, heads, 0.2)
		if out.node != nil { // recording (not a numeric evaluation)
			require.Equal(t, "gat_mean", out.node.op, "the fused path")
			recorded++
		}
		return SumAll(Mul(out, w))
	}, fusedIns, GradCheckOptions{}), "fused")
	require.Positive(t, recorded, "the fused path recorded its node")
	// Unfused: taken when attr records a gradient.
	require.NoError(t, GradCheck(func(in []*Var) *Var {
		return SumAll(Mul(GATAggregate(in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], edges, heads, 0.2), w))
	}, ins, GradCheckOptions{}), "unfused")
	// GatherMean: fused (kernels.GatherMeanGradder) and unfused.
	t.Cleanup(func() { unfusedGraphGrad = false })
	for _, unfused := range []bool{false, true} {
		unfusedGraphGrad = unfused
		recorded = 0
		require.NoError(t, GradCheck(func(in []*Var) *Var {
			out := GatherMean(in[0], edges)
			if out.node != nil {
				require.Equal(t, map[bool]string{false: "gather_mean", true: "segment_mean"}[unfused], out.node.op)
				recorded++
			}
			return SumAll(Mul(out, w))
		}, []*tensor.Tensor{n(ns, c)}, GradCheckOptions{}), "unfused %v", unfused)
		require.Positive(t, recorded, "unfused %v: the path's node recorded", unfused)
	}
}

// TestGATMeanStridedFusedMatchesUnfused: the mean over two relations into
// one node type (one without edges), their projections column blocks of
// stacked products (LinearStack's views), is one launch fused
// (kernels.GraphMultiAggregator) and agrees with the unfused ops.
func TestGATMeanStridedFusedMatchesUnfused(t *testing.T) {
	rng := tensor.NewRNG(8)
	const ns, nd, e, heads, c, f, in = 6, 5, 17, 2, 4, 3, 7
	edges := gatCase(t, rng, ns, nd, e)
	p := func(shape ...int) *Var { return Param(tensor.Normal(rng, tensor.F32, 0, 1, shape...)) }
	xs, xd := p(ns, in), p(nd, in)
	wS, wD, wX := p(heads*c, in), p(heads*c, in), p(heads*c, in)
	rel := func(hs, hd *Var) []GATRelation {
		return []GATRelation{
			{Hs: hs, Hd: hd, Attr: p(e, f), We: p(heads*c, f), AttSrc: p(1, heads, c), AttDst: p(1, heads, c), AttEdge: p(1, heads, c), Bias: p(c), Edges: edges},
			{Bias: p(c), Edges: GraphEdges{NumDst: nd, Src: tensor.FromSlice([]int64{}, 0), RowPtr: tensor.Zeros(tensor.I64, nd+1), Order: tensor.FromSlice([]int64{}, 0)}},
		}
	}
	// The same parameters for both paths: draw once, then reuse.
	rels := rel(nil, nil)
	t.Cleanup(func() { unfusedGraphGrad = false })
	unfusedGraphGrad = true
	unfused := GATMean([]GATRelation{withProj(rels[0], Linear(xs, wS, nil), Linear(xd, wD, nil)), rels[1]}, heads, 0.2)
	unfusedGraphGrad = false
	require.True(t, unfused.RequiresGrad())
	var fused *Var
	fn := func([]*tensor.Tensor) []*tensor.Tensor {
		InferenceMode(func() {
			// Column blocks of stacked products: [ns, 2·HC] and [nd, 2·HC].
			s := Linear(xs, Concat([]*Var{wX, wS}, 0), nil)
			d := Linear(xd, Concat([]*Var{wD, wX}, 0), nil)
			hs, hd := Narrow(s, 1, heads*c, heads*c), Narrow(d, 1, 0, heads*c)
			require.False(t, hs.Value.IsContiguous())
			fused = GATMean([]GATRelation{withProj(rels[0], hs, hd), rels[1]}, heads, 0.2)
		})
		return []*tensor.Tensor{fused.Value}
	}
	cap := Capture(fn, CaptureOptions{OnFallback: func(err error) { t.Fatal(err) }})
	for i := 0; i < 3; i++ {
		_, err := cap.Run(xs.Value)
		require.NoError(t, err)
	}
	require.Equal(t, 5, cap.Launches(), "two concats, two products, one GATMean for both relations")
	fn(nil)
	closeVars(t, "GATMean", fused, unfused)
}

// withProj returns r with the projections hs and hd.
func withProj(r GATRelation, hs, hd *Var) GATRelation {
	r.Hs, r.Hd = hs, hd
	return r
}

// TestGATMeanTrainedMatchesUnfused: recording gradients, a GATMean of
// three relations (one without edges; the projections column blocks of
// stacked products) runs fused, forward and backward (one gat_mean node),
// and its output and every input's gradient agree with the unfused ops'
// to float32 rounding.
func TestGATMeanTrainedMatchesUnfused(t *testing.T) {
	rng := tensor.NewRNG(9)
	const ns, nd, e, heads, c, f, in = 6, 5, 17, 2, 4, 3, 7
	p := func(shape ...int) *Var { return Param(tensor.Normal(rng, tensor.F32, 0, 1, shape...)) }
	xs, xd := p(ns, in), p(nd, in)
	wS, wD, wX := p(heads*c, in), p(heads*c, in), p(heads*c, in)
	e1, e2 := gatCase(t, rng, ns, nd, e), gatCase(t, rng, ns, nd, 11)
	rels := []GATRelation{
		{Attr: Const(tensor.Normal(rng, tensor.F32, 0, 1, e, f)), We: p(heads*c, f), AttSrc: p(1, heads, c), AttDst: p(1, heads, c), AttEdge: p(1, heads, c), Bias: p(c), Edges: e1},
		{Bias: p(c), Edges: GraphEdges{NumDst: nd, Src: tensor.FromSlice([]int64{}, 0), RowPtr: tensor.Zeros(tensor.I64, nd+1), Order: tensor.FromSlice([]int64{}, 0)}},
		{Attr: Const(tensor.Normal(rng, tensor.F32, 0, 1, 11, f)), We: p(heads*c, f), AttSrc: p(1, heads, c), AttDst: p(1, heads, c), AttEdge: p(1, heads, c), Bias: p(c), Edges: e2},
	}
	w := Const(tensor.Normal(rng, tensor.F32, 0, 1, nd, c))
	params := []*Var{xs, xd, wS, wD, wX}
	for _, r := range rels {
		for _, v := range []*Var{r.We, r.AttSrc, r.AttDst, r.AttEdge, r.Bias} {
			if v != nil {
				params = append(params, v)
			}
		}
	}
	run := func(unfused bool) (*Var, [][]float64) {
		for _, v := range params {
			v.Grad = nil
		}
		unfusedGraphGrad = unfused
		defer func() { unfusedGraphGrad = false }()
		s := Linear(xs, Concat([]*Var{wX, wS}, 0), nil)
		d := Linear(xd, Concat([]*Var{wD, wX}, 0), nil)
		hs, hd := Narrow(s, 1, heads*c, heads*c), Narrow(d, 1, 0, heads*c)
		rs := append([]GATRelation(nil), rels...)
		rs[0], rs[2] = withProj(rs[0], hs, hd), withProj(rs[2], hs, hd)
		out := GATMean(rs, heads, 0.2)
		Backward(SumAll(Mul(out, w)))
		var grads [][]float64
		for _, v := range params {
			require.NotNil(t, v.Grad)
			grads = append(grads, v.Grad.Float64s())
		}
		return out, grads
	}
	fused, gf := run(false)
	require.Equal(t, "gat_mean", fused.node.op, "the fused path records one gat_mean node")
	unfused, gu := run(true)
	closeVars(t, "GATMean", fused, unfused)
	for i := range gf {
		for k := range gf[i] {
			require.InDelta(t, gu[i][k], gf[i][k], 2e-4*math.Max(1, math.Abs(gu[i][k])), "parameter %d element %d", i, k)
		}
	}
}

// TestUnsortedEdgesWithoutOrderPanic: edges given with no Order must be
// sorted by destination; where Dst is on the CPU, edges that are not
// panic with a message saying so, rather than giving a wrong mean.
func TestUnsortedEdgesWithoutOrderPanic(t *testing.T) {
	x := Const(tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 3, 2))
	src, dst := []int64{0, 1, 2}, []int64{1, 0, 1}
	rowPtr, order, err := kernels.BuildCSR(dst, 2)
	require.NoError(t, err)
	e := GraphEdges{Src: tensor.FromSlice(src, 3), Dst: tensor.FromSlice(dst, 3), RowPtr: tensor.FromSlice(rowPtr, 3), NumDst: 2}
	var got *Var
	require.PanicsWithValue(t, "autograd: graph aggregation: edges with no Order must be sorted by destination; Dst[1] = 0 follows 1",
		func() { InferenceMode(func() { got = GatherMean(x, e) }) })
	// With the order, the same edges are fine.
	e.Order = tensor.FromSlice(order, 3)
	InferenceMode(func() { got = GatherMean(x, e) })
	require.Equal(t, []float32{3, 4, 3, 4}, tensor.Data[float32](got.Value))
}
