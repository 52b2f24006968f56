package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// OptimFamily is the optimizer op family: the multi-tensor (foreach)
// primitives, the fused SGD and AdamW steps over a parameter arena and
// the GradScaler's device-side state. Every scalar that changes between
// steps is read from a tensor, so a captured step replays correctly.
type OptimFamily interface {
	// ForeachNorm writes the L2 norm of each xs[i] into dst[i] (dst F32
	// or F64, [len(xs)]). The global norm is the norm of dst.
	ForeachNorm(dst *T, xs []*T)
	// ForeachScale multiplies every xs[i] in place by the scalar tensor
	// s (one element; a tensor so the factor can change under replay),
	// which must not lie in any xs[i] (a GPU reads it in every block,
	// some after others have scaled it).
	ForeachScale(xs []*T, s *T)
	// ForeachAxpy computes ys[i] += alpha·xs[i].
	ForeachAxpy(ys, xs []*T, alpha float64)
	// Increment adds one to counter (one element) unless skip (optional,
	// one F32 element, as every flag of this file: CheckFlag) is non-zero.
	Increment(counter, skip *T)
	// SGDStep updates param in place from grad and the momentum buffer
	// mom (nil when Momentum is 0), all the same shape (a flat arena in
	// practice). hyper is an F64 [2] tensor {lr, step} with step already
	// counting this update (the first update sees 1 and initialises
	// mom to the gradient, as PyTorch does). When foundInf (optional, one
	// F32 element) is non-zero nothing changes.
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

// SGDIncrementer is an optional Backend interface: Increment of the step
// counter hyper[1] (SGDStep's hyper {lr, step}, F64 [2]) unless foundInf
// is non-zero, then SGDStep, in one launch where the backend can (CUDA:
// an F32 arena of at most 16 384 elements, one block). Its results are
// bit for bit those of the two calls in turn.
type SGDIncrementer interface {
	IncrementSGDStep(param, grad, mom, hyper, foundInf *T, o SGDOptions)
}

// GradClipper is an optional Backend interface: a clip of gradients by
// their global L2 norm (torch.nn.utils.clip_grad_norm_) in as few
// launches as the backend can (CUDA, for one tensor: one block's launch
// up to 32768 elements, else two — the partial sums of squares, then one
// kernel that finishes the norm, writes it and scales — where
// ForeachNorm, three BinaryScalar and ForeachScale take seven).
type GradClipper interface {
	// ClipByNorm writes into norm (one element, F32 or F64) the L2 norm
	// over every element of xs — ForeachNorm of xs, and for more than
	// one tensor ForeachNorm of those norms — and multiplies every xs[i]
	// in place by min(1, maxNorm/(norm+eps)), the coefficient computed
	// in norm's dtype as BinaryScalar Add of eps, reversed Div of maxNorm
	// and Minimum with 1 compute it (a NaN norm gives a NaN coefficient).
	// The CPU's results are those ops' bit for bit; another backend's
	// norm may sum in another order.
	ClipByNorm(norm *T, xs []*T, maxNorm, eps float64)
}

// ClipByNormOps runs on be what a ClipByNorm stands for, over
// temporaries on norm's device: ForeachNorm (twice for several tensors),
// BinaryScalar Add, Div (reversed) and Minimum for the coefficient, and
// ForeachScale. A backend without a fused path runs this, and it is the
// definition the fused paths are held to.
func ClipByNormOps(be Backend, norm *T, xs []*T, maxNorm, eps float64) {
	dev, dt := norm.Device(), norm.DType()
	tmp := func(n ...int) *T {
		t, err := tensor.EmptyOn(dev, dt, n...)
		if err != nil {
			panic(fmt.Sprintf("ClipByNorm: %v", err))
		}
		return t
	}
	n1 := norm.Reshape(1)
	if len(xs) == 1 {
		be.ForeachNorm(n1, xs)
	} else {
		norms := tmp(len(xs))
		be.ForeachNorm(norms, xs)
		be.ForeachNorm(n1, []*T{norms})
	}
	den, quo, coef := tmp(), tmp(), tmp()
	be.BinaryScalar(Add, den, norm.Reshape(), eps, false)
	be.BinaryScalar(Div, quo, den, maxNorm, true)
	be.BinaryScalar(Minimum, coef, quo, 1, false)
	be.ForeachScale(xs, coef)
}

// SGDOptions are the constant hyperparameters of an SGD step (the learning
// rate lives in a tensor so captured steps see schedule changes).
type SGDOptions struct {
	Momentum    float64
	Dampening   float64
	WeightDecay float64
	Nesterov    bool
	Maximize    bool
	// ZeroGrad leaves grad zeroed after the step (also when foundInf
	// skips the update), in the step's own launch where the backend
	// can: a training loop whose next step starts by zeroing the
	// gradients can leave that launch out. SGDStep and IncrementSGDStep
	// take it; ForeachSGDStep refuses it.
	ZeroGrad bool
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

// CheckSGDStep checks an SGDStep: a float param, grad (and mom, when
// given) of its shape and dtype, mom given when Momentum is not 0 (with
// Momentum 0 it is not used), and hyper of two elements {lr, step}.
func CheckSGDStep(name string, param, grad, mom, hyper *T, o SGDOptions) error {
	if param.DType().IsFloat() && sameState(param, grad) && (mom == nil || sameState(param, mom)) &&
		(mom != nil || o.Momentum == 0) && hyper != nil && hyper.Numel() == 2 {
		return nil
	}
	return sgdError(name, param, grad, mom, hyper, o.Momentum)
}

// sgdError is the error of a CheckSGDStep that failed.
func sgdError(name string, param, grad, mom, hyper *T, momentum float64) error {
	if err := checkOptimState(name, param, "grad", grad); err != nil {
		return err
	}
	if momentum != 0 && mom == nil {
		return fmt.Errorf("%s: momentum %v needs a momentum buffer (param %v)", name, momentum, param.Shape())
	}
	if mom != nil {
		if err := checkOptimState(name, param, "mom", mom); err != nil {
			return err
		}
	}
	return CheckHyper(name, hyper)
}

// sameState reports whether t is non-nil and of param's shape and dtype.
func sameState(param, t *T) bool {
	return t != nil && t.DType() == param.DType() && tensor.SameShape(t.Shape(), param.Shape())
}

// CheckAdamWStep checks an AdamWStep: a float param, grad, m and v (both
// required) of its shape and dtype, and hyper of two elements.
func CheckAdamWStep(name string, param, grad, m, v, hyper *T) error {
	if param.DType().IsFloat() && sameState(param, grad) && sameState(param, m) && sameState(param, v) &&
		hyper != nil && hyper.Numel() == 2 {
		return nil
	}
	return adamwError(name, param, grad, m, v, hyper)
}

// adamwError is the error of a CheckAdamWStep that failed.
func adamwError(name string, param, grad, m, v, hyper *T) error {
	if m == nil || v == nil {
		return fmt.Errorf("%s: m and v are required (param %v)", name, param.Shape())
	}
	for _, s := range [...]struct {
		what string
		t    *T
	}{{"grad", grad}, {"m", m}, {"v", v}} {
		if err := checkOptimState(name, param, s.what, s.t); err != nil {
			return err
		}
	}
	return CheckHyper(name, hyper)
}

// checkOptimState checks a float param and a tensor t (named what) of
// its shape and dtype.
func checkOptimState(name string, param *T, what string, t *T) error {
	if !param.DType().IsFloat() {
		return floatError(name, "param", param)
	}
	if t == nil {
		return fmt.Errorf("%s: %s is nil (param %v)", name, what, param.Shape())
	}
	if !tensor.SameShape(t.Shape(), param.Shape()) || t.DType() != param.DType() {
		return fmt.Errorf("%s: param is %v %v but %s is %v %v", name, param.Shape(), param.DType(), what, t.Shape(), t.DType())
	}
	return nil
}

// CheckScalarApart refuses a scalar operand s of an in-place list op
// (ForeachScale) that shares memory with any of the tensors xs it
// scales.
func CheckScalarApart(name, what string, s *T, xs []*T) error {
	for i, x := range xs {
		if spansOverlap(s, x) {
			return fmt.Errorf("%s: %s shares memory with xs[%d] (it would be read as it is scaled)", name, what, i)
		}
	}
	return nil
}

// CheckFlag checks a one-element flag operand (Increment's skip, the
// optimizers' and the GradScaler's foundInf): one F32 element, or nil
// when optional. Every backend reads flags as F32, so a flag of another
// dtype (a float64 statistic used as a skip, say) is refused on every
// device alike, not only on the one whose kernel reads four bytes.
func CheckFlag(name, what string, t *T, optional bool) error {
	switch {
	case t == nil && optional:
		return nil
	case t == nil:
		return fmt.Errorf("%s: %s is nil, want one F32 element", name, what)
	case t.Numel() != 1 || t.DType() != tensor.F32:
		return fmt.Errorf("%s: %s is %v %v, want one F32 element (cast the flag to F32)", name, what, t.DType(), t.Shape())
	}
	return nil
}

// CheckHyper checks an optimizer step's hyper tensor: two elements {lr,
// step}.
func CheckHyper(name string, hyper *T) error {
	if hyper == nil || hyper.Numel() != 2 {
		return fmt.Errorf("%s: hyper has shape %v, want [2] {lr, step}", name, shapeOf(hyper))
	}
	return nil
}

// CheckForeachNorm checks a ForeachNorm: dst of one element per tensor.
func CheckForeachNorm(name string, dst *T, xs []*T) error {
	if dst.Numel() != len(xs) {
		return fmt.Errorf("%s: dst has shape %v (%d elements), want %d elements", name, dst.Shape(), dst.Numel(), len(xs))
	}
	return nil
}

// CheckForeachAxpy checks a ForeachAxpy: as many xs as ys, each xs[i]
// of ys[i]'s shape and dtype.
func CheckForeachAxpy(name string, ys, xs []*T) error {
	if len(ys) != len(xs) {
		return fmt.Errorf("%s: %d ys and %d xs", name, len(ys), len(xs))
	}
	for i := range ys {
		if !tensor.SameShape(ys[i].Shape(), xs[i].Shape()) || ys[i].DType() != xs[i].DType() {
			return fmt.Errorf("%s: ys[%d] (%v %v) and xs[%d] (%v %v) differ", name, i, ys[i].Shape(), ys[i].DType(), i, xs[i].Shape(), xs[i].DType())
		}
	}
	return nil
}
