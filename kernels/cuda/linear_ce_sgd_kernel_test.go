package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/esper-go/esper/kernels"
)

// linear_ce_sgd_f32 (src/softmax.cu) transcribed to Go statement by
// statement — linear_ce_small_block (the logits, then ce_small with the
// counts and the logits' gradient), linear_grad_at over the weight and
// bias gradients and sgd_inc_block (common.cuh), with the kernel's
// barriers between them — and run over the launch LinearCESGDStep makes
// (one block of ceSmallThreads(m) threads, the argument block
// linearCESGDScalars packs), against float64 references of the
// cross-entropy, the linear layer's backward and torch.optim.SGD. It runs
// without a GPU; the conformance suite checks the PTX itself on one.

// lcsArgs is struct LinearCESGD (src/softmax.cu) as the emulation reads
// it: decoded from the words at the byte offsets its C layout gives each
// field, into the launcher's own field set.
type lcsArgs = linearCESGDArgs

func lcsDecode(w []uint64) lcsArgs {
	if len(w)*8 != 192 {
		panic(fmt.Sprintf("%d words: struct LinearCESGD is 192 bytes", len(w)))
	}
	// The 4-byte field at byte offset off (little-endian).
	u32 := func(off int) uint32 { return uint32(w[off/8] >> (8 * (off % 8))) }
	f32 := func(off int) float32 { return math.Float32frombits(u32(off)) }
	u64 := func(off int) uint64 { return w[off/8] }
	return lcsArgs{
		linearCESmallArgs: linearCESmallArgs{logits: u64(0), loss: u64(8), x: u64(16), w: u64(24), b: u64(32), t: u64(40),
			m: int64(u64(48)), n: int64(u64(56)), k: int64(u64(64)),
			eps: f32(72), flags: int32(u32(76)), ignore: int64(u64(80)),
			lsum: u64(88), acc: u64(96), dx: u64(104)},
		gw: u64(112), gb: u64(120),
		p: u64(128), g: u64(136), mom: u64(144), hyper: u64(152),
		mu: f32(160), damp: f32(164), wd: f32(168), nesterov: int32(u32(172)),
		maximize: int32(u32(176)), zero: int32(u32(180)), np: int64(u64(184)),
	}
}

// ceTargetEmu is ce_target: target i, int64 when t64, else int32.
func ceTargetEmu(mem *devMem, t uint64, t64 bool, i int64) int64 {
	if t64 {
		return mem.i64[t][i]
	}
	return int64(mem.i32[t][i])
}

// betterEmu is better (common.cuh).
func betterEmu(v float32, i int64, bv float32, bi int64) bool {
	vn, bn := v != v, bv != bv
	if vn != bn {
		return vn
	}
	if vn || v == bv {
		return i < bi
	}
	return v > bv
}

// ceLossEmu is ce_loss for the row at r (a float offset into x).
func ceLossEmu(mem *devMem, x uint64, r, tg, c int64, ignored bool, m, s, sx, eps float32) float32 {
	if ignored {
		return 0
	}
	if tg < 0 || tg >= c {
		return float32(math.NaN())
	}
	lse := addRN(m, logf(s))
	l := mulRN(1-eps, subRN(lse, mem.ld(x, r+tg)))
	if eps != 0 {
		l = addRN(l, mulRN(eps, subRN(lse, divRN(sx, float32(c)))))
	}
	return l
}

// rowExpSumEmu is ce_small's Σ exp(x − m) over row r's c logits: each
// lane's columns j ≡ lane (mod 32) in order, then the warp's butterfly
// sum (every lane gets it).
func rowExpSumEmu(mem *devMem, x uint64, r, c int64, m []float32) []float32 {
	s := make([]float32, 32)
	for l := range 32 {
		for j := int64(l); j < c; j += 32 {
			s[l] += expf(mem.ld(x, r+j) - m[l])
		}
	}
	return warpSum(s)
}

// ceSmallEmu is ce_small<float> run by one block of threads threads
// (lsum, acc and dx 0 for null). Warp w takes rows w, w + warps, …;
// its 32 lanes are run side by side, each with its registers.
func ceSmallEmu(mem *devMem, threads int, loss, x, t uint64, t64 bool, n, c int64, eps float32, hasIgnore bool,
	ignore int64, mean bool, lsum, acc, dx uint64) {
	wsum, wkept, gsh := nanPart[float32](), nanPart[float32](), float32(math.NaN()) // __shared__
	warps := threads >> 5
	tot, kept := make([]float32, threads), make([]float32, threads)
	lanes := func() []float32 { return make([]float32, 32) }
	for warp := 0; warp < warps; warp++ {
		for i := int64(warp); i < n; i += int64(warps) {
			r := i * c
			tg := ceTargetEmu(mem, t, t64, i)
			ignored := hasIgnore && tg == ignore
			m, sx, bv := lanes(), lanes(), lanes()
			bi := make([]int64, 32)
			for l := range 32 {
				m[l], sx[l], bv[l], bi[l] = float32(math.Inf(-1)), 0, float32(math.Inf(-1)), math.MaxInt64
				for j := int64(l); j < c; j += 32 {
					v := mem.ld(x, r+j)
					m[l] = fmaxf(m[l], v)
					sx[l] += v
					if acc != 0 && betterEmu(v, j, bv[l], bi[l]) {
						bv[l], bi[l] = v, j
					}
				}
			}
			m, sx = warpMax(m), warpSum(sx)
			s := rowExpSumEmu(mem, x, r, c, m)
			for l := range 32 {
				tot[warp*32+l] += ceLossEmu(mem, x, r, tg, c, ignored, m[l], s[l], sx[l], eps)
				if !ignored {
					kept[warp*32+l] += 1
				}
			}
			if acc != 0 {
				for o := 16; o > 0; o >>= 1 {
					ov, oi := append([]float32(nil), bv...), append([]int64(nil), bi...)
					for l := range 32 {
						if betterEmu(ov[l^o], oi[l^o], bv[l], bi[l]) {
							bv[l], bi[l] = ov[l^o], oi[l^o]
						}
					}
				}
				if bi[0] == tg { // lane 0
					mem.st(acc, i, mem.ld(acc, i)+1)
				}
			}
		}
	}
	for warp := 0; warp < warps; warp++ { // lane 0 of each warp
		wsum[warp], wkept[warp] = tot[warp*32], kept[warp*32]
	}
	// __syncthreads(); thread 0:
	var a, k float32
	for w := 0; w < warps; w++ {
		a += wsum[w]
		k += wkept[w]
	}
	l := a
	if mean {
		l = a / k
	}
	mem.st(loss, 0, l)
	if lsum != 0 {
		mem.st(lsum, 0, mem.ld(lsum, 0)+l)
	}
	g := float32(1)
	if mean {
		g /= k
	}
	gsh = g
	if dx == 0 {
		return
	}
	// __syncthreads()
	g = gsh
	for warp := 0; warp < warps; warp++ {
		for i := int64(warp); i < n; i += int64(warps) {
			r := i * c
			tg := ceTargetEmu(mem, t, t64, i)
			ignored := hasIgnore && tg == ignore
			m := lanes()
			for l := range 32 {
				m[l] = float32(math.Inf(-1))
				for j := int64(l); j < c; j += 32 {
					m[l] = fmaxf(m[l], mem.ld(x, r+j))
				}
			}
			m = warpMax(m)
			s := rowExpSumEmu(mem, x, r, c, m)
			for l := range 32 {
				inv := 1 / s[l]
				for j := int64(l); j < c; j += 32 {
					hit := float32(0)
					if j == tg {
						hit = 1 - eps
					}
					p := subRN(mulRN(expf(mem.ld(x, r+j)-m[l]), inv), hit)
					var v float32
					if !ignored {
						v = mulRN(g, subRN(p, divRN(eps, float32(c))))
					}
					mem.st(dx, r+j, v)
				}
			}
		}
	}
}

// linearGradAtEmu is linear_grad_at (common.cuh).
func linearGradAtEmu(mem *devMem, dw, db, g, x uint64, m, n, k, e int64) {
	nk := n * k
	if e < nk {
		j, p := e/k, e%k
		var v float32
		for i := int64(0); i < m; i++ {
			v = fma32(mem.ld(g, i*n+j), mem.ld(x, i*k+p), v)
		}
		mem.st(dw, e, addRN(mem.ld(dw, e), v))
		return
	}
	j := e - nk
	var s float64
	for i := int64(0); i < m; i++ {
		s += float64(mem.ld(g, i*n+j))
	}
	mem.st(db, j, addRN(mem.ld(db, j), float32(s)))
}

// sgdElemEmu is sgd_elem<MOM>.
func sgdElemEmu(mom bool, p *float32, g float32, m *float32, lr, mu, damp, wd float32, first, nesterov, maximize bool) {
	d := g
	if maximize {
		d = -g
	}
	if wd != 0 {
		d = addRN(d, mulRN(wd, *p))
	}
	if mom {
		b := d
		if !first {
			b = addRN(mulRN(mu, *m), mulRN(damp, d))
		}
		*m = b
		if nesterov {
			d = addRN(d, mulRN(mu, b))
		} else {
			d = b
		}
	}
	*p = subRN(*p, mulRN(lr, d))
}

// sgdApplyEmu is sgd_apply<MOM = m != 0> run by a grid of blocks×threads
// (every block's thread tid = blockIdx·threads + threadIdx).
func sgdApplyEmu(mem *devMem, blocks, threads int64, p, g, m uint64, lr, mu, damp, wd float32, first, nesterov, maximize, zero bool, n int64) {
	mom := m != 0
	elem := func(i int64) {
		pi, mi := mem.ld(p, i), float32(0)
		if mom {
			mi = mem.ld(m, i)
		}
		sgdElemEmu(mom, &pi, mem.ld(g, i), &mi, lr, mu, damp, wd, first, nesterov, maximize)
		if mom {
			mem.st(m, i, mi)
		}
		mem.st(p, i, pi)
		if zero {
			mem.st(g, i, 0)
		}
	}
	done := int64(0)
	if p%16 == 0 && g%16 == 0 && (!mom || m%16 == 0) {
		n4 := n >> 2
		for tid := int64(0); tid < blocks*threads; tid++ {
			for i := tid; i < n4; i += blocks * threads {
				// One float4 of each: loaded whole, four sgd_elem, stored
				// whole; the lanes are independent, so element by element.
				for c := int64(0); c < 4; c++ {
					elem(4*i + c)
				}
			}
		}
		done = n4 << 2
	}
	for tid := int64(0); tid < blocks*threads; tid++ {
		for i := done + tid; i < n; i += blocks * threads {
			elem(i)
		}
	}
}

// sgdIncBlockEmu is sgd_inc_block (one block; foundInf 0 for null).
func sgdIncBlockEmu(mem *devMem, threads int64, p, g, m, hyper, foundInf uint64, mu, damp, wd float32, nesterov, maximize, zero bool, n int64) {
	if foundInf != 0 && mem.ld(foundInf, 0) != 0 {
		if zero {
			for tid := int64(0); tid < threads; tid++ {
				for i := tid; i < n; i += threads {
					mem.st(g, i, 0)
				}
			}
		}
		return
	}
	h := mem.f64[hyper]
	steps, lrs, firsts := make([]float64, threads), make([]float32, threads), make([]bool, threads)
	for tid := range steps {
		steps[tid] = h[1] + 1
		lrs[tid] = float32(h[0])
		firsts[tid] = steps[tid] <= 1
	}
	// __syncthreads(): every thread has read the old step.
	h[1] = steps[0]
	for tid := int64(1); tid < threads; tid++ {
		if lrs[tid] != lrs[0] || firsts[tid] != firsts[0] {
			panic("the threads disagree on the step")
		}
	}
	sgdApplyEmu(mem, 1, threads, p, g, m, lrs[0], mu, damp, wd, firsts[0], nesterov, maximize, zero, n)
}

// linearCESGDEmu is linear_ce_sgd_f32 over its argument words, one
// block of threads threads.
func linearCESGDEmu(mem *devMem, words []uint64, threads int) {
	a := lcsDecode(words)
	B := int64(threads)
	linearCESmallBlockEmu(mem, threads, a.linearCESmallArgs)
	// __syncthreads(): every dlogit written.
	grads := a.n * a.k
	if a.gb != 0 {
		grads += a.n
	}
	for tid := int64(0); tid < B; tid++ {
		for e := tid; e < grads; e += B {
			linearGradAtEmu(mem, a.gw, a.gb, a.dx, a.x, a.m, a.n, a.k, e)
		}
	}
	// __syncthreads(): every gradient added.
	sgdIncBlockEmu(mem, B, a.p, a.g, a.mom, a.hyper, 0, a.mu, a.damp, a.wd, a.nesterov != 0, a.maximize != 0, a.zero != 0, a.np)
}

// linearCESmallBlockEmu is linear_ce_small_block (src/softmax.cu) over
// its arguments, one block of threads threads.
func linearCESmallBlockEmu(mem *devMem, threads int, a linearCESmallArgs) {
	B := int64(threads)
	// The logits, a thread per element striding by the block.
	t64, hasIgnore, mean := a.flags&1 != 0, (a.flags>>1)&1 != 0, (a.flags>>2)&1 != 0
	for tid := int64(0); tid < B; tid++ {
		for e := tid; e < a.m*a.n; e += B {
			i, j := e/a.n, e%a.n
			var v float32
			for q := int64(0); q < a.k; q++ {
				v = fma32(mem.ld(a.x, i*a.k+q), mem.ld(a.w, j*a.k+q), v)
			}
			if a.b != 0 {
				v += mem.ld(a.b, j)
			}
			mem.st(a.logits, e, v)
		}
	}
	// __syncthreads(): the logits written; then ce_small over them.
	ceSmallEmu(mem, threads, a.loss, a.logits, a.t, t64, a.m, a.n, a.eps, hasIgnore, a.ignore, mean, a.lsum, a.acc, a.dx)
}

// sgdRef is torch.optim.SGD's step of one element in float64: p, g and
// its momentum buffer m (unchanged without momentum) before, p and m
// after.
func sgdRef(o kernels.SGDOptions, first bool, lr, p, g, m float64) (float64, float64) {
	d := g
	if o.Maximize {
		d = -d
	}
	d += o.WeightDecay * p
	if o.Momentum != 0 {
		if first {
			m = d
		} else {
			m = o.Momentum*m + (1-o.Dampening)*d
		}
		if o.Nesterov {
			d += o.Momentum * m
		} else {
			d = m
		}
	}
	return p - lr*d, m
}

// firstMaxRef is the CPU's argMaxLine: the first NaN, else the first
// index of the largest value.
func firstMaxRef(row []float32) int {
	best := 0
	for j, v := range row {
		if v != v {
			return j
		}
		if v > row[best] || row[best] != row[best] {
			best = j
		}
	}
	return best
}

// lcsCase is one LinearCESGDStep: x [m, k], w [n, k], the arena
// [lead | w | b | tail] (4 bytes past an aligned address with
// misalign), the loss's parameters and the step's options from step.
type lcsCase struct {
	name       string
	m, k, n    int
	bias, t64  bool
	p          kernels.CrossEntropyParams
	o          kernels.SGDOptions
	step       float64
	lead, tail int
	misalign   bool
	ignored    []int // rows whose target is p.IgnoreIndex
	badTarget  int   // a row (+1) whose target is n, outside the classes
	tie        bool  // w's row 1 (and b[1]) a copy of row 0: tied logits
	nanRow     int   // a row (+1) of x holding a NaN
}

// TestLinearCESGDKernelInGo: linear_ce_sgd_f32, transcribed, writes the
// logits, the loss (sum or mean over the kept rows, with label smoothing
// and ignored rows), the running loss and counts, the logits' gradient,
// the weight and bias gradients added to the earlier ones, and the SGD
// step over the whole arena (momentum, dampening, weight decay,
// Nesterov, maximize, the first step, zeroed gradients) as float64
// references say within fp32 rounding; every output is written exactly
// once, nothing outside them; the step count advances by one. On W1's
// and W4's layers, one row, one class, 33 rows of 37 classes (rows and
// classes past whole warps), the ceSmallFits and gemmSmallMACs limits
// (256×256 logits, K = 1), K = gemmSmallK with an arena of exactly
// sgdOneBlock, no rows, K = 0, every row ignored, a target outside the
// classes, tied logits, a NaN row, int32 targets, an arena with other
// parameters around the layer and one at an odd address (the scalar
// path).
func TestLinearCESGDKernelInGo(t *testing.T) {
	mean := kernels.CrossEntropyParams{Reduction: kernels.ReduceMean}
	sum := kernels.CrossEntropyParams{Reduction: kernels.ReduceSum}
	smooth := kernels.CrossEntropyParams{Reduction: kernels.ReduceSum, LabelSmoothing: 0.1}
	ign := kernels.CrossEntropyParams{Reduction: kernels.ReduceMean, HasIgnore: true, IgnoreIndex: 1}
	ignSmooth := kernels.CrossEntropyParams{Reduction: kernels.ReduceMean, HasIgnore: true, IgnoreIndex: -100, LabelSmoothing: 0.2}
	cases := []lcsCase{
		{name: "W1", m: 4, k: 16, n: 4, bias: true, t64: true, p: mean, o: kernels.SGDOptions{Momentum: 0.9, ZeroGrad: true}, step: 3},
		{name: "W1 first step", m: 4, k: 16, n: 4, bias: true, t64: true, p: mean, o: kernels.SGDOptions{Momentum: 0.9, Dampening: 0.1, Nesterov: true}, step: 0},
		{name: "W4 head", m: 128, k: 32, n: 10, bias: true, t64: true, p: smooth, o: kernels.SGDOptions{WeightDecay: 0.01}, step: 7},
		{name: "one row, one class", m: 1, k: 3, n: 1, t64: true, p: mean, o: kernels.SGDOptions{Momentum: 0.5, Dampening: 0.1, Maximize: true}, step: 1},
		{name: "33 rows of 37 classes", m: 33, k: 5, n: 37, bias: true, p: ign, o: kernels.SGDOptions{Momentum: 0.9, WeightDecay: 1e-3, ZeroGrad: true}, step: 2,
			lead: 3, tail: 2, misalign: true, ignored: []int{0, 7, 32}},
		{name: "256×256 logits, K 1", m: 256, k: 1, n: 256, bias: true, t64: true, p: mean, o: kernels.SGDOptions{Momentum: 0.9, Nesterov: true, WeightDecay: 0.01}, step: 5},
		{name: "K 256, arena of sgdOneBlock", m: 4, k: 256, n: 64, t64: true, p: ignSmooth, o: kernels.SGDOptions{Momentum: 0.9}, step: 9, ignored: []int{2}},
		{name: "no rows, sum", m: 0, k: 3, n: 4, bias: true, t64: true, p: sum, o: kernels.SGDOptions{Momentum: 0.9}, step: 1},
		{name: "no rows, mean", m: 0, k: 3, n: 4, bias: true, t64: true, p: mean, o: kernels.SGDOptions{}, step: 1},
		{name: "K 0", m: 5, k: 0, n: 3, bias: true, t64: true, p: smooth, o: kernels.SGDOptions{Momentum: 0.5, ZeroGrad: true}, step: 0, tail: 1},
		{name: "every row ignored", m: 3, k: 4, n: 5, bias: true, p: ign, o: kernels.SGDOptions{Momentum: 0.9}, step: 4, ignored: []int{0, 1, 2}},
		{name: "a target outside the classes", m: 6, k: 4, n: 5, bias: true, t64: true, p: sum, o: kernels.SGDOptions{WeightDecay: 0.1, Maximize: true}, step: 2, badTarget: 4},
		{name: "tied logits", m: 40, k: 6, n: 9, bias: true, t64: true, p: mean, o: kernels.SGDOptions{Momentum: 0.9}, step: 2, tie: true},
		{name: "a NaN row", m: 8, k: 4, n: 3, bias: true, t64: true, p: sum, o: kernels.SGDOptions{}, step: 2, nanRow: 3},
	}
	rng := rand.New(rand.NewSource(11))
	normals := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(s * rng.NormFloat64())
		}
		return v
	}
	nans := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.NaN())
		}
		return v
	}
	for _, c := range cases {
		m, k, n := c.m, c.k, c.n
		nw, nb := n*k, 0
		if c.bias {
			nb = n
		}
		np := c.lead + nw + nb + c.tail
		if !linearCESGDFits(m, k, n, np) {
			t.Fatalf("%s: beyond one linear_ce_sgd_f32 launch", c.name)
		}
		threads := ceSmallThreads(m)

		x := normals(m*k, 1)
		if c.nanRow > 0 {
			x[(c.nanRow-1)*k] = float32(math.NaN())
		}
		param, grad, mom := normals(np, 0.5), normals(np, 1), normals(np, 1)
		if c.tie {
			copy(param[c.lead+k:c.lead+2*k], param[c.lead:c.lead+k])
			param[c.lead+nw+1] = param[c.lead+nw]
		}
		target := make([]int64, m)
		for i := range target {
			target[i] = int64(rng.Intn(n))
			if c.tie && i%3 == 0 {
				target[i] = 1 // a tie's second index: never counted
			}
		}
		for _, i := range c.ignored {
			target[i] = c.p.IgnoreIndex
		}
		if c.badTarget > 0 {
			target[c.badTarget-1] = int64(n)
		}
		acc0 := make([]float32, m)
		for i := range acc0 {
			acc0[i] = float32(rng.Intn(5))
		}
		const lsum0, lr = 2.5, 0.05

		mem := newDevMem()
		px := mem.put(x, false)
		pp := mem.put(param, c.misalign)
		pg := mem.put(grad, c.misalign)
		pm := mem.put(mom, c.misalign)
		plogits, pdx := mem.put(nans(m*n), false), mem.put(nans(m*n), false)
		ploss, plsum, pacc := mem.put(nans(1), false), mem.put([]float32{lsum0}, false), mem.put(acc0, false)
		mem.finish()
		var pt uint64
		if c.t64 {
			pt = mem.putI64(target)
		} else {
			t32 := make([]int32, m)
			for i, v := range target {
				t32[i] = int32(v)
			}
			pt = mem.putI32(t32)
		}
		ph := mem.putF64([]float64{lr, c.step})

		a := linearCESGDScalars(m, k, n, c.t64, c.p, c.o, np)
		lead := 4 * uint64(c.lead)
		a.logits, a.loss, a.x, a.w, a.t = plogits, ploss, px, pp+lead, pt
		a.lsum, a.acc, a.dx, a.gw = plsum, pacc, pdx, pg+lead
		if c.bias {
			a.b, a.gb = pp+lead+4*uint64(nw), pg+lead+4*uint64(nw)
		}
		a.p, a.g, a.hyper = pp, pg, ph
		if c.o.Momentum != 0 { // as LinearCESGDStep: no buffer without momentum
			a.mom = pm
		}
		linearCESGDEmu(mem, a.words(), threads)
		what := func(s string, i ...int) string {
			if len(i) == 0 {
				return fmt.Sprintf("%s (%d threads): %s", c.name, threads, s)
			}
			return fmt.Sprintf("%s (%d threads): %s %v", c.name, threads, s, i)
		}
		mem.checkGuards(t, c.name)

		// The logits: x·wᵀ + b.
		logits := mem.view(plogits, m*n)
		w := param[c.lead : c.lead+nw]
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var want, scale float64
				if c.bias {
					want = float64(param[c.lead+nw+j])
					scale = math.Abs(want)
				}
				for q := 0; q < k; q++ {
					want += float64(x[i*k+q]) * float64(w[j*k+q])
					scale += math.Abs(float64(x[i*k+q]) * float64(w[j*k+q]))
				}
				if !near(logits[i*n+j], want, scale, 1e-5) {
					t.Fatalf("%s: %v, want %v", what("logit", i, j), logits[i*n+j], want)
				}
			}
		}

		// The loss, the counts and the logits' gradient, from the logits
		// written (the reference's cross-entropy over the same values).
		eps := float64(float32(c.p.LabelSmoothing))
		meanRed := c.p.Reduction == kernels.ReduceMean
		dlRef := make([]float64, m*n)
		var tot, totScale, kept float64
		for i := 0; i < m; i++ {
			row := logits[i*n : (i+1)*n]
			tg := target[i]
			if c.p.HasIgnore && tg == c.p.IgnoreIndex {
				continue
			}
			kept++
			mx := math.Inf(-1)
			var sx float64
			for _, v := range row {
				if v == v {
					mx = math.Max(mx, float64(v))
				}
				sx += float64(v)
			}
			var s float64
			for _, v := range row {
				s += math.Exp(float64(v) - mx)
			}
			lse := mx + math.Log(s)
			if tg < 0 || tg >= int64(n) {
				tot = math.NaN()
				continue
			}
			l := (1 - eps) * (lse - float64(row[tg]))
			if eps != 0 {
				l += eps * (lse - sx/float64(n))
			}
			tot += l
			totScale += math.Abs(l)
		}
		g := 1.0
		if meanRed {
			tot /= kept
			totScale /= kept
			g /= kept
		}
		for i := 0; i < m; i++ {
			row := logits[i*n : (i+1)*n]
			tg := target[i]
			if c.p.HasIgnore && tg == c.p.IgnoreIndex {
				continue
			}
			mx := math.Inf(-1)
			for _, v := range row {
				if v == v {
					mx = math.Max(mx, float64(v))
				}
			}
			var s float64
			for _, v := range row {
				s += math.Exp(float64(v) - mx)
			}
			for j, v := range row {
				d := math.Exp(float64(v)-mx)/s - eps/float64(n)
				if int64(j) == tg {
					d -= 1 - eps
				}
				dlRef[i*n+j] = g * d
			}
		}
		if got := mem.view(ploss, 1)[0]; !near(got, tot, totScale, 1e-5) {
			t.Fatalf("%s: %v, want %v", what("loss"), got, tot)
		}
		if got := mem.view(plsum, 1)[0]; !near(got, lsum0+tot, totScale, 1e-5) {
			t.Fatalf("%s: %v, want %v", what("running loss"), got, lsum0+tot)
		}
		accGot := mem.view(pacc, m)
		for i := 0; i < m; i++ {
			want := acc0[i]
			if int64(firstMaxRef(logits[i*n:(i+1)*n])) == target[i] {
				want++
			}
			if accGot[i] != want {
				t.Fatalf("%s: %v, want %v (first maximum %d, target %d)", what("count", i), accGot[i], want, firstMaxRef(logits[i*n:(i+1)*n]), target[i])
			}
		}
		dl := mem.view(pdx, m*n)
		for e := range dl {
			if !near(dl[e], dlRef[e], 0, 1e-5) {
				t.Fatalf("%s: %v, want %v", what("dlogit", e/max(n, 1), e%max(n, 1)), dl[e], dlRef[e])
			}
		}

		// The gradients: the earlier ones + dlᵀ·x and the column sums of
		// dl; then the step over the whole arena.
		gRef := make([]float64, np)
		gScale := make([]float64, np)
		for e := range gRef {
			gRef[e] = float64(grad[e])
			gScale[e] = math.Abs(gRef[e])
		}
		for j := 0; j < n; j++ {
			for q := 0; q < k; q++ {
				e := c.lead + j*k + q
				for i := 0; i < m; i++ {
					gRef[e] += dlRef[i*n+j] * float64(x[i*k+q])
					gScale[e] += math.Abs(dlRef[i*n+j] * float64(x[i*k+q]))
				}
			}
			if c.bias {
				e := c.lead + nw + j
				for i := 0; i < m; i++ {
					gRef[e] += dlRef[i*n+j]
					gScale[e] += math.Abs(dlRef[i*n+j])
				}
			}
		}
		pGot, gGot, mGot := mem.view(pp, np), mem.view(pg, np), mem.view(pm, np)
		o := c.o
		first := c.step+1 <= 1
		for e := 0; e < np; e++ {
			pWant, mWant := sgdRef(o, first, lr, float64(param[e]), gRef[e], float64(mom[e]))
			// Scale: the gradient's rounding, carried through the step.
			sc := gScale[e] * (1 + o.Momentum)
			if !near(pGot[e], pWant, lr*sc, 1e-5) {
				t.Fatalf("%s: %v, want %v", what("parameter", e), pGot[e], pWant)
			}
			if !near(mGot[e], mWant, sc+math.Abs(mWant), 1e-5) {
				t.Fatalf("%s: %v, want %v", what("momentum", e), mGot[e], mWant)
			}
			gWant := gRef[e]
			if o.ZeroGrad {
				gWant = 0
			}
			if !near(gGot[e], gWant, gScale[e], 1e-5) || (o.ZeroGrad && gGot[e] != 0) {
				t.Fatalf("%s: %v, want %v", what("gradient", e), gGot[e], gWant)
			}
		}
		if h := mem.f64[ph]; h[0] != lr || h[1] != c.step+1 {
			t.Fatalf("%s: hyper %v, want [%v %v]", c.name, h, lr, c.step+1)
		}

		// Every output written once; the momentum only with momentum, the
		// arena's gradient once more with ZeroGrad.
		once := func(s string, p uint64, cnt, want int) {
			for i, w := range mem.writesAt(p, cnt) {
				if w != want {
					t.Fatalf("%s written %d times, want %d", what(s, i), w, want)
				}
			}
		}
		once("logit", plogits, m*n, 1)
		once("dlogit", pdx, m*n, 1)
		once("loss", ploss, 1, 1)
		once("running loss", plsum, 1, 1)
		once("input", px, m*k, 0)
		once("parameter", pp, np, 1)
		once("momentum", pm, np, map[bool]int{false: 0, true: 1}[o.Momentum != 0])
		z := map[bool]int{false: 0, true: 1}[o.ZeroGrad]
		once("gradient before the layer", pg, c.lead, z)
		once("layer's gradient", pg+4*uint64(c.lead), nw+nb, 1+z)
		once("gradient after the layer", pg+4*uint64(c.lead+nw+nb), c.tail, z)
		for i, w := range mem.writesAt(pacc, m) {
			if w > 1 || (w == 1) != (accGot[i] != acc0[i]) {
				t.Fatalf("%s written %d times (%v from %v)", what("count", i), w, accGot[i], acc0[i])
			}
		}
	}

	// The block: whole warps (ce_small's), at most 1024 threads (its
	// launch bounds), for every row count the one launch takes.
	for m := 0; m <= ceSmallRows; m++ {
		if b := ceSmallThreads(m); b%32 != 0 || b < 32 || b > 1024 {
			t.Fatalf("ceSmallThreads(%d) = %d", m, b)
		}
	}
	// The limits: one past each is not one launch.
	for _, s := range [][4]int{{257, 1, 1, 2}, {256, 1, 257, 514}, {4, 257, 1, 258}, {5, 256, 52, 13312}, {4, 256, 64, 16385}} {
		if linearCESGDFits(s[0], s[1], s[2], s[3]) {
			t.Errorf("linearCESGDFits(m %d, k %d, n %d, np %d): want false", s[0], s[1], s[2], s[3])
		}
	}
}

// TestSGDIncBlockKernelInGo: sgd_inc_block as sgd_inc_f32 runs it
// (IncrementSGDStep: one block of blockSize threads over an arena of up
// to sgdOneBlock elements; the scalars as sgdArgs passes them), the
// found_inf branch linear_ce_sgd_f32 never takes included: a non-zero
// found_inf (NaN too) leaves p, the momentum and the step alone and
// zeroes the gradient only with ZeroGrad; a zero one steps as none. On
// aligned arenas (float4 with a scalar tail) and one at an odd address.
func TestSGDIncBlockKernelInGo(t *testing.T) {
	rng := rand.New(rand.NewSource(31))
	const lr = 0.1
	for _, np := range []int{1, 5, blockSize*4 + 3, sgdOneBlock} {
		for _, fi := range []float64{-1, 0, 1, math.NaN()} { // -1: no found_inf
			for _, o := range []kernels.SGDOptions{{Momentum: 0.9, Dampening: 0.2, ZeroGrad: true}, {WeightDecay: 0.01, Maximize: true}} {
				for _, misalign := range []bool{false, true} {
					what := fmt.Sprintf("%d elements, found_inf %v, %+v, misaligned %v", np, fi, o, misalign)
					v := func() []float32 {
						x := make([]float32, np)
						for i := range x {
							x[i] = float32(rng.NormFloat64())
						}
						return x
					}
					p0, g0, m0 := v(), v(), v()
					mem := newDevMem()
					pp, pg, pm := mem.put(p0, misalign), mem.put(g0, misalign), mem.put(m0, misalign)
					var pf uint64
					if fi >= 0 || fi != fi {
						pf = mem.put([]float32{float32(fi)}, false)
					}
					mem.finish()
					ph := mem.putF64([]float64{lr, 4})
					km := pm
					if o.Momentum == 0 {
						km = 0
					}
					sgdIncBlockEmu(mem, blockSize, pp, pg, km, ph, pf, float32(o.Momentum), float32(1-o.Dampening), float32(o.WeightDecay),
						o.Nesterov, o.Maximize, o.ZeroGrad, int64(np))
					mem.checkGuards(t, what)
					skip := pf != 0 && fi != 0
					p, g, m := mem.view(pp, np), mem.view(pg, np), mem.view(pm, np)
					for e := 0; e < np; e++ {
						pw, mw := sgdRef(o, false, lr, float64(p0[e]), float64(g0[e]), float64(m0[e]))
						gw := float64(g0[e])
						if skip {
							pw, mw = float64(p0[e]), float64(m0[e])
						}
						if o.ZeroGrad {
							gw = 0
						}
						if !near(p[e], pw, 0, 1e-6) || !near(m[e], mw, 0, 1e-6) || float64(g[e]) != gw {
							t.Fatalf("%s: element %d: p %v m %v g %v, want %v %v %v", what, e, p[e], m[e], g[e], pw, mw, gw)
						}
					}
					if step := mem.f64[ph][1]; (skip && step != 4) || (!skip && step != 5) {
						t.Fatalf("%s: step %v after 4", what, step)
					}
				}
			}
		}
	}
}
