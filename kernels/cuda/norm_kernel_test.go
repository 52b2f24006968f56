package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// Batch norm's training kernels of src/norm.cu transcribed to Go
// statement by statement: bn_stats_f32 (bn_stats_part_at with its tail,
// bn_stats_finish_ch), bn_relu_pool_f32, bn_bwd_sums_f32 and its _relu
// and _relupool twins (bn_bwd_sums_at with its tail, bn_bwd_finish_ch,
// relu_dy), and bn_bwd_dx_f32 with its twins (bn_bwd_dx_at). Each runs
// over the launch the cuda build makes (norm_launch.go: bnChunks,
// bnPartialGeom, the tails, the argument blocks, held to the PTX's
// parameter lists; grid1D for the elementwise passes), its blocks whole
// one after another in an order the test picks, so that a channel's
// last partial is written by a different block from order to order;
// every thread of a block runs a phase (the code between barriers)
// before any runs the next, and a warp's shuffles read the values from
// before their step. Sums are rounded as the PTX rounds them (its
// fma.rn where nvcc contracted, none elsewhere). It runs without a GPU.

// bnStatsTailArgs is struct BnStatsTail, read from its words at the
// byte offsets the PTX reads.
type bnStatsTailArgs struct {
	mean, rstd, rm, rv uint64
	cnt                int64
	momentum, eps      float32
	counters           uint64
}

func decodeBnStatsTail(w []uint64) bnStatsTailArgs {
	return bnStatsTailArgs{mean: structU64(w, 0), rstd: structU64(w, 8), rm: structU64(w, 16), rv: structU64(w, 24),
		cnt: int64(structU64(w, 32)), momentum: structF32(w, 40), eps: structF32(w, 44), counters: structU64(w, 48)}
}

// bnBwdTailArgs is struct BnBwdTail, read likewise.
type bnBwdTailArgs struct {
	sums, dw, db uint64
	c, acc       int64
	counters     uint64
}

func decodeBnBwdTail(w []uint64) bnBwdTailArgs {
	return bnBwdTailArgs{sums: structU64(w, 0), dw: structU64(w, 8), db: structU64(w, 16), c: int64(structU64(w, 24)),
		acc: int64(structU64(w, 32)), counters: structU64(w, 40)}
}

// normReluArgs is struct NormRelu<float>, read likewise.
type normReluArgs struct {
	b, g, argmax uint64
	wd, ho, wo   int64
}

func decodeNormRelu(w []uint64) normReluArgs {
	return normReluArgs{b: structU64(w, 0), g: structU64(w, 8), argmax: structU64(w, 16),
		wd: int64(structU64(w, 24)), ho: int64(structU64(w, 32)), wo: int64(structU64(w, 40))}
}

// bnChunkIndexEmu is bn_chunk_index: the offset in x of element e of
// channel ch.
func bnChunkIndexEmu(e, c, ch, hw int64) int64 {
	s := e / hw
	return (s*c+ch)*hw + (e - s*hw)
}

// bnFits32 is bn_fits32. The transcriptions compute in int64, the
// values the kernel's int path computes wherever it fits (every case
// here).
func bnFits32(n, c, hw int64) bool { return n*c*hw < 1<<30 }

// moments is struct Moments; mergeMoments is merge as the PTX computes
// it: m = fma(b.n/n, d, a.m), q = fma(a.n·b.n/n, d·d, a.q + b.q).
type moments struct{ n, m, q float32 }

func mergeMoments(a, b moments) moments {
	if b.n == 0 {
		return a
	}
	if a.n == 0 {
		return b
	}
	n := addRN(a.n, b.n)
	d := subRN(b.m, a.m)
	return moments{n, fma32(divRN(b.n, n), d, a.m), fma32(divRN(mulRN(a.n, b.n), n), mulRN(d, d), addRN(a.q, b.q))}
}

// bnStatsFinishChEmu is bn_stats_finish_ch run by the 32 lanes of one
// warp: lane l merges partials l, l+32, … in order, the shuffles down
// merge the lanes pairwise, lane 0 writes (rm, rv 0: none).
func bnStatsFinishChEmu(mem *devMem, ch int64, mean, rstd, rm, rv, part uint64, S, chunk, cnt int64, momentum, eps float32) {
	var a [32]moments
	for l := range a {
		for s := int64(l); s < S; s += 32 {
			lo := s * chunk
			hi := min(lo+chunk, cnt)
			p := (ch*S + s) * 2
			a[l] = mergeMoments(a[l], moments{float32(max(hi-lo, 0)), mem.ld(part, p), mem.ld(part, p+1)}) // __ldcg
		}
	}
	for o := 16; o > 0; o >>= 1 {
		b := shflDown(&a, o)
		for l := range a {
			a[l] = mergeMoments(a[l], b[l])
		}
	}
	// lane 0
	mu, v := a[0].m, divRN(a[0].q, float32(cnt))
	mem.st(mean, ch, mu)
	mem.st(rstd, ch, divRN(1, sqrtRN(addRN(v, eps))))
	if rm != 0 {
		mem.st(rm, ch, fma32(mu, momentum, mulRN(subRN(1, momentum), mem.ld(rm, ch))))
	}
	if rv != 0 {
		u := v
		if cnt > 1 {
			u = divRN(mulRN(v, float32(cnt)), float32(cnt-1))
		}
		mem.st(rv, ch, fma32(subRN(1, momentum), mem.ld(rv, ch), mulRN(u, momentum)))
	}
}

// bnStatsEmu runs bn_stats_f32 over grid×block from its argument block
// a, the blocks whole in order (nil: launch order). It returns, per
// channel, the block (its x) that ran the channel's finish (-1: none).
func bnStatsEmu(mem *devMem, grid, block [3]int, a *args, order []int) []int {
	part, x := argU64(a, 0), argU64(a, 1)
	n, c, hw, chunk := argI64(a, 2), argI64(a, 3), argI64(a, 4), argI64(a, 5)
	tl := decodeBnStatsTail(argWords(a, 6))
	gx, gy, T, lasts := bnGrid(grid, block, n, c, hw)
	for _, blk := range blockOrder(order, gx*gy) {
		bx, ch, lo, hi := bnChunkOf(blk, gx, n*hw, chunk)
		sh := nanPart[float32]() // block_sum's __shared__ part[32]
		s := make([]float32, T)
		for t := range s {
			for e := lo + int64(t); e < hi; e += int64(T) {
				s[t] = addRN(s[t], mem.ld(x, bnChunkIndexEmu(e, c, ch, hw)))
			}
		}
		m := make([]float32, T)
		if hi > lo {
			r := blockSumEmu(s, sh)
			for t := range m {
				m[t] = divRN(r[t], float32(hi-lo))
			}
		}
		q := make([]float32, T)
		for t := range q {
			for e := lo + int64(t); e < hi; e += int64(T) {
				d := subRN(mem.ld(x, bnChunkIndexEmu(e, c, ch, hw)), m[t])
				q[t] = fma32(d, d, q[t])
			}
		}
		if hi > lo {
			q = blockSumEmu(q, sh)
		} else {
			q = make([]float32, T)
		}
		p := (ch*int64(gx) + int64(bx)) * 2 // thread 0
		mem.st(part, p, m[0])
		mem.st(part, p+1, q[0])
		if tl.counters != 0 && lastBlockEmu(mem, tl.counters, ch, gx) {
			if lasts[ch] >= 0 {
				panic(fmt.Sprintf("channel %d finished twice", ch))
			}
			lasts[ch] = bx
			bnStatsFinishChEmu(mem, ch, tl.mean, tl.rstd, tl.rm, tl.rv, part, int64(gx), chunk, tl.cnt, tl.momentum, tl.eps)
			mem.i32[tl.counters][ch] = 0 // thread 0
		}
	}
	return lasts
}

// normOutEmu is norm_out: every step rounded by its intrinsic.
func normOutEmu(x, mu, r, wk, bk float32) float32 { return fma32(mulRN(subRN(x, mu), r), wk, bk) }

// reluNaN is relu_nan: max(v, +0), NaN kept.
func reluNaN(v float32) float32 {
	if v > 0 || v != v {
		return v
	}
	return 0
}

// bnReluPoolEmu runs bn_relu_pool_f32 over its grid-stride grid from
// its argument block.
func bnReluPoolEmu(mem *devMem, grid, block [3]int, a *args) {
	pooled, argmax, x, mean, rstd, w, b := argU64(a, 0), argU64(a, 1), argU64(a, 2), argU64(a, 3), argU64(a, 4), argU64(a, 5), argU64(a, 6)
	c, h, wd, ho, wo, n := argI64(a, 7), argI64(a, 8), argI64(a, 9), argI64(a, 10), argI64(a, 11), argI64(a, 12)
	stride := int64(block[0] * grid[0])
	for bx := 0; bx < grid[0]; bx++ {
		for t := 0; t < block[0]; t++ {
			for o := int64(bx*block[0] + t); o < n; o += stride {
				ow, oh, pl := o%wo, (o/wo)%ho, o/(wo*ho)
				ch := pl % c
				mu, r, wk, bk := mem.ld(mean, ch), mem.ld(rstd, ch), float32(1), float32(0)
				if w != 0 {
					wk = mem.ld(w, ch)
				}
				if b != 0 {
					bk = mem.ld(b, ch)
				}
				xp := pl * h * wd
				best, bi := float32(0), int64(-1)
				for k := int64(0); k < 4; k++ {
					idx := (2*oh+k>>1)*wd + 2*ow + k&1
					v := reluNaN(normOutEmu(mem.ld(x, xp+idx), mu, r, wk, bk)) // round_as: fp32 as is
					if bi < 0 || v > best || v != v {
						best, bi = v, idx
						if v != v {
							break
						}
					}
				}
				mem.st(pooled, o, best)
				mem.i32[argmax][o] = int32(bi)
			}
		}
	}
}

// reluDyEmu is relu_dy<float, relu>: dy[i] or, pooled (relu 2), g at
// the window holding i where its argmax is i, taken as +0 where
// norm_out was not > 0.
func reluDyEmu(mem *devMem, relu int, m normReluArgs, dy, x uint64, i, hw int64, mu, r, wk, bk float32) float32 {
	var g float32
	if relu == 2 {
		pl := i / hw
		p := i - pl*hw
		ph := p / m.wd
		pw := p - ph*m.wd
		if ph < 2*m.ho && pw < 2*m.wo {
			o := (pl*m.ho+ph>>1)*m.wo + pw>>1
			if int64(mem.i32[m.argmax][o]) == p {
				g = mem.ld(m.g, o)
			}
		}
	} else {
		g = mem.ld(dy, i)
	}
	if normOutEmu(mem.ld(x, i), mu, r, wk, bk) > 0 {
		return g
	}
	return 0
}

// bnBwdFinishChEmu is bn_bwd_finish_ch<float> run by one warp.
func bnBwdFinishChEmu(mem *devMem, ch int64, sums, dw, db, part uint64, S, c int64, acc bool) {
	var a, b [32]float32
	for l := range a {
		for s := int64(l); s < S; s += 32 {
			a[l] = addRN(a[l], mem.ld(part, (ch*S+s)*2)) // __ldcg
			b[l] = addRN(b[l], mem.ld(part, (ch*S+s)*2+1))
		}
	}
	for o := 16; o > 0; o >>= 1 {
		da, dbv := shflDown(&a, o), shflDown(&b, o)
		for l := range a {
			a[l] = addRN(a[l], da[l])
			b[l] = addRN(b[l], dbv[l])
		}
	}
	// lane 0; acc_add<float> is the old value + the sum.
	mem.st(sums, ch, a[0])
	mem.st(sums, c+ch, b[0])
	if db != 0 {
		v := a[0]
		if acc {
			v = addRN(mem.ld(db, ch), a[0])
		}
		mem.st(db, ch, v)
	}
	if dw != 0 {
		v := b[0]
		if acc {
			v = addRN(mem.ld(dw, ch), b[0])
		}
		mem.st(dw, ch, v)
	}
}

// bnBwdSumsEmu runs bn_bwd_sums_f32 (relu 0), bn_bwd_sums_relu_f32 (1)
// or bn_bwd_sums_relupool_f32 (2) over grid×block from its argument
// block, the blocks whole in order; it returns each channel's finishing
// block as bnStatsEmu does.
func bnBwdSumsEmu(mem *devMem, relu int, grid, block [3]int, a *args, order []int) []int {
	k := 0
	next := func() uint64 { k++; return argU64(a, k-1) }
	part := next()
	var dy uint64
	if relu != 2 {
		dy = next()
	}
	x, mean, rstd := next(), next(), next()
	n, c, hw, chunk := int64(next()), int64(next()), int64(next()), int64(next())
	var w uint64
	var m normReluArgs
	if relu != 0 {
		w = next()
		m = decodeNormRelu(argWords(a, k))
		k++
	}
	tl := decodeBnBwdTail(argWords(a, k))
	gx, gy, T, lasts := bnGrid(grid, block, n, c, hw)
	for _, blk := range blockOrder(order, gx*gy) {
		bx, ch, lo, hi := bnChunkOf(blk, gx, n*hw, chunk)
		mu, r := mem.ld(mean, ch), mem.ld(rstd, ch)
		mwk, mbk := float32(1), float32(0)
		if relu != 0 && w != 0 {
			mwk = mem.ld(w, ch)
		}
		if relu != 0 && m.b != 0 {
			mbk = mem.ld(m.b, ch)
		}
		sa, sb := make([]float32, T), make([]float32, T)
		for t := range sa {
			for e := lo + int64(t); e < hi; e += int64(T) {
				i := bnChunkIndexEmu(e, c, ch, hw)
				var g float32
				if relu != 0 {
					g = reluDyEmu(mem, relu, m, dy, x, i, hw, mu, r, mwk, mbk)
				} else {
					g = mem.ld(dy, i)
				}
				sa[t] = addRN(sa[t], g)
				sb[t] = fma32(r, mulRN(g, subRN(mem.ld(x, i), mu)), sb[t]) // b += g·(x − mu)·r
			}
		}
		sh := nanPart[float32]()
		sa = blockSumEmu(sa, sh)
		sb = blockSumEmu(sb, sh)
		p := (ch*int64(gx) + int64(bx)) * 2 // thread 0
		mem.st(part, p, sa[0])
		mem.st(part, p+1, sb[0])
		if tl.counters != 0 && lastBlockEmu(mem, tl.counters, ch, gx) {
			if lasts[ch] >= 0 {
				panic(fmt.Sprintf("channel %d finished twice", ch))
			}
			lasts[ch] = bx
			bnBwdFinishChEmu(mem, ch, tl.sums, tl.dw, tl.db, part, int64(gx), tl.c, int(tl.acc) != 0)
			mem.i32[tl.counters][ch] = 0 // thread 0
		}
	}
	return lasts
}

// bnBwdDxEmu runs bn_bwd_dx_f32 (relu 0), bn_bwd_dx_relu_f32 (1) or
// bn_bwd_dx_relupool_f32 (2) over its grid-stride grid from its
// argument block.
func bnBwdDxEmu(mem *devMem, relu int, grid, block [3]int, a *args) {
	k := 0
	next := func() uint64 { k++; return argU64(a, k-1) }
	dx := next()
	var dy uint64
	if relu != 2 {
		dy = next()
	}
	x, mean, rstd, w, sums := next(), next(), next(), next(), next()
	training := argI32(a, k) != 0
	k++
	c, hw, cnt, n := int64(next()), int64(next()), int64(next()), int64(next())
	var m normReluArgs
	if relu != 0 {
		m = decodeNormRelu(argWords(a, k))
	}
	if n >= 1<<30 {
		panic("the int64 path: no case here takes it")
	}
	stride := int64(block[0] * grid[0])
	for bx := 0; bx < grid[0]; bx++ {
		for t := 0; t < block[0]; t++ {
			for i := int64(bx*block[0] + t); i < n; i += stride {
				ch := (i / hw) % c
				r, wk := mem.ld(rstd, ch), float32(1)
				if w != 0 {
					wk = mem.ld(w, ch)
				}
				var g float32
				if relu != 0 {
					bk := float32(0)
					if m.b != 0 {
						bk = mem.ld(m.b, ch)
					}
					g = reluDyEmu(mem, relu, m, dy, x, i, hw, mem.ld(mean, ch), r, wk, bk)
				} else {
					g = mem.ld(dy, i)
				}
				if !training {
					mem.st(dx, i, mulRN(mulRN(g, wk), r))
					continue
				}
				h := mulRN(subRN(mem.ld(x, i), mem.ld(mean, ch)), r)
				v := subRN(subRN(g, divRN(mem.ld(sums, ch), float32(cnt))), divRN(mulRN(h, mem.ld(sums, c+ch)), float32(cnt)))
				mem.st(dx, i, mulRN(mulRN(wk, r), v))
			}
		}
	}
}

// bnCase is one batch norm over x [n, c, h, w].
type bnCase struct {
	name       string
	n, c, h, w int
	affine     bool // w and b (and dw, db) given
	randOrders int  // random finishing orders beside the fixed ones
	big        bool // millions of elements: the plain backward only
}

func (k bnCase) String() string {
	return fmt.Sprintf("%s (x [%d %d %d %d])", k.name, k.n, k.c, k.h, k.w)
}

// bnCases: W4's three layers at batch 128, a channel of 7585 elements in
// 8 chunks (odd planes, 37×41), one chunk, and one where bnMaxBlocks
// caps the chunks (2 of 1050 elements, past bnChunk).
var bnCases = []bnCase{
	{name: "W4 layer 1", n: 128, c: 8, h: 28, w: 28, affine: true, randOrders: 2},
	{name: "W4 layer 2", n: 128, c: 16, h: 14, w: 14, affine: true, randOrders: 2},
	{name: "W4 layer 3", n: 128, c: 32, h: 7, w: 7, affine: true, randOrders: 2},
	{name: "7585 elements in 8 chunks", n: 5, c: 3, h: 37, w: 41, affine: true, randOrders: 4},
	{name: "one chunk", n: 4, c: 3, h: 5, w: 5, randOrders: 1},
	{name: "chunks capped by bnMaxBlocks", n: 3, c: 2048, h: 25, w: 28, affine: true, big: true},
}

// bnOrders are the finishing orders of a grid of gx×gy blocks: launch
// order, its reverse, one where every channel's middle block is last,
// and r random ones.
func bnOrders(rng *rand.Rand, gx, gy, r int) [][]int {
	rev := make([]int, gx*gy)
	for i := range rev {
		rev[i] = gx*gy - 1 - i
	}
	var mid []int
	for b := 0; b < gx*gy; b++ {
		if b%gx != gx/2 {
			mid = append(mid, b)
		}
	}
	for by := 0; by < gy; by++ {
		mid = append(mid, by*gx+gx/2)
	}
	orders := [][]int{nil, rev, mid}
	for range r {
		orders = append(orders, rng.Perm(gx*gy))
	}
	return orders
}

// lastInOrder is, per channel, the block (its x) that comes last in order.
func lastInOrder(order []int, gx, gy int) []int {
	last := make([]int, gy)
	for _, b := range blockOrder(order, gx*gy) {
		last[b/gx] = b % gx
	}
	return last
}

// bnData is a case's inputs: x with a mean and spread of its own per
// channel (up to 6 spreads away from 0), w, b, the running statistics.
type bnData struct {
	x, w, b, rm, rv []float32
}

func newBNData(rng *rand.Rand, k bnCase) bnData {
	hw := k.h * k.w
	d := bnData{x: make([]float32, k.n*k.c*hw), w: make([]float32, k.c), b: make([]float32, k.c),
		rm: make([]float32, k.c), rv: make([]float32, k.c)}
	for ch := 0; ch < k.c; ch++ {
		off, sc := float64(ch%7)-2, 0.25+0.5*float64(ch%3)
		for s := 0; s < k.n; s++ {
			for p := 0; p < hw; p++ {
				d.x[(s*k.c+ch)*hw+p] = float32(off + sc*rng.NormFloat64())
			}
		}
		d.w[ch] = float32(rng.NormFloat64())
		d.b[ch] = float32(0.5 * rng.NormFloat64())
		d.rm[ch] = float32(rng.NormFloat64())
		d.rv[ch] = float32(0.5 + rng.Float64())
	}
	return d
}

func nanSlice(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return v
}

// bnStatsRun is one training statistics launch of a case: its outputs.
type bnStatsRun struct {
	mean, rstd, rm, rv []float32
	lasts              []int
}

// runBNStats runs bn_stats_f32 as bnStats launches it in training, the
// blocks in order, on a device whose counters are zero (counters false:
// a launch given none, finished by bn_stats_finish as bnStats launches
// it past tailCounters channels), checking every store and that the
// counters are left at zero.
func runBNStats(t *testing.T, k bnCase, d bnData, order []int, counters bool) bnStatsRun {
	t.Helper()
	const momentum, eps = 0.1, 1e-5
	hw, cnt := k.h*k.w, k.n*k.h*k.w
	s, chunk := bnChunks(cnt, k.c)
	mem := newDevMem()
	px := mem.put(d.x, false)
	psm, psr := mem.put(nanSlice(k.c), false), mem.put(nanSlice(k.c), false)
	prm, prv := mem.put(d.rm, false), mem.put(d.rv, false)
	ppart := mem.put(nanSlice(2*k.c*s), false) // bnPartials' scratch
	mem.finish()
	ctr := mem.putI32(make([]int32, tailCounters))
	dev := ctr
	if !counters {
		dev = 0
	}
	tail := bnStatsTrainTail(psm, psr, prm, prv, cnt, k.c, momentum, eps, dev)
	if (tail.counters != 0) != counters {
		t.Fatalf("%v: a tail of counters %#x for %d channels", k, tail.counters, k.c)
	}
	a := bnPartialArgs(ppart, bnStatsFill(px, k.n, k.c, hw, chunk), tail.words())
	grid, block := bnPartialGeom(s, k.c)
	checkArgsPTX(t, "norm.ptx", "bn_stats_f32", a)
	lasts := bnStatsEmu(mem, grid, block, a, order)
	if !counters {
		// bn_stats_finish: block ch of one warp, its arguments as bnStats
		// passes them (S and chunk from bnChunks, training).
		for ch := 0; ch < k.c; ch++ {
			bnStatsFinishChEmu(mem, int64(ch), psm, psr, prm, prv, ppart, int64(s), int64(chunk), int64(cnt), momentum, eps)
		}
	}
	mem.checkGuards(t, k.String())
	for i, w := range mem.writesAt(ppart, 2*k.c*s) {
		if w != 1 {
			t.Fatalf("%v: partial word %d written %d times", k, i, w)
		}
	}
	for _, o := range []struct {
		what string
		p    uint64
	}{{"mean", psm}, {"rstd", psr}, {"running mean", prm}, {"running var", prv}} {
		for ch, w := range mem.writesAt(o.p, k.c) {
			if w != 1 {
				t.Fatalf("%v: %s of channel %d written %d times", k, o.what, ch, w)
			}
		}
	}
	for i, v := range mem.i32[ctr] {
		if v != 0 {
			t.Fatalf("%v: counter %d left at %d", k, i, v)
		}
	}
	return bnStatsRun{mean: mem.view(psm, k.c), rstd: mem.view(psr, k.c), rm: mem.view(prm, k.c), rv: mem.view(prv, k.c), lasts: lasts}
}

func sameBits(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestBatchNormStatsKernelInGo: bn_stats_f32 in training, transcribed
// and run as BatchNorm, BatchNormRelu and BatchNormReluMaxPool2x2 launch
// it (they share bnStats), finishes every channel in the launch: on
// W4's layers, a channel of 7585 elements in 8 chunks, one chunk, and
// chunks capped by bnMaxBlocks, whichever block writes a channel's last
// partial (launch order, reverse, the middle block last, random orders),
// exactly that block runs the channel's finish, the results are the
// same bits, and bn_stats_finish's (a launch given no counters) too;
// every partial and statistic is written once and the counters are left
// at zero. The mean, rstd and running statistics (momentum, unbiased
// variance) are float64's within fp32 rounding. Then bn_relu_pool_f32
// over those statistics gives MaxPool2d's pooled values and argmax of
// the fused ReLU's output (odd planes included).
func TestBatchNormStatsKernelInGo(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	for _, k := range bnCases {
		if k.n*k.c*k.h*k.w >= 1<<30 {
			t.Fatalf("%v: past the int path", k)
		}
		d := newBNData(rng, k)
		hw, cnt := k.h*k.w, k.n*k.h*k.w
		s, _ := bnChunks(cnt, k.c)
		var first bnStatsRun
		for oi, order := range bnOrders(rng, s, k.c, k.randOrders) {
			r := runBNStats(t, k, d, order, true)
			want := lastInOrder(order, s, k.c)
			for ch := range want {
				if r.lasts[ch] != want[ch] {
					t.Fatalf("%v order %d: channel %d finished by block %d, its last is %d", k, oi, ch, r.lasts[ch], want[ch])
				}
			}
			if oi == 0 {
				first = r
				continue
			}
			for _, o := range [][2][]float32{{r.mean, first.mean}, {r.rstd, first.rstd}, {r.rm, first.rm}, {r.rv, first.rv}} {
				if i := sameBits(o[0], o[1]); i >= 0 {
					t.Fatalf("%v order %d: channel %d's statistics %v, launch order's %v", k, oi, i, o[0][i], o[1][i])
				}
			}
		}
		fin := runBNStats(t, k, d, nil, false)
		for _, o := range [][2][]float32{{fin.mean, first.mean}, {fin.rstd, first.rstd}, {fin.rm, first.rm}, {fin.rv, first.rv}} {
			if i := sameBits(o[0], o[1]); i >= 0 {
				t.Fatalf("%v: bn_stats_finish's channel %d %v, the tail's %v", k, i, o[0][i], o[1][i])
			}
		}

		// float64's statistics.
		const momentum, eps = 0.1, 1e-5
		for ch := 0; ch < k.c; ch++ {
			var sum, sq float64
			for sm := 0; sm < k.n; sm++ {
				for p := 0; p < hw; p++ {
					sum += float64(d.x[(sm*k.c+ch)*hw+p])
				}
			}
			mu := sum / float64(cnt)
			for sm := 0; sm < k.n; sm++ {
				for p := 0; p < hw; p++ {
					v := float64(d.x[(sm*k.c+ch)*hw+p]) - mu
					sq += v * v
				}
			}
			v := sq / float64(cnt)
			rstd := 1 / math.Sqrt(v+float64(float32(eps)))
			m32 := float64(float32(momentum))
			rm := (1-m32)*float64(d.rm[ch]) + m32*mu
			rv := (1-m32)*float64(d.rv[ch]) + m32*v*float64(cnt)/float64(max(cnt-1, 1))
			sd := math.Sqrt(v)
			for _, c := range []struct {
				what      string
				got       float32
				want, tol float64
			}{
				{"mean", first.mean[ch], mu, 1e-5 * (math.Abs(mu) + sd)},
				{"rstd", first.rstd[ch], rstd, 1e-5 * rstd},
				{"running mean", first.rm[ch], rm, 1e-5 * (math.Abs(rm) + sd)},
				{"running var", first.rv[ch], rv, 1e-5 * rv},
			} {
				if math.Abs(float64(c.got)-c.want) > c.tol {
					t.Fatalf("%v: channel %d's %s %v, want %v", k, ch, c.what, c.got, c.want)
				}
			}
		}

		// The pooled forward over these statistics.
		if k.h >= 2 && k.w >= 2 {
			checkBNReluPool(t, k, d, first)
		}
	}
}

// bnReluOut is BatchNormRelu's output element i of a case (the fused
// forward's definition: norm_out's rounding, then the ReLU).
func bnReluOut(k bnCase, x []float32, mean, rstd, w, b []float32, i int) float32 {
	ch := (i / (k.h * k.w)) % k.c
	wk, bk := float32(1), float32(0)
	if w != nil {
		wk, bk = w[ch], b[ch]
	}
	return reluNaN(normOutEmu(x[i], mean[ch], rstd[ch], wk, bk))
}

// bnPoolRef is MaxPool2d (2×2, stride 2) of BatchNormRelu's output: the
// pooled values and the first maximum's index in its h×w plane.
func bnPoolRef(k bnCase, x []float32, mean, rstd, w, b []float32) ([]float32, []int32) {
	ho, wo := k.h/2, k.w/2
	pooled, arg := make([]float32, k.n*k.c*ho*wo), make([]int32, k.n*k.c*ho*wo)
	for o := range pooled {
		pl, q := o/(ho*wo), o%(ho*wo)
		best, bi := float32(math.Inf(-1)), -1
		for dh := 0; dh < 2; dh++ {
			for dw := 0; dw < 2; dw++ {
				p := (2*(q/wo)+dh)*k.w + 2*(q%wo) + dw
				if v := bnReluOut(k, x, mean, rstd, w, b, pl*k.h*k.w+p); v > best {
					best, bi = v, p
				}
			}
		}
		pooled[o], arg[o] = best, int32(bi)
	}
	return pooled, arg
}

// checkBNReluPool runs bn_relu_pool_f32 as BatchNormReluMaxPool2x2
// launches it (launch1D on 132 SMs, and on 1) over the statistics st.
func checkBNReluPool(t *testing.T, k bnCase, d bnData, st bnStatsRun) {
	t.Helper()
	var w, b []float32
	if k.affine {
		w, b = d.w, d.b
	}
	want, wantArg := bnPoolRef(k, d.x, st.mean, st.rstd, w, b)
	for _, sms := range []int{132, 1} {
		mem := newDevMem()
		px, pm, pr := mem.put(d.x, false), mem.put(st.mean, false), mem.put(st.rstd, false)
		var pw, pb uint64
		if k.affine {
			pw, pb = mem.put(d.w, false), mem.put(d.b, false)
		}
		pp := mem.put(nanSlice(len(want)), false)
		mem.finish()
		arg := make([]int32, len(want))
		for i := range arg {
			arg[i] = -7
		}
		pa := mem.putI32(arg)
		total := int64(len(want))
		a := bnReluPoolArgs(pp, pa, px, pm, pr, pw, pb, k.c, k.h, k.w, total)
		checkArgsPTX(t, "norm.ptx", "bn_relu_pool_f32", a)
		bnReluPoolEmu(mem, [3]int{int(grid1D(total, sms)), 1, 1}, [3]int{blockSize, 1, 1}, a)
		mem.checkGuards(t, k.String())
		got := mem.view(pp, len(want))
		for o := range want {
			if mem.writesAt(pp, len(want))[o] != 1 {
				t.Fatalf("%v (%d SMs): pooled %d written %d times", k, sms, o, mem.writesAt(pp, len(want))[o])
			}
			if math.Float32bits(got[o]) != math.Float32bits(want[o]) || arg[o] != wantArg[o] {
				t.Fatalf("%v (%d SMs): pooled %d is %v at %d, MaxPool2d's %v at %d", k, sms, o, got[o], arg[o], want[o], wantArg[o])
			}
		}
	}
}

// bnBwdKernels are the partial and input-gradient kernels of a
// backward: BatchNormBackward's (relu 0), BatchNormReluBackward's (1),
// BatchNormReluMaxPool2x2Backward's (2).
var bnBwdKernels = [3][2]string{
	{"bn_bwd_sums_f32", "bn_bwd_dx_f32"},
	{"bn_bwd_sums_relu_f32", "bn_bwd_dx_relu_f32"},
	{"bn_bwd_sums_relupool_f32", "bn_bwd_dx_relupool_f32"},
}

// bnBwdInputs are a backward's inputs: the forward's statistics, dy (or
// the pool's gradient g and argmax) and the gradient reaching the
// normalised value (the reference's: dy, masked by the ReLU's output,
// gathered from g where pooled).
type bnBwdInputs struct {
	mean, rstd, dy, g []float32
	arg               []int32
	geff              []float64
	dw0, db0          []float32
}

func newBNBwdInputs(rng *rand.Rand, k bnCase, d bnData, relu int) bnBwdInputs {
	hw := k.h * k.w
	in := bnBwdInputs{mean: make([]float32, k.c), rstd: make([]float32, k.c), dw0: make([]float32, k.c), db0: make([]float32, k.c)}
	for ch := range in.mean {
		// The statistics the forward saved: near x's own, not exactly.
		off, sc := float64(ch%7)-2, 0.25+0.5*float64(ch%3)
		in.mean[ch] = float32(off + 0.01*rng.NormFloat64())
		in.rstd[ch] = float32(1 / sc * (1 + 0.01*rng.NormFloat64()))
		in.dw0[ch], in.db0[ch] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	var w, b []float32
	if k.affine {
		w, b = d.w, d.b
	}
	in.geff = make([]float64, len(d.x))
	if relu == 2 {
		var pooled []float32
		pooled, in.arg = bnPoolRef(k, d.x, in.mean, in.rstd, w, b)
		in.g = make([]float32, len(pooled))
		ho, wo := k.h/2, k.w/2
		for o := range in.g {
			in.g[o] = float32(rng.NormFloat64())
			pl := o / (ho * wo)
			in.geff[pl*hw+int(in.arg[o])] = float64(in.g[o]) // MaxPool2dBackward's scatter
		}
	} else {
		in.dy = make([]float32, len(d.x))
		for i := range in.dy {
			in.dy[i] = float32(rng.NormFloat64())
			in.geff[i] = float64(in.dy[i])
		}
	}
	if relu != 0 {
		for i := range in.geff {
			if !(bnReluOut(k, d.x, in.mean, in.rstd, w, b, i) > 0) {
				in.geff[i] = 0
			}
		}
	}
	return in
}

// bnBwdRun is one backward's outputs.
type bnBwdRun struct {
	sums, dw, db, dx []float32
	lasts            []int
}

// runBNBwd runs a backward as batchNormBackward and
// batchNormReluBackward launch it (training): the partial launch with
// its tail, the blocks in order, on zeroed counters, then (sms > 0) the
// input gradient's launch1D on sms SMs, checking every store and the
// counters.
func runBNBwd(t *testing.T, k bnCase, d bnData, in bnBwdInputs, relu int, acc bool, order []int, sms int) bnBwdRun {
	t.Helper()
	hw, cnt := k.h*k.w, k.n*k.h*k.w
	s, chunk := bnChunks(cnt, k.c)
	mem := newDevMem()
	px, pm, pr := mem.put(d.x, false), mem.put(in.mean, false), mem.put(in.rstd, false)
	var pdy, pg, pw, pb, pdw, pdb uint64
	if relu == 2 {
		pg = mem.put(in.g, false)
	} else {
		pdy = mem.put(in.dy, false)
	}
	if k.affine {
		pw, pb = mem.put(d.w, false), mem.put(d.b, false)
		pdw, pdb = mem.put(in.dw0, false), mem.put(in.db0, false)
	}
	ps := mem.put(nanSlice(2*k.c), false)      // the sums' scratch
	ppart := mem.put(nanSlice(2*k.c*s), false) // bnPartials' scratch
	pdx := mem.put(nanSlice(len(d.x)), false)
	mem.finish()
	ctr := mem.putI32(make([]int32, tailCounters))
	var pa uint64
	if in.arg != nil {
		pa = mem.putI32(append([]int32(nil), in.arg...))
	}
	var reluW []uint64
	switch relu {
	case 1:
		reluW = normReluWords(pb)
	case 2:
		reluW = normReluPoolWords(pb, pg, pa, k.h, k.w)
	}
	tail := bnBwdSumsTail(ps, pdw, pdb, k.c, acc, ctr)
	fill := bnBwdSumsFill(relu == 2, pdy, px, pm, pr, pw, k.n, k.c, hw, reluW)
	a := bnPartialArgs(ppart, func(a *args) { fill(a, chunk) }, tail.words())
	grid, block := bnPartialGeom(s, k.c)
	checkArgsPTX(t, "norm.ptx", bnBwdKernels[relu][0], a)
	lasts := bnBwdSumsEmu(mem, relu, grid, block, a, order)

	if sms > 0 {
		total := int64(len(d.x))
		e := bnBwdDxArgs(relu == 2, pdx, pdy, px, pm, pr, pw, ps, true, k.c, hw, k.n, total, reluW)
		checkArgsPTX(t, "norm.ptx", bnBwdKernels[relu][1], e)
		bnBwdDxEmu(mem, relu, [3]int{int(grid1D(total, sms)), 1, 1}, [3]int{blockSize, 1, 1}, e)
	}

	what := fmt.Sprintf("%v %s", k, bnBwdKernels[relu][0])
	mem.checkGuards(t, what)
	once := func(s string, p uint64, n int) {
		for i, w := range mem.writesAt(p, n) {
			if w != 1 {
				t.Fatalf("%s: %s %d written %d times", what, s, i, w)
			}
		}
	}
	once("partial word", ppart, 2*k.c*s)
	once("sum", ps, 2*k.c)
	r := bnBwdRun{sums: mem.view(ps, 2*k.c), lasts: lasts}
	if sms > 0 {
		once("dx", pdx, len(d.x))
		r.dx = mem.view(pdx, len(d.x))
	}
	if k.affine {
		once("dw", pdw, k.c)
		once("db", pdb, k.c)
		r.dw, r.db = mem.view(pdw, k.c), mem.view(pdb, k.c)
	}
	for i, v := range mem.i32[ctr] {
		if v != 0 {
			t.Fatalf("%s: counter %d left at %d", what, i, v)
		}
	}
	return r
}

// TestBatchNormBackwardKernelsInGo: the backward's sums (bn_bwd_sums_f32,
// _relu_f32, _relupool_f32 with their tails) and the input gradient they
// feed (bn_bwd_dx_f32 and its twins), transcribed and run as
// BatchNormBackward, BatchNormReluBackward and
// BatchNormReluMaxPool2x2Backward launch them in training, on the cases
// of TestBatchNormStatsKernelInGo: whichever block writes a channel's
// last partial, exactly that block finishes it and the sums, dw and db
// (written, or added with acc) are the same bits; every store lands
// once and the counters are left at zero. Σ dy, Σ dy·x̂, dw, db and dx
// are float64's within fp32 rounding, dy masked by the ReLU's output
// and gathered from the pool's gradient through its argmax.
func TestBatchNormBackwardKernelsInGo(t *testing.T) {
	rng := rand.New(rand.NewSource(22))
	for _, k := range bnCases {
		d := newBNData(rng, k)
		hw, cnt := k.h*k.w, k.n*k.h*k.w
		s, _ := bnChunks(cnt, k.c)
		for relu := 0; relu < 3; relu++ {
			if (relu == 2 && (k.h < 2 || k.w < 2)) || (relu > 0 && k.big) {
				continue
			}
			in := newBNBwdInputs(rng, k, d, relu)
			var first bnBwdRun
			for oi, order := range bnOrders(rng, s, k.c, k.randOrders) {
				// acc in every other order; the input gradient after the
				// first two (on 132 SMs, then on 1).
				acc := oi%2 == 1
				sms := 0
				if oi < 2 {
					sms = []int{132, 1}[oi]
				}
				r := runBNBwd(t, k, d, in, relu, acc, order, sms)
				what := fmt.Sprintf("%v %s order %d (acc %v)", k, bnBwdKernels[relu][0], oi, acc)
				want := lastInOrder(order, s, k.c)
				for ch := range want {
					if r.lasts[ch] != want[ch] {
						t.Fatalf("%s: channel %d finished by block %d, its last is %d", what, ch, r.lasts[ch], want[ch])
					}
				}
				if oi == 0 {
					first = r
				}
				if i := sameBits(r.sums, first.sums); i >= 0 {
					t.Fatalf("%s: sum %d is %v, launch order's %v", what, i, r.sums[i], first.sums[i])
				}
				if i := sameBits(r.dx, first.dx); r.dx != nil && i >= 0 {
					t.Fatalf("%s: dx %d is %v, launch order's %v", what, i, r.dx[i], first.dx[i])
				}
				if k.affine {
					for ch := 0; ch < k.c; ch++ {
						wantDB, wantDW := first.sums[ch], first.sums[k.c+ch]
						if acc {
							wantDB, wantDW = addRN(in.db0[ch], wantDB), addRN(in.dw0[ch], wantDW)
						}
						if math.Float32bits(r.db[ch]) != math.Float32bits(wantDB) || math.Float32bits(r.dw[ch]) != math.Float32bits(wantDW) {
							t.Fatalf("%s: channel %d's db, dw %v, %v, want %v, %v", what, ch, r.db[ch], r.dw[ch], wantDB, wantDW)
						}
					}
				}
			}

			// float64's sums and input gradient.
			what := fmt.Sprintf("%v %s", k, bnBwdKernels[relu][0])
			A, B := make([]float64, k.c), make([]float64, k.c)
			sA, sB := make([]float64, k.c), make([]float64, k.c)
			for i, g := range in.geff {
				ch := (i / hw) % k.c
				h := (float64(d.x[i]) - float64(in.mean[ch])) * float64(in.rstd[ch])
				A[ch] += g
				B[ch] += g * h
				sA[ch] += math.Abs(g)
				sB[ch] += math.Abs(g * h)
			}
			for ch := 0; ch < k.c; ch++ {
				if !near(first.sums[ch], A[ch], sA[ch], 1e-5) || !near(first.sums[k.c+ch], B[ch], sB[ch], 1e-5) {
					t.Fatalf("%s: channel %d's Σ dy, Σ dy·x̂ %v, %v, want %v, %v", what, ch, first.sums[ch], first.sums[k.c+ch], A[ch], B[ch])
				}
			}
			for i, g := range in.geff {
				ch := (i / hw) % k.c
				wk := 1.0
				if k.affine {
					wk = float64(d.w[ch])
				}
				r := float64(in.rstd[ch])
				h := (float64(d.x[i]) - float64(in.mean[ch])) * r
				want := wk * r * (g - A[ch]/float64(cnt) - h*B[ch]/float64(cnt))
				scale := math.Abs(wk * r * (math.Abs(g) + sA[ch]/float64(cnt) + math.Abs(h)*sB[ch]/float64(cnt)))
				if !near(first.dx[i], want, scale, 1e-5) {
					t.Fatalf("%s: dx %d is %v, want %v", what, i, first.dx[i], want)
				}
			}
		}
	}
}

// TestBatchNormChunks: bnChunks covers a channel with non-empty chunks,
// the last the only shorter one, at most bnChunk elements each unless
// bnMaxBlocks caps the blocks, and the grid within the device's limits;
// the W4 and test cases chunk as their names say.
func TestBatchNormChunks(t *testing.T) {
	for cnt := 1; cnt <= 20000; cnt += 1 + cnt/50 {
		for _, c := range []int{1, 3, 8, 16, 32, 100, 2048, 4096, 5000, bnMaxChannels} {
			s, chunk := bnChunks(cnt, c)
			if s < 1 || chunk < 1 || (s-1)*chunk >= cnt || s*chunk < cnt {
				t.Fatalf("bnChunks(%d, %d) = %d chunks of %d", cnt, c, s, chunk)
			}
			if s*c > max(bnMaxBlocks, c) || (chunk > bnChunk && s < bnMaxBlocks/c) {
				t.Fatalf("bnChunks(%d, %d) = %d chunks of %d: past the limits", cnt, c, s, chunk)
			}
			if grid, block := bnPartialGeom(s, c); grid[1] > 65535 || block[0]%32 != 0 || block[0] > 1024 {
				t.Fatalf("bnPartialGeom(%d, %d) = %v, %v", s, c, grid, block)
			}
		}
	}
	for _, w := range []struct{ cnt, c, s, chunk int }{
		{128 * 784, 8, 98, 1024}, {128 * 196, 16, 25, 1004}, {128 * 49, 32, 7, 896},
		{7585, 3, 8, 949}, {100, 3, 1, 100}, {3 * 700, 2048, 2, 1050},
	} {
		if s, chunk := bnChunks(w.cnt, w.c); s != w.s || chunk != w.chunk {
			t.Errorf("bnChunks(%d, %d) = %d, %d, want %d, %d", w.cnt, w.c, s, chunk, w.s, w.chunk)
		}
	}
}

// bnGrid checks that a batch norm partial launch takes the 32-bit path
// (the only one these cases take) and returns its grid's width and
// height, its block's threads and, per channel, the finishing block
// (-1 until one finishes it).
func bnGrid(grid, block [3]int, n, c, hw int64) (gx, gy, threads int, lasts []int) {
	if !bnFits32(n, c, hw) {
		panic("the int64 path: no case here takes it")
	}
	gx, gy, threads = grid[0], grid[1], block[0]
	lasts = make([]int, gy)
	for i := range lasts {
		lasts[i] = -1
	}
	return gx, gy, threads, lasts
}

// bnChunkOf is block blk's place in a grid gx wide: its x, its channel
// (its y) and the elements [lo, hi) of the channel's cnt it sums.
func bnChunkOf(blk, gx int, cnt, chunk int64) (bx int, ch, lo, hi int64) {
	bx, ch = blk%gx, int64(blk/gx)
	lo = int64(bx) * chunk
	return bx, ch, lo, min(lo+chunk, cnt)
}
