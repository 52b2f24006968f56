//go:build cuda

package cuda

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The reduce family (src/reduce.cu): Reduce over any axes, ArgMax along
// one, and CountCorrect. x is viewed as [outer, n, inner] around the
// reduced axes. Lines along the last axis (inner = 1) take one block each;
// lines along a middle axis one thread each, the threads of a warp on
// neighbouring inner positions so loads coalesce.

// Reduce implements kernels.Backend.
func (b *Backend) Reduce(op kernels.ReduceOp, dst, x *T, axes []int) {
	must(b.d.Reduce(op, dst, x, axes))
}

// ArgMax implements kernels.Backend.
func (b *Backend) ArgMax(dst, x *T, axis int) { must(b.d.ArgMax(dst, x, axis)) }

// CountCorrect implements kernels.Backend.
func (b *Backend) CountCorrect(acc, logits, target *T) { must(b.d.CountCorrect(acc, logits, target)) }

// Reduce reduces x over axes into dst, which has x's rank with the
// reduced axes of size 1 (kernels.Backend's keep-dims form), for every
// ReduceOp: sums, means and the log-sum-exp accumulate in fp64, max and
// min propagate NaN. x and dst are contiguous, of one dtype (F64, F32,
// BF16 or F16). When the reduced axes are not one run of neighbours (after
// dropping axes of size 1) x is first copied with them moved last.
func (d *Device) Reduce(op kernels.ReduceOp, dst, x *tensor.Tensor, axes []int) error {
	const name = "Reduce"
	xs := x.Shape()
	red := make([]bool, len(xs))
	if err := checked(kernels.CheckReduce(name, op, dst, x, axes, red)); err != nil {
		return err
	}
	dt := x.DType()
	if _, err := wideKernel(name, "reduce", dt); err != nil {
		return err
	}
	pd, err := d.ptrOf(name, "dst", dst, dt)
	if err != nil {
		return err
	}
	if _, err := d.ptrOf(name, "x", x, dt); err != nil {
		return err
	}
	// Runs of reduced axes, ignoring axes of size 1.
	runs, last := 0, -1
	for i, s := range xs {
		if s == 1 {
			continue
		}
		k := 0
		if red[i] {
			k = 1
		}
		if k == 1 && last != 1 {
			runs++
		}
		last = k
	}
	src := x
	outer, n, inner := x.Numel(), 1, 1
	switch {
	case runs == 1:
		first, end := -1, 0
		for i, s := range xs {
			if red[i] && s != 1 {
				if first < 0 {
					first = i
				}
				end = i + 1
			}
		}
		outer, n, inner = tensor.Numel(xs[:first]), tensor.Numel(xs[first:end]), tensor.Numel(xs[end:])
	case runs > 1:
		var perm, shape []int
		for _, r := range []bool{false, true} {
			for i, s := range xs {
				if red[i] == r {
					perm = append(perm, i)
					shape = append(shape, s)
				}
			}
		}
		tmp, err := tensor.EmptyOn(tensor.CUDA(d.ordinal), dt, shape...)
		if err != nil {
			return err
		}
		defer tmp.Storage().Free() // stream order keeps it until the reduction has run
		if err := d.Copy(tmp, x.Permute(perm...)); err != nil {
			return err
		}
		src = tmp
		outer, n = dst.Numel(), x.Numel()/max(dst.Numel(), 1)
	}
	if dst.Numel() == 0 {
		return nil
	}
	ps, _ := d.ptrOf(name, "x", src, dt)
	release := d.enter()
	defer release()
	var a args
	if inner == 1 && n >= 32 {
		k, _ := wideKernel(name, "reduce_axis_block", dt)
		return d.launchRows(k, outer, a.i32(int32(op)).ptr(pd).ptr(ps).i64(int64(n)).i64(1))
	}
	k, _ := wideKernel(name, "reduce_axis_thread", dt)
	return d.launch1D(k, int64(outer*inner), a.i32(int32(op)).ptr(pd).ptr(ps).i64(int64(outer)).i64(int64(n)).i64(int64(inner)))
}

// ArgMax writes into dst (I64, x's shape with axis of size 1) the index
// of the first maximum of x (F32, BF16 or F16) along axis, NaN counting as the
// maximum as in PyTorch and the CPU backend.
func (d *Device) ArgMax(dst, x *tensor.Tensor, axis int) error {
	const op = "ArgMax"
	a, err := kernels.CheckArgMax(op, dst, x, axis)
	if err := checked(err); err != nil {
		return err
	}
	n := x.Dim(a)
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
// (F32, BF16 or F16) whose first maximum lies at target[i] (I64 or I32 [N]),
// in one launch. A target outside [0, C) never matches.
func (d *Device) CountCorrect(acc, logits, target *tensor.Tensor) error {
	const op = "CountCorrect"
	n, c, err := kernels.CheckCountCorrect(op, acc, logits, target)
	if err := checked(err); err != nil {
		return err
	}
	pt, t64, err := d.indexPtr(op, "target", target)
	if err != nil {
		return err
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
