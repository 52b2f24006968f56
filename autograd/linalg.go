package autograd

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// MatMul returns a·b for rank-2 or batched rank-3 operands; a rank-2
// operand broadcasts over the other's batch. Under Autocast the operands
// are cast to the autocast dtype and so is the result.
func MatMul(a, b *Var) *Var { return MatMulT(a, b, false, false) }

// MatMulT returns op(a)·op(b), where op transposes the last two axes of an
// operand whose flag is set.
func MatMulT(a, b *Var, transA, transB bool) *Var {
	checkFloat("matmul", a, b)
	matmulShape("matmul", a.Shape(), b.Shape(), transA, transB)
	p := lowPrecisionInputs(a, b)
	a, b = p[0], p[1]
	av, bv := contig(a.Value), contig(b.Value)
	out := matmulT(av, bv, transA, transB, av.DType())
	return result("matmul", out, []*Var{a, b}, 2, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			g = contig(g)
			dt := av.DType()
			var da, db *tensor.Tensor
			if needs(a) {
				if !transA {
					da = matmulT(g, bv, false, !transB, dt) // G·op(B)ᵀ
				} else {
					da = matmulT(bv, g, transB, true, dt) // op(B)·Gᵀ
				}
				da = sumTo(da, av.Shape())
			}
			if needs(b) {
				if !transB {
					db = matmulT(av, g, !transA, false, dt) // op(A)ᵀ·G
				} else {
					db = matmulT(g, av, true, transA, dt) // Gᵀ·op(A)
				}
				db = sumTo(db, bv.Shape())
			}
			return []*tensor.Tensor{da, db}
		}
	})
}

// Linear returns x·wᵀ + b for x [..., in], w [out, in] and b [out] (or
// nil): the leading axes of x are flattened for one matmul and restored
// in the result [..., out]. Under Autocast all three are cast to the
// autocast dtype and so is the result.
func Linear(x, w, b *Var) *Var { return linear("linear", x, w, b, false) }

// LinearRelu returns relu(x·wᵀ + b), Linear followed by Relu with the
// activation applied in the product's epilogue (kernels.Backend
// MatMulBiasAct): one pass over the output instead of two, and one
// tensor instead of two. Values and gradients are bitwise those of
// Relu(Linear(x, w, b)).
func LinearRelu(x, w, b *Var) *Var { return linear("linear_relu", x, w, b, true) }

// linear is Linear, with the ReLU fused when relu is set.
func linear(name string, x, w, b *Var, relu bool) *Var {
	o := prepLinear(name, x, w, b)
	var out2 *tensor.Tensor
	if relu {
		out2 = matmulBiasActT(o.x2, o.wv, o.bv, kernels.Relu, false, true, o.wv.DType())
	} else {
		out2 = matmulBiasT(o.x2, o.wv, o.bv, false, true, o.wv.DType())
	}
	return o.record(out2, relu)
}

// linearOperands are a linear layer's checked operands, cast under
// Autocast: x flattened to x2 [m, in], w's value wv (contiguous) and
// b's bv (nil without a bias).
type linearOperands struct {
	x, w, b    *Var
	x2, wv, bv *tensor.Tensor
	xs         []int
	m, nOut    int
	// sum, when set (linearAdd), is the Var the product was added into:
	// the op's last input (after b, when b is set), whose gradient is
	// the output's.
	sum *Var
}

// prepLinear checks and prepares a linear layer's operands (name is the
// op's, for the messages).
func prepLinear(name string, x, w, b *Var) linearOperands {
	checkFloat(name, x, w, b)
	xs, ws := x.Shape(), w.Shape()
	if len(ws) != 2 || len(xs) == 0 || xs[len(xs)-1] != ws[1] {
		panic(fmt.Sprintf("autograd: %s: input shape %v does not match weight shape %v (want [..., in] and [out, in])", name, xs, ws))
	}
	if b != nil && (len(b.Shape()) != 1 || b.Shape()[0] != ws[0]) {
		panic(fmt.Sprintf("autograd: %s: bias shape %v does not match weight shape %v", name, b.Shape(), ws))
	}
	p := lowPrecisionInputs(x, w, b)
	o := linearOperands{x: p[0], w: p[1], b: p[2], xs: xs, nOut: ws[0]}
	in := ws[1]
	o.m = o.x.Value.Numel() / max(in, 1)
	o.x2 = reshapeT(o.x.Value, o.m, in)
	o.wv = contig(o.w.Value)
	if o.b != nil {
		o.bv = o.b.Value
	}
	return o
}

// record wraps out2 [m, out], the layer's output (with its ReLU when
// relu), as the op's Var [..., out] with the linear layer's backward.
func (o linearOperands) record(out2 *tensor.Tensor, relu bool) *Var {
	x, w, b, x2, wv, xs, m, nOut := o.x, o.w, o.b, o.x2, o.wv, o.xs, o.m, o.nOut
	var shapeBuf [4]int
	outShape := append(append(shapeBuf[:0], xs[:len(xs)-1]...), nOut)
	out := out2.Reshape(outShape...)
	inputs := []*Var{x, w, b}
	nIn := 3
	switch {
	case o.sum != nil && b != nil:
		inputs, nIn = append(inputs, o.sum), 4
	case o.sum != nil:
		inputs[2] = o.sum
	case b == nil:
		nIn = 2
	}
	mk := func(bufs *opBufs) backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			g2 := reshapeT(g, m, nOut)
			if relu {
				// relu' from the output: out > 0 exactly where the
				// pre-activation is.
				g2 = contig(g2)
				gm := alloc(g2, g2.DType(), m, nOut)
				backendOf(gm).UnaryBackward(kernels.Relu, gm, out2, out2, g2)
				g2 = gm
			}
			dt := wv.DType()
			var grads []*tensor.Tensor
			if nIn <= len(bufs.grads) {
				grads = bufs.grads[:nIn]
			} else {
				grads = make([]*tensor.Tensor, nIn)
			}
			if o.sum != nil {
				// The sum's gradient is the output's, handed on (the
				// last input, which no path below touches).
				grads[nIn-1] = g
			}
			// The weight and bias gradients go straight into their Grad
			// where Backward offers it and the backend can add there.
			acc, _ := backendOf(g2).(kernels.GradAccumulator)
			if acc != nil && (g2.DType() != dt || x2.DType() != dt || !g2.IsContiguous()) {
				acc = nil
			}
			sw, sb := bufs.sink[1], bufs.sink[2]
			if b == nil || sb == nil || sb.DType() != dt || !needs(b) {
				sb = nil
			}
			// The input's gradient goes into the sum Backward holds for
			// it where it offers one (the input read by other layers
			// too) and the backend can add there.
			var sx *tensor.Tensor
			if s := bufs.sink[0]; s != nil && acc != nil && s.DType() == dt && wv.IsContiguous() {
				sx = reshapeT(s, m, wv.Shape()[1])
			}
			if lb, ok := acc.(kernels.LinearBackwardAdder); ok && needs(x) && needs(w) && sw != nil && (sb != nil || b == nil || !needs(b)) &&
				x2.IsContiguous() && wv.IsContiguous() {
				// The input's gradient with the weight's and the bias's:
				// one launch for a small layer on a GPU.
				if sx != nil {
					lb.LinearBackwardAccumulate(sx, sw, sb, g2, x2, wv)
					return grads
				}
				dx := alloc(g2, dt, m, wv.Shape()[1])
				lb.LinearBackwardAdd(dx, sw, sb, g2, x2, wv)
				grads[0], bufs.fresh[0] = dx.Reshape(xs...), true
				return grads
			}
			if needs(x) {
				if sx != nil {
					acc.MatMulAdd(sx, g2, wv, false, false)
				} else {
					grads[0], bufs.fresh[0] = matmulT(g2, wv, false, false, dt).Reshape(xs...), true
				}
			}
			if la, ok := acc.(kernels.LinearGradAccumulator); ok && needs(w) && sw != nil && (sb != nil || b == nil || !needs(b)) {
				// Both (or the weight's alone) in one call: one launch
				// for a small layer on a GPU.
				la.LinearGradAdd(sw, sb, g2, x2)
				return grads
			}
			if needs(w) {
				if sw != nil && acc != nil {
					acc.MatMulAdd(sw, g2, x2, true, false)
				} else {
					grads[1] = matmulT(g2, x2, true, false, dt)
				}
			}
			if b != nil && needs(b) {
				if sb != nil && acc != nil {
					acc.SumRowsAdd(sb, g2)
				} else {
					grads[2] = reduceKeep(kernels.Sum, g2, axis0).Reshape(nOut)
				}
			}
			return grads
		}
	}
	switch {
	case o.sum != nil:
		return resultWith("linear_add", out, inputs[:nIn], 2, true, mk)
	case relu:
		return resultWith("linear_relu", out, inputs[:nIn], 2, true, mk)
	}
	return resultWith("linear", out, inputs[:nIn], 2, true, mk)
}

// linearAdd returns sum + x·wᵀ (+ b) for sum [N, out], x [N, in], w
// [out, in] and b [out] or nil, the product added into sum's tensor in
// place by ga's MatMulAdd, then the bias: where Add(Add(sum, Linear(x,
// w, nil)), b) takes a product and two additions forward and a column
// sum for b's gradient backward, this takes a product and an addition
// forward, and b's gradient comes in the call that computes w's (a
// linear layer's backward), with two tensors fewer.
//
// The caller owns sum's tensor: a sum of its own that nothing else reads
// or will read (LinearSum's running sum, each op that made it not
// reading its own output in its backward). The values are those of the
// product and the addition up to the order in which MatMulAdd rounds
// (see LinearSum), and the gradients are Linear's for x, w and b, the
// output's for sum. x, w, b and sum are contiguous, of one dtype, F32 or
// F64, with no autocast (linearAddTakes).
func linearAdd(sum, x, w, b *Var, ga kernels.GradAccumulator) *Var {
	o := prepLinear("linear_add", x, w, b)
	out2 := reshapeT(sum.Value, o.m, o.nOut)
	ga.MatMulAdd(out2, o.x2, o.wv, false, true)
	if o.bv != nil {
		// Then the bias, in place too: (sum + x·wᵀ) + b, as Add(Add(sum,
		// Linear(x, w, nil)), b) adds it; its gradient comes with the
		// weight's in the backward's one call where the bias has a sink.
		backendOf(out2).Binary(kernels.Add, out2, out2, o.bv)
	}
	o.sum = sum
	return o.record(out2, false)
}

// linearAddTakes returns the backend's GradAccumulator when linearAdd
// can add x·wᵀ (+ b; nil: none) into sum (see there), else nil.
func linearAddTakes(sum, x, w, b *Var) kernels.GradAccumulator {
	if AutocastDType() != tensor.Invalid {
		return nil
	}
	dt := sum.Value.DType()
	if (dt != tensor.F32 && dt != tensor.F64) || x.Value.DType() != dt || w.Value.DType() != dt || x.Value.Rank() != 2 ||
		!sum.Value.IsContiguous() || !x.Value.IsContiguous() || !w.Value.IsContiguous() || (b != nil && b.Value.DType() != dt) {
		return nil
	}
	ga, _ := backendOf(sum.Value).(kernels.GradAccumulator)
	return ga
}

// LinearActLayerNorm returns LayerNorm(LinearAct(x, w, b, act)) over
// the last axis with gain g and shift s ([out] each, nil: none): an
// encoder's Linear → act → LayerNorm. In inference (nothing records a
// gradient), for a 2-D F32 x on a backend with
// kernels.LinearActLayerNormer that takes it, it is one call (CUDA: one
// launch for a small layer); otherwise it is LinearAct then LayerNorm,
// with gradients. The values agree to rounding (on the CPU, bit for
// bit).
func LinearActLayerNorm(x, w, b *Var, act kernels.UnaryOp, g, s *Var, eps float64) *Var {
	if !needsGrad(x, w, b, g, s) && x.Value.Rank() == 2 && w.Value.Rank() == 2 && x.Value.DType() == tensor.F32 {
		if f, ok := backendOf(x.Value).(kernels.LinearActLayerNormer); ok {
			val := func(v *Var) *tensor.Tensor {
				if v == nil {
					return nil
				}
				return contig(v.Value)
			}
			xv := contig(x.Value)
			y := alloc(xv, tensor.F32, xv.Shape()[0], w.Shape()[0])
			if f.LinearActLayerNorm(y, xv, val(w), val(b), act, val(g), val(s), eps) {
				return Const(y)
			}
		}
	}
	return LayerNorm(LinearAct(x, w, b, act), g, s, 1, eps)
}

// LinearActLayerNormCall is one layer of LinearActLayerNorms: the
// operands of a LinearActLayerNorm, its input X or, where X is nil,
// GatherConcat(Pieces) (a node type's features beside an embedding).
type LinearActLayerNormCall struct {
	X      *Var
	Pieces []GatherPiece
	W, B   *Var
	Act    kernels.UnaryOp
	G, S   *Var
	Eps    float64
}

// like returns a tensor on the call's device (inputLike).
func (c LinearActLayerNormCall) like() *tensor.Tensor { return inputLike(c.X, c.Pieces) }

// LinearActLayerNorms is LinearActLayerNorm of each call: layers that do
// not depend on one another, such as a heterogeneous graph's node
// encoders. In inference, with every call's input 2-D F32 (or F32
// pieces GatherConcat would fuse) on one device that is a
// kernels.LinearActLayerNormsJoiner taking them all, they are one join
// (CUDA: one launch for up to four, a gathered input read inside it,
// never stored; where the backend declines gathered inputs, the join of
// the inputs gathered first); otherwise each is LinearActLayerNorm of its
// input. The results are the same bits either way. It panics on a call
// with both or neither of X and Pieces.
func LinearActLayerNorms(calls []LinearActLayerNormCall) []*Var {
	for i, c := range calls {
		if (c.X == nil) == (len(c.Pieces) == 0) {
			panic(fmt.Sprintf("autograd: linear_act_layer_norms: call %d needs X or Pieces, one of them", i))
		}
		checkPieces("linear_act_layer_norms", c.Pieces)
	}
	outs := make([]*Var, len(calls))
	input := inputsOnce(len(calls), func(i int) (*Var, []GatherPiece) { return calls[i].X, calls[i].Pieces })
	if lj, ok := joinableLayerNorms(calls); ok {
		val := func(v *Var) *tensor.Tensor {
			if v == nil {
				return nil
			}
			return contig(v.Value)
		}
		ks := make([]kernels.LinearActLNCall, len(calls))
		for i, c := range calls {
			ks[i] = kernels.LinearActLNCall{W: val(c.W), B: val(c.B), Act: c.Act, G: val(c.G), S: val(c.S), Eps: c.Eps}
			rows := 0
			if c.X != nil {
				ks[i].X = contig(c.X.Value)
				rows = c.X.Shape()[0]
			} else {
				ks[i].In = gatherInput(c.Pieces)
				rows = ks[i].In.Rows
			}
			ks[i].Y = alloc(c.like(), tensor.F32, rows, c.W.Shape()[0])
		}
		took := lj.LinearActLayerNorms(ks)
		if !took {
			// Declined (CUDA with ESPER_CUDA_GATHER_IN=off, say): asked
			// again with the gathered inputs written out first
			// (GatherConcat: a launch of their own).
			again := false
			for i, c := range calls {
				if c.X == nil {
					ks[i].X, ks[i].In, again = contig(input(i).Value), nil, true
				}
			}
			took = again && lj.LinearActLayerNorms(ks)
		}
		if took {
			for i, k := range ks {
				outs[i] = Const(k.Y)
			}
			return outs
		}
	}
	for i, c := range calls {
		outs[i] = LinearActLayerNorm(input(i), c.W, c.B, c.Act, c.G, c.S, c.Eps)
	}
	return outs
}

// joinableLayerNorms returns the joiner of LinearActLayerNorms' calls
// when they may be joined: two or more, no autocast, nothing recording
// a gradient, each x (or each piece's X, contiguous, every gathered
// piece's CSR given) and w 2-D, every operand F32 on one device whose
// backend joins.
func joinableLayerNorms(calls []LinearActLayerNormCall) (kernels.LinearActLayerNormsJoiner, bool) {
	if len(calls) < 2 || AutocastDType() != tensor.Invalid {
		return nil, false
	}
	lj, ok := backendOf(calls[0].like()).(kernels.LinearActLayerNormsJoiner)
	if !ok {
		return nil, false
	}
	dev := calls[0].like().Device()
	for _, c := range calls {
		if needsGrad(c.X, c.W, c.B, c.G, c.S) || c.W.Value.Rank() != 2 || (c.X != nil && c.X.Value.Rank() != 2) {
			return nil, false
		}
		if !gatherablePieces(c.Pieces, dev) {
			return nil, false
		}
		for _, v := range []*Var{c.X, c.W, c.B, c.G, c.S} {
			if v != nil && (v.Value.DType() != tensor.F32 || v.Value.Device() != dev) {
				return nil, false
			}
		}
	}
	return lj, true
}

// LinearAct returns act(Linear(x, w, b)), bitwise Linear followed by the
// activation's op. In inference (nothing needs a gradient) with F32 or
// F64 operands the activation is applied in the product's epilogue
// (kernels.Backend MatMulBiasAct): one launch instead of two. ReLU takes
// LinearRelu's fused path with gradients too.
func LinearAct(x, w, b *Var, act kernels.UnaryOp) *Var {
	if act == kernels.Relu {
		return LinearRelu(x, w, b)
	}
	if !needsGrad(x, w, b) {
		o := prepLinear("linear_act", x, w, b)
		if dt := o.wv.DType(); (dt == tensor.F32 || dt == tensor.F64) && o.x2.DType() == dt {
			// Nothing needs a gradient: record makes no node.
			return o.record(matmulBiasActT(o.x2, o.wv, o.bv, act, false, true, dt), false)
		}
	}
	y := Linear(x, w, b)
	out, mk := unaryForward("linear_act", act, y)
	return result("linear_act", out, []*Var{y}, 2, mk)
}
