package autograd

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Dropout zeroes elements of x with probability p and scales the rest by
// 1/(1-p). state is the I64 [2] tensor {seed, counter} that the kernel
// advances on every call, so a captured step draws a fresh mask on each
// replay. When training is false or p is 0, Dropout returns x itself; p
// of 1 drops everything.
func Dropout(x *Var, p float64, state *tensor.Tensor, training bool) *Var {
	checkFloat("dropout", x)
	if p < 0 || p > 1 {
		panic(fmt.Sprintf("autograd: dropout: probability %v outside [0, 1] (shape %v)", p, x.Shape()))
	}
	if !training || p == 0 {
		return x
	}
	xv := contig(x.Value)
	out := alloc(xv, xv.DType(), xv.Shape()...)
	if p == 1 {
		backendOf(out).Fill(out, 0)
		return result("dropout", out, []*Var{x}, 0, func() backwardFunc {
			return func(g *tensor.Tensor) []*tensor.Tensor {
				return []*tensor.Tensor{full(g, g.DType(), 0, g.Shape()...)}
			}
		})
	}
	if state == nil || state.DType() != tensor.I64 || state.Numel() != 2 {
		panic(fmt.Sprintf("autograd: dropout: state must be an I64 [2] tensor {seed, counter} (input shape %v)", x.Shape()))
	}
	mask := alloc(xv, xv.DType(), xv.Shape()...)
	backendOf(out).Dropout(out, mask, xv, state, p)
	return result("dropout", out, []*Var{x}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{binT(kernels.Mul, g, mask)}
		}
	})
}
