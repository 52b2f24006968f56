package aggregation

import (
	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/tensor"
)

// GradsToFlatTensor is GradsToFlat on the gradients' device: it copies
// the gradients of params into dst one after the other in parameter
// order (each in row-major order) with the backend's Copy, converting to
// dst's dtype, and fills zeros where a parameter has no gradient. dst is
// a contiguous float tensor of FlatLen(params) elements (any shape,
// usually [n] from GradientBufferPool.AcquireOn) on the device of the
// gradients. Nothing is read on the host: on a device the whole flatten
// is one kernel launch per parameter and no host sync.
//
// A gradient that already is its segment of dst (an optimizer arena's
// flat gradient passed as dst) is left alone. It fails, writing nothing,
// when params is empty, when no parameter has a gradient, when gradients
// mix dtypes or devices, when a gradient's size differs from its
// parameter's, or when dst is nil, not float, not contiguous, of the
// wrong length or on another device than the gradients.
func GradsToFlatTensor(params []*autograd.Var, dst *tensor.Tensor) error {
	const op = "GradsToFlatTensor"
	total, err := flatLen(op, params)
	if err != nil {
		return err
	}
	if err := checkVector(op, "destination", dst, total); err != nil {
		return err
	}
	if _, err := gradLayout(op, params, false, true); err != nil {
		return err
	}
	if err := gradsOn(op, params, dst.Device()); err != nil {
		return err
	}
	be, err := backendFor(op, dst.Device())
	if err != nil {
		return err
	}
	off := 0
	for _, p := range params {
		n := p.Value.Numel()
		if n == 0 {
			continue
		}
		seg := segment(dst, off, n)
		off += n
		switch g := p.Grad; {
		case g == nil:
			be.Fill(seg, 0)
		case sameElements(seg, g):
		default:
			be.Copy(seg, g)
		}
	}
	return nil
}

// FlatTensorToGrads is FlatToGrads on the gradients' device, the inverse
// of GradsToFlatTensor: consecutive segments of flat in parameter order
// are copied into the gradients of params by the backend's Copy,
// converted to each gradient's dtype. A parameter without a gradient
// gets a new one of its own dtype and shape on flat's device. It fails,
// changing nothing, when the element counts differ, when params is
// empty, when flat is not a contiguous float tensor, or when gradients
// mix dtypes or lie on another device than flat.
func FlatTensorToGrads(flat *tensor.Tensor, params []*autograd.Var) error {
	const op = "FlatTensorToGrads"
	total, err := flatLen(op, params)
	if err != nil {
		return err
	}
	if err := checkVector(op, "flat gradient", flat, total); err != nil {
		return err
	}
	if _, err := gradLayout(op, params, true, true); err != nil {
		return err
	}
	dev := flat.Device()
	if err := gradsOn(op, params, dev); err != nil {
		return err
	}
	be, err := backendFor(op, dev)
	if err != nil {
		return err
	}
	// Allocate the missing gradients first, so that a failed allocation
	// changes nothing.
	var made []*tensor.Tensor
	for i, p := range params {
		if p.Grad != nil {
			continue
		}
		if made == nil {
			made = make([]*tensor.Tensor, len(params))
		}
		dt := p.Value.DType()
		if !dt.IsFloat() {
			dt = tensor.F32
		}
		g, err := emptyOn(op, dev, dt, p.Value.Shape()...)
		if err != nil {
			return err
		}
		made[i] = g
	}
	off := 0
	for i, p := range params {
		n := p.Value.Numel()
		g := p.Grad
		if g == nil {
			g = made[i]
			p.Grad = g
		}
		if n == 0 {
			continue
		}
		seg := segment(flat, off, n)
		off += n
		if !sameElements(seg, g) {
			be.Copy(g, seg)
		}
	}
	return nil
}

// gradsOn checks that every existing gradient of params lies on dev.
func gradsOn(op string, params []*autograd.Var, dev tensor.Device) error {
	for i, p := range params {
		if p.Grad != nil && p.Grad.Device() != dev {
			return invalid(op, "gradient of parameter %s is on %v, the flat buffer on %v", paramLabel(p, i), p.Grad.Device(), dev)
		}
	}
	return nil
}

// GroupNorms writes into dst, a contiguous F64 tensor of G elements on
// the gradients' device, the L2 norm of each group of gradients:
// dst[g] = ‖grads[i] for every i with group[i] = g‖ (the norm of their
// concatenation; 0 for an empty group), summed in float64 by the
// backend's ForeachNorm. nil gradients and those of group −1 are left
// out. It reads nothing on the host: the single-seed observing path
// (one participant's and the teacher's norm, straight from the
// gradients) takes both norms this way on a device, and ForeachNorm of
// dst itself gives the norm of their union. It fails when the lists
// differ in length, a group lies outside [−1, G), dst is not a
// contiguous F64 tensor, or the gradients lie elsewhere than dst.
func GroupNorms(dst *tensor.Tensor, grads []*tensor.Tensor, group []int) error {
	const op = "GroupNorms"
	if dst == nil || dst.DType() != tensor.F64 || !dst.IsContiguous() {
		return invalid(op, "dst must be a contiguous f64 tensor")
	}
	if len(grads) != len(group) {
		return invalid(op, "%d gradients and %d groups", len(grads), len(group))
	}
	g := dst.Numel()
	dev := dst.Device()
	for i, x := range grads {
		if group[i] < -1 || group[i] >= g {
			return invalid(op, "gradient %d has group %d, dst has %d", i, group[i], g)
		}
		if x == nil || group[i] < 0 {
			continue
		}
		if x.Device() != dev || !x.DType().IsFloat() || !x.IsContiguous() {
			return invalid(op, "gradient %d is a %v tensor on %v (contiguous %v); want a contiguous float tensor on %v", i, x.DType(), x.Device(), x.IsContiguous(), dev)
		}
	}
	be, err := backendFor(op, dev)
	if err != nil {
		return err
	}
	be.Fill(dst, 0)
	out := elemViews(dst)
	var xs []*tensor.Tensor
	for k := range g {
		xs = xs[:0]
		for i, x := range grads {
			if x != nil && group[i] == k {
				xs = append(xs, x)
			}
		}
		if len(xs) == 0 {
			continue
		}
		// ‖concatenation‖ = ‖(‖x_1‖, …, ‖x_m‖)‖: the per-tensor norms,
		// then the norm of those.
		part, err := emptyOn(op, dev, tensor.F64, len(xs))
		if err != nil {
			return err
		}
		be.ForeachNorm(part, xs)
		be.ForeachNorm(out[k], []*tensor.Tensor{part})
	}
	return nil
}
