package bench

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestW7Shapes(t *testing.T) {
	for _, c := range []struct{ params, tensors int }{{10_000_000, 200}, {20_000, 8}, {1000, 7}, {32, 2}} {
		shapes, err := W7Shapes(c.params, c.tensors)
		require.NoError(t, err, "%+v", c)
		require.Len(t, shapes, c.tensors)
		total, sizes := 0, map[int]bool{}
		for i, s := range shapes {
			n := 1
			for _, d := range s {
				require.Positive(t, d, "tensor %d %v", i, s)
				n *= d
			}
			total += n
			sizes[n] = true
		}
		require.Equal(t, c.params, total, "%+v", c)
		if c.tensors >= 8 {
			require.Greater(t, len(sizes), c.tensors/4, "sizes vary")
		}
	}
	_, err := W7Shapes(100, 200)
	require.Error(t, err)
	_, err = W7Shapes(1000, 1)
	require.Error(t, err)
	require.Equal(t, "2x3,2,7", W7ShapesArg([][]int{{2, 3}, {2}, {7}}))
}

// TestW7SmallRun: the reported bytes follow the formula, the bandwidth
// figures follow from the latencies, and both optimizers changed every
// parameter.
func TestW7SmallRun(t *testing.T) {
	const params = 20_000
	r, err := RunW7(W7Options{Params: params, Tensors: 8, Steps: 3, Warmup: 1, CopyBytes: 1 << 20, Seed: 3})
	require.NoError(t, err)
	require.Len(t, r.Shapes, 8)
	require.Equal(t, 1<<20, r.CopyBytes)
	require.Greater(t, r.CopyGBps, 0.0)
	require.Greater(t, r.ParallelCopyGBps, 0.0)
	require.InDelta(t, 2*float64(1<<20)/(r.CopyLatency.P50us*1e-6)/1e9, r.CopyGBps, 1e-9*r.CopyGBps)
	for _, c := range []struct {
		res W7OptimResult
		bpp int
	}{{r.SGD, 20}, {r.AdamW, 28}} {
		o := c.res
		require.Equal(t, c.bpp, o.BytesPerParam, o.Optimizer)
		require.Equal(t, int64(c.bpp*params), o.BytesPerStep, o.Optimizer)
		require.Equal(t, 3, o.Latency.N, o.Optimizer)
		require.InDelta(t, float64(o.BytesPerStep)/(o.Latency.P50us*1e-6)/1e9, o.GBps, 1e-9*o.GBps, o.Optimizer)
		require.InDelta(t, o.GBps/r.CopyGBps, o.FractionOfCopy, 1e-12, o.Optimizer)
		require.Equal(t, 1.0, o.ChangedFraction, o.Optimizer)
		require.Greater(t, o.MeanAbsChange, 0.0, o.Optimizer)
	}
	require.Equal(t, "SGD-momentum", r.SGD.Optimizer)
	require.Equal(t, "AdamW", r.AdamW.Optimizer)

	_, err = RunW7(W7Options{Params: 10, Tensors: 8})
	require.Error(t, err)
	_, err = RunW7(W7Options{Steps: -1})
	require.Error(t, err)
}

// TestW7StepsFollowTheUpdateRules checks the parameters W7 times against
// closed forms for a constant gradient: SGD-momentum after K steps moves
// p by −lr·g·Σ_k (1−0.9^k)/0.1; one AdamW step gives
// p·(1−lr·wd) − lr·g/(|g|+eps).
func TestW7StepsFollowTheUpdateRules(t *testing.T) {
	shapes, err := W7Shapes(4000, 4)
	require.NoError(t, err)

	sgd, err := newW7Opt("SGD-momentum", shapes, 1)
	require.NoError(t, err)
	g := append([]float32(nil), sgd.opt.Arena().FlatGrad().F32()...)
	const k = 4
	sgd.run(1, k-1)
	s := 0.0
	for i := 1; i <= k; i++ {
		s += (1 - math.Pow(0.9, float64(i))) / 0.1
	}
	for i, p := range sgd.opt.Arena().Flat().F32() {
		want := float64(sgd.before[i]) - 0.01*float64(g[i])*s
		require.InDelta(t, want, float64(p), 1e-6, "SGD p[%d]", i)
	}

	adam, err := newW7Opt("AdamW", shapes, 2)
	require.NoError(t, err)
	g = append([]float32(nil), adam.opt.Arena().FlatGrad().F32()...)
	adam.run(0, 1)
	for i, p := range adam.opt.Arena().Flat().F32() {
		p0, gi := float64(adam.before[i]), float64(g[i])
		want := p0*(1-1e-3*0.01) - 1e-3*gi/(math.Abs(gi)+1e-8)
		require.InDelta(t, want, float64(p), 1e-6, "AdamW p[%d]", i)
	}

	_, err = newW7Opt("Lion", shapes, 1)
	require.Error(t, err)
}
