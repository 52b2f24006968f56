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
// the F32 or BF16 variant of a kernel. An error names the op and the
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
