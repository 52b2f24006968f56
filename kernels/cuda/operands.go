//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/tensor"
)

// Operand checks shared by every op of the device: ptrOf and its variants
// turn a tensor into a device address after checking that it is on this
// device, contiguous and of the dtype the kernel takes; floatKernel names
// the F32, BF16 or F16 variant of a kernel; sideOperand passes a bias,
// scale or shift of its own float dtype. An error names the op and the
// operand. The shape rules every backend shares are in package kernels.

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

// floatKernel names the F32, BF16 or F16 variant of kernel base (every
// float kernel has the three; F64 does not run here).
func floatKernel(op, base string, dt tensor.DType) (string, error) {
	switch dt {
	case tensor.F32:
		return base + "_f32", nil
	case tensor.BF16:
		return base + "_bf16", nil
	case tensor.F16:
		return base + "_f16", nil
	}
	return "", fmt.Errorf("cuda: %s: dtype %v (F32, BF16 and F16 run here)", op, dt)
}

// wideKernel is floatKernel for the kernels that also have an F64
// variant (base_f64): the elementwise ops (Unary, Binary, BinaryScalar,
// Where, Clamp) and Reduce, which float64 statistics on the device use.
func wideKernel(op, base string, dt tensor.DType) (string, error) {
	if dt == tensor.F64 {
		return base + "_f64", nil
	}
	name, err := floatKernel(op, base, dt)
	if err != nil {
		return "", fmt.Errorf("cuda: %s: dtype %v (F64, F32, BF16 and F16 run here)", op, dt)
	}
	return name, nil
}

// sideOperand checks a side operand of an epilogue (a bias, a scale, a
// shift: contiguous on d, of any of F32, BF16 and F16, whatever the
// kernel's dtype kdt) and returns its address and the code the kernel
// reads it by: the F16 kernels take ld_side's codes (src/common.cuh: 0
// F32, 1 BF16, 2 F16), the F32 and BF16 kernels a flag (1 for BF16, else
// F32), so an F16 operand of theirs is first copied into an F32 scratch
// tensor (exactly: F32 holds every F16 value), which free releases
// (stream order keeps it until the kernel has run). free is never nil.
func (d *Device) sideOperand(op, what string, t *tensor.Tensor, kdt tensor.DType) (p cu.DevicePtr, code int32, free func(), err error) {
	free = func() {}
	if t == nil {
		return 0, 0, free, fmt.Errorf("cuda: %s: %s is nil", op, what)
	}
	dt := t.DType()
	switch dt {
	case tensor.F32:
	case tensor.BF16:
		code = 1
	case tensor.F16:
		code = 2
	default:
		return 0, 0, free, fmt.Errorf("cuda: %s: %s dtype %v (F32, BF16 or F16)", op, what, dt)
	}
	if p, err = d.ptrOf(op, what, t, dt); err != nil {
		return 0, 0, free, err
	}
	if dt != tensor.F16 || kdt == tensor.F16 {
		return p, code, free, nil
	}
	wide, err := tensor.EmptyOn(tensor.CUDA(d.ordinal), tensor.F32, t.Shape()...)
	if err != nil {
		return 0, 0, free, err
	}
	if err := d.Copy(wide, t); err != nil {
		wide.Storage().Free()
		return 0, 0, free, fmt.Errorf("%w (widening %s in %s)", err, what, op)
	}
	p, _ = d.ptrOf(op, what, wide, tensor.F32)
	return p, 0, func() { wide.Storage().Free() }, nil
}

// sameShape reports an error unless a and b have one shape.
func sameShape(op string, a, b *tensor.Tensor) error {
	if !tensor.SameShape(a.Shape(), b.Shape()) {
		return fmt.Errorf("cuda: %s: shapes %v and %v differ", op, a.Shape(), b.Shape())
	}
	return nil
}

// checked names this backend in the error of a check of package kernels
// (the rules every backend shares).
func checked(err error) error {
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}

// optPtr is ptrOf for an optional operand (0 when t is nil).
func (d *Device) optPtr(op, what string, t *tensor.Tensor, dt tensor.DType) (cu.DevicePtr, error) {
	if t == nil {
		return 0, nil
	}
	return d.ptrOf(op, what, t, dt)
}

// ptrList checks a list of operands (optional ones may be nil) and
// returns their addresses.
func (d *Device) ptrList(op string, names []string, ts []*tensor.Tensor, dts []tensor.DType, optional []bool) ([]cu.DevicePtr, error) {
	out := make([]cu.DevicePtr, len(ts))
	for i, t := range ts {
		if t == nil && optional[i] {
			continue
		}
		p, err := d.ptrOf(op, names[i], t, dts[i])
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}
