package aggregation

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The tensor path (GradsToFlatTensor, PerSeedTensors, TensorCombiner,
// SeedMetricsAccumulator.RecordTensors) computes with the backend of the
// tensors' device and never reads a device tensor on the host: every
// figure a step produces (norms, inner products, conflict flags, the
// PCGrad coefficients) stays in a small tensor on the device, and the
// accumulator brings its sums over once, in Flush. The helpers below are
// what those paths share.

// axis0 is the axis list of a reduction over a vector (read only).
var axis0 = []int{0}

// axis1 is the axis list of a reduction over a matrix's rows (read only).
var axis1 = []int{1}

// backendFor returns the backend of dev, or an error naming op.
func backendFor(op string, dev tensor.Device) (kernels.Backend, error) {
	be, err := kernels.Lookup(dev)
	if err != nil {
		return nil, invalid(op, "%v", err)
	}
	return be, nil
}

// emptyOn allocates a contiguous tensor on dev (not zeroed on every
// device: callers fill it).
func emptyOn(op string, dev tensor.Device, dt tensor.DType, shape ...int) (*tensor.Tensor, error) {
	t, err := tensor.EmptyOn(dev, dt, shape...)
	if err != nil {
		return nil, invalid(op, "allocating %v %v on %v: %v", dt, shape, dev, err)
	}
	return t, nil
}

// filledOn allocates a tensor on dev filled with v by the backend.
func filledOn(op string, be kernels.Backend, dev tensor.Device, dt tensor.DType, v float64, shape ...int) (*tensor.Tensor, error) {
	t, err := emptyOn(op, dev, dt, shape...)
	if err != nil {
		return nil, err
	}
	be.Fill(t, v)
	return t, nil
}

// dotInto writes a·b into dst (one element, a's dtype) with prod (a's
// shape and dtype) as scratch: the products rounded to the dtype, then
// summed by the backend's Reduce (in float64 on the CPU and sim) and
// rounded once.
func dotInto(be kernels.Backend, dst, a, b, prod *tensor.Tensor) {
	be.Binary(kernels.Mul, prod, a, b)
	be.Reduce(kernels.Sum, dst, prod, axis0)
}

// elemViews returns the one-element views t[0], …, t[n−1] of a
// contiguous vector t, made once so that per-step code reuses them.
func elemViews(t *tensor.Tensor) []*tensor.Tensor {
	out := make([]*tensor.Tensor, t.Numel())
	for i := range out {
		out[i] = tensor.New(t.Storage(), []int{1}, []int{1}, t.Offset()+i)
	}
	return out
}

// checkVector checks that t (named what) is a contiguous float tensor of
// n elements.
func checkVector(op, what string, t *tensor.Tensor, n int) error {
	switch {
	case t == nil:
		return invalid(op, "%s is nil", what)
	case !t.DType().IsFloat():
		return invalid(op, "%s has non-float dtype %v", what, t.DType())
	case t.Numel() != n:
		return invalid(op, "%s has %d elements, want %d", what, t.Numel(), n)
	case !t.IsContiguous():
		return invalid(op, "%s (shape %v) is not contiguous", what, t.Shape())
	}
	return nil
}

// vectorView returns t viewed as a vector of its elements (t contiguous).
func vectorView(t *tensor.Tensor) *tensor.Tensor {
	if t.Rank() == 1 {
		return t
	}
	return t.Reshape(t.Numel())
}

// segment returns the view t[start : start+n] of a contiguous tensor t
// taken as a vector (no copy).
func segment(t *tensor.Tensor, start, n int) *tensor.Tensor {
	return tensor.New(t.Storage(), []int{n}, []int{1}, t.Offset()+start)
}

// sameElements reports whether a and b are the same contiguous elements
// of one storage (a copy between them would be a no-op).
func sameElements(a, b *tensor.Tensor) bool {
	return a.Storage() == b.Storage() && a.Offset() == b.Offset() && a.Numel() == b.Numel() &&
		a.IsContiguous() && b.IsContiguous()
}
