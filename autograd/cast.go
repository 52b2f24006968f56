package autograd

import "github.com/esper-go/esper/tensor"

// Cast returns x converted to dt. The gradient is cast back to x's dtype,
// so a BF16 computation on an F32 parameter leaves an F32 gradient. When
// x already has dtype dt, Cast returns x itself. A cast to a non-float
// dtype is not differentiable: its result never requires a gradient.
func Cast(x *Var, dt tensor.DType) *Var {
	if x.DType() == dt {
		return x
	}
	out := alloc(x.Value, dt, x.Shape()...)
	backendOf(out).Copy(out, x.Value)
	if !dt.IsFloat() || !x.DType().IsFloat() {
		return NewVar(out)
	}
	src := x.DType()
	return result("cast", out, []*Var{x}, 0, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{castTo(g, src)}
		}
	})
}

// dtypeRank orders dtypes for promotion; F16 and BF16 share a rank and
// promote to F32 when mixed.
func dtypeRank(d tensor.DType) int {
	switch d {
	case tensor.F64:
		return 5
	case tensor.F32:
		return 4
	case tensor.BF16, tensor.F16:
		return 3
	case tensor.I64:
		return 2
	case tensor.I32:
		return 1
	}
	return 0
}

// promoteDType returns the dtype two operands compute in: the widest,
// with BF16+F16 giving F32.
func promoteDType(a, b tensor.DType) tensor.DType {
	if a == b {
		return a
	}
	if a.IsHalf() && b.IsHalf() {
		return tensor.F32
	}
	if dtypeRank(a) >= dtypeRank(b) {
		return a
	}
	return b
}

// promote casts the non-nil vs to their common dtype through the
// differentiable Cast (a no-op for those that already match). When no
// cast is needed it returns vs itself (never modified), so the usual call
// allocates nothing.
func promote(vs ...*Var) []*Var {
	dt := tensor.Invalid
	same := true
	for _, v := range vs {
		if v == nil {
			continue
		}
		if dt == tensor.Invalid {
			dt = v.DType()
		} else {
			same = same && v.DType() == dt
			dt = promoteDType(dt, v.DType())
		}
	}
	if same {
		return vs
	}
	out := make([]*Var, len(vs))
	for i, v := range vs {
		if v != nil {
			out[i] = Cast(v, dt)
		}
	}
	return out
}

// lowPrecisionInputs prepares the inputs of a matmul-class op: under
// Autocast every float input is cast to the autocast dtype; otherwise the
// inputs are promoted to a common dtype.
func lowPrecisionInputs(vs ...*Var) []*Var {
	ac := AutocastDType()
	if ac == tensor.Invalid {
		return promote(vs...)
	}
	out := make([]*Var, len(vs))
	for i, v := range vs {
		if v != nil && v.DType().IsFloat() {
			out[i] = Cast(v, ac)
		} else {
			out[i] = v
		}
	}
	return out
}

// fp32Inputs prepares the inputs of an op that autocast keeps in F32
// (softmax, norms, reductions, losses): under Autocast half inputs are
// cast up to F32; then all inputs are promoted to a common dtype.
func fp32Inputs(vs ...*Var) []*Var {
	if AutocastDType() != tensor.Invalid {
		up := make([]*Var, len(vs))
		for i, v := range vs {
			if v != nil && v.DType().IsHalf() {
				up[i] = Cast(v, tensor.F32)
			} else {
				up[i] = v
			}
		}
		vs = up
	}
	return promote(vs...)
}
