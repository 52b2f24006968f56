package cpu

import (
	"math"
	"runtime"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

func TestForeach(t *testing.T) {
	for _, d := range floatTypes {
		xs := []*T{randT(1, d, 5000), randT(2, d, 3, 7), randT(3, d, 1)}
		dst := tensor.Empty(tensor.F32, 3)
		be.ForeachNorm(dst, xs)
		want := make([]float64, 3)
		for i, x := range xs {
			for _, v := range vals(x) {
				want[i] += v * v
			}
			want[i] = math.Sqrt(want[i])
		}
		closeTo(t, name("norm ", d), vals(dst), want, 1e-6)

		before := [][]float64{vals(xs[0]), vals(xs[1])}
		be.ForeachScale(xs[:2], tensor.Scalar(tensor.F32, 0.5))
		for i := range before {
			for j := range before[i] {
				before[i][j] *= 0.5
			}
			closeTo(t, name("scale ", d), vals(xs[i]), before[i], 0)
		}
		ys := []*T{randT(4, d, 5000), randT(5, d, 3, 7)}
		exp := [][]float64{vals(ys[0]), vals(ys[1])}
		be.ForeachAxpy(ys, xs[:2], -2)
		for i := range ys {
			xv := vals(xs[i])
			for j := range exp[i] {
				exp[i][j] += -2 * xv[j]
			}
			closeTo(t, name("axpy ", d), vals(ys[i]), exp[i], tol(d))
		}
	}
}

func TestIncrementScaler(t *testing.T) {
	c := tensor.Scalar(tensor.F64, 3)
	be.Increment(c, nil)
	be.Increment(c, tensor.Scalar(tensor.F32, 1))
	be.Increment(c, tensor.Scalar(tensor.F32, 0))
	require.Equal(t, 5.0, c.Item())

	xs := []*T{tensor.FromSlice([]float32{2, 4}), tensor.FromSlice([]float64{8})}
	inf := tensor.Scalar(tensor.F32, 0)
	be.UnscaleCheck(xs, tensor.Scalar(tensor.F32, 0.5), inf)
	require.Equal(t, []float32{1, 2}, xs[0].F32())
	require.Equal(t, 0.0, inf.Item())
	xs[0].F32()[1] = float32(math.Inf(1))
	be.UnscaleCheck(xs, tensor.Scalar(tensor.F32, 0.5), inf)
	require.Equal(t, 1.0, inf.Item())

	scale, tr := tensor.Scalar(tensor.F32, 65536), tensor.Scalar(tensor.I32, 0)
	be.ScalerUpdate(scale, tr, inf, 2, 0.5, 3) // inf: back off
	require.Equal(t, 32768.0, scale.Item())
	require.Equal(t, 0.0, tr.Item())
	inf.Fill(0)
	for i := 0; i < 3; i++ {
		be.ScalerUpdate(scale, tr, inf, 2, 0.5, 3)
	}
	require.Equal(t, 65536.0, scale.Item())
	require.Equal(t, 0.0, tr.Item())
	be.ScalerUpdate(scale, tr, inf, 2, 0.5, 3)
	require.Equal(t, 1.0, tr.Item())
}

// refSGD mirrors torch.optim.SGD for one tensor.
func refSGD(p, g, buf []float64, lr float64, step int, o kernels.SGDOptions) {
	for i := range p {
		d := g[i]
		if o.Maximize {
			d = -d
		}
		d += o.WeightDecay * p[i]
		if o.Momentum != 0 {
			if step == 1 {
				buf[i] = d
			} else {
				buf[i] = o.Momentum*buf[i] + (1-o.Dampening)*d
			}
			if o.Nesterov {
				d += o.Momentum * buf[i]
			} else {
				d = buf[i]
			}
		}
		p[i] -= lr * d
	}
}

func TestSGD(t *testing.T) {
	opts := []kernels.SGDOptions{
		{},
		{Momentum: 0.9},
		{Momentum: 0.9, WeightDecay: 5e-4},
		{Momentum: 0.9, Dampening: 0.1, Nesterov: false, Maximize: true},
		{Momentum: 0.8, WeightDecay: 0.01, Nesterov: true},
	}
	for oi, o := range opts {
		for _, d := range []tensor.DType{tensor.F64, tensor.F32} {
			p := randT(1, d, 1000)
			m := tensor.Zeros(d, 1000)
			rp, rb := vals(p), make([]float64, 1000)
			hyper := tensor.FromSlice([]float64{0.1, 0})
			for step := 1; step <= 3; step++ {
				g := randT(uint64(10+step), d, 1000)
				hyper.F64()[1] = float64(step)
				be.SGDStep(p, g, m, hyper, nil, o)
				refSGD(rp, vals(g), rb, 0.1, step, o)
			}
			closeTo(t, name("sgd ", oi, d), vals(p), rp, tol(d))
			// foundInf skips the step.
			before := vals(p)
			be.SGDStep(p, randT(5, d, 1000), m, hyper, tensor.Scalar(tensor.F32, 1), o)
			require.Equal(t, before, vals(p))
		}
	}
}

// TestOptimAsmBitwise: the AVX SGD-momentum and AdamW loops give bitwise
// the Go loops' parameters and moments, for lengths around the 8-lane
// width and across the parallel split.
func TestOptimAsmBitwise(t *testing.T) {
	if !optimAsm {
		t.Skip("no assembly optimizer loops on this build")
	}
	defer func(m int) { optimAsm, optimAsmMin = true, m }(optimAsmMin)
	optimAsmMin = 0 // the kernels on every length
	run := func(asm bool, n int) [][]float64 {
		optimAsm = asm
		p, m, v := randT(1, tensor.F32, n), tensor.Zeros(tensor.F32, n), tensor.Zeros(tensor.F32, n)
		q, mq := randT(2, tensor.F32, n), tensor.Zeros(tensor.F32, n)
		hyper := tensor.FromSlice([]float64{0.05, 0})
		for step := 1; step <= 3; step++ {
			hyper.F64()[1] = float64(step)
			g := randT(uint64(30+step), tensor.F32, n)
			be.AdamWStep(p, g, m, v, hyper, nil, kernels.AdamWOptions{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
			be.SGDStep(q, g, mq, hyper, nil, kernels.SGDOptions{Momentum: 0.9})
		}
		return [][]float64{vals(p), vals(m), vals(v), vals(q), vals(mq)}
	}
	for _, n := range []int{1, 7, 8, 9, 63, 1000, 100003} {
		require.Equal(t, run(false, n), run(true, n), "n=%d", n)
	}
}

func TestAdamW(t *testing.T) {
	o := kernels.AdamWOptions{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	for _, d := range []tensor.DType{tensor.F64, tensor.F32} {
		p := randT(1, d, 777)
		m, v := tensor.Zeros(d, 777), tensor.Zeros(d, 777)
		rp, rm, rv := vals(p), make([]float64, 777), make([]float64, 777)
		hyper := tensor.FromSlice([]float64{0.01, 0})
		for step := 1; step <= 3; step++ {
			g := randT(uint64(20+step), d, 777)
			hyper.F64()[1] = float64(step)
			be.AdamWStep(p, g, m, v, hyper, nil, o)
			gv := vals(g)
			bc1 := 1 - math.Pow(o.Beta1, float64(step))
			bc2 := 1 - math.Pow(o.Beta2, float64(step))
			for i := range rp {
				rp[i] *= 1 - 0.01*o.WeightDecay
				rm[i] = o.Beta1*rm[i] + (1-o.Beta1)*gv[i]
				rv[i] = o.Beta2*rv[i] + (1-o.Beta2)*gv[i]*gv[i]
				rp[i] -= 0.01 / bc1 * rm[i] / (math.Sqrt(rv[i])/math.Sqrt(bc2) + o.Eps)
			}
		}
		closeTo(t, name("adamw ", d), vals(p), rp, tol(d))
		closeTo(t, name("adamw v ", d), vals(v), rv, tol(d))
	}
}

// TestCapture records a step, checks nothing ran during capture, that
// replay runs it, and that replay allocates nothing.
func TestCapture(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	a := randT(1, tensor.F32, 256, 256)
	w := randT(2, tensor.F32, 256, 256)
	mm := tensor.Empty(tensor.F32, 256, 256)
	x := randT(3, tensor.F32, 32, 3, 28, 28)
	cw := randT(4, tensor.F32, 16, 3, 3, 3)
	cy := tensor.Empty(tensor.F32, 32, 16, 28, 28)
	bn := tensor.Empty(tensor.F32, 32, 16, 28, 28)
	sm, sr := tensor.Empty(tensor.F32, 16), tensor.Empty(tensor.F32, 16)
	rm, rv := tensor.Zeros(tensor.F32, 16), tensor.Ones(tensor.F32, 16)
	bias := randT(5, tensor.F32, 1, 16, 1, 1)
	sum := tensor.Empty(tensor.F32, 1, 16, 1, 1)
	p := kernels.Conv2dParams{PadH: 1, PadW: 1}
	hyper := tensor.FromSlice([]float64{0.1, 1})
	grad := randT(6, tensor.F32, 256, 256)

	require.NoError(t, be.BeginCapture())
	require.True(t, be.Capturing())
	be.MatMul(mm, a, w, false, true)
	be.Conv2d(cy, x, cw, nil, p)
	be.BatchNorm(bn, sm, sr, cy, nil, nil, rm, rv, true, 0.1, 1e-5)
	be.Binary(kernels.Add, bn, bn, bias)
	be.Reduce(kernels.Sum, sum, bn, []int{0, 2, 3})
	be.SGDStep(w, grad, nil, hyper, nil, kernels.SGDOptions{})
	g, err := be.EndCapture()
	require.NoError(t, err)
	require.False(t, be.Capturing())
	require.Equal(t, 6, g.Len())
	for _, v := range mm.F32() {
		require.Zero(t, v, "nothing may run during capture")
	}
	g.Replay()
	want, _ := refReduce(kernels.Sum, vals(bn), []int{32, 16, 28, 28}, []int{0, 2, 3})
	closeTo(t, "replayed reduce", vals(sum), want, 1e-5)
	require.NotZero(t, mm.F32()[0])
	require.NotZero(t, rm.F32()[0])

	allocs := testing.AllocsPerRun(20, g.Replay)
	require.Zero(t, allocs, "replay allocates")

	_, err = be.EndCapture()
	require.ErrorIs(t, err, ErrNoCapture)
}

// TestReplayAllocatesNothing captures most kernels, staged half-precision
// paths included, and checks a replay allocates nothing.
func TestReplayAllocatesNothing(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	x := randT(1, tensor.BF16, 64, 300)
	w := randT(2, tensor.BF16, 300, 200)
	y := tensor.Empty(tensor.F32, 64, 200)
	sm := tensor.Empty(tensor.F32, 64, 200)
	tg := tensor.RandInt(tensor.NewRNG(1), 200, 64)
	loss := tensor.Empty(tensor.F32)
	dl := tensor.Empty(tensor.F32, 64, 200)
	ln, mean, rstd := tensor.Empty(tensor.F32, 64, 200), tensor.Empty(tensor.F32, 64), tensor.Empty(tensor.F32, 64)
	u := tensor.Empty(tensor.BF16, 64, 200)
	seg := tensor.RandInt(tensor.NewRNG(2), 10, 64)
	sr := tensor.Empty(tensor.F32, 10, 200)
	am := tensor.Empty(tensor.I64, 10, 200)
	state := tensor.FromSlice([]int64{1, 0})
	nrm := tensor.Empty(tensor.F32, 2)
	cp := tensor.Empty(tensor.F32, 200, 64)
	big := tensor.Empty(tensor.F32, 64, 400)
	img := randT(3, tensor.F32, 8, 4, 16, 16)
	pooled, idx := tensor.Empty(tensor.F32, 8, 4, 8, 8), tensor.Empty(tensor.I32, 8, 4, 8, 8)
	gi := tensor.RandInt(tensor.NewRNG(3), 200, 64, 7)
	gd := tensor.Empty(tensor.F32, 64, 7)

	require.NoError(t, be.BeginCapture())
	be.MatMul(y, x, w, false, false)
	be.Softmax(sm, y, 1)
	be.CrossEntropy(loss, y, tg, kernels.CrossEntropyParams{LabelSmoothing: 0.1})
	be.CrossEntropyBackward(dl, y, tg, loss, kernels.CrossEntropyParams{LabelSmoothing: 0.1})
	be.LayerNorm(ln, mean, rstd, y, nil, nil, 200, 1e-5)
	be.Unary(kernels.GeluTanh, u, y)
	be.BinaryScalar(kernels.Mul, u, u, 2, false)
	be.SegmentReduce(kernels.Max, sr, am, y, seg)
	be.Dropout(ln, nil, ln, state, 0.1)
	be.ForeachNorm(nrm, []*T{y, ln})
	be.Copy(cp, y.T())
	be.Concat(big, []*T{y, sm}, 1)
	be.MaxPool2d(pooled, idx, img, kernels.Pool2dParams{KernelH: 2, KernelW: 2})
	be.Gather(gd, y, 1, gi)
	be.Fill(sm, 0)
	g, err := be.EndCapture()
	require.NoError(t, err)
	g.Replay()
	require.Equal(t, int64(1), state.I64()[1])
	require.Zero(t, testing.AllocsPerRun(20, g.Replay))
}
