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
	"math/rand/v2"
	"os"
	"testing"
	"time"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/cpu"
	"github.com/esper-go/esper/tensor"
)

var (
	dev *Device  // the device under test
	be  *Backend // its kernels.Backend, registered for tensor.KindCUDA
)

func TestMain(m *testing.M) {
	opened := time.Now()
	b, err := NewBackend(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cuda tests:", err)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "cuda tests: opened %s (%s) in %.1f s (%s)\n", b.d.name, b.d.arch, time.Since(opened).Seconds(), b.KernelCode())
	b.Register()
	be, dev = b, b.CUDADevice()
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
	switch d {
	case tensor.BF16:
		return 1e-2
	case tensor.F16:
		return 2e-3
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
	h := poisoned(t, tensor.F16, 1000)
	if err := dev.Cast(h, xd); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "cast f32→f16", fromDev(t, h), x.Cast(tensor.F16), 0)
	if err := dev.Cast(f, h); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "cast f16→f32", fromDev(t, f), x.Cast(tensor.F16).Cast(tensor.F32), 0)
	if err := dev.Cast(b, h); err != nil { // no kernel of its own: Copy's conversion
		t.Fatal(err)
	}
	closeRel(t, "cast f16→bf16", fromDev(t, b), x.Cast(tensor.F16).Cast(tensor.BF16), 0)
	for _, d := range floatDTypes {
		y := poisoned(t, d, 77)
		if err := dev.Fill(y, 2.5); err != nil {
			t.Fatal(err)
		}
		closeRel(t, "fill", fromDev(t, y), tensor.Full(d, 2.5, 77), 0)
	}
}

func TestUnaryMatchesCPU(t *testing.T) {
	for _, d := range floatDTypes {
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
	for _, d := range floatDTypes {
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

// optimLayouts are the operand layouts the arena optimizer kernels are
// tested in: offsets (in elements) of param, grad and state views into
// fresh device buffers. Offset 0 everywhere is 16-byte aligned and takes
// the float4 path (n = 10007 leaves a scalar tail of 3); an offset of 1
// on any operand takes the scalar path for every element.
var optimLayouts = []struct {
	name           string
	param, grad, m int
}{
	{"aligned (float4 + tail)", 0, 0, 0},
	{"all unaligned (scalar)", 1, 1, 1},
	{"grad unaligned (scalar)", 0, 1, 0},
	{"state unaligned (scalar)", 0, 0, 3},
}

// atOffset copies x to the device as a view starting off elements into a
// buffer of x.Numel()+off elements (the elements before it poisoned).
func atOffset(t *testing.T, x *tensor.Tensor, off int) *tensor.Tensor {
	t.Helper()
	n := x.Numel()
	buf := poisoned(t, x.DType(), n+off)
	v := buf.Narrow(0, off, n)
	if err := dev.CopyHostToDevice(v, x.Contiguous().Storage().Bytes()); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestOptimizersMatchCPU: SGD (plain, momentum, Nesterov with weight
// decay, maximize; first step and later) and AdamW over 100 steps agree
// with the CPU backend's fused loops, in every optimLayouts layout (the
// float4 path and the scalar one); found_inf skips the update.
func TestOptimizersMatchCPU(t *testing.T) {
	const n = 10007
	rng := tensor.NewRNG(5)
	for _, l := range optimLayouts {
		for _, o := range []kernels.SGDOptions{{}, {Momentum: 0.9}, {Momentum: 0.9, Nesterov: true, WeightDecay: 1e-2}, {Momentum: 0.8, Dampening: 0.1, Maximize: true}} {
			p := tensor.Normal(rng, tensor.F32, 0, 1, n)
			pd := atOffset(t, p, l.param)
			var m, md *tensor.Tensor
			if o.Momentum != 0 {
				m = tensor.Zeros(tensor.F32, n)
				md = atOffset(t, m, l.m)
			}
			for step := 1; step <= 5; step++ {
				g := tensor.Normal(rng, tensor.F32, 0, 1, n)
				hyper := tensor.FromSlice([]float64{0.01, float64(step)}, 2)
				cpuBE.SGDStep(p, g, m, hyper, nil, o)
				if err := dev.SGDStep(pd, atOffset(t, g, l.grad), md, toDev(t, hyper), nil, o); err != nil {
					t.Fatal(err)
				}
			}
			closeRel(t, fmt.Sprintf("sgd %+v, %s", o, l.name), fromDev(t, pd), p, 1e-5)
			if md != nil {
				closeRel(t, fmt.Sprintf("sgd %+v momentum, %s", o, l.name), fromDev(t, md), m, 1e-5)
			}
		}
		p := tensor.Normal(rng, tensor.F32, 0, 1, n)
		m, v := tensor.Zeros(tensor.F32, n), tensor.Zeros(tensor.F32, n)
		pd, md, vd := atOffset(t, p, l.param), atOffset(t, m, l.m), atOffset(t, v, l.m)
		o := kernels.AdamWOptions{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
		inf := toDev(t, tensor.Zeros(tensor.F32, 1))
		for step := 1; step <= 100; step++ {
			g := tensor.Normal(rng, tensor.F32, 0, 1, n)
			hyper := tensor.FromSlice([]float64{1e-3, float64(step)}, 2)
			cpuBE.AdamWStep(p, g, m, v, hyper, nil, o)
			if err := dev.AdamWStep(pd, atOffset(t, g, l.grad), md, vd, toDev(t, hyper), inf, o); err != nil {
				t.Fatal(err)
			}
		}
		closeRel(t, "adamw, "+l.name, fromDev(t, pd), p, 1e-5)
		closeRel(t, "adamw m, "+l.name, fromDev(t, md), m, 1e-5)
		closeRel(t, "adamw v, "+l.name, fromDev(t, vd), v, 1e-5)
		before := fromDev(t, pd)
		if err := dev.Fill(inf, 1); err != nil {
			t.Fatal(err)
		}
		g := atOffset(t, tensor.Normal(rng, tensor.F32, 0, 1, n), l.grad)
		if err := dev.AdamWStep(pd, g, md, vd, toDev(t, tensor.FromSlice([]float64{1e-3, 101}, 2)), inf, o); err != nil {
			t.Fatal(err)
		}
		closeRel(t, "adamw skipped on found_inf, "+l.name, fromDev(t, pd), before, 0)
	}
}

// TestMatMulMatchesCPU: cuBLAS products in fp32 (highest), TF32, bf16
// and fp16, plain, transposed and batched, against the CPU backend.
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
		}{{"fp32", tensor.F32, Highest, 1e-5}, {"tf32", tensor.F32, High, 1e-3}, {"bf16", tensor.BF16, Highest, 1e-2},
			{"fp16", tensor.F16, Highest, 2e-3}} {
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
// is reused; EmptyCache hands the cache back but for the blocks of slabs
// that still hold a live block (Reserved is Allocated plus Cached).
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
	s := a.Stats()
	if s.Reserved != s.Allocated+s.Cached {
		t.Fatalf("after EmptyCache %d bytes reserved, %d allocated, %d cached", s.Reserved, s.Allocated, s.Cached)
	}
	if s.DriverFrees == after.DriverFrees {
		t.Fatal("EmptyCache gave nothing back (the 3 MiB block is a driver allocation of its own)")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for c, l := range a.free {
		if c > slabMaxClass && len(l) > 0 {
			t.Fatalf("after EmptyCache %d blocks of class %d (no slab's) are still cached", len(l), c)
		}
	}
}

// TestAllocatorSlabs: blocks of a small class come from one driver
// allocation for slabBlocks of them, side by side; one more takes a
// second; each block holds its own bytes after all were written. With
// one block of the first slab live, EmptyCache gives back the second
// slab only, and the live block keeps its bytes; once it is freed too,
// the first. With ESPER_CUDA_SLABS=off every block is an allocation of
// its own.
func TestAllocatorSlabs(t *testing.T) {
	defer slabsOff.Store(slabsOff.Load())
	slabsOff.Store(false)
	a := dev.Allocator()
	const n = 200*512 - 100 // bytes: class 100 KiB, 20 a slab
	c := sizeClass(n)
	k := slabBlocks(c, false)
	if k < 2 {
		t.Fatalf("class %d: %d blocks a slab", c, k)
	}
	// Nothing of the class cached: the collector's frees in, every whole
	// slab out. A block of the class another test still holds would keep
	// its slab's others cached, and the counts below would not be this
	// test's.
	collectDeviceGarbage(func() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.pending) })
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	cached := len(a.free[c])
	a.mu.Unlock()
	if cached != 0 {
		t.Fatalf("%d blocks of class %d still cached after EmptyCache: another test holds one of their slab", cached, c)
	}
	s0 := a.Stats()
	var ps []cu.DevicePtr
	for i := int64(0); i <= k; i++ {
		p, err := a.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	s1 := a.Stats()
	if got := s1.DriverAllocs - s0.DriverAllocs; got != 2 {
		t.Fatalf("%d blocks of class %d: %d driver allocations, want 2 (%d blocks a slab)", k+1, c, got, k)
	}
	if got := s1.Reserved - s0.Reserved; got != 2*k*c {
		t.Fatalf("%d bytes reserved for two slabs of %d blocks of %d", got, k, c)
	}
	for i := int64(1); i < k; i++ {
		if ps[i] != ps[0]+cu.DevicePtr(i*c) {
			t.Fatalf("block %d at %#x, not side by side with block 0 at %#x", i, uint64(ps[i]), uint64(ps[0]))
		}
	}
	// Each block filled with its index by the driver's memset, then read
	// back: a block overlapping another would hold the later index.
	func() {
		release := dev.enter() // the driver calls below need the device's context
		defer release()
		for i, p := range ps {
			if err := cu.MemsetD32(p, uint32(i+1), int64(n/4)); err != nil {
				t.Fatal(err)
			}
		}
		for i, p := range ps {
			got := make([]uint32, n/4)
			if err := cu.MemcpyDtoH(unsafe.Pointer(&got[0]), p, int64(len(got))*4); err != nil {
				t.Fatal(err)
			}
			for j, v := range got {
				if v != uint32(i+1) {
					t.Fatalf("block %d word %d: %d, want %d (another block's bytes)", i, j, v, i+1)
				}
			}
		}
	}()
	// Every block freed but the first slab's last: EmptyCache gives the
	// second slab back and keeps the first, whose live block still holds
	// its bytes.
	keep := ps[k-1]
	for _, p := range ps {
		if p == keep {
			continue
		}
		if err := a.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	// The class's slabs, counted by the allocator (EmptyCache gives back
	// other classes' whole slabs too, which DriverFrees would count).
	slabsOf := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.slabs.byClass[uint64(c)])
	}
	kept := a.Stats()
	if got := slabsOf(); got != 1 {
		t.Fatalf("with one block of the first slab live, %d slabs of the class left after EmptyCache, want 1", got)
	}
	if kept.Cached < (k-1)*c {
		t.Fatalf("%d bytes cached, want at least the first slab's %d free blocks of %d", kept.Cached, k-1, c)
	}
	var word uint32
	err := func() error {
		release := dev.enter()
		defer release()
		return cu.MemcpyDtoH(unsafe.Pointer(&word), keep+cu.DevicePtr(n/4*4-4), 4)
	}()
	if err != nil || word != uint32(k) {
		t.Fatalf("the kept block's last word: %d (%v), want %d", word, err, k)
	}
	if err := a.Free(keep); err != nil {
		t.Fatal(err)
	}
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	s2 := a.Stats()
	if got := slabsOf(); got != 0 || s2.DriverFrees-s1.DriverFrees < 2 {
		t.Fatalf("%d slabs of the class left after EmptyCache (%d driver frees), want none", got, s2.DriverFrees-s1.DriverFrees)
	}
	if s2.Reserved != s2.Allocated+s2.Cached {
		t.Fatalf("%d bytes reserved, %d allocated, %d cached", s2.Reserved, s2.Allocated, s2.Cached)
	}
	slabsOff.Store(true)
	s3 := a.Stats()
	for range 2 {
		p, err := a.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Free(p)
	}
	if got := a.Stats().DriverAllocs - s3.DriverAllocs; got != 2 {
		t.Fatalf("slabs off: two blocks took %d driver allocations, want 2", got)
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
// their backward passes, on rows shorter and longer than a block, in
// every float dtype.
func TestRowsMatchCPU(t *testing.T) {
	for _, d := range floatDTypes {
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
				if err := dev.Reduce(op, got, xd, []int{r}); err != nil {
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
	for _, d := range floatDTypes {
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
	for _, d := range floatDTypes {
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
		if err := dev.IndexSelect(got, toDev(t, table), 0, toDev(t, ix)); err != nil {
			t.Fatal(err)
		}
		closeRel(t, "index select", fromDev(t, got), want, 0)
		src := tensor.Normal(rng, tensor.F32, 0, 1, 6, 3, 7)
		acc := tensor.Normal(rng, tensor.F32, 0, 1, 50, 3, 7)
		accD := toDev(t, acc)
		cpuBE.IndexAdd(acc, 0, ix, src)
		if err := dev.IndexAdd(accD, 0, toDev(t, ix), toDev(t, src)); err != nil {
			t.Fatal(err)
		}
		closeRel(t, "index add", fromDev(t, accD), acc, 1e-6)
	}
}

// floatDTypes are the dtypes every float kernel runs in.
var floatDTypes = []tensor.DType{tensor.F32, tensor.BF16, tensor.F16}

// TestUnaryBackwardMatchesCPU: dy·op'(x) for every op, from x alone and
// with y = op(x) given (the ops that reuse it read it then).
func TestUnaryBackwardMatchesCPU(t *testing.T) {
	const n = 3001
	for _, d := range floatDTypes {
		for _, op := range kernels.UnaryOps() {
			rng := tensor.NewRNG(uint64(op) + 30)
			x := tensor.Uniform(rng, tensor.F32, 0.2, 3, n) // positive: log, sqrt, rsqrt, recip defined
			if op == kernels.Neg || op == kernels.Abs || op == kernels.Relu || op == kernels.Sign || op == kernels.Tanh ||
				op == kernels.GeluTanh || op == kernels.GeluErf || op == kernels.Silu || op == kernels.Sigmoid || op == kernels.Softplus {
				x = tensor.Uniform(rng, tensor.F32, -4, 4, n)
			}
			x = x.Cast(d)
			dy := tensor.Normal(rng, tensor.F32, 0, 1, n).Cast(d)
			y := tensor.Empty(d, n)
			cpuBE.Unary(op, y, x)
			for _, withY := range []bool{false, true} {
				var yc, yd *tensor.Tensor
				if withY {
					yc, yd = y, toDev(t, y)
				}
				want := tensor.Empty(d, n)
				cpuBE.UnaryBackward(op, want, x, yc, dy)
				got := poisoned(t, d, n)
				if err := dev.UnaryBackward(op, got, toDev(t, x), yd, toDev(t, dy)); err != nil {
					t.Fatal(err)
				}
				closeRel(t, fmt.Sprintf("%v backward %v y=%v", op, d, withY), fromDev(t, got), want, 4*tolOf(d))
			}
		}
	}
}

// TestClampMatchesCPU clamps values on both sides of the bounds.
func TestClampMatchesCPU(t *testing.T) {
	for _, d := range floatDTypes {
		x := tensor.Normal(tensor.NewRNG(31), tensor.F32, 0, 2, 4099).Cast(d)
		want := tensor.Empty(d, 4099)
		cpuBE.Clamp(want, x, -1.5, 0.7)
		got := poisoned(t, d, 4099)
		if err := dev.Clamp(got, toDev(t, x), -1.5, 0.7); err != nil {
			t.Fatal(err)
		}
		closeRel(t, fmt.Sprintf("clamp %v", d), fromDev(t, got), want, 0)
	}
}

// bcastCase is a pair of operands (built on the host, viewed the same
// way on the device) broadcasting to dst.
type bcastCase struct {
	name string
	a, b []int                               // stored shapes
	view func(*tensor.Tensor) *tensor.Tensor // applied to a on both sides (nil: as stored)
	dst  []int
}

var bcastCases = []bcastCase{
	{"rows", []int{4, 1, 5}, []int{3, 1}, nil, []int{4, 3, 5}},
	{"scalar-shaped", []int{6, 7}, []int{1}, nil, []int{6, 7}},
	{"transposed a", []int{9, 8}, []int{9}, func(x *tensor.Tensor) *tensor.Tensor { return x.T() }, []int{8, 9}},
	{"expanded a", []int{5, 1}, []int{5, 6}, func(x *tensor.Tensor) *tensor.Tensor { return x.Expand(5, 6) }, []int{5, 6}},
	{"rank 6", []int{2, 1, 3, 1, 2, 3}, []int{3, 1, 2, 2, 1}, nil, []int{2, 3, 3, 2, 2, 3}},
}

// TestBinaryBroadcastMatchesCPU: arithmetic and comparisons (Bool dst)
// over broadcast and strided operands, and BinaryScalar both ways round.
// Operands hold small integers so that comparisons see equal values.
func TestBinaryBroadcastMatchesCPU(t *testing.T) {
	for _, d := range floatDTypes {
		for _, c := range bcastCases {
			rng := tensor.NewRNG(uint64(len(c.name)) + 40)
			a := tensor.Uniform(rng, tensor.F32, 0.5, 1, c.a...).Cast(d)
			b := tensor.RandInt(rng, 3, c.b...).Cast(tensor.F32)
			cpuBE.BinaryScalar(kernels.Add, b, b, 1, false) // 1..3: no zero divisors
			b = b.Cast(d)
			ai := tensor.RandInt(rng, 4, c.a...).Cast(d) // 0..3: equal to b at times
			av, aiv, ad, aid := a, ai, toDev(t, a), toDev(t, ai)
			if c.view != nil {
				av, aiv, ad, aid = c.view(a), c.view(ai), c.view(ad), c.view(aid)
			}
			bd := toDev(t, b)
			for _, op := range kernels.BinaryOps() {
				x, xd := av, ad
				dt := d
				if op.IsComparison() {
					x, xd, dt = aiv, aid, tensor.Bool
				}
				want := tensor.Empty(dt, c.dst...)
				cpuBE.Binary(op, want, x, b)
				got := poisoned(t, dt, c.dst...)
				if err := dev.Binary(op, got, xd, bd); err != nil {
					t.Fatal(err)
				}
				closeRel(t, fmt.Sprintf("%v %v %s", op, d, c.name), fromDev(t, got), want, 2*tolOf(d))
				for _, swap := range []bool{false, true} {
					want := tensor.Empty(dt, c.dst...)
					cpuBE.BinaryScalar(op, want, x, 1, swap)
					got := poisoned(t, dt, c.dst...)
					if err := dev.BinaryScalar(op, got, xd, 1, swap); err != nil {
						t.Fatal(err)
					}
					closeRel(t, fmt.Sprintf("%v scalar %v %s swap=%v", op, d, c.name, swap), fromDev(t, got), want, 2*tolOf(d))
				}
			}
		}
	}
}

// TestWhereMatchesCPU selects between broadcast operands under a
// broadcast condition.
func TestWhereMatchesCPU(t *testing.T) {
	for _, d := range floatDTypes {
		rng := tensor.NewRNG(50)
		r := tensor.Uniform(rng, tensor.F32, 0, 1, 4, 1, 6)
		cond := tensor.Empty(tensor.Bool, 4, 1, 6)
		cpuBE.BinaryScalar(kernels.Gt, cond, r, 0.5, false)
		a := tensor.Normal(rng, tensor.F32, 0, 1, 3, 6).Cast(d)
		b := tensor.Normal(rng, tensor.F32, 0, 1, 4, 3, 1).Cast(d)
		want := tensor.Empty(d, 4, 3, 6)
		cpuBE.Where(want, cond, a, b)
		got := poisoned(t, d, 4, 3, 6)
		if err := dev.Where(got, toDev(t, cond), toDev(t, a), toDev(t, b)); err != nil {
			t.Fatal(err)
		}
		closeRel(t, fmt.Sprintf("where %v", d), fromDev(t, got), want, 0)
	}
}

// TestCopyMatchesCPU: strided views into contiguous and strided
// destinations, with and without an F32↔BF16 or F32↔F16 conversion, and
// two strided views of different shapes.
func TestCopyMatchesCPU(t *testing.T) {
	rng := tensor.NewRNG(60)
	src := tensor.Normal(rng, tensor.F32, 0, 1, 6, 5, 4)
	srcD := toDev(t, src)
	for _, c := range []struct {
		name    string
		sv      func(*tensor.Tensor) *tensor.Tensor
		base    []int
		dv      func(*tensor.Tensor) *tensor.Tensor
		sd, ddt tensor.DType
	}{
		{"permuted to contiguous", func(x *tensor.Tensor) *tensor.Tensor { return x.Permute(2, 0, 1) }, []int{4, 6, 5},
			func(x *tensor.Tensor) *tensor.Tensor { return x }, tensor.F32, tensor.F32},
		{"permuted to bf16", func(x *tensor.Tensor) *tensor.Tensor { return x.Permute(1, 2, 0) }, []int{5, 4, 6},
			func(x *tensor.Tensor) *tensor.Tensor { return x }, tensor.F32, tensor.BF16},
		{"narrowed into narrowed", func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(1, 1, 3) }, []int{6, 7, 4},
			func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(1, 2, 3) }, tensor.F32, tensor.F32},
		{"bf16 transposed into strided f32", func(x *tensor.Tensor) *tensor.Tensor { return x.Transpose(0, 2) }, []int{4, 5, 9},
			func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(2, 1, 6) }, tensor.BF16, tensor.F32},
		{"permuted to f16", func(x *tensor.Tensor) *tensor.Tensor { return x.Permute(1, 2, 0) }, []int{5, 4, 6},
			func(x *tensor.Tensor) *tensor.Tensor { return x }, tensor.F32, tensor.F16},
		{"f16 transposed into strided f32", func(x *tensor.Tensor) *tensor.Tensor { return x.Transpose(0, 2) }, []int{4, 5, 9},
			func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(2, 1, 6) }, tensor.F16, tensor.F32},
		{"different shapes, both strided", func(x *tensor.Tensor) *tensor.Tensor { return x.Permute(2, 1, 0) }, []int{10, 13},
			func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(1, 0, 12) }, tensor.F32, tensor.F32},
	} {
		s, sd := src.Cast(c.sd), srcD
		if c.sd != tensor.F32 {
			sd = toDev(t, s)
		}
		want := tensor.Full(c.ddt, 7, c.base...)
		cpuBE.Copy(c.dv(want), c.sv(s))
		got := poisoned(t, c.ddt, c.base...)
		if err := dev.Fill(got, 7); err != nil {
			t.Fatal(err)
		}
		if err := dev.Copy(c.dv(got), c.sv(sd)); err != nil {
			t.Fatal(err)
		}
		closeRel(t, "copy "+c.name, fromDev(t, got), want, 0)
	}
}

// TestArgMaxMatchesCPU: first maximum along each axis, with ties (small
// integers) and a NaN that must win its line; CountCorrect on the same
// kind of logits.
func TestArgMaxMatchesCPU(t *testing.T) {
	for _, d := range floatDTypes {
		rng := tensor.NewRNG(70)
		x := tensor.RandInt(rng, 5, 7, 9, 300).Cast(tensor.F32)
		x.Set(math.NaN(), 2, 3, 100)
		x.Set(math.NaN(), 2, 3, 200)
		x = x.Cast(d)
		xd := toDev(t, x)
		for axis := 0; axis < 3; axis++ {
			shape := []int{7, 9, 300}
			shape[axis] = 1
			want := tensor.Empty(tensor.I64, shape...)
			cpuBE.ArgMax(want, x, axis)
			got, err := tensor.EmptyOn(tensor.CUDA(0), tensor.I64, shape...)
			if err != nil {
				t.Fatal(err)
			}
			if err := dev.ArgMax(got, xd, axis); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("argmax %v axis %d", d, axis), fromDev(t, got), want, 0)
		}
		logits := tensor.RandInt(rng, 3, 200, 10).Cast(d)
		target := tensor.RandInt(rng, 10, 200)
		for _, tg := range []*tensor.Tensor{target, target.Cast(tensor.I32)} {
			acc := tensor.RandInt(rng, 4, 200).Cast(tensor.F32)
			accD := toDev(t, acc)
			cpuBE.CountCorrect(acc, logits, tg)
			if err := dev.CountCorrect(accD, toDev(t, logits), toDev(t, tg)); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("count correct %v %v", d, tg.DType()), fromDev(t, accD), acc, 0)
		}
	}
}

// TestPoolingMatchesCPU: max pooling (values and argmax, I32 and I64,
// overlapping windows and padding, a NaN) and average pooling with and
// without the padding in the divisor, forward and backward.
func TestPoolingMatchesCPU(t *testing.T) {
	for _, d := range floatDTypes {
		for _, p := range []kernels.Pool2dParams{
			{KernelH: 2, KernelW: 2},
			{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1},
			{KernelH: 3, KernelW: 2, StrideH: 1, StrideW: 2, PadH: 1, CountIncludePad: true},
		} {
			rng := tensor.NewRNG(uint64(p.KernelH*10+p.StrideH) + 80)
			x := tensor.RandInt(rng, 6, 2, 3, 11, 12).Cast(tensor.F32) // ties
			x.Set(math.NaN(), 1, 2, 5, 5)
			x = x.Cast(d)
			xd := toDev(t, x)
			q := p.Norm()
			ho, wo := (11+2*q.PadH-q.KernelH)/q.StrideH+1, (12+2*q.PadW-q.KernelW)/q.StrideW+1
			dy := tensor.Normal(rng, tensor.F32, 0, 1, 2, 3, ho, wo).Cast(d)
			dyd := toDev(t, dy)
			what := fmt.Sprintf("%v %+v", d, p)
			for _, idt := range []tensor.DType{tensor.I32, tensor.I64} {
				want, wantIdx := tensor.Empty(d, 2, 3, ho, wo), tensor.Empty(idt, 2, 3, ho, wo)
				cpuBE.MaxPool2d(want, wantIdx, x, p)
				got := poisoned(t, d, 2, 3, ho, wo)
				gotIdx, err := tensor.EmptyOn(tensor.CUDA(0), idt, 2, 3, ho, wo)
				if err != nil {
					t.Fatal(err)
				}
				if err := dev.MaxPool2d(got, gotIdx, xd, p); err != nil {
					t.Fatal(err)
				}
				closeRel(t, "maxpool argmax "+what, fromDev(t, gotIdx), wantIdx, 0)
				// NaN wins its windows: compare where the CPU has numbers.
				g, w := fromDev(t, got).Float64s(), want.Float64s()
				for i := range w {
					if (w[i] == w[i]) != (g[i] == g[i]) || (w[i] == w[i] && w[i] != g[i]) {
						t.Fatalf("maxpool %s: element %d = %v, want %v", what, i, g[i], w[i])
					}
				}
				wantDx := tensor.Empty(d, 2, 3, 11, 12)
				cpuBE.MaxPool2dBackward(wantDx, dy, wantIdx, p)
				gotDx := poisoned(t, d, 2, 3, 11, 12)
				if err := dev.MaxPool2dBackward(gotDx, dyd, gotIdx, p); err != nil {
					t.Fatal(err)
				}
				closeRel(t, "maxpool backward "+what, fromDev(t, gotDx), wantDx, 2*tolOf(d))
			}
			xf := tensor.Normal(rng, tensor.F32, 0, 1, 2, 3, 11, 12).Cast(d)
			want := tensor.Empty(d, 2, 3, ho, wo)
			cpuBE.AvgPool2d(want, xf, p)
			got := poisoned(t, d, 2, 3, ho, wo)
			if err := dev.AvgPool2d(got, toDev(t, xf), p); err != nil {
				t.Fatal(err)
			}
			closeRel(t, "avgpool "+what, fromDev(t, got), want, 2*tolOf(d))
			wantDx := tensor.Empty(d, 2, 3, 11, 12)
			cpuBE.AvgPool2dBackward(wantDx, dy, p)
			gotDx := poisoned(t, d, 2, 3, 11, 12)
			if err := dev.AvgPool2dBackward(gotDx, dyd, p); err != nil {
				t.Fatal(err)
			}
			closeRel(t, "avgpool backward "+what, fromDev(t, gotDx), wantDx, 2*tolOf(d))
		}
	}
}

// TestBatchNormMatchesCPU: training (batch statistics, running-stat
// update) and evaluation, forward and backward, with and without affine.
func TestBatchNormMatchesCPU(t *testing.T) {
	const n, c, h, w = 6, 5, 7, 9
	for _, d := range floatDTypes {
		for _, training := range []bool{true, false} {
			for _, affine := range []bool{true, false} {
				rng := tensor.NewRNG(90)
				x := tensor.Normal(rng, tensor.F32, 0.5, 2, n, c, h, w).Cast(d)
				dy := tensor.Normal(rng, tensor.F32, 0, 1, n, c, h, w).Cast(d)
				rm := tensor.Normal(rng, tensor.F32, 0, 0.1, c)
				rv := tensor.Uniform(rng, tensor.F32, 0.5, 1.5, c)
				rmD, rvD := toDev(t, rm), toDev(t, rv)
				var wt, b, wd, bd *tensor.Tensor
				if affine {
					wt, b = tensor.Normal(rng, tensor.F32, 1, 0.1, c).Cast(d), tensor.Normal(rng, tensor.F32, 0, 0.1, c).Cast(d)
					wd, bd = toDev(t, wt), toDev(t, b)
				}
				what := fmt.Sprintf("%v training=%v affine=%v", d, training, affine)
				tol := 4 * tolOf(d)
				y, sm, sr := tensor.Empty(d, n, c, h, w), tensor.Empty(tensor.F32, c), tensor.Empty(tensor.F32, c)
				cpuBE.BatchNorm(y, sm, sr, x, wt, b, rm, rv, training, 0.1, 1e-5)
				yd, smD, srD := poisoned(t, d, n, c, h, w), poisoned(t, tensor.F32, c), poisoned(t, tensor.F32, c)
				xd := toDev(t, x)
				if err := dev.BatchNorm(yd, smD, srD, xd, wd, bd, rmD, rvD, training, 0.1, 1e-5); err != nil {
					t.Fatal(err)
				}
				closeRel(t, "batchnorm y "+what, fromDev(t, yd), y, tol)
				closeRel(t, "batchnorm saveRstd "+what, fromDev(t, srD), sr, 1e-5)
				closeRel(t, "batchnorm runMean "+what, fromDev(t, rmD), rm, 1e-5)
				closeRel(t, "batchnorm runVar "+what, fromDev(t, rvD), rv, 1e-5)
				dx, dw, db := tensor.Empty(d, n, c, h, w), tensor.Empty(d, c), tensor.Empty(d, c)
				gdx, gdw, gdb := poisoned(t, d, n, c, h, w), poisoned(t, d, c), poisoned(t, d, c)
				if !affine {
					dw, db, gdw, gdb = nil, nil, nil, nil
				}
				cpuBE.BatchNormBackward(dx, dw, db, dy, x, sm, sr, wt, training)
				if err := dev.BatchNormBackward(gdx, gdw, gdb, toDev(t, dy), xd, smD, srD, wd, training); err != nil {
					t.Fatal(err)
				}
				closeRel(t, "batchnorm dx "+what, fromDev(t, gdx), dx, tol)
				if affine {
					closeRel(t, "batchnorm dw "+what, fromDev(t, gdw), dw, tol)
					closeRel(t, "batchnorm db "+what, fromDev(t, gdb), db, tol)
				}
			}
		}
	}
}

// TestGroupNormMatchesCPU: forward and backward for one group per
// channel, several channels per group, and one group, with and without
// affine.
func TestGroupNormMatchesCPU(t *testing.T) {
	const n, c, h, w = 3, 6, 5, 7
	for _, d := range floatDTypes {
		for _, groups := range []int{6, 3, 1} {
			for _, affine := range []bool{true, false} {
				rng := tensor.NewRNG(uint64(100 + groups))
				x := tensor.Normal(rng, tensor.F32, 1, 2, n, c, h, w).Cast(d)
				dy := tensor.Normal(rng, tensor.F32, 0, 1, n, c, h, w).Cast(d)
				var wt, b, wd, bd *tensor.Tensor
				if affine {
					wt, b = tensor.Normal(rng, tensor.F32, 1, 0.1, c).Cast(d), tensor.Normal(rng, tensor.F32, 0, 0.1, c).Cast(d)
					wd, bd = toDev(t, wt), toDev(t, b)
				}
				what := fmt.Sprintf("%v groups=%d affine=%v", d, groups, affine)
				tol := 4 * tolOf(d)
				y, mean, rstd := tensor.Empty(d, n, c, h, w), tensor.Empty(tensor.F32, n*groups), tensor.Empty(tensor.F32, n*groups)
				cpuBE.GroupNorm(y, mean, rstd, x, wt, b, groups, 1e-5)
				yd, meanD, rstdD := poisoned(t, d, n, c, h, w), poisoned(t, tensor.F32, n*groups), poisoned(t, tensor.F32, n*groups)
				xd := toDev(t, x)
				if err := dev.GroupNorm(yd, meanD, rstdD, xd, wd, bd, groups, 1e-5); err != nil {
					t.Fatal(err)
				}
				closeRel(t, "groupnorm y "+what, fromDev(t, yd), y, tol)
				closeRel(t, "groupnorm rstd "+what, fromDev(t, rstdD), rstd, 1e-5)
				dx, dw, db := tensor.Empty(d, n, c, h, w), tensor.Empty(d, c), tensor.Empty(d, c)
				gdx, gdw, gdb := poisoned(t, d, n, c, h, w), poisoned(t, d, c), poisoned(t, d, c)
				if !affine {
					dw, db, gdw, gdb = nil, nil, nil, nil
				}
				cpuBE.GroupNormBackward(dx, dw, db, dy, x, mean, rstd, wt, groups)
				if err := dev.GroupNormBackward(gdx, gdw, gdb, toDev(t, dy), xd, meanD, rstdD, wd, groups); err != nil {
					t.Fatal(err)
				}
				closeRel(t, "groupnorm dx "+what, fromDev(t, gdx), dx, tol)
				if affine {
					closeRel(t, "groupnorm dw "+what, fromDev(t, gdw), dw, tol)
					closeRel(t, "groupnorm db "+what, fromDev(t, gdb), db, tol)
				}
			}
		}
	}
}

// TestConv2dMatchesCPU: forward (with and without bias), input and
// weight gradients over strides, padding, dilation and groups, in fp32,
// TF32, bf16 and fp16.
func TestConv2dMatchesCPU(t *testing.T) {
	for ci, c := range []struct {
		x, w []int
		p    kernels.Conv2dParams
	}{
		{[]int{2, 3, 9, 10}, []int{4, 3, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1}},
		{[]int{3, 4, 11, 8}, []int{6, 2, 3, 2}, kernels.Conv2dParams{StrideH: 2, StrideW: 1, PadH: 1, DilationW: 2, Groups: 2}},
		{[]int{2, 6, 7, 7}, []int{6, 1, 3, 3}, kernels.Conv2dParams{StrideH: 2, StrideW: 2, PadH: 2, PadW: 1, DilationH: 2, Groups: 6}},
		{[]int{1, 5, 6, 6}, []int{7, 5, 1, 1}, kernels.Conv2dParams{}},
	} {
		rng := tensor.NewRNG(uint64(110 + ci))
		x := tensor.Uniform(rng, tensor.F32, -1, 1, c.x...)
		w := tensor.Uniform(rng, tensor.F32, -1, 1, c.w...)
		bias := tensor.Uniform(rng, tensor.F32, -1, 1, c.w[0])
		p := c.p.Norm()
		ho := kernels.ConvOut(c.x[2], c.w[2], p.StrideH, p.PadH, p.DilationH)
		wo := kernels.ConvOut(c.x[3], c.w[3], p.StrideW, p.PadW, p.DilationW)
		yShape := []int{c.x[0], c.w[0], ho, wo}
		dy := tensor.Uniform(rng, tensor.F32, -1, 1, yShape...)
		for _, pc := range []struct {
			name string
			d    tensor.DType
			prec Precision
			tol  float64
		}{{"fp32", tensor.F32, Highest, 1e-5}, {"tf32", tensor.F32, High, 1e-3}, {"bf16", tensor.BF16, Highest, 1e-2},
			{"fp16", tensor.F16, Highest, 2e-3}} {
			xc, wc, bc, dyc := x.Cast(pc.d), w.Cast(pc.d), bias.Cast(pc.d), dy.Cast(pc.d)
			f32 := func(t *tensor.Tensor) *tensor.Tensor { return t.Cast(tensor.F32) }
			what := fmt.Sprintf("conv %s %v %v %+v", pc.name, c.x, c.w, c.p)
			for _, withBias := range []bool{false, true} {
				var b, bd *tensor.Tensor
				if withBias {
					b, bd = f32(bc), toDev(t, bc)
				}
				want := tensor.Empty(tensor.F32, yShape...)
				cpuBE.Conv2d(want, f32(xc), f32(wc), b, c.p)
				got := poisoned(t, pc.d, yShape...)
				if err := dev.Conv2d(got, toDev(t, xc), toDev(t, wc), bd, c.p, pc.prec); err != nil {
					t.Fatal(err)
				}
				closeRel(t, fmt.Sprintf("%s bias=%v", what, withBias), f32(fromDev(t, got)), want, pc.tol)
			}
			wantDx := tensor.Empty(tensor.F32, c.x...)
			cpuBE.Conv2dBackwardInput(wantDx, f32(dyc), f32(wc), c.p)
			gotDx := poisoned(t, pc.d, c.x...)
			if err := dev.Conv2dBackwardInput(gotDx, toDev(t, dyc), toDev(t, wc), c.p, pc.prec); err != nil {
				t.Fatal(err)
			}
			closeRel(t, what+" dx", f32(fromDev(t, gotDx)), wantDx, pc.tol)
			wantDw := tensor.Empty(tensor.F32, c.w...)
			cpuBE.Conv2dBackwardWeight(wantDw, f32(xc), f32(dyc), c.p)
			gotDw := poisoned(t, pc.d, c.w...)
			if err := dev.Conv2dBackwardWeight(gotDw, toDev(t, xc), toDev(t, dyc), c.p, pc.prec); err != nil {
				t.Fatal(err)
			}
			closeRel(t, what+" dw", f32(fromDev(t, gotDw)), wantDw, 2*pc.tol)
		}
	}
}

// TestForeachAndScalerMatchCPU: norms, scaling and axpy over a list of
// tensors, unscale with and without an infinity, the GradScaler update
// through growth and backoff, and the guarded counter.
func TestForeachAndScalerMatchCPU(t *testing.T) {
	rng := tensor.NewRNG(120)
	sizes := []int{1, 300, 5000, 77}
	mk := func() (host, devs []*tensor.Tensor) {
		for _, n := range sizes {
			x := tensor.Normal(rng, tensor.F32, 0, 1, n)
			host = append(host, x)
			devs = append(devs, toDev(t, x))
		}
		return host, devs
	}
	xs, xsD := mk()
	ys, ysD := mk()
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
		want := tensor.Empty(dt, len(xs))
		cpuBE.ForeachNorm(want, xs)
		got, err := tensor.EmptyOn(tensor.CUDA(0), dt, len(xs))
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.ForeachNorm(got, xsD); err != nil {
			t.Fatal(err)
		}
		closeRel(t, fmt.Sprintf("foreach norm %v", dt), fromDev(t, got), want, 1e-5)
	}
	s := tensor.FromSlice([]float32{0.75}, 1)
	cpuBE.ForeachScale(xs, s)
	if err := dev.ForeachScale(xsD, toDev(t, s)); err != nil {
		t.Fatal(err)
	}
	cpuBE.ForeachAxpy(ys, xs, -0.3)
	if err := dev.ForeachAxpy(ysD, xsD, -0.3); err != nil {
		t.Fatal(err)
	}
	for i := range xs {
		closeRel(t, "foreach scale", fromDev(t, xsD[i]), xs[i], 1e-6)
		closeRel(t, "foreach axpy", fromDev(t, ysD[i]), ys[i], 1e-6)
	}
	inv := tensor.FromSlice([]float32{1.0 / 1024}, 1)
	for _, poison := range []bool{false, true} {
		if poison {
			xs[2].Set(math.Inf(1), 17)
			xsD[2] = toDev(t, xs[2])
		}
		found := tensor.Zeros(tensor.F32, 1)
		foundD := toDev(t, found)
		cpuBE.UnscaleCheck(xs, inv, found)
		if err := dev.UnscaleCheck(xsD, toDev(t, inv), foundD); err != nil {
			t.Fatal(err)
		}
		closeRel(t, fmt.Sprintf("found inf (poisoned %v)", poison), fromDev(t, foundD), found, 0)
		if !poison {
			for i := range xs {
				closeRel(t, "unscaled", fromDev(t, xsD[i]), xs[i], 1e-6)
			}
		}
	}
	scale, tracker := tensor.FromSlice([]float32{65536}, 1), tensor.Zeros(tensor.F32, 1)
	scaleD, trackerD := toDev(t, scale), toDev(t, tracker)
	for step, inf := range []float32{0, 0, 0, 1, 0, 0, 0, 0} {
		f := tensor.FromSlice([]float32{inf}, 1)
		cpuBE.ScalerUpdate(scale, tracker, f, 2, 0.5, 3)
		if err := dev.ScalerUpdate(scaleD, trackerD, toDev(t, f), 2, 0.5, 3); err != nil {
			t.Fatal(err)
		}
		closeRel(t, fmt.Sprintf("scale after step %d", step), fromDev(t, scaleD), scale, 0)
		closeRel(t, fmt.Sprintf("tracker after step %d", step), fromDev(t, trackerD), tracker, 0)
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64, tensor.I64} {
		counter := tensor.Full(dt, 5, 1)
		counterD := toDev(t, counter)
		for _, sk := range []float32{0, 1, 0} {
			skip := tensor.FromSlice([]float32{sk}, 1)
			cpuBE.Increment(counter, skip)
			if err := dev.Increment(counterD, toDev(t, skip)); err != nil {
				t.Fatal(err)
			}
		}
		if err := dev.Increment(counterD, nil); err != nil {
			t.Fatal(err)
		}
		cpuBE.Increment(counter, nil)
		closeRel(t, fmt.Sprintf("increment %v", dt), fromDev(t, counterD), counter, 0)
	}
}

// devEmpty is an uninitialised device tensor (for outputs every element
// of which is written, and for integer outputs that cannot be poisoned
// with NaN).
func devEmpty(t *testing.T, d tensor.DType, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.EmptyOn(tensor.CUDA(0), d, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestFillAndCopyAnyDType: Fill of every dtype, and converting copies
// between dtype pairs without a kernel of their own (through fp64, as
// the CPU converts), from strided views.
func TestFillAndCopyAnyDType(t *testing.T) {
	for _, d := range []tensor.DType{tensor.F64, tensor.F16, tensor.I32, tensor.I64, tensor.Bool} {
		x := devEmpty(t, d, 33)
		if err := dev.Fill(x, 3); err != nil {
			t.Fatal(err)
		}
		closeRel(t, fmt.Sprintf("fill %v", d), fromDev(t, x), tensor.Full(d, 3, 33), 0)
	}
	rng := tensor.NewRNG(80)
	src := tensor.Normal(rng, tensor.F32, 0, 4, 6, 7)
	for _, c := range []struct{ from, to tensor.DType }{
		{tensor.F32, tensor.I64}, {tensor.F32, tensor.I32}, {tensor.I64, tensor.F32}, {tensor.Bool, tensor.F32},
		{tensor.F64, tensor.F32}, {tensor.F32, tensor.F16}, {tensor.BF16, tensor.F64}, {tensor.F32, tensor.Bool},
		{tensor.F16, tensor.BF16}, {tensor.BF16, tensor.F16}, {tensor.F16, tensor.I32},
	} {
		s := src.Cast(c.from)
		want := tensor.Empty(c.to, 7, 6)
		cpuBE.Copy(want, s.Transpose(0, 1))
		got := devEmpty(t, c.to, 7, 6)
		if err := dev.Copy(got, toDev(t, s).Transpose(0, 1)); err != nil {
			t.Fatal(err)
		}
		closeRel(t, fmt.Sprintf("copy %v→%v", c.from, c.to), fromDev(t, got), want, 0)
	}
}

// TestReduceAxesMatchCPU: every ReduceOp over single axes (first,
// middle, last), neighbouring pairs, a non-neighbouring pair (through a
// permuted copy), all axes and none, in every float dtype.
func TestReduceAxesMatchCPU(t *testing.T) {
	for _, d := range floatDTypes {
		rng := tensor.NewRNG(81)
		x := tensor.Normal(rng, tensor.F32, 0, 2, 4, 50, 6).Cast(d)
		xd := toDev(t, x)
		for _, axes := range [][]int{{0}, {1}, {2}, {-1}, {0, 1}, {1, 2}, {0, 2}, {0, 1, 2}, {}} {
			for op := kernels.Sum; op <= kernels.LogSumExp; op++ {
				shape := []int{4, 50, 6}
				for _, a := range axes {
					shape[(a+3)%3] = 1
				}
				want := tensor.Empty(d, shape...)
				cpuBE.Reduce(op, want, x, axes)
				got := poisoned(t, d, shape...)
				if err := dev.Reduce(op, got, xd, axes); err != nil {
					t.Fatal(err)
				}
				closeRel(t, fmt.Sprintf("reduce %v %v over %v", op, d, axes), fromDev(t, got), want, 4*tolOf(d))
			}
		}
	}
}

// TestSoftmaxAxisMatchesCPU: softmax and log-softmax along a first and a
// middle axis, forward and backward.
func TestSoftmaxAxisMatchesCPU(t *testing.T) {
	for _, d := range floatDTypes {
		rng := tensor.NewRNG(82)
		x := tensor.Normal(rng, tensor.F32, 0, 2, 5, 70, 9).Cast(d)
		dy := tensor.Normal(rng, tensor.F32, 0, 1, 5, 70, 9).Cast(d)
		xd, dyd := toDev(t, x), toDev(t, dy)
		for _, axis := range []int{0, 1, -2} {
			for _, log := range []bool{false, true} {
				y := tensor.Empty(d, 5, 70, 9)
				dx := tensor.Empty(d, 5, 70, 9)
				if log {
					cpuBE.LogSoftmax(y, x, axis)
					cpuBE.LogSoftmaxBackward(dx, y, dy, axis)
				} else {
					cpuBE.Softmax(y, x, axis)
					cpuBE.SoftmaxBackward(dx, y, dy, axis)
				}
				got := poisoned(t, d, 5, 70, 9)
				if err := dev.SoftmaxAxis(got, xd, axis, log); err != nil {
					t.Fatal(err)
				}
				closeRel(t, fmt.Sprintf("softmax %v axis %d log=%v", d, axis, log), fromDev(t, got), y, 4*tolOf(d))
				gotDx := poisoned(t, d, 5, 70, 9)
				if err := dev.SoftmaxBackwardAxis(gotDx, toDev(t, y), dyd, axis, log); err != nil {
					t.Fatal(err)
				}
				closeRel(t, fmt.Sprintf("softmax backward %v axis %d log=%v", d, axis, log), fromDev(t, gotDx), dx, 4*tolOf(d))
			}
		}
	}
}

// TestEpilogueSideDTypes: the epilogues' side operands (MatMulBias's
// bias, Conv2dAffineAct's scale and shift) in any of F32, BF16 and F16
// whatever the product's dtype (an F16 one widened to F32 for the F32 and
// BF16 kernels, read by its dtype code in the F16 ones), against the CPU
// backend.
func TestEpilogueSideDTypes(t *testing.T) {
	rng := tensor.NewRNG(91)
	x := tensor.Normal(rng, tensor.F32, 0, 1, 13, 9)
	w := tensor.Normal(rng, tensor.F32, 0, 1, 7, 9)
	bias := tensor.Normal(rng, tensor.F32, 0, 1, 7)
	cx := tensor.Normal(rng, tensor.F32, 0, 1, 2, 3, 6, 6)
	cw := tensor.Normal(rng, tensor.F32, 0, 0.5, 4, 3, 3, 3)
	scale := tensor.Normal(rng, tensor.F32, 1, 0.2, 4)
	shift := tensor.Normal(rng, tensor.F32, 0, 0.2, 4)
	p := kernels.Conv2dParams{PadH: 1, PadW: 1}
	for _, d := range floatDTypes {
		xc, wc, cxc, cwc := x.Cast(d), w.Cast(d), cx.Cast(d), cw.Cast(d)
		for _, sd := range floatDTypes {
			bc, sc, sh := bias.Cast(sd), scale.Cast(sd), shift.Cast(sd)
			want := tensor.Empty(d, 13, 7)
			cpuBE.MatMulBias(want, xc, wc, bc, false, true)
			got := poisoned(t, d, 13, 7)
			if err := dev.MatMulBias(got, toDev(t, xc), toDev(t, wc), toDev(t, bc), false, true, Highest); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("matmul %v bias %v", d, sd), fromDev(t, got), want, 2*tolOf(d))
			wantY := tensor.Empty(d, 2, 4, 6, 6)
			cpuBE.Conv2dAffineAct(wantY, cxc, cwc, sc, sh, kernels.Relu, p)
			gotY := poisoned(t, d, 2, 4, 6, 6)
			if err := dev.Conv2dAffineAct(gotY, toDev(t, cxc), toDev(t, cwc), toDev(t, sc), toDev(t, sh), kernels.Relu, p, Highest); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("conv %v scale and shift %v", d, sd), fromDev(t, gotY), wantY, 2*tolOf(d))
		}
	}
}

// TestMatMulBiasActMatchesCPU: the fused linear forward with and without
// a bias and an activation, and a rank-2 operand broadcast over a batch.
func TestMatMulBiasActMatchesCPU(t *testing.T) {
	rng := tensor.NewRNG(83)
	x := tensor.Normal(rng, tensor.F32, 0, 1, 37, 19)
	w := tensor.Normal(rng, tensor.F32, 0, 1, 11, 19)
	bias := tensor.Normal(rng, tensor.F32, 0, 1, 11)
	xd, wd, bd := toDev(t, x), toDev(t, w), toDev(t, bias)
	for _, c := range []struct {
		bias *tensor.Tensor
		act  kernels.UnaryOp
		fuse bool
	}{{nil, 0, false}, {bias, 0, false}, {bias, kernels.Relu, true}, {nil, kernels.GeluTanh, true}} {
		want := tensor.Empty(tensor.F32, 37, 11)
		got := poisoned(t, tensor.F32, 37, 11)
		var bdev *tensor.Tensor
		if c.bias != nil {
			bdev = bd
		}
		var err error
		if c.fuse {
			cpuBE.MatMulBiasAct(want, x, w, c.bias, c.act, false, true)
			err = dev.MatMulBiasAct(got, xd, wd, bdev, c.act, false, true, Highest)
		} else {
			cpuBE.MatMulBias(want, x, w, c.bias, false, true)
			err = dev.MatMulBias(got, xd, wd, bdev, false, true, Highest)
		}
		if err != nil {
			t.Fatal(err)
		}
		closeRel(t, fmt.Sprintf("matmul bias=%v act=%v fused=%v", c.bias != nil, c.act, c.fuse), fromDev(t, got), want, 1e-5)
	}
	a := tensor.Normal(rng, tensor.F32, 0, 1, 4, 8, 19)
	for _, c := range []struct {
		name string
		a, b *tensor.Tensor
		ta   bool
		out  []int
	}{{"batched a, shared b", a, w, false, []int{4, 8, 11}}, {"shared a, batched b", w, a, false, []int{4, 11, 8}}} {
		want := tensor.Empty(tensor.F32, c.out...)
		cpuBE.MatMul(want, c.a, c.b, c.ta, true)
		got := poisoned(t, tensor.F32, c.out...)
		if err := dev.MatMul(got, toDev(t, c.a), toDev(t, c.b), c.ta, true, Highest); err != nil {
			t.Fatal(err)
		}
		closeRel(t, "matmul "+c.name, fromDev(t, got), want, 1e-5)
	}
}

// TestIndexingMatchesCPU: index select and index add along a middle
// axis, torch.gather and scatter_add_ along the first and a middle axis
// with an index smaller than the tensors, from a strided source.
func TestIndexingMatchesCPU(t *testing.T) {
	rng := tensor.NewRNG(84)
	src := tensor.Normal(rng, tensor.F32, 0, 1, 5, 8, 3)
	srcD := toDev(t, src)
	idx := tensor.FromSlice([]int64{7, 0, 3, 3, 5}, 5)
	for _, ix := range []*tensor.Tensor{idx, idx.Cast(tensor.I32)} {
		for _, s := range []*tensor.Tensor{src, src.Cast(tensor.I64)} {
			want := tensor.Empty(s.DType(), 5, 5, 3)
			cpuBE.IndexSelect(want, s, 1, ix)
			got := devEmpty(t, s.DType(), 5, 5, 3)
			if err := dev.IndexSelect(got, toDev(t, s), 1, toDev(t, ix)); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("index select %v %v", s.DType(), ix.DType()), fromDev(t, got), want, 0)
		}
		acc := tensor.Normal(rng, tensor.F32, 0, 1, 5, 8, 3)
		accD := toDev(t, acc)
		add := tensor.Normal(rng, tensor.F32, 0, 1, 5, 5, 3)
		cpuBE.IndexAdd(acc, 1, ix, add)
		if err := dev.IndexAdd(accD, 1, toDev(t, ix), toDev(t, add)); err != nil {
			t.Fatal(err)
		}
		closeRel(t, "index add", fromDev(t, accD), acc, 1e-6)
	}
	for _, axis := range []int{0, 1} {
		index := tensor.RandInt(rng, src.Shape()[axis], 4, 6, 2)
		for _, ix := range []*tensor.Tensor{index, index.Cast(tensor.I32)} {
			want := tensor.Empty(tensor.F32, 4, 6, 2)
			cpuBE.Gather(want, src, axis, ix)
			got := poisoned(t, tensor.F32, 4, 6, 2)
			if err := dev.Gather(got, srcD, axis, toDev(t, ix)); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("gather axis %d %v", axis, ix.DType()), fromDev(t, got), want, 0)
			upd := tensor.Normal(rng, tensor.F32, 0, 1, 4, 7, 3)
			acc := tensor.Normal(rng, tensor.F32, 0, 1, 5, 8, 3)
			accD := toDev(t, acc)
			cpuBE.ScatterAdd(acc, axis, ix, upd)
			if err := dev.ScatterAdd(accD, axis, toDev(t, ix), toDev(t, upd)); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("scatter add axis %d %v", axis, ix.DType()), fromDev(t, accD), acc, 1e-6)
		}
	}
	// A transposed (strided) source for gather.
	tsrc := src.Transpose(0, 2) // [3, 8, 5]
	index := tensor.RandInt(rng, 8, 3, 4, 5)
	want := tensor.Empty(tensor.F32, 3, 4, 5)
	cpuBE.Gather(want, tsrc.Contiguous(), 1, index)
	got := poisoned(t, tensor.F32, 3, 4, 5)
	if err := dev.Gather(got, srcD.Transpose(0, 2), 1, toDev(t, index)); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "gather from a strided view", fromDev(t, got), want, 0)
}

// TestSegmentOpsMatchCPU: segment sum, mean and max (with its arg-max and
// backward), segment softmax and its backward, over segments of several
// sizes including empty ones and ties for the maximum, I64 and I32 ids.
func TestSegmentOpsMatchCPU(t *testing.T) {
	const e, s = 700, 40 // more rows than one warp's chunk, segments 0 and 39 empty
	rng := tensor.NewRNG(85)
	ids := tensor.RandInt(rng, s-2, e)
	idv := ids.I64()
	for i := range idv {
		idv[i]++
	}
	for _, d := range floatDTypes {
		src := tensor.RandInt(rng, 7, e, 3, 2).Cast(d) // small integers: ties for the maximum
		srcD := toDev(t, src)
		for _, ix := range []*tensor.Tensor{ids, ids.Cast(tensor.I32)} {
			ixD := toDev(t, ix)
			for _, op := range []kernels.ReduceOp{kernels.Sum, kernels.Mean, kernels.Max} {
				want := tensor.Empty(d, s, 3, 2)
				var wantArg, gotArg *tensor.Tensor
				if op == kernels.Max {
					wantArg = tensor.Empty(tensor.I64, s, 3, 2)
					gotArg = devEmpty(t, tensor.I64, s, 3, 2)
				}
				cpuBE.SegmentReduce(op, want, wantArg, src, ix)
				got := poisoned(t, d, s, 3, 2)
				if err := dev.SegmentReduce(op, got, gotArg, srcD, ixD); err != nil {
					t.Fatal(err)
				}
				closeRel(t, fmt.Sprintf("segment %v %v %v", op, d, ix.DType()), fromDev(t, got), want, 1e-6)
				if op != kernels.Max {
					continue
				}
				closeRel(t, fmt.Sprintf("segment argmax %v %v", d, ix.DType()), fromDev(t, gotArg), wantArg, 0)
				dy := tensor.Normal(rng, tensor.F32, 0, 1, s, 3, 2).Cast(d)
				wantDx := tensor.Empty(d, e, 3, 2)
				cpuBE.SegmentMaxBackward(wantDx, dy, wantArg)
				gotDx := poisoned(t, d, e, 3, 2)
				if err := dev.SegmentMaxBackward(gotDx, toDev(t, dy), gotArg); err != nil {
					t.Fatal(err)
				}
				closeRel(t, fmt.Sprintf("segment max backward %v", d), fromDev(t, gotDx), wantDx, 0)
			}
			y := tensor.Empty(d, e, 3, 2)
			cpuBE.SegmentSoftmax(y, src, ix, s)
			gotY := poisoned(t, d, e, 3, 2)
			if err := dev.SegmentSoftmax(gotY, srcD, ixD, s); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("segment softmax %v %v", d, ix.DType()), fromDev(t, gotY), y, 2*tolOf(d))
			dy := tensor.Normal(rng, tensor.F32, 0, 1, e, 3, 2).Cast(d)
			dx := tensor.Empty(d, e, 3, 2)
			cpuBE.SegmentSoftmaxBackward(dx, y, dy, ix, s)
			gotDx := poisoned(t, d, e, 3, 2)
			if err := dev.SegmentSoftmaxBackward(gotDx, toDev(t, y), toDev(t, dy), ixD, s); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("segment softmax backward %v %v", d, ix.DType()), fromDev(t, gotDx), dx, 2*tolOf(d))
		}
	}
}

// TestConcatAndPadMatchCPU: concatenation of strided sources along a
// middle axis, and padding with a value.
func TestConcatAndPadMatchCPU(t *testing.T) {
	rng := tensor.NewRNG(86)
	a := tensor.Normal(rng, tensor.F32, 0, 1, 3, 2, 4)
	b := tensor.Normal(rng, tensor.F32, 0, 1, 4, 5, 3)
	want := tensor.Empty(tensor.F32, 3, 7, 4)
	cpuBE.Concat(want, []*tensor.Tensor{a, b.Transpose(0, 2)}, 1) // b's view [3, 5, 4] is strided
	got := poisoned(t, tensor.F32, 3, 7, 4)
	if err := dev.Concat(got, []*tensor.Tensor{toDev(t, a), toDev(t, b).Transpose(0, 2)}, 1); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "concat", fromDev(t, got), want, 0)
	pads := []int{1, 0, 0, 2, 3, 1}
	wantP := tensor.Empty(tensor.F32, 4, 4, 8)
	cpuBE.Pad(wantP, a, pads, -2.5)
	gotP := poisoned(t, tensor.F32, 4, 4, 8)
	if err := dev.Pad(gotP, toDev(t, a), pads, -2.5); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "pad", fromDev(t, gotP), wantP, 0)
}

// concatSource is a random source of shape and dtype d (Bool: about
// half false), on the host.
func concatSource(rng *rand.Rand, d tensor.DType, shape ...int) *tensor.Tensor {
	if d == tensor.Bool {
		return tensor.Uniform(rng, tensor.F32, 0, 2, shape...).Cast(tensor.I64).Cast(tensor.Bool)
	}
	return tensor.Uniform(rng, tensor.F32, -1000, 1000, shape...).Cast(d)
}

// TestConcatOneLaunchMatchesCPU: Concat through copy_blocks (contiguous
// sources into contiguous dst) equals the CPU's bit for bit in dtypes of
// 1, 2, 4 and 8 bytes, along the first, a middle and the last axis, with
// empty sources, sources at addresses aligned to 16 bytes and not (so
// that every copy unit runs), more sources than one launch takes, and
// mixed with sources Copy takes (a strided view, another dtype); a
// captured Concat of contiguous sources is one graph node and replays.
func TestConcatOneLaunchMatchesCPU(t *testing.T) {
	rng := tensor.NewRNG(87)
	for _, d := range []tensor.DType{tensor.F32, tensor.F16, tensor.I64, tensor.Bool, tensor.F64} {
		for axis := 0; axis < 3; axis++ {
			along := []int{2, 0, 3, 1, 5}
			base := []int{3, 4, 5}
			total := 0
			var host, devs []*tensor.Tensor
			for i, n := range along {
				shape := append([]int(nil), base...)
				shape[axis] = n
				total += n
				x := concatSource(rng, d, shape...)
				host = append(host, x)
				devs = append(devs, atOffset(t, x, i%3).Reshape(shape...)) // offsets 0, 1, 2 elements
			}
			shape := append([]int(nil), base...)
			shape[axis] = total
			want := tensor.Empty(d, shape...)
			cpuBE.Concat(want, host, axis)
			got := devEmpty(t, d, shape...)
			if err := dev.Fill(got, 77); err != nil {
				t.Fatal(err)
			}
			if err := dev.Concat(got, devs, axis); err != nil {
				t.Fatal(err)
			}
			closeRel(t, fmt.Sprintf("concat %v axis %d", d, axis), fromDev(t, got), want, 0)
		}
	}

	// 40 sources (two launches), one of them strided and one F16 into F32
	// (both through Copy).
	var host, devs []*tensor.Tensor
	total := 0
	for i := 0; i < 40; i++ {
		n := 1 + i%4
		total += n
		switch i {
		case 7:
			x := concatSource(rng, tensor.F32, 6, n, 3)
			host = append(host, x.Transpose(0, 2).Transpose(1, 2)) // [3, 6, n] strided
			devs = append(devs, toDev(t, x).Transpose(0, 2).Transpose(1, 2))
		case 21:
			x := concatSource(rng, tensor.F16, 3, 6, n)
			host, devs = append(host, x), append(devs, toDev(t, x))
		default:
			x := concatSource(rng, tensor.F32, 3, 6, n)
			host, devs = append(host, x), append(devs, toDev(t, x))
		}
	}
	want := tensor.Empty(tensor.F32, 3, 6, total)
	cpuBE.Concat(want, host, 2)
	got := poisoned(t, tensor.F32, 3, 6, total)
	if err := dev.Concat(got, devs, 2); err != nil {
		t.Fatal(err)
	}
	closeRel(t, "concat of 40 sources", fromDev(t, got), want, 0)

	// Captured: one node, and a replay reads the sources' new values.
	a, b := toDev(t, concatSource(rng, tensor.F32, 5, 3)), toDev(t, concatSource(rng, tensor.F32, 5, 4))
	out := poisoned(t, tensor.F32, 5, 7)
	gr, err := dev.Capture(func() error { return dev.Concat(out, []*tensor.Tensor{a, b}, 1) })
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	if gr.Nodes() != 1 {
		t.Fatalf("captured Concat of two contiguous sources has %d nodes, want 1", gr.Nodes())
	}
	ha, hb := concatSource(rng, tensor.F32, 5, 3), concatSource(rng, tensor.F32, 5, 4)
	if err := dev.CopyHostToDevice(a, ha.Storage().Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := dev.CopyHostToDevice(b, hb.Storage().Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := gr.Replay(); err != nil {
		t.Fatal(err)
	}
	wantC := tensor.Empty(tensor.F32, 5, 7)
	cpuBE.Concat(wantC, []*tensor.Tensor{ha, hb}, 1)
	closeRel(t, "replayed concat", fromDev(t, out), wantC, 0)
}

// TestStagerCopiesInOrder: batches staged through two pinned buffers
// arrive intact, each visible to kernels enqueued after its Stage (a Fill
// queued behind a staged copy overwrites it, never the reverse), and
// misuse is an error.
func TestStagerCopiesInOrder(t *testing.T) {
	const n = 128 * 28 * 28
	s, err := dev.NewStager(2, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := tensor.NewRNG(12)
	var want []*tensor.Tensor
	var got []*tensor.Tensor
	for i := 0; i < 5; i++ {
		h := tensor.Normal(rng, tensor.F32, 0, 1, n)
		d := poisoned(t, tensor.F32, n)
		if err := s.Stage(d, h.Storage().Bytes()); err != nil {
			t.Fatal(err)
		}
		want, got = append(want, h), append(got, d)
	}
	last := poisoned(t, tensor.F32, n)
	if err := s.Stage(last, want[0].Storage().Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := dev.Fill(last, 7); err != nil { // ordered after the staged copy
		t.Fatal(err)
	}
	for i := range want {
		closeRel(t, fmt.Sprintf("staged batch %d", i), fromDev(t, got[i]), want[i], 0)
	}
	closeRel(t, "fill after stage", fromDev(t, last), tensor.Full(tensor.F32, 7, n), 0)
	if err := s.Stage(poisoned(t, tensor.F32, 3), make([]byte, 8)); err == nil {
		t.Fatal("a size mismatch was accepted")
	}
	if err := s.Stage(poisoned(t, tensor.F32, 2*n), make([]byte, 8*n)); err == nil {
		t.Fatal("a batch larger than the buffers was accepted")
	}
}

// BenchmarkH2D compares host→device copies of a 128×1×28×28 F32 batch
// through the Stager's pinned buffers and from pageable Go memory (PERF.md
// W8: pinned ≥ 2× pageable), in GB/s.
func BenchmarkH2D(b *testing.B) {
	const n = 128 * 28 * 28
	src := tensor.Normal(tensor.NewRNG(1), tensor.F32, 0, 1, n).Storage().Bytes()
	dst, err := tensor.EmptyOn(tensor.CUDA(0), tensor.F32, n)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("pinned", func(b *testing.B) {
		s, err := dev.NewStager(2, len(src))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.SetBytes(int64(len(src)))
		for i := 0; i < b.N; i++ {
			if err := s.Stage(dst, src); err != nil {
				b.Fatal(err)
			}
		}
		if err := dev.Synchronize(); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("pageable", func(b *testing.B) {
		m := memory{dev}
		b.SetBytes(int64(len(src)))
		for i := 0; i < b.N; i++ {
			if err := m.CopyToDevice(dst.Storage().DevicePtr(), 0, src); err != nil {
				b.Fatal(err)
			}
		}
	})
}
