package cpu

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Convolution as im2col + GEMM. For a block of samples and group g the
// column matrix cols[Kdim, B·P] (Kdim = Cin/G·KH·KW, P = Ho·Wo, the B
// samples side by side) holds the input patches; forward is W_g·cols, the
// input gradient is col2im(W_gᵀ·dy_g), and the weight gradient is
// Σ dy_g·colsᵀ. Blocks hold about convCols columns, so that a small
// feature map still makes one GEMM wide enough for the micro-kernels
// (a sample of 7×7 pixels alone is 49 columns); the block's outputs and
// output gradients go through a scratch [Og, B·P] in that layout. Work is
// split over (block, group) items with per-worker scratch; the weight
// gradient sums per-chunk partials (chunks fixed by N alone) in order.

// convCols is the target width of a block's column matrix (a variable
// for tests).
var convCols = 2048

// convBlock is the number of samples per block, a function of the
// geometry only (so that results do not depend on the machine): the
// batch is cut into about n·pixels/convCols blocks, a count rounded up to
// a multiple of 4 so that 1, 2 or 4 workers get equal shares (128
// samples of 7×7 make 4 blocks of 32, not 3 of 41 and one of 5), and
// the samples are dealt evenly over them.
func convBlock(g *convGeom) int {
	blocks := (g.n*g.pixels + convCols - 1) / convCols
	if blocks > 1 {
		blocks = (blocks + 3) &^ 3
	}
	blocks = max(1, min(blocks, g.n))
	return (g.n + blocks - 1) / blocks
}

// convGeom holds the sizes of one convolution.
type convGeom struct {
	p                    kernels.Conv2dParams
	n, cin, h, w         int
	cout, kh, kw, ho, wo int
	cg, og, kdim, pixels int
	direct               bool // 1×1, stride 1, no padding: cols is x itself
}

// checkConv checks a convolution's input x (or dx), weight w (or dw) and
// output y (or dy) against p (kernels.CheckConv2d; float operands) and
// returns the kernels' geometry.
func checkConv(name string, x, w, y *T, p kernels.Conv2dParams) convGeom {
	g := convGeomOf(must1(kernels.CheckConv2d(name, x.Shape(), w.Shape(), y.Shape(), p)))
	for _, t := range []*T{x, w, y} {
		needFloat(name, "operand", t)
	}
	return g
}

// convGeomOf is the kernels' view of a checked geometry.
func convGeomOf(k kernels.Conv2dGeom) convGeom {
	p := k.P
	return convGeom{p: p, n: k.N, cin: k.Cin, h: k.H, w: k.W, cout: k.Cout, kh: k.KH, kw: k.KW, ho: k.Ho, wo: k.Wo,
		cg: k.Cg, og: k.Og, kdim: k.KDim, pixels: k.Pixels,
		direct: k.KH == 1 && k.KW == 1 && p.StrideH == 1 && p.StrideW == 1 && p.PadH == 0 && p.PadW == 0}
}

// im2col writes the patches of one group of one sample (xg: cg planes of
// h·w) into cols [kdim, pixels] with row stride ld (≥ pixels).
func im2col[F tensor.Float](g *convGeom, xg, cols []F, ld int) {
	p := g.p
	for ci := 0; ci < g.cg; ci++ {
		plane := xg[ci*g.h*g.w : (ci+1)*g.h*g.w]
		for kh := 0; kh < g.kh; kh++ {
			for kw := 0; kw < g.kw; kw++ {
				row := cols[((ci*g.kh+kh)*g.kw+kw)*ld:]
				for oh := 0; oh < g.ho; oh++ {
					r := row[oh*g.wo : (oh+1)*g.wo]
					ih := oh*p.StrideH - p.PadH + kh*p.DilationH
					if ih < 0 || ih >= g.h {
						clear(r)
						continue
					}
					src := plane[ih*g.w : (ih+1)*g.w]
					iw := kw*p.DilationW - p.PadW
					if p.StrideW == 1 {
						// The valid columns are one run: zeros, a copy,
						// zeros.
						lo, hi := max(0, -iw), min(g.wo, g.w-iw)
						if lo >= hi {
							clear(r)
							continue
						}
						clear(r[:lo])
						copy(r[lo:hi], src[lo+iw:hi+iw])
						clear(r[hi:])
						continue
					}
					for ow := range r {
						if iw >= 0 && iw < g.w {
							r[ow] = src[iw]
						} else {
							r[ow] = 0
						}
						iw += p.StrideW
					}
				}
			}
		}
	}
}

// sameWidth reports a stride-1 convolution whose output rows are as wide
// as its input rows (a "same" padding along the width, any height and
// dilation). Then output pixel d = oh·w+ow of the patch row for kernel
// tap (kh, kw) reads input element d + (kh·dh−ph)·w + (kw·dw−pw): the
// patch row is the plane shifted by a constant, with the rows that fall
// outside the plane and the |kw·dw−pw| columns that wrap around an edge
// zeroed. im2colSame and col2imSame move whole planes at a time instead
// of a row of a few pixels at a time.
func (g *convGeom) sameWidth() bool {
	return g.p.StrideH == 1 && g.p.StrideW == 1 && g.wo == g.w
}

// tapShift returns, for kernel tap (kh, kw) of a sameWidth convolution,
// the valid output rows [oh0, oh1), the shift from output to input index
// and the column shift cs = kw·dw−pw (columns ow with ow+cs outside
// [0, w) wrap).
func (g *convGeom) tapShift(kh, kw int) (oh0, oh1, sh, cs int) {
	p := g.p
	rs := kh*p.DilationH - p.PadH
	cs = kw*p.DilationW - p.PadW
	oh0, oh1 = max(0, -rs), min(g.ho, g.h-rs)
	return oh0, oh1, rs*g.w + cs, cs
}

// zeroWrapped zeroes, in rows [oh0, oh1) of a patch row r (w wide), the
// columns that a column shift cs wraps around an edge: the first −cs
// columns of each row for cs < 0, the last cs for cs > 0. (Plain stores:
// one or two elements a row do not pay for a memclr call.)
func zeroWrapped[F tensor.Float](r []F, w, oh0, oh1, cs int) {
	if cs == 0 || oh0 >= oh1 {
		return
	}
	n, first := min(abs(cs), w), 0
	if cs > 0 {
		first = w - n
	}
	r = r[:oh1*w]
	for i := oh0*w + first; i < oh1*w; i += w {
		for j := i; j < i+n; j++ {
			r[j] = 0
		}
	}
}

// im2colSame is blockCols for a sameWidth convolution, one patch row
// (kernel tap) at a time.
func im2colSame[F tensor.Float](g *convGeom, xs, cols []F, n0, nb, gi, ld int) {
	for k := 0; k < g.kdim; k++ {
		tapRow(g, xs, cols[k*ld:], n0, nb, gi, k)
	}
}

// tapRow writes patch row k (input channel k/(kh·kw) of group gi, kernel
// tap k%(kh·kw)) of samples n0..n0+nb−1 of a sameWidth convolution into
// row, sample j at j·pixels: per sample one shifted copy of its plane,
// then the out-of-plane rows and the wrapped columns zeroed.
func tapRow[F tensor.Float](g *convGeom, xs, row []F, n0, nb, gi, k int) {
	hw := g.h * g.w
	taps := g.kh * g.kw
	ci, t := k/taps, k%taps
	oh0, oh1, sh, cs := g.tapShift(t/g.kw, t%g.kw)
	// Output indices [a, b) read plane[a+sh : b+sh]; the ones clipped off
	// at either end are wrapped columns.
	a, b := max(oh0*g.w, -sh), min(oh1*g.w, hw-sh)
	for j := 0; j < nb; j++ {
		r := row[j*g.pixels:][:g.pixels]
		if a >= b {
			clear(r)
			continue
		}
		plane := xs[((n0+j)*g.cin+gi*g.cg+ci)*hw:][:hw]
		clear(r[:a])
		copy(r[a:b], plane[a+sh:b+sh])
		clear(r[b:])
		zeroWrapped(r, g.w, oh0, oh1, cs)
	}
}

// col2imSame is the col2im of a block of samples (n0..n0+nb−1, group gi)
// for a sameWidth convolution, writing dx without the caller clearing
// it: per input channel, the tap that maps every pixel to itself (the
// centre of a "same" convolution) is copied in first (the planes are
// cleared when there is none); then, per other tap, the wrapped columns
// of the (scratch) patch row are zeroed and its valid rows added into the
// plane as one shifted run.
func col2imSame[F tensor.Float](g *convGeom, cols, dxs []F, n0, nb, gi, ld int) {
	hw := g.h * g.w
	taps := g.kh * g.kw
	ident := -1
	if g.ho == g.h {
		for t := 0; t < taps; t++ {
			if oh0, oh1, sh, cs := g.tapShift(t/g.kw, t%g.kw); sh == 0 && cs == 0 && oh0 == 0 && oh1 == g.ho {
				ident = t
				break
			}
		}
	}
	for ci := 0; ci < g.cg; ci++ {
		for j := 0; j < nb; j++ {
			plane := dxs[((n0+j)*g.cin+gi*g.cg+ci)*hw:][:hw]
			if ident >= 0 {
				copy(plane, cols[(ci*taps+ident)*ld+j*g.pixels:][:hw])
			} else {
				clear(plane)
			}
		}
		for t := 0; t < taps; t++ {
			if t == ident {
				continue
			}
			row := cols[(ci*taps+t)*ld:]
			oh0, oh1, sh, cs := g.tapShift(t/g.kw, t%g.kw)
			a, b := max(oh0*g.w, -sh), min(oh1*g.w, hw-sh)
			if a >= b {
				continue
			}
			for j := 0; j < nb; j++ {
				r := row[j*g.pixels:][:g.pixels]
				plane := dxs[((n0+j)*g.cin+gi*g.cg+ci)*hw:][:hw]
				zeroWrapped(r, g.w, oh0, oh1, cs)
				addTo(plane[a+sh:b+sh], r[a:b])
			}
		}
	}
}

// addTo adds x into y element by element (AVX2 for float32 on amd64).
func addTo[F tensor.Float](y, x []F) {
	if y32, ok := any(y).([]float32); ok {
		axpyF32(1, any(x).([]float32), y32)
		return
	}
	y = y[:len(x)]
	for i, v := range x {
		y[i] += v
	}
}

// col2im adds cols [kdim, pixels] (row stride ld) back into one group's
// planes (dxg, which the caller zeroed).
func col2im[F tensor.Float](g *convGeom, cols, dxg []F, ld int) {
	p := g.p
	for ci := 0; ci < g.cg; ci++ {
		plane := dxg[ci*g.h*g.w : (ci+1)*g.h*g.w]
		for kh := 0; kh < g.kh; kh++ {
			for kw := 0; kw < g.kw; kw++ {
				row := cols[((ci*g.kh+kh)*g.kw+kw)*ld:]
				for oh := 0; oh < g.ho; oh++ {
					ih := oh*p.StrideH - p.PadH + kh*p.DilationH
					if ih < 0 || ih >= g.h {
						continue
					}
					r := row[oh*g.wo : (oh+1)*g.wo]
					dst := plane[ih*g.w : (ih+1)*g.w]
					iw := kw*p.DilationW - p.PadW
					if p.StrideW == 1 {
						// The valid columns are one run.
						if lo, hi := max(0, -iw), min(g.wo, g.w-iw); lo < hi {
							d := dst[lo+iw : hi+iw]
							for i, v := range r[lo:hi] {
								d[i] += v
							}
						}
						continue
					}
					for _, v := range r {
						if iw >= 0 && iw < g.w {
							dst[iw] += v
						}
						iw += p.StrideW
					}
				}
			}
		}
	}
}

// convScratch is one worker's space: the block's column matrix, its
// outputs or output gradients in the [Og, B·P] layout (blocks of more than
// one sample), and the GEMM's packing.
type convScratch[F tensor.Float] struct {
	cols, ys []F
	gemm     gemmScratch[F]
}

// newConvScratch sizes a worker's scratch for blocks of b samples and a
// GEMM of m×n×k.
func newConvScratch[F tensor.Float](g *convGeom, b, m, n, k int) convScratch[F] {
	var sc convScratch[F]
	if !g.direct || b > 1 {
		sc.cols = getBuf[F](g.kdim * b * g.pixels)
	}
	if b > 1 {
		sc.ys = getBuf[F](g.og * b * g.pixels)
	}
	sc.gemm = newGemmScratch[F](m, n, k)
	return sc
}

// free returns the scratch buffers to the pools.
func (sc convScratch[F]) free() {
	putBuf(sc.cols)
	putBuf(sc.ys)
	sc.gemm.free()
}

// blockCols fills cols [kdim, nb·pixels] with the patches of samples
// n0..n0+nb−1 of group gi, side by side; a single 1×1 sample needs no
// copy, and cols is then that sample's group itself.
func blockCols[F tensor.Float](g *convGeom, xs, cols []F, n0, nb, gi int) []F {
	hw := g.h * g.w
	if nb == 1 && g.direct {
		return xs[(n0*g.cin+gi*g.cg)*hw : (n0*g.cin+(gi+1)*g.cg)*hw]
	}
	ld := nb * g.pixels
	if g.sameWidth() {
		im2colSame(g, xs, cols, n0, nb, gi, ld)
		return cols
	}
	for j := 0; j < nb; j++ {
		n := n0 + j
		xg := xs[(n*g.cin+gi*g.cg)*hw : (n*g.cin+(gi+1)*g.cg)*hw]
		im2col(g, xg, cols[j*g.pixels:], ld)
	}
	return cols
}

// gatherDy returns the output gradients of samples n0..n0+nb−1, group gi,
// as [og, nb·pixels]: the samples' own rows for one sample, else copied
// into buf.
func gatherDy[F tensor.Float](g *convGeom, gs, buf []F, n0, nb, gi int) []F {
	if nb == 1 {
		return gs[(n0*g.cout+gi*g.og)*g.pixels:]
	}
	ld := nb * g.pixels
	for j := 0; j < nb; j++ {
		src := gs[((n0+j)*g.cout+gi*g.og)*g.pixels:]
		for o := 0; o < g.og; o++ {
			copy(buf[o*ld+j*g.pixels:o*ld+(j+1)*g.pixels], src[o*g.pixels:(o+1)*g.pixels])
		}
	}
	return buf
}

// Conv2d implements kernels.Backend.
func (be *Backend) Conv2d(dst, x, w, bias *T, p kernels.Conv2dParams) {
	const name = "Conv2d"
	needCPU(name, dst, x, w, bias)
	g := checkConv(name, x, w, dst, p)
	must(kernels.CheckConvBias(name, bias, g.cout))
	switch {
	case wide(dst, x, w):
		be.launchScratch(convPrep[float64](&g, dst, x, w, bias, nil, nil, noAct))
	case useDconv[float32](&g):
		be.launchScratch(convDirectPrep(&g, dst, x, w, bias, nil, nil, noAct))
	default:
		be.launchScratch(convPrep[float32](&g, dst, x, w, bias, nil, nil, noAct))
	}
}

// Conv2dAffineAct implements kernels.ConvAffineActer: Conv2d (no bias)
// followed by dst[n,o,...] = act(dst[n,o,...]·scale[o] + shift[o]) in the
// epilogue that copies each output row out of the GEMM's block, while it
// is in cache — an eval-mode BatchNorm and its ReLU folded into the
// convolution (kasmina's CNN blocks in inference). scale and shift are
// [Cout] in any float dtype; act is any UnaryOp.
func (be *Backend) Conv2dAffineAct(dst, x, w, scale, shift *T, act kernels.UnaryOp, p kernels.Conv2dParams) {
	const name = "Conv2dAffineAct"
	needCPU(name, dst, x, w, scale, shift)
	g := checkConv(name, x, w, dst, p)
	must(kernels.CheckConvAffineAct(name, g.cout, scale, shift, act))
	switch {
	case wide(dst, x, w):
		be.launchScratch(convPrep[float64](&g, dst, x, w, nil, scale, shift, act))
	case useDconv[float32](&g):
		be.launchScratch(convDirectPrep(&g, dst, x, w, nil, scale, shift, act))
	default:
		be.launchScratch(convPrep[float32](&g, dst, x, w, nil, scale, shift, act))
	}
}

// Conv2dAffineActMaxPool2x2 implements kernels.ConvAffineActPooler:
// Conv2dAffineAct followed by a 2×2, stride-2 max pool (no indices), the
// pool taken from each output channel's block in the direct kernel's
// scratch, so that the full-size output is never written. dst is [N,
// Cout, Ho/2, Wo/2]. Convolutions off the direct kernel, and builds
// without the pool kernel, run the two ops through a temporary.
func (be *Backend) Conv2dAffineActMaxPool2x2(dst, x, w, scale, shift *T, act kernels.UnaryOp, p kernels.Conv2dParams) {
	const name = "Conv2dAffineActMaxPool2x2"
	needCPU(name, dst, x, w, scale, shift)
	xs, ws := x.Shape(), w.Shape()
	if len(xs) != 4 || len(ws) != 4 {
		fail(name, "x shape %v and w shape %v, want rank 4", xs, ws)
	}
	pn := p.Norm()
	ho := kernels.ConvOut(xs[2], ws[2], pn.StrideH, pn.PadH, pn.DilationH)
	wo := kernels.ConvOut(xs[3], ws[3], pn.StrideW, pn.PadW, pn.DilationW)
	// The convolution's output, which is never written, checked by shape.
	g := convGeomOf(must1(kernels.CheckConv2d(name, xs, ws, []int{xs[0], ws[0], max(ho, 0), max(wo, 0)}, p)))
	for _, t := range []*T{x, w, dst} {
		needFloat(name, "operand", t)
	}
	needShape(name, "dst", dst, []int{xs[0], ws[0], ho / 2, wo / 2})
	must(kernels.CheckConvAffineAct(name, g.cout, scale, shift, act))
	if wide(dst, x, w) || !useDconv[float32](&g) || !poolAsm || !dst.IsContiguous() || ho < 2 || wo < 2 {
		full := tensor.Empty(dst.DType(), xs[0], ws[0], ho, wo)
		be.Conv2dAffineAct(full, x, w, scale, shift, act, p)
		be.MaxPool2d(dst, nil, full, kernels.Pool2dParams{KernelH: 2, KernelW: 2})
		return
	}
	be.launchScratch(dconvPoolPrep(&g, dst, x, w, nil, scale, shift, act, false, true))
}

func convPrep[F tensor.Float](g *convGeom, dst, x, w, bias, scale, shift *T, act kernels.UnaryOp) (run, release func()) {
	var s stage
	xs, ws, bs := in[F](&s, x), in[F](&s, w), in[F](&s, bias)
	scs, shs := in[F](&s, scale), in[F](&s, shift)
	ys := out[F](&s, dst)
	G := g.p.Groups
	B := convBlock(g)
	blocks := (g.n + B - 1) / B
	items := blocks * G
	slots := newScratchSet(items, func() convScratch[F] { return newConvScratch[F](g, B, g.og, B*g.pixels, g.kdim) })
	body := func(lo, hi int) {
		sc := <-slots
		for it := lo; it < hi; it++ {
			bi, gi := it/G, it%G
			n0 := bi * B
			nb := min(B, g.n-n0)
			ld := nb * g.pixels
			yb := ys[(n0*g.cout+gi*g.og)*g.pixels:]
			if nb > 1 {
				yb = sc.ys
			}
			cols := blockCols(g, xs, sc.cols, n0, nb, gi)
			gemm(g.og, ld, g.kdim, ws[gi*g.og*g.kdim:], g.kdim, false, cols, ld, false, yb, ld, false, sc.gemm)
			for j := 0; j < nb; j++ {
				dstg := ys[((n0+j)*g.cout+gi*g.og)*g.pixels:]
				for o := 0; o < g.og; o++ {
					r := dstg[o*g.pixels : (o+1)*g.pixels]
					src := r
					if nb > 1 {
						src = yb[o*ld+j*g.pixels : o*ld+(j+1)*g.pixels]
					}
					// The bias or the folded affine map, and a ReLU, in
					// the pass that moves the row out of the block.
					if !convEpilogue(r, src, gi*g.og+o, bs, scs, shs, act) && nb > 1 {
						copy(r, src)
					}
					if act != noAct && act != kernels.Relu {
						unaryKernel(act, r, r)
					}
				}
			}
		}
		slots <- sc
	}
	cost := 2 * g.og * B * g.pixels * g.kdim
	return scratchLaunch(&s, slots, convScratch[F].free, func() { parallelFor(items, cost, body) })
}

// Conv2dBackwardInput implements kernels.Backend.
func (be *Backend) Conv2dBackwardInput(dx, dy, w *T, p kernels.Conv2dParams) {
	const name = "Conv2dBackwardInput"
	needCPU(name, dx, dy, w)
	g := checkConv(name, dx, w, dy, p)
	if wide(dx, dy, w) {
		be.launchScratch(convBwdInputPrep[float64](&g, dx, dy, w))
		return
	}
	if useDconv[float32](&g) {
		// Measured on W5's layers: ahead of col2im up to two kc blocks of
		// flipped weights (64 channels of 3×3, kdim 576), behind it at
		// three (128 channels, 1152).
		if t, ok := transposedGeom(&g); ok && useDconv[float32](&t) && t.kdim <= 2*dconvKC {
			be.launchScratch(convDirectBwdInputPrep(&t, dx, dy, w))
			return
		}
	}
	be.launchScratch(convBwdInputPrep[float32](&g, dx, dy, w))
}

func convBwdInputPrep[F tensor.Float](g *convGeom, dx, dy, w *T) (run, release func()) {
	var s stage
	gs, ws := in[F](&s, dy), in[F](&s, w)
	dxs := out[F](&s, dx)
	G := g.p.Groups
	B := convBlock(g)
	blocks := (g.n + B - 1) / B
	items := blocks * G
	slots := newScratchSet(items, func() convScratch[F] { return newConvScratch[F](g, B, g.kdim, B*g.pixels, g.og) })
	hw := g.h * g.w
	body := func(lo, hi int) {
		sc := <-slots
		for it := lo; it < hi; it++ {
			bi, gi := it/G, it%G
			n0 := bi * B
			nb := min(B, g.n-n0)
			ld := nb * g.pixels
			dyb := gatherDy(g, gs, sc.ys, n0, nb, gi)
			wg := ws[gi*g.og*g.kdim:]
			if nb == 1 && g.direct {
				dxg := dxs[(n0*g.cin+gi*g.cg)*hw : (n0*g.cin+(gi+1)*g.cg)*hw]
				gemm(g.kdim, ld, g.og, wg, g.kdim, true, dyb, ld, false, dxg, ld, false, sc.gemm)
				continue
			}
			gemm(g.kdim, ld, g.og, wg, g.kdim, true, dyb, ld, false, sc.cols, ld, false, sc.gemm)
			if g.sameWidth() {
				col2imSame(g, sc.cols, dxs, n0, nb, gi, ld)
				continue
			}
			for j := 0; j < nb; j++ {
				n := n0 + j
				dxg := dxs[(n*g.cin+gi*g.cg)*hw : (n*g.cin+(gi+1)*g.cg)*hw]
				clear(dxg)
				col2im(g, sc.cols[j*g.pixels:], dxg, ld)
			}
		}
		slots <- sc
	}
	cost := 2 * g.og * B * g.pixels * g.kdim
	return scratchLaunch(&s, slots, convScratch[F].free, func() { parallelFor(items, cost, body) })
}

// convDotMax is the largest og·kdim whose weight gradient runs as dot
// products (a variable for tests and benchmarks). Measured on batch-128
// 3×3 layers: 7× ahead of the GEMM at 8×9, 1.6× at 8×72, 1.2× at
// 16×72, behind at 32×144.
var convDotMax = 2048

// convEpilogue writes into dst the row src of output channel ch with the
// channel's bias (bs) or folded affine map (scs, shs: x·scale + shift)
// and a ReLU when act is Relu, in one vector pass (dst may be src). It
// reports false, writing nothing, when there is none of the three: the
// caller copies, and applies any activation other than ReLU itself.
func convEpilogue[F tensor.Float](dst, src []F, ch int, bs, scs, shs []F, act kernels.UnaryOp) bool {
	relu := act == kernels.Relu
	switch {
	case scs != nil:
		rowAffineAct(dst, src, 0, float64(scs[ch]), float64(shs[ch]), relu)
	case bs != nil:
		rowAffineAct(dst, src, 0, 1, float64(bs[ch]), relu)
	case relu:
		rowAffineAct(dst, src, 0, 1, 0, true)
	default:
		return false
	}
	return true
}

// convChunks is the number of weight-gradient partials for a batch of n:
// a function of n only, so the summation order is fixed.
func convChunks(n int) int { return max(1, min(n, 16)) }

// Conv2dBackwardWeight implements kernels.Backend.
func (be *Backend) Conv2dBackwardWeight(dw, x, dy *T, p kernels.Conv2dParams) {
	const name = "Conv2dBackwardWeight"
	needCPU(name, dw, x, dy)
	g := checkConv(name, x, dw, dy, p)
	switch {
	case wide(dw, x, dy):
		be.launchScratch(convBwdWeightPrep[float64](&g, dw, x, dy))
	case useDwgrad[float32](&g):
		be.launchScratch(dwgradPrep(&g, dw, x, dy))
	default:
		be.launchScratch(convBwdWeightPrep[float32](&g, dw, x, dy))
	}
}

func convBwdWeightPrep[F tensor.Float](g *convGeom, dw, x, dy *T) (run, release func()) {
	var s stage
	xs, gs := in[F](&s, x), in[F](&s, dy)
	dws := out[F](&s, dw)
	G := g.p.Groups
	nch := convChunks(g.n)
	wsz := g.cout * g.kdim
	part := make([]F, nch*wsz)
	items := nch * G
	B := min(convBlock(g), (g.n+nch-1)/nch)
	// With fewer patch rows than output channels (a first layer: 9 rows
	// for a 3×3 kernel on one channel) the partials are computed
	// transposed, [kdim, og]: the narrow side then falls on the
	// micro-tile's rows (12) rather than its columns (32).
	tr := g.kdim < g.og
	// A small [og, kdim] gradient (a first layer's 9 patch rows, a narrow
	// seed) runs as og·kdim dot products of length B·pixels: packing the
	// long operands for the 12×32 micro-tiles would cost more than the
	// products, and most of each tile would be padding.
	dots := vdotAsm && g.og*g.kdim <= convDotMax && asF32(dws) != nil
	if dots {
		tr = false
	}
	mn := max(g.og, g.kdim)
	slots := newScratchSet(items, func() convScratch[F] { return newConvScratch[F](g, B, mn, mn, B*g.pixels) })
	body := func(lo, hi int) {
		sc := <-slots
		for it := lo; it < hi; it++ {
			c, gi := it/G, it%G
			pg := part[c*wsz+gi*g.og*g.kdim : c*wsz+(gi+1)*g.og*g.kdim]
			n0, n1 := c*g.n/nch, (c+1)*g.n/nch
			for b0 := n0; b0 < n1; b0 += B {
				nb := min(B, n1-b0)
				ld := nb * g.pixels
				cols := blockCols(g, xs, sc.cols, b0, nb, gi)
				if dots && g.pixels >= 256 {
					// Sample by sample against its own dy rows (stride
					// pixels), no gathered copy of dy: long enough dot
					// products (on smaller planes the gathered block's
					// longer dots measure faster).
					if b0 == n0 {
						clear(pg)
					}
					for j := 0; j < nb; j++ {
						dyj := gs[((b0+j)*g.cout+gi*g.og)*g.pixels:]
						gemmDirect(g.og, g.kdim, g.pixels, dyj, g.pixels, false, cols[j*g.pixels:], ld, true, pg, g.kdim)
					}
					continue
				}
				dyb := gatherDy(g, gs, sc.ys, b0, nb, gi)
				switch {
				case dots:
					if b0 == n0 {
						clear(pg)
					}
					gemmDirect(g.og, g.kdim, ld, dyb, ld, false, cols, ld, true, pg, g.kdim)
				case tr:
					gemm(g.kdim, g.og, ld, cols, ld, false, dyb, ld, true, pg, g.og, b0 > n0, sc.gemm)
				default:
					gemm(g.og, g.kdim, ld, dyb, ld, false, cols, ld, true, pg, g.kdim, b0 > n0, sc.gemm)
				}
			}
		}
		slots <- sc
	}
	combine := func(lo, hi int) {
		if !tr {
			d := dws[lo:hi]
			copy(d, part[lo:hi])
			for c := 1; c < nch; c++ {
				pc := part[c*wsz+lo : c*wsz+hi]
				for i, v := range pc {
					d[i] += v
				}
			}
			return
		}
		per := g.og * g.kdim
		for i := lo; i < hi; i++ {
			gi, r := i/per, i%per
			src := gi*per + (r%g.kdim)*g.og + r/g.kdim // [kdim, og] within the group
			v := part[src]
			for c := 1; c < nch; c++ {
				v += part[c*wsz+src]
			}
			dws[i] = v
		}
	}
	cost := 2 * g.og * g.pixels * g.kdim * max(1, g.n/nch)
	return scratchLaunch(&s, slots, convScratch[F].free, func() {
		parallelFor(items, cost, body)
		parallelFor(wsz, nch, combine)
	})
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
