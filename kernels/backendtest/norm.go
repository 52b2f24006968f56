package backendtest

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The norm family: LayerNorm, GroupNorm, BatchNorm and their gradients,
// and the optional BatchNormReluer, GroupNormReluer and
// BatchNormReluPooler.

var normCases = []conformance{
	of(checkLayerNorm, "LayerNorm", "LayerNormBackward"),
	of(checkGroupNorm, "GroupNorm", "GroupNormBackward"),
	of(checkBatchNorm, "BatchNorm", "BatchNormBackward"),
	optional[kernels.GroupNormReluer](checkGroupNormRelu, "GroupNormRelu", "GroupNormReluBackward"),
	optional[kernels.BatchNormReluer](checkBatchNormRelu, "BatchNormRelu", "BatchNormReluBackward"),
	optional[kernels.BatchNormReluPooler](checkBatchNormReluPool, "BatchNormReluMaxPool2x2", "BatchNormReluMaxPool2x2Backward"),
	optional[kernels.BatchNormEvalAffiner](checkBatchNormEvalAffine, "BatchNormEvalAffine"),
	optional[kernels.LinearActLayerNormer](checkLinearActLayerNorm, "LinearActLayerNorm"),
	optional[kernels.LinearActLayerNormsJoiner](checkLinearActLayerNorms, "LinearActLayerNorms"),
}

// checkBatchNormEvalAffine: scale and shift against float64, and bit
// for bit against the same backend's unfused ops (BinaryScalar Add,
// Unary Rsqrt, Binary Mul, Unary Neg, Binary Add), with and without w
// and b.
func checkBatchNormEvalAffine(s *suite) {
	be := s.b.(kernels.BatchNormEvalAffiner)
	for _, d := range s.floats("BatchNormEvalAffine", tensor.F64, tensor.F32) {
		for _, c := range []int{1, 7, 300} {
			for _, affine := range []bool{false, true} {
				vv := s.uniform(c, 0.05, 3)
				runVar, vv := s.put(d, vv, c)
				runMean, mv := s.in(d, c)
				var w, b *T
				wv, bv := make([]float64, c), make([]float64, c)
				for i := range wv {
					wv[i] = 1
				}
				if affine {
					w, wv = s.in(d, c)
					b, bv = s.in(d, c)
				}
				scale, shift := s.out(d, c), s.out(d, c)
				what := name("BatchNormEvalAffine", d, c, "affine", affine)
				// The unfused ops on the same backend.
				v := s.out(d, c)
				s.b.BinaryScalar(kernels.Add, v, runVar, normEps, false)
				r := s.out(d, c)
				s.b.Unary(kernels.Rsqrt, r, v)
				us := r
				if affine {
					us = s.out(d, c)
					s.b.Binary(kernels.Mul, us, w, r)
				}
				ms, ush := s.out(d, c), s.out(d, c)
				s.b.Binary(kernels.Mul, ms, runMean, us)
				s.b.Unary(kernels.Neg, ush, ms)
				if affine {
					t := s.out(d, c)
					s.b.Binary(kernels.Add, t, b, ush)
					ush = t
				}
				unfused := s.read([]*T{us, ush})
				s.check(call{what: what, launch: func() { be.BatchNormEvalAffine(scale, shift, w, b, runMean, runVar, normEps) }, writes: []*T{scale, shift}}, func(got [][]float64) {
					ws, wsh := make([]float64, c), make([]float64, c)
					for i := range ws {
						ws[i] = wv[i] / math.Sqrt(vv[i]+normEps)
						wsh[i] = bv[i] - mv[i]*ws[i]
					}
					s.close(what+" scale", got[0], ws, tol(d))
					s.close(what+" shift", got[1], wsh, tol(d))
					same(s.t, what+" scale against the unfused ops", got[0], unfused[0])
					same(s.t, what+" shift against the unfused ops", got[1], unfused[1])
				})
			}
		}
	}
	s.panics("BatchNormEvalAffine", func() {
		be.BatchNormEvalAffine(s.out(tensor.F32, 3), s.out(tensor.F32, 4), nil, nil, s.out(tensor.F32, 3), s.out(tensor.F32, 3), normEps)
	})
}

const normEps = 1e-5

// blocks is a normalisation's layout: the flat indices of each block of
// elements that share statistics, and the affine parameter index of each
// element.
type blocks struct {
	members [][]int
	param   []int
}

// rowBlocks: x viewed as [m, n], each row a block, parameters by column.
func rowBlocks(m, n int) blocks {
	b := blocks{members: make([][]int, m), param: make([]int, m*n)}
	for i := 0; i < m*n; i++ {
		b.members[i/n] = append(b.members[i/n], i)
		b.param[i] = i % n
	}
	return b
}

// channelBlocks: x [n, c, hw], blocks of channels (groups of c/groups
// channels within a sample; groups = 0 for one block per channel over
// the whole batch, as batch norm), parameters by channel.
func channelBlocks(n, c, hw, groups int) blocks {
	nb := c
	if groups > 0 {
		nb = n * groups
	}
	b := blocks{members: make([][]int, nb), param: make([]int, n*c*hw)}
	for i := range b.param {
		ch := (i / hw) % c
		b.param[i] = ch
		blk := ch
		if groups > 0 {
			blk = (i/(c*hw))*groups + ch/(c/groups)
		}
		b.members[blk] = append(b.members[blk], i)
	}
	return b
}

// stats are each block's mean and biased variance.
func (b blocks) stats(x []float64) (mean, vr []float64) {
	mean, vr = make([]float64, len(b.members)), make([]float64, len(b.members))
	for k, m := range b.members {
		for _, i := range m {
			mean[k] += x[i]
		}
		mean[k] /= float64(len(m))
		for _, i := range m {
			vr[k] += (x[i] - mean[k]) * (x[i] - mean[k])
		}
		vr[k] /= float64(len(m))
	}
	return mean, vr
}

// forward is (x − mean)·rstd·w + b per element (w, b optional), with
// rstd = 1/sqrt(var + eps), and the rstd of each block.
func (b blocks) forward(x, mean, vr, w, bias []float64) (y, rstd []float64) {
	rstd = make([]float64, len(vr))
	for k, v := range vr {
		rstd[k] = 1 / math.Sqrt(v+normEps)
	}
	y = make([]float64, len(x))
	for k, m := range b.members {
		for _, i := range m {
			v := (x[i] - mean[k]) * rstd[k]
			if w != nil {
				v *= w[b.param[i]]
			}
			if bias != nil {
				v += bias[b.param[i]]
			}
			y[i] = v
		}
	}
	return y, rstd
}

// backward is dx, dw, db of forward given dy, with the statistics as
// functions of x (stats true) or constants (false).
func (b blocks) backward(x, dy, mean, rstd, w []float64, np int, stats bool) (dx, dw, db []float64) {
	dx, dw, db = make([]float64, len(x)), make([]float64, np), make([]float64, np)
	for k, m := range b.members {
		var sg, sgx float64
		for _, i := range m {
			xh := (x[i] - mean[k]) * rstd[k]
			g := dy[i]
			if w != nil {
				g *= w[b.param[i]]
			}
			sg += g
			sgx += g * xh
			dw[b.param[i]] += dy[i] * xh
			db[b.param[i]] += dy[i]
		}
		cnt := float64(len(m))
		for _, i := range m {
			xh := (x[i] - mean[k]) * rstd[k]
			g := dy[i]
			if w != nil {
				g *= w[b.param[i]]
			}
			if stats {
				dx[i] = rstd[k] * (g - sg/cnt - xh*sgx/cnt)
			} else {
				dx[i] = rstd[k] * g
			}
		}
	}
	return dx, dw, db
}

func checkLayerNorm(s *suite) {
	for _, c := range []struct {
		shape []int
		n     int
	}{{[]int{6, 10}, 10}, {[]int{2, 3, 8}, 24}, {[]int{5, 300}, 300}, {[]int{1, 1}, 1}} {
		m := tensor.Numel(c.shape) / c.n
		bl := rowBlocks(m, c.n)
		for _, d := range s.floats("LayerNorm") {
			sd := wideOf(d)
			for _, affine := range []bool{true, false} {
				x, xv := s.in(d, c.shape...)
				var w, b *T
				var wv, bv []float64
				if affine {
					w, wv = s.in(d, c.n)
					b, bv = s.in(d, c.n)
				}
				mean, vr := bl.stats(xv)
				want, rstd := bl.forward(xv, mean, vr, wv, bv)
				y, sm, sr := s.out(d, c.shape...), s.out(sd, m), s.out(sd, m)
				what := name("LayerNorm", d, c.shape, c.n, "affine", affine)
				s.check(call{what: what, launch: func() { s.b.LayerNorm(y, sm, sr, x, w, b, c.n, normEps) }, writes: []*T{y, sm, sr}}, func(got [][]float64) {
					s.close(what, got[0], want, 4*tol(d))
					s.close(what+" mean", got[1], mean, 4*tol(d))
					s.close(what+" rstd", got[2], rstd, 4*tol(d))
				})

				dy, gv := s.in(d, c.shape...)
				pm, mv := s.put(sd, mean, m)
				pr, rv := s.put(sd, rstd, m)
				wantDx, wantDw, wantDb := bl.backward(xv, gv, mv, rv, wv, c.n, true)
				dx, dw, db := s.out(d, c.shape...), s.out(d, c.n), s.out(d, c.n)
				if !affine {
					dw, db = nil, nil
				}
				writes := []*T{dx}
				if affine {
					writes = append(writes, dw, db)
				}
				what = name("LayerNormBackward", d, c.shape, c.n, "affine", affine)
				s.check(call{what: what, launch: func() { s.b.LayerNormBackward(dx, dw, db, dy, x, pm, pr, w, c.n) }, writes: writes}, func(got [][]float64) {
					s.close(what+" dx", got[0], wantDx, 8*tol(d))
					if affine {
						s.close(what+" dw", got[1], wantDw, 8*tol(d))
						s.close(what+" db", got[2], wantDb, 8*tol(d))
					}
				})
			}
		}
	}
}

// groupNorm runs the check of GroupNorm (relu false) or GroupNormRelu.
func groupNorm(s *suite, relu bool) {
	op, bop := "GroupNorm", "GroupNormBackward"
	if relu {
		op, bop = "GroupNormRelu", "GroupNormReluBackward"
	}
	for _, c := range []struct {
		shape  []int
		groups int
	}{{[]int{2, 6, 4, 4}, 3}, {[]int{3, 4, 5}, 2}, {[]int{2, 4, 3, 3}, 4}, {[]int{1, 8, 20, 20}, 1}} {
		n, ch, hw := c.shape[0], c.shape[1], tensor.Numel(c.shape[2:])
		bl := channelBlocks(n, ch, hw, c.groups)
		for _, d := range s.floats(op) {
			sd := wideOf(d)
			x, xv := s.in(d, c.shape...)
			w, wv := s.in(d, ch)
			b, bv := s.in(d, ch)
			mean, vr := bl.stats(xv)
			want, rstd := bl.forward(xv, mean, vr, wv, bv)
			if relu {
				for i, v := range want {
					want[i] = math.Max(v, 0)
				}
			}
			y, sm, sr := s.out(d, c.shape...), s.out(sd, n*c.groups), s.out(sd, n*c.groups)
			what := name(op, d, c.shape, "groups", c.groups)
			launch := func() {
				if relu {
					s.b.(kernels.GroupNormReluer).GroupNormRelu(y, sm, sr, x, w, b, c.groups, normEps)
				} else {
					s.b.GroupNorm(y, sm, sr, x, w, b, c.groups, normEps)
				}
			}
			var fwd []float64
			s.check(call{what: what, launch: launch, writes: []*T{y, sm, sr}}, func(got [][]float64) {
				s.close(what, got[0], want, 4*tol(d))
				s.close(what+" mean", got[1], mean, 4*tol(d))
				s.close(what+" rstd", got[2], rstd, 4*tol(d))
				fwd = got[0]
			})

			if fwd == nil {
				continue
			}
			dy, gv := s.in(d, c.shape...)
			if relu {
				gv = masked(gv, fwd)
			}
			pm, mv := s.put(sd, mean, n*c.groups)
			pr, rv := s.put(sd, rstd, n*c.groups)
			wantDx, wantDw, wantDb := bl.backward(xv, gv, mv, rv, wv, ch, true)
			dx, dw, db := s.out(d, c.shape...), s.out(d, ch), s.out(d, ch)
			what = name(bop, d, c.shape, "groups", c.groups)
			launch = func() {
				if relu {
					s.b.(kernels.GroupNormReluer).GroupNormReluBackward(dx, dw, db, dy, x, b, pm, pr, w, c.groups)
				} else {
					s.b.GroupNormBackward(dx, dw, db, dy, x, pm, pr, w, c.groups)
				}
			}
			s.check(call{what: what, launch: launch, writes: []*T{dx, dw, db}}, func(got [][]float64) {
				s.close(what+" dx", got[0], wantDx, 8*tol(d))
				s.close(what+" dw", got[1], wantDw, 8*tol(d))
				s.close(what+" db", got[2], wantDb, 8*tol(d))
			})
		}
	}
}

// masked is g where the fused ReLU's output y was > 0, and 0 elsewhere.
func masked(g, y []float64) []float64 {
	out := make([]float64, len(g))
	for i := range g {
		if y[i] > 0 {
			out[i] = g[i]
		}
	}
	return out
}

func checkGroupNorm(s *suite)     { groupNorm(s, false) }
func checkGroupNormRelu(s *suite) { groupNorm(s, true) }

// batchNorm runs the check of BatchNorm (relu false) or BatchNormRelu,
// in training and evaluation.
func batchNorm(s *suite, relu bool) {
	op, bop := "BatchNorm", "BatchNormBackward"
	if relu {
		op, bop = "BatchNormRelu", "BatchNormReluBackward"
	}
	const momentum = 0.1
	// {5, 3, 37, 41}: a channel of 7585 elements, which a backend may
	// split into chunks (CUDA: 8 of 949, the last shorter).
	for _, shape := range [][]int{{4, 3, 5, 5}, {6, 5}, {2, 8, 3, 7}, {2, 1, 1, 7}, {5, 2, 1, 1}, {5, 3, 37, 41}} {
		n, ch, hw := shape[0], shape[1], tensor.Numel(shape[2:])
		bl := channelBlocks(n, ch, hw, 0)
		cnt := float64(n * hw)
		for _, d := range s.floats(op) {
			sd := wideOf(d)
			for _, training := range []bool{true, false} {
				x, xv := s.in(d, shape...)
				w, wv := s.in(d, ch)
				b, bv := s.in(d, ch)
				rm0, rmv := s.in(sd, ch)
				rv0, rvv := s.put(sd, s.uniform(ch, 0.5, 2), ch)
				rm, rv := s.clone(rm0), s.clone(rv0)
				mean, vr := bl.stats(xv)
				wantRm, wantRv := rmv, rvv
				if training {
					wantRm, wantRv = make([]float64, ch), make([]float64, ch)
					for c := range wantRm {
						wantRm[c] = (1-momentum)*rmv[c] + momentum*mean[c]
						wantRv[c] = (1-momentum)*rvv[c] + momentum*vr[c]*cnt/(cnt-1)
					}
				} else {
					mean, vr = rmv, rvv
				}
				want, rstd := bl.forward(xv, mean, vr, wv, bv)
				if relu {
					for i, v := range want {
						want[i] = math.Max(v, 0)
					}
				}
				y, sm, sr := s.out(d, shape...), s.out(sd, ch), s.out(sd, ch)
				what := name(op, d, shape, "training", training)
				launch := func() {
					if relu {
						s.b.(kernels.BatchNormReluer).BatchNormRelu(y, sm, sr, x, w, b, rm, rv, training, momentum, normEps)
					} else {
						s.b.BatchNorm(y, sm, sr, x, w, b, rm, rv, training, momentum, normEps)
					}
				}
				var fwd []float64
				s.check(call{what: what, launch: launch, writes: []*T{y, sm, sr, rm, rv}}, func(got [][]float64) {
					s.close(what, got[0], want, 4*tol(d))
					s.close(what+" saveMean", got[1], mean, 4*tol(d))
					s.close(what+" saveRstd", got[2], rstd, 4*tol(d))
					s.close(what+" runMean", got[3], wantRm, 4*tol(d))
					s.close(what+" runVar", got[4], wantRv, 4*tol(d))
					fwd = got[0]
				})

				if fwd == nil {
					continue
				}
				dy, gv := s.in(d, shape...)
				if relu {
					gv = masked(gv, fwd)
				}
				pm, mv := s.put(sd, mean, ch)
				pr, rsv := s.put(sd, rstd, ch)
				wantDx, wantDw, wantDb := bl.backward(xv, gv, mv, rsv, wv, ch, training)
				dx, dw, db := s.out(d, shape...), s.out(d, ch), s.out(d, ch)
				what = name(bop, d, shape, "training", training)
				launch = func() {
					if relu {
						s.b.(kernels.BatchNormReluer).BatchNormReluBackward(dx, dw, db, dy, x, b, pm, pr, w, training)
					} else {
						s.b.BatchNormBackward(dx, dw, db, dy, x, pm, pr, w, training)
					}
				}
				s.check(call{what: what, launch: launch, writes: []*T{dx, dw, db}}, func(got [][]float64) {
					s.close(what+" dx", got[0], wantDx, 8*tol(d))
					s.close(what+" dw", got[1], wantDw, 8*tol(d))
					s.close(what+" db", got[2], wantDb, 8*tol(d))
				})
			}
		}
	}
	if !relu {
		s.panics("BatchNorm", func() {
			s.b.BatchNorm(s.out(tensor.F32, 2, 3, 4), nil, nil, s.out(tensor.F32, 2, 3, 4), s.out(tensor.F32, 4), nil, nil, nil, true, 0.1, normEps)
		})
	}
}

func checkBatchNorm(s *suite)     { batchNorm(s, false) }
func checkBatchNormRelu(s *suite) { batchNorm(s, true) }

func checkBatchNormReluPool(s *suite) {
	bp := s.b.(kernels.BatchNormReluPooler)
	const momentum = 0.1
	for _, shape := range [][]int{{4, 3, 6, 6}, {2, 5, 7, 9}, {5, 3, 38, 42}} {
		n, ch, hw := shape[0], shape[1], shape[2]*shape[3]
		bl := channelBlocks(n, ch, hw, 0)
		cnt := float64(n * hw)
		pshape := []int{n, ch, shape[2] / 2, shape[3] / 2}
		for _, d := range s.floats("BatchNormReluMaxPool2x2") {
			sd := wideOf(d)
			for _, training := range []bool{true, false} {
				x, xv := s.in(d, shape...)
				w, wv := s.in(d, ch)
				b, bv := s.in(d, ch)
				rm, rmv := s.in(sd, ch)
				rv, rvv := s.put(sd, s.uniform(ch, 0.5, 2), ch)
				mean, vr := bl.stats(xv)
				wantRm, wantRv := rmv, rvv
				if training {
					wantRm, wantRv = make([]float64, ch), make([]float64, ch)
					for c := range wantRm {
						wantRm[c] = (1-momentum)*rmv[c] + momentum*mean[c]
						wantRv[c] = (1-momentum)*rvv[c] + momentum*vr[c]*cnt/(cnt-1)
					}
				} else {
					mean, vr = rmv, rvv
				}
				y, rstd := bl.forward(xv, mean, vr, wv, bv)
				for i, v := range y {
					y[i] = math.Max(v, 0)
				}
				want, _ := maxPool2x2(y, shape)
				pooled, arg := s.out(d, pshape...), s.out(tensor.I32, pshape...)
				sm, sr := s.out(sd, ch), s.out(sd, ch)
				what := name("BatchNormReluMaxPool2x2", d, shape, "training", training)
				var gotArg []float64
				s.check(call{what: what, launch: func() {
					bp.BatchNormReluMaxPool2x2(pooled, arg, sm, sr, x, w, b, rm, rv, training, momentum, normEps)
				}, writes: []*T{pooled, arg, sm, sr, rm, rv}}, func(got [][]float64) {
					s.close(what, got[0], want, 4*tol(d))
					s.close(what+" saveMean", got[2], mean, 4*tol(d))
					s.close(what+" saveRstd", got[3], rstd, 4*tol(d))
					s.close(what+" runMean", got[4], wantRm, 4*tol(d))
					s.close(what+" runVar", got[5], wantRv, 4*tol(d))
					// The indices point at the maxima of the fused output
					// (checked through the pooled values, which ties and
					// rounding may place at another index).
					gotArg = got[1]
				})
				if gotArg == nil {
					continue
				}

				// The gradient: the pool's gradient routed to the
				// backend's own argmax, masked where the fused output
				// was not > 0, through the batch norm.
				g, gv := s.in(d, pshape...)
				dy := make([]float64, len(xv))
				per := pshape[2] * pshape[3]
				for i, a := range gotArg {
					dy[(i/per)*hw+int(a)] += gv[i]
				}
				dy = masked(dy, y)
				pm, mv := s.put(sd, mean, ch)
				pr, rsv := s.put(sd, rstd, ch)
				wantDx, wantDw, wantDb := bl.backward(xv, dy, mv, rsv, wv, ch, training)
				dx, dw, db := s.out(d, shape...), s.out(d, ch), s.out(d, ch)
				what = name("BatchNormReluMaxPool2x2Backward", d, shape, "training", training)
				s.check(call{what: what, launch: func() {
					bp.BatchNormReluMaxPool2x2Backward(dx, dw, db, g, arg, x, b, pm, pr, w, training)
				}, writes: []*T{dx, dw, db}}, func(got [][]float64) {
					s.close(what+" dx", got[0], wantDx, 8*tol(d))
					s.close(what+" dw", got[1], wantDw, 8*tol(d))
					s.close(what+" db", got[2], wantDb, 8*tol(d))
				})
			}
		}
	}
}

// checkLinearActLayerNorm: where the backend fuses it (true),
// LinearActLayerNorm against the float64 definition (the product, bias,
// activation, then the row's mean and biased variance, gain and shift)
// on W2's encoder shapes (K = 23, 35 and 6 to 256 outputs), with and
// without bias, gain and shift; where it does not, y untouched.
func checkLinearActLayerNorm(s *suite) {
	la := s.b.(kernels.LinearActLayerNormer)
	for _, d := range s.floats("LinearActLayerNorm", tensor.F64, tensor.F32) {
		for _, sh := range [][3]int{{64, 256, 23}, {5, 256, 35}, {7, 256, 6}, {3, 10, 4}, {2, 5000, 3}} {
			m, n, k := sh[0], sh[1], sh[2]
			for _, affine := range []bool{true, false} {
				for _, act := range []kernels.UnaryOp{kernels.GeluErf, kernels.Relu} {
					x, xv := s.in(d, m, k)
					w, wv := s.in(d, n, k)
					var b, g, sh2 *T
					var bv, gv, sv []float64
					if affine {
						b, bv = s.in(d, n)
						g, gv = s.in(d, n)
						sh2, sv = s.in(d, n)
					}
					y := s.out(d, m, n)
					untouched := s.read([]*T{y})[0]
					want := make([]float64, m*n)
					for i := 0; i < m; i++ {
						row := want[i*n : (i+1)*n]
						var mu float64
						for j := range row {
							var v float64
							for q := 0; q < k; q++ {
								v += xv[i*k+q] * wv[j*k+q]
							}
							if affine {
								v += bv[j]
							}
							row[j] = refUnary(act, v)
							mu += row[j]
						}
						mu /= float64(n)
						var q float64
						for _, v := range row {
							q += (v - mu) * (v - mu)
						}
						r := 1 / math.Sqrt(q/float64(n)+normEps)
						for j := range row {
							row[j] = (row[j] - mu) * r
							if affine {
								row[j] = row[j]*gv[j] + sv[j]
							}
						}
					}
					what := name("LinearActLayerNorm", d, sh, "affine", affine, act)
					var fused bool
					s.check(call{what: what, launch: func() { fused = la.LinearActLayerNorm(y, x, w, b, act, g, sh2, normEps) }, writes: []*T{y},
						declined: func() bool { return !fused }}, func(got [][]float64) {
						if !fused {
							same(s.t, what+" (not fused: untouched)", got[0], untouched)
							return
						}
						s.close(what, got[0], want, 16*tol(d))
					})
				}
			}
		}
	}
	s.panics("LinearActLayerNorm", func() { // w narrower than x
		la.LinearActLayerNorm(s.out(tensor.F32, 2, 3), s.out(tensor.F32, 2, 4), s.out(tensor.F32, 3, 5), nil, kernels.Relu, nil, nil, normEps)
	})
}

// checkLinearActLayerNormsGathered holds a LinearActLayerNorms call
// whose input is gathered (In: W2's slot encoder, each slot's own
// features beside the mean of embedding rows over its edges, a slot
// without edges among them) beside a plain one to LinearActLayerNorm of
// the input GatherConcat writes (a GraphMultiAggregator backend), bit
// for bit; where the backend declines, every output is untouched.
func checkLinearActLayerNormsGathered(s *suite, la kernels.LinearActLayerNormer, lj kernels.LinearActLayerNormsJoiner) {
	gm, ok := s.b.(kernels.GraphMultiAggregator)
	if !ok {
		return
	}
	for _, d := range s.floats("LinearActLayerNorms", tensor.F64, tensor.F32) {
		const m, own, emb, n = 192, 27, 8, 256
		feats, _ := s.in(d, m, own)
		table, _ := s.in(d, 5, emb)
		_, _, src, rowPtr, order := s.graphEdges(graphLayout{ns: 5, nd: m, e: 300})
		in := &kernels.GatherInput{Rows: m, Xs: []*T{feats, table}, Src: []*T{nil, src}, RowPtr: []*T{nil, rowPtr}, Order: []*T{nil, order}}
		x := s.out(d, m, own+emb)
		gm.GatherConcat(x, in.Xs, in.Src, in.RowPtr, in.Order, 0)
		gathered := kernels.LinearActLNCall{Y: s.out(d, m, n), In: in, Act: kernels.GeluErf, Eps: normEps}
		gathered.W, _ = s.in(d, n, own+emb)
		gathered.B, _ = s.in(d, n)
		gathered.G, _ = s.in(d, n)
		gathered.S, _ = s.in(d, n)
		plain := kernels.LinearActLNCall{Y: s.out(d, 64, n), Act: kernels.Relu, Eps: normEps}
		plain.X, _ = s.in(d, 64, 23)
		plain.W, _ = s.in(d, n, 23)
		var want [][]float64
		all := true
		for _, c := range []kernels.LinearActLNCall{gathered, plain} {
			cx := c.X
			if cx == nil {
				cx = x
			}
			all = la.LinearActLayerNorm(c.Y, cx, c.W, c.B, c.Act, c.G, c.S, c.Eps) && all
			want = append(want, s.get(c.Y))
		}
		gathered.Y, plain.Y = s.out(d, m, n), s.out(d, 64, n)
		calls, outs := []kernels.LinearActLNCall{gathered, plain}, []*T{gathered.Y, plain.Y}
		untouched := s.read(outs)
		what := name("LinearActLayerNorms", d, "gathered input")
		var done bool
		s.check(call{what: what, launch: func() { done = lj.LinearActLayerNorms(calls) }, writes: outs,
			declined: func() bool { return !done }}, func(got [][]float64) {
			for k := range got {
				if !done {
					same(s.t, name(what, "call", k, "untouched"), got[k], untouched[k])
					continue
				}
				if !all {
					s.t.Errorf("%s: joined, though a call alone is not fused", what)
				}
				same(s.t, name(what, "call", k), got[k], want[k])
			}
		})
	}
	s.panics("LinearActLayerNorms", func() { // X and In both given
		x := s.out(tensor.F32, 2, 4)
		in := &kernels.GatherInput{Rows: 2, Xs: []*T{x}, Src: []*T{nil}, RowPtr: []*T{nil}, Order: []*T{nil}}
		lj.LinearActLayerNorms([]kernels.LinearActLNCall{{Y: s.out(tensor.F32, 2, 3), X: x, In: in, W: s.out(tensor.F32, 3, 4), Act: kernels.Relu, Eps: normEps}})
	})
}

// checkLinearActLayerNorms holds LinearActLayerNorms to
// LinearActLayerNorm on the same backend: W2's three encoders and a
// small layer without bias, gain or shift (more calls than a CUDA
// launch joins, with the first again), every output the bits its own
// call writes; with a call the backend does not fuse alone (5000
// outputs on CUDA), false and every output untouched, or, where each
// call is fused alone, true and the same bits.
func checkLinearActLayerNorms(s *suite) {
	la, ok := prerequisite[kernels.LinearActLayerNormer](s, "LinearActLayerNormsJoiner")
	if !ok {
		return
	}
	lj := s.b.(kernels.LinearActLayerNormsJoiner)
	for _, d := range s.floats("LinearActLayerNorms", tensor.F64, tensor.F32) {
		for _, shapes := range [][][3]int{{{64, 256, 23}, {192, 256, 35}, {192, 256, 6}, {3, 10, 4}, {64, 256, 23}}, {{5, 256, 35}, {2, 5000, 3}}} {
			var calls []kernels.LinearActLNCall
			var want [][]float64
			var outs []*T
			all := true
			for i, sh := range shapes {
				m, n, k := sh[0], sh[1], sh[2]
				c := kernels.LinearActLNCall{Y: s.out(d, m, n), Act: []kernels.UnaryOp{kernels.GeluErf, kernels.Relu}[i%2], Eps: normEps}
				c.X, _ = s.in(d, m, k)
				c.W, _ = s.in(d, n, k)
				if n != 10 {
					c.B, _ = s.in(d, n)
					c.G, _ = s.in(d, n)
					c.S, _ = s.in(d, n)
				}
				fused := la.LinearActLayerNorm(c.Y, c.X, c.W, c.B, c.Act, c.G, c.S, c.Eps)
				all = all && fused
				want = append(want, s.get(c.Y))
				c.Y = s.out(d, m, n)
				calls, outs = append(calls, c), append(outs, c.Y)
			}
			untouched := s.read(outs)
			what := name("LinearActLayerNorms", d, "calls", len(calls), "each fused", all)
			var done bool
			s.check(call{what: what, launch: func() { done = lj.LinearActLayerNorms(calls) }, writes: outs,
				declined: func() bool { return !done }}, func(got [][]float64) {
				if done != all {
					s.t.Errorf("%s: reported %v, want %v (every call fused on its own)", what, done, all)
					return
				}
				for k := range got {
					if done {
						same(s.t, name(what, "call", k), got[k], want[k])
					} else {
						same(s.t, name(what, "call", k, "untouched"), got[k], untouched[k])
					}
				}
			})
		}
	}
	checkLinearActLayerNormsGathered(s, la, lj)
	s.panics("LinearActLayerNorms", func() { // the second call reads the first's y
		y := s.out(tensor.F32, 2, 3)
		lj.LinearActLayerNorms([]kernels.LinearActLNCall{{Y: y, X: s.out(tensor.F32, 2, 4), W: s.out(tensor.F32, 3, 4), Act: kernels.Relu, Eps: normEps},
			{Y: s.out(tensor.F32, 2, 3), X: y, W: s.out(tensor.F32, 3, 3), Act: kernels.Relu, Eps: normEps}})
	})
}
