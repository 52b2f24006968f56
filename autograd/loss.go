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
	backendOf(loss).CrossEntropy(loss, lv, tv, p)
	return resultWith("cross_entropy", loss, []*Var{logits}, 2, false, func(bufs *opBufs) backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			dl := alloc(lv, lv.DType(), ls...)
			backendOf(dl).CrossEntropyBackward(dl, lv, tv, contig(g), p)
			bufs.grads[0] = dl
			return bufs.grads[:1]
		}
	})
}
