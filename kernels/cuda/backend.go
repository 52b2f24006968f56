//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Backend is the CUDA implementation of kernels.Backend over one Device.
// Every method checks its operands and enqueues its kernels on the
// device's stream, or panics with a "cuda: <Op>: ..." message naming the
// op and the shapes on misuse, as the CPU backend does. An operation or
// dtype the device has no kernel for is such a panic too: there is no
// silent CPU fallback (ARCHITECTURE.md).
//
// Capture maps onto the stream's capture: between BeginCapture and
// EndCapture nothing runs, the launches are recorded into a CUDA graph,
// and the kernels.Graph that EndCapture returns replays them with one
// graph launch. A capture belongs to the goroutine that began it.
type Backend struct {
	d    *Device
	prec atomic.Int32 // Precision of F32 matmuls and convolutions
}

var (
	_ kernels.Backend        = (*Backend)(nil)
	_ kernels.ForeachStepper = (*Backend)(nil)
)

// T is the tensor type of kernels.Backend's methods.
type T = kernels.T

// NewBackend opens CUDA device ordinal (see Open) and returns its
// backend. It does not register it; call Register for that.
func NewBackend(ordinal int) (*Backend, error) {
	d, err := Open(ordinal)
	if err != nil {
		return nil, err
	}
	return &Backend{d: d}, nil
}

// Register makes b the backend of tensors on tensor.KindCUDA
// (kernels.Register), so that autograd, nn and optim run on it.
func (b *Backend) Register() { kernels.Register(b) }

// CUDADevice returns the device b computes on.
func (b *Backend) CUDADevice() *Device { return b.d }

// must panics with err, the misuse message of the failed operation.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// Name implements kernels.Backend.
func (b *Backend) Name() string { return "cuda" }

// Device implements kernels.Backend.
func (b *Backend) Device() tensor.Device { return tensor.CUDA(b.d.ordinal) }

// precision is the F32 matmul precision set by SetMatmulPrecision.
func (b *Backend) precision() Precision { return Precision(b.prec.Load()) }

// Fill implements kernels.Backend (any dtype).
func (b *Backend) Fill(dst *T, v float64) { must(b.d.Fill(dst, v)) }

// Copy implements kernels.Backend (any dtypes, any strides, both on the
// device).
func (b *Backend) Copy(dst, src *T) { must(b.d.Copy(dst, src)) }

// Unary implements kernels.Backend (F32, BF16).
func (b *Backend) Unary(op kernels.UnaryOp, dst, x *T) { must(b.d.Unary(op, dst, x)) }

// UnaryBackward implements kernels.Backend (F32, BF16).
func (b *Backend) UnaryBackward(op kernels.UnaryOp, dx, x, y, dy *T) {
	must(b.d.UnaryBackward(op, dx, x, y, dy))
}

// Binary implements kernels.Backend (F32, BF16; comparisons into Bool).
func (b *Backend) Binary(op kernels.BinaryOp, dst, x, y *T) { must(b.d.Binary(op, dst, x, y)) }

// BinaryScalar implements kernels.Backend.
func (b *Backend) BinaryScalar(op kernels.BinaryOp, dst, x *T, s float64, swap bool) {
	must(b.d.BinaryScalar(op, dst, x, s, swap))
}

// Where implements kernels.Backend.
func (b *Backend) Where(dst, cond, x, y *T) { must(b.d.Where(dst, cond, x, y)) }

// Clamp implements kernels.Backend.
func (b *Backend) Clamp(dst, x *T, lo, hi float64) { must(b.d.Clamp(dst, x, lo, hi)) }

// Reduce implements kernels.Backend.
func (b *Backend) Reduce(op kernels.ReduceOp, dst, x *T, axes []int) {
	must(b.d.Reduce(op, dst, x, axes))
}

// ArgMax implements kernels.Backend.
func (b *Backend) ArgMax(dst, x *T, axis int) { must(b.d.ArgMax(dst, x, axis)) }

// CountCorrect implements kernels.Backend.
func (b *Backend) CountCorrect(acc, logits, target *T) { must(b.d.CountCorrect(acc, logits, target)) }

// MatMul implements kernels.Backend (F32 in the set precision, BF16 with
// fp32 accumulation; a, b and dst of one dtype).
func (b *Backend) MatMul(dst, x, y *T, transA, transB bool) {
	must(b.d.MatMul(dst, x, y, transA, transB, b.precision()))
}

// MatMulBias implements kernels.Backend.
func (b *Backend) MatMulBias(dst, x, y, bias *T, transA, transB bool) {
	must(b.d.MatMulBias(dst, x, y, bias, transA, transB, b.precision()))
}

// MatMulBiasAct implements kernels.Backend.
func (b *Backend) MatMulBiasAct(dst, x, y, bias *T, act kernels.UnaryOp, transA, transB bool) {
	must(b.d.MatMulBiasAct(dst, x, y, bias, act, transA, transB, b.precision()))
}

// Conv2d implements kernels.Backend.
func (b *Backend) Conv2d(dst, x, w, bias *T, p kernels.Conv2dParams) {
	must(b.d.Conv2d(dst, x, w, bias, p, b.precision()))
}

// Conv2dBackwardInput implements kernels.Backend.
func (b *Backend) Conv2dBackwardInput(dx, dy, w *T, p kernels.Conv2dParams) {
	must(b.d.Conv2dBackwardInput(dx, dy, w, p, b.precision()))
}

// Conv2dBackwardWeight implements kernels.Backend.
func (b *Backend) Conv2dBackwardWeight(dw, x, dy *T, p kernels.Conv2dParams) {
	must(b.d.Conv2dBackwardWeight(dw, x, dy, p, b.precision()))
}

// MaxPool2d implements kernels.Backend.
func (b *Backend) MaxPool2d(dst, argmax, x *T, p kernels.Pool2dParams) {
	must(b.d.MaxPool2d(dst, argmax, x, p))
}

// MaxPool2dBackward implements kernels.Backend.
func (b *Backend) MaxPool2dBackward(dx, dy, argmax *T, p kernels.Pool2dParams) {
	must(b.d.MaxPool2dBackward(dx, dy, argmax, p))
}

// AvgPool2d implements kernels.Backend.
func (b *Backend) AvgPool2d(dst, x *T, p kernels.Pool2dParams) { must(b.d.AvgPool2d(dst, x, p)) }

// AvgPool2dBackward implements kernels.Backend.
func (b *Backend) AvgPool2dBackward(dx, dy *T, p kernels.Pool2dParams) {
	must(b.d.AvgPool2dBackward(dx, dy, p))
}

// Softmax implements kernels.Backend.
func (b *Backend) Softmax(dst, x *T, axis int) { must(b.d.SoftmaxAxis(dst, x, axis, false)) }

// LogSoftmax implements kernels.Backend.
func (b *Backend) LogSoftmax(dst, x *T, axis int) { must(b.d.SoftmaxAxis(dst, x, axis, true)) }

// SoftmaxBackward implements kernels.Backend.
func (b *Backend) SoftmaxBackward(dx, y, dy *T, axis int) {
	must(b.d.SoftmaxBackwardAxis(dx, y, dy, axis, false))
}

// LogSoftmaxBackward implements kernels.Backend.
func (b *Backend) LogSoftmaxBackward(dx, y, dy *T, axis int) {
	must(b.d.SoftmaxBackwardAxis(dx, y, dy, axis, true))
}

// CrossEntropy implements kernels.Backend (F32 loss; a target out of
// range gives NaN where the CPU panics).
func (b *Backend) CrossEntropy(loss, logits, target *T, p kernels.CrossEntropyParams) {
	must(b.d.CrossEntropy(loss, logits, target, p))
}

// CrossEntropyBackward implements kernels.Backend.
func (b *Backend) CrossEntropyBackward(dlogits, logits, target, dloss *T, p kernels.CrossEntropyParams) {
	must(b.d.CrossEntropyBackward(dlogits, logits, target, dloss, p))
}

// LayerNorm implements kernels.Backend.
func (b *Backend) LayerNorm(y, mean, rstd, x, w, bias *T, n int, eps float64) {
	must(b.d.LayerNorm(y, mean, rstd, x, w, bias, n, eps))
}

// LayerNormBackward implements kernels.Backend.
func (b *Backend) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, n int) {
	must(b.d.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w, n))
}

// GroupNorm implements kernels.Backend.
func (b *Backend) GroupNorm(y, mean, rstd, x, w, bias *T, groups int, eps float64) {
	must(b.d.GroupNorm(y, mean, rstd, x, w, bias, groups, eps))
}

// GroupNormBackward implements kernels.Backend.
func (b *Backend) GroupNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, groups int) {
	must(b.d.GroupNormBackward(dx, dw, db, dy, x, mean, rstd, w, groups))
}

// BatchNorm implements kernels.Backend.
func (b *Backend) BatchNorm(y, saveMean, saveRstd, x, w, bias, runMean, runVar *T, training bool, momentum, eps float64) {
	must(b.d.BatchNorm(y, saveMean, saveRstd, x, w, bias, runMean, runVar, training, momentum, eps))
}

// BatchNormBackward implements kernels.Backend.
func (b *Backend) BatchNormBackward(dx, dw, db, dy, x, saveMean, saveRstd, w *T, training bool) {
	must(b.d.BatchNormBackward(dx, dw, db, dy, x, saveMean, saveRstd, w, training))
}

// IndexSelect implements kernels.Backend (any dtype).
func (b *Backend) IndexSelect(dst, src *T, axis int, index *T) {
	must(b.d.IndexSelect(dst, src, axis, index))
}

// IndexAdd implements kernels.Backend (F32).
func (b *Backend) IndexAdd(dst *T, axis int, index, src *T) {
	must(b.d.IndexAdd(dst, axis, index, src))
}

// Gather implements kernels.Backend (any dtype).
func (b *Backend) Gather(dst, src *T, axis int, index *T) { must(b.d.Gather(dst, src, axis, index)) }

// ScatterAdd implements kernels.Backend (F32).
func (b *Backend) ScatterAdd(dst *T, axis int, index, src *T) {
	must(b.d.ScatterAdd(dst, axis, index, src))
}

// SegmentReduce implements kernels.Backend.
func (b *Backend) SegmentReduce(op kernels.ReduceOp, dst, argmax, src, segIDs *T) {
	must(b.d.SegmentReduce(op, dst, argmax, src, segIDs))
}

// SegmentMaxBackward implements kernels.Backend.
func (b *Backend) SegmentMaxBackward(dsrc, dy, argmax *T) {
	must(b.d.SegmentMaxBackward(dsrc, dy, argmax))
}

// SegmentSoftmax implements kernels.Backend.
func (b *Backend) SegmentSoftmax(dst, src, segIDs *T, numSegments int) {
	must(b.d.SegmentSoftmax(dst, src, segIDs, numSegments))
}

// SegmentSoftmaxBackward implements kernels.Backend.
func (b *Backend) SegmentSoftmaxBackward(dx, y, dy, segIDs *T, numSegments int) {
	must(b.d.SegmentSoftmaxBackward(dx, y, dy, segIDs, numSegments))
}

// Concat implements kernels.Backend.
func (b *Backend) Concat(dst *T, srcs []*T, axis int) { must(b.d.Concat(dst, srcs, axis)) }

// Pad implements kernels.Backend.
func (b *Backend) Pad(dst, x *T, pads []int, value float64) { must(b.d.Pad(dst, x, pads, value)) }

// Dropout implements kernels.Backend.
func (b *Backend) Dropout(dst, mask, x, state *T, p float64) {
	must(b.d.Dropout(dst, mask, x, state, p))
}

// ForeachNorm implements kernels.Backend (F32 tensors).
func (b *Backend) ForeachNorm(dst *T, xs []*T) { must(b.d.ForeachNorm(dst, xs)) }

// ForeachScale implements kernels.Backend (F32 tensors, F32 factor).
func (b *Backend) ForeachScale(xs []*T, s *T) { must(b.d.ForeachScale(xs, s)) }

// ForeachAxpy implements kernels.Backend (F32 tensors).
func (b *Backend) ForeachAxpy(ys, xs []*T, alpha float64) { must(b.d.ForeachAxpy(ys, xs, alpha)) }

// Increment implements kernels.Backend.
func (b *Backend) Increment(counter, skip *T) { must(b.d.Increment(counter, skip)) }

// SGDStep implements kernels.Backend (F32 arenas).
func (b *Backend) SGDStep(param, grad, mom, hyper, foundInf *T, o kernels.SGDOptions) {
	must(b.d.SGDStep(param, grad, mom, hyper, foundInf, o))
}

// AdamWStep implements kernels.Backend (F32 arenas).
func (b *Backend) AdamWStep(param, grad, m, v, hyper, foundInf *T, o kernels.AdamWOptions) {
	must(b.d.AdamWStep(param, grad, m, v, hyper, foundInf, o))
}

// ForeachSGDStep implements kernels.ForeachStepper (F32 lists): one
// multi-tensor launch for the whole list (Device.ForeachSGDStep).
func (b *Backend) ForeachSGDStep(params, grads, moms []*T, hyper, foundInf *T, o kernels.SGDOptions) {
	must(b.d.ForeachSGDStep(params, grads, moms, hyper, foundInf, o))
}

// ForeachAdamWStep implements kernels.ForeachStepper (F32 lists): one
// multi-tensor launch for the whole list (Device.ForeachAdamWStep).
func (b *Backend) ForeachAdamWStep(params, grads, ms, vs []*T, hyper, foundInf *T, o kernels.AdamWOptions) {
	must(b.d.ForeachAdamWStep(params, grads, ms, vs, hyper, foundInf, o))
}

// UnscaleCheck implements kernels.Backend (F32).
func (b *Backend) UnscaleCheck(xs []*T, invScale, foundInf *T) {
	must(b.d.UnscaleCheck(xs, invScale, foundInf))
}

// ScalerUpdate implements kernels.Backend.
func (b *Backend) ScalerUpdate(scale, tracker, foundInf *T, growth, backoff float64, interval int) {
	must(b.d.ScalerUpdate(scale, tracker, foundInf, growth, backoff, interval))
}

// BeginCapture implements kernels.Backend: the stream enters capture
// mode (Device.BeginCapture), for the calling goroutine.
func (b *Backend) BeginCapture() error { return b.d.BeginCapture() }

// EndCapture implements kernels.Backend: the captured launches become a
// CUDA graph, which the returned kernels.Graph replays.
func (b *Backend) EndCapture() (kernels.Graph, error) {
	g, err := b.d.EndCapture()
	if err != nil {
		return nil, err
	}
	return backendGraph{g}, nil
}

// Capturing implements kernels.Backend.
func (b *Backend) Capturing() bool { return b.d.Capturing() }

// ErrSyncInCapture is returned by Synchronize during a capture, where
// waiting for the stream would invalidate the capture.
var ErrSyncInCapture = errors.New("cuda: Synchronize during a graph capture")

// Synchronize implements kernels.Backend: it waits for the stream.
func (b *Backend) Synchronize() error {
	if b.d.Capturing() {
		return ErrSyncInCapture
	}
	return b.d.Synchronize()
}

// SetMatmulPrecision implements kernels.Backend: the cuBLAS arithmetic
// of F32 MatMul and Conv2d (Highest fp32, High TF32, Medium bf16).
func (b *Backend) SetMatmulPrecision(p kernels.Precision) {
	switch p {
	case kernels.Highest:
		b.prec.Store(int32(Highest))
	case kernels.High:
		b.prec.Store(int32(High))
	case kernels.Medium:
		b.prec.Store(int32(Medium))
	default:
		panic(fmt.Sprintf("cuda: SetMatmulPrecision: unknown precision %d", p))
	}
}

// backendGraph is a captured Graph as a kernels.Graph.
type backendGraph struct{ g *Graph }

// Replay implements kernels.Graph: one graph launch on the stream. A
// failed launch panics (kernels.Graph.Replay returns nothing).
func (g backendGraph) Replay() { must(g.g.Replay()) }

// Len implements kernels.Graph: the graph's node count.
func (g backendGraph) Len() int { return g.g.Nodes() }
