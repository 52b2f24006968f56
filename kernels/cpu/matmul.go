package cpu

import (
	"runtime"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// MatMul implements kernels.Backend. Work is split over (batch, block of
// gemmMC output rows); each block runs the serial GEMM with packing space
// taken from a set prepared up front.
func (be *Backend) MatMul(dst, a, b *T, transA, transB bool) {
	be.matmul("MatMul", dst, a, b, nil, noAct, transA, transB, false)
}

// MatMulAdd implements kernels.GradAccumulator: MatMul adding into dst.
// Large products accumulate in the GEMM itself (C += A·B); tiny float32
// ones take dst as the tiny kernel's epilogue (each product, summed,
// then added), other tiny ones are computed into scratch, then added.
func (be *Backend) MatMulAdd(dst, a, b *T, transA, transB bool) {
	const name = "MatMulAdd"
	if len(dst.Shape()) != 2 {
		fail(name, "dst has shape %v, want 2-D", dst.Shape())
	}
	needCPU(name, dst)
	if !(dst.DType() == tensor.F32 || dst.DType() == tensor.F64) || dst.DType() != a.DType() || dst.DType() != b.DType() {
		fail(name, "dtypes dst %v, a %v, b %v: want one of f32 and f64", dst.DType(), a.DType(), b.DType())
	}
	needContig(name, "dst", dst)
	be.matmul(name, dst, a, b, nil, noAct, transA, transB, true)
}

// MatMulBias implements kernels.Backend: the bias is added to each block
// of output rows right after its GEMM, while the block is in cache.
func (be *Backend) MatMulBias(dst, a, b, bias *T, transA, transB bool) {
	be.matmul("MatMulBias", dst, a, b, bias, noAct, transA, transB, false)
}

// MatMulBiasAct implements kernels.Backend: the activation runs on each
// block of output rows right after its bias (on the whole product for one
// large product split by panels).
func (be *Backend) MatMulBiasAct(dst, a, b, bias *T, act kernels.UnaryOp, transA, transB bool) {
	must(kernels.CheckActivation("MatMulBiasAct", act))
	be.matmul("MatMulBiasAct", dst, a, b, bias, act, transA, transB, false)
}

// noAct is the epilogue activation of a plain product: none.
const noAct = kernels.UnaryOp(255)

// SetMatmulPrecision implements kernels.Backend; the CPU always computes
// F32 matmuls in fp32.
func (b *Backend) SetMatmulPrecision(kernels.Precision) {}

// matmul validates and runs a product; acc (MatMulAdd) adds it to dst,
// which then has no bias or activation.
func (be *Backend) matmul(name string, dst, a, b, bias *T, act kernels.UnaryOp, transA, transB, acc bool) {
	needCPU(name, dst, a, b, bias)
	d, err := kernels.CheckMatMul(name, dst, a, b, bias, transA, transB)
	must(err)
	m, n, k := d.M, d.N, d.K
	// The kernels take the batch as a count and whether each operand has
	// its own (a 2-D one is shared); an empty batch runs as one.
	batch, batchA, batchB := d.Batch, d.BatchedA && d.Batch > 0, d.BatchedB && d.Batch > 0
	if be.eager() && m*n*k < gemmSmall {
		if wide(dst, a, b) {
			if matmulEager[float64](dst, a, b, bias, act, max(batch, 1), batchA, batchB, m, n, k, transA, transB, acc) {
				return
			}
		} else if matmulEager[float32](dst, a, b, bias, act, max(batch, 1), batchA, batchB, m, n, k, transA, transB, acc) {
			return
		}
	}
	if wide(dst, a, b) {
		be.launchScratch(matmulPrep[float64](dst, a, b, bias, act, max(batch, 1), batchA, batchB, m, n, k, transA, transB, acc))
	} else {
		be.launchScratch(matmulPrep[float32](dst, a, b, bias, act, max(batch, 1), batchA, batchB, m, n, k, transA, transB, acc))
	}
}

// scratchSet is a fixed set of per-worker scratch values handed out
// through a channel, which neither allocates nor depends on worker ids.
type scratchSet[S any] chan S

// scratchLaunch returns the launch of a kernel with pooled scratch (see
// Backend.launchScratch): run stages the inputs in, does the work and
// stages the outputs out; release returns the scratch values to the
// pools.
func scratchLaunch[S any](s *stage, slots scratchSet[S], free func(S), work func()) (run, release func()) {
	return func() {
			s.load()
			work()
			s.store()
		}, func() {
			slots.release(free)
		}
}

// release hands every value to free; call it only when no launch is
// using the set (all values are back in the channel).
func (c scratchSet[S]) release(free func(S)) {
	for len(c) > 0 {
		free(<-c)
	}
}

func newScratchSet[S any](n int, mk func() S) scratchSet[S] {
	n = max(1, min(n, runtime.NumCPU()+1))
	c := make(chan S, n)
	for i := 0; i < n; i++ {
		c <- mk()
	}
	return c
}

func matmulPrep[F tensor.Float](dst, a, b, bias *T, act kernels.UnaryOp, batch int, bcA, bcB bool, m, n, k int, transA, transB, acc bool) (run, release func()) {
	var s stage
	av := in[F](&s, a)
	bv := in[F](&s, b)
	biasv := in[F](&s, bias)
	cv := out[F](&s, dst)
	lda, ldb := matmulLD(m, n, k, transA, transB)
	if m*n*k < gemmSmall {
		// Tiny products (a small model's layers) run gemmDirect's loops
		// serially: no packing scratch, no scratch hand-off, no split.
		run = func() {
			s.load()
			matmulSmall(av, bv, biasv, cv, act, batch, bcA, bcB, m, n, k, transA, transB, acc)
			s.store()
		}
		return run, func() {}
	}
	if batch == 1 && m*n*k >= fewRowsSplit && n > fewRowsCols && directRows(m, transA, transB, av) {
		// A few rows against a large B (a policy network's batch of one
		// graph, bound by reading B): the columns of C are dealt out in
		// blocks of fewRowsCols, each worker reading its part of B. Each
		// block's columns take the kernels they take in one pass, so the
		// result does not depend on the split.
		body := func(lo, hi int) {
			fewRowsColumns(av, bv, biasv, cv, act, m, n, k, transA, transB, acc, lo*fewRowsCols, min(hi*fewRowsCols, n))
		}
		cols := (n + fewRowsCols - 1) / fewRowsCols
		return func() {
			s.load()
			parallelFor(cols, 2*m*k*fewRowsCols, body)
			s.store()
		}, func() {}
	}
	blocks := (m + gemmMC - 1) / gemmMC
	if batch == 1 && (blocks > 1 || m*n*k >= sharedSplit && !directRows(m, transA, transB, av)) {
		// One large product: B packed once per block, rows shared out
		// (also within one block of rows, when the product is large
		// enough to split: a policy's 64 graphs against a 256×256
		// weight would otherwise run on one worker).
		g := newGemmShared(m, n, k, av, lda, transA, bv, ldb, transB, cv, n)
		g.acc = acc
		return func() {
			s.load()
			g.run()
			epilogue(cv, n, biasv, act, m, n)
			s.store()
		}, g.free
	}
	items := batch * blocks
	slots := newScratchSet(items, func() gemmScratch[F] { return newGemmScratch[F](min(m, gemmMC), n, k) })
	body := func(lo, hi int) {
		sc := <-slots
		for it := lo; it < hi; it++ {
			bi, blk := it/blocks, it%blocks
			i0 := blk * gemmMC
			rows := min(gemmMC, m-i0)
			ao, bo := batchOffsets(bi, m, n, k, bcA, bcB)
			if transA {
				ao += i0
			} else {
				ao += i0 * lda
			}
			co := bi*m*n + i0*n
			gemm(rows, n, k, av[ao:], lda, transA, bv[bo:], ldb, transB, cv[co:], n, acc, sc)
			epilogue(cv[co:], n, biasv, act, rows, n)
		}
		slots <- sc
	}
	cost := 2 * gemmMC * n * k
	return scratchLaunch(&s, slots, gemmScratch[F].free, func() { parallelFor(items, cost, body) })
}

// sharedSplit is the size m·n·k from which a product of one block of
// rows (m ≤ gemmMC, not so few that it skips packing: directRows) is
// shared among the workers (gemmShared) rather than run by one: about 2
// MFLOP, some 15 µs of one worker's arithmetic.
const sharedSplit = 1 << 20

// fewRowsCols is the width of the column blocks a few-row product is
// split into (a multiple of 4: gemmDirectF32 takes columns four at a
// time), and fewRowsSplit the size m·n·k from which it is split.
const (
	fewRowsCols  = 64
	fewRowsSplit = 1 << 16
)

// fewRowsColumns computes columns j0..j1−1 of the m×n product op(A)·op(B)
// (m < gemmSmallRows, float32: gemmDirect's row loops) into C, adding
// to it with acc, else storing it and applying the bias and activation.
func fewRowsColumns[F tensor.Float](av, bv, biasv, cv []F, act kernels.UnaryOp, m, n, k int, transA, transB, acc bool, j0, j1 int) {
	lda, ldb := matmulLD(m, n, k, transA, transB)
	if !acc {
		for i := 0; i < m; i++ {
			clear(cv[i*n+j0 : i*n+j1])
		}
	}
	bo := j0 // column j0 of B: B[p, j0], or row j0 of the stored Bᵀ
	if transB {
		bo = j0 * ldb
	}
	gemmDirect(m, j1-j0, k, av, lda, transA, bv[bo:], ldb, transB, cv[j0:], n)
	if !acc {
		var bias []F
		if biasv != nil {
			bias = biasv[j0:j1]
		}
		epilogue(cv[j0:], n, bias, act, m, j1-j0)
	}
}

// batchOffsets returns where product bi of a batch starts in A (m×k) and
// B (k×n): 0 for an operand shared by every product (bcA, bcB false).
func batchOffsets(bi, m, n, k int, bcA, bcB bool) (ao, bo int) {
	if bcA {
		ao = bi * m * k
	}
	if bcB {
		bo = bi * k * n
	}
	return ao, bo
}

// matmulLD gives the leading dimensions of row-major op(A) (m×k) and
// op(B) (k×n) stored whole.
func matmulLD(m, n, k int, transA, transB bool) (lda, ldb int) {
	lda, ldb = k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	return lda, ldb
}

// epilogue adds bias (n values; nil adds nothing) to each of the rows
// (n wide, ldc apart) of c, then applies act (noAct: none): over the
// whole block at once when the rows are consecutive (ldc = n).
func epilogue[F tensor.Float](c []F, ldc int, bias []F, act kernels.UnaryOp, rows, n int) {
	if bias != nil {
		for i := 0; i < rows; i++ {
			row := c[i*ldc : i*ldc+n]
			for j, v := range bias[:n] {
				row[j] += v
			}
		}
	}
	switch {
	case act == noAct:
	case ldc == n:
		unaryKernel(act, c[:rows*n], c[:rows*n])
	default:
		for i := 0; i < rows; i++ {
			row := c[i*ldc : i*ldc+n]
			unaryKernel(act, row, row)
		}
	}
}

// matmulSmall computes a batch of tiny products (m·n·k < gemmSmall) with
// gemmDirect's loops on the calling goroutine, then runs the epilogue;
// with acc it adds the products (computed apart, with no epilogue) to cv.
func matmulSmall[F tensor.Float](av, bv, biasv, cv []F, act kernels.UnaryOp, batch int, bcA, bcB bool, m, n, k int, transA, transB, acc bool) {
	if acc {
		if a32 := asF32(av); a32 != nil && matmulTinyF32(a32, asF32(bv), nil, asF32(cv), batch, bcA, bcB, m, n, k, transA, transB, true) {
			return
		}
		tmp := getBuf[F](batch * m * n)
		defer putBuf(tmp)
		matmulSmall(av, bv, nil, tmp, noAct, batch, bcA, bcB, m, n, k, transA, transB, false)
		for i, v := range tmp {
			cv[i] += v
		}
		return
	}
	if a32 := asF32(av); a32 != nil && tinyAsm {
		if matmulTinyF32(a32, asF32(bv), asF32(biasv), asF32(cv), batch, bcA, bcB, m, n, k, transA, transB, false) {
			if act != noAct {
				unaryKernel(act, cv[:batch*m*n], cv[:batch*m*n])
			}
			return
		}
	}
	lda, ldb := matmulLD(m, n, k, transA, transB)
	clear(cv[:batch*m*n])
	for bi := 0; bi < batch; bi++ {
		ao, bo := batchOffsets(bi, m, n, k, bcA, bcB)
		gemmDirect(m, n, k, av[ao:], lda, transA, bv[bo:], ldb, transB, cv[bi*m*n:], n)
	}
	epilogue(cv, n, biasv, act, batch*m, n)
}

// matmulEager is MatMul's eager fast path (see eager.go) for tiny
// products whose operands are all contiguous in the compute dtype F: the
// same loops as the prepared launch, run at once. It reports false,
// doing nothing, for anything else.
func matmulEager[F tensor.Float](dst, a, b, bias *T, act kernels.UnaryOp, batch int, bcA, bcB bool, m, n, k int, transA, transB, acc bool) bool {
	if !direct[F](dst) || !direct[F](a) || !direct[F](b) || (bias != nil && !direct[F](bias)) {
		return false
	}
	var biasv []F
	if bias != nil {
		biasv = tensor.Data[F](bias)
	}
	matmulSmall(tensor.Data[F](a), tensor.Data[F](b), biasv, tensor.Data[F](dst), act, batch, bcA, bcB, m, n, k, transA, transB, acc)
	return true
}

// SumRowsAdd implements kernels.GradAccumulator: dst[j] += Σ_i x[i, j],
// each column summed in float64 from row 0 down and rounded once, as
// Reduce (Sum over axis 0) would, then added in dst's dtype, as Binary
// Add would.
func (be *Backend) SumRowsAdd(dst, x *T) {
	const name = "SumRowsAdd"
	needCPU(name, dst, x)
	xs := x.Shape()
	if len(xs) != 2 {
		fail(name, "x has shape %v, want [M, N]", xs)
	}
	needShape(name, "dst", dst, xs[1:])
	if !(dst.DType() == tensor.F32 || dst.DType() == tensor.F64) || dst.DType() != x.DType() {
		fail(name, "dtypes dst %v and x %v: want one of f32 and f64", dst.DType(), x.DType())
	}
	needContig(name, "dst", dst)
	needContig(name, "x", x)
	if dst.DType() == tensor.F64 {
		launchSumRowsAdd(be, dst.F64(), x.F64(), xs[0], xs[1])
	} else {
		launchSumRowsAdd(be, dst.F32(), x.F32(), xs[0], xs[1])
	}
}

// launchSumRowsAdd runs sumRowsAdd at once when eager (no closure), or
// records it.
func launchSumRowsAdd[F tensor.Float](be *Backend, d, x []F, m, n int) {
	if be.eager() {
		sumRowsAdd(d, x, m, n)
		return
	}
	be.launch(func() { sumRowsAdd(d, x, m, n) })
}

// sumRowsAdd adds the column sums of the m×n row-major x to d, columns
// in blocks of 64 float64 accumulators.
func sumRowsAdd[F tensor.Float](d, x []F, m, n int) {
	var acc [64]float64
	for j0 := 0; j0 < n; j0 += len(acc) {
		nb := min(len(acc), n-j0)
		a := acc[:nb]
		clear(a)
		for i := 0; i < m; i++ {
			row := x[i*n+j0 : i*n+j0+nb]
			for j, v := range row {
				a[j] += float64(v)
			}
		}
		for j, s := range a {
			d[j0+j] += F(s)
		}
	}
}

// LinearBackwardAdd implements kernels.LinearBackwardAdder: MatMul(dx,
// g, w, false, false), then LinearGradAdd; the results are those ops'
// bit for bit.
func (be *Backend) LinearBackwardAdd(dx, dw, db, g, x, w *T) {
	be.linearBackward("LinearBackwardAdd", false, dx, dw, db, g, x, w)
}

// LinearBackwardAccumulate implements kernels.LinearBackwardAdder:
// MatMulAdd(dx, g, w, false, false), then LinearGradAdd; the results are
// those ops' bit for bit.
func (be *Backend) LinearBackwardAccumulate(dx, dw, db, g, x, w *T) {
	be.linearBackward("LinearBackwardAccumulate", true, dx, dw, db, g, x, w)
}

// linearBackward is LinearBackwardAdd, adding into dx when acc is set.
func (be *Backend) linearBackward(name string, acc bool, dx, dw, db, g, x, w *T) {
	needCPU(name, dx, dw, db, g, x, w)
	if dx == nil || w == nil {
		fail(name, "dx and w are required")
	}
	if acc {
		be.MatMulAdd(dx, g, w, false, false)
	} else {
		be.MatMul(dx, g, w, false, false)
	}
	be.LinearGradAdd(dw, db, g, x)
}

// LinearGradAdd implements kernels.LinearGradAccumulator: MatMulAdd(dw,
// g, x, true, false), then SumRowsAdd(db, g) when db is not nil. The CPU
// has no launch to save; the results are those two ops' bit for bit.
func (be *Backend) LinearGradAdd(dw, db, g, x *T) {
	const name = "LinearGradAdd"
	needCPU(name, dw, db, g, x)
	if dw == nil || g == nil || x == nil {
		fail(name, "dw, g and x are required (db may be nil)")
	}
	if g.Rank() != 2 || x.Rank() != 2 || g.Dim(0) != x.Dim(0) {
		fail(name, "g %v and x %v: want [M, N] and [M, K]", g.Shape(), x.Shape())
	}
	be.MatMulAdd(dw, g, x, true, false)
	if db != nil {
		be.SumRowsAdd(db, g)
	}
}
