package autograd

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The norms compute in the widest dtype of their inputs; under Autocast
// half inputs are first cast up to F32, so the result is F32. Saved
// statistics are F32 (F64 for F64 inputs).

// statsDType is the dtype of saved mean/rstd for input dtype dt.
func statsDType(dt tensor.DType) tensor.DType {
	if dt == tensor.F64 {
		return tensor.F64
	}
	return tensor.F32
}

// affineVals returns w and b as contiguous [n] tensors (nil when absent).
func affineVals(w, b *Var, n int) (wv, bv *tensor.Tensor) {
	if w != nil {
		wv = reshapeT(w.Value, n)
	}
	if b != nil {
		bv = reshapeT(b.Value, n)
	}
	return wv, bv
}

// affineInputs lists x, w, b without the nil ones, and reports w's and b's
// positions (-1 when absent).
func affineInputs(x, w, b *Var) (in []*Var, wi, bi int) {
	in = []*Var{x}
	wi, bi = -1, -1
	if w != nil {
		wi = len(in)
		in = append(in, w)
	}
	if b != nil {
		bi = len(in)
		in = append(in, b)
	}
	return in, wi, bi
}

// normGrads allocates what a norm backward fills: dx shaped like x, and
// dw, db flat [n] (handed back reshaped like w and b). An entry stays nil
// when that input needs no gradient.
func normGrads(x, w, b *Var, xv, wv, bv *tensor.Tensor, nInputs, wi, bi, n int) (grads []*tensor.Tensor, dx, dw, db *tensor.Tensor) {
	grads = make([]*tensor.Tensor, nInputs)
	if needs(x) {
		dx = alloc(xv, xv.DType(), xv.Shape()...)
		grads[0] = dx
	}
	if wi >= 0 && needs(w) {
		dw = alloc(xv, wv.DType(), n)
		grads[wi] = dw.Reshape(w.Shape()...)
	}
	if bi >= 0 && needs(b) {
		db = alloc(xv, bv.DType(), n)
		grads[bi] = db.Reshape(b.Shape()...)
	}
	return grads, dx, dw, db
}

// normSaved counts the tensors a norm keeps for backward: x, mean, rstd
// and the weight when there is one.
func normSaved(wv *tensor.Tensor) int {
	if wv != nil {
		return 4
	}
	return 3
}

// checkAffine panics unless w and b (when non-nil) have shape want.
func checkAffine(op string, xs []int, w, b *Var, want []int) {
	for _, v := range []*Var{w, b} {
		if v != nil && !tensor.SameShape(v.Shape(), want) {
			panic(fmt.Sprintf("autograd: %s: weight/bias shape %v does not match input shape %v (want %v)", op, v.Shape(), xs, want))
		}
	}
}

// LayerNorm normalises x over its last normDims axes and applies w and b
// (shaped like those axes; either may be nil).
func LayerNorm(x, w, b *Var, normDims int, eps float64) *Var {
	checkFloat("layer_norm", x, w, b)
	xs := x.Shape()
	if normDims < 1 || normDims > len(xs) {
		panic(fmt.Sprintf("autograd: layer_norm: normDims %d out of range for input shape %v", normDims, xs))
	}
	normShape := xs[len(xs)-normDims:]
	checkAffine("layer_norm", xs, w, b, normShape)
	p := fp32Inputs(x, w, b)
	x, w, b = p[0], p[1], p[2]
	n := tensor.Numel(normShape)
	m := x.Value.Numel() / max(n, 1)
	xv := contig(x.Value)
	wv, bv := affineVals(w, b, n)
	sdt := statsDType(xv.DType())
	y := alloc(xv, xv.DType(), xs...)
	mean, rstd := alloc(xv, sdt, m), alloc(xv, sdt, m)
	backendOf(y).LayerNorm(y, mean, rstd, xv, wv, bv, n, eps)
	inputs, wi, bi := affineInputs(x, w, b)
	return result("layer_norm", y, inputs, normSaved(wv), func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			grads, dx, dw, db := normGrads(x, w, b, xv, wv, bv, len(inputs), wi, bi, n)
			backendOf(xv).LayerNormBackward(dx, dw, db, contig(g), xv, mean, rstd, wv, n)
			return grads
		}
	})
}

// GroupNorm normalises x [N,C,*] over groups of C/groups channels and
// applies the per-channel w and b ([C]; either may be nil).
func GroupNorm(x, w, b *Var, groups int, eps float64) *Var {
	return groupNorm(x, w, b, groups, eps, false)
}

// GroupNormRelu is Relu(GroupNorm(x, w, b, groups, eps)) with the ReLU
// folded into the group norm's normalising pass and its gradient into
// the group norm's backward, where the backend supports it
// (kernels.GroupNormReluer); otherwise it is the two ops. The values
// match the two ops' within rounding (the fused pass normalises with the
// statistics rounded as they are saved) and the backward rebuilds the
// ReLU's mask from x instead of keeping a separate ReLU node.
func GroupNormRelu(x, w, b *Var, groups int, eps float64) *Var {
	if _, ok := backendOf(x.Value).(kernels.GroupNormReluer); !ok {
		return Relu(GroupNorm(x, w, b, groups, eps))
	}
	return groupNorm(x, w, b, groups, eps, true)
}

func groupNorm(x, w, b *Var, groups int, eps float64, relu bool) *Var {
	checkFloat("group_norm", x, w, b)
	xs := x.Shape()
	if len(xs) < 2 || groups < 1 || xs[1]%groups != 0 {
		panic(fmt.Sprintf("autograd: group_norm: input shape %v cannot be split into %d groups", xs, groups))
	}
	c := xs[1]
	checkAffine("group_norm", xs, w, b, []int{c})
	p := fp32Inputs(x, w, b)
	x, w, b = p[0], p[1], p[2]
	xv := contig(x.Value)
	wv, bv := affineVals(w, b, c)
	sdt := statsDType(xv.DType())
	y := alloc(xv, xv.DType(), xs...)
	mean, rstd := alloc(xv, sdt, xs[0]*groups), alloc(xv, sdt, xs[0]*groups)
	if relu {
		backendOf(y).(kernels.GroupNormReluer).GroupNormRelu(y, mean, rstd, xv, wv, bv, groups, eps)
	} else {
		backendOf(y).GroupNorm(y, mean, rstd, xv, wv, bv, groups, eps)
	}
	inputs, wi, bi := affineInputs(x, w, b)
	saved := normSaved(wv)
	if relu && bv != nil {
		saved++ // the shift, from which the backward rebuilds the ReLU's mask
	}
	mk := func(bufs *opBufs) backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			grads, dx, dw, db := normGrads(x, w, b, xv, wv, bv, len(inputs), wi, bi, c)
			// The weight and bias gradients go straight into their Grad
			// where Backward offers it (kernels.ParamGradAccumulator).
			pa, acc := affineSinks(bufs, backendOf(xv), grads, &dw, &db, wi, bi)
			switch {
			case relu && acc:
				pa.GroupNormReluBackwardAdd(dx, dw, db, contig(g), xv, bv, mean, rstd, wv, groups)
			case relu:
				backendOf(xv).(kernels.GroupNormReluer).GroupNormReluBackward(dx, dw, db, contig(g), xv, bv, mean, rstd, wv, groups)
			case acc:
				pa.GroupNormBackwardAdd(dx, dw, db, contig(g), xv, mean, rstd, wv, groups)
			default:
				backendOf(xv).GroupNormBackward(dx, dw, db, contig(g), xv, mean, rstd, wv, groups)
			}
			return grads
		}
	}
	if relu {
		return resultWith("group_norm_relu", y, inputs, saved, true, mk)
	}
	return resultWith("group_norm", y, inputs, saved, true, mk)
}

// BatchNorm normalises x [N,C,*] per channel and applies w and b ([C];
// either may be nil). In training it uses the batch statistics and the
// kernel updates runMean and runVar in place (when non-nil) with
// momentum; in evaluation it uses runMean and runVar, which must then be
// given, and the gradient treats them as constants.
func BatchNorm(x, w, b *Var, runMean, runVar *tensor.Tensor, training bool, momentum, eps float64) *Var {
	return batchNorm(x, w, b, runMean, runVar, training, momentum, eps, false)
}

// BatchNormRelu is Relu(BatchNorm(x, w, b, ...)) — the same values, the
// same gradients and the same running-statistics update — with the ReLU
// folded into the batch norm's normalising pass and its gradient into
// the batch norm's backward passes, where the backend supports it
// (kernels.BatchNormReluer); otherwise it is the two ops. The backward
// rebuilds the ReLU's mask from x instead of keeping a separate ReLU
// node and its output.
func BatchNormRelu(x, w, b *Var, runMean, runVar *tensor.Tensor, training bool, momentum, eps float64) *Var {
	return batchNorm(x, w, b, runMean, runVar, training, momentum, eps, true)
}

func batchNorm(x, w, b *Var, runMean, runVar *tensor.Tensor, training bool, momentum, eps float64, relu bool) *Var {
	name := "batch_norm"
	if relu {
		name = "batch_norm_relu"
	}
	if relu {
		if _, ok := backendOf(x.Value).(kernels.BatchNormReluer); !ok {
			return Relu(BatchNorm(x, w, b, runMean, runVar, training, momentum, eps))
		}
	}
	checkFloat(name, x, w, b)
	xs := x.Shape()
	if len(xs) < 2 {
		panic(fmt.Sprintf("autograd: batch_norm: input shape %v, want [N,C,...]", xs))
	}
	c := xs[1]
	checkAffine("batch_norm", xs, w, b, []int{c})
	for _, r := range []*tensor.Tensor{runMean, runVar} {
		if r != nil && r.Numel() != c {
			panic(fmt.Sprintf("autograd: batch_norm: running statistics shape %v does not match input shape %v", r.Shape(), xs))
		}
	}
	if !training && (runMean == nil || runVar == nil) {
		panic(fmt.Sprintf("autograd: batch_norm: evaluation needs running statistics (input shape %v)", xs))
	}
	p := fp32Inputs(x, w, b)
	x, w, b = p[0], p[1], p[2]
	xv := contig(x.Value)
	wv, bv := affineVals(w, b, c)
	sdt := statsDType(xv.DType())
	y := alloc(xv, xv.DType(), xs...)
	mean, rstd := alloc(xv, sdt, c), alloc(xv, sdt, c)
	if relu {
		backendOf(y).(kernels.BatchNormReluer).BatchNormRelu(y, mean, rstd, xv, wv, bv, runMean, runVar, training, momentum, eps)
	} else {
		backendOf(y).BatchNorm(y, mean, rstd, xv, wv, bv, runMean, runVar, training, momentum, eps)
	}
	inputs, wi, bi := affineInputs(x, w, b)
	saved := normSaved(wv)
	if relu && bv != nil {
		saved++ // the shift, from which the backward rebuilds the ReLU's mask
	}
	mk := func(bufs *opBufs) backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			grads, dx, dw, db := normGrads(x, w, b, xv, wv, bv, len(inputs), wi, bi, c)
			pa, acc := affineSinks(bufs, backendOf(xv), grads, &dw, &db, wi, bi)
			switch {
			case relu && acc:
				pa.BatchNormReluBackwardAdd(dx, dw, db, contig(g), xv, bv, mean, rstd, wv, training)
			case relu:
				backendOf(xv).(kernels.BatchNormReluer).BatchNormReluBackward(dx, dw, db, contig(g), xv, bv, mean, rstd, wv, training)
			case acc:
				pa.BatchNormBackwardAdd(dx, dw, db, contig(g), xv, mean, rstd, wv, training)
			default:
				backendOf(xv).BatchNormBackward(dx, dw, db, contig(g), xv, mean, rstd, wv, training)
			}
			return grads
		}
	}
	if relu {
		return resultWith("batch_norm_relu", y, inputs, saved, true, mk)
	}
	return resultWith("batch_norm", y, inputs, saved, true, mk)
}

// affineSinks lets a batch norm's backward add its weight and bias
// gradients straight into their Grad (kernels.ParamGradAccumulator):
// when be has the capability and every affine gradient wanted (dw, db
// from normGrads, non-nil) has a sink, it points dw and db at the sinks,
// clears their entries in grads and reports true; otherwise it changes
// nothing.
func affineSinks(bufs *opBufs, be kernels.Backend, grads []*tensor.Tensor, dw, db **tensor.Tensor, wi, bi int) (kernels.ParamGradAccumulator, bool) {
	pa, ok := be.(kernels.ParamGradAccumulator)
	if !ok || (*dw == nil && *db == nil) {
		return nil, false
	}
	sink := func(t *tensor.Tensor, i int) *tensor.Tensor {
		if t == nil {
			return nil
		}
		if s := bufs.sink[i]; s != nil && s.DType() == t.DType() && s.Numel() == t.Numel() {
			return s.Reshape(t.Shape()...)
		}
		return nil
	}
	sw, sb := sink(*dw, wi), sink(*db, bi)
	if (*dw != nil && sw == nil) || (*db != nil && sb == nil) {
		return nil, false
	}
	if *dw != nil {
		*dw, grads[wi] = sw, nil
	}
	if *db != nil {
		*db, grads[bi] = sb, nil
	}
	return pa, true
}

// BatchNormReluMaxPool is MaxPool2d(BatchNormRelu(x, w, b, ...)) with a
// 2×2, stride-2 pool: the same values, gradients and running-statistics
// update, with the pool folded into the normalising pass where the
// backend supports it (kernels.BatchNormReluPooler), so that the
// full-size normalised activation is never written; otherwise it is the
// two ops. x must be [N, C, H, W] with H, W ≥ 2. The backward is fused
// the same way: the pool's gradient is spread plane by plane inside the
// batch norm's backward passes.
func BatchNormReluMaxPool(x, w, b *Var, runMean, runVar *tensor.Tensor, training bool, momentum, eps float64) *Var {
	const name = "batch_norm_relu_max_pool"
	pp := kernels.Pool2dParams{KernelH: 2, KernelW: 2}
	xs := x.Shape()
	if len(xs) != 4 || xs[2] < 2 || xs[3] < 2 {
		panic(fmt.Sprintf("autograd: %s: input shape %v, want [N,C,H,W] with H, W ≥ 2", name, xs))
	}
	be := backendOf(x.Value)
	pooler, ok := be.(kernels.BatchNormReluPooler)
	if _, relu := be.(kernels.BatchNormReluer); !ok || !relu {
		return MaxPool2d(BatchNormRelu(x, w, b, runMean, runVar, training, momentum, eps), pp)
	}
	checkFloat(name, x, w, b)
	c := xs[1]
	checkAffine(name, xs, w, b, []int{c})
	for _, r := range []*tensor.Tensor{runMean, runVar} {
		if r != nil && r.Numel() != c {
			panic(fmt.Sprintf("autograd: %s: running statistics shape %v does not match input shape %v", name, r.Shape(), xs))
		}
	}
	if !training && (runMean == nil || runVar == nil) {
		panic(fmt.Sprintf("autograd: %s: evaluation needs running statistics (input shape %v)", name, xs))
	}
	p := fp32Inputs(x, w, b)
	x, w, b = p[0], p[1], p[2]
	xv := contig(x.Value)
	wv, bv := affineVals(w, b, c)
	sdt := statsDType(xv.DType())
	pooled := alloc(xv, xv.DType(), xs[0], c, xs[2]/2, xs[3]/2)
	argmax := alloc(xv, tensor.I32, pooled.Shape()...)
	mean, rstd := alloc(xv, sdt, c), alloc(xv, sdt, c)
	pooler.BatchNormReluMaxPool2x2(pooled, argmax, mean, rstd, xv, wv, bv, runMean, runVar, training, momentum, eps)
	inputs, wi, bi := affineInputs(x, w, b)
	saved := normSaved(wv) + 1 // and the pool's indices
	if bv != nil {
		saved++ // the shift, from which the backward rebuilds the ReLU's mask
	}
	mk := func(bufs *opBufs) backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			grads, dx, dw, db := normGrads(x, w, b, xv, wv, bv, len(inputs), wi, bi, c)
			if pa, acc := affineSinks(bufs, be, grads, &dw, &db, wi, bi); acc {
				pa.BatchNormReluMaxPool2x2BackwardAdd(dx, dw, db, contig(g), argmax, xv, bv, mean, rstd, wv, training)
			} else {
				pooler.BatchNormReluMaxPool2x2Backward(dx, dw, db, contig(g), argmax, xv, bv, mean, rstd, wv, training)
			}
			return grads
		}
	}
	return resultWith("batch_norm_relu_max_pool", pooled, inputs, saved, true, mk)
}

// BatchNormEvalAffine returns batch norm's evaluation-mode affine map
// per channel, as constants (no gradient flows through it): scale =
// w·rsqrt(runVar + eps) and shift = b − runMean·scale, with w = 1 and
// b = 0 when nil. On a backend with kernels.BatchNormEvalAffiner and F32
// operands it is one launch; otherwise the five elementwise ops it
// stands for, which give the same values. It may run inside a captured
// region (a replay reads the running statistics of its own time).
func BatchNormEvalAffine(w, b *Var, runMean, runVar *tensor.Tensor, eps float64) (scale, shift *Var) {
	if f, ok := backendOf(runVar).(kernels.BatchNormEvalAffiner); ok && evalAffineFused(w, b, runMean, runVar) {
		var wt, bt *tensor.Tensor
		if w != nil {
			wt = w.Value
		}
		if b != nil {
			bt = b.Value
		}
		sc := alloc(runVar, runVar.DType(), runVar.Numel())
		sh := alloc(runVar, runVar.DType(), runVar.Numel())
		f.BatchNormEvalAffine(sc, sh, wt, bt, runMean, runVar, eps)
		return Const(sc), Const(sh)
	}
	NoGrad(func() {
		rstd := Rsqrt(AddScalar(Const(runVar), eps))
		scale = rstd
		if w != nil {
			scale = Mul(w, rstd)
		}
		shift = Neg(Mul(Const(runMean), scale))
		if b != nil {
			shift = Add(b, shift)
		}
	})
	return Detach(scale), Detach(shift)
}

// evalAffineFused reports whether BatchNormEvalAffine's operands suit
// the fused launch: all F32, contiguous, one-dimensional of one length.
func evalAffineFused(w, b *Var, runMean, runVar *tensor.Tensor) bool {
	ts := []*tensor.Tensor{runMean, runVar}
	for _, v := range []*Var{w, b} {
		if v != nil {
			ts = append(ts, v.Value)
		}
	}
	for _, t := range ts {
		if t == nil || t.DType() != tensor.F32 || !t.IsContiguous() || t.Rank() != 1 || t.Numel() != runVar.Numel() {
			return false
		}
	}
	return true
}
