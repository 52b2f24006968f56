package autograd

// Thin wrappers that allocate an output on the input's device and run one
// backend kernel into it. Forward and backward code is written with them
// so that every step stays on the device: nothing here reads a value on
// the host, and every allocation goes through tensor.EmptyOn, which is
// what a capture plans its static buffers from.

import (
	"fmt"
	"sort"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// backwardFunc maps an output gradient to one gradient per input.
type backwardFunc = func(g *tensor.Tensor) []*tensor.Tensor

// alloc allocates a contiguous tensor of dtype dt on like's device. Its
// contents are unspecified (device memory is not zeroed).
func alloc(like *tensor.Tensor, dt tensor.DType, shape ...int) *tensor.Tensor {
	t, err := tensor.EmptyOn(like.Device(), dt, shape...)
	if err != nil {
		panic(err)
	}
	return t
}

// full allocates a tensor filled with v on like's device.
func full(like *tensor.Tensor, dt tensor.DType, v float64, shape ...int) *tensor.Tensor {
	t := alloc(like, dt, shape...)
	backendOf(t).Fill(t, v)
	return t
}

// zerosLike allocates zeros shaped and typed like t.
func zerosLike(t *tensor.Tensor) *tensor.Tensor { return full(t, t.DType(), 0, t.Shape()...) }

// contig returns t when it is contiguous, else a packed copy made by the
// backend (tensor.Contiguous is host-only).
func contig(t *tensor.Tensor) *tensor.Tensor {
	if t.IsContiguous() {
		return t
	}
	out := alloc(t, t.DType(), t.Shape()...)
	backendOf(t).Copy(out, t)
	return out
}

// reshapeT reshapes t, a view when t is contiguous and a device copy
// otherwise.
func reshapeT(t *tensor.Tensor, shape ...int) *tensor.Tensor {
	return contig(t).Reshape(shape...)
}

// needs reports whether backward must produce a gradient for v.
func needs(v *Var) bool { return v != nil && v.requiresGrad }

// vals returns the values of vs (nil for a nil Var).
func vals(vs ...*Var) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(vs))
	for i, v := range vs {
		if v != nil {
			out[i] = v.Value
		}
	}
	return out
}

// broadcastShape is tensor.BroadcastShapes with a panic naming op.
func broadcastShape(op string, a, b []int) []int {
	s, err := tensor.BroadcastShapes(a, b)
	if err != nil {
		panic(fmt.Sprintf("autograd: %s: shapes %v and %v do not broadcast", op, a, b))
	}
	return s
}

// unaryT computes op(x) into a new tensor of x's dtype.
func unaryT(op kernels.UnaryOp, x *tensor.Tensor) *tensor.Tensor {
	x = contig(x)
	out := alloc(x, x.DType(), x.Shape()...)
	backendOf(x).Unary(op, out, x)
	return out
}

// binT computes a op b with broadcasting into a new tensor. Both inputs
// are converted to the promoted dtype first; comparisons give Bool.
func binT(op kernels.BinaryOp, a, b *tensor.Tensor) *tensor.Tensor {
	shape := broadcastShape(op.String(), a.Shape(), b.Shape())
	dt := promoteDType(a.DType(), b.DType())
	a, b = castTo(a, dt), castTo(b, dt)
	odt := dt
	if op.IsComparison() {
		odt = tensor.Bool
	}
	out := alloc(a, odt, shape...)
	backendOf(a).Binary(op, out, a, b)
	return out
}

// binS computes a op s into a new tensor of a's dtype.
func binS(op kernels.BinaryOp, a *tensor.Tensor, s float64) *tensor.Tensor {
	a = contig(a)
	dt := a.DType()
	if op.IsComparison() {
		dt = tensor.Bool
	}
	out := alloc(a, dt, a.Shape()...)
	backendOf(a).BinaryScalar(op, out, a, s, false)
	return out
}

// whereT computes cond ? a : b with broadcasting.
func whereT(cond, a, b *tensor.Tensor) *tensor.Tensor {
	shape := broadcastShape("where", broadcastShape("where", cond.Shape(), a.Shape()), b.Shape())
	out := alloc(a, a.DType(), shape...)
	backendOf(a).Where(out, cond, a, b)
	return out
}

// scalarT allocates a rank-0 tensor holding v on like's device.
func scalarT(like *tensor.Tensor, dt tensor.DType, v float64) *tensor.Tensor {
	return full(like, dt, v)
}

// asDType converts t (Bool masks included) to dt on the device.
func asDType(t *tensor.Tensor, dt tensor.DType) *tensor.Tensor { return castTo(t, dt) }

// normAxes resolves negative axes, sorts them and drops duplicates; nil or
// empty means every axis.
func normAxes(op string, shape []int, axes []int) []int {
	r := len(shape)
	if len(axes) == 0 {
		out := make([]int, r)
		for i := range out {
			out[i] = i
		}
		return out
	}
	seen := make([]bool, r)
	var out []int
	for _, a := range axes {
		j := a
		if j < 0 {
			j += r
		}
		if j < 0 || j >= r {
			panic(fmt.Sprintf("autograd: %s: axis %d out of range for shape %v", op, a, shape))
		}
		if !seen[j] {
			seen[j] = true
			out = append(out, j)
		}
	}
	sort.Ints(out)
	return out
}

// normAxis resolves one possibly negative axis.
func normAxis(op string, shape []int, axis int) int {
	r := len(shape)
	j := axis
	if j < 0 {
		j += r
	}
	if j < 0 || j >= r {
		panic(fmt.Sprintf("autograd: %s: axis %d out of range for shape %v", op, axis, shape))
	}
	return j
}

// keepShape is shape with the axes set to 1.
func keepShape(shape, axes []int) []int {
	out := append([]int(nil), shape...)
	for _, a := range axes {
		out[a] = 1
	}
	return out
}

// dropShape is shape without the axes.
func dropShape(shape, axes []int) []int {
	out := []int{}
	j := 0
	for i, d := range shape {
		if j < len(axes) && axes[j] == i {
			j++
			continue
		}
		out = append(out, d)
	}
	return out
}

// axis0 is the axis list {0}, shared and never modified: a literal passed
// through the kernels.Backend interface would be allocated on every call.
var axis0 = []int{0}

// reduceKeep reduces x over axes (normalised) in keep-dims form.
func reduceKeep(op kernels.ReduceOp, x *tensor.Tensor, axes []int) *tensor.Tensor {
	x = contig(x)
	out := alloc(x, x.DType(), keepShape(x.Shape(), axes)...)
	backendOf(x).Reduce(op, out, x, axes)
	return out
}

// sumTo sums g over the axes along which shape was broadcast to g's shape
// and returns it shaped like shape.
func sumTo(g *tensor.Tensor, shape []int) *tensor.Tensor {
	gs := g.Shape()
	if tensor.SameShape(gs, shape) {
		return g
	}
	lead := len(gs) - len(shape)
	if lead < 0 {
		panic(fmt.Sprintf("autograd: cannot reduce gradient of shape %v to shape %v", gs, shape))
	}
	var axes []int
	for i := range gs {
		if i < lead {
			axes = append(axes, i)
			continue
		}
		if shape[i-lead] == 1 && gs[i] != 1 {
			axes = append(axes, i)
		} else if shape[i-lead] != gs[i] {
			panic(fmt.Sprintf("autograd: cannot reduce gradient of shape %v to shape %v", gs, shape))
		}
	}
	if len(axes) == 0 {
		return reshapeT(g, shape...)
	}
	return reshapeT(reduceKeep(kernels.Sum, g, axes), shape...)
}

// expandTo materialises the broadcast of g (whose shape broadcasts to
// shape) as a contiguous tensor.
func expandTo(g *tensor.Tensor, shape []int) *tensor.Tensor {
	if tensor.SameShape(g.Shape(), shape) {
		return g
	}
	out := alloc(g, g.DType(), shape...)
	backendOf(g).Copy(out, g.Expand(shape...))
	return out
}

// matmulT computes op(a)·op(b) into a new tensor of dtype dt.
func matmulT(a, b *tensor.Tensor, transA, transB bool, dt tensor.DType) *tensor.Tensor {
	return matmulBiasT(a, b, nil, transA, transB, dt)
}

// matmulBiasT is matmulT with bias ([N], nil for none) added in the
// product's epilogue (kernels.Backend.MatMulBias).
func matmulBiasT(a, b, bias *tensor.Tensor, transA, transB bool, dt tensor.DType) *tensor.Tensor {
	a, b, out := matmulOut(a, b, transA, transB, dt)
	if bias != nil {
		backendOf(a).MatMulBias(out, a, b, bias, transA, transB)
	} else {
		backendOf(a).MatMul(out, a, b, transA, transB)
	}
	return out
}

// matmulBiasActT is matmulBiasT with act applied in the same epilogue
// (kernels.Backend.MatMulBiasAct).
func matmulBiasActT(a, b, bias *tensor.Tensor, act kernels.UnaryOp, transA, transB bool, dt tensor.DType) *tensor.Tensor {
	a, b, out := matmulOut(a, b, transA, transB, dt)
	backendOf(a).MatMulBiasAct(out, a, b, bias, act, transA, transB)
	return out
}

// matmulOut makes a and b contiguous and allocates op(a)·op(b)'s output
// ([M, N], or [B, M, N] batched) in dtype dt.
func matmulOut(a, b *tensor.Tensor, transA, transB bool, dt tensor.DType) (ac, bc, out *tensor.Tensor) {
	a, b = contig(a), contig(b)
	m, _, n, batch := matmulShape("matmul", a.Shape(), b.Shape(), transA, transB)
	if batch > 0 {
		return a, b, alloc(a, dt, batch, m, n)
	}
	return a, b, alloc(a, dt, m, n)
}

// matmulShape validates op(a)·op(b) and returns M, K, N and the batch size
// (0 when both operands are rank 2).
func matmulShape(op string, as, bs []int, transA, transB bool) (m, k, n, batch int) {
	if len(as) < 2 || len(as) > 3 || len(bs) < 2 || len(bs) > 3 {
		panic(fmt.Sprintf("autograd: %s: operands must be rank 2 or 3, got shapes %v and %v", op, as, bs))
	}
	m, k = as[len(as)-2], as[len(as)-1]
	if transA {
		m, k = k, m
	}
	kb, n := bs[len(bs)-2], bs[len(bs)-1]
	if transB {
		kb, n = n, kb
	}
	if k != kb {
		panic(fmt.Sprintf("autograd: %s: inner dimensions differ for shapes %v and %v (transA=%v transB=%v)", op, as, bs, transA, transB))
	}
	switch {
	case len(as) == 3 && len(bs) == 3:
		if as[0] != bs[0] {
			panic(fmt.Sprintf("autograd: %s: batch sizes differ for shapes %v and %v", op, as, bs))
		}
		batch = as[0]
	case len(as) == 3:
		batch = as[0]
	case len(bs) == 3:
		batch = bs[0]
	}
	return m, k, n, batch
}

// checkFloat panics unless v holds floats.
func checkFloat(op string, vs ...*Var) {
	for _, v := range vs {
		if v != nil && !v.DType().IsFloat() {
			panic(fmt.Sprintf("autograd: %s: want a float input, got %v of shape %v", op, v.DType(), v.Shape()))
		}
	}
}

// checkIndex panics unless t holds integer indices.
func checkIndex(op string, t *tensor.Tensor) {
	if t == nil || !t.DType().IsInt() {
		if t == nil {
			panic(fmt.Sprintf("autograd: %s: nil index tensor", op))
		}
		panic(fmt.Sprintf("autograd: %s: index must be I64 or I32, got %v of shape %v", op, t.DType(), t.Shape()))
	}
}
