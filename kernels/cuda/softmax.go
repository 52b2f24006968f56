//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// rowThreads is the block size of the row kernels (ROW_THREADS in
// src/rows.cu).
const rowThreads = 256

// launchRows launches a row kernel: one block per row.
func (d *Device) launchRows(name string, rows int, a *args) error {
	if rows <= 0 {
		return nil
	}
	fn, err := d.kernel(name)
	if err != nil {
		return err
	}
	return launchRaw(fn, [3]int{rows, 1, 1}, [3]int{rowThreads, 1, 1}, 0, d.stream, a)
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

// ceTargets checks the target of a cross-entropy over logits [N, C] and
// returns its address and whether it is int64.
func (d *Device) ceTargets(op string, logits, target *tensor.Tensor) (p cu.DevicePtr, t64 bool, n, c int, err error) {
	if logits.Rank() != 2 {
		return 0, false, 0, 0, fmt.Errorf("cuda: %s: logits %v, want [N, C]", op, logits.Shape())
	}
	n, c = logits.Dim(0), logits.Dim(1)
	if target.Rank() != 1 || target.Dim(0) != n {
		return 0, false, 0, 0, fmt.Errorf("cuda: %s: target %v for logits %v, want [%d]", op, target.Shape(), logits.Shape(), n)
	}
	switch target.DType() {
	case tensor.I64:
		t64 = true
	case tensor.I32:
	default:
		return 0, false, 0, 0, fmt.Errorf("cuda: %s: target dtype %v (I64 or I32)", op, target.DType())
	}
	p, err = d.ptrOf(op, "target", target, target.DType())
	return p, t64, n, c, err
}

// ceScratch holds a cross-entropy's per-row losses, kept flags and
// {total, count}: F32 device tensors.
type ceScratch struct{ per, kept, out *tensor.Tensor }

func (d *Device) newCEScratch(n int) (ceScratch, error) {
	var s ceScratch
	var err error
	dev := tensor.CUDA(d.ordinal)
	if s.per, err = tensor.EmptyOn(dev, tensor.F32, n); err != nil {
		return s, err
	}
	if s.kept, err = tensor.EmptyOn(dev, tensor.F32, n); err != nil {
		return s, err
	}
	s.out, err = tensor.EmptyOn(dev, tensor.F32, 2)
	return s, err
}

// ceRows runs the per-row forward and the reduction into s.
func (d *Device) ceRows(s ceScratch, logits *tensor.Tensor, pt cu.DevicePtr, t64 bool, n, c int, p kernels.CrossEntropyParams) error {
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
	pout, _ := d.ptrOf("CrossEntropy", "scratch", s.out, tensor.F32)
	release := d.enter()
	defer release()
	var a args
	a.ptr(pper).ptr(pkept).ptr(px).ptr(pt).i32(b2i(t64)).i64(int64(c)).f32(float32(p.LabelSmoothing)).i32(b2i(p.HasIgnore)).i64(p.IgnoreIndex)
	if err := d.launchRows(name, n, &a); err != nil {
		return err
	}
	fn, err := d.kernel("ce_finish")
	if err != nil {
		return err
	}
	var f args
	f.ptr(pout).ptr(pper).ptr(pkept).i64(int64(n)).i32(b2i(p.Reduction == kernels.ReduceMean))
	return launchRaw(fn, [3]int{1, 1, 1}, [3]int{rowThreads, 1, 1}, 0, d.stream, &f)
}

// CrossEntropy writes the softmax cross-entropy of logits [N, C] (F32 or
// BF16) against target [N] (I64 or I32) into loss (F32: a scalar for the
// mean and sum reductions, [N] for none), with label smoothing and an
// ignored index as kernels.CrossEntropyParams says. A target outside
// [0, C) gives a NaN loss (a kernel cannot panic).
func (d *Device) CrossEntropy(loss, logits, target *tensor.Tensor, p kernels.CrossEntropyParams) error {
	const op = "CrossEntropy"
	pt, t64, n, c, err := d.ceTargets(op, logits, target)
	if err != nil {
		return err
	}
	want := 1
	if p.Reduction == kernels.ReduceNone {
		want = n
	}
	if loss.Numel() != want {
		return fmt.Errorf("cuda: %s: loss %v, want %d values", op, loss.Shape(), want)
	}
	if _, err := d.ptrOf(op, "loss", loss, tensor.F32); err != nil {
		return err
	}
	s, err := d.newCEScratch(n)
	if err != nil {
		return err
	}
	defer s.free()
	if err := d.ceRows(s, logits, pt, t64, n, c, p); err != nil {
		return err
	}
	src := s.out.Narrow(0, 0, 1)
	if p.Reduction == kernels.ReduceNone {
		src = s.per
	}
	return d.copyDevice(loss, src)
}

// CrossEntropyBackward writes dlogits = dloss·∂loss/∂logits (dloss F32,
// shaped like loss).
func (d *Device) CrossEntropyBackward(dlogits, logits, target, dloss *tensor.Tensor, p kernels.CrossEntropyParams) error {
	const op = "CrossEntropyBackward"
	pt, t64, n, c, err := d.ceTargets(op, logits, target)
	if err != nil {
		return err
	}
	if err := sameShape(op, dlogits, logits); err != nil {
		return err
	}
	name, err := floatKernel(op, "ce_bwd_rows", logits.DType())
	if err != nil {
		return err
	}
	perRow := p.Reduction == kernels.ReduceNone
	if want := map[bool]int{true: n, false: 1}[perRow]; dloss.Numel() != want {
		return fmt.Errorf("cuda: %s: dloss %v, want %d values", op, dloss.Shape(), want)
	}
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
	var pcount cu.DevicePtr // the mean's divisor: the targets not ignored
	if mean {
		count, err := tensor.EmptyOn(tensor.CUDA(d.ordinal), tensor.F32, 1)
		if err != nil {
			return err
		}
		defer count.Storage().Free()
		pcount, _ = d.ptrOf(op, "scratch", count, tensor.F32)
	}
	release := d.enter()
	defer release()
	if mean {
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
	a.ptr(pdx).ptr(px).ptr(pt).i32(b2i(t64)).ptr(pdl).i32(b2i(perRow)).ptr(pcount).i32(b2i(mean))
	a.i64(int64(c)).f32(float32(p.LabelSmoothing)).i32(b2i(p.HasIgnore)).i64(p.IgnoreIndex)
	return d.launchRows(name, n, &a)
}

// free returns the scratch to the allocator (stream order keeps it from
// being reused before the launches that read it have run).
func (s ceScratch) free() {
	for _, t := range []*tensor.Tensor{s.per, s.kept, s.out} {
		if t != nil {
			t.Storage().Free()
		}
	}
}

// copyDevice copies src into dst (same element count and dtype, both
// contiguous on the device) on the stream.
func (d *Device) copyDevice(dst, src *tensor.Tensor) error {
	if dst.Numel() != src.Numel() {
		return fmt.Errorf("cuda: copy of %d values into %d", src.Numel(), dst.Numel())
	}
	pd, err := d.ptrOf("copy", "dst", dst, src.DType())
	if err != nil {
		return err
	}
	ps, err := d.ptrOf("copy", "src", src, src.DType())
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	return cu.MemcpyDtoDAsync(pd, ps, int64(src.Nbytes()), d.stream)
}

// b2i is 1 for true, 0 for false (kernel flags).
func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// ArgMax writes into dst (I64, x's shape with axis of size 1) the index
// of the first maximum of x (F32 or BF16) along axis, NaN counting as the
// maximum as in PyTorch and the CPU backend.
func (d *Device) ArgMax(dst, x *tensor.Tensor, axis int) error {
	const op = "ArgMax"
	if axis < -x.Rank() || axis >= x.Rank() {
		return fmt.Errorf("cuda: %s: axis %d of x %v", op, axis, x.Shape())
	}
	a := x.Axis(axis)
	want := append([]int(nil), x.Shape()...)
	want[a] = 1
	if !tensor.SameShape(dst.Shape(), want) {
		return fmt.Errorf("cuda: %s: x %v along axis %d gives %v, dst is %v", op, x.Shape(), axis, want, dst.Shape())
	}
	n := x.Dim(a)
	if n == 0 {
		return fmt.Errorf("cuda: %s: axis %d of x %v is empty", op, axis, x.Shape())
	}
	name, err := floatKernel(op, "argmax_rows", x.DType())
	if err != nil {
		return err
	}
	pd, err := d.ptrOf(op, "dst", dst, tensor.I64)
	if err != nil {
		return err
	}
	px, err := d.ptrOf(op, "x", x, x.DType())
	if err != nil {
		return err
	}
	inner := tensor.Numel(x.Shape()[a+1:])
	release := d.enter()
	defer release()
	var ar args
	return d.launchRows(name, dst.Numel(), ar.ptr(pd).ptr(px).i64(int64(n)).i64(int64(inner)))
}

// CountCorrect adds to acc (F32 [N]) 1 for each row i of logits [N, C]
// (F32 or BF16) whose first maximum lies at target[i] (I64 or I32 [N]),
// in one launch. A target outside [0, C) never matches.
func (d *Device) CountCorrect(acc, logits, target *tensor.Tensor) error {
	const op = "CountCorrect"
	pt, t64, n, c, err := d.ceTargets(op, logits, target)
	if err != nil {
		return err
	}
	if c == 0 {
		return fmt.Errorf("cuda: %s: logits %v has no classes", op, logits.Shape())
	}
	if acc.Rank() != 1 || acc.Dim(0) != n {
		return fmt.Errorf("cuda: %s: acc %v for logits %v, want [%d]", op, acc.Shape(), logits.Shape(), n)
	}
	name, err := floatKernel(op, "count_correct_rows", logits.DType())
	if err != nil {
		return err
	}
	pa, err := d.ptrOf(op, "acc", acc, tensor.F32)
	if err != nil {
		return err
	}
	px, err := d.ptrOf(op, "logits", logits, logits.DType())
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	return d.launchRows(name, n, a.ptr(pa).ptr(px).ptr(pt).i32(b2i(t64)).i64(int64(c)))
}
