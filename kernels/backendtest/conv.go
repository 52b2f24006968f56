package backendtest

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The conv family: Conv2d and its two gradients, and the optional
// ConvAffineActer and ConvAffineActPooler.

var convCases = []conformance{
	of(checkConv2d, "Conv2d", "Conv2dBackwardInput", "Conv2dBackwardWeight"),
	optional[kernels.ConvAffineActer](checkConvAffineAct, "Conv2dAffineAct"),
	optional[kernels.ConvAffineActPooler](checkConvAffineActPool, "Conv2dAffineActMaxPool2x2"),
}

// convCase is a convolution's input and weight shapes and params.
type convCase struct {
	x, w []int
	p    kernels.Conv2dParams
}

var convCases2d = []convCase{
	{[]int{2, 4, 7, 7}, []int{6, 4, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1}},
	{[]int{2, 4, 7, 7}, []int{6, 4, 3, 3}, kernels.Conv2dParams{StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}},
	{[]int{2, 4, 6, 6}, []int{6, 2, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1, Groups: 2}},
	{[]int{1, 3, 9, 9}, []int{4, 3, 3, 3}, kernels.Conv2dParams{PadH: 2, PadW: 2, DilationH: 2, DilationW: 2}},
	{[]int{3, 5, 4, 4}, []int{8, 5, 1, 1}, kernels.Conv2dParams{}},
	{[]int{2, 3, 9, 8}, []int{4, 3, 2, 3}, kernels.Conv2dParams{StrideH: 2, PadW: 1}},
	{[]int{2, 16, 6, 6}, []int{32, 16, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1}},
	// W4's first layer (on CUDA a direct kernel, its weight gradient
	// summed by 32 lanes an output); a layer whose sample exceeds the
	// direct weight gradient's shared memory (im2col there, direct
	// otherwise); and one whose weights exceed the direct path's
	// (im2col and cuBLAS throughout, fp32 included).
	{[]int{3, 1, 28, 28}, []int{8, 1, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1}},
	{[]int{1, 4, 40, 40}, []int{8, 4, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1}},
	{[]int{1, 32, 5, 5}, []int{64, 32, 3, 3}, kernels.Conv2dParams{PadH: 1, PadW: 1}},
}

// geom is c's output shape and its normalised params.
func (c convCase) geom() ([]int, kernels.Conv2dParams) {
	p := c.p.Norm()
	ho := kernels.ConvOut(c.x[2], c.w[2], p.StrideH, p.PadH, p.DilationH)
	wo := kernels.ConvOut(c.x[3], c.w[3], p.StrideW, p.PadW, p.DilationW)
	return []int{c.x[0], c.w[0], ho, wo}, p
}

// convTaps calls f for every (sample, output channel, output pixel, tap)
// of c with the flat indices of the input element (−1 in the padding),
// the weight and the output.
func (c convCase) taps(f func(xi, wi, yi int)) {
	y, p := c.geom()
	n, cin, h, w := c.x[0], c.x[1], c.x[2], c.x[3]
	cout, cg, kh, kw := c.w[0], c.w[1], c.w[2], c.w[3]
	og := cout / p.Groups
	for b := 0; b < n; b++ {
		for o := 0; o < cout; o++ {
			g := o / og
			for oh := 0; oh < y[2]; oh++ {
				for ow := 0; ow < y[3]; ow++ {
					yi := ((b*cout+o)*y[2]+oh)*y[3] + ow
					for ci := 0; ci < cg; ci++ {
						for i := 0; i < kh; i++ {
							for j := 0; j < kw; j++ {
								ih, iw := oh*p.StrideH-p.PadH+i*p.DilationH, ow*p.StrideW-p.PadW+j*p.DilationW
								xi := -1
								if ih >= 0 && ih < h && iw >= 0 && iw < w {
									xi = ((b*cin+g*cg+ci)*h+ih)*w + iw
								}
								f(xi, ((o*cg+ci)*kh+i)*kw+j, yi)
							}
						}
					}
				}
			}
		}
	}
}

// refConv is c's forward in float64, with bias (optional).
func (c convCase) ref(xv, wv, bv []float64) []float64 {
	y, _ := c.geom()
	out := make([]float64, tensor.Numel(y))
	c.taps(func(xi, wi, yi int) {
		if xi >= 0 {
			out[yi] += xv[xi] * wv[wi]
		}
	})
	if bv != nil {
		per := y[2] * y[3]
		for i := range out {
			out[i] += bv[(i/per)%y[1]]
		}
	}
	return out
}

func checkConv2d(s *suite) {
	for _, c := range convCases2d {
		yshape, _ := c.geom()
		for _, d := range s.floats("Conv2d") {
			x, xv := s.in(d, c.x...)
			w, wv := s.in(d, c.w...)
			bias, bv := s.in(d, c.w[0])
			want := c.ref(xv, wv, bv)
			dst := s.out(d, yshape...)
			what := name("Conv2d", d, c.x, c.w, c.p)
			s.check(call{what: what, launch: func() { s.b.Conv2d(dst, x, w, bias, c.p) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], want, 2*tol(d))
			})
			dst = s.out(d, yshape...)
			noBias := c.ref(xv, wv, nil)
			s.check(call{what: what + " nil bias", launch: func() { s.b.Conv2d(dst, x, w, nil, c.p) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what+" nil bias", got[0], noBias, 2*tol(d))
			})

			dy, gv := s.in(d, yshape...)
			wantDx := make([]float64, len(xv))
			wantDw := make([]float64, len(wv))
			c.taps(func(xi, wi, yi int) {
				if xi >= 0 {
					wantDx[xi] += gv[yi] * wv[wi]
					wantDw[wi] += gv[yi] * xv[xi]
				}
			})
			dx := s.out(d, c.x...)
			what = name("Conv2dBackwardInput", d, c.x, c.w, c.p)
			s.check(call{what: what, launch: func() { s.b.Conv2dBackwardInput(dx, dy, w, c.p) }, writes: []*T{dx}}, func(got [][]float64) {
				s.close(what, got[0], wantDx, 2*tol(d))
			})
			dw := s.out(d, c.w...)
			what = name("Conv2dBackwardWeight", d, c.x, c.w, c.p)
			s.check(call{what: what, launch: func() { s.b.Conv2dBackwardWeight(dw, x, dy, c.p) }, writes: []*T{dw}}, func(got [][]float64) {
				s.close(what, got[0], wantDw, 4*tol(d))
			})
		}
	}
	s.panics("Conv2d", func() {
		s.b.Conv2d(s.out(tensor.F32, 1, 4, 6, 6), s.out(tensor.F32, 1, 3, 8, 8), s.out(tensor.F32, 4, 2, 3, 3), nil, kernels.Conv2dParams{})
	})
}

// affineAct is act(v·scale[o] + shift[o]) over y (shape [N, C, H, W]).
func affineAct(y []float64, shape []int, sc, sh []float64, act kernels.UnaryOp) []float64 {
	per := shape[2] * shape[3]
	out := make([]float64, len(y))
	for i, v := range y {
		o := (i / per) % shape[1]
		out[i] = refUnary(act, v*sc[o]+sh[o])
	}
	return out
}

func checkConvAffineAct(s *suite) {
	ca := s.b.(kernels.ConvAffineActer)
	for _, c := range convCases2d {
		yshape, _ := c.geom()
		for _, d := range s.floats("Conv2dAffineAct") {
			for _, act := range []kernels.UnaryOp{kernels.Relu, kernels.Silu} {
				x, xv := s.in(d, c.x...)
				w, wv := s.in(d, c.w...)
				sc, scv := s.in(d, c.w[0])
				sh, shv := s.in(d, c.w[0])
				want := affineAct(c.ref(xv, wv, nil), yshape, scv, shv, act)
				dst := s.out(d, yshape...)
				what := name("Conv2dAffineAct", act, d, c.x, c.w, c.p)
				s.check(call{what: what, launch: func() { ca.Conv2dAffineAct(dst, x, w, sc, sh, act, c.p) }, writes: []*T{dst}}, func(got [][]float64) {
					s.close(what, got[0], want, 2*tol(d))
				})
			}
		}
	}
}

// maxPool2x2 is the 2×2, stride-2 max pool of y ([N, C, H, W]) and the
// flat index of each maximum within its plane (the first in scan order;
// NaN wins).
func maxPool2x2(y []float64, shape []int) ([]float64, []float64) {
	pc := poolCase{x: shape, p: kernels.Pool2dParams{KernelH: 2, KernelW: 2}}
	return pc.refMax(y)
}

func checkConvAffineActPool(s *suite) {
	cp := s.b.(kernels.ConvAffineActPooler)
	for _, c := range convCases2d {
		yshape, _ := c.geom()
		if yshape[2] < 2 || yshape[3] < 2 {
			continue
		}
		pshape := []int{yshape[0], yshape[1], yshape[2] / 2, yshape[3] / 2}
		for _, d := range s.floats("Conv2dAffineActMaxPool2x2") {
			x, xv := s.in(d, c.x...)
			w, wv := s.in(d, c.w...)
			sc, scv := s.in(d, c.w[0])
			sh, shv := s.in(d, c.w[0])
			want, _ := maxPool2x2(affineAct(c.ref(xv, wv, nil), yshape, scv, shv, kernels.Relu), yshape)
			dst := s.out(d, pshape...)
			what := name("Conv2dAffineActMaxPool2x2", d, c.x, c.w, c.p)
			s.check(call{what: what, launch: func() { cp.Conv2dAffineActMaxPool2x2(dst, x, w, sc, sh, kernels.Relu, c.p) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], want, 2*tol(d))
			})
		}
	}
}
