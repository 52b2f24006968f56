package autograd

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/sim"
	"github.com/esper-go/esper/tensor"
)

// sumCounter counts, over sim, the launches by which Backward sums
// gradients: Binary adds, ForeachAxpy calls and the tensors they add,
// and the backward calls that add an input's gradient into a sum
// (LinearBackwardAccumulate, GatherMeanGradAdd, MatMulAdd). Embedding
// the concrete backend keeps every optional interface of sim.
type sumCounter struct {
	*sim.Backend
	binary, foreach, foreachTensors, linearAcc, gatherAdd, matmulAdd int
}

func (b *sumCounter) Binary(op kernels.BinaryOp, dst, x, y *tensor.Tensor) {
	b.binary++
	b.Backend.Binary(op, dst, x, y)
}

func (b *sumCounter) ForeachAxpy(ys, xs []*tensor.Tensor, alpha float64) {
	b.foreach++
	b.foreachTensors += len(ys)
	b.Backend.ForeachAxpy(ys, xs, alpha)
}

func (b *sumCounter) LinearBackwardAccumulate(dx, dw, db, g, x, w *tensor.Tensor) {
	b.linearAcc++
	b.Backend.LinearBackwardAccumulate(dx, dw, db, g, x, w)
}

func (b *sumCounter) GatherMeanGradAdd(dx, g, src, rowPtr, order *tensor.Tensor) {
	b.gatherAdd++
	b.Backend.GatherMeanGradAdd(dx, g, src, rowPtr, order)
}

func (b *sumCounter) MatMulAdd(dst, x, y *tensor.Tensor, ta, tb bool) {
	b.matmulAdd++
	b.Backend.MatMulAdd(dst, x, y, ta, tb)
}

// sharedInputLoss is a graph whose input x = p + q (a sum, so that the
// Add hands the same gradient tensor to p and to q; q, read by a Mul of
// its own too, gets that Mul's gradient after it, and p, read by one
// recorded first, is visited last) is read
// by three Linears, two GatherMeans and a Mul, and whose weight w is
// read by two of the Linears; the loss weighs each output with r.
func sharedInputLoss(p, q, w, w2, b, r1, r2, r3 *Var, e1, e2 GraphEdges) *Var {
	k := Mul(q, r3) // q's other reader, whose gradient comes after the Add's
	x := Add(p, q)
	a := Linear(x, w, b)
	c := Linear(x, w, nil)
	d := Linear(GatherMean(x, e1), w2, nil)
	m := GatherMean(x, e2)
	// p's own reader first: Backward visits p last, after q's gradients.
	return Add(Add(SumAll(Mul(p, r3)), SumAll(Mul(k, k))), Add(Add(SumAll(Mul(Add(a, c), r1)), SumAll(Mul(d, r2))), Add(SumAll(Mul(m, r3)), SumAll(Mul(x, x)))))
}

// TestSharedInputGradsAgainstFiniteDifferences: Backward's sums of an
// input's gradients — added in place into its own buffers, and by the
// ops that read the input (LinearBackwardAccumulate, GatherMeanGradAdd)
// into the sum the other readers started — give the gradients central
// differences give, on the CPU in F64, for the inputs of
// sharedInputLoss: p and q get the Add's one gradient tensor, which no
// later addition may write into.
func TestSharedInputGradsAgainstFiniteDifferences(t *testing.T) {
	rng := tensor.NewRNG(41)
	const ns, nd, e, f, out = 5, 4, 11, 3, 2
	e1, e2 := gatCase(t, rng, ns, nd, e), gatCase(t, rng, ns, ns, e)
	n := func(shape ...int) *tensor.Tensor { return tensor.Normal(rng, tensor.F64, 0, 1, shape...) }
	r1, r2, r3 := Const(n(ns, out)), Const(n(nd, out)), Const(n(ns, f))
	require.NoError(t, GradCheck(func(in []*Var) *Var {
		return sharedInputLoss(in[0], in[1], in[2], in[3], in[4], r1, r2, r3, e1, e2)
	}, []*tensor.Tensor{n(ns, f), n(ns, f), n(out, f), n(out, f), n(out)}, GradCheckOptions{}))
}

// TestSharedInputGradsSummedByTheirReaders: on sim, the input read by
// five layers of sharedInputLoss gets its gradients summed by the
// layers' own backward calls — LinearBackwardAccumulate and
// GatherMeanGradAdd into the sum Backward holds — and the gradients of
// the parameters whose readers do not add them into their Grad (p and q,
// through the Add) go there with one ForeachAxpy per backward;
// every gradient, over two backwards onto Grads that start non-zero, is
// bit for bit the CPU's.
func TestSharedInputGradsSummedByTheirReaders(t *testing.T) {
	dev := tensor.Sim(6)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	rng := rand.New(rand.NewPCG(11, 12))
	const ns, nd, e, f, out = 5, 4, 11, 3, 2
	trng := tensor.NewRNG(12)
	e1, e2 := gatCase(t, trng, ns, nd, e), gatCase(t, trng, ns, ns, e)
	vals := func(n int) []float32 { return randVals(rng, n) }
	pv, qv, wv, w2v, bv := vals(ns*f), vals(ns*f), vals(out*f), vals(out*f), vals(out)
	r1v, r2v, r3v := vals(ns*out), vals(nd*out), vals(ns*f)
	g0 := [][]float32{vals(ns * f), vals(ns * f), vals(out * f), vals(out * f), vals(out)}
	run := func(d tensor.Device) [][]float32 {
		on := func(v []float32, shape ...int) *tensor.Tensor {
			h, err := tensor.FromSlice(append([]float32(nil), v...), shape...).ToDevice(d)
			require.NoError(t, err)
			return h
		}
		edges := func(g GraphEdges) GraphEdges {
			for _, p := range []**tensor.Tensor{&g.Src, &g.Dst, &g.RowPtr, &g.Order} {
				h, err := (*p).ToDevice(d)
				require.NoError(t, err)
				*p = h
			}
			return g
		}
		d1, d2 := edges(e1), edges(e2)
		p, q, w, w2, b := Param(on(pv, ns, f)), Param(on(qv, ns, f)), Param(on(wv, out, f)), Param(on(w2v, out, f)), Param(on(bv, out))
		params := []*Var{p, q, w, w2, b}
		for i, v := range params {
			v.Grad = on(g0[i], v.Shape()...)
		}
		r1, r2, r3 := Const(on(r1v, ns, out)), Const(on(r2v, nd, out)), Const(on(r3v, ns, f))
		for range 2 {
			Backward(sharedInputLoss(p, q, w, w2, b, r1, r2, r3, d1, d2))
		}
		var res [][]float32
		for _, v := range params {
			g, err := v.Grad.ToDevice(tensor.CPU)
			require.NoError(t, err)
			res = append(res, append([]float32(nil), g.F32()...))
		}
		return res
	}
	c := &sumCounter{Backend: orig.(*sim.Backend)}
	kernels.Register(c)
	got := run(dev)
	kernels.Register(orig)
	require.Equal(t, run(tensor.CPU), got, "bit for bit the CPU's")
	// Per backward, x's readers run last recorded first: the Mul x·x
	// hands x two gradients, which Backward sums into a tensor of its
	// own; both GatherMeans and both Linears over x then add into it.
	require.Equal(t, 2*2, c.linearAcc, "both Linears over x add into x's sum")
	require.Equal(t, 2*2, c.gatherAdd, "both GatherMeans of x add into x's sum")
	require.Equal(t, 2, c.foreach, "one ForeachAxpy per backward")
	require.Equal(t, 2*2, c.foreachTensors, "p's and q's gradients (the Linears add w's, w2's and b's into their Grads themselves)")
}

// TestLeafGradsInOneForeachAxpy: on sim, the leaves whose gradient
// Backward adds into an existing Grad go there in one ForeachAxpy at the
// end of the pass; a leaf with a post-accumulate hook is added on its
// own, its hook seeing its whole gradient and those of the leaves
// visited before it (the batch is flushed first, as the CPU adds each at
// once), and a leaf without a Grad gets a copy of its gradient. The
// Grads are bit for bit the CPU's.
func TestLeafGradsInOneForeachAxpy(t *testing.T) {
	dev := tensor.Sim(6)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	rng := rand.New(rand.NewPCG(13, 14))
	vals := func(n int) []float32 { return randVals(rng, n) }
	av, bv, cv, dv, rv := vals(6), vals(6), vals(6), vals(6), vals(6)
	g0 := [][]float32{vals(6), vals(6), vals(6)}
	run := func(d tensor.Device) ([][]float32, []float32) {
		on := func(v []float32) *tensor.Tensor {
			h, err := tensor.FromSlice(append([]float32(nil), v...), 2, 3).ToDevice(d)
			require.NoError(t, err)
			return h
		}
		a, b, c, dd := Param(on(av)), Param(on(bv)), Param(on(cv)), Param(on(dv))
		for i, p := range []*Var{a, b, c} { // dd has no Grad
			p.Grad = on(g0[i])
		}
		var hooked []float32
		c.RegisterPostAccumulateHook(func(v *Var) {
			for _, p := range []*Var{v, a} { // its own Grad, and a's: visited before it
				h, err := p.Grad.ToDevice(tensor.CPU)
				require.NoError(t, err)
				hooked = append(hooked, h.F32()...)
			}
		})
		r := Const(on(rv))
		// c's product first: Backward visits it last, after a and b.
		Backward(SumAll(Mul(Add(Mul(c, dd), Mul(a, b)), r)))
		var res [][]float32
		for _, p := range []*Var{a, b, c, dd} {
			h, err := p.Grad.ToDevice(tensor.CPU)
			require.NoError(t, err)
			res = append(res, append([]float32(nil), h.F32()...))
		}
		return res, hooked
	}
	cnt := &sumCounter{Backend: orig.(*sim.Backend)}
	kernels.Register(cnt)
	got, hooked := run(dev)
	kernels.Register(orig)
	want, wantHooked := run(tensor.CPU)
	require.Equal(t, want, got, "bit for bit the CPU's")
	require.Equal(t, wantHooked, hooked, "c's hook saw its whole gradient, and a's, as the CPU's hook does")
	require.Equal(t, append(append([]float32(nil), want[2]...), want[0]...), hooked, "both complete")
	require.Equal(t, 1, cnt.foreach, "one ForeachAxpy")
	require.Equal(t, 2, cnt.foreachTensors, "a's and b's gradients in it")
}

// TestLinearSumRecordingAddsInPlace: LinearSum recording gradients adds
// each further product, and its bias, into its running sum (linear_add:
// MatMulAdd and the bias's addition in place) instead of a product and
// an Add each: on sim two Binary launches fewer for three terms, the
// last with a bias (a linear_add over a linear_add). At these sizes (7 rows, inner dimensions 3 and
// 4) the values and every gradient are bit for bit those of the explicit
// composition (Linear, then Add of each further Linear and bias), on sim
// and on the CPU; in general they agree to MatMulAdd's rounding order.
func TestLinearSumRecordingAddsInPlace(t *testing.T) {
	dev := tensor.Sim(6)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	rng := rand.New(rand.NewPCG(15, 16))
	vals := func(n int) []float32 { return randVals(rng, n) }
	x1v, w1v, bv, x2v, w2v, w3v, rv := vals(7*4), vals(5*4), vals(5), vals(7*3), vals(5*3), vals(5*4), vals(7*5)
	run := func(d tensor.Device, composed bool) ([][]float32, int, bool) {
		on := func(v []float32, shape ...int) *tensor.Tensor {
			h, err := tensor.FromSlice(append([]float32(nil), v...), shape...).ToDevice(d)
			require.NoError(t, err)
			return h
		}
		x1, w1, b, x2, w2, w3 := Param(on(x1v, 7, 4)), Param(on(w1v, 5, 4)), Param(on(bv, 5)), Param(on(x2v, 7, 3)), Param(on(w2v, 5, 3)), Param(on(w3v, 5, 4))
		c := &sumCounter{Backend: orig.(*sim.Backend)}
		kernels.Register(c)
		defer kernels.Register(orig)
		var y *Var
		if composed {
			y = Add(Add(Add(Linear(x1, w1, b), Linear(x2, w2, nil)), Linear(x1, w3, nil)), b)
		} else {
			y = LinearSum([]LinearTerm{{X: x1, W: w1, B: b}, {X: x2, W: w2}, {X: x1, W: w3, B: b}})
		}
		binary := c.binary
		recorded := y.node != nil && y.node.op == "linear_add" && y.node.inputs[3].node != nil && y.node.inputs[3].node.op == "linear_add"
		if recorded { // in place: the result is the first Linear's tensor
			first := y.node.inputs[3].node.inputs[2]
			recorded = first.node != nil && first.node.op == "linear" && first.Value.Storage() == y.Value.Storage()
		}
		Backward(SumAll(Mul(y, Const(on(rv, 7, 5)))))
		res := [][]float32{}
		for _, v := range []*Var{y, x1, w1, b, x2, w2, w3} {
			tv := v.Value
			if v != y {
				tv = v.Grad
			}
			h, err := tv.ToDevice(tensor.CPU)
			require.NoError(t, err)
			res = append(res, append([]float32(nil), h.F32()...))
		}
		return res, binary, recorded
	}
	want, composedAdds, _ := run(dev, true)
	got, sumAdds, recorded := run(dev, false)
	require.True(t, recorded, "LinearSum recorded linear_add over linear_add over the first Linear, in its tensor")
	require.Equal(t, want, got, "bit for bit the composition's")
	cpu, _, _ := run(tensor.CPU, false)
	require.Equal(t, want, cpu, "and the CPU's")
	require.Equal(t, composedAdds-2, sumAdds, "two Binary adds fewer in the forward")
}

// aliasCounter records, over sim, whether a linear backward call was
// handed one buffer as two of its outputs (dx and dw or db): a device's
// single launch would add into it from two threads at once.
type aliasCounter struct {
	*sim.Backend
	aliased, calls int
}

func (b *aliasCounter) note(dx, dw, db *tensor.Tensor) {
	b.calls++
	if dx.Storage() == dw.Storage() || (db != nil && dx.Storage() == db.Storage()) {
		b.aliased++
	}
}

func (b *aliasCounter) LinearBackwardAdd(dx, dw, db, g, x, w *tensor.Tensor) {
	b.note(dx, dw, db)
	b.Backend.LinearBackwardAdd(dx, dw, db, g, x, w)
}

func (b *aliasCounter) LinearBackwardAccumulate(dx, dw, db, g, x, w *tensor.Tensor) {
	b.note(dx, dw, db)
	b.Backend.LinearBackwardAccumulate(dx, dw, db, g, x, w)
}

// TestNoSinkForAnInputInTwoSlots: Linear(x, x, nil) — x both input and
// weight, a leaf with a Grad or a sum Backward holds — takes no sink for
// x, so that no backward call gets one buffer as two outputs; its
// gradient is still right (against the CPU's, over two backwards).
func TestNoSinkForAnInputInTwoSlots(t *testing.T) {
	dev := tensor.Sim(6)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	rng := rand.New(rand.NewPCG(17, 18))
	xv, sv, g0 := randVals(rng, 16), randVals(rng, 16), randVals(rng, 16)
	for _, leaf := range []bool{true, false} {
		run := func(d tensor.Device) ([]float32, *aliasCounter) {
			on := func(v []float32) *tensor.Tensor {
				h, err := tensor.FromSlice(append([]float32(nil), v...), 4, 4).ToDevice(d)
				require.NoError(t, err)
				return h
			}
			c := &aliasCounter{Backend: orig.(*sim.Backend)}
			kernels.Register(c)
			defer kernels.Register(orig)
			a := Param(on(xv))
			a.Grad = on(g0)
			for range 2 {
				x := a
				var extra *Var
				if !leaf {
					x = Mul(a, Const(on(sv)))
					extra = SumAll(Mul(x, x)) // read twice more: a sum of Backward's own
				}
				loss := SumAll(Mul(Linear(x, x, nil), Const(on(sv))))
				if extra != nil {
					loss = Add(loss, extra)
				}
				Backward(loss)
			}
			h, err := a.Grad.ToDevice(tensor.CPU)
			require.NoError(t, err)
			return append([]float32(nil), h.F32()...), c
		}
		got, c := run(dev)
		want, _ := run(tensor.CPU)
		require.Equal(t, want, got, "leaf %v: the CPU's gradient", leaf)
		// Without sinks for x the linear takes the separate products (no
		// LinearBackwardAdd at all); with them it would take one call
		// with dx and dw one buffer.
		require.Zero(t, c.aliased, "leaf %v: %d of %d calls with dx sharing dw's or db's buffer", leaf, c.aliased, c.calls)
	}
}
