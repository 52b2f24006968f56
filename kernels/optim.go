package kernels

// OptimFamily is the optimizer op family: the multi-tensor (foreach)
// primitives, the fused SGD and AdamW steps over a parameter arena and
// the GradScaler's device-side state. Every scalar that changes between
// steps is read from a tensor, so a captured step replays correctly.
type OptimFamily interface {
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
}

// SGDOptions are the constant hyperparameters of an SGD step (the learning
// rate lives in a tensor so captured steps see schedule changes).
type SGDOptions struct {
	Momentum    float64
	Dampening   float64
	WeightDecay float64
	Nesterov    bool
	Maximize    bool
}

// AdamWOptions are the constant hyperparameters of an AdamW step.
type AdamWOptions struct {
	Beta1, Beta2 float64
	Eps          float64
	WeightDecay  float64 // decoupled: p -= lr*wd*p
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
