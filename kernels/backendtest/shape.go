package backendtest

import (
	"github.com/esper-go/esper/tensor"
)

// The shape family: Concat and Pad.

var shapeCases = []conformance{
	of(checkConcat, "Concat"),
	of(checkPad, "Pad"),
}

func checkConcat(s *suite) {
	dts := append(s.floats("Concat"), tensor.I64)
	for _, d := range dts {
		// Along axis 1 of [3, ·, 4]: a contiguous source and a
		// transposed one.
		a, av := s.in(d, 3, 2, 4)
		bt, bv := s.in(d, 4, 5, 3) // b is its permutation [3, 5, 4]
		b := bt.Permute(2, 1, 0)
		want := make([]float64, 3*7*4)
		for i := 0; i < 3; i++ {
			for j := 0; j < 7; j++ {
				for k := 0; k < 4; k++ {
					if j < 2 {
						want[(i*7+j)*4+k] = av[(i*2+j)*4+k]
					} else {
						want[(i*7+j)*4+k] = bv[(k*5+(j-2))*3+i]
					}
				}
			}
		}
		dst := s.out(d, 3, 7, 4)
		what := name("Concat", d)
		s.check(call{what: what, launch: func() { s.b.Concat(dst, []*T{a, b}, 1) }, writes: []*T{dst}}, func(got [][]float64) {
			same(s.t, what, got[0], want)
		})
		// Along the last axis, given as −1.
		c, cv := s.in(d, 2, 3)
		f, fv := s.in(d, 2, 1)
		want = []float64{cv[0], cv[1], cv[2], fv[0], cv[3], cv[4], cv[5], fv[1]}
		dst = s.out(d, 2, 4)
		what = name("Concat axis -1", d)
		s.check(call{what: what, launch: func() { s.b.Concat(dst, []*T{c, f}, -1) }, writes: []*T{dst}}, func(got [][]float64) {
			same(s.t, what, got[0], want)
		})
		// Column blocks of wider matrices (rows strided: CUDA copies them
		// in its one launch), one of them from a rank-3 view, beside a
		// contiguous source.
		wide, wv := s.in(d, 3, 6)
		deep, dv := s.in(d, 2, 3, 5)
		g, gv := s.in(d, 3, 1)
		cols := wide.Narrow(1, 2, 3)
		rows := deep.Narrow(0, 1, 1).Reshape(3, 5).Narrow(1, 1, 2)
		want = make([]float64, 0, 3*6)
		for i := 0; i < 3; i++ {
			want = append(want, wv[i*6+2:i*6+5]...)
			want = append(want, gv[i])
			want = append(want, dv[15+i*5+1:15+i*5+3]...)
		}
		dst = s.out(d, 3, 6)
		what = name("Concat of column blocks", d)
		s.check(call{what: what, launch: func() { s.b.Concat(dst, []*T{cols, g, rows}, 1) }, writes: []*T{dst}}, func(got [][]float64) {
			same(s.t, what, got[0], want)
		})
	}
	s.panics("Concat", func() { s.b.Concat(s.out(tensor.F32, 2, 5), []*T{s.out(tensor.F32, 2, 3), s.out(tensor.F32, 3, 2)}, 1) })
}

func checkPad(s *suite) {
	dts := append(s.floats("Pad"), tensor.I32)
	for _, d := range dts {
		x, xv := s.in(d, 2, 3, 4)
		pads := []int{0, 1, 2, 0, 1, 3}
		ds := []int{3, 5, 8}
		want := make([]float64, tensor.Numel(ds))
		val := -2.0
		for i := range want {
			want[i] = val
		}
		for i := 0; i < 2; i++ {
			for j := 0; j < 3; j++ {
				for k := 0; k < 4; k++ {
					want[((i+pads[0])*ds[1]+j+pads[2])*ds[2]+k+pads[4]] = xv[(i*3+j)*4+k]
				}
			}
		}
		dst := s.out(d, ds...)
		what := name("Pad", d)
		s.check(call{what: what, launch: func() { s.b.Pad(dst, x, pads, val) }, writes: []*T{dst}}, func(got [][]float64) {
			same(s.t, what, got[0], want)
		})
	}
	s.panics("Pad", func() { s.b.Pad(s.out(tensor.F32, 3, 3), s.out(tensor.F32, 2, 2), []int{1, 1, 1}, 0) })
}
