package autograd

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Reductions take axes (negative counts from the end; nil or empty means
// every axis) and keepDim (keep the reduced axes with size 1). Under
// Autocast, Sum, Mean and LogSumExp cast half inputs up to F32 and return
// F32; Max and Min are exact in any dtype and keep it.

// reduceOut runs op and returns the keep-dims result, the result shaped
// as requested, and the normalised axes.
func reduceOut(name string, op kernels.ReduceOp, x *Var, axes []int, keepDim bool) (keep, out *tensor.Tensor, ax []int) {
	checkFloat(name, x)
	ax = normAxes(name, x.Shape(), axes)
	keep = reduceKeep(op, x.Value, ax)
	if keepDim {
		return keep, keep, ax
	}
	return keep, keep.Reshape(dropShape(x.Shape(), ax)...), ax
}

// count is the number of elements reduced per output element.
func count(shape, axes []int) int {
	n := 1
	for _, a := range axes {
		n *= shape[a]
	}
	return n
}

// Sum sums x over axes.
func Sum(x *Var, axes []int, keepDim bool) *Var {
	x = fp32Inputs(x)[0]
	_, out, ax := reduceOut("sum", kernels.Sum, x, axes, keepDim)
	xs := x.Shape()
	return result("sum", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{expandTo(reshapeT(g, keepShape(xs, ax)...), xs)}
		}
	})
}

// Mean averages x over axes.
func Mean(x *Var, axes []int, keepDim bool) *Var {
	x = fp32Inputs(x)[0]
	_, out, ax := reduceOut("mean", kernels.Mean, x, axes, keepDim)
	xs := x.Shape()
	inv := 1 / float64(max(count(xs, ax), 1))
	return result("mean", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			gs := binS(kernels.Mul, reshapeT(g, keepShape(xs, ax)...), inv)
			return []*tensor.Tensor{expandTo(gs, xs)}
		}
	})
}

// extremeBackward routes g to every element equal to the extreme value
// keep, split evenly among ties (PyTorch amax/amin semantics).
func extremeBackward(xv, keep, g *tensor.Tensor, ax []int) *tensor.Tensor {
	mask := asDType(binT(kernels.Eq, xv, keep), xv.DType())
	n := reduceKeep(kernels.Sum, mask, ax)
	share := binT(kernels.Div, reshapeT(g, keep.Shape()...), n)
	return binT(kernels.Mul, mask, share)
}

// Max takes the maximum over axes. The gradient goes to all tied maxima,
// split evenly.
func Max(x *Var, axes []int, keepDim bool) *Var {
	keep, out, ax := reduceOut("max", kernels.Max, x, axes, keepDim)
	xv := x.Value
	return result("max", out, []*Var{x}, 2, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{extremeBackward(xv, keep, g, ax)}
		}
	})
}

// Min takes the minimum over axes (ties split the gradient evenly).
func Min(x *Var, axes []int, keepDim bool) *Var {
	keep, out, ax := reduceOut("min", kernels.Min, x, axes, keepDim)
	xv := x.Value
	return result("min", out, []*Var{x}, 2, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{extremeBackward(xv, keep, g, ax)}
		}
	})
}

// LogSumExp computes log Σ exp(x) over axes, stably.
func LogSumExp(x *Var, axes []int, keepDim bool) *Var {
	x = fp32Inputs(x)[0]
	keep, out, _ := reduceOut("logsumexp", kernels.LogSumExp, x, axes, keepDim)
	xv := x.Value
	return result("logsumexp", out, []*Var{x}, 2, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			// dx = g·exp(x - lse)
			p := unaryT(kernels.Exp, binT(kernels.Sub, xv, keep))
			return []*tensor.Tensor{binT(kernels.Mul, p, reshapeT(g, keep.Shape()...))}
		}
	})
}

// SumAll sums every element into a scalar (shape []).
func SumAll(x *Var) *Var { return Sum(x, nil, false) }

// MeanAll averages every element into a scalar (shape []).
func MeanAll(x *Var) *Var { return Mean(x, nil, false) }

// ArgMax returns the I64 index of the first maximum along axis, with that
// axis removed. It is not differentiable.
func ArgMax(x *Var, axis int) *tensor.Tensor {
	a := normAxis("argmax", x.Shape(), axis)
	xv := contig(x.Value)
	out := alloc(xv, tensor.I64, keepShape(xv.Shape(), []int{a})...)
	backendOf(out).ArgMax(out, xv, a)
	return out.Reshape(dropShape(xv.Shape(), []int{a})...)
}
