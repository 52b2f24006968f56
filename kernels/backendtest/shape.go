package backendtest

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The shape family: Concat and Pad, and the optional ConcatMany and
// ZeroMany.

var shapeCases = []conformance{
	of(checkConcat, "Concat"),
	optional[kernels.ConcatManyer](checkConcatMany, "ConcatMany"),
	optional[kernels.ZeroManyer](checkZeroMany, "ZeroMany"),
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

// checkConcatMany: ConcatMany writes what a Concat per destination writes
// (a contiguous source, a transposed one, column blocks of wider
// matrices, along a middle axis, the last and the first), and panics on
// counts that do not match the sources.
func checkConcatMany(s *suite) {
	cm := s.b.(kernels.ConcatManyer)
	for _, d := range append(s.floats("ConcatMany"), tensor.I64) {
		a, av := s.in(d, 3, 2, 4)
		bt, bv := s.in(d, 4, 5, 3)
		b := bt.Permute(2, 1, 0) // [3, 5, 4]
		wide, wv := s.in(d, 3, 6)
		g, gv := s.in(d, 3, 1)
		r0, r0v := s.in(d, 2, 3)
		r1, r1v := s.in(d, 1, 3)
		want0 := make([]float64, 0, 3*7*4)
		for i := 0; i < 3; i++ {
			want0 = append(want0, av[i*8:i*8+8]...)
			for j := 0; j < 5; j++ {
				for k := 0; k < 4; k++ {
					want0 = append(want0, bv[(k*5+j)*3+i])
				}
			}
		}
		want1 := make([]float64, 0, 3*4)
		for i := 0; i < 3; i++ {
			want1 = append(want1, wv[i*6+2:i*6+5]...)
			want1 = append(want1, gv[i])
		}
		want2 := append(append([]float64(nil), r0v...), r1v...)
		want3 := make([]float64, 0, 4*3)
		for i := 0; i < 3; i++ {
			want3 = append(want3, wv[i*6+2:i*6+5]...)
		}
		want3 = append(want3, r1v...)
		what := name("ConcatMany", d)
		d0, d1 := s.out(d, 3, 7, 4), s.out(d, 3, 4)
		s.check(call{what: what + " along axis 1", launch: func() {
			cm.ConcatMany([]*T{d0, d1}, []*T{a, b, wide.Narrow(1, 2, 3), g}, []int{2, 2}, 1)
		}, writes: []*T{d0, d1}}, func(got [][]float64) {
			same(s.t, what+" along axis 1, destination 0", got[0], want0)
			same(s.t, what+" along axis 1, destination 1", got[1], want1)
		})
		d2, d3 := s.out(d, 3, 3), s.out(d, 4, 3)
		s.check(call{what: what + " along axis 0", launch: func() {
			cm.ConcatMany([]*T{d2, d3}, []*T{r0, r1, wide.Narrow(1, 2, 3), r1}, []int{2, 2}, 0)
		}, writes: []*T{d2, d3}}, func(got [][]float64) {
			same(s.t, what+" along axis 0, destination 0", got[0], want2)
			same(s.t, what+" along axis 0, destination 1", got[1], want3)
		})
		d4 := s.out(d, 3, 4)
		s.check(call{what: what + " along axis -1", launch: func() {
			cm.ConcatMany([]*T{d4}, []*T{wide.Narrow(1, 2, 3), g}, []int{2}, -1)
		}, writes: []*T{d4}}, func(got [][]float64) {
			same(s.t, what+" along axis -1", got[0], want1)
		})
	}
	s.panics("ConcatMany", func() {
		cm.ConcatMany([]*T{s.out(tensor.F32, 2, 5)}, []*T{s.out(tensor.F32, 2, 3), s.out(tensor.F32, 2, 2)}, []int{1}, 1)
	})
	s.panics("ConcatMany", func() { // a group reads another's destination
		a, b, x := s.out(tensor.F32, 2, 3), s.out(tensor.F32, 2, 3), s.out(tensor.F32, 2, 3)
		cm.ConcatMany([]*T{a, b}, []*T{x, a}, []int{1, 1}, 0)
	})
	s.panics("ConcatMany", func() { // two destinations overlap
		both := s.out(tensor.F32, 3, 3)
		cm.ConcatMany([]*T{both.Narrow(0, 0, 2), both.Narrow(0, 1, 2)}, []*T{s.out(tensor.F32, 2, 3), s.out(tensor.F32, 2, 3)}, []int{1, 1}, 0)
	})
}

// checkZeroMany: ZeroMany zeroes tensors of every float dtype and of
// int64, of one element to several thousand (past CUDA's block of zeros
// of 4 KiB, and not a multiple of it), among them a contiguous slice of
// a larger tensor whose other elements it leaves as they were; it
// panics on a non-contiguous destination.
func checkZeroMany(s *suite) {
	zm := s.b.(kernels.ZeroManyer)
	var dsts []*T
	var wants [][]float64
	for _, d := range append(s.floats("ZeroMany"), tensor.I64) {
		for _, n := range []int{1, 37, 3001} {
			x, _ := s.in(d, n)
			dsts, wants = append(dsts, x), append(wants, make([]float64, n))
		}
	}
	big, bv := s.in(tensor.F32, 5, 700)
	dsts = append(dsts, big.Narrow(0, 1, 3))
	want := append([]float64(nil), bv...)
	clear(want[700 : 4*700])
	s.check(call{what: "ZeroMany", launch: func() { zm.ZeroMany(dsts) }, writes: append(dsts[:len(dsts):len(dsts)], big)}, func(got [][]float64) {
		for i, w := range wants {
			same(s.t, fmt.Sprintf("ZeroMany destination %d", i), got[i], w)
		}
		same(s.t, "ZeroMany around a slice", got[len(got)-1], want)
	})
	s.panics("ZeroMany", func() { zm.ZeroMany([]*T{s.out(tensor.F32, 4, 6).Narrow(1, 1, 3)}) })
}
