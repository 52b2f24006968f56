package autograd

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// onSim copies v's value to the sim device as a Param.
func onSim(t *testing.T, v *Var) *Var {
	t.Helper()
	d, err := v.Value.ToDevice(tensor.Sim(0))
	require.NoError(t, err)
	return Param(d)
}

// edgesOnSim copies e's tensors to the sim device.
func edgesOnSim(t *testing.T, e GraphEdges) GraphEdges {
	t.Helper()
	out := GraphEdges{NumDst: e.NumDst}
	for _, p := range []struct{ dst, src **tensor.Tensor }{{&out.Src, &e.Src}, {&out.Dst, &e.Dst}, {&out.RowPtr, &e.RowPtr}, {&out.Order, &e.Order}} {
		d, err := (*p.src).ToDevice(tensor.Sim(0))
		require.NoError(t, err)
		*p.dst = d
	}
	return out
}

// captureLaunches captures fn on sim (after a warm-up call) and returns
// the graph's launch count.
func captureLaunches(t *testing.T, fn func([]*tensor.Tensor) []*tensor.Tensor, in *tensor.Tensor) int {
	t.Helper()
	cap := Capture(fn, CaptureOptions{OnFallback: func(err error) { t.Fatal(err) }})
	for i := 0; i < 3; i++ {
		_, err := cap.Run(in)
		require.NoError(t, err)
	}
	return cap.Launches()
}

// TestGATMeanOneLaunchOnSim: on a kernels.GraphMultiAggregator device the
// mean over three relations (one without edges) is one launch, bit for
// bit the CPU's per-relation launches.
func TestGATMeanOneLaunchOnSim(t *testing.T) {
	rng := tensor.NewRNG(12)
	const nd, heads, c, f = 5, 2, 4, 3
	p := func(shape ...int) *Var { return Param(tensor.Normal(rng, tensor.F32, 0, 1, shape...)) }
	rel := func(ns, e int) GATRelation {
		edges := gatCase(t, rng, ns, nd, e)
		return GATRelation{Hs: p(ns, heads*c), Hd: p(nd, heads*c), Attr: p(e, f), We: p(heads*c, f),
			AttSrc: p(1, heads, c), AttDst: p(1, heads, c), AttEdge: p(1, heads, c), Bias: p(c), Edges: edges}
	}
	rels := []GATRelation{rel(6, 17), rel(3, 0), rel(4, 9)}
	var want *Var
	InferenceMode(func() { want = GATMean(rels, heads, 0.2) })

	sim := make([]GATRelation, len(rels))
	for i, r := range rels {
		sim[i] = GATRelation{Hs: onSim(t, r.Hs), Hd: onSim(t, r.Hd), Attr: onSim(t, r.Attr), We: onSim(t, r.We),
			AttSrc: onSim(t, r.AttSrc), AttDst: onSim(t, r.AttDst), AttEdge: onSim(t, r.AttEdge), Bias: onSim(t, r.Bias),
			Edges: edgesOnSim(t, r.Edges)}
	}
	var got *Var
	fn := func([]*tensor.Tensor) []*tensor.Tensor {
		InferenceMode(func() { got = GATMean(sim, heads, 0.2) })
		return []*tensor.Tensor{got.Value}
	}
	require.Equal(t, 1, captureLaunches(t, fn, sim[0].Hs.Value), "one GATMean")
	fn(nil)
	sameVars(t, "GATMean", got, want)
}

// TestLinearSumGathered: terms with Edges are GatherMean's inputs. Joined
// (sim with stackAnywhere) the means, the other inputs and the ones are
// one GatherConcat, so the sum is three launches (that, the weights'
// concatenation and the product), bit for bit the joined sum of the
// gathered inputs; not joined, bit for bit the CPU's sum of them; with
// gradients, GatherMean's own.
func TestLinearSumGathered(t *testing.T) {
	rng := tensor.NewRNG(13)
	const nd, in, out = 5, 6, 4
	p := func(shape ...int) *Var { return Param(tensor.Normal(rng, tensor.F32, 0, 1, shape...)) }
	e1, e2 := gatCase(t, rng, 7, nd, 15), gatCase(t, rng, 3, nd, 0)
	x1, x2, xd := p(7, in), p(3, in), p(nd, in)
	w1, w2, wr, b1, b2 := p(out, in), p(out, in), p(out, in), p(out), p(out)
	terms := func(x1, x2, xd, w1, w2, wr, b1, b2 *Var, e1, e2 GraphEdges) []LinearTerm {
		return []LinearTerm{{X: x1, Edges: &e1, W: w1, B: b1}, {X: xd, W: wr}, {X: x2, Edges: &e2, W: w2, B: b2}}
	}
	explicit := func(ts []LinearTerm) []LinearTerm {
		out := append([]LinearTerm(nil), ts...)
		for i, t := range out {
			if t.Edges != nil {
				out[i] = LinearTerm{X: GatherMean(t.X, *t.Edges), W: t.W, B: t.B}
			}
		}
		return out
	}

	// With gradients on the CPU: GatherMean's inputs, and gradients reach x1.
	withGrad := LinearSum(terms(x1, x2, xd, w1, w2, wr, b1, b2, e1, e2))
	sameVars(t, "with gradients", withGrad, LinearSum(explicit(terms(x1, x2, xd, w1, w2, wr, b1, b2, e1, e2))))
	Backward(SumAll(withGrad))
	require.NotNil(t, x1.Grad, "the gathered input's gradient")

	var cpu *Var
	InferenceMode(func() { cpu = LinearSum(explicit(terms(x1, x2, xd, w1, w2, wr, b1, b2, e1, e2))) })
	s := func(v *Var) *Var { return onSim(t, v) }
	se1, se2 := edgesOnSim(t, e1), edgesOnSim(t, e2)
	dts := terms(s(x1), s(x2), s(xd), s(w1), s(w2), s(wr), s(b1), s(b2), se1, se2)
	t.Cleanup(func() { stackAnywhere = false })
	for _, stack := range []bool{true, false} {
		stackAnywhere = stack
		var got, ref *Var
		fn := func([]*tensor.Tensor) []*tensor.Tensor {
			InferenceMode(func() { got = LinearSum(dts) })
			return []*tensor.Tensor{got.Value}
		}
		n := captureLaunches(t, fn, dts[0].X.Value)
		fn(nil)
		InferenceMode(func() { ref = LinearSum(explicit(dts)) })
		sameVars(t, "gathered against explicit means", got, ref)
		if stack {
			require.Equal(t, 3, n, "GatherConcat, the weights' Concat and the product")
		} else {
			sameVars(t, "not joined: the CPU's", got, cpu)
		}
	}
}

// gatCounter counts a sim backend's graph and ScaleActAdd calls, passing
// them on.
type gatCounter struct {
	kernels.Backend
	mean, meanAct, scaleAct, gatherConcat int
}

func (b *gatCounter) GATAggregate(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order *tensor.Tensor, heads int, slope, alpha float64, accumulate bool) {
	b.Backend.(kernels.GraphAggregator).GATAggregate(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope, alpha, accumulate)
}

func (b *gatCounter) GatherMean(out, x, src, rowPtr, order *tensor.Tensor) {
	b.Backend.(kernels.GraphAggregator).GatherMean(out, x, src, rowPtr, order)
}

func (b *gatCounter) GATMean(out *tensor.Tensor, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*tensor.Tensor, heads int, slope float64) {
	b.mean++
	b.Backend.(kernels.GraphMultiAggregator).GATMean(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope)
}

func (b *gatCounter) GATMeanAct(out *tensor.Tensor, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*tensor.Tensor, heads int, slope float64, act kernels.UnaryOp, res *tensor.Tensor) {
	b.meanAct++
	b.Backend.(kernels.GraphMultiAggregator).GATMeanAct(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope, act, res)
}

func (b *gatCounter) GatherConcat(out *tensor.Tensor, xs, src, rowPtr, order []*tensor.Tensor, ones int) {
	b.gatherConcat++
	b.Backend.(kernels.GraphMultiAggregator).GatherConcat(out, xs, src, rowPtr, order, ones)
}

func (b *gatCounter) ScaleActAdd(dst, x *tensor.Tensor, s float64, act kernels.UnaryOp, r *tensor.Tensor) {
	b.scaleAct++
	b.Backend.(kernels.ScaleActAdder).ScaleActAdd(dst, x, s, act, r)
}

// TestGATMeanActOneCall: GATMeanAct is ScaleActAdd(GATMean(...), 1, act,
// res) bit for bit, with and without the residual, in inference one
// GATMeanAct call on a kernels.GraphMultiAggregator device; with
// gradients the unfused ops, equal to rounding, and the gradients reach
// the residual.
func TestGATMeanActOneCall(t *testing.T) {
	rng := tensor.NewRNG(14)
	const nd, heads, c, f = 5, 2, 4, 3
	p := func(shape ...int) *Var { return Param(tensor.Normal(rng, tensor.F32, 0, 1, shape...)) }
	rel := func(ns, e int) GATRelation {
		return GATRelation{Hs: p(ns, heads*c), Hd: p(nd, heads*c), Attr: p(e, f), We: p(heads*c, f),
			AttSrc: p(1, heads, c), AttDst: p(1, heads, c), AttEdge: p(1, heads, c), Bias: p(c), Edges: gatCase(t, rng, ns, nd, e)}
	}
	rels := []GATRelation{rel(6, 17), rel(4, 9)}
	res := p(nd, c)
	dev := tensor.Sim(7)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	cnt := &gatCounter{Backend: orig}
	kernels.Register(cnt)
	sim := make([]GATRelation, len(rels))
	for i, r := range rels {
		on := func(v *Var) *Var {
			d, err := v.Value.ToDevice(dev)
			require.NoError(t, err)
			return Param(d)
		}
		e := GraphEdges{NumDst: nd}
		for _, q := range []struct{ dst, src **tensor.Tensor }{{&e.Src, &r.Edges.Src}, {&e.Dst, &r.Edges.Dst}, {&e.RowPtr, &r.Edges.RowPtr}, {&e.Order, &r.Edges.Order}} {
			d, err := (*q.src).ToDevice(dev)
			require.NoError(t, err)
			*q.dst = d
		}
		sim[i] = GATRelation{Hs: on(r.Hs), Hd: on(r.Hd), Attr: on(r.Attr), We: on(r.We), AttSrc: on(r.AttSrc), AttDst: on(r.AttDst),
			AttEdge: on(r.AttEdge), Bias: on(r.Bias), Edges: e}
	}
	dres, err := res.Value.ToDevice(dev)
	require.NoError(t, err)
	for _, withRes := range []bool{false, true} {
		var r, dr *Var
		if withRes {
			r, dr = res, Param(dres)
		}
		var want, got *Var
		InferenceMode(func() { want = ScaleActAdd(GATMean(rels, heads, 0.2), 1, kernels.GeluErf, r) })
		*cnt = gatCounter{Backend: orig}
		InferenceMode(func() { got = GATMeanAct(sim, heads, 0.2, kernels.GeluErf, dr) })
		sameVars(t, "GATMeanAct", got, want)
		require.Equal(t, 1, cnt.meanAct, "residual %v: one call", withRes)
		require.Zero(t, cnt.mean+cnt.scaleAct, "residual %v", withRes)

		// With gradients: the unfused ops (GATAggregate's gather,
		// segment-softmax and reductions), the same values to rounding.
		*cnt = gatCounter{Backend: orig}
		got = GATMeanAct(sim, heads, 0.2, kernels.GeluErf, dr)
		closeVars(t, "GATMeanAct with gradients", got, want)
		require.Zero(t, cnt.meanAct)
		Backward(SumAll(got))
		if withRes {
			require.NotNil(t, dr.Grad, "the residual's gradient")
		}
	}
}

// TestGatherConcat: the policy's joins — features beside an embedding
// row per node (a CSR of one edge per node), and beside a mean over a
// segment — are one GatherConcat call in inference on a
// kernels.GraphMultiAggregator device, with the unfused ops' values
// (Embedding exactly, the mean as GatherMean computes it); with
// gradients the pieces' Unfused ops run and the gradients reach the
// gathered table.
func TestGatherConcat(t *testing.T) {
	rng := tensor.NewRNG(15)
	const n, rows, w, ew = 6, 4, 3, 2
	x := Param(tensor.Normal(rng, tensor.F32, 0, 1, n, w))
	table := Param(tensor.Normal(rng, tensor.F32, 0, 1, rows, ew))
	pick := []int64{3, 0, 0, 2, 1, 3}
	iota := []int64{0, 1, 2, 3, 4, 5}
	unit := []int64{0, 1, 2, 3, 4, 5, 6}
	seg := []int64{0, 0, 1, 1, 1, 2} // three segments over the six rows
	segRows := []int64{0, 2, 5, 6}
	dev := tensor.Sim(8)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	cnt := &gatCounter{Backend: orig}
	kernels.Register(cnt)
	on := func(v []int64) *tensor.Tensor {
		d, err := tensor.FromSlice(append([]int64(nil), v...), len(v)).ToDevice(dev)
		require.NoError(t, err)
		return d
	}
	onVar := func(v *Var) *Var {
		d, err := v.Value.ToDevice(dev)
		require.NoError(t, err)
		return Param(d)
	}
	dx, dtable := onVar(x), onVar(table)
	pickT, segT := on(pick), on(seg)
	pickE := &GraphEdges{Src: pickT, Dst: on(iota), RowPtr: on(unit), Order: on(iota), NumDst: n}
	segE := &GraphEdges{Src: on(iota), Dst: segT, RowPtr: on(segRows), Order: on(iota), NumDst: 3}
	embed := func(x, table *Var) *Var {
		return GatherConcat([]GatherPiece{{X: x}, {X: table, Edges: pickE, Unfused: func() *Var { return Embedding(table, pickT) }}})
	}
	mean := func(x *Var) *Var {
		return GatherConcat([]GatherPiece{{X: x, Edges: segE, Unfused: func() *Var { return SegmentMean(x, segT, 3) }}, {X: x, Edges: segE}})
	}
	var gotE, gotM *Var
	*cnt = gatCounter{Backend: orig}
	InferenceMode(func() { gotE, gotM = embed(dx, dtable), mean(dx) })
	require.Equal(t, 2, cnt.gatherConcat, "one call per join")
	var wantE, wantM *Var
	InferenceMode(func() {
		wantE = Concat([]*Var{dx, Embedding(dtable, pickT)}, 1)
		m := GatherMean(dx, *segE)
		wantM = Concat([]*Var{m, m}, 1)
	})
	sameVars(t, "features and embedding", gotE, wantE)
	sameVars(t, "segment means", gotM, wantM)
	var segMean *Var
	InferenceMode(func() { segMean = SegmentMean(dx, segT, 3) })
	closeVars(t, "GatherMean against SegmentMean", Narrow(gotM, 1, 0, w), segMean)

	// With gradients: the Unfused ops (no GatherConcat call), the same
	// values, and the table's rows picked get gradients.
	*cnt = gatCounter{Backend: orig}
	e := embed(dx, dtable)
	require.Zero(t, cnt.gatherConcat)
	sameVars(t, "with gradients", e, wantE)
	Backward(SumAll(e))
	g, err := dtable.Grad.ToDevice(tensor.CPU)
	require.NoError(t, err)
	require.Equal(t, []float32{2, 2, 1, 1, 1, 1, 2, 2}, g.F32(), "rows 0 and 3 picked twice, 1 and 2 once")
}

// TestGATMeanActsJoinsTypes: a heterogeneous GAT layer's node types (one
// of two relations with a residual, one of a relation without edges and
// one with, without a residual) through GATMeanActs: in inference on sim
// one join (GATMeansAct), bit for bit GATMeanAct per type; with
// gradients recorded GATMeanAct per type, no join, and the gradients
// reach the inputs; a single type is GATMeanAct itself.
func TestGATMeanActsJoinsTypes(t *testing.T) {
	rng := tensor.NewRNG(23)
	const heads, c, f = 2, 4, 3
	p := func(shape ...int) *Var { return onSim(t, Param(tensor.Normal(rng, tensor.F32, 0, 1, shape...))) }
	rel := func(ns, nd, e int) GATRelation {
		return GATRelation{Hs: p(ns, heads*c), Hd: p(nd, heads*c), Attr: p(e, f), We: p(heads*c, f),
			AttSrc: p(1, heads, c), AttDst: p(1, heads, c), AttEdge: p(1, heads, c), Bias: p(c), Edges: edgesOnSim(t, gatCase(t, rng, ns, nd, e))}
	}
	types := [][]GATRelation{{rel(6, 5, 17), rel(4, 5, 9)}, {rel(3, 3, 0), rel(5, 3, 8)}}
	res := []*Var{p(5, c), nil}
	joins := kernels.For(tensor.Sim(0)).(interface{ Joins() int64 })
	perType := func() []*Var {
		out := make([]*Var, len(types))
		for k, rs := range types {
			out[k] = GATMeanAct(rs, heads, 0.2, kernels.GeluErf, res[k])
		}
		return out
	}
	var got, want []*Var
	before := joins.Joins()
	InferenceMode(func() { want = perType() })
	require.Equal(t, before, joins.Joins(), "GATMeanAct joins nothing")
	InferenceMode(func() { got = GATMeanActs(types, heads, 0.2, kernels.GeluErf, res) })
	require.Equal(t, before+1, joins.Joins(), "the types in one join")
	for k := range got {
		sameVars(t, "GATMeanActs", got[k], want[k])
	}

	before = joins.Joins()
	got = GATMeanActs(types, heads, 0.2, kernels.GeluErf, res)
	require.Equal(t, before, joins.Joins(), "with gradients: no join")
	for k := range got {
		closeVars(t, "GATMeanActs with gradients", got[k], want[k])
	}
	Backward(Add(SumAll(got[0]), SumAll(got[1])))
	require.NotNil(t, res[0].Grad, "the residual's gradient")
	require.NotNil(t, types[1][1].Hs.Grad, "a projection's gradient")

	InferenceMode(func() { got = GATMeanActs(types[:1], heads, 0.2, kernels.GeluErf, res[:1]) })
	require.Equal(t, before, joins.Joins(), "one type: nothing to join")
	sameVars(t, "GATMeanActs of one type", got[0], want[0])
	require.Panics(t, func() { GATMeanActs(types, heads, 0.2, kernels.GeluErf, res[:1]) })
}
