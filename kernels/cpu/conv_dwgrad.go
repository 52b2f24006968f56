package cpu

import "github.com/esper-go/esper/tensor"

// The direct weight gradient of a stride-1 convolution, the counterpart
// of the direct kernel (conv_direct.go) without a patch matrix: on the
// padded width wp, output position q of a sample reads input element
// xp[offs[k] + q] at patch row k, so
//
//	dW[o, k] = Σ_n Σ_q dyP_n[o, q] · xp_n[offs[k] + q]
//
// where xp_n is the sample's zero-padded input planes and dyP_n its output
// gradient laid out on the padded width with zeros in the discarded
// columns (q = oh·wp + ow, ow ≥ wo contributing nothing). Every term is a
// dot product of a row of dyP with a shifted row of xp, both contiguous:
// sdotOffs4x4AVX512 takes four of each (sixteen dot products) over a
// block of samples and folds its accumulators once per block.

// dwgradScratchFloats bounds a worker's padded samples (inputs and
// output gradients, in floats): a block of them stays in L2 while every
// kernel call of the block streams over it.
const dwgradScratchFloats = 64 << 10

// useDwgrad reports whether a convolution's weight gradient runs the
// direct path: float32 with the AVX-512 kernels, stride 1, a kernel
// larger than 1×1 (a 1×1 convolution's patch matrix is its input).
func useDwgrad[F tensor.Float](g *convGeom) bool {
	var z F
	if _, ok := any(z).(float32); !ok || !tinyAsm || !convDirect || gemmPureGo.Load() {
		return false
	}
	p := g.p
	return p.StrideH == 1 && p.StrideW == 1 && g.kh*g.kw > 1
}

// dwgradScratch is one worker's padded inputs and output gradients for a
// block of samples.
type dwgradScratch struct{ xp, dy []float32 }

func (sc dwgradScratch) free() {
	putBuf(sc.xp)
	putBuf(sc.dy)
}

// padDy lays out the output gradient of group gi of sample n (og channels
// of ho×wo in gs) as og4 rows of d.q on the padded width in dst, a row
// every qs (d.q rounded up to 16, so that rows start on 64-byte
// boundaries when dst does). It writes the valid columns only: the
// discarded columns and the rows past og must be zero already (scratch
// cleared once when it is taken, as for pad).
func (d *dconv) padDy(gs, dst []float32, n, gi, og4, qs int) {
	g := d.g
	dst = dst[:og4*qs]
	for o := 0; o < g.og; o++ {
		src := gs[(n*g.cout+gi*g.og+o)*g.pixels:][:g.pixels]
		copyRows(dst[o*qs:], d.wp, src, g.wo, g.ho, g.wo)
	}
}

// dwgradPrep is Conv2dBackwardWeight of the stride-1 float32 convolution
// g through sdotOffs4x4AVX512. Like the im2col route it splits the
// samples into convChunks partial gradients, summed at the end.
func dwgradPrep(g *convGeom, dw, x, dy *T) (run, release func()) {
	var s stage
	xs, gs := in[float32](&s, x), in[float32](&s, dy)
	dws := out[float32](&s, dw)
	G := g.p.Groups
	d := dconvLayout(g)
	og4, kd4 := roundUp(g.og, 4), roundUp(g.kdim, 4)
	// Byte offsets of the patch rows, the last repeated up to kd4 (its
	// extra dot products are discarded).
	boffs := make([]int, kd4)
	for k := range boffs {
		boffs[k] = 4 * d.offs[min(k, g.kdim-1)]
	}
	// As many samples per block as the scratch bound allows, so that each
	// kernel call folds its accumulators over long sums; the blocks are
	// the partial gradients' chunks, an even number of them (at most
	// convChunks) to share between the workers.
	qs := roundUp(d.q, 16)
	per := d.xlen + og4*qs
	sbMax := max(1, dwgradScratchFloats/per)
	nch := min(convChunks(g.n), roundUp((g.n+sbMax-1)/sbMax, 2))
	sb := (g.n + nch - 1) / nch
	wsz := g.cout * g.kdim
	part := make([]float32, nch*wsz)
	items := nch * G
	slots := newScratchSet(items, func() dwgradScratch {
		sc := dwgradScratch{xp: getBuf[float32](sb * d.xlen), dy: getBuf[float32](sb * og4 * qs)}
		clear(sc.xp) // the padding, which pad and padDy never write
		clear(sc.dy)
		return sc
	})
	kc, tail := d.q/16, uint16(1)<<(d.q%16)-1
	body := func(lo, hi int) {
		sc := <-slots
		var out [16]float32
		for it := lo; it < hi; it++ {
			c, gi := it/G, it%G
			pg := part[c*wsz+gi*g.og*g.kdim:][:g.og*g.kdim]
			clear(pg)
			n0, n1 := c*g.n/nch, (c+1)*g.n/nch
			for b0 := n0; b0 < n1; b0 += sb {
				nb := min(sb, n1-b0)
				for j := 0; j < nb; j++ {
					d.pad(xs, sc.xp[j*d.xlen:], b0+j, gi*g.cg)
					d.padDy(gs, sc.dy[j*og4*qs:], b0+j, gi, og4, qs)
				}
				// The kernel reads rows o..o+3 of every sample's dyP and,
				// per sample, up to xp[boffs/4 + q − 1] < xlen.
				_, _ = sc.dy[nb*og4*qs-1], sc.xp[nb*d.xlen-1]
				for o := 0; o < og4; o += 4 {
					for k := 0; k < kd4; k += 4 {
						sdotOffs4x4Kernel(&sc.dy[o*qs], qs, &sc.xp[0], (*[4]int)(boffs[k:k+4]), kc, tail, nb, og4*qs, d.xlen, &out)
						for i := 0; i < 4 && o+i < g.og; i++ {
							row := pg[(o+i)*g.kdim:]
							for j := 0; j < 4 && k+j < g.kdim; j++ {
								row[k+j] += out[4*i+j]
							}
						}
					}
				}
			}
		}
		slots <- sc
	}
	combine := func(lo, hi int) {
		dst := dws[lo:hi]
		copy(dst, part[lo:hi])
		for c := 1; c < nch; c++ {
			for i, v := range part[c*wsz+lo : c*wsz+hi] {
				dst[i] += v
			}
		}
	}
	cost := 2 * g.og * g.pixels * g.kdim * max(1, g.n/nch)
	return scratchLaunch(&s, slots, dwgradScratch.free, func() {
		parallelFor(items, cost, body)
		parallelFor(wsz, nch, combine)
	})
}
