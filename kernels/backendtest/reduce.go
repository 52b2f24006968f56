package backendtest

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The reduce family: Reduce, ArgMax and CountCorrect.

var reduceCases = []conformance{
	of(checkReduce, "Reduce"),
	of(checkArgMax, "ArgMax"),
	of(checkCountCorrect, "CountCorrect"),
}

// lines groups the row-major values of x (shape) by the element of the
// keep-dims result they reduce into (axes marked in red), in order.
func lines(x []float64, shape []int, red []bool) [][]float64 {
	oshape := make([]int, len(shape))
	for i, d := range shape {
		oshape[i] = d
		if red[i] {
			oshape[i] = 1
		}
	}
	out := make([][]float64, tensor.Numel(oshape))
	for i, v := range x {
		o, st, j := 0, 1, i
		for d := len(shape) - 1; d >= 0; d-- {
			c := j % shape[d]
			j /= shape[d]
			if !red[d] {
				o += c * st
			}
			st *= oshape[d]
		}
		out[o] = append(out[o], v)
	}
	return out
}

// refReduce is op over one line, in float64 (max and min let NaN win).
func refReduce(op kernels.ReduceOp, g []float64) float64 {
	switch op {
	case kernels.Sum, kernels.Mean:
		var s float64
		for _, v := range g {
			s += v
		}
		if op == kernels.Mean {
			s /= float64(len(g))
		}
		return s
	case kernels.Max, kernels.Min:
		m := g[0]
		for _, v := range g {
			if v != v {
				return v
			}
			if (op == kernels.Max && v > m) || (op == kernels.Min && v < m) {
				m = v
			}
		}
		return m
	case kernels.LogSumExp:
		m := math.Inf(-1)
		for _, v := range g {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range g {
			s += math.Exp(v - m)
		}
		return m + math.Log(s)
	}
	panic("backendtest: unknown reduce op")
}

func checkReduce(s *suite) {
	for _, c := range []struct {
		shape, axes []int
	}{
		{[]int{5, 7}, []int{1}},
		{[]int{5, 7}, []int{0}},
		{[]int{5, 7}, []int{0, 1}},
		{[]int{3, 4, 5}, []int{1}},
		{[]int{3, 4, 5}, []int{0, 2}},
		{[]int{2, 1, 300}, []int{-1}},
		{[]int{6, 1, 3}, []int{1}},
		{[]int{4, 3, 2, 5}, []int{1, 3}},
		{[]int{7}, []int{0}},
		{[]int{2, 3}, nil},
		{[]int{10000, 3}, []int{0}},
		{[]int{3, 9000}, []int{1}},
		{[]int{2, 130, 70}, []int{0, 1, 2}},
	} {
		red := make([]bool, len(c.shape))
		for _, a := range c.axes {
			red[(a+len(c.shape))%len(c.shape)] = true
		}
		oshape := make([]int, len(c.shape))
		for i, d := range c.shape {
			oshape[i] = d
			if red[i] {
				oshape[i] = 1
			}
		}
		for _, op := range kernels.ReduceOps() {
			for _, d := range s.floats("Reduce") {
				x, xv := s.in(d, c.shape...)
				groups := lines(xv, c.shape, red)
				want := make([]float64, len(groups))
				for i, g := range groups {
					want[i] = refReduce(op, g)
				}
				dst := s.out(d, oshape...)
				what := name("Reduce", op, d, c.shape, "axes", c.axes)
				s.check(call{what: what, launch: func() { s.b.Reduce(op, dst, x, c.axes) }, writes: []*T{dst}}, func(got [][]float64) {
					s.close(what, got[0], want, 2*tol(d))
				})
			}
		}
	}
	s.panics("Reduce", func() { s.b.Reduce(kernels.Sum, s.out(tensor.F32, 3), s.out(tensor.F32, 3, 4), []int{1}) })
}

// argMaxOf is the index of the first maximum of g, a NaN counting as the
// maximum.
func argMaxOf(g []float64) int {
	bi := 0
	for k, v := range g {
		if v != v {
			return k
		}
		if v > g[bi] {
			bi = k
		}
	}
	return bi
}

func checkArgMax(s *suite) {
	for _, c := range []struct {
		shape []int
		axis  int
	}{{[]int{6, 9}, 1}, {[]int{6, 9}, 0}, {[]int{3, 5, 4}, 1}, {[]int{3, 5, 4}, -1}, {[]int{2, 700}, 1}} {
		a := (c.axis + len(c.shape)) % len(c.shape)
		red := make([]bool, len(c.shape))
		red[a] = true
		oshape := append([]int(nil), c.shape...)
		oshape[a] = 1
		for _, d := range s.floats("ArgMax") {
			v := s.normals(tensor.Numel(c.shape))
			v[1] = v[0] // a tie or two
			v[len(v)-1] = math.NaN()
			x, xv := s.put(d, v, c.shape...)
			groups := lines(xv, c.shape, red)
			want := make([]float64, len(groups))
			for i, g := range groups {
				want[i] = float64(argMaxOf(g))
			}
			dst := s.out(tensor.I64, oshape...)
			what := name("ArgMax", d, c.shape, "axis", c.axis)
			s.check(call{what: what, launch: func() { s.b.ArgMax(dst, x, c.axis) }, writes: []*T{dst}}, func(got [][]float64) {
				same(s.t, what, got[0], want)
			})
		}
	}
}

func checkCountCorrect(s *suite) {
	for _, d := range s.floats("CountCorrect") {
		for _, idt := range []tensor.DType{tensor.I64, tensor.I32} {
			n, c := 40, 7
			lv := s.normals(n * c)
			lv[2*c+1] = lv[2*c] // a tie in row 2
			lv[5*c+3] = math.NaN()
			logits, lr := s.put(d, lv, n, c)
			tv := make([]float64, n)
			for i := range tv {
				tv[i] = float64(s.rng.IntN(c))
				if i%3 == 0 {
					tv[i] = float64(argMaxOf(lr[i*c : (i+1)*c])) // enough hits
				}
			}
			target, _ := s.put(idt, tv, n)
			av := s.uniform(n, 0, 3)
			for i := range av {
				av[i] = math.Floor(av[i])
			}
			acc, _ := s.put(tensor.F32, av, n)
			want := make([]float64, n)
			for i := range want {
				want[i] = av[i]
				if argMaxOf(lr[i*c:(i+1)*c]) == int(tv[i]) {
					want[i]++
				}
			}
			what := name("CountCorrect", d, idt)
			s.check(call{what: what, launch: func() { s.b.CountCorrect(acc, logits, target) }, writes: []*T{acc}}, func(got [][]float64) {
				same(s.t, what, got[0], want)
			})
		}
	}
}
