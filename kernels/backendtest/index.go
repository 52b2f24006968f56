package backendtest

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The index family: IndexSelect, IndexAdd, Gather and ScatterAdd.

var indexCases = []conformance{
	of(checkIndexSelect, "IndexSelect"),
	of(checkIndexAdd, "IndexAdd"),
	of(checkGather, "Gather"),
	of(checkScatterAdd, "ScatterAdd"),
}

// indices are k random indices in [0, n), every one at least once when
// k ≥ n and some repeated.
func (s *suite) indices(k, n int) []float64 {
	out := make([]float64, k)
	for i := range out {
		if i < n {
			out[i] = float64(i)
		} else {
			out[i] = float64(s.rng.IntN(n))
		}
	}
	s.rng.Shuffle(k, func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// selects are IndexSelect's and IndexAdd's geometries: the full tensor's
// shape, the axis and the index length.
var selects = []struct {
	shape   []int
	axis, k int
}{{[]int{6, 5}, 0, 9}, {[]int{3, 7, 4}, 1, 5}, {[]int{4, 6}, -1, 6}, {[]int{10, 33}, 0, 3}}

func checkIndexSelect(s *suite) {
	dts := append(s.floats("IndexSelect"), tensor.I64, tensor.I32)
	for _, c := range selects {
		a := (c.axis + len(c.shape)) % len(c.shape)
		outer, n, inner := kernels.Split3(c.shape, a)
		oshape := append([]int(nil), c.shape...)
		oshape[a] = c.k
		for _, d := range dts {
			for _, idt := range []tensor.DType{tensor.I64, tensor.I32} {
				iv := s.indices(c.k, n)
				index, _ := s.put(idt, iv, c.k)
				src, sv := s.put(d, s.uniform(tensor.Numel(c.shape), -50, 50), c.shape...)
				want := make([]float64, outer*c.k*inner)
				for o := 0; o < outer; o++ {
					for j := 0; j < c.k; j++ {
						for i := 0; i < inner; i++ {
							want[(o*c.k+j)*inner+i] = sv[(o*n+int(iv[j]))*inner+i]
						}
					}
				}
				dst := s.out(d, oshape...)
				what := name("IndexSelect", d, idt, c.shape, "axis", c.axis)
				s.check(call{what: what, launch: func() { s.b.IndexSelect(dst, src, c.axis, index) }, writes: []*T{dst}}, func(got [][]float64) {
					same(s.t, what, got[0], want)
				})
			}
		}
	}
	s.panics("IndexSelect", func() {
		s.b.IndexSelect(s.out(tensor.F32, 3, 5), s.out(tensor.F32, 6, 5), 0, s.out(tensor.I64, 4))
	})
}

func checkIndexAdd(s *suite) {
	for _, c := range selects {
		a := (c.axis + len(c.shape)) % len(c.shape)
		outer, n, inner := kernels.Split3(c.shape, a)
		sshape := append([]int(nil), c.shape...)
		sshape[a] = c.k
		for _, d := range s.floats("IndexAdd") {
			iv := s.indices(c.k, n)
			index, _ := s.put(tensor.I64, iv, c.k)
			src, sv := s.in(d, sshape...)
			dst, dv := s.in(d, c.shape...)
			want := append([]float64(nil), dv...)
			for o := 0; o < outer; o++ {
				for j := 0; j < c.k; j++ {
					for i := 0; i < inner; i++ {
						want[(o*n+int(iv[j]))*inner+i] += sv[(o*c.k+j)*inner+i]
					}
				}
			}
			what := name("IndexAdd", d, c.shape, "axis", c.axis)
			s.check(call{what: what, launch: func() { s.b.IndexAdd(dst, c.axis, index, src) }, writes: []*T{dst}, atomic: true}, func(got [][]float64) {
				s.close(what, got[0], want, 2*tol(d))
			})
		}
	}
}

// fibersOf calls f for every element of a tensor of shape (row-major
// index e) with the row-major index, in a tensor of shape big, of the
// element with e's coordinates but coordinate at along axis.
func fibersOf(shape, big []int, axis int, f func(e int, at func(int) int)) {
	st := tensor.ContiguousStrides(big)
	for e := 0; e < tensor.Numel(shape); e++ {
		base, r := 0, e
		for d := len(shape) - 1; d >= 0; d-- {
			c := r % shape[d]
			r /= shape[d]
			if d != axis {
				base += c * st[d]
			}
		}
		f(e, func(i int) int { return base + i*st[axis] })
	}
}

// gathers are Gather's and ScatterAdd's geometries: the big tensor's
// shape, the index's shape and the axis.
var gathers = []struct {
	big, index []int
	axis       int
}{{[]int{4, 6}, []int{4, 3}, 1}, {[]int{5, 3}, []int{7, 3}, 0}, {[]int{3, 4, 5}, []int{2, 4, 2}, 2}, {[]int{3, 4, 5}, []int{3, 6, 5}, -2}}

func checkGather(s *suite) {
	dts := append(s.floats("Gather"), tensor.I64)
	for _, c := range gathers {
		a := (c.axis + len(c.big)) % len(c.big)
		for _, d := range dts {
			for _, idt := range []tensor.DType{tensor.I64, tensor.I32} {
				iv := make([]float64, tensor.Numel(c.index))
				for i := range iv {
					iv[i] = float64(s.rng.IntN(c.big[a]))
				}
				index, _ := s.put(idt, iv, c.index...)
				src, sv := s.put(d, s.uniform(tensor.Numel(c.big), -50, 50), c.big...)
				want := make([]float64, len(iv))
				fibersOf(c.index, c.big, a, func(e int, at func(int) int) { want[e] = sv[at(int(iv[e]))] })
				dst := s.out(d, c.index...)
				what := name("Gather", d, idt, c.big, c.index, "axis", c.axis)
				s.check(call{what: what, launch: func() { s.b.Gather(dst, src, c.axis, index) }, writes: []*T{dst}}, func(got [][]float64) {
					same(s.t, what, got[0], want)
				})
			}
		}
	}
}

func checkScatterAdd(s *suite) {
	for _, c := range gathers {
		a := (c.axis + len(c.big)) % len(c.big)
		for _, d := range s.floats("ScatterAdd") {
			iv := make([]float64, tensor.Numel(c.index))
			for i := range iv {
				iv[i] = float64(s.rng.IntN(c.big[a]))
			}
			index, _ := s.put(tensor.I64, iv, c.index...)
			src, sv := s.in(d, c.index...)
			dst, dv := s.in(d, c.big...)
			want := append([]float64(nil), dv...)
			fibersOf(c.index, c.big, a, func(e int, at func(int) int) { want[at(int(iv[e]))] += sv[e] })
			what := name("ScatterAdd", d, c.big, c.index, "axis", c.axis)
			s.check(call{what: what, launch: func() { s.b.ScatterAdd(dst, c.axis, index, src) }, writes: []*T{dst}, atomic: true}, func(got [][]float64) {
				s.close(what, got[0], want, 2*tol(d))
			})
		}
	}
}
