package kernels

import "github.com/esper-go/esper/tensor"

// T is a shorthand used throughout the interface.
type T = tensor.Tensor

// Backend is the set of primitives a device provides. See the package doc
// for the conventions (caller-allocated outputs, contiguous inputs, panics
// on shape mismatch). Methods that take an optional tensor accept nil.
type Backend interface {
	// Name is a short identifier ("cpu", "cuda").
	Name() string
	// Device is the device whose tensors this backend computes on.
	Device() tensor.Device

	// --- memory -----------------------------------------------------

	// Fill sets every element of dst (contiguous) to v.
	Fill(dst *T, v float64)
	// Copy copies src into dst element by element in row-major order,
	// converting the dtype (float→int truncates, BF16 rounds to nearest
	// even). Both may be arbitrary strided views with equal element
	// counts; dst must not overlap src.
	Copy(dst, src *T)

	// --- elementwise ------------------------------------------------

	// Unary computes dst = op(x). Same shape; dst may alias x.
	Unary(op UnaryOp, dst, x *T)
	// UnaryBackward computes dx = dy * op'(x) for differentiable unary
	// ops (every op except Sign, whose derivative is zero). y = op(x) is
	// passed too so ops like Exp, Sigmoid and Tanh can reuse it; it may
	// be nil for ops that do not need it.
	UnaryBackward(op UnaryOp, dx, x, y, dy *T)
	// Binary computes dst = a op b with NumPy broadcasting: a and b may
	// be any views (Expand'ed views included) whose shapes broadcast to
	// dst's shape. Comparisons need a Bool dst.
	Binary(op BinaryOp, dst, a, b *T)
	// BinaryScalar computes dst = a op s, or s op a when swap is set.
	BinaryScalar(op BinaryOp, dst, a *T, s float64, swap bool)
	// Where computes dst = cond ? a : b with broadcasting (cond Bool).
	Where(dst, cond, a, b *T)
	// Clamp computes dst = min(max(x, lo), hi).
	Clamp(dst, x *T, lo, hi float64)

	// --- reductions -------------------------------------------------

	// Reduce reduces x over axes into dst, which has x's rank with the
	// reduced axes of size 1 (keep-dims form). LogSumExp is stable
	// (max-shifted). The order of accumulation is fixed.
	Reduce(op ReduceOp, dst, x *T, axes []int)
	// ArgMax writes the index (I64) of the first maximum along axis; dst
	// has x's rank with that axis of size 1.
	ArgMax(dst, x *T, axis int)
	// CountCorrect adds to acc (F32 [N]) 1 for each row i of logits
	// ([N, C]) whose first maximum (NaN counting as the maximum, as in
	// ArgMax) lies at index target[i] (I64 or I32 [N]), and 0 for the
	// others: ArgMax, the comparison and the accumulation in one launch,
	// for accuracy counters kept on the device.
	CountCorrect(acc, logits, target *T)

	// --- linear algebra ---------------------------------------------

	// MatMul computes dst = op(a)·op(b) where op transposes the last two
	// axes when the flag is set. a is [M,K] or [B,M,K] (as stored, before
	// op), b likewise; a rank-2 operand broadcasts over the batch. dst
	// is [M,N] or [B,M,N]. Accumulation is fp32 (fp64 for F64); BF16/F16
	// operands are supported (autocast) and dst may be F32 or the half
	// type.
	MatMul(dst, a, b *T, transA, transB bool)
	// MatMulBias is MatMul followed by dst[..., i, j] += bias[j] (bias
	// [N], any float dtype) in the product's epilogue, before dst is
	// stored: the fused forward of a linear layer. A nil bias is MatMul.
	MatMulBias(dst, a, b, bias *T, transA, transB bool)
	// MatMulBiasAct is MatMulBias followed by dst = act(dst) in the same
	// epilogue, before dst is stored: the fused forward of a linear layer
	// and its activation (act any UnaryOp; autograd.LinearRelu uses
	// Relu).
	MatMulBiasAct(dst, a, b, bias *T, act UnaryOp, transA, transB bool)

	// --- convolution and pooling (NCHW) ------------------------------

	// Conv2d computes dst[N,Cout,Ho,Wo] from x[N,Cin,H,W] and
	// w[Cout,Cin/groups,KH,KW], adding bias[Cout] when non-nil.
	Conv2d(dst, x, w, bias *T, p Conv2dParams)
	// Conv2dBackwardInput computes dx (overwritten) from dy and w.
	Conv2dBackwardInput(dx, dy, w *T, p Conv2dParams)
	// Conv2dBackwardWeight computes dw (overwritten) from x and dy.
	Conv2dBackwardWeight(dw, x, dy *T, p Conv2dParams)
	// MaxPool2d writes the window maxima and the flat H*W index (I32) of
	// each maximum within its input plane; padding never wins.
	MaxPool2d(dst, argmax, x *T, p Pool2dParams)
	// MaxPool2dBackward overwrites dx with dy routed to the argmax.
	MaxPool2dBackward(dx, dy, argmax *T, p Pool2dParams)
	// AvgPool2d averages each window.
	AvgPool2d(dst, x *T, p Pool2dParams)
	// AvgPool2dBackward overwrites dx.
	AvgPool2dBackward(dx, dy *T, p Pool2dParams)

	// --- softmax and losses ------------------------------------------

	// Softmax and LogSoftmax normalise along axis.
	Softmax(dst, x *T, axis int)
	LogSoftmax(dst, x *T, axis int)
	// SoftmaxBackward computes dx = y*(dy - Σ y·dy) from y = softmax(x).
	SoftmaxBackward(dx, y, dy *T, axis int)
	// LogSoftmaxBackward computes dx = dy - exp(y)·Σdy from y = logsoftmax(x).
	LogSoftmaxBackward(dx, y, dy *T, axis int)
	// CrossEntropy computes the softmax cross-entropy of logits [N,C]
	// against class indices target [N] (I64 or I32). loss is a scalar
	// (shape []) for mean/sum, [N] for none. Out-of-range targets panic.
	CrossEntropy(loss, logits, target *T, p CrossEntropyParams)
	// CrossEntropyBackward overwrites dlogits given dloss (shaped like
	// loss).
	CrossEntropyBackward(dlogits, logits, target, dloss *T, p CrossEntropyParams)

	// --- normalisation -----------------------------------------------

	// LayerNorm normalises x viewed as [M, n] over its last n elements
	// (n = product of the normalised trailing axes), then applies w and
	// b ([n], optional). mean and rstd ([M], F32, or F64 for F64 input)
	// are saved for the backward pass.
	LayerNorm(y, mean, rstd, x, w, b *T, n int, eps float64)
	// LayerNormBackward fills the non-nil of dx, dw, db (all
	// overwritten).
	LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, n int)
	// GroupNorm normalises x [N,C,*] over groups of C/groups channels;
	// w, b are [C] (optional); mean, rstd are [N*groups].
	GroupNorm(y, mean, rstd, x, w, b *T, groups int, eps float64)
	// GroupNormBackward fills the non-nil of dx, dw, db.
	GroupNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, groups int)
	// BatchNorm normalises x [N,C,*] per channel. In training it uses the
	// batch statistics and updates runMean/runVar (if non-nil) with
	// momentum (running = (1-m)·running + m·batch, unbiased variance);
	// in evaluation it uses the running statistics. saveMean/saveRstd
	// ([C]) receive the statistics used.
	BatchNorm(y, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64)
	// BatchNormBackward fills the non-nil of dx, dw, db. With training
	// false the statistics are constants.
	BatchNormBackward(dx, dw, db, dy, x, saveMean, saveRstd, w *T, training bool)

	// --- indexing and message passing -------------------------------

	// IndexSelect picks slices of src along axis by index ([K], I64 or
	// I32); dst has src's shape with that axis of size K. Embedding
	// lookup is IndexSelect on axis 0.
	IndexSelect(dst, src *T, axis int, index *T)
	// IndexAdd accumulates: dst.select(axis, index[k]) += src.select(axis, k).
	IndexAdd(dst *T, axis int, index, src *T)
	// Gather follows torch.gather: dst[i][j] = src[i][index[i][j]] for
	// axis 1 (and likewise for any axis); index has dst's shape.
	Gather(dst, src *T, axis int, index *T)
	// ScatterAdd follows torch.scatter_add_: dst[index[i][j]][j] +=
	// src[i][j] for axis 0 (likewise for any axis). dst accumulates.
	ScatterAdd(dst *T, axis int, index, src *T)
	// SegmentReduce reduces rows of src [E, F...] into dst [S, F...]
	// by segment id (segIDs [E], values in [0,S)) with Sum, Mean or Max.
	// Empty segments give 0. For Max, argmax (I64, dst's shape) receives
	// the winning row, or -1 for an empty segment; it is nil otherwise.
	SegmentReduce(op ReduceOp, dst, argmax, src, segIDs *T)
	// SegmentMaxBackward overwrites dsrc with dy routed to argmax.
	SegmentMaxBackward(dsrc, dy, argmax *T)
	// SegmentSoftmax normalises src [E, F...] with a softmax within each
	// segment, per feature (numSegments = S).
	SegmentSoftmax(dst, src, segIDs *T, numSegments int)
	// SegmentSoftmaxBackward computes dx = y*(dy - Σ_segment y·dy).
	SegmentSoftmaxBackward(dx, y, dy, segIDs *T, numSegments int)

	// --- shape ------------------------------------------------------

	// Concat joins srcs (any strides) along axis into dst.
	Concat(dst *T, srcs []*T, axis int)
	// Pad writes x into dst with pads[2i], pads[2i+1] elements of value
	// before and after axis i (len(pads) = 2·rank).
	Pad(dst, x *T, pads []int, value float64)

	// --- randomness -------------------------------------------------

	// Dropout zeroes elements with probability p and scales the rest by
	// 1/(1-p). mask (x's dtype) receives 0 or 1/(1-p). state is an I64
	// [2] tensor {seed, counter}: the mask is a pure function of
	// (seed, counter, element index), and the kernel advances counter,
	// so a captured step draws a fresh mask on every replay.
	Dropout(dst, mask, x, state *T, p float64)

	// --- multi-tensor (foreach) and optimizer primitives -----------

	// ForeachNorm writes the L2 norm of each xs[i] into dst[i] (dst F32
	// or F64, [len(xs)]). The global norm is the norm of dst.
	ForeachNorm(dst *T, xs []*T)
	// ForeachScale multiplies every xs[i] in place by the scalar tensor
	// s (one element; a tensor so the factor can change under replay).
	ForeachScale(xs []*T, s *T)
	// ForeachAxpy computes ys[i] += alpha·xs[i].
	ForeachAxpy(ys, xs []*T, alpha float64)
	// Increment adds one to counter (one element) unless skip (optional,
	// one element) is non-zero.
	Increment(counter, skip *T)
	// SGDStep updates param in place from grad and the momentum buffer
	// mom (nil when Momentum is 0), all the same shape (a flat arena in
	// practice). hyper is an F64 [2] tensor {lr, step} with step already
	// counting this update (the first update sees 1 and initialises
	// mom to the gradient, as PyTorch does). When foundInf (optional) is
	// non-zero nothing changes.
	SGDStep(param, grad, mom, hyper, foundInf *T, o SGDOptions)
	// AdamWStep is the fused AdamW update with bias corrections derived
	// from hyper {lr, step}; m and v are the moment buffers.
	AdamWStep(param, grad, m, v, hyper, foundInf *T, o AdamWOptions)
	// UnscaleCheck multiplies every xs[i] by invScale (one element) and
	// sets foundInf (one element, F32) to 1 if any value is NaN or Inf.
	UnscaleCheck(xs []*T, invScale, foundInf *T)
	// ScalerUpdate is the GradScaler state machine: on foundInf the scale
	// is multiplied by backoff and the tracker reset; otherwise the
	// tracker counts up and after interval clean steps the scale is
	// multiplied by growth and the tracker reset.
	ScalerUpdate(scale, tracker, foundInf *T, growth, backoff float64, interval int)

	// --- execution --------------------------------------------------

	// BeginCapture starts recording launches instead of running them.
	// Between BeginCapture and EndCapture no kernel executes: reading an
	// output during capture sees stale data (documented capture footgun).
	BeginCapture() error
	// EndCapture stops recording and returns the recorded graph.
	EndCapture() (Graph, error)
	// Capturing reports whether a capture is in progress.
	Capturing() bool
	// Synchronize waits for all queued work.
	Synchronize() error
	// SetMatmulPrecision selects the internal precision of F32 matmuls
	// and convolutions (CPU: always Highest).
	SetMatmulPrecision(p Precision)
}

// Graph is a recorded sequence of launches over static buffers.
type Graph interface {
	// Replay runs the recorded launches again, in order, on the same
	// buffers. It does not allocate.
	Replay()
	// Len is the number of recorded launches.
	Len() int
}

// Precision is the internal precision of F32 matmuls (PyTorch's
// set_float32_matmul_precision).
type Precision uint8

// Matmul precisions.
const (
	Highest Precision = iota // fp32
	High                     // TF32 on sm80+
	Medium                   // bf16
)

// ConvAffineActer is implemented by backends that fold a per-channel
// affine map and an activation into Conv2d's epilogue: Conv2dAffineAct
// computes Conv2d (no bias) followed by dst[n,o,...] =
// act(dst[n,o,...]·scale[o] + shift[o]), with scale and shift [Cout]. It
// is an optional capability (check with a type assertion); without it the
// same result takes separate passes. autograd.Conv2dAffineAct uses it for
// an eval-mode BatchNorm and ReLU after a convolution.
type ConvAffineActer interface {
	Conv2dAffineAct(dst, x, w, scale, shift *T, act UnaryOp, p Conv2dParams)
}

// ConvAffineActPooler is implemented by backends that fold a 2×2,
// stride-2 max pool (without indices) into Conv2dAffineAct: dst ([N,
// Cout, Ho/2, Wo/2]) is MaxPool2d of Conv2dAffineAct's output, which is
// never written — an eval-mode CNN block and its pool. It is an optional
// capability (check with a type assertion); there is no backward.
type ConvAffineActPooler interface {
	Conv2dAffineActMaxPool2x2(dst, x, w, scale, shift *T, act UnaryOp, p Conv2dParams)
}

// BatchNormReluer is implemented by backends that fold a ReLU into batch
// norm: BatchNormRelu is BatchNorm with y = max(y, +0) (NaN kept) in the
// pass that writes y, and BatchNormReluBackward is BatchNormBackward with
// dy taken as +0 wherever the fused output was not > 0 — the ReLU's
// gradient folded into the batch norm's two passes. The backward
// recomputes that mask from x, the saved statistics, w and b (the
// forward's shift; nil for none), rounding as its own forward did, so it
// never reads the output. It is an optional capability (check with a
// type assertion); without it the same result takes a ReLU pass each
// way. autograd.BatchNormRelu uses it for the training-mode CNN block.
type BatchNormReluer interface {
	BatchNormRelu(y, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64)
	BatchNormReluBackward(dx, dw, db, dy, x, b, saveMean, saveRstd, w *T, training bool)
}

// GroupNormReluer is implemented by backends that fold a ReLU into group
// norm, as BatchNormReluer does for batch norm: GroupNormRelu is
// GroupNorm with y = max(y, +0) (NaN kept) in the pass that writes y, and
// GroupNormReluBackward is GroupNormBackward with dy taken as +0 wherever
// the fused output was not > 0, the mask rebuilt from x, the saved
// statistics, w and b (the forward's shift; nil for none) as the forward
// rounded it. It is an optional capability (check with a type
// assertion); autograd.GroupNormRelu uses it for the seeds' GroupNorm →
// ReLU.
type GroupNormReluer interface {
	GroupNormRelu(y, mean, rstd, x, w, b *T, groups int, eps float64)
	GroupNormReluBackward(dx, dw, db, dy, x, b, mean, rstd, w *T, groups int)
}

// BatchNormReluPooler is implemented by backends that fold a 2×2,
// stride-2 max pool into BatchNormRelu: pooled and argmax (int32, the
// flat index within the plane) are MaxPool2d of BatchNormRelu's output,
// which is never written. The backward is MaxPool2dBackward followed by
// BatchNormReluBackward (which does not need that output either), also
// fused. It is
// an optional capability (check with a type assertion);
// autograd.BatchNormReluMaxPool uses it for a CNN block whose pre-pool
// slot is empty.
type BatchNormReluPooler interface {
	BatchNormReluMaxPool2x2(pooled, argmax, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64)
	// BatchNormReluMaxPool2x2Backward is MaxPool2dBackward of the pool's
	// gradient g followed by BatchNormReluBackward, without the
	// full-size gradient between them.
	BatchNormReluMaxPool2x2Backward(dx, dw, db, g, argmax, x, b, saveMean, saveRstd, w *T, training bool)
}

// GradAccumulator is implemented by backends that add a product or a
// column sum into an existing tensor in the launch that computes it.
// autograd accumulates the weight and bias gradients of a linear layer
// straight into the parameters' Grad with it, instead of computing them
// into new tensors and adding those. It is an optional capability (check
// with a type assertion). dst must be contiguous, in the dtype of the
// other operands, F32 or F64.
type GradAccumulator interface {
	// MatMulAdd is MatMul adding op(a)·op(b) to dst (2-D operands)
	// instead of overwriting it.
	MatMulAdd(dst, a, b *T, transA, transB bool)
	// SumRowsAdd adds the column sums of x [M, N] (contiguous) to dst
	// [N]: dst[j] += Σ_i x[i, j], the sum rounded once, as Reduce (Sum
	// over axis 0) followed by Binary Add would give.
	SumRowsAdd(dst, x *T)
}

// ChannelAxpyer is implemented by backends that fuse a residual branch's
// output scale into the residual addition: ChannelAxpy sets
// dst = x + s⊙y for x, y and dst of one shape [N, C, ...] and s of C
// elements (one per channel, axis 1) or of one, and ChannelAxpyBackward
// computes from the output gradient g the gradients dy = s⊙g and
// ds[c] = Σ g⊙y over channel c (either may be nil). All contiguous, F32
// or F64 alike. It is an optional capability (check with a type
// assertion); autograd.ChannelAxpy uses it for the seeds' x + g⊙branch
// and autograd.StraightThrough for the blend at α = 0.
type ChannelAxpyer interface {
	ChannelAxpy(dst, x, y, s *T)
	ChannelAxpyBackward(dy, ds, g, y, s *T)
}

// ForeachStepper is implemented by backends that update a list of
// separate parameter tensors with one launch per optimizer step, as
// PyTorch's foreach optimizers do with multi-tensor apply. optim keeps its
// parameters in a flat arena and uses SGDStep and AdamWStep instead; this
// is for parameters that cannot share an arena (and for measuring the
// foreach layout itself, PERF.md W7). It is an optional capability: check
// with a type assertion. The arguments mean what they mean for SGDStep
// and AdamWStep, element for element: params[i] is updated from grads[i]
// and its state buffers (moms empty when Momentum is 0), hyper is the F64
// [2] {lr, step} and foundInf (optional) skips the update when non-zero.
type ForeachStepper interface {
	ForeachSGDStep(params, grads, moms []*T, hyper, foundInf *T, o SGDOptions)
	ForeachAdamWStep(params, grads, ms, vs []*T, hyper, foundInf *T, o AdamWOptions)
}
