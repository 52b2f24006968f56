//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// kernels.BatchNormReluer, GroupNormReluer and BatchNormReluPooler on the
// device (src/norm.cu): the batch and group norm kernels with the ReLU
// folded in, and batch norm's with a 2×2, stride-2 max pool after it.
// The forward writes max(v, +0) (NaN kept) of the normalised value v, or
// only its pool (bn_relu_pool: pooled and its int32 argmax, as MaxPool2d
// gives them for BatchNormRelu's output, which is never written); the
// backward takes dy as +0 wherever that output was not > 0, rebuilding v
// from x, the saved statistics, w and b exactly as the forward rounded
// it, and the pooled backward gathers dy from the pool's gradient and
// argmax inside the same two passes. The launches are those of BatchNorm,
// BatchNormBackward, GroupNorm and GroupNormBackward, with the *_relu
// (and *_relupool) kernels in place of the plain ones; dtypes as there
// (x, y, dy, dx and the affine tensors F32, BF16 or F16 alike, the
// statistics F32).

var (
	_ kernels.BatchNormReluer      = (*Backend)(nil)
	_ kernels.GroupNormReluer      = (*Backend)(nil)
	_ kernels.BatchNormReluPooler  = (*Backend)(nil)
	_ kernels.BatchNormEvalAffiner = (*Backend)(nil)
)

// BatchNormRelu implements kernels.BatchNormReluer.
func (b *Backend) BatchNormRelu(y, saveMean, saveRstd, x, w, bias, runMean, runVar *T, training bool, momentum, eps float64) {
	must(b.d.BatchNormRelu(y, saveMean, saveRstd, x, w, bias, runMean, runVar, training, momentum, eps))
}

// BatchNormReluBackward implements kernels.BatchNormReluer.
func (b *Backend) BatchNormReluBackward(dx, dw, db, dy, x, bias, saveMean, saveRstd, w *T, training bool) {
	must(b.d.BatchNormReluBackward(dx, dw, db, dy, x, bias, saveMean, saveRstd, w, training))
}

// BatchNormReluBackwardAdd implements kernels.ParamGradAccumulator.
func (b *Backend) BatchNormReluBackwardAdd(dx, dw, db, dy, x, bias, saveMean, saveRstd, w *T, training bool) {
	must(b.d.batchNormReluBackward("BatchNormReluBackwardAdd", dx, dw, db, dy, nil, nil, x, bias, saveMean, saveRstd, w, training, true))
}

// GroupNormRelu implements kernels.GroupNormReluer.
func (b *Backend) GroupNormRelu(y, mean, rstd, x, w, bias *T, groups int, eps float64) {
	must(b.d.GroupNormRelu(y, mean, rstd, x, w, bias, groups, eps))
}

// GroupNormReluBackward implements kernels.GroupNormReluer.
func (b *Backend) GroupNormReluBackward(dx, dw, db, dy, x, bias, mean, rstd, w *T, groups int) {
	must(b.d.GroupNormReluBackward(dx, dw, db, dy, x, bias, mean, rstd, w, groups))
}

// BatchNormReluMaxPool2x2 implements kernels.BatchNormReluPooler.
func (b *Backend) BatchNormReluMaxPool2x2(pooled, argmax, saveMean, saveRstd, x, w, bias, runMean, runVar *T, training bool, momentum, eps float64) {
	must(b.d.BatchNormReluMaxPool2x2(pooled, argmax, saveMean, saveRstd, x, w, bias, runMean, runVar, training, momentum, eps))
}

// BatchNormReluMaxPool2x2Backward implements kernels.BatchNormReluPooler.
func (b *Backend) BatchNormReluMaxPool2x2Backward(dx, dw, db, g, argmax, x, bias, saveMean, saveRstd, w *T, training bool) {
	must(b.d.BatchNormReluMaxPool2x2Backward(dx, dw, db, g, argmax, x, bias, saveMean, saveRstd, w, training))
}

// BatchNormReluMaxPool2x2BackwardAdd implements
// kernels.ParamGradAccumulator.
func (b *Backend) BatchNormReluMaxPool2x2BackwardAdd(dx, dw, db, g, argmax, x, bias, saveMean, saveRstd, w *T, training bool) {
	must(b.d.batchNormReluBackward("BatchNormReluMaxPool2x2BackwardAdd", dx, dw, db, nil, g, argmax, x, bias, saveMean, saveRstd, w, training, true))
}

// BatchNormRelu is BatchNorm with y = max(y, +0) (NaN kept) in the pass
// that writes y.
func (d *Device) BatchNormRelu(y, saveMean, saveRstd, x, w, b, runMean, runVar *tensor.Tensor, training bool, momentum, eps float64) error {
	return d.batchNormRelu("BatchNormRelu", y, nil, nil, saveMean, saveRstd, x, w, b, runMean, runVar, training, momentum, eps)
}

// BatchNormReluMaxPool2x2 is BatchNormRelu followed by a 2×2, stride-2
// max pool of its output into pooled [N, C, H/2, W/2] and argmax (I32,
// pooled's shape: the flat index in the H·W plane of each maximum, the
// first in scan order, a NaN winning at once), the output itself never
// written. x is [N, C, H, W].
func (d *Device) BatchNormReluMaxPool2x2(pooled, argmax, saveMean, saveRstd, x, w, b, runMean, runVar *tensor.Tensor, training bool, momentum, eps float64) error {
	return d.batchNormRelu("BatchNormReluMaxPool2x2", nil, pooled, argmax, saveMean, saveRstd, x, w, b, runMean, runVar, training, momentum, eps)
}

// batchNormRelu runs BatchNorm's statistics pass, then the fused output
// pass: y (bn_apply_relu) or, with y nil, the pool (bn_relu_pool).
func (d *Device) batchNormRelu(op string, y, pooled, argmax, saveMean, saveRstd, x, w, b, runMean, runVar *tensor.Tensor, training bool, momentum, eps float64) error {
	dt := x.DType()
	pool := y == nil
	if pool {
		if err := checked(kernels.CheckBatchNormPool(op, x, "pooled", pooled, argmax)); err != nil {
			return err
		}
	}
	n, c, hw, err := kernels.CheckBatchNorm(op, y, saveMean, saveRstd, x, w, b, runMean, runVar, training)
	if err := checked(err); err != nil {
		return err
	}
	out, outName := y, "y"
	if pool {
		out, outName = pooled, "pooled"
	}
	names := []string{outName, "saveMean", "saveRstd", "x", "w", "b", "runMean", "runVar"}
	ts := []*tensor.Tensor{out, saveMean, saveRstd, x, w, b, runMean, runVar}
	ptrs, err := d.ptrList(op, names, ts, []tensor.DType{dt, tensor.F32, tensor.F32, dt, dt, dt, tensor.F32, tensor.F32},
		[]bool{false, true, true, false, true, true, true, true})
	if err != nil {
		return err
	}
	po, psm, psr, px, pw, pb, prm, prv := ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7]
	var pa cu.DevicePtr
	if pool {
		if pa, err = d.ptrOf(op, "argmax", argmax, tensor.I32); err != nil {
			return err
		}
	}
	apply, err := floatKernel(op, "bn_apply_relu", dt)
	if err != nil {
		return err
	}
	if pool {
		apply, _ = floatKernel(op, "bn_relu_pool", dt)
	}
	if saveMean == nil || saveRstd == nil {
		// The statistics the output pass reads, when the caller keeps
		// neither.
		s, err := d.scratchF32(2 * c)
		if err != nil {
			return err
		}
		defer s.Storage().Free() // stream order keeps it until the launches have run
		ps, _ := d.ptrOf(op, "scratch", s, tensor.F32)
		if saveMean == nil {
			psm = ps
		}
		if saveRstd == nil {
			psr = ps + cu.DevicePtr(4*c)
		}
	}
	release := d.enter()
	defer release()
	if err := d.bnStats(op, dt, psm, psr, prm, prv, px, n, c, hw, training, momentum, eps); err != nil {
		return err
	}
	var e args
	if !pool {
		total := int64(x.Numel())
		return d.launch1D(apply, total, e.ptr(po).ptr(px).ptr(psm).ptr(psr).ptr(pw).ptr(pb).i64(int64(c)).i64(int64(hw)).i64(total))
	}
	xs := x.Shape()
	total := int64(pooled.Numel())
	return d.launch1D(apply, total, bnReluPoolArgs(uint64(po), uint64(pa), uint64(px), uint64(psm), uint64(psr), uint64(pw), uint64(pb), c, xs[2], xs[3], total))
}

// BatchNormReluBackward is BatchNormBackward with dy taken as +0 wherever
// BatchNormRelu's output was not > 0, rebuilt from x, the saved
// statistics, w and b (the forward's shift; nil for none).
func (d *Device) BatchNormReluBackward(dx, dw, db, dy, x, b, saveMean, saveRstd, w *tensor.Tensor, training bool) error {
	return d.batchNormReluBackward("BatchNormReluBackward", dx, dw, db, dy, nil, nil, x, b, saveMean, saveRstd, w, training, false)
}

// BatchNormReluMaxPool2x2Backward is MaxPool2dBackward of the pool's
// gradient g (with the forward's argmax) followed by
// BatchNormReluBackward, the full-size gradient between them never
// written: each pass gathers it from g and argmax.
func (d *Device) BatchNormReluMaxPool2x2Backward(dx, dw, db, g, argmax, x, b, saveMean, saveRstd, w *tensor.Tensor, training bool) error {
	return d.batchNormReluBackward("BatchNormReluMaxPool2x2Backward", dx, dw, db, nil, g, argmax, x, b, saveMean, saveRstd, w, training, false)
}

// batchNormReluBackward launches BatchNormBackward's two passes with the
// ReLU's mask (*_relu), or, with dy nil, with dy gathered from the pool's
// gradient g and argmax (*_relupool); with acc adding into dw and db.
func (d *Device) batchNormReluBackward(op string, dx, dw, db, dy, g, argmax, x, b, saveMean, saveRstd, w *tensor.Tensor, training, acc bool) error {
	dt := x.DType()
	pool := dy == nil
	if pool {
		if err := checked(kernels.CheckBatchNormPool(op, x, "g", g, argmax)); err != nil {
			return err
		}
	}
	n, c, hw, err := kernels.CheckBatchNormBackward(op, dx, dw, db, dy, x, b, saveMean, saveRstd, w)
	if err := checked(err); err != nil {
		return err
	}
	names := []string{"dx", "dw", "db", "dy", "x", "saveMean", "saveRstd", "w", "b"}
	ts := []*tensor.Tensor{dx, dw, db, dy, x, saveMean, saveRstd, w, b}
	ptrs, err := d.ptrList(op, names, ts, []tensor.DType{dt, dt, dt, dt, dt, tensor.F32, tensor.F32, dt, dt},
		[]bool{true, true, true, pool, false, false, false, true, true})
	if err != nil {
		return err
	}
	pdx, pdw, pdb, pdy, px, pm, pr, pw, pb := ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7], ptrs[8]
	// struct NormRelu of src/norm.cu, word for word: b, g, argmax, and
	// the pool's geometry (x's plane width, the pooled plane).
	relu := normReluWords(uint64(pb))
	sumsK, err := floatKernel(op, "bn_bwd_sums_relu", dt)
	if err != nil {
		return err
	}
	dxK, _ := floatKernel(op, "bn_bwd_dx_relu", dt)
	if pool {
		pg, err := d.ptrOf(op, "g", g, dt)
		if err != nil {
			return err
		}
		pa, err := d.ptrOf(op, "argmax", argmax, tensor.I32)
		if err != nil {
			return err
		}
		xs := x.Shape()
		relu = normReluPoolWords(uint64(pb), uint64(pg), uint64(pa), xs[2], xs[3])
		sumsK, _ = floatKernel(op, "bn_bwd_sums_relupool", dt)
		dxK, _ = floatKernel(op, "bn_bwd_dx_relupool", dt)
	}
	sums, err := d.scratchF32(2 * c)
	if err != nil {
		return err
	}
	defer sums.Storage().Free() // stream order keeps it until the launches have run
	ps, _ := d.ptrOf(op, "scratch", sums, tensor.F32)
	release := d.enter()
	defer release()
	if training || dw != nil || db != nil {
		fill := bnBwdSumsFill(pool, uint64(pdy), uint64(px), uint64(pm), uint64(pr), uint64(pw), n, c, hw, relu)
		if err := d.bnBwdSums(op, sumsK, dt, ps, pdw, pdb, n, c, hw, acc, fill); err != nil {
			return err
		}
	}
	if dx == nil {
		return nil
	}
	total := int64(x.Numel())
	e := bnBwdDxArgs(pool, uint64(pdx), uint64(pdy), uint64(px), uint64(pm), uint64(pr), uint64(pw), uint64(ps), training, c, hw, n, total, relu)
	return d.launch1D(dxK, total, e)
}

// GroupNormRelu is GroupNorm with y = max(y, +0) (NaN kept) in the pass
// that writes y.
func (d *Device) GroupNormRelu(y, mean, rstd, x, w, b *tensor.Tensor, groups int, eps float64) error {
	const op = "GroupNormRelu"
	dt := x.DType()
	n, c, hw, err := kernels.CheckGroupNorm(op, y, mean, rstd, x, w, b, groups)
	if err := checked(err); err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"y", "mean", "rstd", "x", "w", "b"}, []*tensor.Tensor{y, mean, rstd, x, w, b},
		[]tensor.DType{dt, tensor.F32, tensor.F32, dt, dt, dt}, []bool{false, true, true, false, true, true})
	if err != nil {
		return err
	}
	name, err := floatKernel(op, "gn_fwd_relu", dt)
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	for _, p := range ptrs {
		a.ptr(p)
	}
	a.i64(int64(groups)).i64(int64(c / groups)).i64(int64(hw)).f32(float32(eps))
	return d.launchRows(name, n*groups, &a)
}

// GroupNormReluBackward is GroupNormBackward with dy taken as +0 wherever
// GroupNormRelu's output was not > 0, rebuilt from x, mean, rstd, w and b
// (the forward's shift; nil for none).
func (d *Device) GroupNormReluBackward(dx, dw, db, dy, x, b, mean, rstd, w *tensor.Tensor, groups int) error {
	return d.groupNormReluBackward("GroupNormReluBackward", dx, dw, db, dy, x, b, mean, rstd, w, groups, false)
}

// GroupNormReluBackwardAdd is GroupNormReluBackward adding into dw and db
// (kernels.ParamGradAccumulator).
func (d *Device) GroupNormReluBackwardAdd(dx, dw, db, dy, x, b, mean, rstd, w *tensor.Tensor, groups int) error {
	return d.groupNormReluBackward("GroupNormReluBackwardAdd", dx, dw, db, dy, x, b, mean, rstd, w, groups, true)
}

// groupNormReluBackward is GroupNormReluBackward, adding into dw and db
// with acc.
func (d *Device) groupNormReluBackward(op string, dx, dw, db, dy, x, b, mean, rstd, w *tensor.Tensor, groups int, acc bool) error {
	dt := x.DType()
	n, c, hw, err := kernels.CheckGroupNormBackward(op, dx, dw, db, dy, x, b, mean, rstd, w, groups)
	if err := checked(err); err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"dx", "dw", "db", "dy", "x", "mean", "rstd", "w", "b"},
		[]*tensor.Tensor{dx, dw, db, dy, x, mean, rstd, w, b},
		[]tensor.DType{dt, dt, dt, dt, dt, tensor.F32, tensor.F32, dt, dt}, []bool{true, true, true, false, false, false, false, true, true})
	if err != nil {
		return err
	}
	pdx, pdw, pdb, pdy, px, pm, pr, pw, pb := ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7], ptrs[8]
	bwd, err := floatKernel(op, "gn_bwd_relu", dt)
	if err != nil {
		return err
	}
	dwdb, _ := floatKernel(op, "gn_bwd_dwdb", dt)
	part, err := d.scratchF32(2 * n * c)
	if err != nil {
		return err
	}
	defer part.Storage().Free() // stream order keeps it until the launches have run
	pp, _ := d.ptrOf(op, "scratch", part, tensor.F32)
	release := d.enter()
	defer release()
	var a args
	a.ptr(pdx).ptr(pp).ptr(pdy).ptr(px).ptr(pm).ptr(pr).ptr(pw)
	a.i64(int64(n)).i64(int64(c)).i64(int64(groups)).i64(int64(c / groups)).i64(int64(hw)).ptr(pb)
	if err := d.launchRows(bwd, n*groups, &a); err != nil {
		return err
	}
	if dw == nil && db == nil {
		return nil
	}
	var e args
	return d.launch1D(dwdb, int64(c), e.ptr(pdw).ptr(pdb).ptr(pp).i64(int64(n)).i64(int64(c)).i32(b2i(acc)))
}

// BatchNormEvalAffine implements kernels.BatchNormEvalAffiner (F32).
func (b *Backend) BatchNormEvalAffine(scale, shift, w, bias, runMean, runVar *T, eps float64) {
	must(b.d.BatchNormEvalAffine(scale, shift, w, bias, runMean, runVar, eps))
}

// BatchNormEvalAffine writes batch norm's evaluation-mode scale and
// shift per channel in one launch (bn_eval_affine_f32), bit for bit what
// the unfused BinaryScalar, Unary and Binary kernels compute. Every
// operand is a contiguous F32 [C]; w and b may be nil.
func (d *Device) BatchNormEvalAffine(scale, shift, w, b, runMean, runVar *tensor.Tensor, eps float64) error {
	const op = "BatchNormEvalAffine"
	c, err := kernels.CheckBatchNormEvalAffine(op, scale, shift, w, b, runMean, runVar)
	if err := checked(err); err != nil {
		return err
	}
	if dt := runVar.DType(); dt != tensor.F32 {
		return fmt.Errorf("cuda: %s: dtype %v (F32 runs here)", op, dt)
	}
	var ptrs [6]cu.DevicePtr
	for i, o := range []struct {
		what string
		t    *tensor.Tensor
	}{{"scale", scale}, {"shift", shift}, {"w", w}, {"b", b}, {"runMean", runMean}, {"runVar", runVar}} {
		if ptrs[i], err = d.optPtr(op, o.what, o.t, tensor.F32); err != nil {
			return err
		}
	}
	if c == 0 {
		return nil
	}
	release := d.enter()
	defer release()
	var a args
	a.ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).ptr(ptrs[3]).ptr(ptrs[4]).ptr(ptrs[5]).f32(float32(eps)).i64(int64(c))
	return d.launch1D("bn_eval_affine_f32", int64(c), &a)
}
