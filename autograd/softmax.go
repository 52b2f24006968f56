package autograd

import "github.com/esper-go/esper/tensor"

// Softmax normalises x along axis. Under Autocast half inputs are cast up
// to F32 and the result is F32.
func Softmax(x *Var, axis int) *Var {
	checkFloat("softmax", x)
	x = fp32Inputs(x)[0]
	a := normAxis("softmax", x.Shape(), axis)
	xv := contig(x.Value)
	out := alloc(xv, xv.DType(), xv.Shape()...)
	backendOf(out).Softmax(out, xv, a)
	return result("softmax", out, []*Var{x}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			dx := alloc(out, out.DType(), out.Shape()...)
			backendOf(dx).SoftmaxBackward(dx, out, contig(g), a)
			return []*tensor.Tensor{dx}
		}
	})
}

// LogSoftmax is log(Softmax(x, axis)), computed stably. Under Autocast
// half inputs are cast up to F32 and the result is F32.
func LogSoftmax(x *Var, axis int) *Var {
	checkFloat("log_softmax", x)
	x = fp32Inputs(x)[0]
	a := normAxis("log_softmax", x.Shape(), axis)
	xv := contig(x.Value)
	out := alloc(xv, xv.DType(), xv.Shape()...)
	backendOf(out).LogSoftmax(out, xv, a)
	return result("log_softmax", out, []*Var{x}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			dx := alloc(out, out.DType(), out.Shape()...)
			backendOf(dx).LogSoftmaxBackward(dx, out, contig(g), a)
			return []*tensor.Tensor{dx}
		}
	})
}
