package autograd

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tensor"
)

// TestBatchNormEvalAffine: the fused map (one launch on a backend with
// kernels.BatchNormEvalAffiner, the CPU's here) equals the five
// elementwise ops it stands for bit for bit, with and without w and b;
// F64 takes those ops (more launches) and agrees with float64 math.
func TestBatchNormEvalAffine(t *testing.T) {
	rng := tensor.NewRNG(9)
	const c, eps = 11, 1e-5
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
		for _, affine := range []bool{false, true} {
			v := tensor.Uniform(rng, dt, 0.05, 3, c)
			m := tensor.Normal(rng, dt, 0, 1, c)
			var w, b *Var
			if affine {
				w, b = Param(tensor.Normal(rng, dt, 0, 1, c)), Param(tensor.Normal(rng, dt, 0, 1, c))
			}
			var scale, shift *Var
			fn := func(in []*tensor.Tensor) []*tensor.Tensor {
				scale, shift = BatchNormEvalAffine(w, b, in[0], in[1], eps)
				return []*tensor.Tensor{scale.Value, shift.Value}
			}
			cap := Capture(fn, CaptureOptions{OnFallback: func(err error) { t.Fatal(err) }})
			for i := 0; i < 3; i++ {
				_, err := cap.Run(m, v)
				require.NoError(t, err)
			}
			if dt == tensor.F32 {
				require.Equal(t, 1, cap.Launches(), "F32: one fused launch")
			} else {
				require.Greater(t, cap.Launches(), 2, "F64: the elementwise ops")
			}
			got := fn([]*tensor.Tensor{m, v})
			var ws, wsh *Var
			NoGrad(func() {
				r := Rsqrt(AddScalar(Const(v), eps))
				ws = r
				if affine {
					ws = Mul(w, r)
				}
				wsh = Neg(Mul(Const(m), ws))
				if affine {
					wsh = Add(b, wsh)
				}
			})
			require.Equal(t, ws.Value.Float64s(), got[0].Float64s(), "%v affine %v scale", dt, affine)
			require.Equal(t, wsh.Value.Float64s(), got[1].Float64s(), "%v affine %v shift", dt, affine)
			require.False(t, scale.RequiresGrad() || shift.RequiresGrad(), "constants")
		}
	}
}
