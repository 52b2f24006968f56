//go:build cuda

package cuda

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Concat and Pad are strided copies (Copy's kernels) into views of dst,
// one launch per source (and one fill for Pad).

// Concat implements kernels.Backend.
func (b *Backend) Concat(dst *T, srcs []*T, axis int) { must(b.d.Concat(dst, srcs, axis)) }

// Pad implements kernels.Backend.
func (b *Backend) Pad(dst, x *T, pads []int, value float64) { must(b.d.Pad(dst, x, pads, value)) }

// Concat joins srcs (views of any strides, dst's dtype or one Copy
// converts from) along axis into dst.
func (d *Device) Concat(dst *tensor.Tensor, srcs []*tensor.Tensor, axis int) error {
	const op = "Concat"
	a, err := kernels.CheckConcat(op, dst, srcs, axis)
	if err := checked(err); err != nil {
		return err
	}
	off := 0
	for _, t := range srcs {
		n := t.Dim(a)
		if n > 0 {
			if err := d.Copy(dst.Narrow(a, off, n), t); err != nil {
				return fmt.Errorf("%w (in %s)", err, op)
			}
		}
		off += n
	}
	return nil
}

// Pad writes x into contiguous dst with pads[2i], pads[2i+1] elements of
// value before and after axis i (len(pads) = 2·rank).
func (d *Device) Pad(dst, x *tensor.Tensor, pads []int, value float64) error {
	const op = "Pad"
	if err := checked(kernels.CheckPad(op, dst, x, pads)); err != nil {
		return err
	}
	inner := dst
	for i, s := range x.Shape() {
		inner = inner.Narrow(i, pads[2*i], s)
	}
	if err := d.Fill(dst, value); err != nil {
		return err
	}
	if x.Numel() == 0 {
		return nil
	}
	return d.Copy(inner, x)
}
