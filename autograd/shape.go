package autograd

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// Which shape ops return views of their input's Value:
//   - Reshape, Flatten, Squeeze and Unsqueeze return a view when the input
//     is contiguous (a contiguous copy otherwise); their result is always
//     contiguous.
//   - Narrow and Split return strided views, which may be non-contiguous.
//     Every op in this package accepts such values; kernels called
//     directly on them need contig-style packing first.
//   - Permute, Transpose, Expand, Concat, Stack and Pad return new
//     contiguous tensors.
// Writing into a view writes into the input; gradients are correct
// either way.

// Reshape returns x with a new shape (one dimension may be -1).
func Reshape(x *Var, shape ...int) *Var {
	xs := x.Shape()
	shape = tensor.InferShape(x.Value.Numel(), shape, "reshape", xs)
	out := reshapeT(x.Value, shape...)
	return result("reshape", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{reshapeT(g, xs...)}
		}
	})
}

// Flatten merges the axes from startAxis to the last into one.
func Flatten(x *Var, startAxis int) *Var {
	xs := x.Shape()
	if len(xs) == 0 {
		return Reshape(x, 1)
	}
	a := normAxis("flatten", xs, startAxis)
	shape := append(append([]int(nil), xs[:a]...), tensor.Numel(xs[a:]))
	return Reshape(x, shape...)
}

// Squeeze removes the given size-1 axes, or every size-1 axis when none
// are given.
func Squeeze(x *Var, axes ...int) *Var {
	xs := x.Shape()
	drop := make([]bool, len(xs))
	if len(axes) == 0 {
		for i, d := range xs {
			drop[i] = d == 1
		}
	}
	for _, a := range axes {
		j := normAxis("squeeze", xs, a)
		if xs[j] != 1 {
			panic(fmt.Sprintf("autograd: squeeze: axis %d of shape %v has size %d", a, xs, xs[j]))
		}
		drop[j] = true
	}
	shape := []int{}
	for i, d := range xs {
		if !drop[i] {
			shape = append(shape, d)
		}
	}
	return Reshape(x, shape...)
}

// Unsqueeze inserts a size-1 axis at position axis (0..rank; negative
// counts from the end, -1 appends).
func Unsqueeze(x *Var, axis int) *Var {
	xs := x.Shape()
	r := len(xs)
	a := axis
	if a < 0 {
		a += r + 1
	}
	if a < 0 || a > r {
		panic(fmt.Sprintf("autograd: unsqueeze: axis %d out of range for shape %v", axis, xs))
	}
	shape := append(append(append([]int(nil), xs[:a]...), 1), xs[a:]...)
	return Reshape(x, shape...)
}

// Permute reorders the axes (result axis i is input axis dims[i]) and
// returns a contiguous result.
func Permute(x *Var, dims ...int) *Var {
	xs := x.Shape()
	if len(dims) != len(xs) {
		panic(fmt.Sprintf("autograd: permute: dims %v for shape %v", dims, xs))
	}
	seen := make([]bool, len(xs))
	d := make([]int, len(dims))
	for i, a := range dims {
		j := normAxis("permute", xs, a)
		if seen[j] {
			panic(fmt.Sprintf("autograd: permute: dims %v repeat an axis of shape %v", dims, xs))
		}
		seen[j] = true
		d[i] = j
	}
	inv := make([]int, len(d))
	for i, j := range d {
		inv[j] = i
	}
	out := contigCopy(x.Value.Permute(d...))
	return result("permute", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{contigCopy(g.Permute(inv...))}
		}
	})
}

// contigCopy packs t into a new contiguous tensor even if t already is
// one, so results never alias their inputs.
func contigCopy(t *tensor.Tensor) *tensor.Tensor {
	out := alloc(t, t.DType(), t.Shape()...)
	backendOf(out).Copy(out, t)
	return out
}

// Transpose swaps axes a and b (a contiguous result).
func Transpose(x *Var, a, b int) *Var {
	xs := x.Shape()
	dims := make([]int, len(xs))
	for i := range dims {
		dims[i] = i
	}
	a, b = normAxis("transpose", xs, a), normAxis("transpose", xs, b)
	dims[a], dims[b] = dims[b], dims[a]
	return Permute(x, dims...)
}

// Narrow returns elements start..start+length-1 along axis, as a view of
// x's value.
func Narrow(x *Var, axis, start, length int) *Var {
	xs := x.Shape()
	a := normAxis("narrow", xs, axis)
	if start < 0 || length < 0 || start+length > xs[a] {
		panic(fmt.Sprintf("autograd: narrow: start %d length %d out of range along axis %d of shape %v", start, length, axis, xs))
	}
	out := x.Value.Narrow(a, start, length)
	return result("narrow", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			dx := full(g, g.DType(), 0, xs...)
			backendOf(dx).Copy(dx.Narrow(a, start, length), g)
			return []*tensor.Tensor{dx}
		}
	})
}

// Split cuts x along axis into pieces of the given sizes (which must add
// up to the axis length), as views (see Narrow).
func Split(x *Var, sizes []int, axis int) []*Var {
	xs := x.Shape()
	a := normAxis("split", xs, axis)
	total := 0
	for _, s := range sizes {
		if s < 0 {
			panic(fmt.Sprintf("autograd: split: negative size in %v for shape %v", sizes, xs))
		}
		total += s
	}
	if total != xs[a] {
		panic(fmt.Sprintf("autograd: split: sizes %v do not add up to axis %d of shape %v", sizes, axis, xs))
	}
	out := make([]*Var, len(sizes))
	off := 0
	for i, s := range sizes {
		out[i] = Narrow(x, a, off, s)
		off += s
	}
	return out
}

// Expand broadcasts x to shape (size-1 axes and new leading axes; -1
// keeps an axis) and returns a contiguous result.
func Expand(x *Var, shape ...int) *Var {
	xs := x.Shape()
	if len(shape) < len(xs) {
		panic(fmt.Sprintf("autograd: expand: shape %v to lower rank %v", xs, shape))
	}
	lead := len(shape) - len(xs)
	target := append([]int(nil), shape...)
	for i := range target {
		if i >= lead && target[i] == -1 {
			target[i] = xs[i-lead]
		}
		if target[i] < 0 || (i >= lead && xs[i-lead] != 1 && xs[i-lead] != target[i]) {
			panic(fmt.Sprintf("autograd: expand: shape %v cannot expand to %v", xs, shape))
		}
	}
	out := contigCopy(x.Value.Expand(target...))
	return result("expand", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{sumTo(g, xs)}
		}
	})
}

// Concat joins xs along axis; every other axis must agree. Mixed dtypes
// are promoted.
func Concat(xs []*Var, axis int) *Var {
	if len(xs) == 0 {
		panic("autograd: concat: no inputs")
	}
	s0 := xs[0].Shape()
	a := normAxis("concat", s0, axis)
	total := 0
	for _, x := range xs {
		s := x.Shape()
		ok := len(s) == len(s0)
		for d := 0; ok && d < len(s); d++ {
			ok = d == a || s[d] == s0[d]
		}
		if !ok {
			panic(fmt.Sprintf("autograd: concat: shapes %v and %v differ off axis %d", s0, s, a))
		}
		total += s[a]
	}
	xs = promote(xs...)
	os := append([]int(nil), s0...)
	os[a] = total
	srcs := vals(xs...)
	out := alloc(srcs[0], srcs[0].DType(), os...)
	backendOf(out).Concat(out, srcs, a)
	return result("concat", out, xs, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			grads := make([]*tensor.Tensor, len(xs))
			off := 0
			for i, x := range xs {
				n := x.Shape()[a]
				if needs(x) {
					// A view where the slice is contiguous (a concat
					// along the first axis, a Stack's): gradients are
					// never written in place, so it need not be a copy.
					grads[i] = contig(g.Narrow(a, off, n))
				}
				off += n
			}
			return grads
		}
	})
}

// Stack joins equally shaped xs along a new axis.
func Stack(xs []*Var, axis int) *Var {
	if len(xs) == 0 {
		panic("autograd: stack: no inputs")
	}
	s0 := xs[0].Shape()
	for _, x := range xs {
		if !tensor.SameShape(x.Shape(), s0) {
			panic(fmt.Sprintf("autograd: stack: shapes %v and %v differ", s0, x.Shape()))
		}
	}
	us := make([]*Var, len(xs))
	for i, x := range xs {
		us[i] = Unsqueeze(x, axis)
	}
	return Concat(us, axis)
}

// Pad surrounds x with value: pads[2i] elements before and pads[2i+1]
// after axis i (len(pads) = 2·rank, all ≥ 0).
func Pad(x *Var, pads []int, value float64) *Var {
	xs := x.Shape()
	if len(pads) != 2*len(xs) {
		panic(fmt.Sprintf("autograd: pad: %d pads for shape %v (want %d)", len(pads), xs, 2*len(xs)))
	}
	os := make([]int, len(xs))
	for i, d := range xs {
		if pads[2*i] < 0 || pads[2*i+1] < 0 {
			panic(fmt.Sprintf("autograd: pad: negative pads %v for shape %v", pads, xs))
		}
		os[i] = d + pads[2*i] + pads[2*i+1]
	}
	pads = append([]int(nil), pads...)
	xv := contig(x.Value)
	out := alloc(xv, xv.DType(), os...)
	backendOf(out).Pad(out, xv, pads, value)
	return result("pad", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			v := g
			for i, d := range xs {
				v = v.Narrow(i, pads[2*i], d)
			}
			return []*tensor.Tensor{contigCopy(v)}
		}
	})
}
