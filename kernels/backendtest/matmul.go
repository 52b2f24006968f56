package backendtest

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The matmul family: MatMul, MatMulBias, MatMulBiasAct,
// SetMatmulPrecision and the optional GradAccumulator.

var matmulCases = []conformance{
	of(checkMatMul, "MatMul"),
	of(checkMatMulBias, "MatMulBias", "MatMulBiasAct"),
	of(checkSetMatmulPrecision, "SetMatmulPrecision"),
	optional[kernels.GradAccumulator](checkGradAccumulator, "MatMulAdd", "SumRowsAdd"),
	optional[kernels.LinearGradAccumulator](checkLinearGradAccumulator, "LinearGradAdd"),
	optional[kernels.LinearBackwardAdder](checkLinearBackwardAdder, "LinearBackwardAdd", "LinearBackwardAccumulate"),
	optional[kernels.ReluHeadser](checkReluHeads, "ReluHeads"),
	optional[kernels.MatMulsJoiner](checkMatMulsJoiner, "MatMulsT"),
}

// product is a product's shapes: a and b as stored, dst, and the flags.
type product struct {
	a, b, dst      []int
	transA, transB bool
}

var products = []product{
	{[]int{5, 7}, []int{7, 3}, []int{5, 3}, false, false},
	{[]int{7, 5}, []int{7, 3}, []int{5, 3}, true, false},
	{[]int{5, 7}, []int{3, 7}, []int{5, 3}, false, true},
	{[]int{7, 5}, []int{3, 7}, []int{5, 3}, true, true},
	{[]int{4, 16}, []int{4, 16}, []int{4, 4}, false, true},
	{[]int{33, 70}, []int{70, 20}, []int{33, 20}, false, false},
	// K = 40, both transposed: CUDA's warp-per-element small product.
	{[]int{40, 9}, []int{11, 40}, []int{9, 11}, true, true},
	{[]int{2, 5, 7}, []int{2, 7, 3}, []int{2, 5, 3}, false, false},
	{[]int{2, 5, 7}, []int{7, 3}, []int{2, 5, 3}, false, false},
	{[]int{5, 7}, []int{3, 4, 7}, []int{3, 5, 4}, false, true},
	{[]int{3, 7, 5}, []int{3, 6, 7}, []int{3, 5, 6}, true, true},
	// K above CUDA's one-launch small product with its epilogue
	// (gemm_small_f32), which the 2-D products above take.
	{[]int{6, 300}, []int{5, 300}, []int{6, 5}, false, true},
	// K within a thread's walk but M·N·K above gemmSmallMACs: an
	// encoder of W2's policy (on CUDA gemm_small_f32 all the same).
	{[]int{70, 23}, []int{130, 23}, []int{70, 130}, false, true},
}

// refMatMul is p's product of av and bv in float64.
func refMatMul(p product, av, bv []float64) []float64 {
	r := len(p.dst)
	m, n := p.dst[r-2], p.dst[r-1]
	k := p.a[len(p.a)-1]
	if p.transA {
		k = p.a[len(p.a)-2]
	}
	batch := 1
	if r == 3 {
		batch = p.dst[0]
	}
	out := make([]float64, batch*m*n)
	at := func(bi, i, j int) float64 { // op(a)[bi, i, j]
		base := 0
		if len(p.a) == 3 {
			base = bi * p.a[1] * p.a[2]
		}
		cols := p.a[len(p.a)-1]
		if p.transA {
			return av[base+j*cols+i]
		}
		return av[base+i*cols+j]
	}
	bt := func(bi, i, j int) float64 { // op(b)[bi, i, j]
		base := 0
		if len(p.b) == 3 {
			base = bi * p.b[1] * p.b[2]
		}
		cols := p.b[len(p.b)-1]
		if p.transB {
			return bv[base+j*cols+i]
		}
		return bv[base+i*cols+j]
	}
	for bi := 0; bi < batch; bi++ {
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var sum float64
				for q := 0; q < k; q++ {
					sum += at(bi, i, q) * bt(bi, q, j)
				}
				out[(bi*m+i)*n+j] = sum
			}
		}
	}
	return out
}

func checkMatMul(s *suite) {
	for _, p := range products {
		for _, d := range s.floats("MatMul") {
			a, av := s.in(d, p.a...)
			b, bv := s.in(d, p.b...)
			want := refMatMul(p, av, bv)
			dst := s.out(d, p.dst...)
			what := name("MatMul", d, p.a, p.b, p.transA, p.transB)
			s.check(call{what: what, launch: func() { s.b.MatMul(dst, a, b, p.transA, p.transB) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], want, 2*tol(d))
			})
		}
	}
	s.panics("MatMul", func() {
		s.b.MatMul(s.out(tensor.F32, 2, 5), s.out(tensor.F32, 2, 3), s.out(tensor.F32, 4, 5), false, false)
	})
}

func checkMatMulBias(s *suite) {
	for _, p := range products {
		for _, d := range s.floats("MatMulBias") {
			a, av := s.in(d, p.a...)
			b, bv := s.in(d, p.b...)
			n := p.dst[len(p.dst)-1]
			bias, biv := s.in(d, n)
			prod := refMatMul(p, av, bv)
			withBias := make([]float64, len(prod))
			for i, v := range prod {
				withBias[i] = v + biv[i%n]
			}
			dst := s.out(d, p.dst...)
			what := name("MatMulBias", d, p.a, p.b, p.transA, p.transB)
			s.check(call{what: what, launch: func() { s.b.MatMulBias(dst, a, b, bias, p.transA, p.transB) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], withBias, 2*tol(d))
			})
			dst = s.out(d, p.dst...)
			what = name("MatMulBias nil bias", d, p.a, p.b)
			s.check(call{what: what, launch: func() { s.b.MatMulBias(dst, a, b, nil, p.transA, p.transB) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], prod, 2*tol(d))
			})
			for _, act := range []kernels.UnaryOp{kernels.Relu, kernels.GeluTanh, kernels.Sigmoid} {
				want := make([]float64, len(withBias))
				for i, v := range withBias {
					want[i] = refUnary(act, v)
				}
				dst := s.out(d, p.dst...)
				what := name("MatMulBiasAct", act, d, p.a, p.b, p.transA, p.transB)
				s.check(call{what: what, launch: func() { s.b.MatMulBiasAct(dst, a, b, bias, act, p.transA, p.transB) }, writes: []*T{dst}}, func(got [][]float64) {
					s.close(what, got[0], want, 2*tol(d))
				})
			}
		}
	}
}

// checkSetMatmulPrecision: every precision is accepted and F32 products
// stay within its rounding (bf16 inputs for Medium), and Highest is
// fp32 again.
func checkSetMatmulPrecision(s *suite) {
	if !contains(s.floats("SetMatmulPrecision"), tensor.F32) {
		s.t.Skip("no F32 products")
	}
	defer s.b.SetMatmulPrecision(kernels.Highest)
	p := products[5]
	a, av := s.in(tensor.F32, p.a...)
	b, bv := s.in(tensor.F32, p.b...)
	want := refMatMul(p, av, bv)
	for _, c := range []struct {
		prec kernels.Precision
		tol  float64
	}{{kernels.High, 4e-3}, {kernels.Medium, 3e-2}, {kernels.Highest, 2 * tol(tensor.F32)}} {
		s.b.SetMatmulPrecision(c.prec)
		dst := s.out(tensor.F32, p.dst...)
		s.b.MatMul(dst, a, b, false, false)
		s.close(name("MatMul in precision", c.prec), s.get(dst), want, c.tol)
	}
}

func checkGradAccumulator(s *suite) {
	ga := s.b.(kernels.GradAccumulator)
	for _, d := range s.floats("MatMulAdd", tensor.F64, tensor.F32) {
		for _, p := range products[:6] {
			a, av := s.in(d, p.a...)
			b, bv := s.in(d, p.b...)
			dst, dv := s.in(d, p.dst...)
			prod := refMatMul(p, av, bv)
			want := make([]float64, len(prod))
			for i := range want {
				want[i] = dv[i] + prod[i]
			}
			what := name("MatMulAdd", d, p.a, p.b, p.transA, p.transB)
			s.check(call{what: what, launch: func() { ga.MatMulAdd(dst, a, b, p.transA, p.transB) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], want, 2*tol(d))
			})
		}
	}
	for _, d := range s.floats("SumRowsAdd", tensor.F64, tensor.F32) {
		for _, sh := range [][2]int{{5, 7}, {130, 3}, {1, 200}} {
			x, xv := s.in(d, sh[0], sh[1])
			dst, dv := s.in(d, sh[1])
			want := make([]float64, sh[1])
			for j := range want {
				var sum float64
				for i := 0; i < sh[0]; i++ {
					sum += xv[i*sh[1]+j]
				}
				want[j] = dv[j] + sum
			}
			what := name("SumRowsAdd", d, sh)
			s.check(call{what: what, launch: func() { ga.SumRowsAdd(dst, x) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], want, 2*tol(d))
			})
		}
	}
}

// checkLinearGradAccumulator: LinearGradAdd adds gᵀ·x to dw and the
// column sums of g to db (or leaves db out), on shapes from W1's layer
// (g [4, 4], x [4, 16]) and W4's head (128 rows) to ones past a GPU's
// one-launch range (300 rows; 70·20·60 products).
func checkLinearGradAccumulator(s *suite) {
	la := s.b.(kernels.LinearGradAccumulator)
	for _, d := range s.floats("LinearGradAdd", tensor.F64, tensor.F32) {
		for _, sh := range [][3]int{{4, 4, 16}, {5, 3, 7}, {32, 10, 20}, {70, 20, 33}, {1, 200, 3}, {128, 10, 32}, {300, 10, 8}, {70, 20, 60}} {
			m, n, k := sh[0], sh[1], sh[2]
			for _, bias := range []bool{true, false} {
				g, gv := s.in(d, m, n)
				x, xv := s.in(d, m, k)
				dw, dwv := s.in(d, n, k)
				want := make([]float64, n*k)
				for j := 0; j < n; j++ {
					for p := 0; p < k; p++ {
						var sum float64
						for i := 0; i < m; i++ {
							sum += gv[i*n+j] * xv[i*k+p]
						}
						want[j*k+p] = dwv[j*k+p] + sum
					}
				}
				what := name("LinearGradAdd", d, sh, bias)
				if !bias {
					s.check(call{what: what, launch: func() { la.LinearGradAdd(dw, nil, g, x) }, writes: []*T{dw}}, func(got [][]float64) {
						s.close(what+" dw", got[0], want, 2*tol(d))
					})
					continue
				}
				db, dbv := s.in(d, n)
				wantB := make([]float64, n)
				for j := range wantB {
					var sum float64
					for i := 0; i < m; i++ {
						sum += gv[i*n+j]
					}
					wantB[j] = dbv[j] + sum
				}
				s.check(call{what: what, launch: func() { la.LinearGradAdd(dw, db, g, x) }, writes: []*T{dw, db}}, func(got [][]float64) {
					s.close(what+" dw", got[0], want, 2*tol(d))
					s.close(what+" db", got[1], wantB, 2*tol(d))
				})
			}
		}
	}
}

// checkLinearBackwardAdder: LinearBackwardAdd writes dx = g·w and adds
// gᵀ·x to dw and the column sums of g to db (or leaves db out), on W1's
// and W4's head shapes and past a GPU's one-launch range;
// LinearBackwardAccumulate the same with dx += g·w.
func checkLinearBackwardAdder(s *suite) {
	lb := s.b.(kernels.LinearBackwardAdder)
	for _, op := range []string{"LinearBackwardAdd", "LinearBackwardAccumulate"} {
		checkLinearBackward(s, op, lb)
	}
}

// checkLinearBackward is checkLinearBackwardAdder's check of op.
func checkLinearBackward(s *suite, op string, lb kernels.LinearBackwardAdder) {
	acc := op == "LinearBackwardAccumulate"
	for _, d := range s.floats(op, tensor.F64, tensor.F32) {
		for _, sh := range [][3]int{{4, 4, 16}, {128, 10, 32}, {5, 3, 7}, {300, 10, 8}} {
			m, n, k := sh[0], sh[1], sh[2]
			for _, bias := range []bool{true, false} {
				g, gv := s.in(d, m, n)
				x, xv := s.in(d, m, k)
				w, wv := s.in(d, n, k)
				dw, dwv := s.in(d, n, k)
				dx := s.out(d, m, k)
				wantDx := make([]float64, m*k)
				if acc {
					var dxv []float64
					dx, dxv = s.in(d, m, k)
					copy(wantDx, dxv)
				}
				for i := 0; i < m; i++ {
					for p := 0; p < k; p++ {
						for j := 0; j < n; j++ {
							wantDx[i*k+p] += gv[i*n+j] * wv[j*k+p]
						}
					}
				}
				wantW := make([]float64, n*k)
				for j := 0; j < n; j++ {
					for p := 0; p < k; p++ {
						sum := dwv[j*k+p]
						for i := 0; i < m; i++ {
							sum += gv[i*n+j] * xv[i*k+p]
						}
						wantW[j*k+p] = sum
					}
				}
				var db *T
				var wantB []float64
				writes := []*T{dx, dw}
				if bias {
					var dbv []float64
					db, dbv = s.in(d, n)
					wantB = make([]float64, n)
					for j := range wantB {
						wantB[j] = dbv[j]
						for i := 0; i < m; i++ {
							wantB[j] += gv[i*n+j]
						}
					}
					writes = append(writes, db)
				}
				what := name(op, d, sh, bias)
				launch := func() { lb.LinearBackwardAdd(dx, dw, db, g, x, w) }
				if acc {
					launch = func() { lb.LinearBackwardAccumulate(dx, dw, db, g, x, w) }
				}
				s.check(call{what: what, launch: launch, writes: writes}, func(got [][]float64) {
					s.close(what+" dx", got[0], wantDx, 2*tol(d))
					s.close(what+" dw", got[1], wantW, 2*tol(d))
					if bias {
						s.close(what+" db", got[2], wantB, 2*tol(d))
					}
				})
			}
		}
	}
}

// checkReluHeadsGathered: ReluHeads with gathered inputs (In) and a
// joined output (Join) against the float64 definition: two heads on [a
// node's own row | the mean over its incoming edges] (a node without
// edges among them), one on the means of 20 rows written two rows to a
// joined row, one on a plain X with more outputs than inputs, and 14 more
// on the first input (18 heads: two CUDA launches, each reading it);
// every head also into its columns of one Join, whose last column no
// head writes. Where the backend declines,
// every Out and Join is untouched.
func checkReluHeadsGathered(s *suite, rh kernels.ReluHeadser) {
	for _, d := range s.floats("ReluHeads", tensor.F64, tensor.F32) {
		const nd = 10
		mean := func(l graphLayout, w int) (x, srcT, rowPtrT, orderT *T, rows []float64) {
			src, dst, srcT, rowPtrT, orderT := s.graphEdges(l)
			x, xv := s.in(d, l.ns, w)
			rows = make([]float64, l.nd*w)
			for i := 0; i < l.nd; i++ {
				n := 0
				for k := range src {
					if dst[k] == int64(i) {
						n++
						for f := 0; f < w; f++ {
							rows[i*w+f] += xv[int(src[k])*w+f]
						}
					}
				}
				for f := 0; f < w && n > 0; f++ {
					rows[i*w+f] /= float64(n)
				}
			}
			return x, srcT, rowPtrT, orderT, rows
		}
		own, ownv := s.in(d, nd, 5)
		mx, msrc, mptr, mord, mrows := mean(graphLayout{ns: 7, nd: nd, e: 16}, 6)
		inA := &kernels.GatherInput{Rows: nd, Xs: []*T{own, mx}, Src: []*T{nil, msrc}, RowPtr: []*T{nil, mptr}, Order: []*T{nil, mord}}
		xa := make([]float64, nd*11)
		for i := 0; i < nd; i++ {
			copy(xa[i*11:], ownv[i*5:(i+1)*5])
			copy(xa[i*11+5:], mrows[i*6:(i+1)*6])
		}
		bx, bsrc, bptr, bord, brows := mean(graphLayout{ns: 4, nd: 2 * nd, e: 30}, 3)
		inB := &kernels.GatherInput{Rows: 2 * nd, Xs: []*T{bx}, Src: []*T{bsrc}, RowPtr: []*T{bptr}, Order: []*T{bord}}
		xc, xcv := s.in(d, nd, 4)
		type head struct {
			in       *kernels.GatherInput
			x        *T
			xv       []float64
			n, k, hd int
			o, g     int
		}
		heads := []head{{in: inA, xv: xa, n: nd, k: 11, hd: 9, o: 3, g: 1}, {in: inA, xv: xa, n: nd, k: 11, hd: 6, o: 1, g: 1},
			{in: inB, xv: brows, n: 2 * nd, k: 3, hd: 5, o: 2, g: 2}, {x: xc, xv: xcv, n: nd, k: 4, hd: 7, o: 6, g: 1}}
		for range 14 { // more heads than one CUDA launch takes, on one input
			heads = append(heads, head{in: inA, xv: xa, n: nd, k: 11, hd: 3, o: 1, g: 1})
		}
		width := 1 // a last column no head writes
		for _, h := range heads {
			width += h.g * h.o
		}
		join := s.out(d, nd, width)
		var calls []kernels.ReluHeadCall
		var want [][]float64
		outs := []*T{join}
		col := 0
		for _, h := range heads {
			c := kernels.ReluHeadCall{Out: s.out(d, h.n, h.o), X: h.x, In: h.in, Join: join, JoinCol: col, JoinRows: h.g}
			var w1v, w2v, b1v, b2v []float64
			c.W1, w1v = s.in(d, h.hd, h.k)
			c.W2, w2v = s.in(d, h.o, h.hd)
			c.B1, b1v = s.in(d, h.hd)
			c.B2, b2v = s.in(d, h.o)
			w := make([]float64, h.n*h.o)
			for r := 0; r < h.n; r++ {
				hid := make([]float64, h.hd)
				for u := range hid {
					v := b1v[u]
					for p := 0; p < h.k; p++ {
						v += h.xv[r*h.k+p] * w1v[u*h.k+p]
					}
					hid[u] = math.Max(v, 0)
				}
				for o := 0; o < h.o; o++ {
					v := b2v[o]
					for u, hv := range hid {
						v += hv * w2v[o*h.hd+u]
					}
					w[r*h.o+o] = v
				}
			}
			calls, want, outs = append(calls, c), append(want, w), append(outs, c.Out)
			col += h.g * h.o
		}
		untouched := s.read(outs)
		what := name("ReluHeads", d, "gathered and joined", len(calls))
		var done bool
		s.check(call{what: what, launch: func() { done = rh.ReluHeads(calls) }, writes: outs, declined: func() bool { return !done }},
			func(got [][]float64) {
				if !done {
					for k := range got {
						same(s.t, name(what, "tensor", k, "untouched"), got[k], untouched[k])
					}
					return
				}
				joined := make([]float64, nd*width)
				copy(joined, untouched[0]) // the last column stays as it was
				col := 0
				for k, h := range heads {
					s.close(name(what, "head", k), got[k+1], want[k], 64*tol(d))
					for r := 0; r < h.n; r++ {
						for o := 0; o < h.o; o++ {
							joined[(r/h.g)*width+col+(r%h.g)*h.o+o] = got[k+1][r*h.o+o]
						}
					}
					col += h.g * h.o
				}
				same(s.t, name(what, "join"), got[0], joined)
			})
	}
	s.panics("ReluHeads", func() { // both X and In
		x := s.out(tensor.F32, 2, 3)
		in := &kernels.GatherInput{Rows: 2, Xs: []*T{x}, Src: []*T{nil}, RowPtr: []*T{nil}, Order: []*T{nil}}
		rh.ReluHeads([]kernels.ReluHeadCall{{Out: s.out(tensor.F32, 2, 3), X: x, In: in, W1: s.out(tensor.F32, 4, 3), W2: s.out(tensor.F32, 3, 4)}})
	})
	s.panics("ReluHeads", func() { // two heads' Join columns overlap
		x := s.out(tensor.F32, 2, 3)
		join := s.out(tensor.F32, 2, 4)
		w1, w2 := s.out(tensor.F32, 4, 3), s.out(tensor.F32, 3, 4)
		rh.ReluHeads([]kernels.ReluHeadCall{{Out: s.out(tensor.F32, 2, 3), X: x, W1: w1, W2: w2, Join: join, JoinRows: 1},
			{Out: s.out(tensor.F32, 2, 3), X: x, W1: w1, W2: w2, Join: join, JoinCol: 1, JoinRows: 1}})
	})
	s.panics("ReluHeads", func() { // JoinRows does not divide the rows
		x := s.out(tensor.F32, 3, 3)
		rh.ReluHeads([]kernels.ReluHeadCall{{Out: s.out(tensor.F32, 3, 1), X: x, W1: s.out(tensor.F32, 4, 3), W2: s.out(tensor.F32, 1, 4),
			Join: s.out(tensor.F32, 1, 3), JoinRows: 2}})
	})
}

// checkReluHeads: ReluHeads against the float64 definition, relu(x·w1ᵀ +
// b1)·w2ᵀ + b2 per head: heads sharing an input (a policy's context
// heads, outputs of several widths), a head of one output on a longer
// input, one without biases whose rows do not fill a CUDA block's tile,
// and one of no rows; then with a head too wide for the backend to run
// in one launch (K + Hd = 2000 on CUDA), where a false leaves every Out
// untouched.
func checkReluHeads(s *suite) {
	rh := s.b.(kernels.ReluHeadser)
	for _, d := range s.floats("ReluHeads", tensor.F64, tensor.F32) {
		type shape struct {
			x     int // which input
			hd, o int
			bias  bool
			n, k  int
		}
		x0, x0v := s.in(d, 20, 48)
		x1, x1v := s.in(d, 33, 64)
		x2, x2v := s.in(d, 5, 9)
		x3, x3v := s.in(d, 0, 6)
		x4, x4v := s.in(d, 3, 1000)
		xs, xvs := []*T{x0, x1, x2, x3, x4}, [][]float64{x0v, x1v, x2v, x3v, x4v}
		for _, set := range [][]shape{
			{{0, 32, 6, true, 20, 48}, {0, 32, 13, true, 20, 48}, {0, 32, 1, true, 20, 48},
				{1, 40, 1, true, 33, 64}, {2, 7, 3, false, 5, 9}, {3, 4, 2, true, 0, 6}},
			{{2, 7, 3, true, 5, 9}, {4, 1000, 2, true, 3, 1000}},
		} {
			var calls []kernels.ReluHeadCall
			var want [][]float64
			var outs []*T
			for _, h := range set {
				c := kernels.ReluHeadCall{Out: s.out(d, h.n, h.o), X: xs[h.x]}
				var w1v, w2v, b1v, b2v []float64
				c.W1, w1v = s.in(d, h.hd, h.k)
				c.W2, w2v = s.in(d, h.o, h.hd)
				if h.bias {
					c.B1, b1v = s.in(d, h.hd)
					c.B2, b2v = s.in(d, h.o)
				}
				xv := xvs[h.x]
				w := make([]float64, h.n*h.o)
				for r := 0; r < h.n; r++ {
					hid := make([]float64, h.hd)
					for u := range hid {
						var v float64
						for p := 0; p < h.k; p++ {
							v += xv[r*h.k+p] * w1v[u*h.k+p]
						}
						if h.bias {
							v += b1v[u]
						}
						hid[u] = math.Max(v, 0)
					}
					for o := 0; o < h.o; o++ {
						var v float64
						for u, hv := range hid {
							v += hv * w2v[o*h.hd+u]
						}
						if h.bias {
							v += b2v[o]
						}
						w[r*h.o+o] = v
					}
				}
				calls, want, outs = append(calls, c), append(want, w), append(outs, c.Out)
			}
			untouched := s.read(outs)
			what := name("ReluHeads", d, "heads", len(calls))
			var done bool
			s.check(call{what: what, launch: func() { done = rh.ReluHeads(calls) }, writes: outs, declined: func() bool { return !done }},
				func(got [][]float64) {
					for k := range got {
						if !done {
							same(s.t, name(what, "head", k, "untouched"), got[k], untouched[k])
							continue
						}
						s.close(name(what, "head", k), got[k], want[k], 64*tol(d))
					}
				})
		}
	}
	checkReluHeadsGathered(s, rh)
	s.panics("ReluHeads", func() { // Out is the input
		x := s.out(tensor.F32, 2, 3)
		w1, w2 := s.out(tensor.F32, 4, 3), s.out(tensor.F32, 3, 4)
		rh.ReluHeads([]kernels.ReluHeadCall{{Out: x, X: x, W1: w1, W2: w2}})
	})
	s.panics("ReluHeads", func() { // W2 does not read the hidden units
		rh.ReluHeads([]kernels.ReluHeadCall{{Out: s.out(tensor.F32, 2, 3), X: s.out(tensor.F32, 2, 3), W1: s.out(tensor.F32, 4, 3), W2: s.out(tensor.F32, 3, 5)}})
	})
}

// checkMatMulsJoiner: MatMulsT against the float64 definition, Dst =
// A·Bᵀ per call: a batch-64 policy layer's three projections (K = 64,
// widths of several relations' weights side by side), products whose
// sizes are no multiple of a GPU tile (K past one tile, one row, one
// column), one of no rows, and calls that share an A or a B (reading one
// tensor twice is allowed); a join that declines leaves every Dst
// untouched.
func checkMatMulsJoiner(s *suite) {
	mj := s.b.(kernels.MatMulsJoiner)
	for _, d := range s.floats("MatMulsT", tensor.F64, tensor.F32) {
		for _, set := range [][][3]int{
			{{64, 256, 64}, {192, 448, 64}, {192, 384, 64}},
			{{5, 7, 3}, {33, 40, 70}, {1, 65, 33}, {37, 1, 100}, {0, 8, 4}},
			{{6, 9, 5}, {6, 4, 5}, {9, 6, 5}}, // A shared by the first two; the first's B is the third's A
			// A batch-1 policy layer's products, narrowed: few rows (CUDA
			// takes a product of up to 8 a column per warp), K past 32.
			{{3, 300, 256}, {1, 130, 128}, {8, 40, 65}, {9, 40, 65}},
		} {
			checkMatMulsSet(s, mj, d, set, 8*tol(d), "")
		}
	}
	// In the matmul precision High (TF32 allowed, as SetMatmulPrecision's
	// check holds MatMul to it): a batch-64 policy layer's products,
	// narrowed (CUDA joins them in fp32, or on tensor cores with
	// ESPER_CUDA_JOINS_TF32=on), sizes no multiple of a tile, and a set
	// with few rows besides.
	if contains(s.floats("MatMulsT"), tensor.F32) {
		defer s.b.SetMatmulPrecision(kernels.Highest)
		s.b.SetMatmulPrecision(kernels.High)
		for _, set := range [][][3]int{
			{{192, 300, 256}, {192, 130, 128}, {64, 200, 256}},
			{{70, 129, 31}, {65, 64, 33}, {9, 1, 40}, {0, 5, 4}},
			{{3, 40, 64}, {70, 50, 64}},
		} {
			checkMatMulsSet(s, mj, tensor.F32, set, 4e-3, "in precision High")
		}
	}
	checkMatMulsJoinerPanics(s, mj)
}

// checkMatMulsSet is checkMatMulsJoiner's check of one set of products
// (m, n, k each): d = a·bᵀ in dtype d within tolerance of the float64
// product, or untouched where the backend declines them; prec names the
// matmul precision in the messages ("" for the default).
func checkMatMulsSet(s *suite, mj kernels.MatMulsJoiner, d tensor.DType, set [][3]int, tolerance float64, prec string) {
	var calls []kernels.MatMulTCall
	var want [][]float64
	var outs []*T
	type operand struct {
		t *T
		v []float64
	}
	seen := map[[2]int]operand{} // one A per [m, k] and one B per [n, k]: shared where a set repeats them
	for _, sh := range set {
		m, n, k := sh[0], sh[1], sh[2]
		get := func(rows int) (*T, []float64) {
			if o, ok := seen[[2]int{rows, k}]; ok {
				return o.t, o.v
			}
			t, v := s.in(d, rows, k)
			seen[[2]int{rows, k}] = operand{t, v}
			return t, v
		}
		a, av := get(m)
		b, bv := get(n)
		c := kernels.MatMulTCall{Dst: s.out(d, m, n), A: a, B: b}
		w := make([]float64, m*n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var v float64
				for p := 0; p < k; p++ {
					v += av[i*k+p] * bv[j*k+p]
				}
				w[i*n+j] = v
			}
		}
		calls, want, outs = append(calls, c), append(want, w), append(outs, c.Dst)
	}
	untouched := s.read(outs)
	what := name("MatMulsT", d, "products", len(calls), prec)
	var done bool
	s.check(call{what: what, launch: func() { done = mj.MatMulsT(calls) }, writes: outs, declined: func() bool { return !done }},
		func(got [][]float64) {
			for k := range got {
				if !done {
					same(s.t, name(what, "product", k, "untouched"), got[k], untouched[k])
					continue
				}
				s.close(name(what, "product", k), got[k], want[k], tolerance)
			}
		})
}

// checkMatMulsJoinerPanics is checkMatMulsJoiner's misuse checks.
func checkMatMulsJoinerPanics(s *suite, mj kernels.MatMulsJoiner) {
	s.panics("MatMulsT", func() { // Dst is the first operand
		x := s.out(tensor.F32, 3, 3)
		mj.MatMulsT([]kernels.MatMulTCall{{Dst: x, A: x, B: s.out(tensor.F32, 3, 3)}})
	})
	s.panics("MatMulsT", func() { // B's width is not A's
		mj.MatMulsT([]kernels.MatMulTCall{{Dst: s.out(tensor.F32, 2, 3), A: s.out(tensor.F32, 2, 4), B: s.out(tensor.F32, 3, 5)}})
	})
}
