package autograd

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Binary ops broadcast NumPy-style and promote mixed dtypes to the widest
// (BF16 with F32 gives F32), inside or outside Autocast. Their gradients
// are summed back over the broadcast axes to each input's shape.

// binaryForward promotes a and b and computes a op b.
func binaryForward(name string, op kernels.BinaryOp, a, b *Var) (*Var, *Var, *tensor.Tensor) {
	checkFloat(name, a, b)
	broadcastShape(name, a.Shape(), b.Shape())
	p := promote(a, b)
	return p[0], p[1], binT(op, p[0].Value, p[1].Value)
}

// gradTo reduces g to v's shape, or returns nil when v needs no gradient.
func gradTo(v *Var, g *tensor.Tensor) *tensor.Tensor {
	if !needs(v) {
		return nil
	}
	return sumTo(g, v.Shape())
}

// Add returns a + b.
func Add(a, b *Var) *Var {
	a, b, out := binaryForward("add", kernels.Add, a, b)
	return result("add", out, []*Var{a, b}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{gradTo(a, g), gradTo(b, g)}
		}
	})
}

// Sub returns a - b.
func Sub(a, b *Var) *Var {
	a, b, out := binaryForward("sub", kernels.Sub, a, b)
	return result("sub", out, []*Var{a, b}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			var db *tensor.Tensor
			if needs(b) {
				db = sumTo(unaryT(kernels.Neg, g), b.Shape())
			}
			return []*tensor.Tensor{gradTo(a, g), db}
		}
	})
}

// Mul returns a * b.
func Mul(a, b *Var) *Var {
	a, b, out := binaryForward("mul", kernels.Mul, a, b)
	return result("mul", out, []*Var{a, b}, 2, func() backwardFunc {
		av, bv := a.Value, b.Value
		return func(g *tensor.Tensor) []*tensor.Tensor {
			var da, db *tensor.Tensor
			if needs(a) {
				da = sumTo(binT(kernels.Mul, g, bv), a.Shape())
			}
			if needs(b) {
				db = sumTo(binT(kernels.Mul, g, av), b.Shape())
			}
			return []*tensor.Tensor{da, db}
		}
	})
}

// Div returns a / b.
func Div(a, b *Var) *Var {
	a, b, out := binaryForward("div", kernels.Div, a, b)
	return result("div", out, []*Var{a, b}, 2, func() backwardFunc {
		bv := b.Value
		return func(g *tensor.Tensor) []*tensor.Tensor {
			var da, db *tensor.Tensor
			gb := binT(kernels.Div, g, bv) // g/b
			if needs(a) {
				da = sumTo(gb, a.Shape())
			}
			if needs(b) {
				// d(a/b)/db = -(a/b)/b, so db = -(g/b)·out.
				t := binT(kernels.Mul, gb, out)
				db = sumTo(unaryT(kernels.Neg, t), b.Shape())
			}
			return []*tensor.Tensor{da, db}
		}
	})
}

// Pow returns a ** b. The gradient with respect to b involves log(a), so
// it is only defined for positive a.
func Pow(a, b *Var) *Var {
	a, b, out := binaryForward("pow", kernels.Pow, a, b)
	return result("pow", out, []*Var{a, b}, 3, func() backwardFunc {
		av, bv := a.Value, b.Value
		return func(g *tensor.Tensor) []*tensor.Tensor {
			var da, db *tensor.Tensor
			if needs(a) {
				// b·a^(b-1)
				t := binT(kernels.Pow, av, binS(kernels.Sub, bv, 1))
				t = binT(kernels.Mul, t, bv)
				da = sumTo(binT(kernels.Mul, g, t), a.Shape())
			}
			if needs(b) {
				// out·log(a)
				t := binT(kernels.Mul, out, unaryT(kernels.Log, av))
				db = sumTo(binT(kernels.Mul, g, t), b.Shape())
			}
			return []*tensor.Tensor{da, db}
		}
	})
}

// selectWeights returns the share of the gradient that goes to a in
// Maximum (gt = Gt) or Minimum (gt = Lt): 1 where a wins, ½ on ties.
func selectWeights(op kernels.BinaryOp, a, b *tensor.Tensor) *tensor.Tensor {
	dt := promoteDType(a.DType(), b.DType())
	win := asDType(binT(op, a, b), dt)
	tie := binS(kernels.Mul, asDType(binT(kernels.Eq, a, b), dt), 0.5)
	return binT(kernels.Add, win, tie)
}

// minMaxBackward splits g between a and b by the weights w (a's share).
func minMaxBackward(a, b *Var, w, g *tensor.Tensor) []*tensor.Tensor {
	ga := binT(kernels.Mul, g, w)
	var da, db *tensor.Tensor
	if needs(a) {
		da = sumTo(ga, a.Shape())
	}
	if needs(b) {
		db = sumTo(binT(kernels.Sub, g, ga), b.Shape())
	}
	return []*tensor.Tensor{da, db}
}

// Maximum returns the elementwise maximum of a and b. On ties the gradient
// is split evenly, as in PyTorch.
func Maximum(a, b *Var) *Var {
	a, b, out := binaryForward("maximum", kernels.Maximum, a, b)
	return result("maximum", out, []*Var{a, b}, 2, func() backwardFunc {
		av, bv := a.Value, b.Value
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return minMaxBackward(a, b, selectWeights(kernels.Gt, av, bv), g)
		}
	})
}

// Minimum returns the elementwise minimum of a and b (ties split evenly).
func Minimum(a, b *Var) *Var {
	a, b, out := binaryForward("minimum", kernels.Minimum, a, b)
	return result("minimum", out, []*Var{a, b}, 2, func() backwardFunc {
		av, bv := a.Value, b.Value
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return minMaxBackward(a, b, selectWeights(kernels.Lt, av, bv), g)
		}
	})
}

// AddScalar returns x + s.
func AddScalar(x *Var, s float64) *Var {
	checkFloat("add_scalar", x)
	out := binS(kernels.Add, x.Value, s)
	return result("add_scalar", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{g} }
	})
}

// MulScalar returns x * s.
func MulScalar(x *Var, s float64) *Var {
	checkFloat("mul_scalar", x)
	out := binS(kernels.Mul, x.Value, s)
	return result("mul_scalar", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{binS(kernels.Mul, g, s)}
		}
	})
}

// PowScalar returns x ** s.
func PowScalar(x *Var, s float64) *Var {
	checkFloat("pow_scalar", x)
	out := binS(kernels.Pow, x.Value, s)
	return result("pow_scalar", out, []*Var{x}, 1, func() backwardFunc {
		xv := x.Value
		return func(g *tensor.Tensor) []*tensor.Tensor {
			d := binS(kernels.Mul, binS(kernels.Pow, xv, s-1), s)
			return []*tensor.Tensor{binT(kernels.Mul, g, d)}
		}
	})
}

// unaryForward computes op(x) in x's dtype and returns the backward maker
// that uses UnaryBackward with the saved x and y.
func unaryForward(name string, op kernels.UnaryOp, x *Var) (*tensor.Tensor, func() backwardFunc) {
	checkFloat(name, x)
	xv := contig(x.Value)
	out := unaryT(op, xv)
	return out, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			g = contig(g)
			dx := alloc(xv, xv.DType(), xv.Shape()...)
			backendOf(dx).UnaryBackward(op, dx, xv, out, g)
			return []*tensor.Tensor{dx}
		}
	}
}

// Neg returns -x.
func Neg(x *Var) *Var {
	out, mk := unaryForward("neg", kernels.Neg, x)
	return result("neg", out, []*Var{x}, 2, mk)
}

// Abs returns |x| (gradient sign(x), zero at zero).
func Abs(x *Var) *Var {
	out, mk := unaryForward("abs", kernels.Abs, x)
	return result("abs", out, []*Var{x}, 2, mk)
}

// Exp returns eˣ.
func Exp(x *Var) *Var {
	out, mk := unaryForward("exp", kernels.Exp, x)
	return result("exp", out, []*Var{x}, 2, mk)
}

// Log returns the natural logarithm.
func Log(x *Var) *Var {
	out, mk := unaryForward("log", kernels.Log, x)
	return result("log", out, []*Var{x}, 2, mk)
}

// Sqrt returns √x.
func Sqrt(x *Var) *Var {
	out, mk := unaryForward("sqrt", kernels.Sqrt, x)
	return result("sqrt", out, []*Var{x}, 2, mk)
}

// Rsqrt returns 1/√x.
func Rsqrt(x *Var) *Var {
	out, mk := unaryForward("rsqrt", kernels.Rsqrt, x)
	return result("rsqrt", out, []*Var{x}, 2, mk)
}

// Square returns x².
func Square(x *Var) *Var {
	out, mk := unaryForward("square", kernels.Square, x)
	return result("square", out, []*Var{x}, 2, mk)
}

// Recip returns 1/x.
func Recip(x *Var) *Var {
	out, mk := unaryForward("recip", kernels.Recip, x)
	return result("recip", out, []*Var{x}, 2, mk)
}

// Relu returns max(x, 0).
func Relu(x *Var) *Var {
	out, mk := unaryForward("relu", kernels.Relu, x)
	return result("relu", out, []*Var{x}, 2, mk)
}

// GeluTanh is GELU with the tanh approximation.
func GeluTanh(x *Var) *Var {
	out, mk := unaryForward("gelu_tanh", kernels.GeluTanh, x)
	return result("gelu_tanh", out, []*Var{x}, 2, mk)
}

// Gelu is the exact (erf) GELU.
func Gelu(x *Var) *Var {
	out, mk := unaryForward("gelu", kernels.GeluErf, x)
	return result("gelu", out, []*Var{x}, 2, mk)
}

// Silu returns x·σ(x).
func Silu(x *Var) *Var {
	out, mk := unaryForward("silu", kernels.Silu, x)
	return result("silu", out, []*Var{x}, 2, mk)
}

// Sigmoid returns 1/(1+e⁻ˣ).
func Sigmoid(x *Var) *Var {
	out, mk := unaryForward("sigmoid", kernels.Sigmoid, x)
	return result("sigmoid", out, []*Var{x}, 2, mk)
}

// Tanh returns tanh(x).
func Tanh(x *Var) *Var {
	out, mk := unaryForward("tanh", kernels.Tanh, x)
	return result("tanh", out, []*Var{x}, 2, mk)
}

// Softplus returns log(1+eˣ) (linear above 20, like PyTorch).
func Softplus(x *Var) *Var {
	out, mk := unaryForward("softplus", kernels.Softplus, x)
	return result("softplus", out, []*Var{x}, 2, mk)
}

// Where returns cond ? a : b with broadcasting over all three. cond is a
// Bool tensor and gets no gradient.
func Where(cond *tensor.Tensor, a, b *Var) *Var {
	checkFloat("where", a, b)
	if cond.DType() != tensor.Bool {
		panic(fmt.Sprintf("autograd: where: condition must be Bool, got %v of shape %v", cond.DType(), cond.Shape()))
	}
	broadcastShape("where", broadcastShape("where", cond.Shape(), a.Shape()), b.Shape())
	p := promote(a, b)
	a, b = p[0], p[1]
	out := whereT(cond, a.Value, b.Value)
	return result("where", out, []*Var{a, b}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			zero := scalarT(g, g.DType(), 0)
			var da, db *tensor.Tensor
			if needs(a) {
				da = sumTo(whereT(cond, g, zero), a.Shape())
			}
			if needs(b) {
				db = sumTo(whereT(cond, zero, g), b.Shape())
			}
			return []*tensor.Tensor{da, db}
		}
	})
}

// Clamp returns min(max(x, lo), hi). The gradient passes where
// lo ≤ x ≤ hi and is zero elsewhere.
func Clamp(x *Var, lo, hi float64) *Var {
	checkFloat("clamp", x)
	if lo > hi {
		panic(fmt.Sprintf("autograd: clamp: lo %v > hi %v (shape %v)", lo, hi, x.Shape()))
	}
	xv := contig(x.Value)
	out := alloc(xv, xv.DType(), xv.Shape()...)
	backendOf(out).Clamp(out, xv, lo, hi)
	return result("clamp", out, []*Var{x}, 2, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			inside := binT(kernels.Eq, out, xv)
			return []*tensor.Tensor{whereT(inside, g, scalarT(g, g.DType(), 0))}
		}
	})
}

// Compare returns the Bool tensor a op b (op a comparison) with
// broadcasting. It is not differentiable.
func Compare(op kernels.BinaryOp, a, b *Var) *tensor.Tensor {
	if !op.IsComparison() {
		panic(fmt.Sprintf("autograd: compare: %v is not a comparison (shapes %v and %v)", op, a.Shape(), b.Shape()))
	}
	return binT(op, a.Value, b.Value)
}

// ScaleActAdd returns act(s·x) + r: MulScalar by s (none when s is 1),
// the activation act, and Add of r (none when r is nil; r of x's shape),
// as those ops compute it. In inference (no input needs a gradient) it
// is one launch on a backend with kernels.ScaleActAdder (CUDA), a layer's
// activation and residual after its scaled sum.
func ScaleActAdd(x *Var, s float64, act kernels.UnaryOp, r *Var) *Var {
	checkFloat("scale_act_add", x, r)
	if r != nil && !tensor.SameShape(r.Shape(), x.Shape()) {
		panic(fmt.Sprintf("autograd: scale_act_add: residual shape %v, want the input's %v", r.Shape(), x.Shape()))
	}
	sa, ok := backendOf(x.Value).(kernels.ScaleActAdder)
	if ok && !needsGrad(x, r) && (r == nil || r.Value.DType() == x.Value.DType()) {
		xv := contig(x.Value)
		out := alloc(xv, xv.DType(), xv.Shape()...)
		var rv *tensor.Tensor
		if r != nil {
			rv = contig(r.Value)
		}
		sa.ScaleActAdd(out, xv, s, act, rv)
		return Const(out)
	}
	y := x
	if s != 1 {
		y = MulScalar(y, s)
	}
	out, mk := unaryForward("scale_act_add", act, y)
	y = result("scale_act_add", out, []*Var{y}, 2, mk)
	if r != nil {
		y = Add(y, r)
	}
	return y
}
