//go:build cuda

package cuda

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// MaxPool2d implements kernels.Backend.
func (b *Backend) MaxPool2d(dst, argmax, x *T, p kernels.Pool2dParams) {
	must(b.d.MaxPool2d(dst, argmax, x, p))
}

// MaxPool2dBackward implements kernels.Backend.
func (b *Backend) MaxPool2dBackward(dx, dy, argmax *T, p kernels.Pool2dParams) {
	must(b.d.MaxPool2dBackward(dx, dy, argmax, p))
}

// AvgPool2d implements kernels.Backend.
func (b *Backend) AvgPool2d(dst, x *T, p kernels.Pool2dParams) { must(b.d.AvgPool2d(dst, x, p)) }

// AvgPool2dBackward implements kernels.Backend.
func (b *Backend) AvgPool2dBackward(dx, dy *T, p kernels.Pool2dParams) {
	must(b.d.AvgPool2dBackward(dx, dy, p))
}

// poolGeom is struct Pool of src/pool.cu, word for word.
type poolGeom struct {
	planes, h, w, ho, wo, kh, kw, sh, sw, ph, pw, includePad int64
}

func (g *poolGeom) words() []uint64 {
	return []uint64{uint64(g.planes), uint64(g.h), uint64(g.w), uint64(g.ho), uint64(g.wo), uint64(g.kh),
		uint64(g.kw), uint64(g.sh), uint64(g.sw), uint64(g.ph), uint64(g.pw), uint64(g.includePad)}
}

// checkPool checks a pooling's input x [N,C,H,W] and output y
// [N,C,Ho,Wo] against p (kernels.CheckPool2d) and returns the launch
// geometry.
func checkPool(op string, x, y *tensor.Tensor, p kernels.Pool2dParams) (poolGeom, error) {
	k, err := kernels.CheckPool2d(op, x.Shape(), y.Shape(), p)
	if err != nil {
		return poolGeom{}, checked(err)
	}
	q := k.P
	return poolGeom{planes: int64(k.Planes()), h: int64(k.H), w: int64(k.W), ho: int64(k.Ho), wo: int64(k.Wo),
		kh: int64(q.KernelH), kw: int64(q.KernelW), sh: int64(q.StrideH), sw: int64(q.StrideW),
		ph: int64(q.PadH), pw: int64(q.PadW), includePad: int64(b2i(q.CountIncludePad))}, nil
}

// poolIndex checks a max pooling's argmax (I32 or I64, the output's
// shape; optional when allowNil) and reports whether it is I64.
func (d *Device) poolIndex(op string, argmax, out *tensor.Tensor, allowNil bool) (p uint64, a64 bool, err error) {
	if argmax == nil {
		if allowNil {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("cuda: %s: argmax is required", op)
	}
	if err := checked(kernels.CheckPoolArgmax(op, argmax, out.Shape())); err != nil {
		return 0, false, err
	}
	ptr, err := d.ptrOf(op, "argmax", argmax, argmax.DType())
	return uint64(ptr), argmax.DType() == tensor.I64, err
}

// MaxPool2d writes the window maxima of x [N,C,H,W] into dst and, when
// argmax (I32 or I64, dst's shape) is given, the flat H·W index of each
// maximum within its input plane: the first in scan order, a NaN winning
// at once, padding never (the CPU backend's convention).
func (d *Device) MaxPool2d(dst, argmax, x *tensor.Tensor, p kernels.Pool2dParams) error {
	const op = "MaxPool2d"
	g, err := checkPool(op, x, dst, p)
	if err != nil {
		return err
	}
	return d.poolLaunch(op, "maxpool_fwd", dst, argmax, x, dst, true, g, g.planes*g.ho*g.wo)
}

// MaxPool2dBackward overwrites dx [N,C,H,W] with dy routed to argmax
// (summed where windows overlap).
func (d *Device) MaxPool2dBackward(dx, dy, argmax *tensor.Tensor, p kernels.Pool2dParams) error {
	const op = "MaxPool2dBackward"
	g, err := checkPool(op, dx, dy, p)
	if err != nil {
		return err
	}
	return d.poolLaunch(op, "maxpool_bwd", dx, argmax, dy, dy, false, g, g.planes*g.h*g.w)
}

// AvgPool2d averages each window of x into dst (PyTorch's divisor rules,
// CountIncludePad as kernels.Pool2dParams says).
func (d *Device) AvgPool2d(dst, x *tensor.Tensor, p kernels.Pool2dParams) error {
	const op = "AvgPool2d"
	g, err := checkPool(op, x, dst, p)
	if err != nil {
		return err
	}
	return d.poolLaunch(op, "avgpool_fwd", dst, nil, x, nil, false, g, g.planes*g.ho*g.wo)
}

// AvgPool2dBackward overwrites dx with each dy spread evenly over its
// window.
func (d *Device) AvgPool2dBackward(dx, dy *tensor.Tensor, p kernels.Pool2dParams) error {
	const op = "AvgPool2dBackward"
	g, err := checkPool(op, dx, dy, p)
	if err != nil {
		return err
	}
	return d.poolLaunch(op, "avgpool_bwd", dx, nil, dy, nil, false, g, g.planes*g.h*g.w)
}

// poolLaunch checks out and in (contiguous, one float dtype) and the
// argmax of the max pools (idxOf non-nil: its shape), then launches base
// over n elements: (out, [argmax, a64,] in, geometry) in the forward
// order, (out, in, argmax, a64, geometry) for the max backward.
func (d *Device) poolLaunch(op, base string, out, argmax, in, idxOf *tensor.Tensor, optionalIdx bool, g poolGeom, n int64) error {
	dt := in.DType()
	name, err := floatKernel(op, base, dt)
	if err != nil {
		return err
	}
	po, err := d.ptrOf(op, "output", out, dt)
	if err != nil {
		return err
	}
	pi, err := d.ptrOf(op, "input", in, dt)
	if err != nil {
		return err
	}
	var a args
	switch base {
	case "maxpool_fwd":
		pa, a64, err := d.poolIndex(op, argmax, idxOf, optionalIdx)
		if err != nil {
			return err
		}
		a.ptr(po).push(pa).i32(b2i(a64)).ptr(pi)
	case "maxpool_bwd":
		pa, a64, err := d.poolIndex(op, argmax, idxOf, optionalIdx)
		if err != nil {
			return err
		}
		a.ptr(po).ptr(pi).push(pa).i32(b2i(a64))
	default:
		a.ptr(po).ptr(pi)
	}
	a.push(g.words()...)
	release := d.enter()
	defer release()
	return d.launch1D(name, n, &a)
}
