package autograd

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	_ "github.com/esper-go/esper/kernels/sim"
	"github.com/esper-go/esper/tensor"
)

// hostPair returns got's and want's values on the host (of one shape).
func hostPair(t *testing.T, what string, got, want *Var) (g, w []float64) {
	t.Helper()
	gh, err := contig(got.Value).ToDevice(tensor.CPU)
	require.NoError(t, err)
	wh, err := contig(want.Value).ToDevice(tensor.CPU)
	require.NoError(t, err)
	require.Equal(t, wh.Shape(), gh.Shape(), what)
	return gh.Float64s(), wh.Float64s()
}

// sameVars requires got and want equal bit for bit.
func sameVars(t *testing.T, what string, got, want *Var) {
	t.Helper()
	g, w := hostPair(t, what, got, want)
	require.Equal(t, w, g, what)
}

// closeVars requires got and want equal to float32 rounding of sums.
func closeVars(t *testing.T, what string, got, want *Var) {
	t.Helper()
	g, w := hostPair(t, what, got, want)
	for i := range g {
		require.InDelta(t, w[i], g[i], 1e-5*math.Max(1, math.Abs(w[i])), "%s element %d", what, i)
	}
}

// TestLinearGroups: in inference, where products are joined (a
// launch-bound backend; here sim with stackAnywhere), LinearStack is one
// product (weights concatenated, results column views) and LinearSum one
// product over inputs and weights side by side, agreeing with the
// separate products to rounding; elsewhere LinearStack is the separate
// products, bit for bit the CPU's, and LinearSum adds its further
// products in place (MatMulAdd), bit for bit what the separate products
// and Adds compute on the CPU with gradients.
func TestLinearGroups(t *testing.T) {
	rng := tensor.NewRNG(3)
	dev := tensor.Sim(0)
	host := func(shape ...int) *Var { return Param(tensor.Normal(rng, tensor.F32, 0, 1, shape...)) }
	on := func(v *Var) *Var {
		d, err := v.Value.ToDevice(dev)
		require.NoError(t, err)
		return Param(d)
	}
	x, x2 := host(5, 7), host(5, 3)
	ws := []*Var{host(4, 7), host(6, 7), host(2, 7)}
	b1, b2 := host(4), host(4)
	terms := func(x, x2, w0, w3, b1, b2 *Var) []LinearTerm {
		return []LinearTerm{{X: x, W: w0, B: b1}, {B: b2}, {X: x2, W: w3}}
	}
	w3 := host(4, 3)

	// The CPU's separate products, with gradients.
	want := LinearStack(x, ws)
	wantSum := LinearSum(terms(x, x2, ws[0], w3, b1, b2))
	require.True(t, wantSum.RequiresGrad())

	dws := []*Var{on(ws[0]), on(ws[1]), on(ws[2])}
	dx, dx2, dw3, db1, db2 := on(x), on(x2), on(w3), on(b1), on(b2)
	var got []*Var
	var gotSum *Var
	fn := func([]*tensor.Tensor) []*tensor.Tensor {
		InferenceMode(func() {
			got = LinearStack(dx, dws)
			gotSum = LinearSum(terms(dx, dx2, dws[0], dw3, db1, db2))
		})
		return []*tensor.Tensor{got[0].Value, gotSum.Value}
	}
	t.Cleanup(func() { stackAnywhere = false })
	for _, stack := range []bool{true, false} {
		stackAnywhere = stack
		// Stack: concat + product, or three products; sum: ones, two
		// concats and a product joined, or product with bias, bias add
		// and MatMulAdd.
		// Joined: concat and product; two concats and a product (the
		// block of ones is shared, made by the eager warm-up). Not
		// joined: three products; product with bias, bias add, MatMulAdd.
		if stack {
			require.Equal(t, 2+3, captureLaunches(t, fn, dx.Value))
		} else {
			require.Equal(t, 3+3, captureLaunches(t, fn, dx.Value))
		}
		fn(nil)
		for i := range ws {
			if stack {
				require.False(t, got[i].Value.IsContiguous() && i > 0, "a column view of the stacked product")
				closeVars(t, "LinearStack", got[i], want[i])
			} else {
				sameVars(t, "LinearStack", got[i], want[i])
			}
		}
		if stack {
			closeVars(t, "LinearSum", gotSum, wantSum)
		} else {
			sameVars(t, "LinearSum", gotSum, wantSum)
		}
	}
	stackAnywhere = false

	// On the CPU in inference: the separate products, bitwise.
	var cpuSum *Var
	InferenceMode(func() { cpuSum = LinearSum(terms(x, x2, ws[0], w3, b1, b2)) })
	require.Equal(t, wantSum.Value.Float64s(), cpuSum.Value.Float64s())

	// A bias-only first term broadcasts over the rows, joined or not.
	want2 := Add(Add(Linear(x, ws[0], nil), b1), Linear(x, ws[0], b2))
	for _, stack := range []bool{false, true} {
		stackAnywhere = stack
		var got2 *Var
		InferenceMode(func() {
			got2 = LinearSum([]LinearTerm{{B: db1}, {X: dx, W: dws[0]}, {X: dx, W: dws[0], B: db2}})
		})
		closeVars(t, "bias first", got2, want2)
	}
}

// TestDeviceSeedShared: a scalar root on a device starts its backward
// from one shared seed per device and dtype (no Fill launch per
// Backward, so a captured step records none), which stays 1.
func TestDeviceSeedShared(t *testing.T) {
	dev := tensor.Sim(0)
	x, err := tensor.FromSlice([]float32{1, 2, 3}, 3).ToDevice(dev)
	require.NoError(t, err)
	w := Param(x)
	var loss *Var
	step := func(in []*tensor.Tensor) []*tensor.Tensor {
		w.ZeroGrad()
		loss = SumAll(Mul(w, Const(in[0])))
		Backward(loss)
		return []*tensor.Tensor{w.Grad}
	}
	seed := scalarOne(SumAll(Const(x)).Value)
	require.NotNil(t, seed)
	require.Same(t, seed, scalarOne(SumAll(Const(x)).Value), "one seed per device and dtype")
	cap := Capture(step, CaptureOptions{OnFallback: func(err error) { t.Fatal(err) }})
	for i := 0; i < 3; i++ {
		out, err := cap.Run(x)
		require.NoError(t, err)
		g, err := out[0].ToDevice(tensor.CPU)
		require.NoError(t, err)
		require.Equal(t, []float32{1, 2, 3}, g.F32())
	}
	h, err := seed.ToDevice(tensor.CPU)
	require.NoError(t, err)
	require.Equal(t, []float32{1}, h.F32(), "the seed is never written")
	// A capture before the seed exists records a Fill of its own: one
	// launch more than the step above.
	deviceOnesMu.Lock()
	delete(deviceOnes, deviceScalarKey{dev, tensor.F32, oneF32})
	deviceOnesMu.Unlock()
	be := backendOf(x)
	require.NoError(t, be.BeginCapture())
	step([]*tensor.Tensor{x})
	g, err := be.EndCapture()
	require.NoError(t, err)
	require.Equal(t, cap.Launches()+1, g.Len())
}

// TestReluHeads: where products are joined (sim with stackAnywhere, in
// inference), ReluHeads runs heads of different output widths as two
// broadcast products over stacked weights — the second padded with zero
// rows — in a fixed number of launches, whatever the number of heads,
// and agrees with the separate heads (LinearRelu then Linear, computed on
// the CPU with gradients) to rounding; its outputs are views of the
// joined result. Elsewhere, and for heads it cannot join (a head without
// a bias, hidden widths that differ), it is the separate heads bit for
// bit.
func TestReluHeads(t *testing.T) {
	rng := tensor.NewRNG(9)
	host := func(shape ...int) *Var { return Param(tensor.Normal(rng, tensor.F32, 0, 1, shape...)) }
	on := func(v *Var) *Var {
		if v == nil {
			return nil
		}
		d, err := v.Value.ToDevice(tensor.Sim(0))
		require.NoError(t, err)
		return Param(d)
	}
	x := host(5, 6)
	outs := []int{3, 7, 1, 7}
	var hs, dhs []ReluHead
	for _, o := range outs {
		h := ReluHead{W1: host(4, 6), B1: host(4), W2: host(o, 4), B2: host(o)}
		hs = append(hs, h)
		dhs = append(dhs, ReluHead{W1: on(h.W1), B1: on(h.B1), W2: on(h.W2), B2: on(h.B2)})
	}
	want := make([]*Var, len(hs))
	for i, h := range hs {
		want[i] = Linear(LinearRelu(x, h.W1, h.B1), h.W2, h.B2)
	}
	dx := on(x)
	var got []*Var
	fn := func([]*tensor.Tensor) []*tensor.Tensor {
		InferenceMode(func() { got = ReluHeads(dx, dhs) })
		return []*tensor.Tensor{got[0].Value}
	}
	t.Cleanup(func() { stackAnywhere = false })
	for _, stack := range []bool{true, false} {
		stackAnywhere = stack
		if stack {
			// One concat for the four stacks (StackRows), two products,
			// two bias adds and a ReLU (the zero padding is shared, made
			// by the eager warm-up).
			require.Equal(t, 6, captureLaunches(t, fn, dx.Value))
		} else {
			require.Equal(t, 2*len(hs), captureLaunches(t, fn, dx.Value), "LinearRelu and Linear per head")
		}
		fn(nil)
		for i := range hs {
			require.Equal(t, []int{5, outs[i]}, got[i].Shape())
			if stack {
				closeVars(t, "joined head", got[i], want[i])
				require.False(t, got[i].Value.IsContiguous() && outs[i] < 7, "a view of the joined result")
			} else {
				sameVars(t, "separate head", got[i], want[i])
			}
		}
	}

	// Heads it cannot join run separately even where products join.
	stackAnywhere = true
	noBias := append([]ReluHead(nil), dhs...)
	noBias[1].B2 = nil
	wantNoBias := Linear(LinearRelu(x, hs[1].W1, hs[1].B1), hs[1].W2, nil)
	wide := append([]ReluHead(nil), dhs...)
	wide[2] = ReluHead{W1: on(host(5, 6)), B1: on(host(5)), W2: on(host(2, 5)), B2: on(host(2))}
	InferenceMode(func() {
		sameVars(t, "a head without a bias", ReluHeads(dx, noBias)[1], wantNoBias)
		sameVars(t, "hidden widths that differ", ReluHeads(dx, wide)[0], want[0])
	})
	stackAnywhere = false
}

// TestStackRows: where products are joined, StackRows makes every
// group's stack in one launch, each bitwise Concat(group, 0) (a group of
// one weight is that weight itself), and LinearStacks gives each input's
// LinearStack to rounding with one concat and its inputs' products in
// one join (kernels.MatMulsJoiner, sim's: one launch of the graph);
// elsewhere StackRows is a Concat per group and LinearStacks the
// separate products, bit for bit.
func TestStackRows(t *testing.T) {
	rng := tensor.NewRNG(11)
	on := func(shape ...int) *Var {
		d, err := tensor.Normal(rng, tensor.F32, 0, 1, shape...).ToDevice(tensor.Sim(0))
		require.NoError(t, err)
		return Param(d)
	}
	groups := [][]*Var{{on(2, 3), on(4, 3)}, {on(5)}, {on(1, 2, 2), on(3, 2, 2), on(1, 2, 2)}, nil, {on(6), on(1)}}
	xs := []*Var{on(4, 3), on(4, 5), on(2, 3)}
	wss := [][]*Var{{on(2, 3), on(6, 3)}, {on(3, 5)}, {on(1, 3), on(2, 3), on(4, 3)}}
	var stacks []*Var
	var outs [][]*Var
	fn := func([]*tensor.Tensor) []*tensor.Tensor {
		InferenceMode(func() {
			stacks = StackRows(groups)
			outs = LinearStacks(xs, wss)
		})
		return []*tensor.Tensor{stacks[0].Value}
	}
	t.Cleanup(func() { stackAnywhere = false })
	for _, stack := range []bool{true, false} {
		stackAnywhere = stack
		if stack {
			// StackRows: one concat; LinearStacks: one concat and the
			// three inputs' products joined.
			require.Equal(t, 1+1+1, captureLaunches(t, fn, xs[0].Value))
		} else {
			// Three concats; then 2 + 1 + 3 separate products.
			require.Equal(t, 3+6, captureLaunches(t, fn, xs[0].Value))
		}
		fn(nil)
		require.Nil(t, stacks[3])
		require.Same(t, groups[1][0], stacks[1], "a group of one weight is the weight")
		for i, g := range groups {
			if len(g) > 1 {
				var want *Var
				InferenceMode(func() { want = Concat(g, 0) })
				sameVars(t, "stack", stacks[i], want)
			}
		}
		for i, x := range xs {
			var want []*Var
			InferenceMode(func() {
				for _, w := range wss[i] {
					want = append(want, Linear(x, w, nil))
				}
			})
			require.Len(t, outs[i], len(wss[i]))
			for j := range want {
				if stack {
					closeVars(t, "LinearStacks", outs[i][j], want[j])
				} else {
					sameVars(t, "LinearStacks", outs[i][j], want[j])
				}
			}
		}
	}
}

// decliningJoiner is a backend whose MatMulsJoiner declines every join
// (as CUDA does past its size bound, or with its joins off), recording
// the calls it was offered and counting the products run apart.
type decliningJoiner struct {
	kernels.Backend
	offered [][]kernels.MatMulTCall
	matmuls int
}

func (d *decliningJoiner) MatMulsT(calls []kernels.MatMulTCall) bool {
	d.offered = append(d.offered, calls)
	return false
}

func (d *decliningJoiner) MatMul(dst, a, b *tensor.Tensor, transA, transB bool) {
	d.matmuls++
	d.Backend.MatMul(dst, a, b, transA, transB)
}

// TestLinearStacksWhereTheJoinIsDeclined: when the backend declines the
// joined products, LinearStacks runs each product once, into the output
// it made for the join (no tensor made twice): bit for bit Linear's for
// a single weight, Linear's to rounding per weight of a stack (as where
// the join is taken).
func TestLinearStacksWhereTheJoinIsDeclined(t *testing.T) {
	dev := tensor.Sim(9)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	d := &decliningJoiner{Backend: orig}
	kernels.Register(d)
	t.Cleanup(func() { stackAnywhere = false })
	stackAnywhere = true
	rng := tensor.NewRNG(19)
	on := func(shape ...int) *Var {
		v, err := tensor.Normal(rng, tensor.F32, 0, 1, shape...).ToDevice(dev)
		require.NoError(t, err)
		return Const(v)
	}
	xs := []*Var{on(4, 3), on(2, 5)}
	wss := [][]*Var{{on(2, 3), on(6, 3)}, {on(3, 5)}}
	var outs [][]*Var
	InferenceMode(func() { outs = LinearStacks(xs, wss) })
	require.Len(t, d.offered, 1, "one join offered")
	require.Len(t, d.offered[0], 2, "both inputs' products")
	require.Equal(t, 2, d.matmuls, "each product once, after the decline")
	// The first input's stack is one product, split by rows: its output
	// is the very tensor made for the join.
	require.Same(t, d.offered[0][1].Dst, outs[1][0].Value, "the single weight's product is the join's output")
	for i, x := range xs {
		for j, w := range wss[i] {
			var want *Var
			InferenceMode(func() { want = Linear(x, w, nil) })
			if len(wss[i]) == 1 {
				sameVars(t, "LinearStacks", outs[i][j], want)
			} else {
				closeVars(t, "LinearStacks", outs[i][j], want)
			}
		}
	}
}

// TestStackRowsOfAdjacentWeights: weights laid out one after another in
// one storage stack as a view of it — no launch, the same storage, the
// values Concat gives — and a view reads what the weights hold when it
// is used, so a captured forward replays with updated weights. Out of
// order, with a gap, or recording gradients, they are copied as before.
func TestStackRowsOfAdjacentWeights(t *testing.T) {
	rng := tensor.NewRNG(17)
	all, err := tensor.Normal(rng, tensor.F32, 0, 1, 12, 3).ToDevice(tensor.Sim(0))
	require.NoError(t, err)
	rows := func(lo, n int) *Var { return Param(all.Narrow(0, lo, n)) }
	a, b, c := rows(0, 2), rows(2, 4), rows(6, 6)
	x, err := tensor.Normal(rng, tensor.F32, 0, 1, 5, 3).ToDevice(tensor.Sim(0))
	require.NoError(t, err)
	xv := Const(x)
	t.Cleanup(func() { stackAnywhere = false })
	stackAnywhere = true
	for _, tc := range []struct {
		what string
		g    []*Var
		view bool
	}{
		{"in order", []*Var{a, b, c}, true},
		{"a prefix", []*Var{a, b}, true},
		{"out of order", []*Var{b, a}, false},
		{"a gap", []*Var{a, c}, false},
	} {
		var st []*Var
		fn := func([]*tensor.Tensor) []*tensor.Tensor {
			InferenceMode(func() { st = StackRows([][]*Var{tc.g, {c, a}}) })
			return []*tensor.Tensor{st[1].Value}
		}
		// One launch either way: the second group's Concat beside a
		// view, or both groups in one ConcatMany.
		require.Equal(t, 1, captureLaunches(t, fn, x), tc.what)
		fn(nil)
		var want *Var
		InferenceMode(func() { want = Concat(tc.g, 0) })
		sameVars(t, tc.what, st[0], want)
		require.Equal(t, tc.view, st[0].Value.Storage() == all.Storage(), "%s: a view of the weights", tc.what)
	}

	// LinearStack through the view, in a captured forward: after the
	// weights change, a replay computes with the new values.
	var outs []*Var
	fn := func([]*tensor.Tensor) []*tensor.Tensor {
		InferenceMode(func() { outs = LinearStack(xv, []*Var{a, b, c}) })
		return []*tensor.Tensor{outs[0].Value, outs[1].Value, outs[2].Value}
	}
	require.Equal(t, 1, captureLaunches(t, fn, x), "one product, no copy of the weights")
	cap := Capture(fn, CaptureOptions{OnFallback: func(err error) { t.Fatal(err) }})
	for i := 0; i < 3; i++ { // warm-up, capture, replay
		_, err = cap.Run(x)
		require.NoError(t, err)
	}
	kernels.For(all.Device()).BinaryScalar(kernels.Mul, all, all, 2, false)
	got, err := cap.Run(x)
	require.NoError(t, err)
	for i, w := range []*Var{a, b, c} {
		var want *Var
		InferenceMode(func() { want = Linear(xv, w, nil) })
		closeVars(t, "replay after the weights changed", Const(got[i]), want)
	}

	// Recording gradients: Concat, so that the gradient reaches each weight.
	stackAnywhere = false
	st := StackRows([][]*Var{{a, b}})
	require.NotEqual(t, all.Storage(), st[0].Value.Storage())
}

// TestLinearSums: where products are joined and the backend has
// kernels.ConcatManyer (sim with stackAnywhere), LinearSums makes the
// stacked weights of all its joined lists in one launch — one launch
// fewer than LinearSum per list for two such lists — and gives each list
// bitwise what LinearSum gives it; elsewhere it is LinearSum per list,
// bit for bit, in as many launches.
func TestLinearSums(t *testing.T) {
	rng := tensor.NewRNG(13)
	on := func(shape ...int) *Var {
		d, err := tensor.Normal(rng, tensor.F32, 0, 1, shape...).ToDevice(tensor.Sim(0))
		require.NoError(t, err)
		return Param(d)
	}
	x1, x2, x3 := on(4, 3), on(4, 5), on(2, 3)
	termss := [][]LinearTerm{
		{{X: x1, W: on(6, 3), B: on(6)}, {X: x2, W: on(6, 5)}},
		{{X: x3, W: on(2, 3)}, {B: on(2)}, {X: x3, W: on(2, 3), B: on(2)}},
		{{X: x1, W: on(3, 3), B: on(3)}}, // one term: not joined
	}
	var got, want []*Var
	sums := func([]*tensor.Tensor) []*tensor.Tensor {
		InferenceMode(func() { got = LinearSums(termss) })
		return []*tensor.Tensor{got[0].Value}
	}
	each := func([]*tensor.Tensor) []*tensor.Tensor {
		want = want[:0]
		InferenceMode(func() {
			for _, terms := range termss {
				want = append(want, LinearSum(terms))
			}
		})
		return []*tensor.Tensor{want[0].Value}
	}
	launches := func(fn StepFunc) int { return captureLaunches(t, fn, x1.Value) }
	t.Cleanup(func() { stackAnywhere = false })
	for _, stack := range []bool{true, false} {
		stackAnywhere = stack
		if stack {
			require.Equal(t, launches(each)-1, launches(sums))
		} else {
			require.Equal(t, launches(each), launches(sums))
		}
		sums(nil)
		each(nil)
		for i := range termss {
			sameVars(t, "LinearSums", got[i], want[i])
		}
	}
}

// TestLinearSumsAct: a two-type graph layer's sums (each type's relations
// a mean over edges plus a root product, one relation without edges, a
// lone bias term) with GELU, scale and residual. Where products are
// joined (sim with stackAnywhere) it is one weight stack, a product per
// input and the types' GatherSums in one join (GatherSums), agreeing
// with LinearSums
// then ScaleActAdd to rounding; elsewhere it is that composition, bit for
// bit, in the same launches; with gradients recorded it is the
// composition too, and they reach every weight.
func TestLinearSumsAct(t *testing.T) {
	rng := tensor.NewRNG(17)
	dev := tensor.Sim(0)
	on := func(shape ...int) *Var {
		d, err := tensor.Normal(rng, tensor.F32, 0, 1, shape...).ToDevice(dev)
		require.NoError(t, err)
		return Param(d)
	}
	const na, nb, k, c = 5, 3, 6, 4
	xa, xb := on(na, k), on(nb, k)
	ab := edgesOnSim(t, gatCase(t, rng, na, nb, 9)) // a → b
	ba := edgesOnSim(t, gatCase(t, rng, nb, na, 7)) // b → a
	aa := edgesOnSim(t, gatCase(t, rng, na, na, 0)) // a → a, no edges
	termss := [][]LinearTerm{
		{ // into a
			{X: xb, Edges: &ba, W: on(c, k), B: on(c)}, {X: xa, W: on(c, k)},
			{X: xa, Edges: &aa, W: on(c, k), B: on(c)}, {X: xa, W: on(c, k)},
		},
		{{X: xa, Edges: &ab, W: on(c, k), B: on(c)}, {X: xb, W: on(c, k)}, {B: on(c)}}, // into b
	}
	scales := []float64{0.5, 1}
	res := []*Var{on(na, c), nil}
	var got, want []*Var
	joined := func([]*tensor.Tensor) []*tensor.Tensor {
		InferenceMode(func() { got = LinearSumsAct(termss, scales, kernels.GeluErf, res) })
		return []*tensor.Tensor{got[0].Value, got[1].Value}
	}
	composed := func([]*tensor.Tensor) []*tensor.Tensor {
		InferenceMode(func() {
			want = LinearSums(termss)
			for i := range want {
				want[i] = ScaleActAdd(want[i], scales[i], kernels.GeluErf, res[i])
			}
		})
		return []*tensor.Tensor{want[0].Value, want[1].Value}
	}
	launches := func(fn StepFunc) int { return captureLaunches(t, fn, xa.Value) }
	t.Cleanup(func() { stackAnywhere = false })
	for _, stack := range []bool{true, false} {
		stackAnywhere = stack
		if stack {
			// The weight stack, the two inputs' products joined, and
			// both lists' GatherSums joined: each join one launch of the
			// graph, as on CUDA (sim runs its calls as the CPU does
			// inside it).
			require.Equal(t, 1+1+1, launches(joined))
			require.Greater(t, launches(composed), 5)
		} else {
			require.Equal(t, launches(composed), launches(joined))
		}
		joins := kernels.For(dev).(interface{ Joins() int64 })
		before := joins.Joins()
		joined(nil)
		if stack {
			// The two inputs' products in one MatMulsT and the two
			// lists' sums in one GatherSums (a launch each on CUDA).
			require.Equal(t, before+2, joins.Joins())
		} else {
			require.Equal(t, before, joins.Joins())
		}
		composed(nil)
		for i := range termss {
			if stack {
				closeVars(t, "LinearSumsAct", got[i], want[i])
			} else {
				sameVars(t, "LinearSumsAct", got[i], want[i])
			}
		}
	}

	// With gradients: the composition, and every weight gets one.
	stackAnywhere = true
	outs := LinearSumsAct(termss, scales, kernels.GeluErf, res)
	want = LinearSums(termss)
	for i := range want {
		want[i] = ScaleActAdd(want[i], scales[i], kernels.GeluErf, res[i])
	}
	for i := range outs {
		require.True(t, outs[i].RequiresGrad())
		sameVars(t, "LinearSumsAct with gradients", outs[i], want[i])
	}
	Backward(Add(SumAll(outs[0]), SumAll(outs[1])))
	for i, terms := range termss {
		for j, term := range terms {
			if term.W != nil {
				require.NotNil(t, term.W.Grad, "list %d term %d weight", i, j)
			}
		}
	}
	require.Panics(t, func() { LinearSumsAct(termss, scales[:1], kernels.GeluErf, res) })

	// A gathered term given without its CSR (Src and Dst alone) takes the
	// unfused sums — decided before any product launches — with the
	// composition's values.
	noCSR := ab
	noCSR.RowPtr, noCSR.Order = nil, nil
	termss[1][0].Edges = &noCSR
	require.NotPanics(t, func() { joined(nil) })
	composed(nil)
	for i := range termss {
		sameVars(t, "LinearSumsAct, a term without its CSR", got[i], want[i])
	}
}

// TestReluHeadGroupsJoined: a policy's heads as its forward hands them
// — the context heads on [global row | mean of the graph's slots], the
// pointer head on [slot row | its graph's global row], both inputs given
// as pieces, the value head on the global rows — with their outputs
// joined in head order, the pointer head's three slots to a graph's
// row. In inference on sim they are one join, each output bit for bit
// Linear(LinearRelu) of the GatherConcat, and the joined output holds
// each head's values in its columns; with gathered inputs declined (sim's
// SetGatherIn(false)) they are still one join, on the inputs gathered
// first, with no joined output; on the CPU the joined output is nil and
// the outputs are the same. Bad columns panic.
func TestReluHeadGroupsJoined(t *testing.T) {
	rng := tensor.NewRNG(23)
	const B, S, C = 4, 3, 5
	joins := kernels.For(tensor.Sim(0)).(interface{ Joins() int64 })
	// Slot s belongs to graph s / S; the mean's edges come in a shuffled
	// order.
	msrc, mdst := []int64{4, 0, 11, 7, 2, 1, 9, 5, 3, 10, 6, 8}, make([]int64, B*S)
	gsrc, gdst := make([]int64, B*S), make([]int64, B*S)
	for k, s := range msrc {
		mdst[k] = s / S
	}
	for s := range gsrc {
		gsrc[s], gdst[s] = int64(s/S), int64(s)
	}
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		on := func(x *tensor.Tensor) *tensor.Tensor {
			d, err := x.ToDevice(dev)
			require.NoError(t, err)
			return d
		}
		p := func(shape ...int) *Var { return Param(on(tensor.Normal(rng, tensor.F32, 0, 1, shape...))) }
		edges := func(src, dst []int64, nd int) *GraphEdges {
			rowPtr, order, err := kernels.BuildCSR(dst, nd)
			require.NoError(t, err)
			e := len(src)
			return &GraphEdges{Src: on(tensor.FromSlice(src, e)), Dst: on(tensor.FromSlice(dst, e)),
				RowPtr: on(tensor.FromSlice(rowPtr, nd+1)), Order: on(tensor.FromSlice(order, e)), NumDst: nd}
		}
		head := func(in, out int) ReluHead { return ReluHead{W1: p(6, in), B1: p(6), W2: p(out, 6), B2: p(out)} }
		glob, slots := p(B, C), p(B*S, C)
		groups := []ReluHeadGroup{
			{Pieces: []GatherPiece{{X: glob}, {X: slots, Edges: edges(msrc, mdst, B)}}, Heads: []ReluHead{head(2*C, 3), head(2*C, 2)}},
			{Pieces: []GatherPiece{{X: slots}, {X: glob, Edges: edges(gsrc, gdst, B*S)}}, Heads: []ReluHead{head(2*C, 1)}},
			{X: glob, Heads: []ReluHead{head(C, 1)}},
		}
		cols := []HeadColumn{{0, 0, 1}, {1, 0, S}, {0, 1, 1}, {2, 0, 1}}
		var want [][]*Var
		InferenceMode(func() {
			for _, g := range groups {
				x := g.X
				if x == nil {
					x = Concat([]*Var{g.Pieces[0].X, GatherMean(g.Pieces[1].X, *g.Pieces[1].Edges)}, 1)
				}
				var w []*Var
				for _, h := range g.Heads {
					w = append(w, Linear(LinearRelu(x, h.W1, h.B1), h.W2, h.B2))
				}
				want = append(want, w)
			}
		})
		before := joins.Joins()
		var got [][]*Var
		var joined *Var
		InferenceMode(func() { got, joined = ReluHeadGroupsJoined(groups, cols) })
		for i := range groups {
			for j := range got[i] {
				sameVars(t, fmt.Sprintf("%v: group %d head %d", dev, i, j), got[i][j], want[i][j])
			}
		}
		if dev.IsCPU() {
			require.Nil(t, joined, "the CPU runs the heads per group: no joined output")
			require.Equal(t, before, joins.Joins())
		} else {
			require.Equal(t, before+1, joins.Joins(), "one join on sim")
			require.NotNil(t, joined)
			var parts []*Var
			for _, c := range cols {
				o := got[c.Group][c.Head]
				parts = append(parts, Reshape(o, B, c.Rows*o.Shape()[1]))
			}
			sameVars(t, "joined", joined, Concat(parts, 1))
			// Into a kept (mapped) tensor: the joined output is that
			// tensor, holding the same values; an into of another shape
			// panics.
			into, err := tensor.EmptyMapped(dev, tensor.MappedOutput, tensor.F32, joined.Shape()...)
			require.NoError(t, err)
			var joinedInto *Var
			InferenceMode(func() { _, joinedInto = ReluHeadGroupsJoinedInto(groups, cols, into) })
			require.NotNil(t, joinedInto)
			require.Same(t, into, joinedInto.Value)
			sameVars(t, "joined into a mapped tensor", joinedInto, joined)
			wrong, err := tensor.EmptyOn(dev, tensor.F32, B, 1)
			require.NoError(t, err)
			require.Panics(t, func() { InferenceMode(func() { ReluHeadGroupsJoinedInto(groups, cols, wrong) }) })
			// With gathered inputs declined (as CUDA with
			// ESPER_CUDA_GATHER_IN=off), the heads are asked again on
			// the inputs gathered first: one join still, the same
			// bits, no joined output.
			simBackend := kernels.For(dev).(interface{ SetGatherIn(bool) })
			simBackend.SetGatherIn(false)
			before = joins.Joins()
			InferenceMode(func() { got, joined = ReluHeadGroupsJoined(groups, cols) })
			simBackend.SetGatherIn(true)
			require.Equal(t, before+1, joins.Joins(), "gathered inputs declined: one join")
			require.Nil(t, joined, "gathered inputs declined: no joined output")
			for i := range groups {
				for j := range got[i] {
					sameVars(t, fmt.Sprintf("gathered inputs declined: group %d head %d", i, j), got[i][j], want[i][j])
				}
			}
		}
		for _, bad := range [][]HeadColumn{{{3, 0, 1}}, {{0, 2, 1}}, {{0, 0, 1}, {0, 0, 1}}, {{0, 0, 1}, {1, 0, 1}}, {{0, 0, 0}}} {
			require.Panics(t, func() { InferenceMode(func() { ReluHeadGroupsJoined(groups, bad) }) }, "%v", bad)
		}
		require.Panics(t, func() { ReluHeadGroups([]ReluHeadGroup{{X: glob, Pieces: groups[0].Pieces, Heads: groups[0].Heads}}) })
	}
}

// TestReluHeadGroups: a policy's heads on three inputs (four heads of
// several widths on one, a pointer head of one output on another, a head
// without biases on a third). In inference on sim they are one
// ReluHeads join of one launch, bit for bit Linear(LinearRelu) per head
// (the sim join runs those products); on the CPU, and with gradients,
// they are ReluHeads per group, no join, and the gradients reach every
// weight.
func TestReluHeadGroups(t *testing.T) {
	rng := tensor.NewRNG(21)
	joins := kernels.For(tensor.Sim(0)).(interface{ Joins() int64 })
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		p := func(shape ...int) *Var {
			d, err := tensor.Normal(rng, tensor.F32, 0, 1, shape...).ToDevice(dev)
			require.NoError(t, err)
			return Param(d)
		}
		head := func(in, hid, out int, bias bool) ReluHead {
			h := ReluHead{W1: p(hid, in), W2: p(out, hid)}
			if bias {
				h.B1, h.B2 = p(hid), p(out)
			}
			return h
		}
		groups := []ReluHeadGroup{
			{X: p(5, 6), Heads: []ReluHead{head(6, 4, 3, true), head(6, 4, 7, true), head(6, 4, 1, true), head(6, 4, 7, true)}},
			{X: p(9, 8), Heads: []ReluHead{head(8, 5, 1, true)}},
			{X: p(5, 3), Heads: []ReluHead{head(3, 4, 1, false)}},
		}
		var want [][]*Var
		for _, g := range groups {
			var w []*Var
			for _, h := range g.Heads {
				w = append(w, Linear(LinearRelu(g.X, h.W1, h.B1), h.W2, h.B2))
			}
			want = append(want, w)
		}
		before := joins.Joins()
		var got [][]*Var
		InferenceMode(func() { got = ReluHeadGroups(groups) })
		joined := int64(1)
		if dev.IsCPU() {
			joined = 0
		}
		require.Equal(t, before+joined, joins.Joins(), "%v: joins", dev)
		for i := range groups {
			require.Len(t, got[i], len(groups[i].Heads))
			for j := range got[i] {
				require.Equal(t, []int{groups[i].X.Shape()[0], groups[i].Heads[j].W2.Shape()[0]}, got[i][j].Shape())
				sameVars(t, "ReluHeadGroups", got[i][j], want[i][j])
			}
		}
		// Under autocast, and with an F64 head beside F32 inputs, no join:
		// ReluHeads per group, whose products take the dtypes as they come.
		InferenceMode(func() { Autocast(tensor.BF16, func() { got = ReluHeadGroups(groups) }) })
		require.Equal(t, before+joined, joins.Joins(), "%v: under autocast, no join", dev)
		require.Equal(t, tensor.BF16, got[0][0].Value.DType())
		w64, err := tensor.Normal(rng, tensor.F64, 0, 1, 4, 3).ToDevice(dev)
		require.NoError(t, err)
		mixed := []ReluHeadGroup{groups[0], {X: groups[2].X, Heads: []ReluHead{{W1: Const(w64), W2: groups[2].Heads[0].W2}}}}
		InferenceMode(func() { got = ReluHeadGroups(mixed) })
		require.Equal(t, before+joined, joins.Joins(), "%v: an F64 weight, no join", dev)

		got = ReluHeadGroups(groups)
		require.Equal(t, before+joined, joins.Joins(), "%v: with gradients, no join", dev)
		var loss *Var
		for i := range got {
			for j := range got[i] {
				closeVars(t, "ReluHeadGroups with gradients", got[i][j], want[i][j])
				if loss == nil {
					loss = SumAll(got[i][j])
				} else {
					loss = Add(loss, SumAll(got[i][j]))
				}
			}
		}
		Backward(loss)
		for i, g := range groups {
			for j, h := range g.Heads {
				require.NotNil(t, h.W1.Grad, "%v: group %d head %d W1", dev, i, j)
				require.NotNil(t, h.W2.Grad, "%v: group %d head %d W2", dev, i, j)
			}
		}
	}
}
