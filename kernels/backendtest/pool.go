package backendtest

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The pool family: MaxPool2d, AvgPool2d and their gradients.

var poolCases = []conformance{
	of(checkMaxPool2d, "MaxPool2d", "MaxPool2dBackward"),
	of(checkAvgPool2d, "AvgPool2d", "AvgPool2dBackward"),
}

// poolCase is a pooling's input shape and params.
type poolCase struct {
	x []int
	p kernels.Pool2dParams
}

var poolCases2d = []poolCase{
	{[]int{2, 3, 8, 8}, kernels.Pool2dParams{KernelH: 2, KernelW: 2}},
	{[]int{2, 3, 7, 9}, kernels.Pool2dParams{KernelH: 2, KernelW: 2}},
	{[]int{1, 4, 7, 7}, kernels.Pool2dParams{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}},
	{[]int{2, 2, 6, 5}, kernels.Pool2dParams{KernelH: 3, KernelW: 2, StrideH: 1, StrideW: 1}},
	{[]int{1, 2, 5, 5}, kernels.Pool2dParams{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1, CountIncludePad: true}},
}

// out is the pooled shape.
func (c poolCase) out() []int {
	p := c.p.Norm()
	return []int{c.x[0], c.x[1], (c.x[2]+2*p.PadH-p.KernelH)/p.StrideH + 1, (c.x[3]+2*p.PadW-p.KernelW)/p.StrideW + 1}
}

// windows calls f for every output element with its window's clipped
// bounds in its plane and the count PyTorch's avg_pool2d divides by.
func (c poolCase) windows(f func(plane, yi, h0, h1, w0, w1 int, div float64)) {
	p := c.p.Norm()
	y := c.out()
	h, w := c.x[2], c.x[3]
	for pl := 0; pl < c.x[0]*c.x[1]; pl++ {
		for oh := 0; oh < y[2]; oh++ {
			for ow := 0; ow < y[3]; ow++ {
				h0, w0 := oh*p.StrideH-p.PadH, ow*p.StrideW-p.PadW
				h1, w1 := min(h0+p.KernelH, h+p.PadH), min(w0+p.KernelW, w+p.PadW)
				div := float64((h1 - h0) * (w1 - w0))
				h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
				if !p.CountIncludePad {
					div = float64((h1 - h0) * (w1 - w0))
				}
				f(pl, (pl*y[2]+oh)*y[3]+ow, h0, h1, w0, w1, div)
			}
		}
	}
}

// refMax is the max pool of x and the flat in-plane index of each
// maximum (the first in scan order; a NaN wins at once).
func (c poolCase) refMax(x []float64) (y, idx []float64) {
	out := c.out()
	y, idx = make([]float64, tensor.Numel(out)), make([]float64, tensor.Numel(out))
	h, w := c.x[2], c.x[3]
	c.windows(func(pl, yi, h0, h1, w0, w1 int, _ float64) {
		best, bi := math.Inf(-1), -1
		for i := h0; i < h1; i++ {
			for j := w0; j < w1; j++ {
				v := x[pl*h*w+i*w+j]
				if bi >= 0 && best != best {
					continue
				}
				if bi < 0 || v > best || v != v {
					best, bi = v, i*w+j
				}
			}
		}
		y[yi], idx[yi] = best, float64(bi)
	})
	return y, idx
}

func checkMaxPool2d(s *suite) {
	for _, c := range poolCases2d {
		ys := c.out()
		for _, d := range s.floats("MaxPool2d") {
			xv := s.normals(tensor.Numel(c.x))
			xv[1] = xv[0] // a tie
			xv[len(xv)-2] = math.NaN()
			x, xr := s.put(d, xv, c.x...)
			want, widx := c.refMax(xr)
			for _, idt := range []tensor.DType{tensor.I32, tensor.I64} {
				dst, arg := s.out(d, ys...), s.out(idt, ys...)
				what := name("MaxPool2d", d, idt, c.x, c.p)
				s.check(call{what: what, launch: func() { s.b.MaxPool2d(dst, arg, x, c.p) }, writes: []*T{dst, arg}}, func(got [][]float64) {
					s.close(what, got[0], want, tol(d))
					same(s.t, what+" argmax", got[1], widx)
				})
			}
			dst := s.out(d, ys...)
			what := name("MaxPool2d without argmax", d, c.x, c.p)
			s.check(call{what: what, launch: func() { s.b.MaxPool2d(dst, nil, x, c.p) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], want, tol(d))
			})

			arg, _ := s.put(tensor.I32, widx, ys...)
			dy, gv := s.in(d, ys...)
			per := c.x[2] * c.x[3]
			wantDx := make([]float64, len(xr))
			for i, a := range widx {
				wantDx[(i/(ys[2]*ys[3]))*per+int(a)] += gv[i]
			}
			dx := s.out(d, c.x...)
			what = name("MaxPool2dBackward", d, c.x, c.p)
			s.check(call{what: what, launch: func() { s.b.MaxPool2dBackward(dx, dy, arg, c.p) }, writes: []*T{dx}}, func(got [][]float64) {
				s.close(what, got[0], wantDx, 2*tol(d))
			})
		}
	}
	s.panics("MaxPool2d", func() {
		s.b.MaxPool2d(s.out(tensor.F32, 1, 1, 3, 3), nil, s.out(tensor.F32, 1, 1, 8, 8), kernels.Pool2dParams{KernelH: 2, KernelW: 2})
	})
}

func checkAvgPool2d(s *suite) {
	for _, c := range poolCases2d {
		ys := c.out()
		h, w := c.x[2], c.x[3]
		for _, d := range s.floats("AvgPool2d") {
			x, xv := s.in(d, c.x...)
			want := make([]float64, tensor.Numel(ys))
			c.windows(func(pl, yi, h0, h1, w0, w1 int, div float64) {
				var sum float64
				for i := h0; i < h1; i++ {
					for j := w0; j < w1; j++ {
						sum += xv[pl*h*w+i*w+j]
					}
				}
				want[yi] = sum / div
			})
			dst := s.out(d, ys...)
			what := name("AvgPool2d", d, c.x, c.p)
			s.check(call{what: what, launch: func() { s.b.AvgPool2d(dst, x, c.p) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], want, tol(d))
			})

			dy, gv := s.in(d, ys...)
			wantDx := make([]float64, len(xv))
			c.windows(func(pl, yi, h0, h1, w0, w1 int, div float64) {
				for i := h0; i < h1; i++ {
					for j := w0; j < w1; j++ {
						wantDx[pl*h*w+i*w+j] += gv[yi] / div
					}
				}
			})
			dx := s.out(d, c.x...)
			what = name("AvgPool2dBackward", d, c.x, c.p)
			s.check(call{what: what, launch: func() { s.b.AvgPool2dBackward(dx, dy, c.p) }, writes: []*T{dx}}, func(got [][]float64) {
				s.close(what, got[0], wantDx, 2*tol(d))
			})
		}
	}
}
