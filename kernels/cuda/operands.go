//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The device's first operations, each a check and one kernel (or cuBLAS)
// launch on the stream: the building blocks of the kernels.Backend that
// the CUDA issue completes. Operands are contiguous tensors on this
// device; an error says which operand is wrong.

// ptrOf returns t's device address (its storage's plus its offset) after
// checking that t is a contiguous tensor on d of dtype dt.
func (d *Device) ptrOf(op, what string, t *tensor.Tensor, dt tensor.DType) (cu.DevicePtr, error) {
	if t == nil {
		return 0, fmt.Errorf("cuda: %s: %s is nil", op, what)
	}
	if dev := t.Device(); dev != tensor.CUDA(d.ordinal) {
		return 0, fmt.Errorf("cuda: %s: %s is on %v, not cuda:%d", op, what, dev, d.ordinal)
	}
	if !t.IsContiguous() {
		return 0, fmt.Errorf("cuda: %s: %s (shape %v) is not contiguous", op, what, t.Shape())
	}
	if t.DType() != dt {
		return 0, fmt.Errorf("cuda: %s: %s is %v, want %v", op, what, t.DType(), dt)
	}
	return cu.DevicePtr(t.Storage().DevicePtr()) + cu.DevicePtr(t.Offset()*dt.Size()), nil
}

// floatKernel names the F32 or BF16 variant of kernel base.
func floatKernel(op, base string, dt tensor.DType) (string, error) {
	switch dt {
	case tensor.F32:
		return base + "_f32", nil
	case tensor.BF16:
		return base + "_bf16", nil
	}
	return "", fmt.Errorf("cuda: %s: dtype %v (F32 and BF16 run here)", op, dt)
}

// Fill sets every element of the contiguous dst to v, converted to dst's
// dtype as the CPU backend converts (any dtype: F32 and BF16 take their
// own kernels, the others a fill of v's bit pattern).
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

// Cast copies x into dst converting F32 to BF16 (round to nearest even)
// or BF16 to F32.
func (d *Device) Cast(dst, x *tensor.Tensor) error {
	var name string
	switch {
	case x.DType() == tensor.F32 && dst.DType() == tensor.BF16:
		name = "cast_f32_bf16"
	case x.DType() == tensor.BF16 && dst.DType() == tensor.F32:
		name = "cast_bf16_f32"
	default:
		return fmt.Errorf("cuda: Cast from %v to %v (F32↔BF16 run here)", x.DType(), dst.DType())
	}
	if err := sameShape("Cast", dst, x); err != nil {
		return err
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

// Unary sets dst = op(x) elementwise (same shape and dtype, F32 or BF16;
// bf16 values are computed in fp32).
func (d *Device) Unary(op kernels.UnaryOp, dst, x *tensor.Tensor) error {
	if op >= kernels.UnaryOp(len(kernels.UnaryOps())) {
		return fmt.Errorf("cuda: Unary: unknown op %d", op)
	}
	name, err := floatKernel("Unary", "unary", x.DType())
	if err != nil {
		return err
	}
	if err := sameShape("Unary", dst, x); err != nil {
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

// Binary sets dst = a op b elementwise for every BinaryOp (comparisons
// write a Bool dst), with a and b views of any strides whose shapes
// broadcast to dst's (NumPy rules; rank ≤ 6 after merging axes); dst is
// contiguous. Contiguous operands of dst's shape, or a one-element scalar
// over the other, take the flat kernels; F32 full operands the 16-byte
// vector kernel when aligned.
func (d *Device) Binary(op kernels.BinaryOp, dst, x, y *tensor.Tensor) error {
	if op.IsComparison() || !x.IsContiguous() || !y.IsContiguous() {
		return d.binaryND("Binary", op, dst, x, y, 0, modeTensors)
	}
	dt := dst.DType()
	name, err := floatKernel("Binary", "binary", dt)
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

// SGDStep is kernels.Backend's SGDStep on F32 arenas: hyper is an F64
// [2] tensor {lr, step} on the device, mom nil without momentum,
// foundInf (F32, one element) optional.
func (d *Device) SGDStep(param, grad, mom, hyper, foundInf *tensor.Tensor, o kernels.SGDOptions) error {
	const op = "SGDStep"
	pp, pg, pm, ph, pf, err := d.optimPtrs(op, param, grad, mom, hyper, foundInf)
	if err != nil {
		return err
	}
	if (mom == nil) != (o.Momentum == 0) {
		return fmt.Errorf("cuda: %s: momentum %v with momentum buffer %v", op, o.Momentum, mom != nil)
	}
	release := d.enter()
	defer release()
	var a args
	a.ptr(pp).ptr(pg).ptr(pm).ptr(ph).ptr(pf)
	a.f32(float32(o.Momentum)).f32(float32(1 - o.Dampening)).f32(float32(o.WeightDecay))
	a.i32(b2i(o.Nesterov)).i32(b2i(o.Maximize)).i64(int64(param.Numel()))
	return d.launch1D("sgd_f32", int64(param.Numel()), &a)
}

// AdamWStep is kernels.Backend's AdamWStep on F32 arenas.
func (d *Device) AdamWStep(param, grad, m, v, hyper, foundInf *tensor.Tensor, o kernels.AdamWOptions) error {
	const op = "AdamWStep"
	if m == nil || v == nil {
		return fmt.Errorf("cuda: %s: m and v are required", op)
	}
	pp, pg, pm, ph, pf, err := d.optimPtrs(op, param, grad, m, hyper, foundInf)
	if err != nil {
		return err
	}
	pv, err := d.ptrOf(op, "v", v, tensor.F32)
	if err != nil {
		return err
	}
	if err := sameShape(op, param, v); err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	a.ptr(pp).ptr(pg).ptr(pm).ptr(pv).ptr(ph).ptr(pf)
	a.f32(float32(o.Beta1)).f32(float32(o.Beta2)).f32(float32(1 - o.Beta1)).f32(float32(1 - o.Beta2)).f32(float32(o.Eps))
	a.f64(o.WeightDecay).f64(o.Beta1).f64(o.Beta2).i64(int64(param.Numel()))
	return d.launch1D("adamw_f32", int64(param.Numel()), &a)
}

// optimPtrs checks an optimizer step's operands (F32 param, grad and
// state of one shape; F64 [2] hyper; optional F32 foundInf) and returns
// their addresses (0 for an absent state or foundInf).
func (d *Device) optimPtrs(op string, param, grad, state, hyper, foundInf *tensor.Tensor) (pp, pg, ps, ph, pf cu.DevicePtr, err error) {
	if pp, err = d.ptrOf(op, "param", param, tensor.F32); err != nil {
		return
	}
	if pg, err = d.ptrOf(op, "grad", grad, tensor.F32); err != nil {
		return
	}
	if err = sameShape(op, param, grad); err != nil {
		return
	}
	if state != nil {
		if ps, err = d.ptrOf(op, "state", state, tensor.F32); err != nil {
			return
		}
		if err = sameShape(op, param, state); err != nil {
			return
		}
	}
	if ph, err = d.ptrOf(op, "hyper", hyper, tensor.F64); err != nil {
		return
	}
	if hyper.Numel() != 2 {
		err = fmt.Errorf("cuda: %s: hyper has %d elements, want 2 {lr, step}", op, hyper.Numel())
		return
	}
	if foundInf != nil {
		pf, err = d.ptrOf(op, "foundInf", foundInf, tensor.F32)
	}
	return
}

// MatMul sets dst = op(a)·op(b) for rank-2 or rank-3 (batched) F32 or
// BF16 operands of one dtype through cuBLAS, in the given precision for
// F32 (BF16 always accumulates in fp32). A rank-2 operand broadcasts over
// the other's batch (a batch stride of 0); dst is rank 3 when either is.
func (d *Device) MatMul(dst, a, b *tensor.Tensor, transA, transB bool, prec Precision) error {
	const op = "MatMul"
	dt := dst.DType()
	var blasType int
	switch dt {
	case tensor.F32:
		blasType = dataF32
	case tensor.BF16:
		blasType = dataBF16
	default:
		return fmt.Errorf("cuda: %s: dtype %v (F32 and BF16 run here)", op, dt)
	}
	as, bs, ds := a.Shape(), b.Shape(), dst.Shape()
	ra, rb := len(as), len(bs)
	if ra < 2 || ra > 3 || rb < 2 || rb > 3 || len(ds) != max(ra, rb) {
		return fmt.Errorf("cuda: %s: shapes %v, %v into %v (rank 2, or rank 3 with one batch)", op, as, bs, ds)
	}
	m, k := as[ra-2], as[ra-1]
	if transA {
		m, k = k, m
	}
	k2, n := bs[rb-2], bs[rb-1]
	if transB {
		k2, n = n, k2
	}
	batch, r := 1, len(ds)
	var sa, sb int64
	if r == 3 {
		batch = ds[0]
		if ra == 3 {
			sa = int64(m * k)
		}
		if rb == 3 {
			sb = int64(k * n)
		}
		if (ra == 3 && as[0] != batch) || (rb == 3 && bs[0] != batch) {
			return fmt.Errorf("cuda: %s: batches of %v and %v do not give %v", op, as, bs, ds)
		}
	}
	if k != k2 || ds[r-2] != m || ds[r-1] != n {
		return fmt.Errorf("cuda: %s: %v (transA %v) by %v (transB %v) does not give %v", op, as, transA, bs, transB, ds)
	}
	pd, err := d.ptrOf(op, "dst", dst, dt)
	if err != nil {
		return err
	}
	pa, err := d.ptrOf(op, "a", a, dt)
	if err != nil {
		return err
	}
	pb, err := d.ptrOf(op, "b", b, dt)
	if err != nil {
		return err
	}
	if k == 0 || batch == 0 {
		return d.Fill(dst, 0)
	}
	h, err := d.blasHandle()
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	return h.gemmRowMajor(transA, transB, m, n, k, pa, as[ra-1], sa, pb, bs[rb-1], sb, pd, n, int64(m*n), batch, blasType, prec)
}

// blasHandle returns the device's cuBLAS handle, creating it once.
func (d *Device) blasHandle() (*blasHandle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.blas != nil {
		return d.blas, nil
	}
	h, err := newBlasHandle(d)
	if err != nil {
		return nil, err
	}
	d.blas = h
	return h, nil
}

// sameShape reports an error unless a and b have one shape.
func sameShape(op string, a, b *tensor.Tensor) error {
	if !tensor.SameShape(a.Shape(), b.Shape()) {
		return fmt.Errorf("cuda: %s: shapes %v and %v differ", op, a.Shape(), b.Shape())
	}
	return nil
}
