package backendtest

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The elementwise family: Fill, Copy, Unary, UnaryBackward, Binary,
// BinaryScalar, Where, Clamp and the optional ChannelAxpyer.

var elementwiseCases = []conformance{
	of(checkFill, "Fill"),
	of(checkCopy, "Copy"),
	of(checkUnary, "Unary"),
	of(checkUnaryBackward, "UnaryBackward"),
	of(checkBinary, "Binary"),
	of(checkBinaryScalar, "BinaryScalar"),
	of(checkWhere, "Where"),
	of(checkClamp, "Clamp"),
	optional[kernels.ChannelAxpyer](checkChannelAxpy, "ChannelAxpy", "ChannelAxpyBackward"),
	optional[kernels.ScaleActAdder](checkScaleActAdd, "ScaleActAdd"),
}

// allDTypes are the dtypes Fill and Copy take: all of them.
var allDTypes = []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.F16, tensor.I64, tensor.I32, tensor.Bool}

func checkFill(s *suite) {
	for _, d := range allDTypes {
		v := 1.0 / 3
		switch {
		case d == tensor.Bool:
			v = 1
		case d.IsInt():
			v = -3
		}
		x := s.out(d, 3, 5)
		want := tensor.Full(d, v, 3, 5).Float64s()
		s.check(call{what: name("Fill", d), launch: func() { s.b.Fill(x, v) }, writes: []*T{x}}, func(got [][]float64) {
			same(s.t, name("Fill", d), got[0], want)
		})
	}
}

func checkCopy(s *suite) {
	// Every pair of dtypes between contiguous tensors, with fractions
	// and negatives (truncated into integers), zeros (false) and values
	// that round in the half types.
	vals := []float64{0, 1, -1, 2.75, -3.5, 0.1, 65, -100.25, 1.0 / 3, 7}
	for _, sd := range allDTypes {
		for _, dd := range allDTypes {
			src, _ := s.put(sd, vals, 2, 5)
			dst := s.out(dd, 2, 5)
			want := tensor.Empty(dd, 2, 5)
			tensor.CopyInto(want, tensor.FromFloat64s(sd, vals, 2, 5))
			s.check(call{what: name("Copy", sd, "to", dd), launch: func() { s.b.Copy(dst, src) }, writes: []*T{dst}}, func(got [][]float64) {
				same(s.t, name("Copy", sd, "to", dd), got[0], want.Float64s())
			})
		}
	}
	// Strided views on both sides: a permuted, narrowed and expanded
	// source into a narrowed destination.
	for _, d := range allDTypes {
		base := s.normals(4 * 6)
		for i := range base {
			base[i] = math.Round(base[i]*100) / 8
		}
		src, _ := s.put(d, base, 4, 6)
		host := tensor.FromFloat64s(d, base, 4, 6)
		view := func(x *T) *T { return x.Permute(1, 0).Narrow(0, 1, 4).Narrow(1, 1, 1).Expand(4, 3) }
		dst := s.out(d, 4, 5)
		want := tensor.FromFloat64s(d, s.get(dst), 4, 5)
		tensor.CopyInto(want.Narrow(1, 1, 3), view(host))
		s.check(call{what: name("Copy strided", d), launch: func() { s.b.Copy(dst.Narrow(1, 1, 3), view(src)) }, writes: []*T{dst}}, func(got [][]float64) {
			same(s.t, name("Copy strided", d), got[0], want.Float64s())
		})
	}
}

// refUnary is op(v) in float64.
func refUnary(op kernels.UnaryOp, v float64) float64 {
	switch op {
	case kernels.Neg:
		return -v
	case kernels.Abs:
		return math.Abs(v)
	case kernels.Exp:
		return math.Exp(v)
	case kernels.Log:
		return math.Log(v)
	case kernels.Sqrt:
		return math.Sqrt(v)
	case kernels.Rsqrt:
		return 1 / math.Sqrt(v)
	case kernels.Square:
		return v * v
	case kernels.Recip:
		return 1 / v
	case kernels.Sign:
		switch {
		case v > 0:
			return 1
		case v < 0:
			return -1
		}
		return 0
	case kernels.Relu:
		return math.Max(v, 0)
	case kernels.GeluTanh:
		return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
	case kernels.GeluErf:
		return 0.5 * v * (1 + math.Erf(v/math.Sqrt2))
	case kernels.Silu:
		return v / (1 + math.Exp(-v))
	case kernels.Sigmoid:
		return 1 / (1 + math.Exp(-v))
	case kernels.Tanh:
		return math.Tanh(v)
	case kernels.Softplus:
		if v > 20 {
			return v
		}
		return math.Log1p(math.Exp(v))
	}
	panic("backendtest: unknown unary op")
}

// refUnaryGrad is op'(v) in float64 (0 for Sign).
func refUnaryGrad(op kernels.UnaryOp, v float64) float64 {
	switch op {
	case kernels.Neg:
		return -1
	case kernels.Abs, kernels.Sign:
		if op == kernels.Sign {
			return 0
		}
		return refUnary(kernels.Sign, v)
	case kernels.Exp:
		return math.Exp(v)
	case kernels.Log:
		return 1 / v
	case kernels.Sqrt:
		return 1 / (2 * math.Sqrt(v))
	case kernels.Rsqrt:
		return -0.5 / (v * math.Sqrt(v))
	case kernels.Square:
		return 2 * v
	case kernels.Recip:
		return -1 / (v * v)
	case kernels.Relu:
		if v > 0 {
			return 1
		}
		return 0
	case kernels.GeluTanh:
		k, a := math.Sqrt(2/math.Pi), 0.044715
		t := math.Tanh(k * (v + a*v*v*v))
		return 0.5*(1+t) + 0.5*v*(1-t*t)*k*(1+3*a*v*v)
	case kernels.GeluErf:
		return 0.5*(1+math.Erf(v/math.Sqrt2)) + v*math.Exp(-v*v/2)/math.Sqrt(2*math.Pi)
	case kernels.Silu:
		sg := 1 / (1 + math.Exp(-v))
		return sg * (1 + v*(1-sg))
	case kernels.Sigmoid:
		sg := 1 / (1 + math.Exp(-v))
		return sg * (1 - sg)
	case kernels.Tanh:
		t := math.Tanh(v)
		return 1 - t*t
	case kernels.Softplus:
		if v > 20 {
			return 1
		}
		return 1 / (1 + math.Exp(-v))
	}
	panic("backendtest: unknown unary op")
}

// unaryInputs are n inputs for op: positive (at least 0.2) for the ops
// defined there, one of them past Softplus's linear threshold.
func (s *suite) unaryInputs(op kernels.UnaryOp, n int) []float64 {
	v := s.normals(n)
	for i := range v {
		if op == kernels.Log || op == kernels.Sqrt || op == kernels.Rsqrt || op == kernels.Recip {
			v[i] = math.Abs(v[i]) + 0.2
		}
		v[i] *= 2
	}
	v[0] = 25
	if op == kernels.Exp {
		v[0] = 5
	}
	return v
}

func checkUnary(s *suite) {
	for _, op := range kernels.UnaryOps() {
		for _, d := range s.floats("Unary") {
			for _, shape := range [][]int{{1}, {5, 33}, {70001}} {
				x, xv := s.put(d, s.unaryInputs(op, tensor.Numel(shape)), shape...)
				want := make([]float64, len(xv))
				for i, v := range xv {
					want[i] = refUnary(op, v)
				}
				y := s.out(d, shape...)
				what := name("Unary", op, d, shape)
				s.check(call{what: what, launch: func() { s.b.Unary(op, y, x) }, writes: []*T{y}}, func(got [][]float64) {
					s.close(what, got[0], want, tol(d))
				})
			}
		}
	}
	// NaN stays NaN through every op (the CPU's float64 and float32
	// paths both keep it: ReLU and Sign included).
	for _, op := range kernels.UnaryOps() {
		for _, d := range s.floats("Unary") {
			vals := s.unaryInputs(op, 3)
			vals[1] = math.NaN()
			x, xv := s.put(d, vals, 3)
			y, _ := s.put(d, []float64{-7, -7, -7}, 3) // a finite poison: NaN would pass unwritten
			what := name("Unary NaN", op, d)
			s.check(call{what: what, launch: func() { s.b.Unary(op, y, x) }, writes: []*T{y}}, func(got [][]float64) {
				if !math.IsNaN(got[0][1]) {
					s.t.Errorf("%s: NaN in gave %v, want NaN", what, got[0][1])
				}
				s.close(what+" (the other elements)", []float64{got[0][0], got[0][2]}, []float64{refUnary(op, xv[0]), refUnary(op, xv[2])}, tol(d))
			})
		}
	}
	// dst may alias x.
	for _, d := range s.floats("Unary") {
		x, xv := s.in(d, 4, 7)
		want := make([]float64, len(xv))
		for i, v := range xv {
			want[i] = math.Tanh(v)
		}
		s.check(call{what: name("Unary in place", d), launch: func() { s.b.Unary(kernels.Tanh, x, x) }, writes: []*T{x}}, func(got [][]float64) {
			s.close(name("Unary in place", d), got[0], want, tol(d))
		})
	}
	s.panics("Unary", func() { s.b.Unary(kernels.Relu, s.out(tensor.F32, 2, 3), s.out(tensor.F32, 3, 2)) })
}

func checkUnaryBackward(s *suite) {
	for _, op := range kernels.UnaryOps() {
		for _, d := range s.floats("UnaryBackward") {
			xvals := s.unaryInputs(op, 3*17)
			x, xv := s.put(d, xvals, 3, 17)
			dy, gv := s.in(d, 3, 17)
			yvals := make([]float64, len(xv))
			for i, v := range xv {
				yvals[i] = refUnary(op, v)
			}
			y, _ := s.put(d, yvals, 3, 17)
			want := make([]float64, len(xv))
			for i, v := range xv {
				want[i] = gv[i] * refUnaryGrad(op, v)
			}
			for _, withY := range []*T{nil, y} {
				dx := s.out(d, 3, 17)
				what := name("UnaryBackward", op, d, "with y", withY != nil)
				s.check(call{what: what, launch: func() { s.b.UnaryBackward(op, dx, x, withY, dy) }, writes: []*T{dx}}, func(got [][]float64) {
					s.close(what, got[0], want, 4*tol(d))
				})
			}
			if op.UsesOutput() {
				// y alone suffices for the ops that reuse their output.
				dx := s.out(d, 3, 17)
				what := name("UnaryBackward", op, d, "from y alone")
				s.check(call{what: what, launch: func() { s.b.UnaryBackward(op, dx, nil, y, dy) }, writes: []*T{dx}}, func(got [][]float64) {
					s.close(what, got[0], want, 4*tol(d))
				})
			}
		}
	}
}

// refBinary is x op y in float64 (1 or 0 for the comparisons).
func refBinary(op kernels.BinaryOp, x, y float64) float64 {
	b := func(c bool) float64 {
		if c {
			return 1
		}
		return 0
	}
	switch op {
	case kernels.Add:
		return x + y
	case kernels.Sub:
		return x - y
	case kernels.Mul:
		return x * y
	case kernels.Div:
		return x / y
	case kernels.Pow:
		return math.Pow(x, y)
	case kernels.Maximum:
		if x != x || x > y {
			return x
		}
		return y
	case kernels.Minimum:
		if x != x || x < y {
			return x
		}
		return y
	case kernels.Eq:
		return b(x == y)
	case kernels.Ne:
		return b(x != y)
	case kernels.Lt:
		return b(x < y)
	case kernels.Le:
		return b(x <= y)
	case kernels.Gt:
		return b(x > y)
	case kernels.Ge:
		return b(x >= y)
	}
	panic("backendtest: unknown binary op")
}

// bcastAt is the row-major index into a tensor of shape from of the
// element that broadcasts to element i of a tensor of shape to.
func bcastAt(from, to []int, i int) int {
	idx, st := 0, 1
	lead := len(to) - len(from)
	for d := len(to) - 1; d >= 0; d-- {
		c := i % to[d]
		i /= to[d]
		if d >= lead {
			f := from[d-lead]
			if f != 1 {
				idx += c * st
			}
			st *= f
		}
	}
	return idx
}

// binaryOperands are the operand values of op: positive bases for Pow,
// divisors away from zero, some equal pairs for the comparisons.
func (s *suite) binaryOperands(op kernels.BinaryOp, na, nb int) (a, b []float64) {
	a, b = s.normals(na), s.normals(nb)
	if op == kernels.Pow {
		for i := range a {
			a[i] = math.Abs(a[i]) + 0.1
		}
	}
	if op == kernels.Div {
		for i := range b {
			b[i] = math.Copysign(math.Abs(b[i])+0.5, b[i])
		}
	}
	if op.IsComparison() {
		for i := 0; i < min(na, nb); i += 3 {
			b[i] = a[i]
		}
	}
	return a, b
}

var binaryShapes = []struct{ dst, a, b []int }{
	{[]int{2, 3}, []int{2, 3}, []int{2, 3}},
	{[]int{2, 3}, []int{2, 3}, []int{3}},
	{[]int{4, 3, 5}, []int{4, 1, 5}, []int{3, 1}},
	{[]int{2, 3}, []int{1}, []int{2, 3}},
	{[]int{7, 1, 9}, []int{7, 1, 9}, []int{9}},
	{[]int{33, 65}, []int{33, 65}, []int{33, 1}},
	{[]int{300, 257}, []int{300, 257}, []int{300, 1}},
	{[]int{3, 40000}, []int{40000}, []int{3, 40000}},
}

func checkBinary(s *suite) {
	for _, op := range kernels.BinaryOps() {
		for _, d := range s.floats("Binary") {
			dd := d
			if op.IsComparison() {
				dd = tensor.Bool
			}
			for _, sh := range binaryShapes {
				av, bv := s.binaryOperands(op, tensor.Numel(sh.a), tensor.Numel(sh.b))
				a, ar := s.put(d, av, sh.a...)
				b, br := s.put(d, bv, sh.b...)
				n := tensor.Numel(sh.dst)
				want := make([]float64, n)
				for i := range want {
					want[i] = refBinary(op, ar[bcastAt(sh.a, sh.dst, i)], br[bcastAt(sh.b, sh.dst, i)])
				}
				dst := s.out(dd, sh.dst...)
				what := name("Binary", op, d, sh.a, sh.b)
				s.check(call{what: what, launch: func() { s.b.Binary(op, dst, a, b) }, writes: []*T{dst}}, func(got [][]float64) {
					s.close(what, got[0], want, tol(d))
				})
			}
			// Strided operands: a transposed a, an expanded b.
			av, bv := s.binaryOperands(op, 12, 4)
			a, ar := s.put(d, av, 3, 4)
			b, br := s.put(d, bv, 1, 4)
			want := make([]float64, 12)
			for i := range want {
				r, c := i/3, i%3
				want[i] = refBinary(op, ar[c*4+r], br[r])
			}
			dst := s.out(dd, 4, 3)
			what := name("Binary strided", op, d)
			s.check(call{what: what, launch: func() { s.b.Binary(op, dst, a.Permute(1, 0), b.Permute(1, 0).Expand(4, 3)) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], want, tol(d))
			})
		}
	}
	s.panics("Binary", func() {
		s.b.Binary(kernels.Add, s.out(tensor.F32, 2, 3), s.out(tensor.F32, 2, 3), s.out(tensor.F32, 4))
	})
}

func checkBinaryScalar(s *suite) {
	for _, op := range kernels.BinaryOps() {
		for _, d := range s.floats("BinaryScalar") {
			dd := d
			if op.IsComparison() {
				dd = tensor.Bool
			}
			for _, swap := range []bool{false, true} {
				av, _ := s.binaryOperands(op, 20, 1)
				if swap && op == kernels.Div {
					for i := range av {
						av[i] = math.Copysign(math.Abs(av[i])+0.5, av[i])
					}
				}
				sc := 1.75
				if op.IsComparison() {
					av[3] = sc
				}
				a, ar := s.put(d, av, 4, 5)
				want := make([]float64, len(ar))
				for i, v := range ar {
					if swap {
						want[i] = refBinary(op, sc, v)
					} else {
						want[i] = refBinary(op, v, sc)
					}
				}
				dst := s.out(dd, 4, 5)
				what := name("BinaryScalar", op, d, "swap", swap)
				s.check(call{what: what, launch: func() { s.b.BinaryScalar(op, dst, a, sc, swap) }, writes: []*T{dst}}, func(got [][]float64) {
					s.close(what, got[0], want, tol(d))
				})
			}
		}
	}
}

func checkWhere(s *suite) {
	for _, d := range s.floats("Where") {
		cv := make([]float64, 4*6)
		for i := range cv {
			cv[i] = float64(s.rng.IntN(2))
		}
		cond, _ := s.put(tensor.Bool, cv, 4, 1, 6)
		a, ar := s.in(d, 4, 5, 6)
		b, br := s.in(d, 5, 1)
		dshape := []int{4, 5, 6}
		want := make([]float64, 4*5*6)
		for i := range want {
			if cv[bcastAt([]int{4, 1, 6}, dshape, i)] != 0 {
				want[i] = ar[i]
			} else {
				want[i] = br[bcastAt([]int{5, 1}, dshape, i)]
			}
		}
		dst := s.out(d, dshape...)
		s.check(call{what: name("Where", d), launch: func() { s.b.Where(dst, cond, a, b) }, writes: []*T{dst}}, func(got [][]float64) {
			same(s.t, name("Where", d), got[0], want)
		})
	}
}

func checkClamp(s *suite) {
	for _, d := range s.floats("Clamp") {
		xv := s.normals(30)
		xv[4] = math.NaN()
		x, xr := s.put(d, xv, 5, 6)
		lo, hi := -0.5, 0.75
		want := make([]float64, len(xr))
		for i, v := range xr {
			want[i] = v
			if v < lo {
				want[i] = lo
			} else if v > hi {
				want[i] = hi
			}
		}
		dst := s.out(d, 5, 6)
		s.check(call{what: name("Clamp", d), launch: func() { s.b.Clamp(dst, x, lo, hi) }, writes: []*T{dst}}, func(got [][]float64) {
			s.close(name("Clamp", d), got[0], want, tol(d))
		})
	}
}

func checkChannelAxpy(s *suite) {
	ca := s.b.(kernels.ChannelAxpyer)
	for _, d := range s.floats("ChannelAxpy", tensor.F64, tensor.F32) {
		for _, sc := range []int{3, 1} {
			shape := []int{2, 3, 4, 5}
			x, xv := s.in(d, shape...)
			y, yv := s.in(d, shape...)
			sv, svr := s.in(d, sc)
			ch := func(i int) int {
				if sc == 1 {
					return 0
				}
				return (i / 20) % 3
			}
			want := make([]float64, len(xv))
			for i := range want {
				want[i] = xv[i] + svr[ch(i)]*yv[i]
			}
			dst := s.out(d, shape...)
			what := name("ChannelAxpy", d, "s", sc)
			s.check(call{what: what, launch: func() { ca.ChannelAxpy(dst, x, y, sv) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], want, tol(d))
			})
			g, gv := s.in(d, shape...)
			wantDy := make([]float64, len(gv))
			wantDs := make([]float64, sc)
			for i := range gv {
				wantDy[i] = svr[ch(i)] * gv[i]
				wantDs[ch(i)] += gv[i] * yv[i]
			}
			dy, ds := s.out(d, shape...), s.out(d, sc)
			what = name("ChannelAxpyBackward", d, "s", sc)
			s.check(call{what: what, launch: func() { ca.ChannelAxpyBackward(dy, ds, g, y, sv) }, writes: []*T{dy, ds}}, func(got [][]float64) {
				s.close(what+" dy", got[0], wantDy, tol(d))
				s.close(what+" ds", got[1], wantDs, 4*tol(d))
			})
		}
	}
}

// checkScaleActAdd: dst = act(s·x) + r for GELU, ReLU and Tanh, with and
// without a scale and a residual, small and past a GPU's grid, within
// the tolerance of the three ops it stands for.
func checkScaleActAdd(s *suite) {
	sa := s.b.(kernels.ScaleActAdder)
	for _, d := range s.floats("ScaleActAdd", tensor.F64, tensor.F32) {
		for _, act := range []kernels.UnaryOp{kernels.GeluErf, kernels.Relu, kernels.Tanh} {
			for _, n := range []int{7, 70001} {
				for _, sc := range []float64{1, 1.0 / 3} {
					for _, res := range []bool{true, false} {
						x, xv := s.in(d, n)
						var r *T
						var rv []float64
						if res {
							r, rv = s.in(d, n)
						}
						want := make([]float64, n)
						for i, v := range xv {
							want[i] = refUnary(act, sc*v)
							if res {
								want[i] += rv[i]
							}
						}
						dst := s.out(d, n)
						what := name("ScaleActAdd", d, act, n, sc, res)
						s.check(call{what: what, launch: func() { sa.ScaleActAdd(dst, x, sc, act, r) }, writes: []*T{dst}}, func(got [][]float64) {
							s.close(what, got[0], want, 4*tol(d))
						})
					}
				}
			}
		}
	}
}
