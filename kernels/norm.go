package kernels

// NormFamily is the normalisation op family: layer, group and batch
// norm with their gradients.
type NormFamily interface {
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
