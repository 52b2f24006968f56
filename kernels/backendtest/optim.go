package backendtest

import (
	"fmt"
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The optim family: the foreach primitives, Increment, SGDStep,
// AdamWStep, UnscaleCheck, ScalerUpdate and the optional ForeachStepper.

var optimCases = []conformance{
	of(checkForeach, "ForeachNorm", "ForeachScale", "ForeachAxpy"),
	of(checkIncrement, "Increment"),
	of(checkSGDStep, "SGDStep"),
	optional[kernels.SGDIncrementer](checkIncrementSGDStep, "IncrementSGDStep"),
	of(checkAdamWStep, "AdamWStep"),
	of(checkUnscaleCheck, "UnscaleCheck"),
	of(checkScalerUpdate, "ScalerUpdate"),
	optional[kernels.ForeachStepper](checkForeachStepper, "ForeachSGDStep", "ForeachAdamWStep"),
	optional[kernels.GradClipper](checkGradClipper, "ClipByNorm"),
}

// listSizes are the element counts of the tensors of a list: tiny, odd,
// and past a chunk (CUDA's multi-tensor chunks are 16384 elements: 20000
// is two, the second short).
var listSizes = []int{1, 300, 17, 20000, 64}

// list is one tensor per listSizes of dtype d, and their values.
func (s *suite) list(d tensor.DType) ([]*T, [][]float64) {
	ts, vs := make([]*T, len(listSizes)), make([][]float64, len(listSizes))
	for i, n := range listSizes {
		ts[i], vs[i] = s.in(d, n)
	}
	return ts, vs
}

func checkForeach(s *suite) {
	for _, d := range s.floats("ForeachNorm", tensor.F64, tensor.F32) {
		xs, xv := s.list(d)
		want := make([]float64, len(xs))
		for i, v := range xv {
			var sum float64
			for _, e := range v {
				sum += e * e
			}
			want[i] = math.Sqrt(sum)
		}
		// The whole list, and a list of one (a device's per-tensor path).
		// The sums run in a fixed order: a replay gives the eager call's
		// bits.
		for _, n := range []int{len(xs), 1} {
			dst := s.out(wideOf(d), n)
			what := name("ForeachNorm", d, "tensors", n)
			s.check(call{what: what, launch: func() { s.b.ForeachNorm(dst, xs[:n]) }, writes: []*T{dst}}, func(got [][]float64) {
				s.close(what, got[0], want[:n], 2*tol(d))
			})
		}
		// Values whose squares overflow fp32 (±3e19) or underflow it
		// (±1e-23) while their norms are ordinary floats: the squares
		// and sums are wide, as the CPU's float64.
		for _, scale := range []float64{3e19, 1e-23} {
			var big []*T
			var bw []float64
			for _, n := range []int{1000, 20000} {
				v := s.normals(n)
				for j := range v {
					v[j] *= scale
				}
				x, xv := s.put(d, v, n)
				var sum float64
				for _, e := range xv {
					sum += e * e
				}
				big, bw = append(big, x), append(bw, math.Sqrt(sum))
			}
			for _, n := range []int{len(big), 1} {
				dst := s.out(wideOf(d), n)
				what := name("ForeachNorm", d, "scale", scale, "tensors", n)
				s.check(call{what: what, launch: func() { s.b.ForeachNorm(dst, big[:n]) }, writes: []*T{dst}}, func(got [][]float64) {
					s.close(what, got[0], bw[:n], 2*tol(d))
				})
			}
		}
	}
	for _, d := range s.floats("ForeachScale", tensor.F64, tensor.F32) {
		xs, xv := s.list(d)
		sc, _ := s.put(wideOf(d), []float64{-0.75}, 1)
		what := name("ForeachScale", d)
		s.check(call{what: what, launch: func() { s.b.ForeachScale(xs, sc) }, writes: xs}, func(got [][]float64) {
			for i, v := range xv {
				want := make([]float64, len(v))
				for j, e := range v {
					want[j] = e * -0.75
				}
				s.close(name(what, "xs", i), got[i], want, tol(d))
			}
		})
	}
	s.panics("ForeachScale", func() { // the factor is an element of a tensor it scales
		x := s.out(tensor.F32, 8)
		s.b.ForeachScale([]*T{s.out(tensor.F32, 3), x}, x.Narrow(0, 5, 1))
	})
	for _, d := range s.floats("ForeachAxpy", tensor.F64, tensor.F32) {
		ys, yv := s.list(d)
		xs, xv := s.list(d)
		what := name("ForeachAxpy", d)
		s.check(call{what: what, launch: func() { s.b.ForeachAxpy(ys, xs, 0.5) }, writes: ys}, func(got [][]float64) {
			for i := range yv {
				want := make([]float64, len(yv[i]))
				for j := range want {
					want[j] = yv[i][j] + 0.5*xv[i][j]
				}
				s.close(name(what, "ys", i), got[i], want, tol(d))
			}
		})
	}
}

func checkIncrement(s *suite) {
	for _, d := range []tensor.DType{tensor.F32, tensor.F64, tensor.I64} {
		for _, sk := range []float64{-1, 0, 1} { // -1: no skip tensor
			counter, _ := s.put(d, []float64{41}, 1)
			var skip *T
			want := 42.0
			if sk >= 0 {
				skip, _ = s.put(tensor.F32, []float64{sk}, 1)
				if sk != 0 {
					want = 41
				}
			}
			what := name("Increment", d, "skip", sk)
			s.check(call{what: what, launch: func() { s.b.Increment(counter, skip) }, writes: []*T{counter}}, func(got [][]float64) {
				same(s.t, what, got[0], []float64{want})
			})
		}
	}
}

// refSGD is one torch.optim.SGD step of p (and buf, the momentum
// buffer) at step (1 for the first).
func refSGD(p, g, buf []float64, lr float64, step int, o kernels.SGDOptions) {
	for i := range p {
		d := g[i]
		if o.Maximize {
			d = -d
		}
		d += o.WeightDecay * p[i]
		if o.Momentum != 0 {
			if step <= 1 {
				buf[i] = d
			} else {
				buf[i] = o.Momentum*buf[i] + (1-o.Dampening)*d
			}
			if o.Nesterov {
				d += o.Momentum * buf[i]
			} else {
				d = buf[i]
			}
		}
		p[i] -= lr * d
	}
}

// refAdamW is one torch.optim.AdamW step of p, m and v at step.
func refAdamW(p, g, m, v []float64, lr float64, step int, o kernels.AdamWOptions) {
	c1 := 1 - math.Pow(o.Beta1, float64(step))
	c2 := 1 - math.Pow(o.Beta2, float64(step))
	for i := range p {
		p[i] *= 1 - lr*o.WeightDecay
		m[i] = o.Beta1*m[i] + (1-o.Beta1)*g[i]
		v[i] = o.Beta2*v[i] + (1-o.Beta2)*g[i]*g[i]
		p[i] -= lr / c1 * m[i] / (math.Sqrt(v[i])/math.Sqrt(c2) + o.Eps)
	}
}

var sgdOptions = []kernels.SGDOptions{
	{},
	{WeightDecay: 0.01, Maximize: true},
	{Momentum: 0.9},
	{Momentum: 0.9, Dampening: 0.1, WeightDecay: 5e-4},
	{Momentum: 0.8, Nesterov: true, WeightDecay: 0.01},
	{ZeroGrad: true},
	{Momentum: 0.9, WeightDecay: 5e-4, ZeroGrad: true},
}

var adamwOptions = []kernels.AdamWOptions{
	{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
	{Beta1: 0.8, Beta2: 0.95, Eps: 1e-6, WeightDecay: 0.01},
}

func checkSGDStep(s *suite) {
	const n = 1000
	for _, d := range s.floats("SGDStep", tensor.F64, tensor.F32) {
		for oi, o := range sgdOptions {
			for _, step := range []int{1, 3} {
				for _, inf := range []float64{-1, 0, 1} { // -1: no foundInf
					p, pv := s.in(d, n)
					g, gv := s.in(d, n)
					var mom *T
					var mv []float64
					writes := []*T{p}
					if o.Momentum != 0 {
						mom, mv = s.in(d, n)
						writes = append(writes, mom)
					}
					hyper, _ := s.put(tensor.F64, []float64{0.1, float64(step)}, 2)
					var foundInf *T
					if inf >= 0 {
						foundInf, _ = s.put(tensor.F32, []float64{inf}, 1)
					}
					wantP, wantM := append([]float64(nil), pv...), append([]float64(nil), mv...)
					if inf <= 0 {
						refSGD(wantP, gv, wantM, 0.1, step, o)
					}
					// The gradient is left as it was, or zeroed with
					// ZeroGrad (the update skipped or not).
					wantG := append([]float64(nil), gv...)
					if o.ZeroGrad {
						clear(wantG)
					}
					writes = append(writes, g)
					what := name("SGDStep", d, "options", oi, "step", step, "foundInf", inf)
					s.check(call{what: what, launch: func() { s.b.SGDStep(p, g, mom, hyper, foundInf, o) }, writes: writes}, func(got [][]float64) {
						s.close(what+" param", got[0], wantP, 2*tol(d))
						if mom != nil {
							s.close(what+" momentum", got[1], wantM, 2*tol(d))
						}
						same(s.t, what+" grad", got[len(got)-1], wantG)
					})
				}
			}
		}
	}
	s.panics("SGDStep", func() {
		p := s.out(tensor.F32, 4)
		s.b.SGDStep(p, s.out(tensor.F32, 5), nil, s.full(tensor.F64, 0.1, 2), nil, kernels.SGDOptions{})
	})
	s.panics("SGDStep", func() { // a flag of two elements
		s.b.SGDStep(s.out(tensor.F32, 4), s.out(tensor.F32, 4), nil, s.full(tensor.F64, 0.1, 2), s.full(tensor.F32, 0, 2), kernels.SGDOptions{})
	})
}

func checkAdamWStep(s *suite) {
	const n = 1000
	for _, d := range s.floats("AdamWStep", tensor.F64, tensor.F32) {
		for oi, o := range adamwOptions {
			for _, step := range []int{1, 4} {
				for _, inf := range []float64{-1, 0, 1} {
					p, pv := s.in(d, n)
					g, gv := s.in(d, n)
					m, mv := s.in(d, n)
					v, vv := s.put(d, s.uniform(n, 0, 2), n)
					hyper, _ := s.put(tensor.F64, []float64{0.01, float64(step)}, 2)
					var foundInf *T
					if inf >= 0 {
						foundInf, _ = s.put(tensor.F32, []float64{inf}, 1)
					}
					wantP := append([]float64(nil), pv...)
					wantM, wantV := append([]float64(nil), mv...), append([]float64(nil), vv...)
					if inf <= 0 {
						refAdamW(wantP, gv, wantM, wantV, 0.01, step, o)
					}
					what := name("AdamWStep", d, "options", oi, "step", step, "foundInf", inf)
					s.check(call{what: what, launch: func() { s.b.AdamWStep(p, g, m, v, hyper, foundInf, o) }, writes: []*T{p, m, v}}, func(got [][]float64) {
						s.close(what+" param", got[0], wantP, 4*tol(d))
						s.close(what+" m", got[1], wantM, 4*tol(d))
						s.close(what+" v", got[2], wantV, 4*tol(d))
					})
				}
			}
		}
	}
}

func checkUnscaleCheck(s *suite) {
	for _, d := range s.floats("UnscaleCheck", tensor.F64, tensor.F32) {
		for _, c := range []struct {
			bad  float64 // a value put in the last tensor (0: none)
			was  float64 // foundInf before
			want float64
		}{{0, 0, 0}, {math.Inf(1), 0, 1}, {math.NaN(), 0, 1}, {0, 1, 1}} {
			xs, xv := s.list(d)
			if c.bad != 0 {
				last := len(xs) - 1
				vals := append([]float64(nil), xv[last]...)
				vals[len(vals)/2] = c.bad
				xs[last], xv[last] = s.put(d, vals, len(vals))
			}
			inv, _ := s.put(wideOf(d), []float64{0.25}, 1)
			found, _ := s.put(tensor.F32, []float64{c.was}, 1)
			what := name("UnscaleCheck", d, "bad", c.bad, "foundInf was", c.was)
			s.check(call{what: what, launch: func() { s.b.UnscaleCheck(xs, inv, found) }, writes: append([]*T{found}, xs...)}, func(got [][]float64) {
				same(s.t, what+" foundInf", got[0], []float64{c.want})
				for i, v := range xv {
					want := make([]float64, len(v))
					for j, e := range v {
						want[j] = e * 0.25
					}
					s.close(name(what, "xs", i), got[i+1], want, tol(d))
				}
			})
		}
	}
}

func checkScalerUpdate(s *suite) {
	for _, c := range []struct {
		scale, tracker, found float64
		interval              int
		wantScale, wantTrack  float64
	}{
		{65536, 5, 1, 2000, 32768, 0},              // an overflow backs off and resets
		{65536, 5, 0, 2000, 65536, 6},              // a clean step counts
		{65536, 1999, 0, 2000, 131072, 0},          // the interval's last grows
		{3e38, 9, 0, 10, 3e38, 0},                  // no growth past the F32 range
		{1024, 0, 0, 1, 2048, 0},                   // an interval of one
		{float64(float32(0.5)), 3, 2, 10, 0.25, 0}, // any non-zero foundInf
	} {
		// optim.GradScaler keeps an I32 tracker; F32 ones count too.
		for _, tdt := range []tensor.DType{tensor.I32, tensor.F32} {
			scale, _ := s.put(tensor.F32, []float64{c.scale}, 1)
			tracker, _ := s.put(tdt, []float64{c.tracker}, 1)
			found, _ := s.put(tensor.F32, []float64{c.found}, 1)
			what := name("ScalerUpdate", tdt, c.scale, c.tracker, c.found, c.interval)
			s.check(call{what: what, launch: func() { s.b.ScalerUpdate(scale, tracker, found, 2, 0.5, c.interval) }, writes: []*T{scale, tracker}}, func(got [][]float64) {
				same(s.t, what+" scale", got[0], []float64{float64(float32(c.wantScale))})
				same(s.t, what+" tracker", got[1], []float64{c.wantTrack})
			})
		}
	}
}

func checkForeachStepper(s *suite) {
	fs := s.b.(kernels.ForeachStepper)
	s.panics("ForeachSGDStep", func() { // ZeroGrad is refused
		params, _ := s.list(tensor.F32)
		grads, _ := s.list(tensor.F32)
		fs.ForeachSGDStep(params, grads, nil, s.full(tensor.F64, 0.1, 2), nil, kernels.SGDOptions{ZeroGrad: true})
	})
	for _, d := range s.floats("ForeachSGDStep", tensor.F64, tensor.F32) {
		for oi, o := range sgdOptions {
			if o.ZeroGrad {
				continue // SGDStep's alone (see kernels.SGDOptions)
			}
			params, pv := s.list(d)
			grads, gv := s.list(d)
			var moms []*T
			var mv [][]float64
			writes := append([]*T(nil), params...)
			if o.Momentum != 0 {
				moms, mv = s.list(d)
				writes = append(writes, moms...)
			}
			hyper, _ := s.put(tensor.F64, []float64{0.1, 2}, 2)
			what := name("ForeachSGDStep", d, "options", oi)
			s.check(call{what: what, launch: func() { fs.ForeachSGDStep(params, grads, moms, hyper, nil, o) }, writes: writes}, func(got [][]float64) {
				for i := range params {
					wantP := append([]float64(nil), pv[i]...)
					var wantM []float64
					if moms != nil {
						wantM = append([]float64(nil), mv[i]...)
					} else {
						wantM = make([]float64, len(wantP))
					}
					refSGD(wantP, gv[i], wantM, 0.1, 2, o)
					s.close(name(what, "param", i), got[i], wantP, 2*tol(d))
					if moms != nil {
						s.close(name(what, "momentum", i), got[len(params)+i], wantM, 2*tol(d))
					}
				}
			})
		}
	}
	for _, d := range s.floats("ForeachAdamWStep", tensor.F64, tensor.F32) {
		for oi, o := range adamwOptions {
			params, pv := s.list(d)
			grads, gv := s.list(d)
			ms, mv := s.list(d)
			vs := make([]*T, len(listSizes))
			vv := make([][]float64, len(listSizes))
			for i, n := range listSizes {
				vs[i], vv[i] = s.put(d, s.uniform(n, 0, 2), n)
			}
			hyper, _ := s.put(tensor.F64, []float64{0.01, 3}, 2)
			found, _ := s.put(tensor.F32, []float64{0}, 1)
			writes := append(append(append([]*T(nil), params...), ms...), vs...)
			what := name("ForeachAdamWStep", d, "options", oi)
			s.check(call{what: what, launch: func() { fs.ForeachAdamWStep(params, grads, ms, vs, hyper, found, o) }, writes: writes}, func(got [][]float64) {
				k := len(params)
				for i := range params {
					wantP := append([]float64(nil), pv[i]...)
					wantM, wantV := append([]float64(nil), mv[i]...), append([]float64(nil), vv[i]...)
					refAdamW(wantP, gv[i], wantM, wantV, 0.01, 3, o)
					s.close(name(what, "param", i), got[i], wantP, 4*tol(d))
					s.close(name(what, "m", i), got[k+i], wantM, 4*tol(d))
					s.close(name(what, "v", i), got[2*k+i], wantV, 4*tol(d))
				}
			})
		}
	}
}

// checkIncrementSGDStep: IncrementSGDStep equals Increment of hyper[1]
// followed by SGDStep on the same backend bit for bit (param, momentum
// and the counter), on a small arena (CUDA's one launch) and one past
// 16 384 elements, on the first and a later step, with foundInf absent,
// zero and set.
func checkIncrementSGDStep(s *suite) {
	be := s.b.(kernels.SGDIncrementer)
	for _, n := range []int{70, 20000} {
		for _, d := range s.floats("IncrementSGDStep", tensor.F64, tensor.F32) {
			for oi, o := range sgdOptions {
				for _, step := range []int{0, 2} {
					for _, inf := range []float64{-1, 0, 1} { // -1: no foundInf
						pv, gv := s.normals(n), s.normals(n)
						mv := s.normals(n)
						type state struct{ p, g, m, hyper, foundInf *T }
						mk := func() state {
							var st state
							st.p, _ = s.put(d, pv, n)
							st.g, _ = s.put(d, gv, n)
							if o.Momentum != 0 {
								st.m, _ = s.put(d, mv, n)
							}
							st.hyper, _ = s.put(tensor.F64, []float64{0.1, float64(step)}, 2)
							if inf >= 0 {
								st.foundInf, _ = s.put(tensor.F32, []float64{inf}, 1)
							}
							return st
						}
						writes := func(st state) []*T {
							w := []*T{st.p, st.hyper}
							if st.m != nil {
								w = append(w, st.m)
							}
							return append(w, st.g)
						}
						ref := mk()
						s.b.Increment(ref.hyper.Narrow(0, 1, 1), ref.foundInf)
						s.b.SGDStep(ref.p, ref.g, ref.m, ref.hyper, ref.foundInf, o)
						want := s.read(writes(ref))
						st := mk()
						what := name("IncrementSGDStep", d, n, "options", oi, "step", step, "foundInf", inf)
						s.check(call{what: what, launch: func() { be.IncrementSGDStep(st.p, st.g, st.m, st.hyper, st.foundInf, o) }, writes: writes(st)}, func(got [][]float64) {
							for i := range got {
								same(s.t, fmt.Sprintf("%s (against Increment and SGDStep) written %d", what, i), got[i], want[i])
							}
							wantStep := float64(step + 1)
							if inf > 0 {
								wantStep = float64(step)
							}
							same(s.t, what+" step", got[1][1:], []float64{wantStep})
						})
					}
				}
			}
		}
	}
	s.panics("IncrementSGDStep", func() {
		be.IncrementSGDStep(s.out(tensor.F32, 4), s.out(tensor.F32, 5), nil, s.full(tensor.F64, 0.1, 2), nil, kernels.SGDOptions{})
	})
	s.panics("IncrementSGDStep", func() { // a flag of two elements
		be.IncrementSGDStep(s.out(tensor.F32, 4), s.out(tensor.F32, 4), nil, s.full(tensor.F64, 0.1, 2), s.full(tensor.F32, 0, 2), kernels.SGDOptions{})
	})
}

// checkGradClipper: ClipByNorm writes the global L2 norm of the tensors
// and scales them by min(1, maxNorm/(norm+eps)): one tensor (an arena's
// one bucket; small, and past a GPU's chunk) and a list, clipped and not
// (a coefficient of exactly 1 leaves them as they were), values whose
// fp32 squares overflow (a finite norm all the same), a NaN that makes
// the norm and every scaled value NaN, and no tensor at all (a zero
// norm).
func checkGradClipper(s *suite) {
	gc := s.b.(kernels.GradClipper)
	const eps = 1e-6
	for _, d := range s.floats("ClipByNorm", tensor.F64, tensor.F32) {
		for _, sizes := range [][]int{{1000}, {70001}, {1, 300, 17, 5000, 64}, {}} {
			for _, maxNorm := range []float64{0.5, 1e9, -1} { // -1: 0.5 over values of 1e19 (fp32 squares overflow)
				for _, nan := range []bool{false, true} {
					if nan && maxNorm != 0.5 {
						continue
					}
					scale := 1.0
					if maxNorm < 0 {
						maxNorm, scale = 0.5, 1e19
					}
					var xs []*T
					var vals [][]float64
					var sq float64
					for i, n := range sizes {
						v := s.normals(n)
						for j := range v {
							v[j] *= scale
						}
						if nan && i == len(sizes)-1 {
							v[n/2] = math.NaN()
						}
						x, xv := s.put(d, v, n)
						xs, vals = append(xs, x), append(vals, xv)
						for _, e := range xv {
							sq += e * e
						}
					}
					norm := math.Sqrt(sq)
					coef := math.Min(1, maxNorm/(norm+eps))
					if math.IsNaN(norm) {
						coef = math.NaN()
					}
					nt := s.out(d)
					writes := append([]*T{nt}, xs...)
					what := name("ClipByNorm", d, sizes, "maxNorm", maxNorm, "scale", scale, "nan", nan)
					s.check(call{what: what, launch: func() { gc.ClipByNorm(nt, xs, maxNorm, eps) }, writes: writes}, func(got [][]float64) {
						s.close(what+" norm", got[0], []float64{norm}, 8*tol(d))
						for i := range xs {
							want := make([]float64, len(vals[i]))
							for j, v := range vals[i] {
								want[j] = v * coef
							}
							if coef == 1 {
								same(s.t, name(what, "unclipped", i), got[1+i], vals[i])
								continue
							}
							s.close(name(what, "scaled", i), got[1+i], want, 8*tol(d))
						}
					})
				}
			}
		}
	}
}
