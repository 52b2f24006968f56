//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The norm family (src/norm.cu): layer norm over the last n elements of
// each row, batch and group normalisation over x [N, C, *]. x, y, dy, dx
// and the affine w, b, dw, db share x's dtype (F32, BF16 or F16); the
// statistics (mean, rstd, running mean and variance) are F32.

// LayerNorm implements kernels.Backend.
func (b *Backend) LayerNorm(y, mean, rstd, x, w, bias *T, n int, eps float64) {
	must(b.d.LayerNorm(y, mean, rstd, x, w, bias, n, eps))
}

// LayerNormBackward implements kernels.Backend.
func (b *Backend) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, n int) {
	must(b.d.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w, n))
}

var _ kernels.LinearActLayerNormer = (*Backend)(nil)

// LinearActLayerNorm implements kernels.LinearActLayerNormer (F32, one
// launch in linear_act_ln_f32's range; false elsewhere).
func (b *Backend) LinearActLayerNorm(y, x, w, bias *T, act kernels.UnaryOp, g, s *T, eps float64) bool {
	done, err := b.d.LinearActLayerNorm(y, x, w, bias, act, g, s, eps)
	must(err)
	return done
}

// LinearActLayerNorm writes y = LayerNorm(act(x·wᵀ + bias)) with gain g
// and shift s in one linear_act_ln_f32 launch (a block of rowThreads
// threads per row) for F32 operands of at most lnFusedN outputs and
// lnFusedK inputs a row, and reports false, having written nothing,
// otherwise.
func (d *Device) LinearActLayerNorm(y, x, w, bias *tensor.Tensor, act kernels.UnaryOp, g, s *tensor.Tensor, eps float64) (bool, error) {
	const op = "LinearActLayerNorm"
	m, n, k, err := kernels.CheckLinearActLayerNorm(op, y, x, w, bias, act, g, s)
	if err := checked(err); err != nil {
		return false, err
	}
	if x.DType() != tensor.F32 || !linearActLNFits(n, k) {
		return false, nil
	}
	l, err := d.lnPrepare(op, kernels.LinearActLNCall{Y: y, X: x, W: w, B: bias, Act: act, G: g, S: s, Eps: eps}, m, n, k)
	if err != nil || m == 0 || n == 0 {
		return err == nil, err
	}
	fn, err := d.kernel("linear_act_ln_f32")
	if err != nil {
		return false, err
	}
	release := d.enter()
	defer release()
	var a args
	a.ptr(cu.DevicePtr(l.y)).ptr(cu.DevicePtr(l.x)).ptr(cu.DevicePtr(l.w)).ptr(cu.DevicePtr(l.b)).i32(int32(act))
	a.ptr(cu.DevicePtr(l.g)).ptr(cu.DevicePtr(l.s)).i64(l.n).i64(l.k).f32(l.eps)
	grid, block, shmem := linearActLNGeom(m, n)
	return true, launchRaw(fn, [3]int{grid, 1, 1}, [3]int{block, 1, 1}, shmem, d.stream, &a)
}

// lnPrepare gathers a checked LinearActLayerNorm's addresses (F32
// device memory, b, g and s optional; x too, for a call whose x is a
// gathered input, which the caller packs) for a launch over its m rows.
func (d *Device) lnPrepare(op string, c kernels.LinearActLNCall, m, n, k int) (lnCall, error) {
	f32 := tensor.F32
	ptrs, err := d.ptrList(op, []string{"y", "x", "w", "bias", "g", "s"}, []*tensor.Tensor{c.Y, c.X, c.W, c.B, c.G, c.S},
		[]tensor.DType{f32, f32, f32, f32, f32, f32}, []bool{false, c.X == nil, false, true, true, true})
	if err != nil {
		return lnCall{}, err
	}
	return lnCall{y: uint64(ptrs[0]), x: uint64(ptrs[1]), w: uint64(ptrs[2]), b: uint64(ptrs[3]), g: uint64(ptrs[4]), s: uint64(ptrs[5]),
		act: int64(c.Act), n: int64(n), k: int64(k), eps: float32(c.Eps), m: int64(m)}, nil
}

var _ kernels.LinearActLayerNormsJoiner = (*Backend)(nil)

// LinearActLayerNorms implements kernels.LinearActLayerNormsJoiner.
func (b *Backend) LinearActLayerNorms(calls []kernels.LinearActLNCall) bool {
	done, err := b.d.LinearActLayerNorms(calls)
	must(err)
	return done
}

// LinearActLayerNorms is kernels.LinearActLayerNormsJoiner's
// LinearActLayerNorms, F32: every call that LinearActLayerNorm takes in
// one launch, lnJoin at a time into one linear_act_ln_join_f32 launch (a
// block per row of all of them, each row computed by linear_act_ln_f32's
// code: the same bits; a gathered input's row gathered first, in the
// block's shared memory past its outputs, the pieces' values as
// GatherConcat writes them); false, having written nothing, when any
// call does not fit one launch, or there are more than lnIn distinct
// gathered inputs or one of more than gatherInPieces pieces, or a
// gathered input with ESPER_CUDA_GATHER_IN=off. Everything is checked
// before anything launches.
func (d *Device) LinearActLayerNorms(calls []kernels.LinearActLNCall) (bool, error) {
	const op = "LinearActLayerNorms"
	dims, err := kernels.CheckLinearActLayerNorms(op, calls)
	if err := checked(err); err != nil {
		return false, err
	}
	if joinsOff.Load() {
		return false, nil
	}
	ls := make([]lnCall, 0, len(calls))
	var ins gatherIns
	for i, c := range calls {
		m, n, k := dims[i].M, dims[i].N, dims[i].K
		if c.Y.DType() != tensor.F32 || !linearActLNFits(n, k) || (c.In != nil && gatherInOff.Load()) {
			return false, nil
		}
		what := fmt.Sprintf("%s: call %d", op, i)
		l, err := d.lnPrepare(what, c, m, n, k) // x is nil where In is set
		if err != nil {
			return false, err
		}
		if m == 0 || n == 0 {
			continue // launches nothing, reads no input
		}
		if c.In != nil {
			at, ok, err := ins.add(d, what, c.In, dims[i].Pieces, k, lnIn)
			if err != nil || !ok {
				return false, err
			}
			l.in = at
		}
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		return true, nil
	}
	fn, err := d.kernel("linear_act_ln_join_f32")
	if err != nil {
		return false, err
	}
	release := d.enter()
	defer release()
	var w [lnJoinWords]uint64
	for start := 0; start < len(ls); start += lnJoin {
		rows, widest := lnJoinPack(&w, ls[start:min(len(ls), start+lnJoin)], ins.parts)
		_, block, shmem := linearActLNGeom(int(rows), int(widest))
		d.joins.Add(1)
		if err := launchStructShared(fn, [3]int{int(rows), 1, 1}, [3]int{block, 1, 1}, shmem, d.stream, w[:]); err != nil {
			return false, err
		}
	}
	return true, nil
}

// GroupNorm implements kernels.Backend.
func (b *Backend) GroupNorm(y, mean, rstd, x, w, bias *T, groups int, eps float64) {
	must(b.d.GroupNorm(y, mean, rstd, x, w, bias, groups, eps))
}

// GroupNormBackward implements kernels.Backend.
func (b *Backend) GroupNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, groups int) {
	must(b.d.GroupNormBackward(dx, dw, db, dy, x, mean, rstd, w, groups))
}

// BatchNorm implements kernels.Backend.
func (b *Backend) BatchNorm(y, saveMean, saveRstd, x, w, bias, runMean, runVar *T, training bool, momentum, eps float64) {
	must(b.d.BatchNorm(y, saveMean, saveRstd, x, w, bias, runMean, runVar, training, momentum, eps))
}

// BatchNormBackward implements kernels.Backend.
func (b *Backend) BatchNormBackward(dx, dw, db, dy, x, saveMean, saveRstd, w *T, training bool) {
	must(b.d.BatchNormBackward(dx, dw, db, dy, x, saveMean, saveRstd, w, training))
}

// BatchNormBackwardAdd implements kernels.ParamGradAccumulator.
func (b *Backend) BatchNormBackwardAdd(dx, dw, db, dy, x, saveMean, saveRstd, w *T, training bool) {
	must(b.d.BatchNormBackwardAdd(dx, dw, db, dy, x, saveMean, saveRstd, w, training))
}

// GroupNormBackwardAdd implements kernels.ParamGradAccumulator.
func (b *Backend) GroupNormBackwardAdd(dx, dw, db, dy, x, mean, rstd, w *T, groups int) {
	must(b.d.GroupNormBackwardAdd(dx, dw, db, dy, x, mean, rstd, w, groups))
}

// GroupNormReluBackwardAdd implements kernels.ParamGradAccumulator.
func (b *Backend) GroupNormReluBackwardAdd(dx, dw, db, dy, x, bias, mean, rstd, w *T, groups int) {
	must(b.d.GroupNormReluBackwardAdd(dx, dw, db, dy, x, bias, mean, rstd, w, groups))
}

// scratchF32 allocates an F32 device tensor of n elements; free it with
// its Storage().Free once the launches reading it are enqueued.
func (d *Device) scratchF32(n int) (*tensor.Tensor, error) {
	return tensor.EmptyOn(tensor.CUDA(d.ordinal), tensor.F32, max(n, 1))
}

// Batch norm's per-channel reductions (src/norm.cu): the chunking,
// the partial launches' geometry, tails and argument blocks are pure Go
// in norm_launch.go.

// checkBNChannels refuses more channels than a grid has rows of blocks.
func checkBNChannels(op string, c int) error {
	if c > bnMaxChannels {
		return fmt.Errorf("cuda: %s: %d channels (at most %d run here)", op, c, bnMaxChannels)
	}
	return nil
}

// bnPartials launches kernel, batch norm's partial reduction, over a
// grid of (s, c) blocks (bnPartialGeom) into a new scratch of two floats
// per block, and returns the scratch: the caller frees it once the
// launch that reads it is enqueued (stream order keeps it until that
// launch has run). fill adds the kernel's arguments after the scratch's
// address; tail is its last, struct BnStatsTail or BnBwdTail
// (src/norm.cu), whose counters word, when set, has the launch finish
// the channels itself (bnPartialArgs).
func (d *Device) bnPartials(op, kernel string, c, s int, fill func(a *args), tail []uint64) (*tensor.Tensor, cu.DevicePtr, error) {
	part, err := d.scratchF32(2 * c * s)
	if err != nil {
		return nil, 0, err
	}
	ppart, _ := d.ptrOf(op, "scratch", part, tensor.F32)
	fn, err := d.kernel(kernel)
	if err == nil {
		grid, block := bnPartialGeom(s, c)
		err = launchRaw(fn, grid, block, 0, d.stream, bnPartialArgs(uint64(ppart), fill, tail))
	}
	if err != nil {
		part.Storage().Free()
		return nil, 0, err
	}
	return part, ppart, nil
}

// bnStats launches batch norm's statistics into psm and psr (mean and
// rstd, [C]): in training the partial moments of every chunk of x
// (bn_stats_<dt>), merged, with the running statistics prm, prv
// (optional) updated, by the block that writes a channel's last partial
// (one launch) or, past tailCounters channels, by bn_stats_finish; in
// evaluation only the finish, which reads the running statistics. Call
// it inside d.enter.
func (d *Device) bnStats(op string, dt tensor.DType, psm, psr, prm, prv, px cu.DevicePtr, n, c, hw int, training bool, momentum, eps float64) error {
	name, err := floatKernel(op, "bn_stats", dt)
	if err != nil {
		return err
	}
	if err := checkBNChannels(op, c); err != nil || c <= 0 {
		return err
	}
	cnt := n * hw
	s, chunk := bnChunks(cnt, c)
	var ppart cu.DevicePtr
	if training {
		// The partial launch finishes the statistics itself where the
		// channels fit the device's counters (no bn_stats_finish).
		tail := bnStatsTrainTail(uint64(psm), uint64(psr), uint64(prm), uint64(prv), cnt, c, momentum, eps, uint64(d.counters))
		var part *tensor.Tensor
		if part, ppart, err = d.bnPartials(op, name, c, s, bnStatsFill(uint64(px), n, c, hw, chunk), tail.words()); err != nil {
			return err
		}
		defer part.Storage().Free() // after the finish below is enqueued
		if tail.counters != 0 {
			return nil
		}
	}
	fin, err := d.kernel("bn_stats_finish")
	if err != nil {
		return err
	}
	var f args
	f.ptr(psm).ptr(psr).ptr(prm).ptr(prv).ptr(ppart).i64(int64(s)).i64(int64(chunk)).i64(int64(cnt))
	f.i32(b2i(training)).f32(float32(momentum)).f32(float32(eps))
	return launchRaw(fin, [3]int{c, 1, 1}, [3]int{32, 1, 1}, 0, d.stream, &f)
}

// bnBwdSums launches the backward's per-channel sums into ps (Σ dy at
// [0, C), Σ dy·x̂ at [C, 2C)) and the optional pdw, pdb: the partials of
// every chunk (the kernel partial; fill adds its arguments after the
// scratch, given the chunk length), summed by the block that writes a
// channel's last partial (one launch) or, past tailCounters channels, by
// bn_bwd_finish_<dt>. Call it inside d.enter.
func (d *Device) bnBwdSums(op, partial string, dt tensor.DType, ps, pdw, pdb cu.DevicePtr, n, c, hw int, acc bool, fill func(a *args, chunk int)) error {
	finName, err := floatKernel(op, "bn_bwd_finish", dt)
	if err != nil {
		return err
	}
	if err := checkBNChannels(op, c); err != nil || c <= 0 {
		return err
	}
	s, chunk := bnChunks(n*hw, c)
	// The partial launch finishes the sums itself where the channels fit
	// the device's counters (no bn_bwd_finish).
	tail := bnBwdSumsTail(uint64(ps), uint64(pdw), uint64(pdb), c, acc, uint64(d.counters))
	part, ppart, err := d.bnPartials(op, partial, c, s, func(a *args) { fill(a, chunk) }, tail.words())
	if err != nil {
		return err
	}
	defer part.Storage().Free() // after the finish below is enqueued
	if tail.counters != 0 {
		return nil
	}
	fin, err := d.kernel(finName)
	if err != nil {
		return err
	}
	var f args
	f.ptr(ps).ptr(pdw).ptr(pdb).ptr(ppart).i64(int64(s)).i64(int64(c)).i32(b2i(acc))
	return launchRaw(fin, [3]int{c, 1, 1}, [3]int{32, 1, 1}, 0, d.stream, &f)
}

// BatchNorm normalises x [N, C, *] per channel into y. In training it
// uses the batch statistics (biased variance) and updates runMean and
// runVar (optional) as running = (1−m)·running + m·batch with the
// unbiased variance; in evaluation it uses runMean and runVar (required).
// saveMean and saveRstd ([C], optional) receive the statistics used; w
// and b ([C]) are optional.
func (d *Device) BatchNorm(y, saveMean, saveRstd, x, w, b, runMean, runVar *tensor.Tensor, training bool, momentum, eps float64) error {
	const op = "BatchNorm"
	dt := x.DType()
	n, c, hw, err := kernels.CheckBatchNorm(op, y, saveMean, saveRstd, x, w, b, runMean, runVar, training)
	if err := checked(err); err != nil {
		return err
	}
	ts := []*tensor.Tensor{y, saveMean, saveRstd, x, w, b, runMean, runVar}
	names := []string{"y", "saveMean", "saveRstd", "x", "w", "b", "runMean", "runVar"}
	ptrs, err := d.ptrList(op, names, ts, []tensor.DType{dt, tensor.F32, tensor.F32, dt, dt, dt, tensor.F32, tensor.F32},
		[]bool{false, true, true, false, true, true, true, true})
	if err != nil {
		return err
	}
	py, psm, psr, px, pw, pb, prm, prv := ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7]
	if saveMean == nil || saveRstd == nil {
		s, err := d.scratchF32(2 * c)
		if err != nil {
			return err
		}
		defer s.Storage().Free()
		ps, _ := d.ptrOf(op, "scratch", s, tensor.F32)
		if saveMean == nil {
			psm = ps
		}
		if saveRstd == nil {
			psr = ps + cu.DevicePtr(4*c)
		}
	}
	apply, err := floatKernel(op, "bn_apply", dt)
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	if err := d.bnStats(op, dt, psm, psr, prm, prv, px, n, c, hw, training, momentum, eps); err != nil {
		return err
	}
	total := int64(x.Numel())
	var e args
	return d.launch1D(apply, total, e.ptr(py).ptr(px).ptr(psm).ptr(psr).ptr(pw).ptr(pb).i64(int64(c)).i64(int64(hw)).i64(total))
}

// BatchNormBackward fills the non-nil of dx, dw, db (overwritten) from dy
// and the forward's x, saveMean, saveRstd (required) and w (optional).
// With training false the statistics are constants: dx = w·rstd·dy.
func (d *Device) BatchNormBackward(dx, dw, db, dy, x, saveMean, saveRstd, w *tensor.Tensor, training bool) error {
	return d.batchNormBackward("BatchNormBackward", dx, dw, db, dy, x, saveMean, saveRstd, w, training, false)
}

// BatchNormBackwardAdd is BatchNormBackward adding into dw and db
// (kernels.ParamGradAccumulator).
func (d *Device) BatchNormBackwardAdd(dx, dw, db, dy, x, saveMean, saveRstd, w *tensor.Tensor, training bool) error {
	return d.batchNormBackward("BatchNormBackwardAdd", dx, dw, db, dy, x, saveMean, saveRstd, w, training, true)
}

// batchNormBackward is BatchNormBackward, adding into dw and db with acc.
func (d *Device) batchNormBackward(op string, dx, dw, db, dy, x, saveMean, saveRstd, w *tensor.Tensor, training, acc bool) error {
	dt := x.DType()
	n, c, hw, err := kernels.CheckBatchNormBackward(op, dx, dw, db, dy, x, nil, saveMean, saveRstd, w)
	if err := checked(err); err != nil {
		return err
	}
	names := []string{"dx", "dw", "db", "dy", "x", "saveMean", "saveRstd", "w"}
	ts := []*tensor.Tensor{dx, dw, db, dy, x, saveMean, saveRstd, w}
	ptrs, err := d.ptrList(op, names, ts, []tensor.DType{dt, dt, dt, dt, dt, tensor.F32, tensor.F32, dt},
		[]bool{true, true, true, false, false, false, false, true})
	if err != nil {
		return err
	}
	pdx, pdw, pdb, pdy, px, pm, pr, pw := ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7]
	sums, err := d.scratchF32(2 * c)
	if err != nil {
		return err
	}
	defer sums.Storage().Free()
	ps, _ := d.ptrOf(op, "scratch", sums, tensor.F32)
	sumsK, err := floatKernel(op, "bn_bwd_sums", dt)
	if err != nil {
		return err
	}
	dxK, _ := floatKernel(op, "bn_bwd_dx", dt)
	release := d.enter()
	defer release()
	if training || dw != nil || db != nil {
		fill := bnBwdSumsFill(false, uint64(pdy), uint64(px), uint64(pm), uint64(pr), 0, n, c, hw, nil)
		if err := d.bnBwdSums(op, sumsK, dt, ps, pdw, pdb, n, c, hw, acc, fill); err != nil {
			return err
		}
	}
	if dx == nil {
		return nil
	}
	total := int64(x.Numel())
	e := bnBwdDxArgs(false, uint64(pdx), uint64(pdy), uint64(px), uint64(pm), uint64(pr), uint64(pw), uint64(ps), training, c, hw, n, total, nil)
	return d.launch1D(dxK, total, e)
}

// GroupNorm normalises x [N, C, *] over groups of C/groups channels into
// y, applying w and b ([C], optional); mean and rstd ([N·groups],
// optional) receive the statistics.
func (d *Device) GroupNorm(y, mean, rstd, x, w, b *tensor.Tensor, groups int, eps float64) error {
	const op = "GroupNorm"
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
	name, err := floatKernel(op, "gn_fwd", dt)
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

// GroupNormBackward fills the non-nil of dx, dw, db (overwritten) from dy
// and the forward's x, mean, rstd (required) and w (optional).
func (d *Device) GroupNormBackward(dx, dw, db, dy, x, mean, rstd, w *tensor.Tensor, groups int) error {
	return d.groupNormBackward("GroupNormBackward", dx, dw, db, dy, x, mean, rstd, w, groups, false)
}

// GroupNormBackwardAdd is GroupNormBackward adding into dw and db
// (kernels.ParamGradAccumulator).
func (d *Device) GroupNormBackwardAdd(dx, dw, db, dy, x, mean, rstd, w *tensor.Tensor, groups int) error {
	return d.groupNormBackward("GroupNormBackwardAdd", dx, dw, db, dy, x, mean, rstd, w, groups, true)
}

// groupNormBackward is GroupNormBackward, adding into dw and db with acc.
func (d *Device) groupNormBackward(op string, dx, dw, db, dy, x, mean, rstd, w *tensor.Tensor, groups int, acc bool) error {
	dt := x.DType()
	n, c, hw, err := kernels.CheckGroupNormBackward(op, dx, dw, db, dy, x, nil, mean, rstd, w, groups)
	if err := checked(err); err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"dx", "dw", "db", "dy", "x", "mean", "rstd", "w"},
		[]*tensor.Tensor{dx, dw, db, dy, x, mean, rstd, w},
		[]tensor.DType{dt, dt, dt, dt, dt, tensor.F32, tensor.F32, dt}, []bool{true, true, true, false, false, false, false, true})
	if err != nil {
		return err
	}
	pdx, pdw, pdb, pdy, px, pm, pr, pw := ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7]
	part, err := d.scratchF32(2 * n * c)
	if err != nil {
		return err
	}
	defer part.Storage().Free()
	pp, _ := d.ptrOf(op, "scratch", part, tensor.F32)
	bwd, err := floatKernel(op, "gn_bwd", dt)
	if err != nil {
		return err
	}
	dwdb, _ := floatKernel(op, "gn_bwd_dwdb", dt)
	release := d.enter()
	defer release()
	var a args
	a.ptr(pdx).ptr(pp).ptr(pdy).ptr(px).ptr(pm).ptr(pr).ptr(pw)
	a.i64(int64(n)).i64(int64(c)).i64(int64(groups)).i64(int64(c / groups)).i64(int64(hw))
	if err := d.launchRows(bwd, n*groups, &a); err != nil {
		return err
	}
	if dw == nil && db == nil {
		return nil
	}
	var e args
	return d.launch1D(dwdb, int64(c), e.ptr(pdw).ptr(pdb).ptr(pp).i64(int64(n)).i64(int64(c)).i32(b2i(acc)))
}

// LayerNorm normalises x viewed as [M, n] over its last n elements,
// then applies w and b ([n], optional); mean and rstd (F32 [M]) are
// saved for the backward pass.
func (d *Device) LayerNorm(y, mean, rstd, x, w, b *tensor.Tensor, n int, eps float64) error {
	const op = "LayerNorm"
	dt := x.DType()
	rows, err := kernels.CheckLayerNorm(op, y, mean, rstd, x, w, b, n)
	if err := checked(err); err != nil {
		return err
	}
	name, err := floatKernel(op, "layernorm_fwd", dt)
	if err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"y", "mean", "rstd", "x", "w", "b"}, []*tensor.Tensor{y, mean, rstd, x, w, b},
		[]tensor.DType{dt, tensor.F32, tensor.F32, dt, dt, dt}, []bool{false, false, false, false, true, true})
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	for _, p := range ptrs {
		a.ptr(p)
	}
	return d.launchRows(name, rows, a.i64(int64(n)).f32(float32(eps)))
}

// LayerNormBackward fills the non-nil of dx, dw, db (overwritten) from
// dy and the forward's x, mean, rstd and w (optional).
func (d *Device) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w *tensor.Tensor, n int) error {
	const op = "LayerNormBackward"
	dt := x.DType()
	rows, err := kernels.CheckLayerNormBackward(op, dx, dw, db, dy, x, mean, rstd, w, n)
	if err := checked(err); err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"dx", "dw", "db", "dy", "x", "mean", "rstd", "w"},
		[]*tensor.Tensor{dx, dw, db, dy, x, mean, rstd, w},
		[]tensor.DType{dt, dt, dt, dt, dt, tensor.F32, tensor.F32, dt}, []bool{true, true, true, false, false, false, false, true})
	if err != nil {
		return err
	}
	pdx, pdw, pdb, pdy, px, pmean, prstd, pw := ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7]
	release := d.enter()
	defer release()
	if dx != nil {
		name, err := floatKernel(op, "layernorm_bwd_dx", dt)
		if err != nil {
			return err
		}
		var a args
		if err := d.launchRows(name, rows, a.ptr(pdx).ptr(pdy).ptr(px).ptr(pmean).ptr(prstd).ptr(pw).i64(int64(n))); err != nil {
			return err
		}
	}
	if dw != nil || db != nil {
		name, err := floatKernel(op, "layernorm_bwd_dwdb", dt)
		if err != nil {
			return err
		}
		var a args
		return d.launch1D(name, int64(n), a.ptr(pdw).ptr(pdb).ptr(pdy).ptr(px).ptr(pmean).ptr(prstd).i64(int64(rows)).i64(int64(n)))
	}
	return nil
}
