package cpu

import (
	"runtime"
	"testing"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
	"github.com/stretchr/testify/require"
)

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
