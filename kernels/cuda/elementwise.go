//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The elementwise family (src/elementwise.cu): fills, casts and strided
// copies between any dtypes, unary ops and their derivatives, binary ops
// with broadcasting (flat kernels for contiguous operands of one shape or
// a scalar, binary_nd over strided views otherwise), where and clamp. F32,
// BF16 and F16 compute in fp32 (the half types rounded to nearest even on
// store); Fill and Copy take every dtype.

// Fill implements kernels.Backend (any dtype).
func (b *Backend) Fill(dst *T, v float64) { must(b.d.Fill(dst, v)) }

// Copy implements kernels.Backend (any dtypes, any strides, both on the
// device).
func (b *Backend) Copy(dst, src *T) { must(b.d.Copy(dst, src)) }

// Unary implements kernels.Backend (F64, F32, BF16, F16).
func (b *Backend) Unary(op kernels.UnaryOp, dst, x *T) { must(b.d.Unary(op, dst, x)) }

// UnaryBackward implements kernels.Backend (F32, BF16, F16).
func (b *Backend) UnaryBackward(op kernels.UnaryOp, dx, x, y, dy *T) {
	must(b.d.UnaryBackward(op, dx, x, y, dy))
}

// Binary implements kernels.Backend (F64, F32, BF16, F16; comparisons into
// Bool).
func (b *Backend) Binary(op kernels.BinaryOp, dst, x, y *T) { must(b.d.Binary(op, dst, x, y)) }

// BinaryScalar implements kernels.Backend.
func (b *Backend) BinaryScalar(op kernels.BinaryOp, dst, x *T, s float64, swap bool) {
	must(b.d.BinaryScalar(op, dst, x, s, swap))
}

// Where implements kernels.Backend.
func (b *Backend) Where(dst, cond, x, y *T) { must(b.d.Where(dst, cond, x, y)) }

// Clamp implements kernels.Backend.
func (b *Backend) Clamp(dst, x *T, lo, hi float64) { must(b.d.Clamp(dst, x, lo, hi)) }

// Fill sets every element of the contiguous dst to v, converted to dst's
// dtype as the CPU backend converts (any dtype: F32, BF16 and F16 take
// their own kernels, the others a fill of v's bit pattern).
func (d *Device) Fill(dst *tensor.Tensor, v float64) error {
	p, err := d.ptrOf("Fill", "dst", dst, dst.DType())
	if err != nil {
		return err
	}
	n := int64(dst.Numel())
	release := d.enter()
	defer release()
	var a args
	if name, err := floatKernel("Fill", "fill", dst.DType()); err == nil {
		return d.launch1D(name, n, a.ptr(p).f32(float32(v)).i64(n))
	}
	bits, err := fillBits("Fill", dst.DType(), v)
	if err != nil {
		return err
	}
	return d.launch1D(fmt.Sprintf("fill_raw%d", dst.DType().Size()), n, a.ptr(p).push(bits).i64(n))
}

// fillBits is v stored in dtype dt, as the bit pattern fill_raw writes.
func fillBits(op string, dt tensor.DType, v float64) (uint64, error) {
	switch dt {
	case tensor.F64:
		return math.Float64bits(v), nil
	case tensor.F32:
		return uint64(math.Float32bits(float32(v))), nil
	case tensor.BF16:
		return uint64(tensor.F32ToBF16(float32(v))), nil
	case tensor.F16:
		return uint64(tensor.F32ToF16(float32(v))), nil
	case tensor.I32:
		return uint64(uint32(int32(v))), nil
	case tensor.I64:
		return uint64(int64(v)), nil
	case tensor.Bool:
		if v != 0 {
			return 1, nil
		}
		return 0, nil
	}
	return 0, fmt.Errorf("cuda: %s: invalid dtype %v", op, dt)
}

// Cast copies x into dst (contiguous, one shape) converting its dtype:
// F32 to BF16 or F16 (round to nearest even) and back by kernels of their
// own, any other pair as Copy converts.
func (d *Device) Cast(dst, x *tensor.Tensor) error {
	var name string
	switch {
	case x.DType() == tensor.F32 && dst.DType() == tensor.BF16:
		name = "cast_f32_bf16"
	case x.DType() == tensor.BF16 && dst.DType() == tensor.F32:
		name = "cast_bf16_f32"
	case x.DType() == tensor.F32 && dst.DType() == tensor.F16:
		name = "cast_f32_f16"
	case x.DType() == tensor.F16 && dst.DType() == tensor.F32:
		name = "cast_f16_f32"
	}
	if err := sameShape("Cast", dst, x); err != nil {
		return err
	}
	if name == "" {
		if !dst.IsContiguous() || !x.IsContiguous() {
			return fmt.Errorf("cuda: Cast: dst (shape %v) and x must be contiguous", dst.Shape())
		}
		return d.Copy(dst, x)
	}
	pd, err := d.ptrOf("Cast", "dst", dst, dst.DType())
	if err != nil {
		return err
	}
	px, err := d.ptrOf("Cast", "x", x, x.DType())
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	return d.launch1D(name, int64(x.Numel()), a.ptr(pd).ptr(px).i64(int64(x.Numel())))
}

// Copy copies src into dst element by element in row-major order; both
// may be views of any strides with equal element counts (dst must not
// overlap src). Equal dtypes are copied as raw words; F32↔BF16 and
// F32↔F16 by kernels of their own, rounding to nearest even into the half
// type; any other pair converts through fp64 as the CPU backend does
// (float→int truncates, bool is v ≠ 0; into a half type through fp32,
// rounded to nearest even).
func (d *Device) Copy(dst, src *tensor.Tensor) error {
	const op = "Copy"
	if dst.Numel() != src.Numel() {
		return fmt.Errorf("cuda: %s: dst %v and src %v have different element counts", op, dst.Shape(), src.Shape())
	}
	name, err := copyKernel(dst.DType(), src.DType())
	if err != nil {
		return err
	}
	pd, err := d.viewPtr(op, "dst", dst, dst.DType())
	if err != nil {
		return err
	}
	ps, err := d.viewPtr(op, "src", src, src.DType())
	if err != nil {
		return err
	}
	n := int64(dst.Numel())
	if n == 0 {
		return nil
	}
	var shape, dstSt, srcSt []int
	switch {
	case tensor.SameShape(dst.Shape(), src.Shape()):
		shape, dstSt, srcSt = dst.Shape(), dst.Strides(), src.Strides()
	case src.IsContiguous():
		shape, dstSt, srcSt = dst.Shape(), dst.Strides(), tensor.ContiguousStrides(dst.Shape())
	case dst.IsContiguous():
		shape, dstSt, srcSt = src.Shape(), tensor.ContiguousStrides(src.Shape()), src.Strides()
	default:
		// Both strided with different shapes: through a packed copy.
		tmp, err := tensor.EmptyOn(tensor.CUDA(d.ordinal), src.DType(), src.Shape()...)
		if err != nil {
			return err
		}
		defer tmp.Storage().Free() // stream order keeps it alive for both launches
		if err := d.Copy(tmp, src); err != nil {
			return err
		}
		return d.Copy(dst, tmp)
	}
	g, err := newGeom(op, shape, dstSt, srcSt)
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	if name == "copy_nd_cvt" {
		return d.launch1D(name, n, a.ptr(pd).i32(dtypeCode[dst.DType()]).ptr(ps).i32(dtypeCode[src.DType()]).push(g.words()...).i64(n))
	}
	return d.launch1D(name, n, a.ptr(pd).ptr(ps).push(g.words()...).i64(n))
}

// copyKernel names the copy kernel from src's dtype to dst's; the
// converting copy_nd_cvt (dtype codes after the geometry's pointers)
// takes the pairs without a kernel of their own.
func copyKernel(dst, src tensor.DType) (string, error) {
	switch {
	case dst == src && dst != tensor.Invalid:
		return fmt.Sprintf("copy_nd_raw%d", dst.Size()), nil
	case dst == tensor.BF16 && src == tensor.F32:
		return "copy_nd_f32_bf16", nil
	case dst == tensor.F32 && src == tensor.BF16:
		return "copy_nd_bf16_f32", nil
	case dst == tensor.F16 && src == tensor.F32:
		return "copy_nd_f32_f16", nil
	case dst == tensor.F32 && src == tensor.F16:
		return "copy_nd_f16_f32", nil
	}
	if _, ok := dtypeCode[dst]; !ok {
		return "", fmt.Errorf("cuda: Copy into invalid dtype %v", dst)
	}
	if _, ok := dtypeCode[src]; !ok {
		return "", fmt.Errorf("cuda: Copy from invalid dtype %v", src)
	}
	return "copy_nd_cvt", nil
}

// dtypeCode numbers the dtypes as src/elementwise.cu's D_* codes.
var dtypeCode = map[tensor.DType]int32{tensor.F64: 0, tensor.F32: 1, tensor.BF16: 2, tensor.F16: 3, tensor.I64: 4, tensor.I32: 5, tensor.Bool: 6}

// Unary sets dst = op(x) elementwise (same shape and dtype, F64, F32,
// BF16 or F16; half values are computed in fp32, F64 in double).
func (d *Device) Unary(op kernels.UnaryOp, dst, x *tensor.Tensor) error {
	if err := checked(kernels.CheckUnary("Unary", op, dst, x)); err != nil {
		return err
	}
	name, err := wideKernel("Unary", "unary", x.DType())
	if err != nil {
		return err
	}
	pd, err := d.ptrOf("Unary", "dst", dst, x.DType())
	if err != nil {
		return err
	}
	px, err := d.ptrOf("Unary", "x", x, x.DType())
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	return d.launch1D(name, int64(x.Numel()), a.i32(int32(op)).ptr(pd).ptr(px).i64(int64(x.Numel())))
}

// ScaleActAdd implements kernels.ScaleActAdder (F32; other dtypes run
// kernels.ScaleActAddOps).
func (b *Backend) ScaleActAdd(dst, x *T, s float64, act kernels.UnaryOp, r *T) {
	if x != nil && dst != nil && (x.DType() != tensor.F32 || dst.DType() != tensor.F32 || (r != nil && r.DType() != tensor.F32)) {
		kernels.ScaleActAddOps(b, dst, x, s, act, r)
		return
	}
	must(b.d.ScaleActAdd(dst, x, s, act, r))
}

// ScaleActAdd sets dst = act(s·x) + r (r optional) for contiguous F32
// tensors of one shape in one launch of scale_act_add_f32
// (Backend.ScaleActAdd runs the three ops for other dtypes).
func (d *Device) ScaleActAdd(dst, x *tensor.Tensor, s float64, act kernels.UnaryOp, r *tensor.Tensor) error {
	const op = "ScaleActAdd"
	if dst == nil || x == nil {
		return fmt.Errorf("cuda: %s: dst and x are required (r may be nil)", op)
	}
	if err := checked(kernels.CheckUnary(op, act, dst, x)); err != nil {
		return err
	}
	if r != nil {
		if err := sameShape(op, r, x); err != nil {
			return err
		}
	}
	ptrs, err := d.ptrList(op, []string{"dst", "x", "r"}, []*tensor.Tensor{dst, x, r},
		[]tensor.DType{tensor.F32, tensor.F32, tensor.F32}, []bool{false, false, true})
	if err != nil {
		return err
	}
	n := int64(x.Numel())
	release := d.enter()
	defer release()
	var a args
	a.ptr(ptrs[0]).ptr(ptrs[1]).f32(float32(s)).i32(b2i(s != 1)).i32(int32(act)).ptr(ptrs[2]).i64(n)
	return d.launch1D("scale_act_add_f32", n, &a)
}

// UnaryBackward sets dx = dy·op'(x) elementwise with the CPU backend's
// formulas (Sign's derivative is zero). y = op(x) is optional: Exp,
// Sigmoid, Tanh, Sqrt, Rsqrt and Recip use it when given, and x may then
// be nil; every other op needs x. All operands are contiguous, of one
// shape and dtype (F32, BF16 or F16, computed in fp32).
func (d *Device) UnaryBackward(op kernels.UnaryOp, dx, x, y, dy *tensor.Tensor) error {
	const name = "UnaryBackward"
	useY, err := kernels.CheckUnaryBackward(name, op, dx, x, y, dy)
	if err := checked(err); err != nil {
		return err
	}
	if !useY {
		y = nil
	}
	dt := dy.DType()
	kernel, err := floatKernel(name, "unary_bwd", dt)
	if err != nil {
		return err
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

// Binary sets dst = a op b elementwise for every BinaryOp (comparisons
// write a Bool dst), with a and b views of any strides whose shapes
// broadcast to dst's (NumPy rules; rank ≤ 6 after merging axes); dst is
// contiguous. Contiguous operands of dst's shape, or a one-element scalar
// over the other, take the flat kernels; F32 full operands the 16-byte
// vector kernel when aligned.
func (d *Device) Binary(op kernels.BinaryOp, dst, x, y *tensor.Tensor) error {
	if err := checked(kernels.CheckBinary("Binary", op, dst, x, y)); err != nil {
		return err
	}
	if op.IsComparison() || !x.IsContiguous() || !y.IsContiguous() {
		return d.binaryND("Binary", op, dst, x, y, 0, modeTensors)
	}
	dt := dst.DType()
	name, err := wideKernel("Binary", "binary", dt)
	if err != nil {
		return err
	}
	n := int64(dst.Numel())
	stride := func(t *tensor.Tensor) (int64, bool) {
		switch {
		case tensor.SameShape(t.Shape(), dst.Shape()):
			return 1, true
		case t.Numel() == 1:
			return 0, true
		}
		return 0, false
	}
	sx, okx := stride(x)
	sy, oky := stride(y)
	if !okx || !oky {
		return d.binaryND("Binary", op, dst, x, y, 0, modeTensors)
	}
	if err := d.checkBinaryDst("Binary", op, dst, dt); err != nil {
		return err
	}
	pd, err := d.ptrOf("Binary", "dst", dst, dt)
	if err != nil {
		return err
	}
	px, err := d.ptrOf("Binary", "a", x, dt)
	if err != nil {
		return err
	}
	py, err := d.ptrOf("Binary", "b", y, dt)
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	if dt == tensor.F32 && sx == 1 && sy == 1 && n%4 == 0 && (pd|px|py)%16 == 0 {
		return d.launch1D("binary_f32_vec4", n/4, a.i32(int32(op)).ptr(pd).ptr(px).ptr(py).i64(n/4))
	}
	return d.launch1D(name, n, a.i32(int32(op)).ptr(pd).ptr(px).i64(sx).ptr(py).i64(sy).i64(n))
}

// Binary modes of binary_nd (src/elementwise.cu).
const (
	modeTensors   = 0 // a op b
	modeScalar    = 1 // a op s
	modeScalarLHS = 2 // s op a
)

// checkBinaryDst checks a binary op's dst (the op and the shapes checked
// by kernels.CheckBinary): contiguous on d, Bool for the comparisons and
// of the operands' dtype dt otherwise.
func (d *Device) checkBinaryDst(name string, op kernels.BinaryOp, dst *tensor.Tensor, dt tensor.DType) error {
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
	kernel, err := wideKernel(name, "binary_nd", dt)
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
	a.i32(int32(op)).ptr(pd).ptr(px).ptr(py)
	if dt == tensor.F64 {
		a.f64(s) // the F64 kernel takes the scalar in double, as the CPU's float64 path
	} else {
		a.f32(float32(s))
	}
	a.i32(mode).push(g.words()...).i64(n)
	return d.launch1D(kernel, n, &a)
}

// BinaryScalar sets dst = a op s, or s op a when swap is set, for every
// BinaryOp (comparisons write a Bool dst); a is any view of F64, F32,
// BF16 or F16 broadcasting to dst's shape, and s is rounded to fp32 (kept
// in double for F64) as on the CPU.
func (d *Device) BinaryScalar(op kernels.BinaryOp, dst, x *tensor.Tensor, s float64, swap bool) error {
	if err := checked(kernels.CheckBinary("BinaryScalar", op, dst, x, nil)); err != nil {
		return err
	}
	mode := int32(modeScalar)
	if swap {
		mode = modeScalarLHS
	}
	return d.binaryND("BinaryScalar", op, dst, x, nil, s, mode)
}

// Where sets dst = cond ? a : b elementwise, with cond (Bool), a and b
// any views broadcasting to dst's shape; dst contiguous, a and b of its
// dtype (F64, F32, BF16 or F16).
func (d *Device) Where(dst, cond, x, y *tensor.Tensor) error {
	const op = "Where"
	if err := checked(kernels.CheckWhere(op, dst, cond, x, y)); err != nil {
		return err
	}
	dt := dst.DType()
	kernel, err := wideKernel(op, "where_nd", dt)
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

// Clamp sets dst = min(max(x, lo), hi) elementwise (NaN stays NaN, as in
// torch.clamp); dst and x contiguous, one shape and dtype (F64, F32, BF16
// or F16). The bounds are rounded to x's dtype's compute type (fp32, or
// double for F64), as the CPU backend does.
func (d *Device) Clamp(dst, x *tensor.Tensor, lo, hi float64) error {
	const op = "Clamp"
	if err := checked(kernels.CheckSameShape(op, "dst", dst, x.Shape())); err != nil {
		return err
	}
	dt := x.DType()
	name, err := wideKernel(op, "clamp", dt)
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
	n := int64(x.Numel())
	release := d.enter()
	defer release()
	var a args
	a.ptr(pd).ptr(px)
	if dt == tensor.F64 {
		a.f64(lo).f64(hi)
	} else {
		a.f32(float32(lo)).f32(float32(hi))
	}
	return d.launch1D(name, n, a.i64(n))
}
