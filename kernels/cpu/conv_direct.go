package cpu

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The direct convolution: a stride-1 convolution as a GEMM whose B
// operand is read straight from a zero-padded copy of one sample's input
// planes, without im2col or B packing. With the planes padded to
// hp×wp, output position q = oh·wp + ow of any channel reads, at kernel
// tap (kh, kw) of input channel ci, padded element ci·hp·wp + q +
// kh·dh·wp + kw·dw: 32 consecutive outputs read 32 consecutive inputs, so
// the micro-kernel (sconv12x32AVX512) loads its B row for step k =
// (ci, tap) from xq + offs[k]. The outputs are computed on the padded
// width (columns wo..wp−1 of each row are discarded), about wp/wo more
// arithmetic than im2col+GEMM in exchange for no patch matrix at all:
// every operand of a sample stays in L2. Each output element sums its k
// terms in order, in blocks of dconvKC.

// dconv is one direct convolution's geometry and packed weights.
type dconv struct {
	g      *convGeom
	hp, wp int       // padded input plane
	plane  int       // hp·wp
	q, qt  int       // output positions per channel (ho·wp), rounded up to 32
	mr     int       // tile rows: 12, or 8 for at most 16 output channels
	mp     int       // output channels rounded up to mr
	xlen   int       // one group's padded planes plus the kernel's overrun
	offs   []int     // per patch row k: ci·plane + kh·dh·wp + kw·dw
	pa     []float32 // packed weights (packWeights)
	wt     []float32 // flipped weights of a transposed geometry
}

// dconvKC is the depth of the direct kernel's k blocks: 512, measured
// on W5's layers (its thresholds, see Conv2dBackwardInput, count in
// these blocks). The packed GEMM's blocks (gemmKC) are deeper.
const dconvKC = 512

// dconvMinWork is the smallest og·ho·wo·kdim multiply-add count per
// sample that takes the direct kernel.
const dconvMinWork = 1 << 15

// useDconv reports whether a float32 convolution of geometry g runs the
// direct kernel: AVX-512, stride 1, and enough output channels and work
// to fill the 12×32 or 8×32 tiles. A 1×1 convolution qualifies too: its
// patch matrix is its input, but the packed GEMM's panels fit its short
// k (the input channels) badly, and the direct kernel measured 1.5×
// faster on W4's 8→8 seed at 28×28.
func useDconv[F tensor.Float](g *convGeom) bool {
	var z F
	if _, ok := any(z).(float32); !ok || !dconvAsm || !convDirect || gemmPureGo.Load() {
		return false
	}
	p := g.p
	return p.StrideH == 1 && p.StrideW == 1 && g.og >= 8 &&
		g.og*g.pixels*g.kdim >= dconvMinWork
}

// convDirect enables the direct kernel (a variable for tests and
// benchmarks).
var convDirect = true

// newDconv lays out a direct convolution of geometry g: padded planes,
// offsets, and space for the weights packed into mr-row A panels per
// group and kc block (packWeights).
func newDconv(g *convGeom) *dconv {
	d := dconvLayout(g)
	d.pa = getBuf[float32](g.p.Groups * d.mp * g.kdim) // packWeights writes every element
	return d
}

// dconvLayout is newDconv without the packed weights: the padded planes
// and offsets, which the direct weight gradient (conv_dwgrad.go) shares.
func dconvLayout(g *convGeom) *dconv {
	p := g.p
	d := &dconv{g: g, hp: g.h + 2*p.PadH, wp: g.w + 2*p.PadW}
	d.plane = d.hp * d.wp
	d.q = g.ho * d.wp
	d.qt = roundUp(d.q, 32)
	d.mr = 12
	if g.og <= 16 && g.og%8 == 0 {
		d.mr = 8 // 8 or 16 channels fill 8-row tiles, two thirds of 12-row ones
	}
	d.mp = roundUp(g.og, d.mr)
	// Reads reach q < qt plus the largest offset: the last channel's
	// plane, (kw−1)·dw columns into the next row, and the tile's 31.
	d.xlen = g.cg*d.plane + (g.kw-1)*p.DilationW + 32
	taps := g.kh * g.kw
	d.offs = make([]int, g.kdim)
	for k := range d.offs {
		ci, t := k/taps, k%taps
		d.offs[k] = ci*d.plane + (t/g.kw)*p.DilationH*d.wp + (t%g.kw)*p.DilationW
	}
	return d
}

// free returns the packed and flipped weights to the scratch pools.
func (d *dconv) free() {
	putBuf(d.pa)
	putBuf(d.wt)
	d.pa, d.wt = nil, nil
}

// packWeights packs ws ([cout, cg, kh, kw]) into mr-row A panels, block
// pc of group gi at pa[gi·mp·kdim + pc·mp:] (rows past og zero).
func (d *dconv) packWeights(ws []float32) {
	g := d.g
	for gi := 0; gi < g.p.Groups; gi++ {
		wg := ws[gi*g.og*g.kdim : (gi+1)*g.og*g.kdim]
		for pc := 0; pc < g.kdim; pc += dconvKC {
			kb := min(dconvKC, g.kdim-pc)
			packA(d.pa[gi*d.mp*g.kdim+pc*d.mp:], wg, g.kdim, false, 0, pc, g.og, kb, d.mr)
		}
	}
}

// flipWeights writes into d.wt the weights of d's (transposed) geometry
// from the original convolution's ws ([cout₀, cg₀, kh, kw] with cout₀ =
// groups·cg and cg₀ = og): wt[gi][c][o·taps + t] = ws[gi·cg + o][c][taps−1−t].
func (d *dconv) flipWeights(ws []float32) []float32 {
	g := d.g
	taps := g.kh * g.kw
	if d.wt == nil {
		d.wt = getBuf[float32](g.p.Groups * g.og * g.kdim) // written in full below
	}
	for gi := 0; gi < g.p.Groups; gi++ {
		for c := 0; c < g.og; c++ {
			dstc := d.wt[(gi*g.og+c)*g.kdim:][:g.kdim]
			for o := 0; o < g.cg; o++ {
				src := ws[((gi*g.cg+o)*g.og+c)*taps:][:taps]
				dt := dstc[o*taps:][:taps]
				for t := range dt {
					dt[t] = src[taps-1-t]
				}
			}
		}
	}
	return d.wt
}

// dconvScratch is one worker's padded input and output block.
type dconvScratch struct{ xp, cb []float32 }

func (d *dconv) newScratch() dconvScratch {
	xp := getBuf[float32](d.xlen)
	clear(xp) // the borders, which pad never writes
	return dconvScratch{xp: xp, cb: getBuf[float32](d.mp * d.qt)}
}

func (sc dconvScratch) free() {
	putBuf(sc.xp)
	putBuf(sc.cb)
}

// pad copies channels [c0, c0+cg) of sample n of xs (n·cin + c planes of
// h·w) into the interiors of xp's padded planes. It writes nothing else:
// the borders and the overrun past the last plane must be zero already,
// as they are in scratch cleared once when it is taken (newScratch,
// dwgradPrep), since every sample's copy lands on the same interiors.
func (d *dconv) pad(xs, xp []float32, n, c0 int) {
	g, p := d.g, d.g.p
	hw := g.h * g.w
	xp = xp[:d.xlen]
	for ci := 0; ci < g.cg; ci++ {
		src := xs[(n*g.cin+c0+ci)*hw:][:hw]
		copyRows(xp[ci*d.plane+p.PadH*d.wp+p.PadW:], d.wp, src, g.w, g.h, g.w)
	}
}

// block computes group gi's og output channels on the padded width into
// cb ([mp, qt]; rows past og are zero) from the padded input xp.
func (d *dconv) block(gi int, xp, cb []float32) {
	g := d.g
	for pc := 0; pc < g.kdim; pc += dconvKC {
		kb := min(dconvKC, g.kdim-pc)
		pa := d.pa[gi*d.mp*g.kdim+pc*d.mp:]
		for ir := 0; ir < d.mp; ir += d.mr {
			a := pa[ir*kb : (ir+d.mr)*kb]
			for jr := 0; jr < d.q; jr += 32 {
				_ = xp[jr+d.offs[pc+kb-1]+31] // the last row read is in range
				_ = cb[ir*d.qt+jr+(d.mr-1)*d.qt+31]
				if d.mr == 8 {
					sconv8x32AVX512(kb, &a[0], &xp[jr], &d.offs[pc], &cb[ir*d.qt+jr], d.qt, pc > 0)
				} else {
					sconv12x32AVX512(kb, &a[0], &xp[jr], &d.offs[pc], &cb[ir*d.qt+jr], d.qt, pc > 0)
				}
			}
		}
	}
}

// convDirectPrep is convPrep (forward, bias or folded affine map and
// activation) through the direct kernel.
func convDirectPrep(g *convGeom, dst, x, w, bias, scale, shift *T, act kernels.UnaryOp) (run, release func()) {
	return dconvPrep(g, dst, x, w, bias, scale, shift, act, false)
}

// transposedGeom returns the geometry of the input gradient of a stride-1
// convolution g as a convolution of its own: dx = conv(dy, W') with
// dy's planes padded by dh·(kh−1) − ph (and likewise along the width),
// W'[ci, o, t] = W[o, ci, taps−1−t] per group (the kernel flipped both
// ways, input and output channels swapped). ok is false when the padding
// would be negative (a convolution padded by more than its kernel).
func transposedGeom(g *convGeom) (convGeom, bool) {
	p := g.p
	pp := kernels.Conv2dParams{
		StrideH: 1, StrideW: 1, DilationH: p.DilationH, DilationW: p.DilationW, Groups: p.Groups,
		PadH: p.DilationH*(g.kh-1) - p.PadH, PadW: p.DilationW*(g.kw-1) - p.PadW,
	}
	t := convGeom{p: pp, n: g.n, cin: g.cout, h: g.ho, w: g.wo, cout: g.cin, kh: g.kh, kw: g.kw, ho: g.h, wo: g.w}
	t.cg, t.og = g.og, g.cg
	t.kdim = t.cg * t.kh * t.kw
	t.pixels = t.ho * t.wo
	ok := pp.PadH >= 0 && pp.PadW >= 0 &&
		kernels.ConvOut(t.h, t.kh, 1, pp.PadH, pp.DilationH) == t.ho && kernels.ConvOut(t.w, t.kw, 1, pp.PadW, pp.DilationW) == t.wo
	return t, ok
}

// convDirectBwdInputPrep is Conv2dBackwardInput of a stride-1
// convolution g through the direct kernel: the forward of the transposed
// geometry t (transposedGeom) over dy, with the weights flipped.
func convDirectBwdInputPrep(t *convGeom, dx, dy, w *T) (run, release func()) {
	return dconvPrep(t, dx, dy, w, nil, nil, nil, noAct, true)
}

// dconvPrep runs geometry g through the direct kernel; with flip, g is a
// transposed geometry and w the original convolution's weights, flipped
// into g's layout at each launch.
func dconvPrep(g *convGeom, dst, x, w, bias, scale, shift *T, act kernels.UnaryOp, flip bool) (run, release func()) {
	return dconvPoolPrep(g, dst, x, w, bias, scale, shift, act, flip, false)
}

// dconvPoolPrep is dconvPrep, with pool a 2×2, stride-2 max pool of each
// output channel's block (after the epilogue and activation) written to
// dst ([N, Cout, Ho/2, Wo/2]) instead of the block itself.
func dconvPoolPrep(g *convGeom, dst, x, w, bias, scale, shift *T, act kernels.UnaryOp, flip, pool bool) (run, release func()) {
	var s stage
	xs, ws := in[float32](&s, x), in[float32](&s, w)
	bs, scs, shs := in[float32](&s, bias), in[float32](&s, scale), in[float32](&s, shift)
	ys := out[float32](&s, dst)
	G := g.p.Groups
	items := g.n * G
	d := newDconv(g)
	slots := newScratchSet(items, d.newScratch)
	body := func(lo, hi int) {
		sc := <-slots
		for it := lo; it < hi; it++ {
			n, gi := it/G, it%G
			d.pad(xs, sc.xp, n, gi*g.cg)
			d.block(gi, sc.xp, sc.cb)
			for o := 0; o < g.og; o++ {
				ch := gi*g.og + o
				// The bias or affine map and a ReLU over the channel's
				// whole padded-width block in place (one vector pass;
				// the discarded columns ride along), then the valid
				// columns of each row out.
				cbo := sc.cb[o*d.qt:][:d.q]
				convEpilogue(cbo, cbo, ch, bs, scs, shs, act)
				if pool {
					if act != noAct && act != kernels.Relu {
						unaryKernel(act, cbo, cbo)
					}
					ph, pw := g.ho/2, g.wo/2
					maxPool2x2Rows(ys[(n*g.cout+ch)*ph*pw:][:ph*pw], nil, cbo, ph, pw, 0, d.wp)
					continue
				}
				dsto := ys[(n*g.cout+ch)*g.pixels:][:g.pixels]
				copyRows(dsto, g.wo, cbo, d.wp, g.ho, g.wo)
				if act != noAct && act != kernels.Relu {
					unaryKernel(act, dsto, dsto)
				}
			}
		}
		slots <- sc
	}
	cost := 2 * g.og * g.pixels * g.kdim
	run, releaseSlots := scratchLaunch(&s, slots, dconvScratch.free, func() {
		// The weights are packed per launch (a captured replay sees the
		// weights of its own step).
		if flip {
			d.packWeights(d.flipWeights(ws))
		} else {
			d.packWeights(ws)
		}
		parallelFor(items, cost, body)
	})
	return run, func() {
		releaseSlots()
		d.free()
	}
}
