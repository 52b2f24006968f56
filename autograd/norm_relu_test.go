package autograd

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// TestBatchNormReluMatchesTwoOps: in float32 on planes whose size is not a
// multiple of 8 (vector bodies and tails), BatchNormRelu gives the
// values, running statistics and gradients of Relu(BatchNorm(...)), in
// training and in eval mode.
func TestBatchNormReluMatchesTwoOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, training := range []bool{true, false} {
		x := tensor.Normal(rng, tensor.F32, 0.3, 1.5, 4, 3, 5, 7)
		w := tensor.Uniform(rng, tensor.F32, 0.5, 1.5, 3)
		b := tensor.Uniform(rng, tensor.F32, -0.5, 0.5, 3)
		dy := tensor.Normal(rng, tensor.F32, 0, 1, 4, 3, 5, 7)
		type run struct {
			y, rm, rv, dx, dw, db []float32
		}
		do := func(fused bool) run {
			xv, wv, bv := Param(x.Clone()), Param(w.Clone()), Param(b.Clone())
			rm := tensor.FromSlice([]float32{0.1, -0.2, 0.3}, 3)
			rv := tensor.FromSlice([]float32{0.9, 1.1, 1.3}, 3)
			var y *Var
			if fused {
				y = BatchNormRelu(xv, wv, bv, rm, rv, training, 0.1, 1e-5)
			} else {
				y = Relu(BatchNorm(xv, wv, bv, rm, rv, training, 0.1, 1e-5))
			}
			Backward(y, dy)
			return run{y.Value.F32(), rm.F32(), rv.F32(), xv.Grad.F32(), wv.Grad.F32(), bv.Grad.F32()}
		}
		want, got := do(false), do(true)
		for _, c := range []struct {
			what      string
			got, want []float32
		}{{"y", got.y, want.y}, {"running mean", got.rm, want.rm}, {"running var", got.rv, want.rv},
			{"dx", got.dx, want.dx}, {"dw", got.dw, want.dw}, {"db", got.db, want.db}} {
			require.Len(t, c.got, len(c.want), c.what)
			for i := range c.want {
				require.InDelta(t, c.want[i], c.got[i], 1e-5*(1+float64(abs32(c.want[i]))), "training=%v %s[%d]", training, c.what, i)
			}
		}
		zeros := 0
		for _, v := range got.y {
			if v == 0 {
				zeros++
			}
		}
		require.Greater(t, zeros, len(got.y)/10, "the ReLU should clip part of the output")
	}
}

func abs32(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

// TestBatchNormReluMaxPoolMatchesTwoOps: in float32 (the fused kernel) on
// even and odd planes, BatchNormReluMaxPool gives bitwise the values,
// running statistics and gradients of MaxPool2d(BatchNormRelu(...)), in
// training and in eval mode, and keeps no full-size output alive.
func TestBatchNormReluMaxPoolMatchesTwoOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pp := kernels.Pool2dParams{KernelH: 2, KernelW: 2}
	for _, hw := range [][2]int{{6, 8}, {7, 9}} {
		for _, training := range []bool{true, false} {
			x := tensor.Normal(rng, tensor.F32, 0.3, 1.5, 4, 3, hw[0], hw[1])
			w := tensor.Uniform(rng, tensor.F32, 0.5, 1.5, 3)
			b := tensor.Uniform(rng, tensor.F32, -0.5, 0.5, 3)
			dy := tensor.Normal(rng, tensor.F32, 0, 1, 4, 3, hw[0]/2, hw[1]/2)
			do := func(fused bool) [][]float32 {
				xv, wv, bv := Param(x.Clone()), Param(w.Clone()), Param(b.Clone())
				rm := tensor.FromSlice([]float32{0.1, -0.2, 0.3}, 3)
				rv := tensor.FromSlice([]float32{0.9, 1.1, 1.3}, 3)
				var y *Var
				if fused {
					y = BatchNormReluMaxPool(xv, wv, bv, rm, rv, training, 0.1, 1e-5)
				} else {
					y = MaxPool2d(BatchNormRelu(xv, wv, bv, rm, rv, training, 0.1, 1e-5), pp)
				}
				Backward(y, dy)
				return [][]float32{y.Value.F32(), rm.F32(), rv.F32(), xv.Grad.F32(), wv.Grad.F32(), bv.Grad.F32()}
			}
			want, got := do(false), do(true)
			for i, what := range []string{"y", "running mean", "running var", "dx", "dw", "db"} {
				require.Equal(t, want[i], got[i], "%v training=%v %s", hw, training, what)
			}
		}
	}
}
