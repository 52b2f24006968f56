package autograd

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// CrossEntropy is the softmax cross-entropy of logits [N,C] against class
// indices target [N] (I64 or I32), with PyTorch's reduction, label
// smoothing and ignore-index options. The result is a scalar (shape [])
// for mean and sum, [N] for none. Under Autocast half logits are cast up
// to F32 and the loss is F32. target gets no gradient.
func CrossEntropy(logits *Var, target *tensor.Tensor, p kernels.CrossEntropyParams) *Var {
	return crossEntropy(logits, target, p, func(loss, lv, tv *tensor.Tensor, _ bool) *tensor.Tensor {
		backendOf(loss).CrossEntropy(loss, lv, tv, p)
		return nil
	})
}

// CrossEntropyCount is CrossEntropy with a reduced loss (mean or sum)
// that also keeps a trainer's running metrics on the device, in the same
// launch on a backend with kernels.CrossEntropyCounter (CUDA, for up to
// 256 rows): lossSum (F32, one element) gets lossSum + the loss, and acc
// (F32 [N]) 1 more for each row whose first maximum is its target (NaN
// counting as the maximum, as kernels.CountCorrect finds it). Elsewhere
// it runs CrossEntropy, Binary Add and CountCorrect; the results are the
// same bit for bit. The metrics are written by the forward pass; the
// loss and its gradient are CrossEntropy's.
func CrossEntropyCount(logits *Var, target *tensor.Tensor, p kernels.CrossEntropyParams, lossSum, acc *tensor.Tensor) *Var {
	if p.Reduction == kernels.ReduceNone {
		panic(fmt.Sprintf("autograd: cross_entropy_count: reduction none (logits shape %v): the running loss adds one reduced loss", logits.Shape()))
	}
	return crossEntropy(logits, target, p, func(loss, lv, tv *tensor.Tensor, grad bool) *tensor.Tensor {
		var dl *tensor.Tensor
		if grad {
			dl = alloc(lv, lv.DType(), lv.Shape()...)
		}
		return countForward(loss, lv, tv, p, lossSum, acc, dl)
	})
}

// countForward is CrossEntropyCount's forward: the loss and the metrics,
// with, when dl is not nil, the logits' gradient for a dloss of one
// written into it in the same launch where the backend can (dl
// returned; nil when it was not written).
func countForward(loss, lv, tv *tensor.Tensor, p kernels.CrossEntropyParams, lossSum, acc, dl *tensor.Tensor) *tensor.Tensor {
	be := backendOf(loss)
	if gc, ok := be.(kernels.CrossEntropyGradCounter); ok && dl != nil {
		if gc.CrossEntropyCountGrad(loss, lv, tv, p, lossSum, acc, dl) {
			return dl
		}
	}
	if cc, ok := be.(kernels.CrossEntropyCounter); ok {
		cc.CrossEntropyCount(loss, lv, tv, p, lossSum, acc)
		return nil
	}
	kernels.CrossEntropyCountOps(be, loss, lv, tv, p, lossSum, acc)
	return nil
}

// LinearCrossEntropyCount is CrossEntropyCount(Linear(x, w, b), …), a
// linear classifier head and its counted loss, with the same graph,
// values and gradients; on a backend with
// kernels.LinearCrossEntropyCounter (CUDA, for up to 256 rows of small
// heads) the logits, the loss, the metrics and the logits' gradient are
// one launch. Operands in F32 with a 2-D x and no Autocast take it;
// others run the two in turn.
func LinearCrossEntropyCount(x, w, b *Var, target *tensor.Tensor, p kernels.CrossEntropyParams, lossSum, acc *tensor.Tensor) *Var {
	if p.Reduction == kernels.ReduceNone {
		panic(fmt.Sprintf("autograd: linear_cross_entropy_count: reduction none (input shape %v): the running loss adds one reduced loss", x.Shape()))
	}
	o := prepLinear("linear", x, w, b)
	lc, ok := backendOf(o.wv).(kernels.LinearCrossEntropyCounter)
	f32 := o.x2.DType() == tensor.F32 && o.wv.DType() == tensor.F32 && (o.bv == nil || o.bv.DType() == tensor.F32)
	if !ok || !f32 || len(o.xs) != 2 {
		return CrossEntropyCount(o.record(matmulBiasT(o.x2, o.wv, o.bv, false, true, o.wv.DType()), false), target, p, lossSum, acc)
	}
	x2, bv := contig(o.x2), o.bv
	if bv != nil {
		bv = contig(bv)
	}
	// The logits are recorded unwritten: the forward below writes them
	// (the first thing that reads them is the cross-entropy's forward).
	logits := o.record(alloc(x2, tensor.F32, o.m, o.nOut), false)
	return crossEntropy(logits, target, p, func(loss, lv, tv *tensor.Tensor, grad bool) *tensor.Tensor {
		var dl *tensor.Tensor
		if grad {
			dl = alloc(lv, lv.DType(), lv.Shape()...)
		}
		if lc.LinearCrossEntropyCount(lv, loss, x2, o.wv, bv, tv, p, lossSum, acc, dl) {
			return dl
		}
		be := backendOf(lv)
		if bv != nil {
			be.MatMulBias(lv, x2, o.wv, bv, false, true)
		} else {
			be.MatMul(lv, x2, o.wv, false, true)
		}
		return countForward(loss, lv, tv, p, lossSum, acc, dl)
	})
}

// crossEntropy is CrossEntropy's checks, graph node and backward around
// forward, which writes the loss (allocated here) from the contiguous
// logits and target; grad tells it the logits take a gradient. forward
// may return the logits' gradient for a dloss of one, computed with the
// loss (kernels.CrossEntropyGradCounter): a backward seeded with the
// loss's shared one — Backward of the loss itself — then returns it
// without a launch, once; any other dloss, or a second backward, runs
// CrossEntropyBackward.
func crossEntropy(logits *Var, target *tensor.Tensor, p kernels.CrossEntropyParams, forward func(loss, lv, tv *tensor.Tensor, grad bool) *tensor.Tensor) *Var {
	checkFloat("cross_entropy", logits)
	checkIndex("cross_entropy", target)
	ls := logits.Shape()
	if len(ls) != 2 || target.Rank() != 1 || target.Shape()[0] != ls[0] {
		panic(fmt.Sprintf("autograd: cross_entropy: logits shape %v and target shape %v (want [N,C] and [N])", ls, target.Shape()))
	}
	if p.LabelSmoothing < 0 || p.LabelSmoothing >= 1 {
		panic(fmt.Sprintf("autograd: cross_entropy: label smoothing %v outside [0, 1) (logits shape %v)", p.LabelSmoothing, ls))
	}
	logits = fp32Inputs(logits)[0]
	lv, tv := contig(logits.Value), contig(target)
	var loss *tensor.Tensor
	if p.Reduction == kernels.ReduceNone {
		loss = alloc(lv, lv.DType(), ls[0])
	} else {
		loss = alloc(lv, lv.DType())
	}
	pre := forward(loss, lv, tv, needsGrad(logits))
	return resultWith("cross_entropy", loss, []*Var{logits}, 2, false, func(bufs *opBufs) backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			if pre != nil && g == scalarOne(loss) {
				// Once: the gradient may become a leaf's Grad, which
				// later backwards add into.
				bufs.grads[0], pre = pre, nil
				return bufs.grads[:1]
			}
			pre = nil
			dl := alloc(lv, lv.DType(), ls...)
			backendOf(dl).CrossEntropyBackward(dl, lv, tv, contig(g), p)
			bufs.grads[0] = dl
			return bufs.grads[:1]
		}
	})
}
