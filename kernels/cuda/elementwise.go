//go:build cuda

package cuda

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// UnaryBackward sets dx = dy·op'(x) elementwise with the CPU backend's
// formulas (Sign's derivative is zero). y = op(x) is optional: Exp,
// Sigmoid, Tanh, Sqrt, Rsqrt and Recip use it when given, and x may then
// be nil; every other op needs x. All operands are contiguous, of one
// shape and dtype (F32 or BF16, computed in fp32).
func (d *Device) UnaryBackward(op kernels.UnaryOp, dx, x, y, dy *tensor.Tensor) error {
	const name = "UnaryBackward"
	if op >= kernels.UnaryOp(len(kernels.UnaryOps())) {
		return fmt.Errorf("cuda: %s: unknown op %d", name, op)
	}
	dt := dy.DType()
	kernel, err := floatKernel(name, "unary_bwd", dt)
	if err != nil {
		return err
	}
	usesY := op == kernels.Exp || op == kernels.Sigmoid || op == kernels.Tanh || op == kernels.Sqrt || op == kernels.Rsqrt || op == kernels.Recip
	if !usesY {
		y = nil
	}
	if x == nil && y == nil {
		return fmt.Errorf("cuda: %s %v: needs x (or y for the ops that reuse their output)", name, op)
	}
	for _, t := range []*tensor.Tensor{dx, x, y} {
		if t != nil {
			if err := sameShape(name, t, dy); err != nil {
				return err
			}
		}
	}
	ptrs, err := d.ptrList(name, []string{"dx", "x", "y", "dy"}, []*tensor.Tensor{dx, x, y, dy},
		[]tensor.DType{dt, dt, dt, dt}, []bool{false, true, true, false})
	if err != nil {
		return err
	}
	n := int64(dy.Numel())
	release := d.enter()
	defer release()
	var a args
	return d.launch1D(kernel, n, a.i32(int32(op)).ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).ptr(ptrs[3]).i64(n))
}

// Clamp sets dst = min(max(x, lo), hi) elementwise (NaN stays NaN, as in
// torch.clamp); dst and x contiguous, one shape and dtype (F32 or BF16).
// The bounds are rounded to fp32, as the CPU backend does for both.
func (d *Device) Clamp(dst, x *tensor.Tensor, lo, hi float64) error {
	const op = "Clamp"
	dt := x.DType()
	name, err := floatKernel(op, "clamp", dt)
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
	n := int64(x.Numel())
	release := d.enter()
	defer release()
	var a args
	return d.launch1D(name, n, a.ptr(pd).ptr(px).f32(float32(lo)).f32(float32(hi)).i64(n))
}

// Binary modes of binary_nd (src/elementwise.cu).
const (
	modeTensors   = 0 // a op b
	modeScalar    = 1 // a op s
	modeScalarLHS = 2 // s op a
)

// checkBinaryDst checks a binary op's dst: contiguous on d, Bool for the
// comparisons and of the operands' dtype dt otherwise.
func (d *Device) checkBinaryDst(name string, op kernels.BinaryOp, dst *tensor.Tensor, dt tensor.DType) error {
	if op >= kernels.BinaryOp(len(kernels.BinaryOps())) {
		return fmt.Errorf("cuda: %s: unknown op %d", name, op)
	}
	want := dt
	if op.IsComparison() {
		want = tensor.Bool
	}
	_, err := d.ptrOf(name, "dst", dst, want)
	return err
}

// binaryND launches binary_nd: dst (contiguous) = a op b, a op s or s op
// a, with a and b any views broadcasting to dst's shape (b nil for the
// scalar modes).
func (d *Device) binaryND(name string, op kernels.BinaryOp, dst, x, y *tensor.Tensor, s float64, mode int32) error {
	dt := x.DType()
	kernel, err := floatKernel(name, "binary_nd", dt)
	if err != nil {
		return err
	}
	if err := d.checkBinaryDst(name, op, dst, dt); err != nil {
		return err
	}
	shape := dst.Shape()
	pd, _ := d.ptrOf(name, "dst", dst, dst.DType())
	px, sx, err := d.bcastView(name, "a", x, dt, shape)
	if err != nil {
		return err
	}
	py, sy := pd, make([]int, len(shape)) // unread in the scalar modes
	if y != nil {
		if py, sy, err = d.bcastView(name, "b", y, dt, shape); err != nil {
			return err
		}
	}
	g, err := newGeom(name, shape, tensor.ContiguousStrides(shape), sx, sy)
	if err != nil {
		return err
	}
	n := int64(dst.Numel())
	release := d.enter()
	defer release()
	var a args
	a.i32(int32(op)).ptr(pd).ptr(px).ptr(py).f32(float32(s)).i32(mode).push(g.words()...).i64(n)
	return d.launch1D(kernel, n, &a)
}

// BinaryScalar sets dst = a op s, or s op a when swap is set, for every
// BinaryOp (comparisons write a Bool dst); a is any view of F32 or BF16
// broadcasting to dst's shape, and s is rounded to fp32 as on the CPU.
func (d *Device) BinaryScalar(op kernels.BinaryOp, dst, x *tensor.Tensor, s float64, swap bool) error {
	mode := int32(modeScalar)
	if swap {
		mode = modeScalarLHS
	}
	return d.binaryND("BinaryScalar", op, dst, x, nil, s, mode)
}

// Where sets dst = cond ? a : b elementwise, with cond (Bool), a and b
// any views broadcasting to dst's shape; dst contiguous, a and b of its
// dtype (F32 or BF16).
func (d *Device) Where(dst, cond, x, y *tensor.Tensor) error {
	const op = "Where"
	dt := dst.DType()
	kernel, err := floatKernel(op, "where_nd", dt)
	if err != nil {
		return err
	}
	pd, err := d.ptrOf(op, "dst", dst, dt)
	if err != nil {
		return err
	}
	shape := dst.Shape()
	pc, sc, err := d.bcastView(op, "cond", cond, tensor.Bool, shape)
	if err != nil {
		return err
	}
	px, sx, err := d.bcastView(op, "a", x, dt, shape)
	if err != nil {
		return err
	}
	py, sy, err := d.bcastView(op, "b", y, dt, shape)
	if err != nil {
		return err
	}
	g, err := newGeom(op, shape, tensor.ContiguousStrides(shape), sc, sx, sy)
	if err != nil {
		return err
	}
	n := int64(dst.Numel())
	release := d.enter()
	defer release()
	var a args
	return d.launch1D(kernel, n, a.ptr(pd).ptr(pc).ptr(px).ptr(py).push(g.words()...).i64(n))
}
