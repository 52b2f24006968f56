//go:build cuda

package cuda

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Reductions and softmax along any axis (src/rows.cu): x is viewed as
// [outer, n, inner] around the axis. Lines along the last axis (inner =
// 1) take one block each; lines along a middle axis one thread each, the
// threads of a warp on neighbouring inner positions so loads coalesce.

// split3 views shape as [outer, shape[axis], inner].
func split3(shape []int, axis int) (outer, n, inner int) {
	return tensor.Numel(shape[:axis]), shape[axis], tensor.Numel(shape[axis+1:])
}

// normAxis resolves a possibly negative axis of shape.
func normAxis(op string, axis int, shape []int) (int, error) {
	a := axis
	if a < 0 {
		a += len(shape)
	}
	if a < 0 || a >= len(shape) {
		return 0, fmt.Errorf("cuda: %s: axis %d out of range for shape %v", op, axis, shape)
	}
	return a, nil
}

// Reduce reduces x over axes into dst, which has x's rank with the
// reduced axes of size 1 (kernels.Backend's keep-dims form), for every
// ReduceOp: sums, means and the log-sum-exp accumulate in fp64, max and
// min propagate NaN. x and dst are contiguous, of one dtype (F32 or
// BF16). When the reduced axes are not one run of neighbours (after
// dropping axes of size 1) x is first copied with them moved last.
func (d *Device) Reduce(op kernels.ReduceOp, dst, x *tensor.Tensor, axes []int) error {
	const name = "Reduce"
	if op > kernels.LogSumExp {
		return fmt.Errorf("cuda: %s: unknown op %d", name, op)
	}
	dt := x.DType()
	if _, err := floatKernel(name, "reduce", dt); err != nil {
		return err
	}
	xs := x.Shape()
	red := make([]bool, len(xs))
	for _, ax := range axes {
		a, err := normAxis(name, ax, xs)
		if err != nil {
			return err
		}
		red[a] = true
	}
	want := append([]int(nil), xs...)
	for i := range want {
		if red[i] {
			want[i] = 1
		}
	}
	if !tensor.SameShape(dst.Shape(), want) {
		return fmt.Errorf("cuda: %s %v: x %v over axes %v gives %v, dst is %v", name, op, xs, axes, want, dst.Shape())
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
		k, _ := floatKernel(name, "reduce_axis_block", dt)
		return d.launchRows(k, outer, a.i32(int32(op)).ptr(pd).ptr(ps).i64(int64(n)).i64(1))
	}
	k, _ := floatKernel(name, "reduce_axis_thread", dt)
	return d.launch1D(k, int64(outer*inner), a.i32(int32(op)).ptr(pd).ptr(ps).i64(int64(outer)).i64(int64(n)).i64(int64(inner)))
}

// SoftmaxAxis writes the softmax (or, with log, the log-softmax) of x
// along axis into dst (same shape and dtype, F32 or BF16, contiguous).
func (d *Device) SoftmaxAxis(dst, x *tensor.Tensor, axis int, log bool) error {
	op := map[bool]string{false: "Softmax", true: "LogSoftmax"}[log]
	a, err := normAxis(op, axis, x.Shape())
	if err != nil {
		return err
	}
	outer, n, inner := split3(x.Shape(), a)
	if inner == 1 {
		return d.Softmax(dst, x, log)
	}
	dt := x.DType()
	name, err := floatKernel(op, "softmax_axis", dt)
	if err != nil {
		return err
	}
	if err := sameShape(op, dst, x); err != nil {
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
	a, err := normAxis(op, axis, y.Shape())
	if err != nil {
		return err
	}
	outer, n, inner := split3(y.Shape(), a)
	if inner == 1 {
		return d.SoftmaxBackward(dx, y, dy, log)
	}
	dt := y.DType()
	name, err := floatKernel(op, "softmax_bwd_axis", dt)
	if err != nil {
		return err
	}
	for _, t := range []*tensor.Tensor{dx, dy} {
		if err := sameShape(op, t, y); err != nil {
			return err
		}
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
