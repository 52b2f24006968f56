package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// SoftmaxFamily is the softmax op family: softmax and log-softmax along
// an axis with their gradients, and the softmax cross-entropy loss.
type SoftmaxFamily interface {
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
}

// Reduction says how a loss combines per-sample values.
type Reduction uint8

// Loss reductions (zero value = mean, as in PyTorch).
const (
	ReduceMean Reduction = iota
	ReduceSum
	ReduceNone
)

// CrossEntropyParams configures softmax cross-entropy over class indices.
type CrossEntropyParams struct {
	Reduction      Reduction
	LabelSmoothing float64 // in [0, 1)
	// IgnoreIndex: targets equal to it contribute nothing (and are left
	// out of the mean). Use a negative value such as -100 (PyTorch's
	// default); HasIgnore enables it.
	IgnoreIndex int64
	HasIgnore   bool
}

// CheckSoftmax checks a Softmax or LogSoftmax and returns the axis
// resolved: float dst and x of one shape.
func CheckSoftmax(name string, dst, x *T, axis int) (int, error) {
	if !tensor.SameShape(dst.Shape(), x.Shape()) {
		return 0, fmt.Errorf("%s: dst shape %v and x shape %v differ", name, dst.Shape(), x.Shape())
	}
	if !x.DType().IsFloat() {
		return 0, floatError(name, "x", x)
	}
	if !dst.DType().IsFloat() {
		return 0, floatError(name, "dst", dst)
	}
	return NormAxis(name, axis, x.Shape())
}

// CheckSoftmaxBackward checks a SoftmaxBackward or LogSoftmaxBackward and
// returns the axis resolved: dx, y and dy of one shape.
func CheckSoftmaxBackward(name string, dx, y, dy *T, axis int) (int, error) {
	if !tensor.SameShape(dx.Shape(), y.Shape()) || !tensor.SameShape(dy.Shape(), y.Shape()) {
		return 0, fmt.Errorf("%s: shapes differ: dx %v, y %v, dy %v", name, dx.Shape(), y.Shape(), dy.Shape())
	}
	return NormAxis(name, axis, y.Shape())
}

// CheckCrossEntropy checks a CrossEntropy (or, with dloss for loss, the
// loss side of its backward) and returns N and C: float logits [N, C],
// target [N] of I64 or I32 indices, a float loss of one element for the
// mean and sum reductions and [N] for none, label smoothing in [0, 1).
func CheckCrossEntropy(name string, loss, logits, target *T, p CrossEntropyParams) (n, c int, err error) {
	ls := logits.Shape()
	if len(ls) != 2 {
		return 0, 0, fmt.Errorf("%s: logits has shape %v, want [N C]", name, ls)
	}
	n, c = ls[0], ls[1]
	if ts := target.Shape(); len(ts) != 1 || ts[0] != n {
		return 0, 0, fmt.Errorf("%s: target has shape %v, want [%d] (logits %v)", name, ts, n, ls)
	}
	if !isIndex(target) {
		return 0, 0, indexError(name, "target", target)
	}
	if !logits.DType().IsFloat() {
		return 0, 0, floatError(name, "logits", logits)
	}
	if !loss.DType().IsFloat() {
		return 0, 0, floatError(name, "loss", loss)
	}
	if p.Reduction == ReduceNone {
		if s := loss.Shape(); len(s) != 1 || s[0] != n {
			return 0, 0, fmt.Errorf("%s: logits %v, target %v: loss has shape %v, want [%d] for reduction none", name, ls, target.Shape(), s, n)
		}
	} else if loss.Numel() != 1 {
		return 0, 0, fmt.Errorf("%s: logits %v, target %v: loss has shape %v, want a scalar", name, ls, target.Shape(), loss.Shape())
	}
	if p.LabelSmoothing < 0 || p.LabelSmoothing >= 1 {
		return 0, 0, fmt.Errorf("%s: label smoothing %v outside [0, 1)", name, p.LabelSmoothing)
	}
	return n, c, nil
}

// CrossEntropyCounter is an optional Backend interface: a reduced
// CrossEntropy that also keeps a trainer's running metrics, in one
// launch where the backend can. After loss (one element) is written,
// lossSum (F32, one element) gets lossSum + loss, as Binary Add writes
// it, and acc (F32 [N]) CountCorrect's count of the rows of logits whose
// first maximum is their target. Its results are bit for bit those of
// CrossEntropy, Binary Add and CountCorrect in turn; a backend runs them
// so where it has no fused path (CUDA: more than 256 rows).
type CrossEntropyCounter interface {
	CrossEntropyCount(loss, logits, target *T, p CrossEntropyParams, lossSum, acc *T)
}

// CrossEntropyGradCounter is an optional Backend interface: a
// CrossEntropyCount that also writes, in the same launch where the
// backend can (CUDA: up to 256 rows, ce_small_count_grad), the gradient
// of the loss with respect to the logits for a dloss of one — what
// CrossEntropyBackward writes given a one, which is the gradient a
// Backward of the loss itself sends it — so that such a backward needs
// no launch of its own. autograd's CrossEntropyCount uses it when the
// logits take a gradient.
type CrossEntropyGradCounter interface {
	// CrossEntropyCountGrad is CrossEntropyCount (loss, lossSum and acc
	// bit for bit its results) also writing dlogits (the logits' shape
	// and dtype) as CrossEntropyBackward would for a dloss of one, in
	// the loss's dtype; it reports false, having written nothing, where
	// the backend cannot do both in one launch (the caller then runs
	// CrossEntropyCount, and the backward its own launch).
	CrossEntropyCountGrad(loss, logits, target *T, p CrossEntropyParams, lossSum, acc, dlogits *T) bool
}

// LinearCrossEntropyCounter is an optional Backend interface: a linear
// classifier head and its counted cross-entropy in one launch where the
// backend can (CUDA: one block for up to 256 rows and small products,
// linear_ce_small) — the logits x·wᵀ + b, then what
// CrossEntropyGradCounter's CrossEntropyCountGrad writes from them (or
// CrossEntropyCount's, without dlogits). The logits are MatMulBias's up
// to rounding (CUDA sums K in order, as its MatMulBias does for K ≤ 32
// but not for a wider K, which it sums across a warp), and the loss and
// counts are those of the logits this call writes.
// autograd.LinearCrossEntropyCount uses it.
type LinearCrossEntropyCounter interface {
	// LinearCrossEntropyCount writes logits [M, N] = x [M, K]·wᵀ (w
	// [N, K]) + b [N] (b may be nil), all F32 and contiguous, then from
	// them loss, lossSum and acc as CrossEntropyCount does and, when
	// dlogits is not nil, dlogits as CrossEntropyBackward would for a
	// dloss of one. It reports false, having written nothing, where the
	// backend cannot do it all in one launch.
	LinearCrossEntropyCount(logits, loss, x, w, b, target *T, p CrossEntropyParams, lossSum, acc, dlogits *T) bool
}

// LinearCESGDStepper is implemented by a backend that runs a small
// linear classifier's whole SGD training step in one launch (CUDA: one
// block, for what LinearCrossEntropyCounter and SGDIncrementer take in
// one launch each): the logits, the counted loss and the logits'
// gradient, the weight and bias gradients added, and the step over the
// arena that holds the weight and the bias. optim.SGD.LinearCEStep
// uses it. It is an optional capability (check with a type assertion).
type LinearCESGDStepper interface {
	// LinearCESGDStep is LinearCrossEntropyCount(logits, loss, x, w, b,
	// target, p, lossSum, acc, dlogits), then LinearGradAdd(gw, gb,
	// dlogits, x), then IncrementSGDStep(param, grad, mom, hyper, nil,
	// o), with those calls' results on this backend bit for bit. dlogits
	// is required; w and b lie in param, and gw and gb are grad's views
	// at their offsets (CheckLinearCESGDStep); b and gb are nil together.
	// It reports false, having written nothing, where the backend cannot
	// do it all in one launch.
	LinearCESGDStep(logits, loss, x, w, b, target *T, p CrossEntropyParams, lossSum, acc, dlogits, gw, gb, param, grad, mom, hyper *T, o SGDOptions) bool
}

// CheckLinearCESGDStep checks what a LinearCESGDStep adds to its three
// calls' own checks, before any of them writes: dlogits given, the SGD
// step's operands (CheckSGDStep), and w and b contiguous views of param
// whose gradients gw and gb are grad's views at the same offsets, of
// their shapes (b and gb nil together).
func CheckLinearCESGDStep(name string, w, b, dlogits, gw, gb, param, grad, mom, hyper *T, o SGDOptions) error {
	if dlogits == nil || w == nil || gw == nil {
		return fmt.Errorf("%s: w, gw and dlogits are required", name)
	}
	if (b == nil) != (gb == nil) {
		return fmt.Errorf("%s: b and gb must be given together", name)
	}
	if err := CheckSGDStep(name, param, grad, mom, hyper, o); err != nil {
		return err
	}
	for _, v := range []struct {
		what string
		t, g *T
	}{{"w", w, gw}, {"b", b, gb}} {
		if v.t == nil {
			continue
		}
		if !v.t.IsContiguous() || !v.g.IsContiguous() || !tensor.SameShape(v.t.Shape(), v.g.Shape()) {
			return fmt.Errorf("%s: %s %v and its gradient %v must be contiguous, of one shape", name, v.what, v.t.Shape(), v.g.Shape())
		}
		off, goff := v.t.Offset()-param.Offset(), v.g.Offset()-grad.Offset()
		if !v.t.Storage().SameMemory(param.Storage()) || !v.g.Storage().SameMemory(grad.Storage()) ||
			off != goff || off < 0 || off+v.t.Numel() > param.Numel() {
			return fmt.Errorf("%s: %s must lie in param and its gradient in grad at the same offset (an arena's views)", name, v.what)
		}
	}
	return nil
}

// CrossEntropyCountOps runs on be what a CrossEntropyCount stands for:
// CrossEntropy into loss, Binary Add of the loss into lossSum, and
// CountCorrect into acc. A backend without a fused path runs this, and
// it is the definition the fused paths are held to.
func CrossEntropyCountOps(be Backend, loss, logits, target *T, p CrossEntropyParams, lossSum, acc *T) {
	be.CrossEntropy(loss, logits, target, p)
	sum := lossSum.Reshape(1)
	be.Binary(Add, sum, sum, loss.Reshape(1))
	be.CountCorrect(acc, logits, target)
}

// CheckCrossEntropyCount checks a CrossEntropyCount and returns N and C:
// CheckCrossEntropy with a reduced loss (mean or sum), CheckCountCorrect
// and an F32 lossSum of one element.
func CheckCrossEntropyCount(name string, loss, logits, target *T, p CrossEntropyParams, lossSum, acc *T) (n, c int, err error) {
	if p.Reduction == ReduceNone {
		return 0, 0, fmt.Errorf("%s: reduction none (the running loss adds one reduced loss)", name)
	}
	if n, c, err = CheckCrossEntropy(name, loss, logits, target, p); err != nil {
		return 0, 0, err
	}
	if _, _, err = CheckCountCorrect(name, acc, logits, target); err != nil {
		return 0, 0, err
	}
	if lossSum.DType() != tensor.F32 || lossSum.Numel() != 1 {
		return 0, 0, fmt.Errorf("%s: lossSum is %v %v, want f32 of one element", name, lossSum.DType(), lossSum.Shape())
	}
	return n, c, nil
}
