package cpu

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Normalisation kernels. Statistics are accumulated in float64 per fixed
// unit of work (a row, a (sample, group) block, a (sample, channel) plane
// or a fixed chunk of rows) and combined in order, so results are
// bitwise independent of the worker count.

const normRowChunk = 64 // rows per partial of LayerNorm's dw/db

// LayerNorm implements kernels.Backend.
func (be *Backend) LayerNorm(y, mean, rstd, x, w, b *T, n int, eps float64) {
	const name = "LayerNorm"
	needCPU(name, y, mean, rstd, x, w, b)
	m := must1(kernels.CheckLayerNorm(name, y, mean, rstd, x, w, b, n))
	if wide(x, y) {
		be.launch(layerNormPrep[float64](y, mean, rstd, x, w, b, m, n, eps))
	} else {
		be.launch(layerNormPrep[float32](y, mean, rstd, x, w, b, m, n, eps))
	}
}

// LinearActLayerNorm implements kernels.LinearActLayerNormer: the ops
// (kernels.LinearActLayerNormOps), whose results these are bit for bit.
func (be *Backend) LinearActLayerNorm(y, x, w, b *T, act kernels.UnaryOp, g, s *T, eps float64) bool {
	const name = "LinearActLayerNorm"
	needCPU(name, y, x, w, b, g, s)
	_, _, _, err := kernels.CheckLinearActLayerNorm(name, y, x, w, b, act, g, s)
	must(err)
	kernels.LinearActLayerNormOps(be, y, x, w, b, act, g, s, eps)
	return true
}

func layerNormPrep[F tensor.Float](y, mean, rstd, x, w, b *T, m, n int, eps float64) func() {
	var s stage
	xs, ws, bs := in[F](&s, x), in[F](&s, w), in[F](&s, b)
	ys := out[F](&s, y)
	ms, rs := out[F](&s, mean), out[F](&s, rstd)
	body := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := xs[i*n : (i+1)*n]
			mu, r := moments(row, eps)
			if ms != nil {
				ms[i] = F(mu)
			}
			if rs != nil {
				rs[i] = F(r)
			}
			yr := ys[i*n : (i+1)*n]
			for j, v := range row {
				h := (float64(v) - mu) * r
				if ws != nil {
					h *= float64(ws[j])
				}
				if bs != nil {
					h += float64(bs[j])
				}
				yr[j] = F(h)
			}
		}
	}
	return func() {
		s.load()
		parallelFor(m, 6*n, body)
		s.store()
	}
}

// moments returns the mean and 1/sqrt(biased variance + eps) of v,
// two-pass in float64.
func moments[F tensor.Float](v []F, eps float64) (mu, rstd float64) {
	mu = rowSum(v) / float64(len(v))
	sq := rowSqDev(v, mu)
	return mu, 1 / math.Sqrt(sq/float64(len(v))+eps)
}

// LayerNormBackward implements kernels.Backend.
func (be *Backend) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, n int) {
	const name = "LayerNormBackward"
	needCPU(name, dx, dw, db, dy, x, mean, rstd, w)
	m := must1(kernels.CheckLayerNormBackward(name, dx, dw, db, dy, x, mean, rstd, w, n))
	if wide(x, dy) {
		be.launch(layerNormBwdPrep[float64](dx, dw, db, dy, x, mean, rstd, w, m, n))
	} else {
		be.launch(layerNormBwdPrep[float32](dx, dw, db, dy, x, mean, rstd, w, m, n))
	}
}

func layerNormBwdPrep[F tensor.Float](dx, dw, db, dy, x, mean, rstd, w *T, m, n int) func() {
	var s stage
	xs, gs, ms, rs, ws := in[F](&s, x), in[F](&s, dy), in[F](&s, mean), in[F](&s, rstd), in[F](&s, w)
	dxs, dws, dbs := out[F](&s, dx), out[F](&s, dw), out[F](&s, db)
	nch := (m + normRowChunk - 1) / normRowChunk
	var pw, pb []float64
	if dws != nil {
		pw = make([]float64, nch*n)
	}
	if dbs != nil {
		pb = make([]float64, nch*n)
	}
	rowBody := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if dxs == nil {
				break
			}
			mu, r := float64(ms[i]), float64(rs[i])
			xr, gr, dr := xs[i*n:(i+1)*n], gs[i*n:(i+1)*n], dxs[i*n:(i+1)*n]
			var sa, sb float64
			for j, v := range xr {
				h := (float64(v) - mu) * r
				g := float64(gr[j])
				if ws != nil {
					g *= float64(ws[j])
				}
				sa += g
				sb += g * h
			}
			sa /= float64(n)
			sb /= float64(n)
			for j, v := range xr {
				h := (float64(v) - mu) * r
				g := float64(gr[j])
				if ws != nil {
					g *= float64(ws[j])
				}
				dr[j] = F(r * (g - sa - h*sb))
			}
		}
	}
	chunkBody := func(lo, hi int) {
		for c := lo; c < hi; c++ {
			var prw, prb []float64
			if pw != nil {
				prw = pw[c*n : (c+1)*n]
				clear(prw)
			}
			if pb != nil {
				prb = pb[c*n : (c+1)*n]
				clear(prb)
			}
			for i := c * normRowChunk; i < min(m, (c+1)*normRowChunk); i++ {
				mu, r := float64(ms[i]), float64(rs[i])
				xr, gr := xs[i*n:(i+1)*n], gs[i*n:(i+1)*n]
				for j, v := range xr {
					g := float64(gr[j])
					if prw != nil {
						prw[j] += g * (float64(v) - mu) * r
					}
					if prb != nil {
						prb[j] += g
					}
				}
			}
		}
	}
	combine := func(lo, hi int) {
		for j := lo; j < hi; j++ {
			if pw != nil {
				var a float64
				for c := 0; c < nch; c++ {
					a += pw[c*n+j]
				}
				dws[j] = F(a)
			}
			if pb != nil {
				var a float64
				for c := 0; c < nch; c++ {
					a += pb[c*n+j]
				}
				dbs[j] = F(a)
			}
		}
	}
	return func() {
		s.load()
		if dxs != nil {
			parallelFor(m, 8*n, rowBody)
		}
		if pw != nil || pb != nil {
			parallelFor(nch, normRowChunk*n*3, chunkBody)
			parallelFor(n, nch, combine)
		}
		s.store()
	}
}

// planes returns N, C and the elements per (sample, channel) plane of a
// [N, C, *] tensor (kernels.Planes).
func planes(name string, x *T) (n, c, hw int) {
	n, c, hw, err := kernels.Planes(name, x.Shape())
	must(err)
	return n, c, hw
}

// GroupNorm implements kernels.Backend.
func (be *Backend) GroupNorm(y, mean, rstd, x, w, b *T, groups int, eps float64) {
	be.groupNorm("GroupNorm", y, mean, rstd, x, w, b, groups, eps, false)
}

// GroupNormRelu implements kernels.GroupNormReluer: GroupNorm with the
// ReLU applied in the normalising pass.
func (be *Backend) GroupNormRelu(y, mean, rstd, x, w, b *T, groups int, eps float64) {
	be.groupNorm("GroupNormRelu", y, mean, rstd, x, w, b, groups, eps, true)
}

func (be *Backend) groupNorm(name string, y, mean, rstd, x, w, b *T, groups int, eps float64, relu bool) {
	needCPU(name, y, mean, rstd, x, w, b)
	_, _, _, err := kernels.CheckGroupNorm(name, y, mean, rstd, x, w, b, groups)
	must(err)
	if wide(x, y) {
		be.launch(groupNormPrep[float64](y, mean, rstd, x, w, b, groups, eps, relu))
	} else {
		be.launch(groupNormPrep[float32](y, mean, rstd, x, w, b, groups, eps, relu))
	}
}

// groupNormPrep normalises each (sample, group) block; with relu the
// output is ReLU'd in the same pass, from the mean and rstd rounded to F
// as they are saved, so that the backward (groupNormBwdPrep) rebuilds the
// mask exactly.
func groupNormPrep[F tensor.Float](y, mean, rstd, x, w, b *T, groups int, eps float64, relu bool) func() {
	var s stage
	n, c, hw := planes("GroupNorm", x)
	xs, ws, bs := in[F](&s, x), in[F](&s, w), in[F](&s, b)
	ys := out[F](&s, y)
	ms, rs := out[F](&s, mean), out[F](&s, rstd)
	cg := c / groups
	size := cg * hw
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			blk := xs[it*size : (it+1)*size]
			mu, r := moments(blk, eps)
			if relu {
				mu, r = float64(F(mu)), float64(F(r))
			}
			if ms != nil {
				ms[it] = F(mu)
			}
			if rs != nil {
				rs[it] = F(r)
			}
			c0 := (it % groups) * cg
			yb := ys[it*size : (it+1)*size]
			for k := 0; k < cg; k++ {
				wk, bk := 1.0, 0.0
				if ws != nil {
					wk = float64(ws[c0+k])
				}
				if bs != nil {
					bk = float64(bs[c0+k])
				}
				rowAffineAct(yb[k*hw:(k+1)*hw], blk[k*hw:(k+1)*hw], mu, r*wk, bk, relu)
			}
		}
	}
	return func() {
		s.load()
		parallelFor(n*groups, 6*size, body)
		s.store()
	}
}

// GroupNormBackward implements kernels.Backend.
func (be *Backend) GroupNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, groups int) {
	be.groupNormBackward("GroupNormBackward", dx, dw, db, dy, x, nil, false, mean, rstd, w, groups)
}

// GroupNormReluBackward implements kernels.GroupNormReluer: the ReLU's
// mask, rebuilt from x, the statistics, w and b, applied to dy in the
// group norm's passes.
func (be *Backend) GroupNormReluBackward(dx, dw, db, dy, x, b, mean, rstd, w *T, groups int) {
	be.groupNormBackward("GroupNormReluBackward", dx, dw, db, dy, x, b, true, mean, rstd, w, groups)
}

func (be *Backend) groupNormBackward(name string, dx, dw, db, dy, x, b *T, relu bool, mean, rstd, w *T, groups int) {
	needCPU(name, dx, dw, db, dy, x, b, mean, rstd, w)
	_, _, _, err := kernels.CheckGroupNormBackward(name, dx, dw, db, dy, x, b, mean, rstd, w, groups)
	must(err)
	if wide(x, dy) {
		be.launch(groupNormBwdPrep[float64](dx, dw, db, dy, x, b, relu, mean, rstd, w, groups))
	} else {
		be.launch(groupNormBwdPrep[float32](dx, dw, db, dy, x, b, relu, mean, rstd, w, groups))
	}
}

func groupNormBwdPrep[F tensor.Float](dx, dw, db, dy, x, b *T, relu bool, mean, rstd, w *T, groups int) func() {
	var s stage
	n, c, hw := planes("GroupNormBackward", x)
	xs, gs, ms, rs, ws := in[F](&s, x), in[F](&s, dy), in[F](&s, mean), in[F](&s, rstd), in[F](&s, w)
	bs := in[F](&s, b)
	dxs, dws, dbs := out[F](&s, dx), out[F](&s, dw), out[F](&s, db)
	cg := c / groups
	size := cg * hw
	// Per (sample, channel) sums of dy and dy·x̂, combined over samples
	// in order for dw and db.
	pdy := make([]float64, n*c)
	pdyx := make([]float64, n*c)
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			mu, r := float64(ms[it]), float64(rs[it])
			c0 := (it % groups) * cg
			// The ReLU's mask of channel c0+k: the forward's scale a and
			// shift (groupNormPrep).
			mask := func(k int, a float64) reluMask {
				if !relu {
					return reluMask{}
				}
				m := reluMask{on: true, a: a}
				if bs != nil {
					m.b = float64(bs[c0+k])
				}
				return m
			}
			nn := it / groups
			xb, gb := xs[it*size:(it+1)*size], gs[it*size:(it+1)*size]
			var sa, sb float64
			for k := 0; k < cg; k++ {
				wk := 1.0
				if ws != nil {
					wk = float64(ws[c0+k])
				}
				// Σ dy and Σ dy·x̂ over the channel's plane (x̂ = (x − mu)·r).
				a, bb := rowGradSums(gb[k*hw:(k+1)*hw], xb[k*hw:(k+1)*hw], mask(k, r*wk), mu)
				bb *= r
				pdy[nn*c+c0+k] = a
				pdyx[nn*c+c0+k] = bb
				sa += a * wk
				sb += bb * wk
			}
			if dxs == nil {
				continue
			}
			sa /= float64(size)
			sb /= float64(size)
			db := dxs[it*size : (it+1)*size]
			for k := 0; k < cg; k++ {
				wk := 1.0
				if ws != nil {
					wk = float64(ws[c0+k])
				}
				// r·(dy·wk − sa − x̂·sb)
				rowBnDx(db[k*hw:(k+1)*hw], gb[k*hw:(k+1)*hw], xb[k*hw:(k+1)*hw], mask(k, r*wk), mu, r*wk, -r*r*sb, -r*sa)
			}
		}
	}
	return func() {
		s.load()
		parallelFor(n*groups, 10*size, body)
		for ch := 0; ch < c; ch++ {
			var a, bb float64
			for i := 0; i < n; i++ {
				a += pdy[i*c+ch]
				bb += pdyx[i*c+ch]
			}
			if dbs != nil {
				dbs[ch] = F(a)
			}
			if dws != nil {
				dws[ch] = F(bb)
			}
		}
		s.store()
	}
}

// BatchNorm implements kernels.Backend.
func (be *Backend) BatchNorm(y, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64) {
	be.batchNorm("BatchNorm", y, saveMean, saveRstd, x, w, b, runMean, runVar, training, momentum, eps, false)
}

// BatchNormRelu implements kernels.BatchNormReluer: BatchNorm with the
// ReLU applied in the normalising pass.
func (be *Backend) BatchNormRelu(y, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64) {
	be.batchNorm("BatchNormRelu", y, saveMean, saveRstd, x, w, b, runMean, runVar, training, momentum, eps, true)
}

func (be *Backend) batchNorm(name string, y, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64, relu bool) {
	needCPU(name, y, saveMean, saveRstd, x, w, b, runMean, runVar)
	_, _, _, err := kernels.CheckBatchNorm(name, y, saveMean, saveRstd, x, w, b, runMean, runVar, training)
	must(err)
	if wide(x, y) {
		be.launch(batchNormPrep[float64](y, saveMean, saveRstd, x, w, b, runMean, runVar, training, momentum, eps, relu))
	} else {
		be.launch(batchNormPrep[float32](y, saveMean, saveRstd, x, w, b, runMean, runVar, training, momentum, eps, relu))
	}
}

// checkBNPool checks the 2×2/2 pool of a fused batch norm over x
// (kernels.CheckBatchNormPool) and returns x's shape.
func checkBNPool(name string, x *T, what string, pooled, argmax *T) []int {
	must(kernels.CheckBatchNormPool(name, x, what, pooled, argmax))
	return x.Shape()
}

// BatchNormReluMaxPool2x2 implements kernels.BatchNormReluPooler:
// BatchNormRelu followed by a 2×2, stride-2 max pool of its output, the
// normalised planes pooled from a worker's scratch so that the full-size
// output is neither written nor read back. pooled ([N, C, H/2, W/2]) and
// argmax (int32, the flat index in the plane) are what MaxPool2d would
// give for BatchNormRelu's y; the statistics and running statistics are
// BatchNormRelu's. Other dtypes, and builds without the pool kernel, run
// the two ops through a temporary y.
func (be *Backend) BatchNormReluMaxPool2x2(pooled, argmax, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64) {
	const name = "BatchNormReluMaxPool2x2"
	needCPU(name, pooled, argmax, saveMean, saveRstd, x, w, b, runMean, runVar)
	xs := checkBNPool(name, x, "pooled", pooled, argmax)
	if x.DType() != tensor.F32 || pooled.DType() != tensor.F32 || !poolAsm || !x.IsContiguous() ||
		!pooled.IsContiguous() || !argmax.IsContiguous() || xs[2] < 2 || xs[3] < 2 {
		y := tensor.Empty(x.DType(), xs...)
		be.batchNorm(name, y, saveMean, saveRstd, x, w, b, runMean, runVar, training, momentum, eps, true)
		be.MaxPool2d(pooled, argmax, y, kernels.Pool2dParams{KernelH: 2, KernelW: 2})
		return
	}
	_, _, _, err := kernels.CheckBatchNorm(name, nil, saveMean, saveRstd, x, w, b, runMean, runVar, training)
	must(err)
	pool := &bnPool{pooled: pooled.F32(), idx: argmax.I32(), w: xs[3], ho: xs[2] / 2, wo: xs[3] / 2}
	be.launch(batchNormPoolPrep[float32](nil, saveMean, saveRstd, x, w, b, runMean, runVar, training, momentum, eps, true, pool))
}

// BatchNormReluMaxPool2x2Backward implements kernels.BatchNormReluPooler:
// the gradient of BatchNormReluMaxPool2x2 from the pool's output gradient
// g and indices argmax, each plane's dy spread into a worker's scratch
// as MaxPool2dBackward would write it, so that no full-size dy is written
// or read. Other dtypes, and builds without the pool kernels, run
// MaxPool2dBackward into a temporary and BatchNormReluBackward.
func (be *Backend) BatchNormReluMaxPool2x2Backward(dx, dw, db, g, argmax, x, b, saveMean, saveRstd, w *T, training bool) {
	const name = "BatchNormReluMaxPool2x2Backward"
	needCPU(name, dx, dw, db, g, argmax, x, b, saveMean, saveRstd, w)
	xs := checkBNPool(name, x, "g", g, argmax)
	if x.DType() != tensor.F32 || g.DType() != tensor.F32 || !poolAsm || !g.IsContiguous() || !argmax.IsContiguous() || xs[2] < 2 || xs[3] < 2 {
		dy := tensor.Empty(x.DType(), xs...)
		be.MaxPool2dBackward(dy, g, argmax, kernels.Pool2dParams{KernelH: 2, KernelW: 2})
		be.BatchNormReluBackward(dx, dw, db, dy, x, b, saveMean, saveRstd, w, training)
		return
	}
	_, _, _, err := kernels.CheckBatchNormBackward(name, dx, dw, db, nil, x, b, saveMean, saveRstd, w)
	must(err)
	pool := &bnPoolGrad{g: g.F32(), idx: argmax.I32(), h: xs[2], w: xs[3], ho: xs[2] / 2, wo: xs[3] / 2}
	be.launch(batchNormPoolBwdPrep[float32](dx, dw, db, nil, x, b, true, saveMean, saveRstd, w, training, pool))
}

// The per-plane sums of the normalisations run four accumulators side by
// side (element j into accumulator j mod 4, combined as (a0+a1)+(a2+a3)):
// one float64 add chain is bound by the add latency, four are not. The
// order is fixed, so results stay deterministic.

// sum4 returns Σ v: four float64 accumulators, element j into j mod 4
// (the last len mod 4 into the first), combined as (a0+a1)+(a2+a3). For
// float32 the accumulators are one vector of sum4AVX2 where it runs,
// with the same sums.
func sum4[F tensor.Float](xs []F) float64 {
	var a0, a1, a2, a3 float64
	j := 0
	if x32 := asF32(xs); x32 != nil && vdotAsm && len(xs) >= 8 {
		var a [4]float64
		j = len(xs) &^ 3
		sum4AVX2(&x32[0], j, &a)
		a0, a1, a2, a3 = a[0], a[1], a[2], a[3]
	}
	for ; j+4 <= len(xs); j += 4 {
		a0 += float64(xs[j])
		a1 += float64(xs[j+1])
		a2 += float64(xs[j+2])
		a3 += float64(xs[j+3])
	}
	for ; j < len(xs); j++ {
		a0 += float64(xs[j])
	}
	return (a0 + a1) + (a2 + a3)
}

// sqDev4 returns Σ (v − mu)².
func sqDev4[F tensor.Float](xs []F, mu float64) float64 {
	var a0, a1, a2, a3 float64
	j := 0
	for ; j+4 <= len(xs); j += 4 {
		d0, d1, d2, d3 := float64(xs[j])-mu, float64(xs[j+1])-mu, float64(xs[j+2])-mu, float64(xs[j+3])-mu
		a0 += d0 * d0
		a1 += d1 * d1
		a2 += d2 * d2
		a3 += d3 * d3
	}
	for ; j < len(xs); j++ {
		d := float64(xs[j]) - mu
		a0 += d * d
	}
	return (a0 + a1) + (a2 + a3)
}

// gradSums4 returns Σ g and Σ g·(x − mu)·r over a plane.
func gradSums4[F tensor.Float](gs, xs []F, mu, r float64) (sg, sgh float64) {
	xs = xs[:len(gs)]
	var a0, a1, a2, a3, b0, b1, b2, b3 float64
	j := 0
	for ; j+4 <= len(gs); j += 4 {
		g0, g1, g2, g3 := float64(gs[j]), float64(gs[j+1]), float64(gs[j+2]), float64(gs[j+3])
		a0 += g0
		a1 += g1
		a2 += g2
		a3 += g3
		b0 += g0 * (float64(xs[j]) - mu) * r
		b1 += g1 * (float64(xs[j+1]) - mu) * r
		b2 += g2 * (float64(xs[j+2]) - mu) * r
		b3 += g3 * (float64(xs[j+3]) - mu) * r
	}
	for ; j < len(gs); j++ {
		g := float64(gs[j])
		a0 += g
		b0 += g * (float64(xs[j]) - mu) * r
	}
	return (a0 + a1) + (a2 + a3), (b0 + b1) + (b2 + b3)
}

// bnPool is batchNormPrep's 2×2, stride-2 max pool of its output: the
// normalised plane goes to a worker's scratch and only its pool is
// written (pooled and its flat in-plane argmax, planes of ho×wo).
type bnPool struct {
	pooled []float32
	idx    []int32
	w      int // the input plane's width
	ho, wo int
}

func batchNormPrep[F tensor.Float](y, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64, relu bool) func() {
	return batchNormPoolPrep[F](y, saveMean, saveRstd, x, w, b, runMean, runVar, training, momentum, eps, relu, nil)
}

// batchNormPoolPrep is batchNormPrep, with pool (float32 only, y nil)
// pooling each normalised plane instead of writing it.
func batchNormPoolPrep[F tensor.Float](y, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64, relu bool, pool *bnPool) func() {
	var s stage
	n, c, hw := planes("BatchNorm", x)
	xs, ws, bs := in[F](&s, x), in[F](&s, w), in[F](&s, b)
	ys := out[F](&s, y)
	sm, sr := out[F](&s, saveMean), out[F](&s, saveRstd)
	rm, rv := inout[F](&s, runMean), inout[F](&s, runVar)
	// Per plane (sample, channel) its mean and the sum of squared
	// deviations from it, in one pass over the input: the plane is still
	// in cache for its second loop. The channel's variance then combines
	// the planes' (Chan et al.): M2 = Σ M2_i + hw·Σ (m_i − mean)².
	pmean := make([]float64, n*c)
	pm2 := make([]float64, n*c)
	mean := make([]float64, c)
	rstd := make([]float64, c)
	cnt := float64(n * hw)
	statBody := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			row := xs[it*hw : (it+1)*hw]
			m := rowSum(row) / float64(hw)
			pmean[it], pm2[it] = m, rowSqDev(row, m)
		}
	}
	// With pool, each worker normalises into a plane of its own, held by
	// the launch (a replay takes and returns them without allocating).
	var planeSet scratchSet[[]F]
	if pool != nil {
		planeSet = newScratchSet(n*c, func() []F { return make([]F, hw) })
	}
	normBody := func(lo, hi int) {
		var plane []F
		if pool != nil {
			plane = <-planeSet
		}
		for it := lo; it < hi; it++ {
			ch := it % c
			// The mean and the scale from the saved (rounded) mean and
			// rstd, as the backward rebuilds the ReLU's mask from them.
			mu, r := float64(F(mean[ch])), float64(F(rstd[ch]))
			wk, bk := 1.0, 0.0
			if ws != nil {
				wk = float64(ws[ch])
			}
			if bs != nil {
				bk = float64(bs[ch])
			}
			if pool == nil {
				rowAffineAct(ys[it*hw:(it+1)*hw], xs[it*hw:(it+1)*hw], mu, r*wk, bk, relu)
				continue
			}
			rowAffineAct(plane[:hw], xs[it*hw:(it+1)*hw], mu, r*wk, bk, relu)
			o := it * pool.ho * pool.wo
			maxPool2x2Rows(pool.pooled[o:o+pool.ho*pool.wo], pool.idx[o:o+pool.ho*pool.wo], any(plane).([]float32), pool.ho, pool.wo, 0, pool.w)
		}
		if pool != nil {
			planeSet <- plane
		}
	}
	return func() {
		s.load()
		if training {
			parallelFor(n*c, 3*hw, statBody)
			for ch := range rstd {
				var sm, m2 float64
				for i := 0; i < n; i++ {
					sm += pmean[i*c+ch]
				}
				mu := sm / float64(n)
				for i := 0; i < n; i++ {
					d := pmean[i*c+ch] - mu
					m2 += pm2[i*c+ch] + float64(hw)*d*d
				}
				mean[ch] = mu
				v := m2 / cnt
				rstd[ch] = 1 / math.Sqrt(v+eps)
				if rm != nil {
					rm[ch] = F((1-momentum)*float64(rm[ch]) + momentum*mean[ch])
				}
				if rv != nil {
					unb := v
					if cnt > 1 {
						unb = v * cnt / (cnt - 1)
					}
					rv[ch] = F((1-momentum)*float64(rv[ch]) + momentum*unb)
				}
			}
		} else {
			for ch := range mean {
				mean[ch] = float64(rm[ch])
				rstd[ch] = 1 / math.Sqrt(float64(rv[ch])+eps)
			}
		}
		for ch := range mean {
			if sm != nil {
				sm[ch] = F(mean[ch])
			}
			if sr != nil {
				sr[ch] = F(rstd[ch])
			}
		}
		parallelFor(n*c, 4*hw, normBody)
		s.store()
	}
}

// BatchNormBackward implements kernels.Backend.
func (be *Backend) BatchNormBackward(dx, dw, db, dy, x, saveMean, saveRstd, w *T, training bool) {
	be.batchNormBackward("BatchNormBackward", dx, dw, db, dy, x, nil, false, saveMean, saveRstd, w, training)
}

// BatchNormReluBackward implements kernels.BatchNormReluer: the gradient
// of BatchNormRelu, dy counted only where its output was > 0, which is
// recomputed from x, the saved statistics, w and b exactly as the forward
// computed the output (the output itself is not read).
func (be *Backend) BatchNormReluBackward(dx, dw, db, dy, x, b, saveMean, saveRstd, w *T, training bool) {
	be.batchNormBackward("BatchNormReluBackward", dx, dw, db, dy, x, b, true, saveMean, saveRstd, w, training)
}

func (be *Backend) batchNormBackward(name string, dx, dw, db, dy, x, b *T, relu bool, saveMean, saveRstd, w *T, training bool) {
	needCPU(name, dx, dw, db, dy, x, b, saveMean, saveRstd, w)
	_, _, _, err := kernels.CheckBatchNormBackward(name, dx, dw, db, dy, x, b, saveMean, saveRstd, w)
	must(err)
	if wide(x, dy) {
		be.launch(batchNormBwdPrep[float64](dx, dw, db, dy, x, b, relu, saveMean, saveRstd, w, training))
	} else {
		be.launch(batchNormBwdPrep[float32](dx, dw, db, dy, x, b, relu, saveMean, saveRstd, w, training))
	}
}

// batchNormBwdPrep: with relu (BatchNormReluBackward) dy counts only where
// the forward's output was > 0, that is where (x − mean)·rstd·w + b > 0
// rounded as the forward rounded it (reluMask).
func batchNormBwdPrep[F tensor.Float](dx, dw, db, dy, x, b *T, relu bool, saveMean, saveRstd, w *T, training bool) func() {
	return batchNormPoolBwdPrep[F](dx, dw, db, dy, x, b, relu, saveMean, saveRstd, w, training, nil)
}

// bnPoolGrad is batchNormPoolBwdPrep's source of dy: the gradient of a
// 2×2, stride-2 max pool of the batch norm's output (g, planes of ho×wo,
// with the pool's flat in-plane indices idx), spread into a worker's
// plane scratch as the pool's backward would write it.
type bnPoolGrad struct {
	g      []float32
	idx    []int32
	h, w   int // the input plane
	ho, wo int
}

// plane writes plane it's dy into d (h·w floats).
func (p *bnPoolGrad) plane(it int, d []float32) {
	o := it * p.ho * p.wo
	poolGradPlane(d, p.g[o:o+p.ho*p.wo], p.idx[o:o+p.ho*p.wo], p.h, p.w, p.ho, p.wo)
}

// batchNormPoolBwdPrep is batchNormBwdPrep, with pool (float32 only, dy
// nil) reading dy from a max pool's gradient instead of a full-size dy.
func batchNormPoolBwdPrep[F tensor.Float](dx, dw, db, dy, x, b *T, relu bool, saveMean, saveRstd, w *T, training bool, pool *bnPoolGrad) func() {
	var s stage
	n, c, hw := planes("BatchNormBackward", x)
	xs, gs, ms, rs, ws := in[F](&s, x), in[F](&s, dy), in[F](&s, saveMean), in[F](&s, saveRstd), in[F](&s, w)
	bs := in[F](&s, b)
	mask := func(ch int) reluMask {
		if !relu {
			return reluMask{}
		}
		m := reluMask{on: true, a: float64(rs[ch])}
		if ws != nil {
			m.a *= float64(ws[ch])
		}
		if bs != nil {
			m.b = float64(bs[ch])
		}
		return m
	}
	dxs, dws, dbs := out[F](&s, dx), out[F](&s, dw), out[F](&s, db)
	pdy := make([]float64, n*c)
	pdyx := make([]float64, n*c)
	sdy := make([]float64, c)
	sdyx := make([]float64, c)
	cnt := float64(n * hw)
	// dyRow is plane it's dy: a slice of gs, or with pool the plane
	// scratch d after the pool's gradient is spread into it.
	dyRow := func(it int, d []F) []F {
		if pool == nil {
			return gs[it*hw : (it+1)*hw]
		}
		pool.plane(it, any(d).([]float32))
		return d
	}
	// With pool, each worker spreads dy into a plane of its own, held by
	// the launch (a replay takes and returns them without allocating).
	var planeSet scratchSet[[]F]
	if pool != nil {
		planeSet = newScratchSet(n*c, func() []F { return make([]F, hw) })
	}
	scratch := func() []F {
		if pool == nil {
			return nil
		}
		return <-planeSet
	}
	done := func(d []F) {
		if pool != nil {
			planeSet <- d
		}
	}
	sums := func(lo, hi int) {
		d := scratch()
		for it := lo; it < hi; it++ {
			ch := it % c
			sg, sgd := rowGradSums(dyRow(it, d), xs[it*hw:(it+1)*hw], mask(ch), float64(ms[ch]))
			pdy[it], pdyx[it] = sg, sgd*float64(rs[ch])
		}
		done(d)
	}
	dxBody := func(lo, hi int) {
		d := scratch()
		for it := lo; it < hi; it++ {
			ch := it % c
			mu, r := float64(ms[ch]), float64(rs[ch])
			wk := 1.0
			if ws != nil {
				wk = float64(ws[ch])
			}
			xr, gr, dr := xs[it*hw:(it+1)*hw], dyRow(it, d), dxs[it*hw:(it+1)*hw]
			if !training {
				// The statistics are constants: dx = dy·w·r.
				rowBnDx(dr, gr, xr, mask(ch), mu, wk*r, 0, 0)
				continue
			}
			// wk·r·(g − a − (x − mu)·r·b) with a, b the means of the
			// two sums.
			a, b := sdy[ch]/cnt, sdyx[ch]/cnt
			rowBnDx(dr, gr, xr, mask(ch), mu, wk*r, -wk*r*r*b, -wk*r*a)
		}
		done(d)
	}
	return func() {
		s.load()
		parallelFor(n*c, 4*hw, sums)
		for ch := 0; ch < c; ch++ {
			var a, b float64
			for i := 0; i < n; i++ {
				a += pdy[i*c+ch]
				b += pdyx[i*c+ch]
			}
			sdy[ch], sdyx[ch] = a, b
			if dbs != nil {
				dbs[ch] = F(a)
			}
			if dws != nil {
				dws[ch] = F(b)
			}
		}
		if dxs != nil {
			parallelFor(n*c, 4*hw, dxBody)
		}
		s.store()
	}
}

// BatchNormEvalAffine implements kernels.BatchNormEvalAffiner for F32
// and F64, rounding every step to the dtype as the unfused ops do (each
// product and sum converted explicitly, so the compiler fuses nothing):
// v = runVar + ε, r = 1/√v (in float64, rounded), scale = w·r,
// shift = b + (−runMean·scale).
func (be *Backend) BatchNormEvalAffine(scale, shift, w, b, runMean, runVar *T, eps float64) {
	const name = "BatchNormEvalAffine"
	needCPU(name, scale, shift, w, b, runMean, runVar)
	_, err := kernels.CheckBatchNormEvalAffine(name, scale, shift, w, b, runMean, runVar)
	must(err)
	for _, t := range []*T{scale, shift, w, b, runMean, runVar} {
		if t != nil {
			needContig(name, "operand", t)
		}
	}
	switch runVar.DType() {
	case tensor.F64:
		be.launch(bnEvalAffinePrep[float64](scale, shift, w, b, runMean, runVar, eps))
	case tensor.F32:
		be.launch(bnEvalAffinePrep[float32](scale, shift, w, b, runMean, runVar, eps))
	default:
		fail(name, "dtype %v (F32 and F64 run here)", runVar.DType())
	}
}

func bnEvalAffinePrep[F tensor.Float](scale, shift, w, b, runMean, runVar *T, eps float64) func() {
	var s stage
	sc, sh := out[F](&s, scale), out[F](&s, shift)
	wv, bv, mv, vv := in[F](&s, w), in[F](&s, b), in[F](&s, runMean), in[F](&s, runVar)
	e := F(eps)
	return func() {
		s.load()
		for i := range vv {
			v := F(vv[i] + e)
			r := F(1 / math.Sqrt(float64(v)))
			if wv != nil {
				r = F(wv[i] * r)
			}
			t := -F(mv[i] * r)
			if bv != nil {
				t = F(bv[i] + t)
			}
			sc[i], sh[i] = r, t
		}
		s.store()
	}
}
