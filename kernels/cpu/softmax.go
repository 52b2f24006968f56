package cpu

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Softmax-family kernels work on x viewed as [outer, A, inner] along the
// axis; each (outer, inner) line is one independent item. Sums run in
// float64.

func (be *Backend) softmaxLike(name string, dst, x *T, axis int, log bool) {
	needCPU(name, dst, x)
	a := must1(kernels.CheckSoftmax(name, dst, x, axis))
	if wide(dst, x) {
		be.launch(softmaxPrep[float64](dst, x, a, log))
	} else {
		be.launch(softmaxPrep[float32](dst, x, a, log))
	}
}

// Softmax implements kernels.Backend.
func (be *Backend) Softmax(dst, x *T, axis int) { be.softmaxLike("Softmax", dst, x, axis, false) }

// LogSoftmax implements kernels.Backend.
func (be *Backend) LogSoftmax(dst, x *T, axis int) {
	be.softmaxLike("LogSoftmax", dst, x, axis, true)
}

func softmaxPrep[F tensor.Float](dst, x *T, axis int, log bool) func() {
	var s stage
	xs := in[F](&s, x)
	ds := out[F](&s, dst)
	outer, A, inner := kernels.Split3(x.Shape(), axis)
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			o, i := it/inner, it%inner
			base := o*A*inner + i
			m := math.Inf(-1)
			for k, j := 0, base; k < A; k, j = k+1, j+inner {
				if v := float64(xs[j]); v > m || v != v {
					m = v
				}
			}
			if math.IsInf(m, -1) {
				m = 0 // an all -inf line gives NaN like PyTorch via 0·inf below
			}
			var sum float64
			for k, j := 0, base; k < A; k, j = k+1, j+inner {
				sum += math.Exp(float64(xs[j]) - m)
			}
			if log {
				ls := m + math.Log(sum)
				for k, j := 0, base; k < A; k, j = k+1, j+inner {
					ds[j] = F(float64(xs[j]) - ls)
				}
			} else {
				r := 1 / sum
				for k, j := 0, base; k < A; k, j = k+1, j+inner {
					ds[j] = F(math.Exp(float64(xs[j])-m) * r)
				}
			}
		}
	}
	return func() {
		s.load()
		parallelFor(outer*inner, 20*A, body)
		s.store()
	}
}

func (be *Backend) softmaxBwd(name string, dx, y, dy *T, axis int, log bool) {
	needCPU(name, dx, y, dy)
	a := must1(kernels.CheckSoftmaxBackward(name, dx, y, dy, axis))
	if wide(dx, y, dy) {
		be.launch(softmaxBwdPrep[float64](dx, y, dy, a, log))
	} else {
		be.launch(softmaxBwdPrep[float32](dx, y, dy, a, log))
	}
}

// SoftmaxBackward implements kernels.Backend.
func (be *Backend) SoftmaxBackward(dx, y, dy *T, axis int) {
	be.softmaxBwd("SoftmaxBackward", dx, y, dy, axis, false)
}

// LogSoftmaxBackward implements kernels.Backend.
func (be *Backend) LogSoftmaxBackward(dx, y, dy *T, axis int) {
	be.softmaxBwd("LogSoftmaxBackward", dx, y, dy, axis, true)
}

func softmaxBwdPrep[F tensor.Float](dx, y, dy *T, axis int, log bool) func() {
	var s stage
	ys := in[F](&s, y)
	gs := in[F](&s, dy)
	ds := out[F](&s, dx)
	outer, A, inner := kernels.Split3(y.Shape(), axis)
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			o, i := it/inner, it%inner
			base := o*A*inner + i
			var sum float64
			if log {
				for k, j := 0, base; k < A; k, j = k+1, j+inner {
					sum += float64(gs[j])
				}
				for k, j := 0, base; k < A; k, j = k+1, j+inner {
					ds[j] = F(float64(gs[j]) - math.Exp(float64(ys[j]))*sum)
				}
			} else {
				for k, j := 0, base; k < A; k, j = k+1, j+inner {
					sum += float64(ys[j]) * float64(gs[j])
				}
				for k, j := 0, base; k < A; k, j = k+1, j+inner {
					ds[j] = F(float64(ys[j]) * (float64(gs[j]) - sum))
				}
			}
		}
	}
	return func() {
		s.load()
		parallelFor(outer*inner, 4*A, body)
		s.store()
	}
}

// checkCE validates the cross-entropy arguments (kernels.CheckCrossEntropy
// on host tensors) and returns N, C.
func checkCE(name string, loss, logits, target *T, p kernels.CrossEntropyParams) (int, int) {
	needCPU(name, loss, logits, target)
	n, c, err := kernels.CheckCrossEntropy(name, loss, logits, target, p)
	must(err)
	return n, c
}

// CrossEntropy implements kernels.Backend: per sample
// ℓ = (1-ε)·(lse - x_t) + ε·(lse - mean_c x_c), left out (0) when the
// target is ignored; the mean divides by the number of kept samples.
func (be *Backend) CrossEntropy(loss, logits, target *T, p kernels.CrossEntropyParams) {
	const name = "CrossEntropy"
	n, c := checkCE(name, loss, logits, target, p)
	if be.eager() && ceEager(loss, logits, target, p, n, c) {
		return
	}
	if wide(logits) {
		be.launch(cePrep[float64](loss, logits, target, p, n, c))
	} else {
		be.launch(cePrep[float32](loss, logits, target, p, n, c))
	}
}

// ceTarget reads target i and reports whether it is kept, panicking on
// an out-of-range class (the message allocates, but only on that path).
func ceTarget(t64 []int64, t32 []int32, i, c int, p kernels.CrossEntropyParams) (int, bool) {
	var t int64
	if t64 != nil {
		t = t64[i]
	} else {
		t = int64(t32[i])
	}
	if p.HasIgnore && t == p.IgnoreIndex {
		return 0, false
	}
	if t < 0 || t >= int64(c) {
		fail("CrossEntropy", "target %d of sample %d outside [0, %d)", t, i, c)
	}
	return int(t), true
}

func cePrep[F tensor.Float](loss, logits, target *T, p kernels.CrossEntropyParams, n, c int) func() {
	var s stage
	xs := in[F](&s, logits)
	t64, t32 := indexData("CrossEntropy", "target", target)
	per := make([]float64, n)
	kept := make([]bool, n)
	var body func(lo, hi int)
	if x32, ok := any(xs).([]float32); ok {
		body = func(lo, hi int) { ceRowsF32(x32, c, t64, t32, p, per, kept, lo, hi) }
	} else {
		body = func(lo, hi int) { ceRows(xs, c, t64, t32, p, per, kept, lo, hi) }
	}
	var setScalar func(float64)
	var lv []F
	if p.Reduction == kernels.ReduceNone {
		lv = out[F](&s, loss)
	} else {
		setScalar = scalarWriter("CrossEntropy", "loss", loss)
	}
	return func() {
		s.load()
		parallelFor(n, 8*c, body)
		if lv != nil {
			for i, v := range per {
				lv[i] = F(v)
			}
			s.store()
			return
		}
		setScalar(float64(F(ceReduce(per, kept, p))))
	}
}

// ceEager is CrossEntropy's eager fast path (see eager.go): contiguous
// F32 logits and loss, at most ceEagerRows rows, few enough that the
// launch would run inline. The per-row losses stay on the stack.
func ceEager(loss, logits, target *T, p kernels.CrossEntropyParams, n, c int) bool {
	const ceEagerRows = 64
	if logits.DType() != tensor.F32 || loss.DType() != tensor.F32 || !logits.IsContiguous() || !loss.IsContiguous() ||
		n > ceEagerRows || (n != 1 && n*8*c >= minWork) {
		return false
	}
	t64, t32 := indexData("CrossEntropy", "target", target)
	var perBuf [ceEagerRows]float64
	var keptBuf [ceEagerRows]bool
	per, kept := perBuf[:n], keptBuf[:n]
	ceRowsF32(logits.F32(), c, t64, t32, p, per, kept, 0, n)
	lv := loss.F32()
	if p.Reduction == kernels.ReduceNone {
		for i, v := range per {
			lv[i] = float32(v)
		}
		return true
	}
	lv[0] = float32(ceReduce(per, kept, p))
	return true
}

// ceLoss is row i's loss from its log-sum-exp and mean.
func ceLoss[F tensor.Float](xs []F, c, i, t int, eps, lse, mean float64) float64 {
	l := (1 - eps) * (lse - float64(xs[i*c+t]))
	if eps != 0 {
		l += eps * (lse - mean)
	}
	return l
}

// ceRows sets per[i] and kept[i] for rows lo..hi-1 of the c-column
// logits xs, with math.Exp in float64.
func ceRows[F tensor.Float](xs []F, c int, t64 []int64, t32 []int32, p kernels.CrossEntropyParams, per []float64, kept []bool, lo, hi int) {
	for i := lo; i < hi; i++ {
		t, ok := ceTarget(t64, t32, i, c, p)
		kept[i] = ok
		if !ok {
			per[i] = 0
			continue
		}
		lse, mean := lseMean(xs[i*c : (i+1)*c])
		per[i] = ceLoss(xs, c, i, t, p.LabelSmoothing, lse, mean)
	}
}

// ceRowsF32 is ceRows for float32 logits: the exponentials come from
// expF32, a block of rows at a time. For a reduced loss (p.Reduction not
// ReduceNone) only the sum of per over each block is the rows' loss sum;
// the single rows' values are not their losses.
func ceRowsF32(x32 []float32, c int, t64 []int64, t32 []int32, p kernels.CrossEntropyParams, per []float64, kept []bool, lo, hi int) {
	if tinyAsm && c <= 16 {
		// Short rows: the kernel's maxima and sums, no exponentials kept.
		var maxes [16]float32
		var ses [16]float64
		for b0 := lo; b0 < hi; b0 += len(maxes) {
			b1 := min(hi, b0+len(maxes))
			rowExps(x32, c, b0, b1, nil, maxes[:], ses[:])
			ceBlockLoss(x32, c, t64, t32, p, per, kept, b0, b1, maxes[:], ses[:])
		}
		return
	}
	var x expScratch
	if c > expRowBuf { // long rows: one at a time, in chunks
		eps := p.LabelSmoothing
		for i := lo; i < hi; i++ {
			t, ok := ceTarget(t64, t32, i, c, p)
			kept[i] = ok
			row := x32[i*c : (i+1)*c]
			switch m := float32(rowMax(row)); {
			case !ok:
				per[i] = 0
			case !finite32(m):
				lse, mean := lseMean(row)
				per[i] = ceLoss(x32, c, i, t, eps, lse, mean)
			default:
				per[i] = ceLoss(x32, c, i, t, eps, float64(m)+math.Log(x.sumExp(row, m)), smoothMean(row, eps))
			}
		}
		return
	}
	z, block := x.stack[:], min(expRowBlock, expRowBuf/c)
	var ses [expRowBlock]float64
	for b0 := lo; b0 < hi; b0 += block {
		b1 := min(hi, b0+block)
		rowExps(x32, c, b0, b1, z, x.maxes[:], ses[:])
		ceBlockLoss(x32, c, t64, t32, p, per, kept, b0, b1, x.maxes[:], ses[:])
	}
}

// ceBlockLoss sets per and kept for rows b0..b1−1 from their maxima and
// softmax denominators (maxes and ses from rowExps, indexed from b0).
//
// A reduced loss needs only the sum of the rows' losses, and a row's loss
// is its log-sum-exp m+log(se) plus terms free of it: for a reduced loss
// the rows get their loss with lse = m, and the block's first of them the
// log of the product of the se, one log per block instead of one per
// row. Each se lies in [1, c] and a block has at most max(16,
// expRowBuf/c) rows of c ≤ expRowBuf, so the product stays below 2^68.
func ceBlockLoss(x32 []float32, c int, t64 []int64, t32 []int32, p kernels.CrossEntropyParams, per []float64, kept []bool, b0, b1 int, maxes []float32, ses []float64) {
	eps := p.LabelSmoothing
	reduced := p.Reduction != kernels.ReduceNone
	prod, first := 1.0, -1
	for i := b0; i < b1; i++ {
		t, ok := ceTarget(t64, t32, i, c, p)
		kept[i] = ok
		row := x32[i*c : (i+1)*c]
		m := maxes[i-b0]
		switch {
		case !ok:
			per[i] = 0
		case !finite32(m): // a NaN or infinite row
			lse, mean := lseMean(row)
			per[i] = ceLoss(x32, c, i, t, eps, lse, mean)
		case !reduced:
			per[i] = ceLoss(x32, c, i, t, eps, float64(m)+math.Log(ses[i-b0]), smoothMean(row, eps))
		default:
			per[i] = ceLoss(x32, c, i, t, eps, float64(m), smoothMean(row, eps))
			prod *= ses[i-b0]
			if first < 0 {
				first = i
			}
		}
	}
	if first >= 0 {
		per[first] += math.Log(prod)
	}
}

// ceReduce combines the per-row losses: their sum, or for the mean
// reduction the sum over the kept rows' count (0/0 = NaN when none is
// kept, as PyTorch).
func ceReduce(per []float64, kept []bool, p kernels.CrossEntropyParams) float64 {
	var sum float64
	cnt := 0
	for i, v := range per {
		sum += v
		if kept[i] {
			cnt++
		}
	}
	if p.Reduction == kernels.ReduceMean {
		sum /= float64(cnt)
	}
	return sum
}

// lseMean returns the stable log-sum-exp and the mean of a row.
func lseMean[F tensor.Float](row []F) (lse, mean float64) {
	m := rowMax(row)
	var se, sx float64
	for _, v := range row {
		se += math.Exp(float64(v) - m)
		sx += float64(v)
	}
	return m + math.Log(se), sx / float64(len(row))
}

// expRowBuf is the float32 cross-entropy's stack scratch: rows of up to
// this many classes are exponentiated several at a time, longer ones in
// chunks of this size.
const expRowBuf = 128

// expRowBlock bounds the rows expRowsF32 exponentiates per expF32 call.
const expRowBlock = 64

// expScratch is the working space of a float32 cross-entropy forward:
// the exponentials of a block of rows of up to expRowBuf classes, or of a
// chunk of a longer row, and the block's row maxima. It lives on the
// kernel body's stack: a replay allocates nothing.
type expScratch struct {
	stack [expRowBuf]float32
	maxes [expRowBlock]float32
}

// sumExp returns Σ e^(v−m) over row, through the scratch in chunks.
func (x *expScratch) sumExp(row []float32, m float32) float64 {
	var se float64
	for c0 := 0; c0 < len(row); c0 += expRowBuf {
		chunk := row[c0:min(len(row), c0+expRowBuf)]
		z := x.stack[:len(chunk)]
		for j, v := range chunk {
			z[j] = v - m
		}
		expF32(z, z)
		for _, v := range z {
			se += float64(v)
		}
	}
	return se
}

// smoothMean returns the mean of row when label smoothing eps is on (the
// smoothing term needs it), else 0.
func smoothMean(row []float32, eps float64) float64 {
	if eps == 0 {
		return 0
	}
	var sum float64
	for _, v := range row {
		sum += float64(v)
	}
	return sum / float64(len(row))
}

// expBlockF32 sets, for rows b0..b1−1 of the row-major float32 matrix xs
// with c columns, maxes[i−b0] to row i's maximum and z[(i−b0)·c+j] to
// e^(x_ij − max) with one expF32 call. A row whose maximum is NaN or ±Inf
// gets zeros (the caller takes its scalar path for it).
func expBlockF32(xs []float32, c, b0, b1 int, z, maxes []float32) {
	z = z[:(b1-b0)*c]
	for i := b0; i < b1; i++ {
		row := xs[i*c : (i+1)*c]
		m := float32(rowMax(row)) // an element: exact
		maxes[i-b0] = m
		zr := z[(i-b0)*c : (i-b0+1)*c]
		if !finite32(m) {
			clear(zr)
			continue
		}
		for j, v := range row {
			zr[j] = v - m
		}
	}
	expF32(z, z)
}

// rowExps sets, for the rows b0..b1−1 of the c-column row-major xs,
// maxes[i−b0] to the row's maximum (NaN for a row holding a NaN) and, for
// a row whose maximum is finite, z[(i−b0)·c+j] to e^(x_ij − max) and
// ses[i−b0] to their sum in float64: the softmax denominators. Rows of at
// most 16 columns run the AVX-512 kernel (a row per register, the sum a
// pairwise tree), which leaves z alone when it is nil; the others run
// expBlockF32 and a running sum, and need z.
//
// Rows of 4, 8 or 16 columns are loaded and stored exactly. Other rows go
// through 16-lane loads and stores masked to the row, but the CPU still
// orders them against other accesses to the whole 64 bytes: a load
// reaching past the end of xs into a tensor just written waits for that
// store. The last rows, whose 16 lanes would leave xs (or z), are
// therefore read and written through the 16 lanes that end with the row
// (the row in the top c lanes: where a row sits in the register does not
// matter), and only a buffer of fewer than 16 elements goes through a
// copy on the stack.
func rowExps(xs []float32, c, b0, b1 int, z, maxes []float32, ses []float64) {
	if b1 <= b0 {
		return
	}
	if !tinyAsm || c > 16 {
		expBlockF32(xs, c, b0, b1, z, maxes)
		for i := b0; i < b1; i++ {
			if !finite32(maxes[i-b0]) {
				continue
			}
			var se float64
			for _, v := range z[(i-b0)*c : (i-b0+1)*c] {
				se += float64(v)
			}
			ses[i-b0] = se
		}
		return
	}
	_, _, _ = xs[b1*c-1], maxes[b1-b0-1], ses[b1-b0-1]
	low := uint16(1)<<c - 1
	if c == 4 || c == 8 || c == 16 {
		// The kernel reads and writes exactly the rows.
		if z != nil {
			_ = z[(b1-b0)*c-1]
		}
		rowExpsKernel(xs[b0*c:], c, b1-b0, low, z, maxes, ses)
		return
	}
	// Rows b0..in−1 read (and write) from their start; the rest end-aligned.
	in := b1
	if over := (b1-1)*c + 16 - len(xs); over > 0 {
		in = b1 - (over+c-1)/c
	}
	if z != nil {
		_ = z[(b1-b0)*c-1]
		if over := (b1-b0-1)*c + 16 - len(z); over > 0 {
			in = min(in, b1-(over+c-1)/c)
		}
	}
	in = max(in, b0)
	if in > b0 {
		rowExpsKernel(xs[b0*c:], c, in-b0, low, z, maxes, ses)
	}
	for i := in; i < b1; {
		j, back := i-b0, 16-c
		if i*c-back >= 0 && (z == nil || j*c-back >= 0) {
			var zs []float32
			if z != nil {
				zs = z[j*c-back:]
			}
			rowExpsKernel(xs[i*c-back:], c, b1-i, low<<back, zs, maxes[j:], ses[j:])
			return
		}
		// Fewer than 16 elements before the row's end: a stack copy.
		var r [16]float32
		copy(r[:], xs[i*c:(i+1)*c])
		rowExpsKernel(r[:], c, 1, low, r[:], maxes[j:], ses[j:])
		if z != nil {
			copy(z[j*c:(j+1)*c], r[:c])
		}
		i++
	}
}

// finite32 reports whether v is neither NaN nor ±Inf.
func finite32(v float32) bool { return v-v == 0 }

// rowMax returns the largest element of row as a float64, NaN if any
// element is NaN, and −Inf for an empty row.
func rowMax[F tensor.Float](row []F) float64 {
	m := math.Inf(-1)
	for _, v := range row {
		if f := float64(v); f > m || f != f {
			m = f
		}
	}
	return m
}

// CrossEntropyBackward implements kernels.Backend: dlogits_i =
// scale_i·(softmax_i − q_i) with q = (1-ε)·onehot(t) + ε/C.
func (be *Backend) CrossEntropyBackward(dlogits, logits, target, dloss *T, p kernels.CrossEntropyParams) {
	const name = "CrossEntropyBackward"
	n, c := checkCE(name, dloss, logits, target, p)
	needShape(name, "dlogits", dlogits, logits.Shape())
	if be.eager() && ceBwdEager(dlogits, logits, target, dloss, p, n, c) {
		return
	}
	if wide(logits, dlogits) {
		be.launch(ceBwdPrep[float64](dlogits, logits, target, dloss, p, n, c))
	} else {
		be.launch(ceBwdPrep[float32](dlogits, logits, target, dloss, p, n, c))
	}
}

func ceBwdPrep[F tensor.Float](dlogits, logits, target, dloss *T, p kernels.CrossEntropyParams, n, c int) func() {
	var s stage
	k := &ceBwd[F]{xs: in[F](&s, logits), ds: out[F](&s, dlogits), p: p, c: c}
	k.t64, k.t32 = indexData("CrossEntropyBackward", "target", target)
	var dscalar func() float64
	if p.Reduction == kernels.ReduceNone {
		k.dl = in[F](&s, dloss)
	} else {
		dscalar = scalarReader("CrossEntropyBackward", "dloss", dloss)
	}
	body := k.rows
	if x32, ok := any(k.xs).([]float32); ok {
		d32 := any(k.ds).([]float32)
		body = func(lo, hi int) { k.rowsF32(x32, d32, lo, hi) }
	}
	return func() {
		s.load()
		if dscalar != nil {
			k.setScale(dscalar(), n)
		}
		parallelFor(n, 10*c, body)
		s.store()
	}
}

// ceBwdEager is CrossEntropyBackward's eager fast path (see eager.go):
// contiguous F32 logits, dlogits and dloss, few enough rows that the
// launch would run inline.
func ceBwdEager(dlogits, logits, target, dloss *T, p kernels.CrossEntropyParams, n, c int) bool {
	for _, t := range [...]*T{dlogits, logits, dloss} {
		if t.DType() != tensor.F32 || !t.IsContiguous() {
			return false
		}
	}
	if n != 1 && n*10*c >= minWork {
		return false
	}
	k := ceBwd[float32]{xs: logits.F32(), ds: dlogits.F32(), p: p, c: c}
	k.t64, k.t32 = indexData("CrossEntropyBackward", "target", target)
	if p.Reduction == kernels.ReduceNone {
		k.dl = dloss.F32()
	} else {
		k.setScale(float64(dloss.F32()[0]), n)
	}
	k.rowsF32(k.xs, k.ds, 0, n)
	return true
}

// ceBwd is the state of a cross-entropy backward over c-column rows.
type ceBwd[F tensor.Float] struct {
	xs, ds, dl []F // logits, dlogits, per-row upstream gradient (nil: scale)
	t64        []int64
	t32        []int32
	p          kernels.CrossEntropyParams
	c          int
	scale      float64 // upstream gradient of a reduced loss, per row
}

// setScale sets the per-row gradient from the reduced loss's gradient g:
// the mean divides it by the number of kept rows among n.
func (k *ceBwd[F]) setScale(g float64, n int) {
	k.scale = g
	if k.p.Reduction == kernels.ReduceMean {
		cnt := 0
		for i := 0; i < n; i++ {
			if _, ok := ceTarget(k.t64, k.t32, i, k.c, k.p); ok {
				cnt++
			}
		}
		k.scale /= float64(cnt)
	}
}

// grad returns row i's target and upstream gradient (ok false for an
// ignored row, whose gradient is zeroed).
func (k *ceBwd[F]) grad(i int) (t int, g float64, ok bool) {
	c := k.c
	if t, ok = ceTarget(k.t64, k.t32, i, c, k.p); !ok {
		clear(k.ds[i*c : (i+1)*c])
		return 0, 0, false
	}
	g = k.scale
	if k.dl != nil {
		g = float64(k.dl[i])
	}
	return t, g, true
}

// exact sets row i's gradient from its softmax with math.Exp in float64.
func (k *ceBwd[F]) exact(i, t int, g float64) {
	c, eps := k.c, k.p.LabelSmoothing
	row := k.xs[i*c : (i+1)*c]
	drow := k.ds[i*c : (i+1)*c]
	// softmax_j = e^(v_j−m)/Σ: one exp per element and no log;
	// rows of up to 64 classes keep the exponentials on the stack.
	m := rowMax(row)
	var ebuf [64]float64
	var se float64
	for j, v := range row {
		e := math.Exp(float64(v) - m)
		if j < len(ebuf) {
			ebuf[j] = e
		}
		se += e
	}
	inv := 1 / se
	for j, v := range row {
		var e float64
		if j < len(ebuf) {
			e = ebuf[j]
		} else {
			e = math.Exp(float64(v) - m)
		}
		q := eps / float64(c)
		if j == t {
			q += 1 - eps
		}
		drow[j] = F(g * (e*inv - q))
	}
}

// rows computes the gradients of rows lo..hi-1.
func (k *ceBwd[F]) rows(lo, hi int) {
	for i := lo; i < hi; i++ {
		if t, g, ok := k.grad(i); ok {
			k.exact(i, t, g)
		}
	}
}

// rowsF32 is rows for float32 logits x32 and dlogits d32 (k.xs and k.ds):
// the exponentials go straight into dlogits, a block of rows per expF32
// call, and are turned into gradients in place.
func (k *ceBwd[F]) rowsF32(x32, d32 []float32, lo, hi int) {
	c, eps := k.c, k.p.LabelSmoothing
	var maxes [expRowBlock]float32
	var ses [expRowBlock]float64
	for b0 := lo; b0 < hi; b0 += expRowBlock {
		b1 := min(hi, b0+expRowBlock)
		rowExps(x32, c, b0, b1, d32[b0*c:b1*c], maxes[:], ses[:])
		for i := b0; i < b1; i++ {
			t, g, ok := k.grad(i)
			switch {
			case !ok:
			case !finite32(maxes[i-b0]):
				k.exact(i, t, g) // a NaN or infinite row
			default:
				drow := d32[i*c : (i+1)*c]
				inv, q0 := 1/ses[i-b0], eps/float64(c)
				for j, v := range drow {
					q := q0
					if j == t {
						q += 1 - eps
					}
					drow[j] = float32(g * (float64(v)*inv - q))
				}
			}
		}
	}
}

// CrossEntropyCount implements kernels.CrossEntropyCounter as
// CrossEntropy, Binary Add and CountCorrect in turn: the CPU has no
// launch to save.
func (be *Backend) CrossEntropyCount(loss, logits, target *T, p kernels.CrossEntropyParams, lossSum, acc *T) {
	const name = "CrossEntropyCount"
	needCPU(name, loss, logits, target, lossSum, acc)
	_, _, err := kernels.CheckCrossEntropyCount(name, loss, logits, target, p, lossSum, acc)
	must(err)
	kernels.CrossEntropyCountOps(be, loss, logits, target, p, lossSum, acc)
}

// CrossEntropyCountGrad implements kernels.CrossEntropyGradCounter:
// CrossEntropyCount, then CrossEntropyBackward with a dloss of one (in
// the loss's dtype), which is what a backward seeded with the loss's one
// would run. The CPU saves no launch by it; it moves the backward's work
// into the forward, so that sim runs the path a GPU takes.
func (be *Backend) CrossEntropyCountGrad(loss, logits, target *T, p kernels.CrossEntropyParams, lossSum, acc, dlogits *T) bool {
	const name = "CrossEntropyCountGrad"
	needCPU(name, loss, logits, target, lossSum, acc, dlogits)
	if dlogits == nil {
		fail(name, "dlogits is required")
	}
	_, _, err := kernels.CheckCrossEntropyCount(name, loss, logits, target, p, lossSum, acc)
	must(err)
	needShape(name, "dlogits", dlogits, logits.Shape())
	if dlogits.DType() != logits.DType() {
		fail(name, "dlogits dtype %v, want the logits' %v", dlogits.DType(), logits.DType())
	}
	kernels.CrossEntropyCountOps(be, loss, logits, target, p, lossSum, acc)
	one := ceOneF32
	if loss.DType() == tensor.F64 {
		one = ceOneF64
	}
	be.CrossEntropyBackward(dlogits, logits, target, one, p)
	return true
}

// ceOneF32 and ceOneF64 are the dloss of one CrossEntropyCountGrad
// differentiates with (read only).
var (
	ceOneF32 = tensor.FromSlice([]float32{1}).Reshape()
	ceOneF64 = tensor.FromSlice([]float64{1}).Reshape()
)

// LinearCESGDStep implements kernels.LinearCESGDStepper as its three
// calls in turn (the CPU has no launch to save), every operand checked
// before the first writes.
func (be *Backend) LinearCESGDStep(logits, loss, x, w, b, target *T, p kernels.CrossEntropyParams, lossSum, acc, dlogits, gw, gb, param, grad, mom, hyper *T, o kernels.SGDOptions) bool {
	const name = "LinearCESGDStep"
	needCPU(name, logits, loss, x, w, b, target, lossSum, acc, dlogits, gw, gb, param, grad, mom, hyper)
	must(kernels.CheckLinearCESGDStep(name, w, b, dlogits, gw, gb, param, grad, mom, hyper, o))
	if logits == nil || x == nil {
		fail(name, "logits and x are required")
	}
	if !tensor.SameShape(gw.Shape(), w.Shape()) || x.Rank() != 2 || w.Rank() != 2 || x.Dim(1) != w.Dim(1) {
		fail(name, "x %v against w %v", x.Shape(), w.Shape())
	}
	if !tensor.SameShape(dlogits.Shape(), logits.Shape()) || dlogits.DType() != logits.DType() {
		fail(name, "dlogits %v %v against logits %v %v", dlogits.DType(), dlogits.Shape(), logits.DType(), logits.Shape())
	}
	if _, _, err := kernels.CheckCrossEntropyCount(name, loss, logits, target, p, lossSum, acc); err != nil {
		must(err)
	}
	be.LinearCrossEntropyCount(logits, loss, x, w, b, target, p, lossSum, acc, dlogits)
	be.LinearGradAdd(gw, gb, dlogits, x)
	be.IncrementSGDStep(param, grad, mom, hyper, nil, o)
	return true
}

// LinearCrossEntropyCount implements kernels.LinearCrossEntropyCounter:
// MatMulBias, then CrossEntropyCountGrad (CrossEntropyCount without
// dlogits), bit for bit those calls; the CPU has no launch to save.
func (be *Backend) LinearCrossEntropyCount(logits, loss, x, w, b, target *T, p kernels.CrossEntropyParams, lossSum, acc, dlogits *T) bool {
	const name = "LinearCrossEntropyCount"
	needCPU(name, logits, loss, x, w, b, target, lossSum, acc, dlogits)
	if logits == nil || x == nil || w == nil {
		fail(name, "logits, x and w are required (b and dlogits may be nil)")
	}
	be.MatMulBias(logits, x, w, b, false, true)
	if dlogits != nil {
		return be.CrossEntropyCountGrad(loss, logits, target, p, lossSum, acc, dlogits)
	}
	be.CrossEntropyCount(loss, logits, target, p, lossSum, acc)
	return true
}
