//go:build cuda

package cuda

import (
	"errors"
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The optim family (src/optim.cu): SGDStep and AdamWStep over F32
// parameter arenas, the foreach operations over lists of F32 tensors and
// the GradScaler's device-side state; ForeachSGDStep and ForeachAdamWStep
// are in multi_tensor.go. A list is one multi-tensor launch
// (multi_tensor.go; ForeachNorm's per-chunk partial sums are followed by
// mt_norm_finish, a thread per tensor adding its chunks' in order); a
// list of one tensor, or one first seen during a graph capture, whose
// table cannot be uploaded then, takes launches per tensor instead
// (normEach, each). ForeachNorm's per-tensor path sums in another
// grouping (clip_sumsq_f32's grid-stride partials), so its norms may
// differ from the list path's in the last bits; each path is
// deterministic.
// Tensors a list op writes must not overlap one another.

// ForeachNorm implements kernels.Backend (F32 tensors).
func (b *Backend) ForeachNorm(dst *T, xs []*T) { must(b.d.ForeachNorm(dst, xs)) }

// ForeachScale implements kernels.Backend (F32 tensors, F32 factor).
func (b *Backend) ForeachScale(xs []*T, s *T) { must(b.d.ForeachScale(xs, s)) }

// ForeachAxpy implements kernels.Backend (F32 tensors).
func (b *Backend) ForeachAxpy(ys, xs []*T, alpha float64) { must(b.d.ForeachAxpy(ys, xs, alpha)) }

// Increment implements kernels.Backend.
func (b *Backend) Increment(counter, skip *T) { must(b.d.Increment(counter, skip)) }

// SGDStep implements kernels.Backend (F32 arenas).
func (b *Backend) SGDStep(param, grad, mom, hyper, foundInf *T, o kernels.SGDOptions) {
	must(b.d.SGDStep(param, grad, mom, hyper, foundInf, o))
}

// IncrementSGDStep implements kernels.SGDIncrementer.
func (b *Backend) IncrementSGDStep(param, grad, mom, hyper, foundInf *T, o kernels.SGDOptions) {
	must(b.d.IncrementSGDStep(param, grad, mom, hyper, foundInf, o))
}

// AdamWStep implements kernels.Backend (F32 arenas).
func (b *Backend) AdamWStep(param, grad, m, v, hyper, foundInf *T, o kernels.AdamWOptions) {
	must(b.d.AdamWStep(param, grad, m, v, hyper, foundInf, o))
}

// ForeachSGDStep implements kernels.ForeachStepper (F32 lists): one
// multi-tensor launch for the whole list (Device.ForeachSGDStep).
func (b *Backend) ForeachSGDStep(params, grads, moms []*T, hyper, foundInf *T, o kernels.SGDOptions) {
	must(b.d.ForeachSGDStep(params, grads, moms, hyper, foundInf, o))
}

// ForeachAdamWStep implements kernels.ForeachStepper (F32 lists): one
// multi-tensor launch for the whole list (Device.ForeachAdamWStep).
func (b *Backend) ForeachAdamWStep(params, grads, ms, vs []*T, hyper, foundInf *T, o kernels.AdamWOptions) {
	must(b.d.ForeachAdamWStep(params, grads, ms, vs, hyper, foundInf, o))
}

// UnscaleCheck implements kernels.Backend (F32).
func (b *Backend) UnscaleCheck(xs []*T, invScale, foundInf *T) {
	must(b.d.UnscaleCheck(xs, invScale, foundInf))
}

// ScalerUpdate implements kernels.Backend.
func (b *Backend) ScalerUpdate(scale, tracker, foundInf *T, growth, backoff float64, interval int) {
	must(b.d.ScalerUpdate(scale, tracker, foundInf, growth, backoff, interval))
}

// ForeachNorm writes the L2 norm of each xs[i] (F32, contiguous) into
// dst[i] (F32 or F64, len(xs) elements): partial sums of squares in a
// fixed order, added per tensor in fp64 and rounded once, so that a run
// gives the same bits as the last (no atomics).
func (d *Device) ForeachNorm(dst *tensor.Tensor, xs []*tensor.Tensor) error {
	const op = "ForeachNorm"
	if err := checked(kernels.CheckForeachNorm(op, dst, xs)); err != nil {
		return err
	}
	wide := dst.DType() == tensor.F64
	if !wide && dst.DType() != tensor.F32 {
		return fmt.Errorf("cuda: %s: dst dtype %v (F32 or F64)", op, dst.DType())
	}
	pd, err := d.ptrOf(op, "dst", dst, dst.DType())
	if err != nil {
		return err
	}
	ptrs, sizes, err := d.mtOperands(op, []string{"xs"}, xs)
	if err != nil {
		return err
	}
	tb, err := d.mtTableFor(ptrs, sizes)
	switch {
	case errors.Is(err, errMTEach):
		return d.normEach(op, pd, wide, ptrs[0], sizes)
	case err != nil:
		return err
	}
	// One fp64 partial per chunk (two floats of scratch), then a thread
	// per tensor adds its chunks'.
	part, err := d.scratchF32(2 * int(tb.chunks))
	if err != nil {
		return err
	}
	defer part.Storage().Free() // after the launches that read it are enqueued
	pp, _ := d.ptrOf(op, "scratch", part, tensor.F32)
	var a args
	if err := d.mtLaunch("mt_sumsq_part_f32", tb, a.ptr(pp).ptr(tb.ptr).i64(tb.tensors).i64(tb.chunks)); err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var b args
	return d.launch1D("mt_norm_finish", int64(len(xs)), b.ptr(pd).i32(b2i(wide)).ptr(pp).ptr(tb.ptr).i64(tb.tensors))
}

// normEach is ForeachNorm one tensor at a time (a list first seen during
// a capture): clip_sumsq_f32's fixed-grid partials of each tensor, then
// norm_parts_into adds them in order into its element of dst.
func (d *Device) normEach(op string, pd cu.DevicePtr, wide bool, ptrs []cu.DevicePtr, sizes []int64) error {
	offs := make([]int64, len(sizes)+1)
	for i, n := range sizes {
		offs[i+1] = offs[i] + clipGrid(n)
	}
	part, pp, sumsq, err := d.sumsqParts(op, offs[len(sizes)])
	if err != nil {
		return err
	}
	defer part.Storage().Free() // after the launches that read it are enqueued
	release := d.enter()
	defer release()
	for i, p := range ptrs {
		pi, parts := pp+cu.DevicePtr(8*offs[i]), offs[i+1]-offs[i]
		if parts > 0 {
			var a args
			if err := launchRaw(sumsq, [3]int{int(parts), 1, 1}, [3]int{blockSize, 1, 1}, 0, d.stream, a.ptr(pi).ptr(p).i64(sizes[i])); err != nil {
				return err
			}
		}
		var b args
		if err := d.launch1D("norm_parts_into", 1, b.ptr(pd).i32(b2i(wide)).i64(int64(i)).ptr(pi).i64(parts)); err != nil {
			return err
		}
	}
	return nil
}

// ForeachScale multiplies every xs[i] (F32) in place by s (F32, one
// element on the device, read when the kernels run).
func (d *Device) ForeachScale(xs []*tensor.Tensor, s *tensor.Tensor) error {
	const op = "ForeachScale"
	ps, err := d.scalarPtr(op, "s", s)
	if err != nil {
		return err
	}
	if err := kernels.CheckScalarApart(op, "s", s, xs); err != nil {
		return err
	}
	ptrs, sizes, err := d.mtOperands(op, []string{"xs"}, xs)
	if err != nil {
		return err
	}
	tb, err := d.mtTableFor(ptrs, sizes)
	if errors.Is(err, errMTEach) {
		return d.each("scale_f32", ptrs[0], sizes, func(a *args, i int) { a.ptr(ptrs[0][i]).ptr(ps).i64(sizes[i]) })
	}
	if err != nil {
		return err
	}
	var a args
	return d.mtLaunch("mt_scale_f32", tb, a.ptr(tb.ptr).i64(tb.tensors).i64(tb.chunks).ptr(ps))
}

// ForeachAxpy computes ys[i] += alpha·xs[i] (F32, pairwise same shapes).
func (d *Device) ForeachAxpy(ys, xs []*tensor.Tensor, alpha float64) error {
	const op = "ForeachAxpy"
	if err := checked(kernels.CheckForeachAxpy(op, ys, xs)); err != nil {
		return err
	}
	ptrs, sizes, err := d.mtOperands(op, []string{"ys", "xs"}, ys, xs)
	if err != nil {
		return err
	}
	tb, err := d.mtTableFor(ptrs, sizes)
	if errors.Is(err, errMTEach) {
		return d.each("axpy_f32", ptrs[0], sizes, func(a *args, i int) {
			a.ptr(ptrs[0][i]).ptr(ptrs[1][i]).f32(float32(alpha)).i64(sizes[i])
		})
	}
	if err != nil {
		return err
	}
	var a args
	return d.mtLaunch("mt_axpy_f32", tb, a.ptr(tb.ptr).i64(tb.tensors).i64(tb.chunks).f32(float32(alpha)))
}

// UnscaleCheck multiplies every xs[i] (F32) by invScale and sets
// foundInf to 1 when any value is NaN or infinite (both F32, one element;
// foundInf is only ever set, never cleared).
func (d *Device) UnscaleCheck(xs []*tensor.Tensor, invScale, foundInf *tensor.Tensor) error {
	const op = "UnscaleCheck"
	pi, err := d.scalarPtr(op, "invScale", invScale)
	if err != nil {
		return err
	}
	pf, err := d.scalarPtr(op, "foundInf", foundInf)
	if err != nil {
		return err
	}
	ptrs, sizes, err := d.mtOperands(op, []string{"xs"}, xs)
	if err != nil {
		return err
	}
	tb, err := d.mtTableFor(ptrs, sizes)
	if errors.Is(err, errMTEach) {
		return d.each("unscale_check_f32", ptrs[0], sizes, func(a *args, i int) { a.ptr(ptrs[0][i]).ptr(pi).ptr(pf).i64(sizes[i]) })
	}
	if err != nil {
		return err
	}
	var a args
	return d.mtLaunch("mt_unscale_check_f32", tb, a.ptr(tb.ptr).i64(tb.tensors).i64(tb.chunks).ptr(pi).ptr(pf))
}

// each launches the single-tensor kernel name once per tensor, with the
// arguments fill writes for tensor i.
func (d *Device) each(name string, ptrs []cu.DevicePtr, sizes []int64, fill func(a *args, i int)) error {
	release := d.enter()
	defer release()
	for i := range ptrs {
		var a args
		fill(&a, i)
		if err := d.launch1D(name, sizes[i], &a); err != nil {
			return err
		}
	}
	return nil
}

// ScalerUpdate is the GradScaler state machine on the device (scale,
// tracker and foundInf F32, one element each): on foundInf the scale is
// multiplied by backoff and the tracker reset; otherwise the tracker
// counts up and after interval clean steps the scale is multiplied by
// growth (kept when that would overflow fp32) and the tracker reset.
func (d *Device) ScalerUpdate(scale, tracker, foundInf *tensor.Tensor, growth, backoff float64, interval int) error {
	const op = "ScalerUpdate"
	ps, err := d.scalarPtr(op, "scale", scale)
	if err != nil {
		return err
	}
	pf, err := d.scalarPtr(op, "foundInf", foundInf)
	if err != nil {
		return err
	}
	if tracker == nil || tracker.Numel() != 1 || (tracker.DType() != tensor.F32 && tracker.DType() != tensor.I32) {
		return fmt.Errorf("cuda: %s: tracker must be one F32 or I32 element", op)
	}
	pt, err := d.ptrOf(op, "tracker", tracker, tracker.DType())
	if err != nil {
		return err
	}
	var i32 int32
	if tracker.DType() == tensor.I32 {
		i32 = 1
	}
	fn, err := d.kernel("scaler_update_f32")
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	a.ptr(ps).ptr(pt).i32(i32).ptr(pf).f64(growth).f64(backoff).i64(int64(interval))
	return launchRaw(fn, [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, d.stream, &a)
}

// Increment adds one to counter (one element, F32, F64 or I64) unless
// skip (optional, F32, one element) is non-zero.
func (d *Device) Increment(counter, skip *tensor.Tensor) error {
	const op = "Increment"
	kind := map[tensor.DType]int32{tensor.F32: 0, tensor.F64: 1, tensor.I64: 2}
	k, ok := kind[counter.DType()]
	if !ok || counter.Numel() != 1 {
		return fmt.Errorf("cuda: %s: counter %v %v (one F32, F64 or I64 element)", op, counter.DType(), counter.Shape())
	}
	pc, err := d.ptrOf(op, "counter", counter, counter.DType())
	if err != nil {
		return err
	}
	var ps cu.DevicePtr
	if skip != nil {
		if ps, err = d.scalarPtr(op, "skip", skip); err != nil {
			return err
		}
	}
	fn, err := d.kernel("increment")
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	return launchRaw(fn, [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, d.stream, a.ptr(pc).i32(k).ptr(ps))
}

// scalarPtr checks a one-element F32 device scalar.
func (d *Device) scalarPtr(op, what string, t *tensor.Tensor) (cu.DevicePtr, error) {
	if t != nil && t.Numel() != 1 {
		return 0, fmt.Errorf("cuda: %s: %s %v, want one element", op, what, t.Shape())
	}
	return d.ptrOf(op, what, t, tensor.F32)
}

// foreachPtrs checks a list of contiguous F32 tensors.
func (d *Device) foreachPtrs(op, what string, ts []*tensor.Tensor) ([]cu.DevicePtr, error) {
	out := make([]cu.DevicePtr, len(ts))
	for i, t := range ts {
		p, err := d.ptrOf(op, fmt.Sprintf("%s[%d]", what, i), t, tensor.F32)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// SGDStep is kernels.Backend's SGDStep on F32 arenas: hyper is an F64
// [2] tensor {lr, step} on the device, mom required with momentum (and
// not used without, as on the CPU), foundInf (F32, one element)
// optional.
func (d *Device) SGDStep(param, grad, mom, hyper, foundInf *tensor.Tensor, o kernels.SGDOptions) error {
	const op = "SGDStep"
	if err := checked(kernels.CheckSGDStep(op, param, grad, mom, hyper, o)); err != nil {
		return err
	}
	if o.Momentum == 0 {
		mom = nil // sgd_f32 takes the momentum path for a non-null buffer
	}
	pp, pg, pm, ph, pf, err := d.optimPtrs(op, param, grad, mom, hyper, foundInf)
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	return d.launch1D("sgd_f32", int64(param.Numel()), sgdArgs(pp, pg, pm, ph, pf, o, param.Numel()))
}

// sgdArgs are the arguments of sgd_f32 and sgd_inc_f32.
func sgdArgs(pp, pg, pm, ph, pf cu.DevicePtr, o kernels.SGDOptions, n int) *args {
	var a args
	a.ptr(pp).ptr(pg).ptr(pm).ptr(ph).ptr(pf)
	a.f32(float32(o.Momentum)).f32(float32(1 - o.Dampening)).f32(float32(o.WeightDecay))
	a.i32(b2i(o.Nesterov)).i32(b2i(o.Maximize)).i32(b2i(o.ZeroGrad)).i64(int64(n))
	return &a
}

// IncrementSGDStep is Increment of hyper[1] (unless foundInf) and SGDStep
// in turn, in one launch for an arena of at most sgdOneBlock elements
// (kernels.SGDIncrementer).
func (d *Device) IncrementSGDStep(param, grad, mom, hyper, foundInf *tensor.Tensor, o kernels.SGDOptions) error {
	const op = "IncrementSGDStep"
	if err := checked(kernels.CheckSGDStep(op, param, grad, mom, hyper, o)); err != nil {
		return err
	}
	km := mom
	if o.Momentum == 0 {
		km = nil // sgd_inc_f32 takes the momentum path for a non-null buffer
	}
	// Every operand checked before anything runs: the two-launch path
	// must not count a step whose update then fails.
	pp, pg, pm, ph, pf, err := d.optimPtrs(op, param, grad, km, hyper, foundInf)
	if err != nil {
		return err
	}
	if param.Numel() > sgdOneBlock {
		if err := d.Increment(hyper.Flatten().Narrow(0, 1, 1), foundInf); err != nil {
			return err
		}
		return d.SGDStep(param, grad, mom, hyper, foundInf, o)
	}
	fn, err := d.kernel("sgd_inc_f32")
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	return launchRaw(fn, [3]int{1, 1, 1}, [3]int{blockSize, 1, 1}, 0, d.stream, sgdArgs(pp, pg, pm, ph, pf, o, param.Numel()))
}

// AdamWStep is kernels.Backend's AdamWStep on F32 arenas.
func (d *Device) AdamWStep(param, grad, m, v, hyper, foundInf *tensor.Tensor, o kernels.AdamWOptions) error {
	const op = "AdamWStep"
	if err := checked(kernels.CheckAdamWStep(op, param, grad, m, v, hyper)); err != nil {
		return err
	}
	pp, pg, pm, ph, pf, err := d.optimPtrs(op, param, grad, m, hyper, foundInf)
	if err != nil {
		return err
	}
	pv, err := d.ptrOf(op, "v", v, tensor.F32)
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	a.ptr(pp).ptr(pg).ptr(pm).ptr(pv).ptr(ph).ptr(pf)
	a.f32(float32(o.Beta1)).f32(float32(o.Beta2)).f32(float32(1 - o.Beta1)).f32(float32(1 - o.Beta2)).f32(float32(o.Eps))
	a.f64(o.WeightDecay).f64(o.Beta1).f64(o.Beta2).i64(int64(param.Numel()))
	return d.launch1D("adamw_f32", int64(param.Numel()), &a)
}

// optimPtrs returns the addresses of an optimizer step's operands (their
// shapes checked by kernels.CheckSGDStep or CheckAdamWStep) after checking
// what is the device's own: F32 param, grad and state, F64 hyper,
// optional F32 foundInf (0 for an absent state or foundInf).
func (d *Device) optimPtrs(op string, param, grad, state, hyper, foundInf *tensor.Tensor) (pp, pg, ps, ph, pf cu.DevicePtr, err error) {
	if pp, err = d.ptrOf(op, "param", param, tensor.F32); err != nil {
		return
	}
	if pg, err = d.ptrOf(op, "grad", grad, tensor.F32); err != nil {
		return
	}
	if ps, err = d.optPtr(op, "state", state, tensor.F32); err != nil {
		return
	}
	if ph, err = d.ptrOf(op, "hyper", hyper, tensor.F64); err != nil {
		return
	}
	if err = kernels.CheckFlag(op, "foundInf", foundInf, true); err != nil {
		return
	}
	if foundInf != nil {
		pf, err = d.ptrOf(op, "foundInf", foundInf, tensor.F32)
	}
	return
}

// ClipByNorm implements kernels.GradClipper.
// One tensor (an arena's bucket) takes Device.ClipByNorm's two
// launches; a list takes kernels.ClipByNormOps on this backend.
func (b *Backend) ClipByNorm(norm *T, xs []*T, maxNorm, eps float64) {
	switch len(xs) {
	case 0:
		must(b.d.Fill(norm, 0)) // the norm of nothing; nothing to scale
		return
	case 1:
	default:
		kernels.ClipByNormOps(b, norm, xs, maxNorm, eps)
		return
	}
	must(b.d.ClipByNorm(norm, xs, maxNorm, eps))
}

// clipParts is the most partial sums clip_sumsq_f32 writes (its grid),
// and clipPerPart the fewest elements a partial covers: the grid is
// min(clipParts, ⌈n/clipPerPart⌉), a function of n alone.
const (
	clipParts   = 1024
	clipPerPart = 4 * blockSize
)

// clipGrid is clip_sumsq_f32's grid (its partial sums) for n elements.
func clipGrid(n int64) int64 { return min(int64(clipParts), (n+clipPerPart-1)/clipPerPart) }

// sumsqParts returns a scratch of parts fp64 partial sums (2·parts
// floats; free its storage once the launches reading it are enqueued),
// its address and clip_sumsq_f32.
func (d *Device) sumsqParts(op string, parts int64) (*tensor.Tensor, cu.DevicePtr, cu.Function, error) {
	sumsq, err := d.kernel("clip_sumsq_f32")
	if err != nil {
		return nil, 0, cu.Function{}, err
	}
	part, err := d.scratchF32(2 * int(parts))
	if err != nil {
		return nil, 0, cu.Function{}, err
	}
	pp, _ := d.ptrOf(op, "scratch", part, tensor.F32)
	return part, pp, sumsq, nil
}

// ClipByNorm clips one F32 tensor, an arena's bucket, by its L2 norm
// (see kernels.GradClipper), writing the norm (F32, one element): up to
// clipSmall elements in one launch of one block (clip_small_f32), else
// in two launches, clip_sumsq_f32's partial sums, then clip_scale_f32,
// which finishes the norm, writes it and scales. The sum is in a fixed order
// (no atomics). xs must hold exactly one tensor (Backend.ClipByNorm runs
// the unfused ops for a list).
func (d *Device) ClipByNorm(norm *tensor.Tensor, xs []*tensor.Tensor, maxNorm, eps float64) error {
	const op = "ClipByNorm"
	pn, err := d.ptrOf(op, "norm", norm, tensor.F32)
	if err != nil {
		return err
	}
	if norm.Numel() != 1 {
		return fmt.Errorf("cuda: %s: norm of shape %v: want one element", op, norm.Shape())
	}
	if len(xs) != 1 {
		return fmt.Errorf("cuda: %s: %d tensors: the fused clip takes one (a list runs kernels.ClipByNormOps)", op, len(xs))
	}
	px, err := d.ptrOf(op, "xs[0]", xs[0], tensor.F32)
	if err != nil {
		return err
	}
	n := int64(xs[0].Numel())
	if n == 0 {
		return d.Fill(norm, 0)
	}
	if n <= clipSmall {
		// One block: the norm and the scaling in one launch.
		release := d.enter()
		defer release()
		fn, err := d.kernel("clip_small_f32")
		if err != nil {
			return err
		}
		var a args
		a.ptr(pn).ptr(px).i64(n).f32(float32(maxNorm)).f32(float32(eps))
		return launchRaw(fn, [3]int{1, 1, 1}, [3]int{clipSmallThreads, 1, 1}, 0, d.stream, &a)
	}
	parts := clipGrid(n)
	part, pp, sumsq, err := d.sumsqParts(op, parts)
	if err != nil {
		return err
	}
	defer part.Storage().Free()
	release := d.enter()
	defer release()
	var a args
	if err := launchRaw(sumsq, [3]int{int(parts), 1, 1}, [3]int{blockSize, 1, 1}, 0, d.stream, a.ptr(pp).ptr(px).i64(n)); err != nil {
		return err
	}
	var b args
	b.ptr(pn).ptr(px).ptr(pp).i64(parts).i64(n).f32(float32(maxNorm)).f32(float32(eps))
	return d.launch1D("clip_scale_f32", n, &b)
}
