package autograd

import (
	"fmt"
	"math"

	"github.com/esper-go/esper/tensor"
)

// GradCheckOptions configures GradCheck. The zero value gives the
// defaults.
type GradCheckOptions struct {
	// Tol is the largest error allowed (default 1e-6); see GradCheck for
	// how the error is measured.
	Tol float64
	// Eps is the central-difference step (default 1e-6).
	Eps float64
	// Seed seeds the random projection r (default 1).
	Seed uint64
}

// withDefaults fills the zero fields of o with their defaults.
func (o GradCheckOptions) withDefaults() GradCheckOptions {
	if o.Tol == 0 {
		o.Tol = 1e-6
	}
	if o.Eps == 0 {
		o.Eps = 1e-6
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o
}

// GradCheck compares the gradients that Backward computes for f with
// central finite differences. inputs must be F64 CPU tensors; each is
// wrapped in a fresh Param and passed to f (the caller's tensors are not
// modified). The scalar checked is L = Σ f(in)·r for a fixed random r
// (uniform in [-1, 1), seeded by opt.Seed), so every output element
// contributes with a different weight.
//
// For every element of every input the analytic gradient a is compared
// with n = (L(x+eps) - L(x-eps)) / 2eps by
//
//	err = |a - n| / max(|a|, |n|, 1)
//
// which is the relative error for gradients of magnitude above one and
// the absolute error below: a relative measure on tiny gradients would
// amplify the finite-difference round-off (about 1e-16·|L|/eps) into
// false failures. GradCheck returns an error naming the input and
// element with the largest error when it exceeds opt.Tol.
//
// f must be deterministic (seed any randomness inside f), and inputs
// should avoid points where f is not differentiable (kinks, ties).
// GradCheck reads values on the host; it is a testing tool, not part of
// any forward or backward path.
func GradCheck(f func(in []*Var) *Var, inputs []*tensor.Tensor, opt GradCheckOptions) error {
	opt = opt.withDefaults()
	vars := make([]*Var, len(inputs))
	for i, t := range inputs {
		if t.DType() != tensor.F64 || !t.Device().IsCPU() {
			return fmt.Errorf("autograd: GradCheck input %d is %v on %v, want F64 on the CPU", i, t.DType(), t.Device())
		}
		vars[i] = Param(t.Clone())
	}
	return gradCheck(func() *Var { return f(vars) }, vars, opt)
}

// GradCheckVars is GradCheck over Vars the caller already holds, such as
// a module's parameters (built in F64) together with Param inputs: f
// closes over them instead of receiving fresh copies. Every var must be
// an F64 CPU leaf that requires grad; their Grad is cleared first and
// their values are perturbed in place during the check and restored
// afterwards.
func GradCheckVars(f func() *Var, vars []*Var, opt GradCheckOptions) error {
	opt = opt.withDefaults()
	for i, v := range vars {
		if v.DType() != tensor.F64 || !v.Value.Device().IsCPU() || !v.RequiresGrad() {
			return fmt.Errorf("autograd: GradCheckVars var %d (%q) is %v on %v (requires grad %v), want an F64 CPU leaf that requires grad", i, v.Name, v.DType(), v.Value.Device(), v.RequiresGrad())
		}
		if !v.Value.IsContiguous() {
			return fmt.Errorf("autograd: GradCheckVars var %d (%q) is not contiguous", i, v.Name)
		}
		v.Grad = nil
	}
	return gradCheck(f, vars, opt)
}

// gradCheck is the shared body of GradCheck and GradCheckVars; opt has its
// defaults filled in.
func gradCheck(f func() *Var, vars []*Var, opt GradCheckOptions) error {
	out := f()
	if out.DType() != tensor.F64 {
		return fmt.Errorf("autograd: GradCheck: f returned %v, want F64", out.DType())
	}
	r := tensor.Uniform(tensor.NewRNG(opt.Seed), tensor.F64, -1, 1, out.Shape()...)
	if !out.RequiresGrad() {
		return fmt.Errorf("autograd: GradCheck: f's result (op %q) does not require grad", out.Op())
	}
	Backward(out, r)

	loss := func() float64 {
		var y *Var
		NoGrad(func() { y = f() })
		if !tensor.SameShape(y.Shape(), r.Shape()) {
			panic(fmt.Sprintf("autograd: GradCheck: f's result shape changed from %v to %v", r.Shape(), y.Shape()))
		}
		ys, rs := y.Value.Float64s(), r.F64()
		s := 0.0
		for k := range ys {
			s += ys[k] * rs[k]
		}
		return s
	}

	worst, where := 0.0, ""
	for i, v := range vars {
		x := v.Value.F64()
		var grad []float64
		if v.Grad != nil {
			grad = v.Grad.Float64s()
		}
		for j := range x {
			orig := x[j]
			x[j] = orig + opt.Eps
			lp := loss()
			x[j] = orig - opt.Eps
			lm := loss()
			x[j] = orig
			num := (lp - lm) / (2 * opt.Eps)
			ana := 0.0
			if grad != nil {
				ana = grad[j]
			}
			e := math.Abs(ana-num) / math.Max(math.Max(math.Abs(ana), math.Abs(num)), 1)
			if math.IsNaN(e) {
				e = math.Inf(1)
			}
			if e > worst {
				worst = e
				where = fmt.Sprintf("input %d (shape %v) element %d: analytic %.10g, numeric %.10g", i, v.Shape(), j, ana, num)
			}
		}
	}
	if worst > opt.Tol {
		return fmt.Errorf("autograd: GradCheck: error %.3g > tolerance %.3g at %s", worst, opt.Tol, where)
	}
	return nil
}
