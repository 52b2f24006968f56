//go:build cuda

package cuda

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// kernels.ChannelAxpyer on the device (src/elementwise.cu): ChannelAxpy
// is one launch of channel_axpy; ChannelAxpyBackward one launch of
// channel_axpy_bwd (a block per plane: dy and the plane's Σ g⊙y in fp64)
// and, for ds, one of channel_axpy_ds adding the planes of each scale in
// sample order, as the CPU backend adds them. F32 alone (the interface's
// dtypes are F32 and F64, and the device has no F64 kernels).

var _ kernels.ChannelAxpyer = (*Backend)(nil)

// ChannelAxpy implements kernels.ChannelAxpyer (F32).
func (b *Backend) ChannelAxpy(dst, x, y, s *T) { must(b.d.ChannelAxpy(dst, x, y, s)) }

// ChannelAxpyBackward implements kernels.ChannelAxpyer (F32).
func (b *Backend) ChannelAxpyBackward(dy, ds, g, y, s *T) {
	must(b.d.ChannelAxpyBackward(dy, ds, g, y, s))
}

// axpyPlanes checks the operands of a channel axpy: y [N, C, ...] with x
// (the residual, or the output gradient) and every non-nil of outs of its
// shape, s of 1 or C elements, all F32 and contiguous on the device. It
// returns the planes and the number of scales.
func (d *Device) axpyPlanes(op string, x, y, s *tensor.Tensor, names []string, outs []*tensor.Tensor) (n, c, hw, ns int, err error) {
	if n, c, hw, err = kernels.Planes(op, y.Shape()); err != nil {
		return 0, 0, 0, 0, checked(err)
	}
	if err := checked(kernels.CheckSameShape(op, names[0], x, y.Shape())); err != nil {
		return 0, 0, 0, 0, err
	}
	if ns = s.Numel(); ns != 1 && ns != c {
		return 0, 0, 0, 0, fmt.Errorf("cuda: %s: scale of shape %v: want 1 or %d elements (y %v)", op, s.Shape(), c, y.Shape())
	}
	for i, t := range outs {
		if t != nil {
			if err := checked(kernels.CheckSameShape(op, names[i+1], t, y.Shape())); err != nil {
				return 0, 0, 0, 0, err
			}
		}
	}
	if err := onlyF32(op, x, y, s); err != nil {
		return 0, 0, 0, 0, err
	}
	for _, t := range outs {
		if t != nil {
			if err := onlyF32(op, t); err != nil {
				return 0, 0, 0, 0, err
			}
		}
	}
	return n, c, hw, ns, nil
}

// ChannelAxpy sets dst = x + s⊙y for x, y and dst [N, C, ...] and s of C
// elements (per channel) or one, the product and the sum rounded as
// Binary Mul and Binary Add round them.
func (d *Device) ChannelAxpy(dst, x, y, s *tensor.Tensor) error {
	const op = "ChannelAxpy"
	_, c, hw, ns, err := d.axpyPlanes(op, x, y, s, []string{"x", "dst"}, []*tensor.Tensor{dst})
	if err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"dst", "x", "y", "s"}, []*tensor.Tensor{dst, x, y, s},
		[]tensor.DType{tensor.F32, tensor.F32, tensor.F32, tensor.F32}, []bool{false, false, false, false})
	if err != nil {
		return err
	}
	total := int64(y.Numel())
	release := d.enter()
	defer release()
	var a args
	a.ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).ptr(ptrs[3]).i64(int64(ns)).i64(int64(c)).i64(int64(max(hw, 1))).i64(total)
	return d.launch1D("channel_axpy_f32", total, &a)
}

// ChannelAxpyBackward computes from g the non-nil of dy = s⊙g (y's shape)
// and ds (s's shape): ds[k] = Σ g⊙y over the planes of scale k, each
// plane summed in fp64 and the planes added in sample order, rounded
// once.
func (d *Device) ChannelAxpyBackward(dy, ds, g, y, s *tensor.Tensor) error {
	const op = "ChannelAxpyBackward"
	n, c, hw, ns, err := d.axpyPlanes(op, g, y, s, []string{"g", "dy"}, []*tensor.Tensor{dy})
	if err != nil {
		return err
	}
	if ds != nil {
		if err := checked(kernels.CheckSameShape(op, "ds", ds, s.Shape())); err != nil {
			return err
		}
	}
	ptrs, err := d.ptrList(op, []string{"dy", "ds", "g", "y", "s"}, []*tensor.Tensor{dy, ds, g, y, s},
		[]tensor.DType{tensor.F32, tensor.F32, tensor.F32, tensor.F32, tensor.F32}, []bool{true, true, false, false, false})
	if err != nil {
		return err
	}
	pdy, pds, pg, py, ps := ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4]
	planes := n * c
	if planes == 0 || (dy == nil && ds == nil) {
		if ds != nil {
			return d.Fill(ds, 0) // Σ over no elements
		}
		return nil
	}
	var part *tensor.Tensor
	var pp uint64
	if ds != nil {
		// One fp64 partial per plane: 2·planes F32 words.
		if part, err = d.scratchF32(2 * planes); err != nil {
			return err
		}
		defer part.Storage().Free() // stream order keeps it until the launches have run
		p, _ := d.ptrOf(op, "scratch", part, tensor.F32)
		pp = uint64(p)
	}
	bwd, err := d.kernel("channel_axpy_bwd_f32")
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	a.ptr(pdy).push(pp).ptr(pg).ptr(py).ptr(ps).i64(int64(ns)).i64(int64(c)).i64(int64(hw))
	// A block per plane, of as many warps as the plane fills (at most
	// rowThreads threads).
	threads := min(rowThreads, max(32, (hw+31)/32*32))
	if err := launchRaw(bwd, [3]int{planes, 1, 1}, [3]int{threads, 1, 1}, 0, d.stream, &a); err != nil {
		return err
	}
	if ds == nil {
		return nil
	}
	var e args
	return d.launch1D("channel_axpy_ds_f32", int64(ns), e.ptr(pds).push(pp).i64(int64(ns)).i64(int64(planes)))
}
