package cpu

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Optimizer and loss-scaling primitives. Their scalars (learning rate,
// step, scale, found-inf) are tensors read at launch time, so a captured
// step follows schedule and scaler changes on every replay.

// Increment implements kernels.Backend.
func (be *Backend) Increment(counter, skip *T) {
	const name = "Increment"
	needCPU(name, counter, skip)
	must(kernels.CheckFlag(name, "skip", skip, true))
	if be.eager() && counter.Numel() == 1 && (skip == nil || skip.Numel() == 1) {
		if skip == nil || scalarAt(skip, 0) == 0 {
			scalarSet(counter, scalarAt(counter, 0)+1)
		}
		return
	}
	get := scalarReader(name, "counter", counter)
	set := scalarWriter(name, "counter", counter)
	var sk func() float64
	if skip != nil {
		sk = scalarReader(name, "skip", skip)
	}
	be.launch(func() {
		if sk != nil && sk() != 0 {
			return
		}
		set(get() + 1)
	})
}

// hyperReader reads {lr, step} from hyper.
func hyperReader(name string, hyper *T) (lr, step func() float64) {
	needCPU(name, hyper)
	must(kernels.CheckHyper(name, hyper))
	return scalarReader(name, "hyper[0]", hyper.Flatten().Narrow(0, 0, 1)), scalarReader(name, "hyper[1]", hyper.Flatten().Narrow(0, 1, 1))
}

// checkOptim checks what is the CPU's own in an optimizer step's
// operands (the shared rules are kernels.CheckSGDStep and
// kernels.CheckAdamWStep): host tensors, contiguous, an F32 or F64 param.
func checkOptim(name string, param *T, others ...*T) {
	needCPU(name, param)
	needCPU(name, others...)
	needContig(name, "param", param)
	if d := param.DType(); d != tensor.F32 && d != tensor.F64 {
		fail(name, "param (shape %v) has dtype %v, want f32 or f64", param.Shape(), d)
	}
	for _, t := range others {
		if t != nil {
			needContig(name, "state", t)
		}
	}
}

// SGDStep implements kernels.Backend, following torch.optim.SGD.
func (be *Backend) SGDStep(param, grad, mom, hyper, foundInf *T, o kernels.SGDOptions) {
	const name = "SGDStep"
	must(kernels.CheckSGDStep(name, param, grad, mom, hyper, o))
	must(kernels.CheckFlag(name, "foundInf", foundInf, true))
	checkOptim(name, param, grad, mom)
	if o.ZeroGrad {
		// The CPU has no launch to save: the step, then a Fill.
		defer be.Fill(grad, 0)
	}
	if be.eager() && param.DType() == tensor.F64 && sgdEager[float64](param, grad, mom, hyper, foundInf, o) ||
		be.eager() && param.DType() == tensor.F32 && sgdEager[float32](param, grad, mom, hyper, foundInf, o) {
		return
	}
	if param.DType() == tensor.F64 {
		be.launch(sgdPrep[float64](param, grad, mom, hyper, foundInf, o))
	} else {
		be.launch(sgdPrep[float32](param, grad, mom, hyper, foundInf, o))
	}
}

// IncrementSGDStep implements kernels.SGDIncrementer as Increment of
// hyper[1] and SGDStep in turn: the CPU has no launch to save.
func (be *Backend) IncrementSGDStep(param, grad, mom, hyper, foundInf *T, o kernels.SGDOptions) {
	const name = "IncrementSGDStep"
	// Every operand before the step is counted: a failing update must
	// leave the count as it was.
	must(kernels.CheckSGDStep(name, param, grad, mom, hyper, o))
	must(kernels.CheckFlag(name, "foundInf", foundInf, true))
	needCPU(name, param, grad, mom, hyper, foundInf)
	checkOptim(name, param, grad, mom)
	be.Increment(hyper.Flatten().Narrow(0, 1, 1), foundInf)
	be.SGDStep(param, grad, mom, hyper, foundInf, o)
}

// optimAsmMin is the fewest elements a call of the assembly optimizer
// loops takes: on small arenas (W1's 68 parameters) the 256-bit code
// costs more than it saves (measured: +1.8 µs on W1's trainer epoch, from
// the vector unit's warm-up after scalar code), so they run the Go loop.
// A variable for the tests.
var optimAsmMin = 1024

func sgdPrep[F tensor.Float](param, grad, mom, hyper, foundInf *T, o kernels.SGDOptions) func() {
	lrf, stepf := hyperReader("SGDStep", hyper)
	var inf func() float64
	if foundInf != nil {
		inf = scalarReader("SGDStep", "foundInf", foundInf)
	}
	k := &sgdKernel[F]{}
	k.init(param, grad, mom, o)
	body := k.body
	n := len(k.p)
	return func() {
		if inf != nil && inf() != 0 {
			return
		}
		k.lr = F(lrf())
		k.first = stepf() <= 1
		parallelFor(n, 4, body)
	}
}

// sgdEager is SGDStep's eager fast path (see eager.go): a parameter
// small enough that the launch would run inline, stepped at once with
// the scalars read now.
func sgdEager[F tensor.Float](param, grad, mom, hyper, foundInf *T, o kernels.SGDOptions) bool {
	n := param.Numel()
	if (n != 1 && n*4 >= minWork) || !hyper.IsContiguous() || hyper.Numel() != 2 {
		return false
	}
	if foundInf != nil {
		if foundInf.Numel() != 1 {
			return false // the launch's reader reports it
		}
		if scalarAt(foundInf, 0) != 0 {
			return true
		}
	}
	var k sgdKernel[F]
	k.init(param, grad, mom, o)
	k.lr = F(scalarAt(hyper, 0))
	k.first = scalarAt(hyper, 1) <= 1
	k.body(0, n)
	return true
}

// sgdKernel is one SGD step over a parameter: the loops of
// torch.optim.SGD with the scalars of this step.
type sgdKernel[F tensor.Float] struct {
	p, g, m       []F
	p32, g32, m32 []float32
	wd, mu, damp  F
	lr            F
	first         bool // the first step: the momentum buffer takes the gradient
	vec           bool
	o             kernels.SGDOptions
}

// init sets k up for param, grad and mom (nil without momentum).
func (k *sgdKernel[F]) init(param, grad, mom *T, o kernels.SGDOptions) {
	*k = sgdKernel[F]{p: tensor.Data[F](param), g: tensor.Data[F](grad), o: o}
	if mom != nil && o.Momentum != 0 {
		k.m = tensor.Data[F](mom)
	}
	k.wd, k.mu, k.damp = F(o.WeightDecay), F(o.Momentum), F(1-o.Dampening)
	k.p32, _ = any(k.p).([]float32)
	k.g32, _ = any(k.g).([]float32)
	k.m32, _ = any(k.m).([]float32)
	k.vec = optimAsm && k.p32 != nil && k.m32 != nil && k.wd == 0 && k.damp == 1
}

// plain is the usual step (momentum, no Nesterov, not maximising, past
// the first step) with the loop-invariant tests hoisted; it rounds
// exactly as the general loop.
func (k *sgdKernel[F]) plain(lo, hi int) bool {
	p, g, m := k.p, k.g, k.m
	wd, mu, damp, lr := k.wd, k.mu, k.damp, k.lr
	if m == nil || k.first || k.o.Nesterov || k.o.Maximize {
		return false
	}
	if n8 := (hi - lo) &^ 7; k.vec && n8 > 0 && hi-lo >= optimAsmMin {
		// Float32 without weight decay or dampening: eight lanes at a
		// time, same rounding; the tail below.
		sgdMomAVX(&k.p32[lo], &k.g32[lo], &k.m32[lo], n8, float32(mu), float32(lr))
		lo += n8
	}
	pp, gg, mm := p[lo:hi], g[lo:hi], m[lo:hi]
	gg, mm = gg[:len(pp)], mm[:len(pp)]
	if wd == 0 && damp == 1 {
		for i, d := range gg {
			v := mu*mm[i] + d
			mm[i] = v
			pp[i] -= lr * v
		}
		return true
	}
	for i, d := range gg {
		d += wd * pp[i]
		v := mu*mm[i] + damp*d
		mm[i] = v
		pp[i] -= lr * v
	}
	return true
}

// body steps elements lo..hi-1.
func (k *sgdKernel[F]) body(lo, hi int) {
	if k.plain(lo, hi) {
		return
	}
	p, g, m := k.p, k.g, k.m
	wd, mu, damp, lr, first, o := k.wd, k.mu, k.damp, k.lr, k.first, k.o
	for i := lo; i < hi; i++ {
		d := g[i]
		if o.Maximize {
			d = -d
		}
		if wd != 0 {
			d += wd * p[i]
		}
		if m != nil {
			if first {
				m[i] = d
			} else {
				m[i] = mu*m[i] + damp*d
			}
			if o.Nesterov {
				d += mu * m[i]
			} else {
				d = m[i]
			}
		}
		p[i] -= lr * d
	}
}

// AdamWStep implements kernels.Backend, following torch.optim.AdamW
// (amsgrad off): p ·= 1−lr·wd; m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
// p −= lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps).
func (be *Backend) AdamWStep(param, grad, m, v, hyper, foundInf *T, o kernels.AdamWOptions) {
	const name = "AdamWStep"
	must(kernels.CheckAdamWStep(name, param, grad, m, v, hyper))
	must(kernels.CheckFlag(name, "foundInf", foundInf, true))
	checkOptim(name, param, grad, m, v)
	if param.DType() == tensor.F64 {
		be.launch(adamwPrep[float64](param, grad, m, v, hyper, foundInf, o))
	} else {
		be.launch(adamwPrep[float32](param, grad, m, v, hyper, foundInf, o))
	}
}

func adamwPrep[F tensor.Float](param, grad, mt, vt, hyper, foundInf *T, o kernels.AdamWOptions) func() {
	lrf, stepf := hyperReader("AdamWStep", hyper)
	var inf func() float64
	if foundInf != nil {
		inf = scalarReader("AdamWStep", "foundInf", foundInf)
	}
	p, g, m, v := tensor.Data[F](param), tensor.Data[F](grad), tensor.Data[F](mt), tensor.Data[F](vt)
	// 1-β is formed in float64 before rounding, as PyTorch does: in
	// float32, 1-float32(0.999) is off by 1.3e-5 relative.
	b1, b2, eps := F(o.Beta1), F(o.Beta2), F(o.Eps)
	c1, c2 := F(1-o.Beta1), F(1-o.Beta2)
	var decay, stepSize, bc2sqrt F
	p32, _ := any(p).([]float32)
	g32, _ := any(g).([]float32)
	m32, _ := any(m).([]float32)
	v32, _ := any(v).([]float32)
	vec := optimAsm && p32 != nil
	body := func(lo, hi int) {
		if n8 := (hi - lo) &^ 7; vec && n8 > 0 && hi-lo >= optimAsmMin {
			// Float32: eight lanes at a time with the loop's rounding
			// (bitwise the same results); the tail below.
			c := [8]float32{float32(decay), float32(b1), float32(c1), float32(b2), float32(c2), float32(bc2sqrt), float32(eps), float32(stepSize)}
			adamwAVX(&p32[lo], &g32[lo], &m32[lo], &v32[lo], n8, &c)
			lo += n8
		}
		for i := lo; i < hi; i++ {
			gi := g[i]
			pi := p[i] * decay
			mi := b1*m[i] + c1*gi
			vi := b2*v[i] + c2*gi*gi
			m[i], v[i] = mi, vi
			denom := F(math.Sqrt(float64(vi)))/bc2sqrt + eps
			p[i] = pi - stepSize*(mi/denom)
		}
	}
	n := len(p)
	return func() {
		if inf != nil && inf() != 0 {
			return
		}
		lr, step := lrf(), stepf()
		decay = F(1 - lr*o.WeightDecay)
		stepSize = F(lr / (1 - math.Pow(o.Beta1, step)))
		bc2sqrt = F(math.Sqrt(1 - math.Pow(o.Beta2, step)))
		parallelFor(n, 10, body)
	}
}

// UnscaleCheck implements kernels.Backend. foundInf is only ever set to
// 1, never cleared (the caller zeroes it per step, as PyTorch does).
func (be *Backend) UnscaleCheck(xs []*T, invScale, foundInf *T) {
	const name = "UnscaleCheck"
	needCPU(name, invScale, foundInf)
	must(kernels.CheckFlag(name, "foundInf", foundInf, false))
	inv := scalarReader(name, "invScale", invScale)
	set := scalarWriter(name, "foundInf", foundInf)
	fs := flats(name, "xs[i]", xs)
	cl := newChunkList(fs)
	bad := make([]bool, len(cl.lo))
	var k float64
	body := func(lo, hi int) {
		for c := lo; c < hi; c++ {
			f := &fs[cl.tensor[c]]
			a, b := cl.lo[c], min(cl.lo[c]+chunkLen, f.n)
			found := false
			switch {
			case f.f32 != nil:
				k32 := float32(k)
				x := f.f32[a:b]
				for i, v := range x {
					if v-v != 0 { // NaN or ±Inf
						found = true
					}
					x[i] = v * k32
				}
			case f.f64 != nil:
				x := f.f64[a:b]
				for i, v := range x {
					if v-v != 0 {
						found = true
					}
					x[i] = v * k
				}
			default:
				k32 := float32(k)
				x := f.u16[a:b]
				for i, h := range x {
					v := half2f(f.dt, h)
					if v-v != 0 {
						found = true
					}
					x[i] = f2half(f.dt, v*k32)
				}
			}
			bad[c] = found
		}
	}
	be.launch(func() {
		k = inv()
		parallelFor(len(bad), chunkLen, body)
		for _, b := range bad {
			if b {
				set(1)
				return
			}
		}
	})
}

// ScalerUpdate implements kernels.Backend, following PyTorch's
// _amp_update_scale_: growth only applies when the grown scale is finite.
func (be *Backend) ScalerUpdate(scale, tracker, foundInf *T, growth, backoff float64, interval int) {
	const name = "ScalerUpdate"
	needCPU(name, scale, tracker, foundInf)
	must(kernels.CheckFlag(name, "foundInf", foundInf, false))
	getS, setS := scalarReader(name, "scale", scale), scalarWriter(name, "scale", scale)
	getT, setT := scalarReader(name, "tracker", tracker), scalarWriter(name, "tracker", tracker)
	inf := scalarReader(name, "foundInf", foundInf)
	wideScale := scale.DType() == tensor.F64
	be.launch(func() {
		if inf() != 0 {
			setS(getS() * backoff)
			setT(0)
			return
		}
		n := getT() + 1
		if n >= float64(interval) {
			if g := getS() * growth; isFinite(g) && (wideScale || isFinite(float64(float32(g)))) {
				setS(g)
			}
			setT(0)
			return
		}
		setT(n)
	})
}

// ClipByNorm implements kernels.GradClipper as kernels.ClipByNormOps:
// the CPU has no launch to save.
func (be *Backend) ClipByNorm(norm *T, xs []*T, maxNorm, eps float64) {
	const name = "ClipByNorm"
	needCPU(name, norm)
	needCPU(name, xs...)
	if norm.Numel() != 1 || !(norm.DType() == tensor.F32 || norm.DType() == tensor.F64) {
		fail(name, "norm of shape %v and dtype %v: want one F32 or F64 element", norm.Shape(), norm.DType())
	}
	kernels.ClipByNormOps(be, norm, xs, maxNorm, eps)
}
