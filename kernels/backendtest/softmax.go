package backendtest

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The softmax family: Softmax, LogSoftmax, their gradients and the
// softmax cross-entropy.

var softmaxCases = []conformance{
	of(checkSoftmax, "Softmax", "LogSoftmax", "SoftmaxBackward", "LogSoftmaxBackward"),
	of(checkCrossEntropy, "CrossEntropy", "CrossEntropyBackward"),
	optional[kernels.CrossEntropyCounter](checkCrossEntropyCount, "CrossEntropyCount"),
	optional[kernels.CrossEntropyGradCounter](checkCrossEntropyCountGrad, "CrossEntropyCountGrad"),
	optional[kernels.LinearCrossEntropyCounter](checkLinearCrossEntropyCount, "LinearCrossEntropyCount"),
	optional[kernels.LinearCESGDStepper](checkLinearCESGDStep, "LinearCESGDStep"),
}

// refSoftmax is the softmax (or log-softmax) of x (shape) along axis.
func refSoftmax(x []float64, shape []int, axis int, log bool) []float64 {
	outer, n, inner := kernels.Split3(shape, axis)
	y := make([]float64, len(x))
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			at := func(k int) int { return (o*n+k)*inner + i }
			m := math.Inf(-1)
			for k := 0; k < n; k++ {
				m = math.Max(m, x[at(k)])
			}
			var sum float64
			for k := 0; k < n; k++ {
				sum += math.Exp(x[at(k)] - m)
			}
			for k := 0; k < n; k++ {
				if log {
					y[at(k)] = x[at(k)] - m - math.Log(sum)
				} else {
					y[at(k)] = math.Exp(x[at(k)]-m) / sum
				}
			}
		}
	}
	return y
}

// refSoftmaxBackward is dx for y = softmax(x) (or log-softmax) along
// axis: y·(dy − Σ y·dy), or dy − e^y·Σ dy.
func refSoftmaxBackward(y, dy []float64, shape []int, axis int, log bool) []float64 {
	outer, n, inner := kernels.Split3(shape, axis)
	dx := make([]float64, len(y))
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			at := func(k int) int { return (o*n+k)*inner + i }
			var sum float64
			for k := 0; k < n; k++ {
				if log {
					sum += dy[at(k)]
				} else {
					sum += y[at(k)] * dy[at(k)]
				}
			}
			for k := 0; k < n; k++ {
				j := at(k)
				if log {
					dx[j] = dy[j] - math.Exp(y[j])*sum
				} else {
					dx[j] = y[j] * (dy[j] - sum)
				}
			}
		}
	}
	return dx
}

func checkSoftmax(s *suite) {
	for _, c := range []struct {
		shape []int
		axis  int
	}{{[]int{7, 5}, 1}, {[]int{7, 5}, -1}, {[]int{3, 4, 6}, 1}, {[]int{3, 4, 6}, 0}, {[]int{2, 1, 9}, 2}, {[]int{4, 300}, 1}} {
		a := (c.axis + len(c.shape)) % len(c.shape)
		for _, d := range s.floats("Softmax") {
			for _, log := range []bool{false, true} {
				op, bop := "Softmax", "SoftmaxBackward"
				if log {
					op, bop = "LogSoftmax", "LogSoftmaxBackward"
				}
				xvals := s.normals(tensor.Numel(c.shape))
				xvals[0] += 100 // the maximum must be shifted out
				x, xv := s.put(d, xvals, c.shape...)
				want := refSoftmax(xv, c.shape, a, log)
				dst := s.out(d, c.shape...)
				what := name(op, d, c.shape, "axis", c.axis)
				s.check(call{what: what, launch: func() {
					if log {
						s.b.LogSoftmax(dst, x, c.axis)
					} else {
						s.b.Softmax(dst, x, c.axis)
					}
				}, writes: []*T{dst}}, func(got [][]float64) {
					s.close(what, got[0], want, 2*tol(d))
				})

				y, yv := s.put(d, want, c.shape...)
				dy, gv := s.in(d, c.shape...)
				wantDx := refSoftmaxBackward(yv, gv, c.shape, a, log)
				dx := s.out(d, c.shape...)
				what = name(bop, d, c.shape, "axis", c.axis)
				s.check(call{what: what, launch: func() {
					if log {
						s.b.LogSoftmaxBackward(dx, y, dy, c.axis)
					} else {
						s.b.SoftmaxBackward(dx, y, dy, c.axis)
					}
				}, writes: []*T{dx}}, func(got [][]float64) {
					s.close(what, got[0], wantDx, 4*tol(d))
				})
			}
		}
	}
	s.panics("Softmax", func() { s.b.Softmax(s.out(tensor.F32, 3, 4), s.out(tensor.F32, 3, 4), 2) })
}

// refCrossEntropy is the per-sample loss and the reduced loss of logits
// x [n, c] against tg, and the kept (not ignored) count.
func refCrossEntropy(x, tg []float64, n, c int, p kernels.CrossEntropyParams) (per []float64, loss float64, kept int) {
	lp := refSoftmax(x, []int{n, c}, 1, true)
	per = make([]float64, n)
	for i := 0; i < n; i++ {
		if p.HasIgnore && int64(tg[i]) == p.IgnoreIndex {
			continue
		}
		per[i] = (1 - p.LabelSmoothing) * (-lp[i*c+int(tg[i])])
		if p.LabelSmoothing != 0 {
			// Only with smoothing: 0·∞ would make a row with −∞ off
			// its target NaN, where its loss is finite.
			var smooth float64
			for j := 0; j < c; j++ {
				smooth -= lp[i*c+j]
			}
			per[i] += p.LabelSmoothing * smooth / float64(c)
		}
		loss += per[i]
		kept++
	}
	if p.Reduction == kernels.ReduceMean {
		loss /= float64(kept)
	}
	return per, loss, kept
}

func checkCrossEntropy(s *suite) {
	// Rows: a few (one launch for a reduced loss on CUDA, ce_small) and
	// more than ceSmallRows there (a block per row and a reduction).
	// Without label smoothing the first row holds a −∞ logit.
	for _, c := range [][2]int{{6, 5}, {3, 70}, {2, 300}, {100, 7}, {300, 7}} {
		n, cl := c[0], c[1]
		for _, p := range []kernels.CrossEntropyParams{
			{},
			{Reduction: kernels.ReduceSum},
			{Reduction: kernels.ReduceNone},
			{LabelSmoothing: 0.1},
			{Reduction: kernels.ReduceNone, LabelSmoothing: 0.2, HasIgnore: true, IgnoreIndex: -100},
			{HasIgnore: true, IgnoreIndex: 1},
		} {
			for _, d := range s.floats("CrossEntropy") {
				for _, idt := range []tensor.DType{tensor.I64, tensor.I32} {
					x0 := s.normals(n * cl)
					tv := s.ceTargets(n, cl, p)
					if p.LabelSmoothing == 0 {
						// Row 0 has −∞ off its target (a masked class):
						// its loss is finite and its gradient there 0
						// unless something smooths over the row.
						j := 0
						if int(tv[0]) == 0 {
							j = 1
						}
						x0[j] = math.Inf(-1)
					}
					logits, xv := s.put(d, x0, n, cl)
					target, _ := s.put(idt, tv, n)
					per, total, kept := refCrossEntropy(xv, tv, n, cl, p)
					lshape := []int{}
					want := []float64{total}
					if p.Reduction == kernels.ReduceNone {
						lshape, want = []int{n}, per
					}
					loss := s.out(wideOf(d), lshape...)
					what := name("CrossEntropy", d, idt, n, cl, p)
					s.check(call{what: what, launch: func() { s.b.CrossEntropy(loss, logits, target, p) }, writes: []*T{loss}}, func(got [][]float64) {
						s.close(what, got[0], want, 2*tol(d))
					})

					// dlogits = g·(softmax − (1−ε)·onehot − ε/C), g the
					// loss gradient of the row (dloss, or dloss/kept for
					// the mean), 0 for an ignored row.
					dlv := s.uniform(max(1, tensor.Numel(lshape)), 0.5, 2)
					dloss, dlr := s.put(wideOf(d), dlv, lshape...)
					sm := refSoftmax(xv, []int{n, cl}, 1, false)
					wantD := make([]float64, n*cl)
					for i := 0; i < n; i++ {
						if p.HasIgnore && int64(tv[i]) == p.IgnoreIndex {
							continue
						}
						g := dlr[0]
						switch p.Reduction {
						case kernels.ReduceNone:
							g = dlr[i]
						case kernels.ReduceMean:
							g /= float64(kept)
						}
						for j := 0; j < cl; j++ {
							q := p.LabelSmoothing / float64(cl)
							if j == int(tv[i]) {
								q += 1 - p.LabelSmoothing
							}
							wantD[i*cl+j] = g * (sm[i*cl+j] - q)
						}
					}
					dlogits := s.out(d, n, cl)
					what = name("CrossEntropyBackward", d, idt, n, cl, p)
					s.check(call{what: what, launch: func() { s.b.CrossEntropyBackward(dlogits, logits, target, dloss, p) }, writes: []*T{dlogits}}, func(got [][]float64) {
						s.close(what, got[0], wantD, 2*tol(d))
					})
				}
			}
		}
	}
}

// checkCrossEntropyCount: the fused loss and metrics equal CrossEntropy,
// Binary Add and CountCorrect on the same backend bit for bit, and the
// float64 reference within the loss's tolerance and exactly for the
// count; rows with a tie and a NaN, targets that are the argmax, an
// ignored target; a few rows (CUDA's one launch) and more than 64.
func checkCrossEntropyCount(s *suite) {
	be := s.b.(kernels.CrossEntropyCounter)
	for _, sz := range [][2]int{{6, 5}, {4, 70}, {100, 7}, {300, 7}} {
		n, cl := sz[0], sz[1]
		for _, p := range countParams {
			for _, d := range s.floats("CrossEntropyCount") {
				for _, idt := range []tensor.DType{tensor.I64, tensor.I32} {
					xv := s.normals(n * cl)
					xv[cl+1] = xv[cl] // a tie in row 1
					if p.Reduction == kernels.ReduceSum {
						xv[2*cl+1] = math.NaN() // a NaN in row 2: a NaN loss
					}
					logits, xr := s.put(d, xv, n, cl)
					tv := make([]float64, n)
					for i := range tv {
						tv[i] = float64(s.rng.IntN(cl))
						if i%2 == 0 {
							tv[i] = float64(argMaxOf(xr[i*cl : (i+1)*cl]))
						}
					}
					if p.HasIgnore {
						tv[0] = float64(p.IgnoreIndex)
					}
					target, _ := s.put(idt, tv, n)
					sum0 := s.uniform(1, 1, 2)
					av := s.uniform(n, 0, 3)
					for i := range av {
						av[i] = math.Floor(av[i])
					}
					wantAcc := make([]float64, n)
					for i := range wantAcc {
						wantAcc[i] = av[i]
						if argMaxOf(xr[i*cl:(i+1)*cl]) == int(tv[i]) {
							wantAcc[i]++
						}
					}
					_, total, _ := refCrossEntropy(xr, tv, n, cl, p)

					// The unfused ops, on this backend.
					loss0, sumA, accA := s.out(tensor.F32), s.f32(sum0, 1), s.f32(av, n)
					s.b.CrossEntropy(loss0, logits, target, p)
					s.b.Binary(kernels.Add, sumA, sumA, loss0.Reshape(1))
					s.b.CountCorrect(accA, logits, target)
					unfused := s.read([]*T{loss0, sumA, accA})

					loss, lossSum, acc := s.out(tensor.F32), s.f32(sum0, 1), s.f32(av, n)
					what := name("CrossEntropyCount", d, idt, n, cl, p)
					s.check(call{what: what, launch: func() { be.CrossEntropyCount(loss, logits, target, p, lossSum, acc) }, writes: []*T{loss, lossSum, acc}}, func(got [][]float64) {
						for i, w := range []string{"loss", "lossSum", "acc"} {
							same(s.t, what+" "+w+" (against CrossEntropy, Binary Add and CountCorrect)", got[i], unfused[i])
						}
						if !math.IsNaN(total) {
							lt := tol(d) // the loss is F32: an F64 loss is rounded to it
							if d == tensor.F64 {
								lt = tol(tensor.F32)
							}
							s.close(what+" loss", got[0], []float64{total}, 2*lt)
						}
						same(s.t, what+" acc", got[2], wantAcc)
					})
				}
			}
		}
	}
	s.panics("CrossEntropyCount", func() {
		be.CrossEntropyCount(s.out(tensor.F32, 3), s.out(tensor.F32, 3, 4), s.out(tensor.I64, 3), kernels.CrossEntropyParams{Reduction: kernels.ReduceNone}, s.out(tensor.F32, 1), s.out(tensor.F32, 3))
	})
}

// checkCrossEntropyCountGrad: where the backend fuses it (true), the
// loss and metrics are CrossEntropyCount's on the same backend bit for
// bit and dlogits is the float64 gradient for a dloss of one (1/kept
// rows for the mean; 0 on an ignored row); where it does not (false),
// nothing is written. A few rows (CUDA's one launch) and more than 64.
func checkCrossEntropyCountGrad(s *suite) {
	be := s.b.(kernels.CrossEntropyGradCounter)
	cc, _ := s.b.(kernels.CrossEntropyCounter)
	for _, sz := range [][2]int{{4, 4}, {6, 5}, {4, 70}, {64, 10}, {100, 7}, {300, 7}} {
		n, cl := sz[0], sz[1]
		for _, p := range countParams {
			for _, d := range s.floats("CrossEntropyCountGrad") {
				for _, idt := range []tensor.DType{tensor.I64, tensor.I32} {
					logits, xv := s.in(d, n, cl)
					tv := s.ceTargets(n, cl, p)
					target, _ := s.put(idt, tv, n)
					sum0, av := s.ceMetrics(n)
					wantD := refCEGrad(xv, tv, n, cl, p)
					// CrossEntropyCount on this backend (its definition
					// where the backend has no fused count).
					loss0, sumA, accA := s.out(tensor.F32), s.f32(sum0, 1), s.f32(av, n)
					if cc != nil {
						cc.CrossEntropyCount(loss0, logits, target, p, sumA, accA)
					} else {
						kernels.CrossEntropyCountOps(s.b, loss0, logits, target, p, sumA, accA)
					}
					counted := s.read([]*T{loss0, sumA, accA})

					loss, lossSum, acc, dl := s.out(tensor.F32), s.f32(sum0, 1), s.f32(av, n), s.out(d, n, cl)
					untouched := s.read([]*T{loss, lossSum, acc, dl})
					what := name("CrossEntropyCountGrad", d, idt, n, cl, p)
					var fused bool
					launch := func() { fused = be.CrossEntropyCountGrad(loss, logits, target, p, lossSum, acc, dl) }
					s.check(call{what: what, launch: launch, writes: []*T{loss, lossSum, acc, dl}, declined: func() bool { return !fused }}, func(got [][]float64) {
						if !fused {
							for i, w := range []string{"loss", "lossSum", "acc", "dlogits"} {
								same(s.t, what+" "+w+" (not fused: unwritten)", got[i], untouched[i])
							}
							return
						}
						for i, w := range []string{"loss", "lossSum", "acc"} {
							same(s.t, what+" "+w+" (against CrossEntropyCount)", got[i], counted[i])
						}
						s.close(what+" dlogits", got[3], wantD, 2*tol(d))
					})
					if !fused {
						s.t.Logf("%s: not fused on this backend", what)
					}
				}
			}
		}
	}
}

// refCEGrad is the gradient of the cross-entropy of logits x [n, c]
// against tv for a dloss of one: (softmax − (1−ε)·onehot − ε/c), over
// the kept rows for the mean, 0 on an ignored row.
func refCEGrad(x, tv []float64, n, c int, p kernels.CrossEntropyParams) []float64 {
	_, _, kept := refCrossEntropy(x, tv, n, c, p)
	g := 1.0
	if p.Reduction == kernels.ReduceMean {
		g /= float64(kept)
	}
	sm := refSoftmax(x, []int{n, c}, 1, false)
	d := make([]float64, n*c)
	for i := 0; i < n; i++ {
		if p.HasIgnore && int64(tv[i]) == p.IgnoreIndex {
			continue
		}
		for j := 0; j < c; j++ {
			q := p.LabelSmoothing / float64(c)
			if j == int(tv[i]) {
				q += 1 - p.LabelSmoothing
			}
			d[i*c+j] = g * (sm[i*c+j] - q)
		}
	}
	return d
}

// checkLinearCrossEntropyCount: where the backend fuses it (true), the
// logits are x·wᵀ + b, and the loss, the metrics and dlogits (when asked
// for) are those of the cross-entropy of the logits it wrote — the loss
// and the gradient within tolerance of float64, each correct count
// exactly its row's; where it does not (false), nothing is written. W1's
// head (4 rows, 16 → 4), a few rows, 64 and more than 64 rows; with and
// without a bias and dlogits.
func checkLinearCrossEntropyCount(s *suite) {
	be := s.b.(kernels.LinearCrossEntropyCounter)
	for _, sz := range [][3]int{{4, 16, 4}, {6, 10, 5}, {64, 32, 10}, {100, 8, 7}, {128, 32, 10}, {300, 8, 7}} {
		m, k, n := sz[0], sz[1], sz[2]
		for pi, p := range countParams {
			for _, bias := range []bool{true, false} {
				for _, grad := range []bool{true, false} {
					x, xv := s.in(tensor.F32, m, k)
					w, wv := s.in(tensor.F32, n, k)
					var b *T
					var bv []float64
					if bias {
						b, bv = s.in(tensor.F32, n)
					}
					tv := s.ceTargets(m, n, p)
					target, _ := s.put(tensor.I64, tv, m)
					wantL := make([]float64, m*n)
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							var v float64
							for q := 0; q < k; q++ {
								v += xv[i*k+q] * wv[j*k+q]
							}
							if bias {
								v += bv[j]
							}
							wantL[i*n+j] = v
						}
					}
					sum0, av := s.ceMetrics(m)
					logits, loss, lossSum, acc := s.out(tensor.F32, m, n), s.out(tensor.F32), s.f32(sum0, 1), s.f32(av, m)
					writes := []*T{logits, loss, lossSum, acc}
					var dl *T
					if grad {
						dl = s.out(tensor.F32, m, n)
						writes = append(writes, dl)
					}
					untouched := s.read(writes)
					what := name("LinearCrossEntropyCount", m, k, n, "params", pi, "bias", bias, "grad", grad)
					var fused bool
					launch := func() { fused = be.LinearCrossEntropyCount(logits, loss, x, w, b, target, p, lossSum, acc, dl) }
					s.check(call{what: what, launch: launch, writes: writes, declined: func() bool { return !fused }}, func(got [][]float64) {
						if !fused {
							for i := range got {
								same(s.t, name(what, "written", i, "(not fused: unwritten)"), got[i], untouched[i])
							}
							return
						}
						s.close(what+" logits", got[0], wantL, 4*tol(tensor.F32))
						// The rest from the logits it wrote.
						_, total, _ := refCrossEntropy(got[0], tv, m, n, p)
						s.close(what+" loss", got[1], []float64{total}, 4*tol(tensor.F32))
						s.close(what+" lossSum", got[2], []float64{sum0[0] + got[1][0]}, 2*tol(tensor.F32))
						wantAcc := make([]float64, m)
						for i := range wantAcc {
							wantAcc[i] = av[i]
							if argMaxOf(got[0][i*n:(i+1)*n]) == int(tv[i]) {
								wantAcc[i]++
							}
						}
						same(s.t, what+" acc", got[3], wantAcc)
						if grad {
							s.close(what+" dlogits", got[4], refCEGrad(got[0], tv, m, n, p), 4*tol(tensor.F32))
						}
					})
					if !fused {
						s.t.Logf("%s: not fused on this backend", what)
					}
				}
			}
		}
	}
}

// ceTargets draws n class indices below c, with the ignored index (when
// p has one) in row 0, and in row n−1 too when it is negative.
func (s *suite) ceTargets(n, c int, p kernels.CrossEntropyParams) []float64 {
	tv := make([]float64, n)
	for i := range tv {
		tv[i] = float64(s.rng.IntN(c))
	}
	if p.HasIgnore {
		tv[0] = float64(p.IgnoreIndex)
		if p.IgnoreIndex < 0 {
			tv[n-1] = float64(p.IgnoreIndex)
		}
	}
	return tv
}

// ceMetrics draws a trainer's running metrics to add to: a loss sum in
// [1, 2) and n whole correct counts in [0, 3).
func (s *suite) ceMetrics(n int) (sum0, av []float64) {
	sum0 = s.uniform(1, 1, 2)
	av = s.uniform(n, 0, 3)
	for i := range av {
		av[i] = math.Floor(av[i])
	}
	return sum0, av
}

// countParams are the counted cross-entropy checks' parameters: the
// mean, the sum with label smoothing, and an ignored index.
// linearArena is a linear layer's arena for checkLinearCESGDStep: the
// flat parameters [w (n·k) | b (n)], their gradients (random, as if
// earlier gradients were there) and momentum, the hyper {lr, step}, and
// the views of w, b and their gradients.
type linearArena struct {
	param, grad, mom, hyper, w, b, gw, gb *T
}

func (s *suite) linearArena(n, k int, bias bool, step float64) linearArena {
	np := n * k
	if bias {
		np += n
	}
	a := linearArena{param: s.f32(s.normals(np), np), grad: s.f32(s.normals(np), np), mom: s.f32(s.normals(np), np)}
	a.hyper, _ = s.put(tensor.F64, []float64{0.05, step}, 2)
	a.w, a.gw = a.param.Narrow(0, 0, n*k).Reshape(n, k), a.grad.Narrow(0, 0, n*k).Reshape(n, k)
	if bias {
		a.b, a.gb = a.param.Narrow(0, n*k, n), a.grad.Narrow(0, n*k, n)
	}
	return a
}

// checkLinearCESGDStep: where the backend fuses it (true), a linear
// classifier's SGD step writes bit for bit what its three calls write
// on the same backend — LinearCrossEntropyCount, LinearGradAdd and
// IncrementSGDStep — logits, loss, metrics, dlogits, and the arena's
// parameters, gradients, momentum and step; where it does not (false),
// nothing at all. W1's layer (4 rows of 16 features, 4 classes) and
// W4's head (128 rows), with and without a bias, momentum, zeroed
// gradients, the first step; and past one launch.
func checkLinearCESGDStep(s *suite) {
	be := s.b.(kernels.LinearCESGDStepper)
	lc := s.b.(kernels.LinearCrossEntropyCounter)
	la := s.b.(kernels.LinearGradAccumulator)
	si := s.b.(kernels.SGDIncrementer)
	for _, sz := range [][3]int{{4, 16, 4}, {128, 32, 10}, {300, 8, 7}} {
		m, k, n := sz[0], sz[1], sz[2]
		for pi, p := range countParams {
			for _, o := range []kernels.SGDOptions{{Momentum: 0.9, ZeroGrad: true}, {WeightDecay: 0.01, Nesterov: false}, {Momentum: 0.5, Dampening: 0.1, Maximize: true}} {
				for _, bias := range []bool{true, false} {
					step := 3.0
					if pi == 1 {
						step = 0 // the first step: momentum takes the gradient
					}
					x, _ := s.in(tensor.F32, m, k)
					target, _ := s.put(tensor.I64, s.ceTargets(m, n, p), m)
					sum0, av := s.ceMetrics(m)
					a := s.linearArena(n, k, bias, step)
					mom := a.mom
					if o.Momentum == 0 {
						mom = nil
					}
					logits, loss, lossSum, acc, dl := s.out(tensor.F32, m, n), s.out(tensor.F32), s.f32(sum0, 1), s.f32(av, m), s.out(tensor.F32, m, n)
					writes := []*T{logits, loss, lossSum, acc, dl, a.param, a.grad, a.mom, a.hyper}

					// The three calls, on copies.
					c := make([]*T, len(writes))
					for i, w := range writes {
						c[i] = s.clone(w)
					}
					ca := linearArena{param: c[5], grad: c[6], mom: c[7], hyper: c[8]}
					ca.w, ca.gw = ca.param.Narrow(0, 0, n*k).Reshape(n, k), ca.grad.Narrow(0, 0, n*k).Reshape(n, k)
					if bias {
						ca.b, ca.gb = ca.param.Narrow(0, n*k, n), ca.grad.Narrow(0, n*k, n)
					}
					cmom := ca.mom
					if o.Momentum == 0 {
						cmom = nil
					}
					lc.LinearCrossEntropyCount(c[0], c[1], x, ca.w, ca.b, target, p, c[2], c[3], c[4])
					la.LinearGradAdd(ca.gw, ca.gb, c[4], x)
					si.IncrementSGDStep(ca.param, ca.grad, cmom, ca.hyper, nil, o)
					three := s.read(c)

					untouched := s.read(writes)
					what := name("LinearCESGDStep", m, k, n, "params", pi, o, "bias", bias)
					var fused bool
					launch := func() {
						fused = be.LinearCESGDStep(logits, loss, x, a.w, a.b, target, p, lossSum, acc, dl, a.gw, a.gb, a.param, a.grad, mom, a.hyper, o)
					}
					s.check(call{what: what, launch: launch, writes: writes, declined: func() bool { return !fused }}, func(got [][]float64) {
						for i := range got {
							if !fused {
								same(s.t, name(what, "written", i, "(not fused: unwritten)"), got[i], untouched[i])
								continue
							}
							same(s.t, name(what, "written", i, "(against its three calls)"), got[i], three[i])
						}
					})
					if !fused {
						s.t.Logf("%s: not fused on this backend", what)
					}
				}
			}
		}
	}
	s.panics("LinearCESGDStep", func() { // w outside the arena
		a := s.linearArena(4, 3, true, 1)
		w := s.out(tensor.F32, 4, 3)
		be.LinearCESGDStep(s.out(tensor.F32, 2, 4), s.out(tensor.F32), s.out(tensor.F32, 2, 3), w, a.b, s.full(tensor.I64, 0, 2),
			kernels.CrossEntropyParams{}, s.out(tensor.F32, 1), s.out(tensor.F32, 2), s.out(tensor.F32, 2, 4), a.gw, a.gb, a.param, a.grad, nil, a.hyper, kernels.SGDOptions{})
	})
}

var countParams = []kernels.CrossEntropyParams{
	{},
	{Reduction: kernels.ReduceSum, LabelSmoothing: 0.1},
	{HasIgnore: true, IgnoreIndex: 1},
}

// f32 is put in F32 without the values back.
func (s *suite) f32(vals []float64, shape ...int) *T {
	s.t.Helper()
	t, _ := s.put(tensor.F32, vals, shape...)
	return t
}
