//go:build cuda

package cuda

import (
	"fmt"

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
	a, err := normAxis(op, axis, dst.Shape())
	if err != nil {
		return err
	}
	bad := func() error {
		shapes := make([][]int, len(srcs))
		for i, t := range srcs {
			shapes[i] = t.Shape()
		}
		return fmt.Errorf("cuda: %s: sources %v do not concatenate into %v along axis %d", op, shapes, dst.Shape(), axis)
	}
	total := 0
	for _, t := range srcs {
		if t == nil || t.Rank() != dst.Rank() {
			return bad()
		}
		for i, s := range t.Shape() {
			if i != a && s != dst.Dim(i) {
				return bad()
			}
		}
		total += t.Dim(a)
	}
	if total != dst.Dim(a) {
		return bad()
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
	if len(pads) != 2*x.Rank() || dst.Rank() != x.Rank() {
		return fmt.Errorf("cuda: %s: x %v with pads %v does not give dst %v", op, x.Shape(), pads, dst.Shape())
	}
	inner := dst
	for i, s := range x.Shape() {
		if pads[2*i] < 0 || pads[2*i+1] < 0 || dst.Dim(i) != s+pads[2*i]+pads[2*i+1] {
			return fmt.Errorf("cuda: %s: x %v with pads %v does not give dst %v", op, x.Shape(), pads, dst.Shape())
		}
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
