package cpu

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Pooling over NCHW planes; every (sample, channel) plane is one item.
// (The worker pool that runs the items lives in workers.go.)

type poolGeom struct {
	p            kernels.Pool2dParams
	planes, h, w int
	ho, wo       int
}

// checkPool checks a pooling's input x (or dx) and output y (or dy)
// against p (kernels.CheckPool2d) and returns the kernels' geometry.
func checkPool(name string, x, y *T, p kernels.Pool2dParams) poolGeom {
	k := must1(kernels.CheckPool2d(name, x.Shape(), y.Shape(), p))
	return poolGeom{p: k.P, planes: k.Planes(), h: k.H, w: k.W, ho: k.Ho, wo: k.Wo}
}

// MaxPool2d implements kernels.Backend. argmax may be I32 (as documented)
// or I64.
func (be *Backend) MaxPool2d(dst, argmax, x *T, p kernels.Pool2dParams) {
	const name = "MaxPool2d"
	needCPU(name, dst, argmax, x)
	g := checkPool(name, x, dst, p)
	if argmax != nil {
		must(kernels.CheckPoolArgmax(name, argmax, dst.Shape()))
		needContig(name, "argmax", argmax)
	}
	if wide(dst, x) {
		be.launch(maxPoolPrep[float64](&g, dst, argmax, x))
	} else {
		be.launch(maxPoolPrep[float32](&g, dst, argmax, x))
	}
}

func maxPoolPrep[F tensor.Float](g *poolGeom, dst, argmax, x *T) func() {
	var s stage
	xs := in[F](&s, x)
	ys := out[F](&s, dst)
	var a64 []int64
	var a32 []int32
	if argmax != nil {
		a64, a32 = indexData("MaxPool2d", "argmax", argmax)
	}
	p := g.p
	set := func(o, bi int) {
		if a64 != nil {
			a64[o] = int64(bi)
		} else if a32 != nil {
			a32[o] = int32(bi)
		}
	}
	if p.KernelH == 2 && p.KernelW == 2 && p.StrideH == 2 && p.StrideW == 2 && p.PadH == 0 && p.PadW == 0 {
		// The usual 2×2/2 pool: every window lies inside the plane;
		// the same scan order and NaN rule as the general loop below.
		ys32, vec := any(ys).([]float32)
		vec = vec && poolAsm && a64 == nil
		body := func(lo, hi int) {
			for pl := lo; pl < hi; pl++ {
				xp := xs[pl*g.h*g.w : (pl+1)*g.h*g.w]
				ob := pl * g.ho * g.wo
				if vec {
					// The plane in one maxPool2x2AVX512 call: the same
					// maxima, offsets and NaN rule as the loop below.
					var idx []int32
					if a32 != nil {
						idx = a32[ob : ob+g.ho*g.wo]
					}
					maxPool2x2Rows(ys32[ob:ob+g.ho*g.wo], idx, any(xp).([]float32), g.ho, g.wo, 0, g.w)
					continue
				}
				for oh := 0; oh < g.ho; oh++ {
					r0 := xp[2*oh*g.w : 2*oh*g.w+2*g.wo]
					r1 := xp[(2*oh+1)*g.w : (2*oh+1)*g.w+2*g.wo]
					yo := ys[ob+oh*g.wo : ob+(oh+1)*g.wo]
					for ow := range yo {
						a, b, c, d := r0[2*ow], r0[2*ow+1], r1[2*ow], r1[2*ow+1]
						i0 := 2*oh*g.w + 2*ow
						// Branch-free on data: the maximum by the builtin
						// max, then the offset of its first occurrence
						// in scan order from 0/1 comparisons.
						m := max(max(a, b), max(c, d))
						na, nb, nc := b2i(a != m), b2i(b != m), b2i(c != m)
						off := na * (1 + nb*(g.w-1+nc))
						if m != m { // a NaN: the first NaN wins
							off = 0
							for k, v := range [4]F{a, b, c, d} {
								if v != v {
									off = [4]int{0, 1, g.w, g.w + 1}[k]
									break
								}
							}
						}
						yo[ow] = xp[i0+off] // m, with the element's own sign of zero
						if o := ob + oh*g.wo + ow; a64 != nil {
							a64[o] = int64(i0 + off)
						} else if a32 != nil {
							a32[o] = int32(i0 + off)
						}
					}
				}
			}
		}
		return func() {
			s.load()
			parallelFor(g.planes, 4*g.ho*g.wo, body)
			s.store()
		}
	}
	body := func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			xp := xs[pl*g.h*g.w : (pl+1)*g.h*g.w]
			ob := pl * g.ho * g.wo
			for oh := 0; oh < g.ho; oh++ {
				h0 := oh*p.StrideH - p.PadH
				for ow := 0; ow < g.wo; ow++ {
					w0 := ow*p.StrideW - p.PadW
					best, bi := F(math.Inf(-1)), -1
					for kh := max(0, -h0); kh < p.KernelH && h0+kh < g.h; kh++ {
						ih := h0 + kh
						for kw := max(0, -w0); kw < p.KernelW && w0+kw < g.w; kw++ {
							iw := w0 + kw
							v := xp[ih*g.w+iw]
							if v > best || v != v || bi < 0 {
								best, bi = v, ih*g.w+iw
								if v != v {
									goto done
								}
							}
						}
					}
				done:
					o := ob + oh*g.wo + ow
					ys[o] = best
					set(o, bi)
				}
			}
		}
	}
	cost := g.ho * g.wo * p.KernelH * p.KernelW
	return func() {
		s.load()
		parallelFor(g.planes, cost, body)
		s.store()
	}
}

// b2i is 1 for true and 0 for false (a conditional set, not a jump).
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// MaxPool2dBackward implements kernels.Backend.
func (be *Backend) MaxPool2dBackward(dx, dy, argmax *T, p kernels.Pool2dParams) {
	const name = "MaxPool2dBackward"
	needCPU(name, dx, dy, argmax)
	g := checkPool(name, dx, dy, p)
	must(kernels.CheckPoolArgmax(name, argmax, dy.Shape()))
	if wide(dx, dy) {
		be.launch(maxPoolBwdPrep[float64](&g, dx, dy, argmax))
	} else {
		be.launch(maxPoolBwdPrep[float32](&g, dx, dy, argmax))
	}
}

func maxPoolBwdPrep[F tensor.Float](g *poolGeom, dx, dy, argmax *T) func() {
	var s stage
	gs := in[F](&s, dy)
	dxs := out[F](&s, dx)
	a64, a32 := indexData("MaxPool2dBackward", "argmax", argmax)
	hw, ohw := g.h*g.w, g.ho*g.wo
	p := g.p
	dx32, _ := any(dxs).([]float32)
	g32, _ := any(gs).([]float32)
	// The usual 2×2/2 pool with float32 gradients and int32 indices: each
	// plane written once by the kernel, no clearing and no scatter.
	vec := poolAsm && dx32 != nil && a32 != nil && p.KernelH == 2 && p.KernelW == 2 &&
		p.StrideH == 2 && p.StrideW == 2 && p.PadH == 0 && p.PadW == 0
	body := func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			if vec {
				poolGradPlane(dx32[pl*hw:(pl+1)*hw], g32[pl*ohw:(pl+1)*ohw], a32[pl*ohw:(pl+1)*ohw], g.h, g.w, g.ho, g.wo)
				continue
			}
			d := dxs[pl*hw : (pl+1)*hw]
			clear(d)
			for o := pl * ohw; o < (pl+1)*ohw; o++ {
				if i := idxAt(a64, a32, o); i >= 0 {
					d[i] += gs[o]
				}
			}
		}
	}
	return func() {
		s.load()
		parallelFor(g.planes, hw+ohw, body)
		s.store()
	}
}

// poolGradPlane writes one h×w plane d of a 2×2, stride-2 max pool's
// input gradient from the plane's ho×wo output gradients g and their flat
// in-plane indices idx: the AVX-512 kernel writes every window, and the
// column and row the windows leave out are zeroed; when an index leaves
// its window (not this pool's forward) the gradients are scattered into
// the cleared plane instead. It needs poolAsm. MaxPool2dBackward and the
// fused batch norm's backward (bnPoolGrad) share it.
func poolGradPlane(d, g []float32, idx []int32, h, w, ho, wo int) {
	d = d[:h*w]
	if maxPoolBwd2x2Rows(d, g, idx, ho, wo, 0, w) {
		if w > 2*wo {
			for r := 0; r < 2*ho; r++ {
				clear(d[r*w+2*wo : (r+1)*w])
			}
		}
		clear(d[2*ho*w:])
		return
	}
	clear(d)
	for k, v := range g[:ho*wo] {
		if i := idx[k]; i >= 0 {
			d[i] += v
		}
	}
}

// avgWindow returns the clipped window of output (oh, ow) and its divisor
// following PyTorch's avg_pool2d.
func (g *poolGeom) avgWindow(oh, ow int) (h0, h1, w0, w1 int, div float64) {
	p := g.p
	h0, w0 = oh*p.StrideH-p.PadH, ow*p.StrideW-p.PadW
	h1, w1 = min(h0+p.KernelH, g.h+p.PadH), min(w0+p.KernelW, g.w+p.PadW)
	size := (h1 - h0) * (w1 - w0)
	h0, w0 = max(h0, 0), max(w0, 0)
	h1, w1 = min(h1, g.h), min(w1, g.w)
	if p.CountIncludePad {
		return h0, h1, w0, w1, float64(size)
	}
	return h0, h1, w0, w1, float64((h1 - h0) * (w1 - w0))
}

// AvgPool2d implements kernels.Backend.
func (be *Backend) AvgPool2d(dst, x *T, p kernels.Pool2dParams) {
	const name = "AvgPool2d"
	needCPU(name, dst, x)
	g := checkPool(name, x, dst, p)
	if wide(dst, x) {
		be.launch(avgPoolPrep[float64](&g, dst, x))
	} else {
		be.launch(avgPoolPrep[float32](&g, dst, x))
	}
}

func avgPoolPrep[F tensor.Float](g *poolGeom, dst, x *T) func() {
	var s stage
	xs := in[F](&s, x)
	ys := out[F](&s, dst)
	body := func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			xp := xs[pl*g.h*g.w : (pl+1)*g.h*g.w]
			for oh := 0; oh < g.ho; oh++ {
				for ow := 0; ow < g.wo; ow++ {
					h0, h1, w0, w1, div := g.avgWindow(oh, ow)
					var sum float64
					for ih := h0; ih < h1; ih++ {
						for iw := w0; iw < w1; iw++ {
							sum += float64(xp[ih*g.w+iw])
						}
					}
					ys[(pl*g.ho+oh)*g.wo+ow] = F(sum / div)
				}
			}
		}
	}
	cost := g.ho * g.wo * g.p.KernelH * g.p.KernelW
	return func() {
		s.load()
		parallelFor(g.planes, cost, body)
		s.store()
	}
}

// AvgPool2dBackward implements kernels.Backend.
func (be *Backend) AvgPool2dBackward(dx, dy *T, p kernels.Pool2dParams) {
	const name = "AvgPool2dBackward"
	needCPU(name, dx, dy)
	g := checkPool(name, dx, dy, p)
	if wide(dx, dy) {
		be.launch(avgPoolBwdPrep[float64](&g, dx, dy))
	} else {
		be.launch(avgPoolBwdPrep[float32](&g, dx, dy))
	}
}

func avgPoolBwdPrep[F tensor.Float](g *poolGeom, dx, dy *T) func() {
	var s stage
	gs := in[F](&s, dy)
	dxs := out[F](&s, dx)
	body := func(lo, hi int) {
		for pl := lo; pl < hi; pl++ {
			d := dxs[pl*g.h*g.w : (pl+1)*g.h*g.w]
			clear(d)
			for oh := 0; oh < g.ho; oh++ {
				for ow := 0; ow < g.wo; ow++ {
					h0, h1, w0, w1, div := g.avgWindow(oh, ow)
					v := F(float64(gs[(pl*g.ho+oh)*g.wo+ow]) / div)
					for ih := h0; ih < h1; ih++ {
						for iw := w0; iw < w1; iw++ {
							d[ih*g.w+iw] += v
						}
					}
				}
			}
		}
	}
	cost := g.ho * g.wo * g.p.KernelH * g.p.KernelW
	return func() {
		s.load()
		parallelFor(g.planes, cost, body)
		s.store()
	}
}
