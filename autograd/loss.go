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
// 64 rows): lossSum (F32, one element) gets lossSum + the loss, and acc
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
		be := backendOf(loss)
		if gc, ok := be.(kernels.CrossEntropyGradCounter); ok && grad {
			dl := alloc(lv, lv.DType(), lv.Shape()...)
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
