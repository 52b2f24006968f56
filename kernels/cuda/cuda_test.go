//go:build cuda

package cuda

// These tests need a GPU: they run in the GPU bundle (make gpu-bundle,
// gpu/run.sh), never in CI, which only compiles them. Each op runs on
// fresh random inputs on the device and on the CPU backend (the
// reference), compared with a dtype-scaled relative tolerance: fp32
// 1e-5, TF32 1e-3, bf16 1e-2 (GPU.md).

import (
	"fmt"
	"math"
	"os"
	"testing"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/cpu"
	"github.com/esper-go/esper/tensor"
)

var dev *Device

func TestMain(m *testing.M) {
	d, err := Open(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cuda tests:", err)
		os.Exit(2)
	}
	dev = d
	os.Exit(m.Run())
}

var cpuBE = cpu.Default()

// toDev copies a CPU tensor to the device under test.
func toDev(t *testing.T, x *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	d, err := x.ToDevice(tensor.CUDA(0))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// fromDev waits for the stream and copies a device tensor back.
func fromDev(t *testing.T, x *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	if err := dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	h, err := x.ToDevice(tensor.CPU)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// poisoned is an empty device tensor filled with NaN, so that an element
// a kernel forgets to write fails the comparison.
func poisoned(t *testing.T, d tensor.DType, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.EmptyOn(tensor.CUDA(0), d, shape...)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Fill(x, math.NaN()); err != nil {
		t.Fatal(err)
	}
	return x
}

// closeRel fails unless got and want agree within tol relative to the
// largest |want| (NaN never passes).
func closeRel(t *testing.T, what string, got, want *tensor.Tensor, tol float64) {
	t.Helper()
	g, w := got.Float64s(), want.Float64s()
	if len(g) != len(w) {
		t.Fatalf("%s: %d values, want %d", what, len(g), len(w))
	}
	scale := 0.0
	for _, v := range w {
		scale = math.Max(scale, math.Abs(v))
	}
	scale = math.Max(scale, 1e-30)
	for i := range g {
		if d := math.Abs(g[i] - w[i]); !(d <= tol*scale) {
			t.Fatalf("%s: element %d = %v, want %v (relative error %.3g > %.3g)", what, i, g[i], w[i], d/scale, tol)
		}
	}
}

func tolOf(d tensor.DType) float64 {
	if d == tensor.BF16 {
		return 1e-2
	}
	return 1e-5
}

func TestFillAndCast(t *testing.T) {
	rng := tensor.NewRNG(1)
	x := tensor.Normal(rng, tensor.F32, 0, 1, 1000)
	xd := toDev(t, x)
	b := poisoned(t, tensor.BF16, 1000)
	if err := dev.Cast(b, xd); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "cast f32→bf16", fromDev(t, b), x.Cast(tensor.BF16), 0)
	f := poisoned(t, tensor.F32, 1000)
	if err := dev.Cast(f, b); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "cast bf16→f32", fromDev(t, f), x.Cast(tensor.BF16).Cast(tensor.F32), 0)
	for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
		y := poisoned(t, d, 77)
		if err := dev.Fill(y, 2.5); err != nil {
			t.Fatal(err)
		}
		closeRel(t, "fill", fromDev(t, y), tensor.Full(d, 2.5, 77), 0)
	}
}

func TestUnaryMatchesCPU(t *testing.T) {
	for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, op := range kernels.UnaryOps() {
			rng := tensor.NewRNG(uint64(op) + 10)
			x := tensor.Uniform(rng, tensor.F32, 0.1, 3, 4097) // positive: log, sqrt, rsqrt defined
			if op == kernels.Neg || op == kernels.Abs || op == kernels.Relu || op == kernels.Sign || op == kernels.Tanh {
				x = tensor.Uniform(rng, tensor.F32, -3, 3, 4097)
			}
			x = x.Cast(d)
			want := tensor.Empty(d, 4097)
			cpuBE.Unary(op, want, x)
			got := poisoned(t, d, 4097)
			if err := dev.Unary(op, got, toDev(t, x)); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("%v %v", op, d), fromDev(t, got), want, 4*tolOf(d))
		}
	}
}

func TestBinaryMatchesCPU(t *testing.T) {
	for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
		for op := kernels.Add; op <= kernels.Minimum; op++ {
			rng := tensor.NewRNG(uint64(op) + 20)
			for _, n := range []int{4096, 4097} { // vectorised and not
				a := tensor.Uniform(rng, tensor.F32, 0.5, 2, n).Cast(d)
				b := tensor.Uniform(rng, tensor.F32, 0.5, 2, n).Cast(d)
				s := tensor.Uniform(rng, tensor.F32, 0.5, 2, 1).Cast(d)
				for _, c := range []struct {
					name string
					x, y *tensor.Tensor
				}{{"full", a, b}, {"scalar b", a, s}, {"scalar a", s, b}} {
					want := tensor.Empty(d, n)
					cpuBE.Binary(op, want, c.x, c.y)
					got := poisoned(t, d, n)
					if err := dev.Binary(op, got, toDev(t, c.x), toDev(t, c.y)); err != nil {
						t.Fatal(err)
					}
					closeRel(t, fmt.Sprintf("%v %v %s n=%d", op, d, c.name, n), fromDev(t, got), want, 2*tolOf(d))
				}
			}
		}
	}
}

// TestOptimizersMatchCPU: SGD (plain, momentum, Nesterov with weight
// decay, maximize; first step and later) and AdamW over 100 steps agree
// with the CPU backend's fused loops; found_inf skips the update.
func TestOptimizersMatchCPU(t *testing.T) {
	const n = 10007
	rng := tensor.NewRNG(5)
	for _, o := range []kernels.SGDOptions{{}, {Momentum: 0.9}, {Momentum: 0.9, Nesterov: true, WeightDecay: 1e-2}, {Momentum: 0.8, Dampening: 0.1, Maximize: true}} {
		p := tensor.Normal(rng, tensor.F32, 0, 1, n)
		pd := toDev(t, p)
		var m, md *tensor.Tensor
		if o.Momentum != 0 {
			m = tensor.Zeros(tensor.F32, n)
			md = toDev(t, m)
		}
		for step := 1; step <= 5; step++ {
			g := tensor.Normal(rng, tensor.F32, 0, 1, n)
			hyper := tensor.FromSlice([]float64{0.01, float64(step)}, 2)
			cpuBE.SGDStep(p, g, m, hyper, nil, o)
			if err := dev.SGDStep(pd, toDev(t, g), md, toDev(t, hyper), nil, o); err != nil {
				t.Fatal(err)
			}
		}
		closeRel(t, fmt.Sprintf("sgd %+v", o), fromDev(t, pd), p, 1e-5)
	}
	p := tensor.Normal(rng, tensor.F32, 0, 1, n)
	m, v := tensor.Zeros(tensor.F32, n), tensor.Zeros(tensor.F32, n)
	pd, md, vd := toDev(t, p), toDev(t, m), toDev(t, v)
	o := kernels.AdamWOptions{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	inf := toDev(t, tensor.Zeros(tensor.F32, 1))
	for step := 1; step <= 100; step++ {
		g := tensor.Normal(rng, tensor.F32, 0, 1, n)
		hyper := tensor.FromSlice([]float64{1e-3, float64(step)}, 2)
		cpuBE.AdamWStep(p, g, m, v, hyper, nil, o)
		if err := dev.AdamWStep(pd, toDev(t, g), md, vd, toDev(t, hyper), inf, o); err != nil {
			t.Fatal(err)
		}
	}
	closeRel(t, "adamw", fromDev(t, pd), p, 1e-5)
	before := fromDev(t, pd)
	if err := dev.Fill(inf, 1); err != nil {
		t.Fatal(err)
	}
	g := toDev(t, tensor.Normal(rng, tensor.F32, 0, 1, n))
	if err := dev.AdamWStep(pd, g, md, vd, toDev(t, tensor.FromSlice([]float64{1e-3, 101}, 2)), inf, o); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "adamw skipped on found_inf", fromDev(t, pd), before, 0)
}

// TestMatMulMatchesCPU: cuBLAS products in fp32 (highest), TF32 and bf16,
// plain, transposed and batched, against the CPU backend.
func TestMatMulMatchesCPU(t *testing.T) {
	rng := tensor.NewRNG(7)
	for _, c := range []struct {
		a, b   []int
		ta, tb bool
	}{
		{[]int{64, 96}, []int{96, 80}, false, false},
		{[]int{96, 64}, []int{96, 80}, true, false},
		{[]int{64, 96}, []int{80, 96}, false, true},
		{[]int{3, 33, 65}, []int{3, 65, 17}, false, false},
	} {
		a := tensor.Uniform(rng, tensor.F32, -1, 1, c.a...)
		b := tensor.Uniform(rng, tensor.F32, -1, 1, c.b...)
		r := len(c.a)
		m, n := c.a[r-2], c.b[r-1]
		if c.ta {
			m = c.a[r-1]
		}
		if c.tb {
			n = c.b[r-2]
		}
		shape := []int{m, n}
		if r == 3 {
			shape = []int{c.a[0], m, n}
		}
		for _, pc := range []struct {
			name string
			d    tensor.DType
			prec Precision
			tol  float64
		}{{"fp32", tensor.F32, Highest, 1e-5}, {"tf32", tensor.F32, High, 1e-3}, {"bf16", tensor.BF16, Highest, 1e-2}} {
			ac, bc := a.Cast(pc.d), b.Cast(pc.d)
			want := tensor.Empty(tensor.F32, shape...)
			cpuBE.MatMul(want, ac.Cast(tensor.F32), bc.Cast(tensor.F32), c.ta, c.tb)
			got := poisoned(t, pc.d, shape...)
			if err := dev.MatMul(got, toDev(t, ac), toDev(t, bc), c.ta, c.tb, pc.prec); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("matmul %s %v×%v", pc.name, c.a, c.b), fromDev(t, got).Cast(tensor.F32), want, pc.tol)
		}
	}
}

// TestAllocatorReuses: 10 000 allocation/free rounds of a step's sizes
// reserve no more device memory than the first round, and a freed block
// is reused; EmptyCache hands the cache back.
func TestAllocatorReuses(t *testing.T) {
	a := dev.Allocator()
	sizes := []int64{4, 1000, 4096, 1 << 20, 3 << 20}
	round := func() {
		var ps []uint64
		for _, n := range sizes {
			p, err := a.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, uint64(p))
		}
		for _, p := range ps {
			if err := a.Free(cu.DevicePtr(p)); err != nil {
				t.Fatal(err)
			}
		}
	}
	round()
	first := a.Stats()
	for i := 0; i < 10000; i++ {
		round()
	}
	after := a.Stats()
	if after.Reserved != first.Reserved || after.DriverAllocs != first.DriverAllocs {
		t.Fatalf("reserved %d → %d bytes, driver allocations %d → %d", first.Reserved, after.Reserved, first.DriverAllocs, after.DriverAllocs)
	}
	if err := a.Free(cu.DevicePtr(12345)); err == nil {
		t.Fatal("freeing an unknown address succeeded")
	}
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Reserved != s.Allocated {
		t.Fatalf("after EmptyCache %d bytes reserved, %d allocated", s.Reserved, s.Allocated)
	}
}

// TestGraphReplayEqualsEager: a captured Fill+Binary sequence replayed
// gives the eager result, and replays see new input values.
func TestGraphReplayEqualsEager(t *testing.T) {
	rng := tensor.NewRNG(9)
	x := toDev(t, tensor.Normal(rng, tensor.F32, 0, 1, 4096))
	y := toDev(t, tensor.Normal(rng, tensor.F32, 0, 1, 4096))
	out := poisoned(t, tensor.F32, 4096)
	step := func() error {
		if err := dev.Binary(kernels.Mul, out, x, y); err != nil {
			return err
		}
		return dev.Binary(kernels.Add, out, out, x)
	}
	if err := step(); err != nil {
		t.Fatal(err)
	}
	want := fromDev(t, out)
	g, err := dev.Capture(step)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := dev.Fill(out, math.NaN()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := g.Replay(); err != nil {
			t.Fatal(err)
		}
	}
	closeRel(t, "replay", fromDev(t, out), want, 0)
}

// TestRowsMatchCPU: last-axis Sum/Mean/Max, softmax and log-softmax with
// their backward passes, on rows shorter and longer than a block, in F32
// and BF16.
func TestRowsMatchCPU(t *testing.T) {
	for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, shape := range [][]int{{37, 10}, {5, 1000}, {3, 4, 257}} {
			rng := tensor.NewRNG(uint64(len(shape)*100 + shape[len(shape)-1]))
			x := tensor.Normal(rng, tensor.F32, 0, 2, shape...).Cast(d)
			xd := toDev(t, x)
			r := len(shape) - 1
			keep := append(append([]int(nil), shape[:r]...), 1) // keep-dims, as the CPU's Reduce wants
			for _, op := range []kernels.ReduceOp{kernels.Sum, kernels.Mean, kernels.Max} {
				want := tensor.Empty(d, keep...)
				cpuBE.Reduce(op, want, x, []int{r})
				got := poisoned(t, d, keep...)
				if err := dev.ReduceLast(op, got, xd); err != nil {
					t.Fatal(err)
				}
				closeRel(t, fmt.Sprintf("reduce %v %v %v", op, d, shape), fromDev(t, got), want, 4*tolOf(d))
			}
			dy := tensor.Normal(rng, tensor.F32, 0, 1, shape...).Cast(d)
			for _, log := range []bool{false, true} {
				want := tensor.Empty(d, shape...)
				wantDx := tensor.Empty(d, shape...)
				if log {
					cpuBE.LogSoftmax(want, x, r)
					cpuBE.LogSoftmaxBackward(wantDx, want, dy, r)
				} else {
					cpuBE.Softmax(want, x, r)
					cpuBE.SoftmaxBackward(wantDx, want, dy, r)
				}
				got := poisoned(t, d, shape...)
				if err := dev.Softmax(got, xd, log); err != nil {
					t.Fatal(err)
				}
				closeRel(t, fmt.Sprintf("softmax log=%v %v %v", log, d, shape), fromDev(t, got), want, 4*tolOf(d))
				gotDx := poisoned(t, d, shape...)
				if err := dev.SoftmaxBackward(gotDx, toDev(t, want), toDev(t, dy), log); err != nil {
					t.Fatal(err)
				}
				closeRel(t, fmt.Sprintf("softmax backward log=%v %v %v", log, d, shape), fromDev(t, gotDx), wantDx, 4*tolOf(d))
			}
		}
	}
}

// TestCrossEntropyMatchesCPU: the fused loss and its gradient for every
// reduction, with label smoothing and an ignored index, I64 and I32
// targets.
func TestCrossEntropyMatchesCPU(t *testing.T) {
	const n, c = 67, 300
	rng := tensor.NewRNG(11)
	logits := tensor.Normal(rng, tensor.F32, 0, 3, n, c)
	tg := tensor.RandInt(rng, c, n)
	tg.Set(-100, 3) // ignored when HasIgnore
	for _, p := range []kernels.CrossEntropyParams{
		{Reduction: kernels.ReduceMean, IgnoreIndex: -100, HasIgnore: true},
		{Reduction: kernels.ReduceSum, LabelSmoothing: 0.1, IgnoreIndex: -100, HasIgnore: true},
		{Reduction: kernels.ReduceNone, LabelSmoothing: 0.2, IgnoreIndex: -100, HasIgnore: true},
	} {
		for _, targets := range []*tensor.Tensor{tg, tg.Cast(tensor.I32)} {
			shape := []int{}
			if p.Reduction == kernels.ReduceNone {
				shape = []int{n}
			}
			want := tensor.Empty(tensor.F32, shape...)
			cpuBE.CrossEntropy(want, logits, targets, p)
			got := poisoned(t, tensor.F32, shape...)
			if err := dev.CrossEntropy(got, toDev(t, logits), toDev(t, targets), p); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("cross-entropy %+v %v", p, targets.DType()), fromDev(t, got), want, 1e-5)
			dloss := tensor.Uniform(rng, tensor.F32, 0.5, 1.5, shape...)
			wantDx := tensor.Empty(tensor.F32, n, c)
			cpuBE.CrossEntropyBackward(wantDx, logits, targets, dloss, p)
			gotDx := poisoned(t, tensor.F32, n, c)
			if err := dev.CrossEntropyBackward(gotDx, toDev(t, logits), toDev(t, targets), toDev(t, dloss), p); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("cross-entropy backward %+v", p), fromDev(t, gotDx), wantDx, 1e-5)
		}
	}
}

// TestDropoutMatchesCPU: the device drops exactly the elements the CPU
// backend drops for the same {seed, counter}, and advances the counter.
func TestDropoutMatchesCPU(t *testing.T) {
	for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
		x := tensor.Normal(tensor.NewRNG(3), tensor.F32, 0, 1, 5000).Cast(d)
		state := tensor.FromSlice([]int64{42, 7}, 2)
		stateD := toDev(t, state)
		want, wantMask := tensor.Empty(d, 5000), tensor.Empty(d, 5000)
		cpuBE.Dropout(want, wantMask, x, state, 0.3)
		got, gotMask := poisoned(t, d, 5000), poisoned(t, d, 5000)
		if err := dev.Dropout(got, gotMask, toDev(t, x), stateD, 0.3); err != nil {
			t.Fatal(err)
		}
		closeRel(t, "dropout mask", fromDev(t, gotMask), wantMask, 0)
		closeRel(t, "dropout", fromDev(t, got), want, 0)
		if s := fromDev(t, stateD).I64(); s[0] != 42 || s[1] != 8 {
			t.Fatalf("state after one dropout %v, want [42 8]", s)
		}
	}
}

// TestLayerNormMatchesCPU: forward (with and without affine) and the
// backward's dx, dw, db.
func TestLayerNormMatchesCPU(t *testing.T) {
	for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, affine := range []bool{true, false} {
			const rows, n = 33, 300
			rng := tensor.NewRNG(4)
			x := tensor.Normal(rng, tensor.F32, 1, 2, rows, n).Cast(d)
			dy := tensor.Normal(rng, tensor.F32, 0, 1, rows, n).Cast(d)
			var w, b, wd, bd *tensor.Tensor
			if affine {
				w, b = tensor.Normal(rng, tensor.F32, 1, 0.1, n).Cast(d), tensor.Normal(rng, tensor.F32, 0, 0.1, n).Cast(d)
				wd, bd = toDev(t, w), toDev(t, b)
			}
			y, mean, rstd := tensor.Empty(d, rows, n), tensor.Empty(tensor.F32, rows), tensor.Empty(tensor.F32, rows)
			cpuBE.LayerNorm(y, mean, rstd, x, w, b, n, 1e-5)
			yd, meanD, rstdD := poisoned(t, d, rows, n), poisoned(t, tensor.F32, rows), poisoned(t, tensor.F32, rows)
			xd := toDev(t, x)
			if err := dev.LayerNorm(yd, meanD, rstdD, xd, wd, bd, n, 1e-5); err != nil {
				t.Fatal(err)
			}
			tol := 4 * tolOf(d)
			closeRel(t, "layernorm y", fromDev(t, yd), y, tol)
			closeRel(t, "layernorm rstd", fromDev(t, rstdD), rstd, tol)
			dx, dw, db := tensor.Empty(d, rows, n), tensor.Empty(d, n), tensor.Empty(d, n)
			gdx, gdw, gdb := poisoned(t, d, rows, n), poisoned(t, d, n), poisoned(t, d, n)
			if !affine {
				dw, db, gdw, gdb = nil, nil, nil, nil
			}
			cpuBE.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w, n)
			if err := dev.LayerNormBackward(gdx, gdw, gdb, toDev(t, dy), xd, meanD, rstdD, wd, n); err != nil {
				t.Fatal(err)
			}
			closeRel(t, "layernorm dx", fromDev(t, gdx), dx, tol)
			if affine {
				closeRel(t, "layernorm dw", fromDev(t, gdw), dw, tol)
				closeRel(t, "layernorm db", fromDev(t, gdb), db, tol)
			}
		}
	}
}

// TestIndexRowsMatchCPU: row selection (an embedding lookup) and the
// scattered add of its gradient, with repeated rows, I64 and I32 indices.
func TestIndexRowsMatchCPU(t *testing.T) {
	rng := tensor.NewRNG(6)
	table := tensor.Normal(rng, tensor.F32, 0, 1, 50, 3, 7)
	idx := tensor.FromSlice([]int64{3, 0, 49, 3, 17, 3}, 6)
	for _, ix := range []*tensor.Tensor{idx, idx.Cast(tensor.I32)} {
		want := tensor.Empty(tensor.F32, 6, 3, 7)
		cpuBE.IndexSelect(want, table, 0, ix)
		got := poisoned(t, tensor.F32, 6, 3, 7)
		if err := dev.IndexSelectRows(got, toDev(t, table), toDev(t, ix)); err != nil {
			t.Fatal(err)
		}
		closeRel(t, "index select", fromDev(t, got), want, 0)
		src := tensor.Normal(rng, tensor.F32, 0, 1, 6, 3, 7)
		acc := tensor.Normal(rng, tensor.F32, 0, 1, 50, 3, 7)
		accD := toDev(t, acc)
		cpuBE.IndexAdd(acc, 0, ix, src)
		if err := dev.IndexAddRows(accD, toDev(t, ix), toDev(t, src)); err != nil {
			t.Fatal(err)
		}
		closeRel(t, "index add", fromDev(t, accD), acc, 1e-6)
	}
}
