package cpu

// Methods not yet implemented. Each one is moved out of this file into the
// file of its kernel family as it is written; the file is deleted when
// empty.

import (
	"github.com/esper-go/esper/kernels"
)

type T = kernels.T

func (be *Backend) Fill(dst *T, v float64) { panic("cpu: Fill not implemented yet") }

func (be *Backend) Copy(dst, src *T) { panic("cpu: Copy not implemented yet") }

func (be *Backend) Unary(op kernels.UnaryOp, dst, x *T) { panic("cpu: Unary not implemented yet") }

func (be *Backend) UnaryBackward(op kernels.UnaryOp, dx, x, y, dy *T) {
	panic("cpu: UnaryBackward not implemented yet")
}

func (be *Backend) Binary(op kernels.BinaryOp, dst, a, b *T) { panic("cpu: Binary not implemented yet") }

func (be *Backend) BinaryScalar(op kernels.BinaryOp, dst, a *T, s float64, swap bool) {
	panic("cpu: BinaryScalar not implemented yet")
}

func (be *Backend) Where(dst, cond, a, b *T) { panic("cpu: Where not implemented yet") }

func (be *Backend) Clamp(dst, x *T, lo, hi float64) { panic("cpu: Clamp not implemented yet") }

func (be *Backend) Reduce(op kernels.ReduceOp, dst, x *T, axes []int) {
	panic("cpu: Reduce not implemented yet")
}

func (be *Backend) ArgMax(dst, x *T, axis int) { panic("cpu: ArgMax not implemented yet") }

func (be *Backend) MatMul(dst, a, b *T, transA, transB bool) { panic("cpu: MatMul not implemented yet") }

func (be *Backend) Conv2d(dst, x, w, bias *T, p kernels.Conv2dParams) {
	panic("cpu: Conv2d not implemented yet")
}

func (be *Backend) Conv2dBackwardInput(dx, dy, w *T, p kernels.Conv2dParams) {
	panic("cpu: Conv2dBackwardInput not implemented yet")
}

func (be *Backend) Conv2dBackwardWeight(dw, x, dy *T, p kernels.Conv2dParams) {
	panic("cpu: Conv2dBackwardWeight not implemented yet")
}

func (be *Backend) MaxPool2d(dst, argmax, x *T, p kernels.Pool2dParams) {
	panic("cpu: MaxPool2d not implemented yet")
}

func (be *Backend) MaxPool2dBackward(dx, dy, argmax *T, p kernels.Pool2dParams) {
	panic("cpu: MaxPool2dBackward not implemented yet")
}

func (be *Backend) AvgPool2d(dst, x *T, p kernels.Pool2dParams) {
	panic("cpu: AvgPool2d not implemented yet")
}

func (be *Backend) AvgPool2dBackward(dx, dy *T, p kernels.Pool2dParams) {
	panic("cpu: AvgPool2dBackward not implemented yet")
}

func (be *Backend) Softmax(dst, x *T, axis int) { panic("cpu: Softmax not implemented yet") }

func (be *Backend) LogSoftmax(dst, x *T, axis int) { panic("cpu: LogSoftmax not implemented yet") }

func (be *Backend) SoftmaxBackward(dx, y, dy *T, axis int) {
	panic("cpu: SoftmaxBackward not implemented yet")
}

func (be *Backend) LogSoftmaxBackward(dx, y, dy *T, axis int) {
	panic("cpu: LogSoftmaxBackward not implemented yet")
}

func (be *Backend) CrossEntropy(loss, logits, target *T, p kernels.CrossEntropyParams) {
	panic("cpu: CrossEntropy not implemented yet")
}

func (be *Backend) CrossEntropyBackward(dlogits, logits, target, dloss *T, p kernels.CrossEntropyParams) {
	panic("cpu: CrossEntropyBackward not implemented yet")
}

func (be *Backend) LayerNorm(y, mean, rstd, x, w, b *T, n int, eps float64) {
	panic("cpu: LayerNorm not implemented yet")
}

func (be *Backend) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, n int) {
	panic("cpu: LayerNormBackward not implemented yet")
}

func (be *Backend) GroupNorm(y, mean, rstd, x, w, b *T, groups int, eps float64) {
	panic("cpu: GroupNorm not implemented yet")
}

func (be *Backend) GroupNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, groups int) {
	panic("cpu: GroupNormBackward not implemented yet")
}

func (be *Backend) BatchNorm(y, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64) {
	panic("cpu: BatchNorm not implemented yet")
}

func (be *Backend) BatchNormBackward(dx, dw, db, dy, x, saveMean, saveRstd, w *T, training bool) {
	panic("cpu: BatchNormBackward not implemented yet")
}

func (be *Backend) IndexSelect(dst, src *T, axis int, index *T) {
	panic("cpu: IndexSelect not implemented yet")
}

func (be *Backend) IndexAdd(dst *T, axis int, index, src *T) {
	panic("cpu: IndexAdd not implemented yet")
}

func (be *Backend) Gather(dst, src *T, axis int, index *T) { panic("cpu: Gather not implemented yet") }

func (be *Backend) ScatterAdd(dst *T, axis int, index, src *T) {
	panic("cpu: ScatterAdd not implemented yet")
}

func (be *Backend) SegmentReduce(op kernels.ReduceOp, dst, argmax, src, segIDs *T) {
	panic("cpu: SegmentReduce not implemented yet")
}

func (be *Backend) SegmentMaxBackward(dsrc, dy, argmax *T) {
	panic("cpu: SegmentMaxBackward not implemented yet")
}

func (be *Backend) SegmentSoftmax(dst, src, segIDs *T, numSegments int) {
	panic("cpu: SegmentSoftmax not implemented yet")
}

func (be *Backend) SegmentSoftmaxBackward(dx, y, dy, segIDs *T, numSegments int) {
	panic("cpu: SegmentSoftmaxBackward not implemented yet")
}

func (be *Backend) Concat(dst *T, srcs []*T, axis int) { panic("cpu: Concat not implemented yet") }

func (be *Backend) Pad(dst, x *T, pads []int, value float64) { panic("cpu: Pad not implemented yet") }

func (be *Backend) Dropout(dst, mask, x, state *T, p float64) {
	panic("cpu: Dropout not implemented yet")
}

func (be *Backend) ForeachNorm(dst *T, xs []*T) { panic("cpu: ForeachNorm not implemented yet") }

func (be *Backend) ForeachScale(xs []*T, s *T) { panic("cpu: ForeachScale not implemented yet") }

func (be *Backend) ForeachAxpy(ys, xs []*T, alpha float64) {
	panic("cpu: ForeachAxpy not implemented yet")
}

func (be *Backend) Increment(counter, skip *T) { panic("cpu: Increment not implemented yet") }

func (be *Backend) SGDStep(param, grad, mom, hyper, foundInf *T, o kernels.SGDOptions) {
	panic("cpu: SGDStep not implemented yet")
}

func (be *Backend) AdamWStep(param, grad, m, v, hyper, foundInf *T, o kernels.AdamWOptions) {
	panic("cpu: AdamWStep not implemented yet")
}

func (be *Backend) UnscaleCheck(xs []*T, invScale, foundInf *T) {
	panic("cpu: UnscaleCheck not implemented yet")
}

func (be *Backend) ScalerUpdate(scale, tracker, foundInf *T, growth, backoff float64, interval int) {
	panic("cpu: ScalerUpdate not implemented yet")
}
