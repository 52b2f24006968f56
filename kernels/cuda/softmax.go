//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The softmax family (src/softmax.cu): softmax and log-softmax with
// their gradients and the softmax cross-entropy. Along the last axis
// every row is one block of rowThreads threads (launchRows); along a
// middle axis, x viewed as [outer, n, inner], every line is one thread.

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

// CrossEntropyCount implements kernels.CrossEntropyCounter.
func (b *Backend) CrossEntropyCount(loss, logits, target *T, p kernels.CrossEntropyParams, lossSum, acc *T) {
	must(b.d.CrossEntropyCount(loss, logits, target, p, lossSum, acc))
}

// CrossEntropyCountGrad implements kernels.CrossEntropyGradCounter.
func (b *Backend) CrossEntropyCountGrad(loss, logits, target *T, p kernels.CrossEntropyParams, lossSum, acc, dlogits *T) bool {
	ok, err := b.d.CrossEntropyCountGrad(loss, logits, target, p, lossSum, acc, dlogits)
	must(err)
	return ok
}

// LinearCrossEntropyCount implements kernels.LinearCrossEntropyCounter.
func (b *Backend) LinearCrossEntropyCount(logits, loss, x, w, bias, target *T, p kernels.CrossEntropyParams, lossSum, acc, dlogits *T) bool {
	ok, err := b.d.LinearCrossEntropyCount(logits, loss, x, w, bias, target, p, lossSum, acc, dlogits)
	must(err)
	return ok
}

// LinearCESGDStep implements kernels.LinearCESGDStepper.
func (b *Backend) LinearCESGDStep(logits, loss, x, w, bias, target *T, p kernels.CrossEntropyParams, lossSum, acc, dlogits, gw, gb, param, grad, mom, hyper *T, o kernels.SGDOptions) bool {
	ok, err := b.d.LinearCESGDStep(logits, loss, x, w, bias, target, p, lossSum, acc, dlogits, gw, gb, param, grad, mom, hyper, o)
	must(err)
	return ok
}

// CrossEntropyBackward implements kernels.Backend.
func (b *Backend) CrossEntropyBackward(dlogits, logits, target, dloss *T, p kernels.CrossEntropyParams) {
	must(b.d.CrossEntropyBackward(dlogits, logits, target, dloss, p))
}

// lastAxis views x as [rows, n] over its last axis.
func lastAxis(x *tensor.Tensor) (rows, n int) {
	if x.Rank() == 0 {
		return 1, 1
	}
	n = x.Dim(-1)
	if n == 0 {
		return 0, 0
	}
	return x.Numel() / n, n
}

// Softmax writes the softmax (or, with log, the log-softmax) of x along
// its last axis into dst (same shape and dtype).
func (d *Device) Softmax(dst, x *tensor.Tensor, log bool) error {
	name, err := floatKernel("Softmax", "softmax_rows", x.DType())
	if err != nil {
		return err
	}
	if err := sameShape("Softmax", dst, x); err != nil {
		return err
	}
	pd, err := d.ptrOf("Softmax", "dst", dst, x.DType())
	if err != nil {
		return err
	}
	px, err := d.ptrOf("Softmax", "x", x, x.DType())
	if err != nil {
		return err
	}
	rows, n := lastAxis(x)
	release := d.enter()
	defer release()
	var a args
	return d.launchRows(name, rows, a.i32(b2i(log)).ptr(pd).ptr(px).i64(int64(n)))
}

// SoftmaxBackward writes dx = y·(dy − Σy·dy) for y = softmax(x), or with
// log dx = dy − e^y·Σdy for y = log-softmax(x), along the last axis.
func (d *Device) SoftmaxBackward(dx, y, dy *tensor.Tensor, log bool) error {
	dt := y.DType()
	name, err := floatKernel("SoftmaxBackward", "softmax_bwd_rows", dt)
	if err != nil {
		return err
	}
	for _, t := range []*tensor.Tensor{dx, dy} {
		if err := sameShape("SoftmaxBackward", t, y); err != nil {
			return err
		}
	}
	pdx, err := d.ptrOf("SoftmaxBackward", "dx", dx, dt)
	if err != nil {
		return err
	}
	py, err := d.ptrOf("SoftmaxBackward", "y", y, dt)
	if err != nil {
		return err
	}
	pdy, err := d.ptrOf("SoftmaxBackward", "dy", dy, dt)
	if err != nil {
		return err
	}
	rows, n := lastAxis(y)
	release := d.enter()
	defer release()
	var a args
	return d.launchRows(name, rows, a.i32(b2i(log)).ptr(pdx).ptr(py).ptr(pdy).i64(int64(n)))
}

// ceTargets checks a cross-entropy's loss (or dloss), logits [N, C] and
// target (kernels.CheckCrossEntropy) and returns the target's address,
// whether it is int64, N and C.
func (d *Device) ceTargets(op string, loss, logits, target *tensor.Tensor, p kernels.CrossEntropyParams) (pt cu.DevicePtr, t64 bool, n, c int, err error) {
	if n, c, err = kernels.CheckCrossEntropy(op, loss, logits, target, p); err != nil {
		return 0, false, 0, 0, checked(err)
	}
	pt, t64, err = d.indexPtr(op, "target", target)
	return pt, t64, n, c, err
}

// ceScratch holds a cross-entropy's per-row losses and kept flags: F32
// device tensors.
type ceScratch struct{ per, kept *tensor.Tensor }

func (d *Device) newCEScratch(n int) (ceScratch, error) {
	var s ceScratch
	var err error
	dev := tensor.CUDA(d.ordinal)
	if s.per, err = tensor.EmptyOn(dev, tensor.F32, n); err != nil {
		return s, err
	}
	s.kept, err = tensor.EmptyOn(dev, tensor.F32, n)
	return s, err
}

// ceRows runs the per-row forward into s and, with a reduction, its
// reduction into loss (ploss).
func (d *Device) ceRows(s ceScratch, ploss cu.DevicePtr, logits *tensor.Tensor, pt cu.DevicePtr, t64 bool, n, c int, p kernels.CrossEntropyParams) error {
	name, err := floatKernel("CrossEntropy", "ce_rows", logits.DType())
	if err != nil {
		return err
	}
	px, err := d.ptrOf("CrossEntropy", "logits", logits, logits.DType())
	if err != nil {
		return err
	}
	pper, _ := d.ptrOf("CrossEntropy", "scratch", s.per, tensor.F32)
	pkept, _ := d.ptrOf("CrossEntropy", "scratch", s.kept, tensor.F32)
	release := d.enter()
	defer release()
	var a args
	a.ptr(pper).ptr(pkept).ptr(px).ptr(pt).i32(b2i(t64)).i64(int64(c)).f32(float32(p.LabelSmoothing)).i32(b2i(p.HasIgnore)).i64(p.IgnoreIndex)
	if err := d.launchRows(name, n, &a); err != nil {
		return err
	}
	if p.Reduction == kernels.ReduceNone {
		return nil
	}
	fn, err := d.kernel("ce_finish")
	if err != nil {
		return err
	}
	var f args
	f.ptr(ploss).ptr(pper).ptr(pkept).i64(int64(n)).i32(b2i(p.Reduction == kernels.ReduceMean))
	return launchRaw(fn, [3]int{1, 1, 1}, [3]int{rowThreads, 1, 1}, 0, d.stream, &f)
}

// ceSmall is the one-launch forward of a reduced cross-entropy over
// logits that ceSmallFits, written into loss (ploss); with plsum and
// pacc (non-zero) also the running metrics of CrossEntropyCount
// (ce_small_count).
func (d *Device) ceSmall(ploss cu.DevicePtr, logits *tensor.Tensor, pt cu.DevicePtr, t64 bool, n, c int, p kernels.CrossEntropyParams, plsum, pacc, pdx cu.DevicePtr) error {
	name, err := floatKernel("CrossEntropy", ceSmallBase(uint64(plsum), uint64(pdx)), logits.DType())
	if err != nil {
		return err
	}
	px, err := d.ptrOf("CrossEntropy", "logits", logits, logits.DType())
	if err != nil {
		return err
	}
	fn, err := d.kernel(name)
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	a := ceSmallArgs(uint64(ploss), uint64(px), uint64(pt), t64, n, c, p, uint64(plsum), uint64(pacc), uint64(pdx))
	return launchRaw(fn, [3]int{1, 1, 1}, [3]int{ceSmallThreads(n), 1, 1}, 0, d.stream, a)
}

// CrossEntropyCount is a reduced CrossEntropy that also adds the loss to
// lossSum (F32, one element) and counts into acc (F32 [N]) the rows whose
// first maximum is their target (kernels.CrossEntropyCounter): one launch
// (ce_small_count) where ceSmallFits, else CrossEntropy,
// Binary Add and CountCorrect in turn.
func (d *Device) CrossEntropyCount(loss, logits, target *tensor.Tensor, p kernels.CrossEntropyParams, lossSum, acc *tensor.Tensor) error {
	const op = "CrossEntropyCount"
	n, c, err := kernels.CheckCrossEntropyCount(op, loss, logits, target, p, lossSum, acc)
	if err := checked(err); err != nil {
		return err
	}
	if !ceSmallFits(n, c) {
		if err := d.CrossEntropy(loss, logits, target, p); err != nil {
			return err
		}
		sum := lossSum.Reshape(1)
		if err := d.Binary(kernels.Add, sum, sum, loss.Reshape(1)); err != nil {
			return err
		}
		return d.CountCorrect(acc, logits, target)
	}
	pt, t64, err := d.indexPtr(op, "target", target)
	if err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"loss", "lossSum", "acc"}, []*tensor.Tensor{loss, lossSum, acc},
		[]tensor.DType{tensor.F32, tensor.F32, tensor.F32}, []bool{false, false, false})
	if err != nil {
		return err
	}
	return d.ceSmall(ptrs[0], logits, pt, t64, n, c, p, ptrs[1], ptrs[2], 0)
}

// CrossEntropyCountGrad is CrossEntropyCount also writing dlogits (the
// logits' shape and dtype) for a dloss of one
// (kernels.CrossEntropyGradCounter), in the one launch of
// ce_small_count_grad where ceSmallFits; past that it writes
// nothing and reports false.
func (d *Device) CrossEntropyCountGrad(loss, logits, target *tensor.Tensor, p kernels.CrossEntropyParams, lossSum, acc, dlogits *tensor.Tensor) (bool, error) {
	const op = "CrossEntropyCountGrad"
	n, c, err := kernels.CheckCrossEntropyCount(op, loss, logits, target, p, lossSum, acc)
	if err := checked(err); err != nil {
		return false, err
	}
	pdx, err := d.ptrOf(op, "dlogits", dlogits, logits.DType())
	if err != nil {
		return false, err
	}
	if err := sameShape(op, dlogits, logits); err != nil {
		return false, err
	}
	if !ceSmallFits(n, c) {
		return false, nil
	}
	pt, t64, err := d.indexPtr(op, "target", target)
	if err != nil {
		return false, err
	}
	ptrs, err := d.ptrList(op, []string{"loss", "lossSum", "acc"}, []*tensor.Tensor{loss, lossSum, acc},
		[]tensor.DType{tensor.F32, tensor.F32, tensor.F32}, []bool{false, false, false})
	if err != nil {
		return false, err
	}
	return true, d.ceSmall(ptrs[0], logits, pt, t64, n, c, p, ptrs[1], ptrs[2], pdx)
}

// CrossEntropy writes the softmax cross-entropy of logits [N, C] (F32,
// BF16 or F16) against target [N] (I64 or I32) into loss (F32: a scalar for the
// mean and sum reductions, [N] for none), with label smoothing and an
// ignored index as kernels.CrossEntropyParams says. A target outside
// [0, C) gives a NaN loss (a kernel cannot panic).
func (d *Device) CrossEntropy(loss, logits, target *tensor.Tensor, p kernels.CrossEntropyParams) error {
	const op = "CrossEntropy"
	pt, t64, n, c, err := d.ceTargets(op, loss, logits, target, p)
	if err != nil {
		return err
	}
	ploss, err := d.ptrOf(op, "loss", loss, tensor.F32)
	if err != nil {
		return err
	}
	reduced := p.Reduction != kernels.ReduceNone
	if reduced && ceSmallFits(n, c) {
		return d.ceSmall(ploss, logits, pt, t64, n, c, p, 0, 0, 0)
	}
	s, err := d.newCEScratch(n)
	if err != nil {
		return err
	}
	defer s.free()
	if err := d.ceRows(s, ploss, logits, pt, t64, n, c, p); err != nil {
		return err
	}
	if reduced {
		return nil // ce_finish wrote the loss
	}
	return d.copyDevice(loss, s.per)
}

// CrossEntropyBackward writes dlogits = dloss·∂loss/∂logits (dloss F32,
// shaped like loss).
func (d *Device) CrossEntropyBackward(dlogits, logits, target, dloss *tensor.Tensor, p kernels.CrossEntropyParams) error {
	const op = "CrossEntropyBackward"
	pt, t64, n, c, err := d.ceTargets(op, dloss, logits, target, p)
	if err != nil {
		return err
	}
	if err := checked(kernels.CheckSameShape(op, "dlogits", dlogits, logits.Shape())); err != nil {
		return err
	}
	name, err := floatKernel(op, "ce_bwd_rows", logits.DType())
	if err != nil {
		return err
	}
	perRow := p.Reduction == kernels.ReduceNone
	pdl, err := d.ptrOf(op, "dloss", dloss, tensor.F32)
	if err != nil {
		return err
	}
	pdx, err := d.ptrOf(op, "dlogits", dlogits, logits.DType())
	if err != nil {
		return err
	}
	px, err := d.ptrOf(op, "logits", logits, logits.DType())
	if err != nil {
		return err
	}
	mean := p.Reduction == kernels.ReduceMean
	// The mean's divisor: the targets not ignored, counted on the device
	// when one can be; else every row (the kernel divides by rows when
	// the count is null).
	count := mean && p.HasIgnore
	var pcount cu.DevicePtr
	if count {
		count, err := tensor.EmptyOn(tensor.CUDA(d.ordinal), tensor.F32, 1)
		if err != nil {
			return err
		}
		defer count.Storage().Free()
		pcount, _ = d.ptrOf(op, "scratch", count, tensor.F32)
	}
	release := d.enter()
	defer release()
	if count {
		fn, err := d.kernel("ce_count_kept")
		if err != nil {
			return err
		}
		var k args
		k.ptr(pcount).ptr(pt).i32(b2i(t64)).i64(int64(n)).i32(b2i(p.HasIgnore)).i64(p.IgnoreIndex)
		if err := launchRaw(fn, [3]int{1, 1, 1}, [3]int{rowThreads, 1, 1}, 0, d.stream, &k); err != nil {
			return err
		}
	}
	var a args
	a.ptr(pdx).ptr(px).ptr(pt).i32(b2i(t64)).ptr(pdl).i32(b2i(perRow)).ptr(pcount).f32(float32(n)).i32(b2i(mean))
	a.i64(int64(c)).f32(float32(p.LabelSmoothing)).i32(b2i(p.HasIgnore)).i64(p.IgnoreIndex)
	return d.launchRows(name, n, &a)
}

// free returns the scratch to the allocator (stream order keeps it from
// being reused before the launches that read it have run).
func (s ceScratch) free() {
	for _, t := range []*tensor.Tensor{s.per, s.kept} {
		if t != nil {
			t.Storage().Free()
		}
	}
}

// SoftmaxAxis writes the softmax (or, with log, the log-softmax) of x
// along axis into dst (same shape and dtype, F32, BF16 or F16,
// contiguous).
func (d *Device) SoftmaxAxis(dst, x *tensor.Tensor, axis int, log bool) error {
	op := map[bool]string{false: "Softmax", true: "LogSoftmax"}[log]
	a, err := kernels.CheckSoftmax(op, dst, x, axis)
	if err := checked(err); err != nil {
		return err
	}
	outer, n, inner := kernels.Split3(x.Shape(), a)
	if inner == 1 {
		return d.Softmax(dst, x, log)
	}
	dt := x.DType()
	name, err := floatKernel(op, "softmax_axis", dt)
	if err != nil {
		return err
	}
	pd, err := d.ptrOf(op, "dst", dst, dt)
	if err != nil {
		return err
	}
	px, err := d.ptrOf(op, "x", x, dt)
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var ar args
	return d.launch1D(name, int64(outer*inner), ar.i32(b2i(log)).ptr(pd).ptr(px).i64(int64(outer)).i64(int64(n)).i64(int64(inner)))
}

// SoftmaxBackwardAxis is SoftmaxBackward along any axis.
func (d *Device) SoftmaxBackwardAxis(dx, y, dy *tensor.Tensor, axis int, log bool) error {
	op := map[bool]string{false: "SoftmaxBackward", true: "LogSoftmaxBackward"}[log]
	a, err := kernels.CheckSoftmaxBackward(op, dx, y, dy, axis)
	if err := checked(err); err != nil {
		return err
	}
	outer, n, inner := kernels.Split3(y.Shape(), a)
	if inner == 1 {
		return d.SoftmaxBackward(dx, y, dy, log)
	}
	dt := y.DType()
	name, err := floatKernel(op, "softmax_bwd_axis", dt)
	if err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"dx", "y", "dy"}, []*tensor.Tensor{dx, y, dy}, []tensor.DType{dt, dt, dt}, []bool{false, false, false})
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var ar args
	return d.launch1D(name, int64(outer*inner), ar.i32(b2i(log)).ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).i64(int64(outer)).i64(int64(n)).i64(int64(inner)))
}

// linearCEShapes checks a linear head and its counted cross-entropy
// (LinearCrossEntropyCount's operands) and returns M, K and N: x [M, K],
// w [N, K], logits [M, N], b nil or [N], and the loss's operands as
// CheckCrossEntropyCount takes them.
func linearCEShapes(op string, logits, loss, x, w, b, target *tensor.Tensor, p kernels.CrossEntropyParams, lossSum, acc *tensor.Tensor) (m, k, n int, err error) {
	if logits == nil || x == nil || w == nil {
		return 0, 0, 0, fmt.Errorf("cuda: %s: logits, x and w are required (b and dlogits may be nil)", op)
	}
	xs, ws := x.Shape(), w.Shape()
	if len(xs) != 2 || len(ws) != 2 || xs[1] != ws[1] {
		return 0, 0, 0, fmt.Errorf("cuda: %s: x %v and w %v: want [M, K] and [N, K]", op, xs, ws)
	}
	m, k, n = xs[0], xs[1], ws[0]
	if !tensor.SameShape(logits.Shape(), []int{m, n}) {
		return 0, 0, 0, fmt.Errorf("cuda: %s: logits of shape %v, want [%d %d]", op, logits.Shape(), m, n)
	}
	if b != nil && !tensor.SameShape(b.Shape(), []int{n}) {
		return 0, 0, 0, fmt.Errorf("cuda: %s: bias of shape %v, want [%d]", op, b.Shape(), n)
	}
	if _, _, err := kernels.CheckCrossEntropyCount(op, loss, logits, target, p, lossSum, acc); err != nil {
		return 0, 0, 0, checked(err)
	}
	return m, k, n, nil
}

// LinearCrossEntropyCount is a linear head and its counted cross-entropy
// (kernels.LinearCrossEntropyCounter) in one launch of linear_ce_small
// where the logits fit ceSmallFits, K is at most gemmSmallK and M·N·K at
// most gemmSmallMACs; past that it writes nothing and reports false.
func (d *Device) LinearCrossEntropyCount(logits, loss, x, w, b, target *tensor.Tensor, p kernels.CrossEntropyParams, lossSum, acc, dlogits *tensor.Tensor) (bool, error) {
	const op = "LinearCrossEntropyCount"
	m, k, n, err := linearCEShapes(op, logits, loss, x, w, b, target, p, lossSum, acc)
	if err != nil {
		return false, err
	}
	if dlogits != nil {
		if err := sameShape(op, dlogits, logits); err != nil {
			return false, err
		}
	}
	if !ceSmallFits(m, n) || k > gemmSmallK || m*n*k > gemmSmallMACs {
		return false, nil
	}
	pt, t64, err := d.indexPtr(op, "target", target)
	if err != nil {
		return false, err
	}
	ptrs, err := d.ptrList(op, []string{"logits", "loss", "x", "w", "b", "lossSum", "acc", "dlogits"},
		[]*tensor.Tensor{logits, loss, x, w, b, lossSum, acc, dlogits},
		[]tensor.DType{tensor.F32, tensor.F32, tensor.F32, tensor.F32, tensor.F32, tensor.F32, tensor.F32, tensor.F32},
		[]bool{false, false, false, false, true, false, false, true})
	if err != nil {
		return false, err
	}
	fn, err := d.kernel("linear_ce_small_f32")
	if err != nil {
		return false, err
	}
	flags := linearCEFlags(t64, p)
	if d.seqOn.Load() { // in a block sequence, a step of the next block_seq_f32 launch
		step := linearCESmallArgs{logits: uint64(ptrs[0]), loss: uint64(ptrs[1]), x: uint64(ptrs[2]), w: uint64(ptrs[3]),
			b: uint64(ptrs[4]), t: uint64(pt), m: int64(m), n: int64(n), k: int64(k), eps: float32(p.LabelSmoothing),
			flags: flags, ignore: p.IgnoreIndex, lsum: uint64(ptrs[5]), acc: uint64(ptrs[6]), dx: uint64(ptrs[7])}
		if d.deferStep(seqLinearCESmall, step.words(), ceSmallThreads(m), logits, loss, x, w, b, target, lossSum, acc, dlogits) {
			return true, nil
		}
	}
	release := d.enter()
	defer release()
	var a args
	a.ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).ptr(ptrs[3]).ptr(ptrs[4]).ptr(pt)
	a.i64(int64(m)).i64(int64(n)).i64(int64(k)).f32(float32(p.LabelSmoothing)).i64(p.IgnoreIndex).i32(flags)
	a.ptr(ptrs[5]).ptr(ptrs[6]).ptr(ptrs[7])
	// The block CrossEntropyCount's ce_small takes for m rows, so that
	// the loss and counts are what it would write from these logits.
	return true, launchRaw(fn, [3]int{1, 1, 1}, [3]int{ceSmallThreads(m), 1, 1}, 0, d.stream, &a)
}

// LinearCESGDStep is a small linear classifier's whole SGD step
// (kernels.LinearCESGDStepper) in one launch of linear_ce_sgd_f32, one
// block of ceSmallThreads(m): where LinearCrossEntropyCount and
// IncrementSGDStep would each be one launch (sizes within
// linear_ce_small's and sgdOneBlock). Past that it writes nothing and
// reports false.
func (d *Device) LinearCESGDStep(logits, loss, x, w, b, target *tensor.Tensor, p kernels.CrossEntropyParams, lossSum, acc, dlogits, gw, gb, param, grad, mom, hyper *tensor.Tensor, o kernels.SGDOptions) (bool, error) {
	const op = "LinearCESGDStep"
	if err := checked(kernels.CheckLinearCESGDStep(op, w, b, dlogits, gw, gb, param, grad, mom, hyper, o)); err != nil {
		return false, err
	}
	m, k, n, err := linearCEShapes(op, logits, loss, x, w, b, target, p, lossSum, acc)
	if err != nil {
		return false, err
	}
	if err := sameShape(op, dlogits, logits); err != nil {
		return false, err
	}
	if !linearCESGDFits(m, k, n, param.Numel()) {
		return false, nil
	}
	km := mom
	if o.Momentum == 0 {
		km = nil // sgd_inc_block takes the momentum path for a non-null buffer
	}
	pp, pg, pm, ph, _, err := d.optimPtrs(op, param, grad, km, hyper, nil)
	if err != nil {
		return false, err
	}
	pt, t64, err := d.indexPtr(op, "target", target)
	if err != nil {
		return false, err
	}
	ptrs, err := d.ptrList(op, []string{"logits", "loss", "x", "w", "b", "lossSum", "acc", "dlogits", "gw", "gb"},
		[]*tensor.Tensor{logits, loss, x, w, b, lossSum, acc, dlogits, gw, gb},
		[]tensor.DType{tensor.F32, tensor.F32, tensor.F32, tensor.F32, tensor.F32, tensor.F32, tensor.F32, tensor.F32, tensor.F32, tensor.F32},
		[]bool{false, false, false, false, true, false, false, false, false, true})
	if err != nil {
		return false, err
	}
	fn, err := d.kernel("linear_ce_sgd_f32")
	if err != nil {
		return false, err
	}
	a := linearCESGDScalars(m, k, n, t64, p, o, param.Numel())
	a.logits, a.loss, a.x, a.w, a.b, a.t = uint64(ptrs[0]), uint64(ptrs[1]), uint64(ptrs[2]), uint64(ptrs[3]), uint64(ptrs[4]), uint64(pt)
	a.lsum, a.acc, a.dx, a.gw, a.gb = uint64(ptrs[5]), uint64(ptrs[6]), uint64(ptrs[7]), uint64(ptrs[8]), uint64(ptrs[9])
	a.p, a.g, a.mom, a.hyper = uint64(pp), uint64(pg), uint64(pm), uint64(ph)
	words := a.words()
	if d.seqOn.Load() && d.deferStep(seqLinearCESGD, words, ceSmallThreads(m), logits, loss, x, w, b, target, lossSum, acc, dlogits, gw, gb, param, grad, mom, hyper) {
		return true, nil
	}
	release := d.enter()
	defer release()
	// The block LinearCrossEntropyCount's launch takes for m rows (the
	// loss's warp order), which the step's loops do not mind.
	return true, launchStruct(fn, [3]int{1, 1, 1}, [3]int{ceSmallThreads(m), 1, 1}, d.stream, words)
}
