package autograd

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// gradAccCounter counts kernels.GradAccumulator's launches over a
// backend (sim), handing them through.
type gradAccCounter struct {
	kernels.Backend
	matmulAdd, sumRowsAdd, linearGradAdd int
}

func (b *gradAccCounter) MatMulAdd(dst, x, y *tensor.Tensor, ta, tb bool) {
	b.matmulAdd++
	b.Backend.(kernels.GradAccumulator).MatMulAdd(dst, x, y, ta, tb)
}

func (b *gradAccCounter) SumRowsAdd(dst, x *tensor.Tensor) {
	b.sumRowsAdd++
	b.Backend.(kernels.GradAccumulator).SumRowsAdd(dst, x)
}

// linearGradCounter adds kernels.LinearGradAccumulator, counted.
type linearGradCounter struct{ *gradAccCounter }

func (b linearGradCounter) LinearGradAdd(dw, db, g, x *tensor.Tensor) {
	b.linearGradAdd++
	b.Backend.(kernels.LinearGradAccumulator).LinearGradAdd(dw, db, g, x)
}

// linearBackwardCounter adds kernels.LinearBackwardAdder, counted, to a
// linearGradCounter: LinearBackwardAdd in linearBackward[0],
// LinearBackwardAccumulate in linearBackward[1].
type linearBackwardCounter struct {
	linearGradCounter
	linearBackward *[2]int
}

func (b linearBackwardCounter) LinearBackwardAdd(dx, dw, db, g, x, w *tensor.Tensor) {
	b.linearBackward[0]++
	b.Backend.(kernels.LinearBackwardAdder).LinearBackwardAdd(dx, dw, db, g, x, w)
}

func (b linearBackwardCounter) LinearBackwardAccumulate(dx, dw, db, g, x, w *tensor.Tensor) {
	b.linearBackward[1]++
	b.Backend.(kernels.LinearBackwardAdder).LinearBackwardAccumulate(dx, dw, db, g, x, w)
}

// TestLinearGradsInOneCall: a Linear whose weight and bias already have
// a Grad gets both gradients added by one LinearGradAdd per backward on
// a backend with kernels.LinearGradAccumulator (one launch for a small
// layer on a GPU), with or without a bias, instead of MatMulAdd and
// SumRowsAdd. The input's gradient (x is a Param here, without a Grad
// before the first backward) is a product of its own in the first
// backward and added into x's Grad by MatMulAdd in the second (its Grad
// is a sink then), or comes in the same call with
// kernels.LinearBackwardAdder: LinearBackwardAdd, then
// LinearBackwardAccumulate. The gradients are bit for bit those of the
// two calls and of the CPU, over two backwards accumulating onto Grads
// that start non-zero.
func TestLinearGradsInOneCall(t *testing.T) {
	dev := tensor.Sim(6)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	rng := rand.New(rand.NewPCG(7, 8))
	vals := func(n int) []float32 { return randVals(rng, n) }
	xs, ws, bs := vals(4*16), vals(3*16), vals(3)
	grad0 := [][]float32{vals(3 * 16), vals(3)}
	for _, bias := range []bool{true, false} {
		run := func(d tensor.Device) [][]float32 {
			on := func(v []float32, shape ...int) *tensor.Tensor {
				h, err := tensor.FromSlice(append([]float32(nil), v...), shape...).ToDevice(d)
				require.NoError(t, err)
				return h
			}
			x := Param(on(xs, 4, 16)) // its gradient is a product of its own
			w := Param(on(ws, 3, 16))
			params := []*Var{w}
			var b *Var
			if bias {
				b = Param(on(bs, 3))
				params = append(params, b)
			}
			for i, p := range params {
				p.Grad = on(grad0[i], p.Shape()...)
			}
			for range 2 {
				h := Linear(x, w, b)
				Backward(SumAll(Mul(h, h)))
			}
			var out [][]float32
			for _, p := range append(params, x) {
				g, err := p.Grad.ToDevice(tensor.CPU)
				require.NoError(t, err)
				out = append(out, append([]float32(nil), g.F32()...))
			}
			return out
		}
		two := &gradAccCounter{Backend: orig}
		kernels.Register(two)
		want := run(dev)
		one := linearGradCounter{&gradAccCounter{Backend: orig}}
		kernels.Register(one)
		got := run(dev)
		kernels.Register(orig)
		require.Equal(t, want, got, "bias %v", bias)
		require.Equal(t, run(tensor.CPU), got, "bias %v: the CPU's", bias)
		require.Equal(t, 2+1, two.matmulAdd, "bias %v: dw twice, dx in the second backward", bias)
		require.Equal(t, 2*btoi(bias), two.sumRowsAdd, "bias %v", bias)
		require.Equal(t, 2, one.linearGradAdd, "bias %v: one call per backward", bias)
		require.Equal(t, 1, one.matmulAdd, "bias %v: dx in the second backward", bias)
		require.Zero(t, one.sumRowsAdd, "bias %v", bias)

		// With kernels.LinearBackwardAdder the input's gradient comes in
		// the same call, bit for bit the same.
		var calls [2]int
		whole := linearBackwardCounter{linearGradCounter{&gradAccCounter{Backend: orig}}, &calls}
		kernels.Register(whole)
		gotWhole := run(dev)
		kernels.Register(orig)
		require.Equal(t, want, gotWhole, "bias %v: the whole backward in one call", bias)
		require.Equal(t, [2]int{1, 1}, calls, "bias %v: one LinearBackwardAdd, then one LinearBackwardAccumulate", bias)
		require.Zero(t, whole.linearGradAdd+whole.matmulAdd+whole.sumRowsAdd, "bias %v", bias)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fillCounter counts Fill launches over a backend (sim).
type fillCounter struct {
	kernels.Backend
	fills int
}

func (b *fillCounter) Fill(dst *tensor.Tensor, v float64) {
	b.fills++
	b.Backend.Fill(dst, v)
}

func (b *fillCounter) ChannelAxpy(dst, x, y, alpha *tensor.Tensor) {
	b.Backend.(kernels.ChannelAxpyer).ChannelAxpy(dst, x, y, alpha)
}

func (b *fillCounter) ChannelAxpyBackward(dy, ds, g, y, s *tensor.Tensor) {
	b.Backend.(kernels.ChannelAxpyer).ChannelAxpyBackward(dy, ds, g, y, s)
}

// TestStraightThroughSharesItsZero: StraightThrough's zero scale on a
// device is one shared constant, so its calls launch no Fill (its
// value is the host's, bit for bit), captured or not.
func TestStraightThroughSharesItsZero(t *testing.T) {
	dev := tensor.Sim(6)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	fc := &fillCounter{Backend: orig}
	kernels.Register(fc)
	on := func(v []float32) *tensor.Tensor {
		d, err := tensor.FromSlice(v, 2, 3).ToDevice(dev)
		require.NoError(t, err)
		return d
	}
	h, s := Param(on([]float32{1, 2, 3, 4, 5, 6})), Param(on([]float32{6, 5, 4, 3, 2, 1}))
	_, fused := kernels.Backend(fc).(kernels.ChannelAxpyer)
	require.True(t, fused, "the one-pass path is taken")
	for range 3 {
		out := StraightThrough(h, s)
		got, err := out.Value.ToDevice(tensor.CPU)
		require.NoError(t, err)
		require.Equal(t, []float32{1, 2, 3, 4, 5, 6}, got.F32(), "the host's value")
	}
	require.Zero(t, fc.fills, "no Fill for the zero scale")
	require.NoError(t, fc.BeginCapture())
	StraightThrough(h, s)
	_, err := fc.EndCapture()
	require.NoError(t, err)
	require.Zero(t, fc.fills, "no Fill in a capture")
}

// saCounter counts ScaleActAdd calls over a backend (sim).
type saCounter struct {
	kernels.Backend
	calls int
}

func (b *saCounter) ScaleActAdd(dst, x *tensor.Tensor, s float64, act kernels.UnaryOp, r *tensor.Tensor) {
	b.calls++
	b.Backend.(kernels.ScaleActAdder).ScaleActAdd(dst, x, s, act, r)
}

// TestScaleActAddMatchesOps: ScaleActAdd is Gelu(MulScalar(x, s)) + r
// bit for bit, with and without the scale and the residual: in
// inference one kernels.ScaleActAdder call on sim, with gradients the
// ops themselves (x's gradient the same as theirs), and on the CPU.
func TestScaleActAddMatchesOps(t *testing.T) {
	dev := tensor.Sim(6)
	orig := kernels.For(dev)
	t.Cleanup(func() { kernels.Register(orig) })
	rng := rand.New(rand.NewPCG(13, 14))
	vals := func(n int) []float32 { return randVals(rng, n) }
	xs, rs := vals(12), vals(12)
	run := func(d tensor.Device, fused bool, s float64, res, grad bool) (out, gx []float32) {
		on := func(v []float32) *tensor.Tensor {
			o, err := tensor.FromSlice(append([]float32(nil), v...), 3, 4).ToDevice(d)
			require.NoError(t, err)
			return o
		}
		x := Const(on(xs))
		if grad {
			x = Param(on(xs))
		}
		var r *Var
		if res {
			r = Const(on(rs))
		}
		var y *Var
		f := func() {
			if fused {
				y = ScaleActAdd(x, s, kernels.GeluErf, r)
				return
			}
			y = x
			if s != 1 {
				y = MulScalar(y, s)
			}
			y = Gelu(y)
			if r != nil {
				y = Add(y, r)
			}
		}
		if grad {
			f()
			Backward(SumAll(y))
		} else {
			InferenceMode(f)
		}
		h, err := y.Value.ToDevice(tensor.CPU)
		require.NoError(t, err)
		out = append([]float32(nil), h.F32()...)
		if grad {
			g, err := x.Grad.ToDevice(tensor.CPU)
			require.NoError(t, err)
			gx = append([]float32(nil), g.F32()...)
		}
		return out, gx
	}
	for _, s := range []float64{1, 0.5} {
		for _, res := range []bool{false, true} {
			for _, grad := range []bool{false, true} {
				wantY, wantG := run(tensor.CPU, false, s, res, grad)
				cpuY, cpuG := run(tensor.CPU, true, s, res, grad)
				require.Equal(t, wantY, cpuY)
				require.Equal(t, wantG, cpuG)
				cnt := &saCounter{Backend: orig}
				kernels.Register(cnt)
				gotY, gotG := run(dev, true, s, res, grad)
				kernels.Register(orig)
				require.Equal(t, wantY, gotY, "s %v residual %v grad %v", s, res, grad)
				require.Equal(t, wantG, gotG, "s %v residual %v grad %v", s, res, grad)
				want := 1
				if grad {
					want = 0 // the ops, with their backward
				}
				require.Equal(t, want, cnt.calls, "s %v residual %v grad %v", s, res, grad)
			}
		}
	}
}

// TestLinearActMatchesOps: LinearAct is act(Linear(x, w, b)) bit for
// bit — in inference, where the activation rides in the product's
// epilogue, and with gradients (x's, w's and b's the same) — for GELU
// and Tanh, on the CPU and on sim.
func TestLinearActMatchesOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	vals := func(n int) []float32 { return randVals(rng, n) }
	xs, ws, bs := vals(5*6), vals(4*6), vals(4)
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		for _, act := range []kernels.UnaryOp{kernels.GeluErf, kernels.Tanh} {
			for _, grad := range []bool{false, true} {
				run := func(fused bool) [][]float32 {
					on := func(v []float32, shape ...int) *Var {
						o, err := tensor.FromSlice(append([]float32(nil), v...), shape...).ToDevice(dev)
						require.NoError(t, err)
						if grad {
							return Param(o)
						}
						return Const(o)
					}
					x, w, b := on(xs, 5, 6), on(ws, 4, 6), on(bs, 4)
					var y *Var
					if fused {
						y = LinearAct(x, w, b, act)
					} else {
						l := Linear(x, w, b)
						out, mk := unaryForward("act", act, l)
						y = result("act", out, []*Var{l}, 2, mk)
					}
					host := func(v *tensor.Tensor) []float32 {
						h, err := v.ToDevice(tensor.CPU)
						require.NoError(t, err)
						return append([]float32(nil), h.F32()...)
					}
					res := [][]float32{host(y.Value)}
					if grad {
						Backward(SumAll(y))
						res = append(res, host(x.Grad), host(w.Grad), host(b.Grad))
					}
					return res
				}
				require.Equal(t, run(false), run(true), "%v %v grad %v", dev, act, grad)
			}
		}
	}
}

// randVals returns n standard normal float32 values drawn from rng.
func randVals(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// lnCounter counts kernels.LinearActLayerNormer calls over a backend.
type lnCounter struct {
	kernels.Backend
	calls *int
}

func (b lnCounter) LinearActLayerNorm(y, x, w, bias *tensor.Tensor, act kernels.UnaryOp, g, s *tensor.Tensor, eps float64) bool {
	*b.calls++
	return b.Backend.(kernels.LinearActLayerNormer).LinearActLayerNorm(y, x, w, bias, act, g, s, eps)
}

// TestLinearActLayerNorm: in inference LinearActLayerNorm is one call on
// a kernels.LinearActLayerNormer backend (the CPU and sim), bit for bit
// LinearAct then LayerNorm, with and without bias, gain and shift; with
// gradients it is those ops, and every parameter gets a gradient.
func TestLinearActLayerNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	vals := func(n int) []float32 { return randVals(rng, n) }
	xs, ws, bs, gs, ss := vals(5*7), vals(6*7), vals(6), vals(6), vals(6)
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(7)} {
		orig := kernels.For(dev)
		calls := 0
		kernels.Register(lnCounter{orig, &calls})
		t.Cleanup(func() { kernels.Register(orig) })
		on := func(v []float32, shape ...int) *Var {
			h, err := tensor.FromSlice(append([]float32(nil), v...), shape...).ToDevice(dev)
			require.NoError(t, err)
			return Param(h)
		}
		x, w, b, g, s := on(xs, 5, 7), on(ws, 6, 7), on(bs, 6), on(gs, 6), on(ss, 6)
		for _, affine := range []bool{true, false} {
			bb, gg, sh := b, g, s
			if !affine {
				bb, gg, sh = nil, nil, nil
			}
			var got, want *Var
			InferenceMode(func() {
				got = LinearActLayerNorm(x, w, bb, kernels.GeluErf, gg, sh, 1e-5)
				want = LayerNorm(LinearAct(x, w, bb, kernels.GeluErf), gg, sh, 1, 1e-5)
			})
			sameVars(t, "LinearActLayerNorm", got, want)
		}
		require.Equal(t, 2, calls, "%v: one call per inference forward", dev)
		y := LinearActLayerNorm(x, w, b, kernels.GeluErf, g, s, 1e-5)
		require.True(t, y.RequiresGrad())
		Backward(SumAll(Mul(y, y)))
		for i, p := range []*Var{x, w, b, g, s} {
			require.NotNil(t, p.Grad, "%v: parameter %d", dev, i)
		}
		require.Equal(t, 2, calls, "%v: not with gradients", dev)
		kernels.Register(orig)
	}
}

// TestLinearActLayerNorms: three encoders of one graph (rows, inputs and
// operands of their own, one without bias, gain or shift). In inference
// on sim they are one join, bit for bit LinearActLayerNorm each; on the
// CPU (no joiner), with gradients recorded, and for a single call, they
// are LinearActLayerNorm each, no join, and with gradients every
// operand gets one.
func TestLinearActLayerNorms(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	type shape struct {
		m, k, n int
		affine  bool
	}
	shapes := []shape{{4, 7, 6, true}, {12, 5, 6, true}, {12, 3, 6, false}}
	joins := kernels.For(tensor.Sim(0)).(interface{ Joins() int64 })
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		on := func(n int, dims ...int) *Var {
			h, err := tensor.FromSlice(randVals(rng, n), dims...).ToDevice(dev)
			require.NoError(t, err)
			return Param(h)
		}
		var calls []LinearActLayerNormCall
		for _, sh := range shapes {
			c := LinearActLayerNormCall{X: on(sh.m*sh.k, sh.m, sh.k), W: on(sh.n*sh.k, sh.n, sh.k), Act: kernels.GeluErf, Eps: 1e-5}
			if sh.affine {
				c.B, c.G, c.S = on(sh.n, sh.n), on(sh.n, sh.n), on(sh.n, sh.n)
			}
			calls = append(calls, c)
		}
		each := func(cs []LinearActLayerNormCall) []*Var {
			out := make([]*Var, len(cs))
			for i, c := range cs {
				out[i] = LinearActLayerNorm(c.X, c.W, c.B, c.Act, c.G, c.S, c.Eps)
			}
			return out
		}
		var got, want []*Var
		before := joins.Joins()
		InferenceMode(func() { want, got = each(calls), LinearActLayerNorms(calls) })
		joined := int64(0)
		if !dev.IsCPU() {
			joined = 1
		}
		require.Equal(t, before+joined, joins.Joins(), "%v: joins", dev)
		for i := range got {
			sameVars(t, "LinearActLayerNorms", got[i], want[i])
		}
		InferenceMode(func() { got = LinearActLayerNorms(calls[:1]) })
		require.Equal(t, before+joined, joins.Joins(), "%v: one call joins nothing", dev)
		sameVars(t, "LinearActLayerNorms of one call", got[0], want[0])

		got = LinearActLayerNorms(calls)
		require.Equal(t, before+joined, joins.Joins(), "%v: with gradients, no join", dev)
		for i := range got {
			require.True(t, got[i].RequiresGrad())
			closeVars(t, "LinearActLayerNorms with gradients", got[i], want[i])
		}
		Backward(Add(Add(SumAll(got[0]), SumAll(got[1])), SumAll(got[2])))
		for i, c := range calls {
			for j, p := range []*Var{c.X, c.W, c.B, c.G, c.S} {
				if p != nil {
					require.NotNil(t, p.Grad, "%v: call %d operand %d", dev, i, j)
				}
			}
		}
	}
}

// TestLinearActLayerNormsGathered: a call whose input is given as pieces
// (a node type's own features beside the mean of embedding rows over
// its edges, a row without edges among them) beside a plain call. In
// inference on sim they are one join, each output bit for bit
// LinearActLayerNorm of the gathered input written out, and one join of
// the input gathered first where gathered inputs are declined (sim's
// SetGatherIn(false)); on the CPU, and
// with gradients, each is LinearActLayerNorm of GatherConcat, and the
// gradients reach the features and the embedding table. A call with
// both or neither of X and Pieces panics.
func TestLinearActLayerNormsGathered(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	joins := kernels.For(tensor.Sim(0)).(interface{ Joins() int64 })
	src, dst := []int64{3, 0, 4, 1, 2, 2, 0, 1, 3, 4, 0}, []int64{0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11} // row 1 without edges
	for _, dev := range []tensor.Device{tensor.CPU, tensor.Sim(0)} {
		on := func(x *tensor.Tensor) *tensor.Tensor {
			d, err := x.ToDevice(dev)
			require.NoError(t, err)
			return d
		}
		p := func(n int, dims ...int) *Var { return Param(on(tensor.FromSlice(randVals(rng, n), dims...))) }
		rowPtr, order, err := kernels.BuildCSR(dst, 12)
		require.NoError(t, err)
		edges := &GraphEdges{Src: on(tensor.FromSlice(src, len(src))), Dst: on(tensor.FromSlice(dst, len(dst))),
			RowPtr: on(tensor.FromSlice(rowPtr, 13)), Order: on(tensor.FromSlice(order, len(src))), NumDst: 12}
		feats, table := p(12*3, 12, 3), p(5*4, 5, 4)
		calls := []LinearActLayerNormCall{
			{Pieces: []GatherPiece{{X: feats}, {X: table, Edges: edges}}, W: p(6*7, 6, 7), B: p(6, 6), Act: kernels.GeluErf, G: p(6, 6), S: p(6, 6), Eps: 1e-5},
			{X: p(4*5, 4, 5), W: p(6*5, 6, 5), Act: kernels.Relu, Eps: 1e-5},
		}
		each := func() []*Var {
			x := Concat([]*Var{feats, GatherMean(table, *edges)}, 1)
			c, d := calls[0], calls[1]
			return []*Var{LinearActLayerNorm(x, c.W, c.B, c.Act, c.G, c.S, c.Eps), LinearActLayerNorm(d.X, d.W, d.B, d.Act, d.G, d.S, d.Eps)}
		}
		var got, want []*Var
		InferenceMode(func() { want = each() })
		mid := joins.Joins()
		InferenceMode(func() { got = LinearActLayerNorms(calls) })
		joined := int64(1)
		if dev.IsCPU() {
			joined = 0
		}
		require.Equal(t, mid+joined, joins.Joins(), "%v: joins", dev)
		for i := range got {
			sameVars(t, fmt.Sprintf("%v: gathered call %d", dev, i), got[i], want[i])
		}
		if !dev.IsCPU() { // gathered inputs declined: one join of the inputs gathered first
			simBackend := kernels.For(dev).(interface{ SetGatherIn(bool) })
			simBackend.SetGatherIn(false)
			mid = joins.Joins()
			InferenceMode(func() { got = LinearActLayerNorms(calls) })
			simBackend.SetGatherIn(true)
			require.Equal(t, mid+1, joins.Joins(), "gathered inputs declined: one join")
			for i := range got {
				sameVars(t, fmt.Sprintf("gathered inputs declined: call %d", i), got[i], want[i])
			}
		}
		got = LinearActLayerNorms(calls)
		want = each()
		for i := range got {
			require.True(t, got[i].RequiresGrad())
			closeVars(t, "LinearActLayerNorms gathered, with gradients", got[i], want[i])
		}
		Backward(Add(SumAll(got[0]), SumAll(got[1])))
		require.NotNil(t, feats.Grad, "%v: the features' gradient", dev)
		require.NotNil(t, table.Grad, "%v: the table's gradient", dev)
		require.Panics(t, func() {
			LinearActLayerNorms([]LinearActLayerNormCall{{X: feats, Pieces: calls[0].Pieces, W: calls[0].W, Act: kernels.Relu}, calls[1]})
		})
		require.Panics(t, func() { LinearActLayerNorms([]LinearActLayerNormCall{{W: calls[0].W, Act: kernels.Relu}, calls[1]}) })
	}
}
