package autograd

import (
	"math"
	"sort"
	"testing"

	"github.com/esper-go/esper/tensor"
)

// TestOpsLowPrecisionMatchF64 runs every gradient-check case in F32, BF16
// and F16 and compares the forward values and input gradients with F64, so
// the half and single-precision kernel paths that training uses are
// exercised through autograd too.
func TestOpsLowPrecisionMatchF64(t *testing.T) {
	skip := map[string]string{
		"cast":       "its result is F64 by construction",
		"batch_norm": "its running statistics are F64 constants",
	}
	tols := map[tensor.DType]float64{tensor.F32: 1e-4, tensor.BF16: 3e-2, tensor.F16: 1e-2}
	names := make([]string, 0, len(gradChecks))
	for n := range gradChecks {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, name := range names {
		if _, ok := skip[name]; ok {
			continue
		}
		c := gradChecks[name]
		t.Run(name, func(t *testing.T) {
			run := func(dt tensor.DType) (out []float64, grads [][]float64, odt tensor.DType) {
				inputs := c.inputs(tensor.NewRNG(uint64(1000 + i)))
				vars := make([]*Var, len(inputs))
				for k, in := range inputs {
					vars[k] = Param(in.Cast(dt))
				}
				y := c.f(vars)
				Backward(y, tensor.Ones(y.DType(), y.Shape()...))
				for _, v := range vars {
					if v.Grad == nil {
						grads = append(grads, nil)
						continue
					}
					if v.Grad.DType() != dt {
						t.Fatalf("%v: gradient dtype %v", dt, v.Grad.DType())
					}
					grads = append(grads, v.Grad.Float64s())
				}
				return y.Value.Float64s(), grads, y.DType()
			}
			want, wantG, _ := run(tensor.F64)
			for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
				got, gotG, odt := run(dt)
				if odt != dt {
					t.Errorf("%v inputs give a %v result", dt, odt)
				}
				tol := tols[dt]
				if e := maxRelErr(got, want); e > tol {
					t.Errorf("%v forward differs from f64 by %.3g", dt, e)
				}
				for k := range wantG {
					if e := maxRelErr(gotG[k], wantG[k]); e > tol {
						t.Errorf("%v gradient of input %d differs from f64 by %.3g", dt, k, e)
					}
				}
			}
		})
	}
}

// maxRelErr is max|a-b| / max(max|b|, 1): the error relative to the
// scale of the F64 reference as a whole, since low-precision rounding of
// intermediate sums is relative to their magnitude, not the result's.
func maxRelErr(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	worst, scale := 0.0, 1.0
	for i := range a {
		scale = math.Max(scale, math.Abs(b[i]))
		e := math.Abs(a[i] - b[i])
		if math.IsNaN(e) {
			return math.Inf(1)
		}
		worst = math.Max(worst, e)
	}
	return worst / scale
}
