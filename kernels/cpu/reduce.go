package cpu

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// chunkLen is the fixed number of elements one reduction partial covers.
// Partials are combined in order, so the result does not depend on how
// many workers computed them.
const chunkLen = 4096

// Reduce implements kernels.Backend. Sums accumulate in float64 for every
// dtype (then round once).
func (be *Backend) Reduce(op kernels.ReduceOp, dst, x *T, axes []int) {
	name := opName(reduceNames, "Reduce ", op)
	needCPU(name, dst, x)
	// Small ranks keep the mask on the stack.
	var redBuf [8]bool
	var red []bool
	if r := x.Rank(); r <= len(redBuf) {
		red = redBuf[:r]
	} else {
		red = make([]bool, r)
	}
	must(kernels.CheckReduce(name, op, dst, x, axes, red))
	if be.eager() && reduceEager(op, dst, x, red) {
		return
	}
	if wide(dst, x) {
		be.launch(reducePrep[float64](op, dst, x, red))
	} else {
		be.launch(reducePrep[float32](op, dst, x, red))
	}
}

// reduceGeom splits a contiguous shape into kept dims (the output walk)
// and reduced dims (each output's walk), merging neighbours of one kind.
type reduceGeom struct {
	kShape, kSt []int
	rShape, rSt []int
	outs, r     int
}

func newReduceGeom(shape []int, red []bool) reduceGeom {
	st := contigStrides(shape)
	var g reduceGeom
	lastRed := -1 // kind of the previous kept dim: 1 reduced, 0 kept
	for d, s := range shape {
		if s == 1 {
			continue
		}
		k := 0
		if red[d] {
			k = 1
		}
		if k == 1 {
			if lastRed == 1 {
				n := len(g.rShape) - 1
				g.rShape[n] *= s
				g.rSt[n] = st[d]
			} else {
				g.rShape = append(g.rShape, s)
				g.rSt = append(g.rSt, st[d])
			}
		} else {
			if lastRed == 0 {
				n := len(g.kShape) - 1
				g.kShape[n] *= s
				g.kSt[n] = st[d]
			} else {
				g.kShape = append(g.kShape, s)
				g.kSt = append(g.kSt, st[d])
			}
		}
		lastRed = k
	}
	if len(g.rShape) == 0 {
		g.rShape, g.rSt = []int{1}, []int{0}
	}
	g.outs, g.r = 1, 1
	for _, s := range g.kShape {
		g.outs *= s
	}
	for _, s := range g.rShape {
		g.r *= s
	}
	return g
}

// base is the offset of output o's first element.
func (g *reduceGeom) base(o int) int {
	off := 0
	for d := len(g.kShape) - 1; d >= 0; d-- {
		s := g.kShape[d]
		off += (o % s) * g.kSt[d]
		o /= s
	}
	return off
}

// reduceChunk folds elements [c0, c1) of one output's walk. For sums it
// returns the float64 sum; for max/min the extreme (NaN wins); for
// logsumexp the pair (max, Σexp(x-max)).
func reduceChunk[F tensor.Float](op kernels.ReduceOp, x []F, g *reduceGeom, base, c0, c1 int) (acc, aux float64) {
	last := len(g.rShape) - 1
	L, sL := g.rShape[last], g.rSt[last]
	switch op {
	case kernels.Max:
		acc = math.Inf(-1)
	case kernels.Min:
		acc = math.Inf(1)
	case kernels.LogSumExp:
		acc = math.Inf(-1)
	}
	for pass := 0; pass < 2; pass++ {
		r := c0
		for r < c1 {
			q, j := r/L, r%L
			off := base + j*sL
			for d := last - 1; d >= 0; d-- {
				s := g.rShape[d]
				off += (q % s) * g.rSt[d]
				q /= s
			}
			n := min(L-j, c1-r)
			switch op {
			case kernels.Sum, kernels.Mean:
				if sL == 1 {
					acc += sum4(x[off : off+n])
				} else {
					for i := 0; i < n; i, off = i+1, off+sL {
						acc += float64(x[off])
					}
				}
			case kernels.Max:
				for i := 0; i < n; i, off = i+1, off+sL {
					if v := float64(x[off]); v > acc || v != v {
						acc = v
						if v != v {
							return acc, 0
						}
					}
				}
			case kernels.Min:
				for i := 0; i < n; i, off = i+1, off+sL {
					if v := float64(x[off]); v < acc || v != v {
						acc = v
						if v != v {
							return acc, 0
						}
					}
				}
			case kernels.LogSumExp:
				if pass == 0 {
					for i := 0; i < n; i, off = i+1, off+sL {
						if v := float64(x[off]); v > acc || v != v {
							acc = v
						}
					}
				} else if !math.IsInf(acc, 0) && acc == acc {
					for i := 0; i < n; i, off = i+1, off+sL {
						aux += math.Exp(float64(x[off]) - acc)
					}
				}
			}
			r += n
		}
		if op != kernels.LogSumExp {
			break
		}
	}
	return acc, aux
}

// colSumMax is the widest matrix whose column sums take reducePrep's
// direct path.
const colSumMax = 64

func reducePrep[F tensor.Float](op kernels.ReduceOp, dst, x *T, red []bool) func() {
	var s stage
	xs := in[F](&s, x)
	ds := out[F](&s, dst)
	g := newReduceGeom(x.Shape(), red)
	if x.Numel() == 0 {
		// Nothing to fold: sums give 0, the others are undefined (NaN).
		v := 0.0
		if op != kernels.Sum {
			v = math.NaN()
		}
		return func() {
			for i := range ds {
				ds[i] = F(v)
			}
			s.store()
		}
	}
	if sh := x.Shape(); (op == kernels.Sum || op == kernels.Mean) && len(sh) == 2 && red[0] && !red[1] &&
		sh[1] <= colSumMax && sh[0] <= chunkLen {
		// Column sums of a small matrix (a linear layer's bias gradient):
		// one pass over the rows, each column summed in row order exactly
		// as reduceChunk would, without its per-output offset arithmetic.
		m, n := sh[0], sh[1]
		return func() {
			s.load()
			var acc [colSumMax]float64
			a := acc[:n]
			for i := 0; i < m; i++ {
				for j, v := range xs[i*n : (i+1)*n] {
					a[j] += float64(v)
				}
			}
			for j, v := range a {
				if op == kernels.Mean {
					v /= float64(m)
				}
				ds[j] = F(v)
			}
			s.store()
		}
	}
	if r, ok := innerReduce(x, red); ok && (op == kernels.Sum || op == kernels.Mean) && r <= chunkLen {
		// The reduced axes are the trailing ones of a contiguous x (a
		// global average pool): output o sums the r elements from o·r,
		// exactly as reduceChunk sums one chunk, without its per-output
		// offset arithmetic or partials.
		body := func(lo, hi int) {
			for o := lo; o < hi; o++ {
				v := sum4(xs[o*r : (o+1)*r])
				if op == kernels.Mean {
					v /= float64(r)
				}
				ds[o] = F(v)
			}
		}
		return func() {
			s.load()
			parallelFor(len(ds), r, body)
			s.store()
		}
	}
	if a, r, b, ok := middleReduce(x, red); ok && op != kernels.LogSumExp && r <= chunkLen {
		// One run of reduced axes between kept ones ([A, R, B], B > 1: a
		// GAT layer's mean over its heads): each output row gathers R
		// contiguous rows of B, in r order from the first, as reduceChunk
		// folds one chunk, with no per-output offset arithmetic.
		body := func(lo, hi int) {
			for o := lo; o < hi; o++ {
				middleFold(op, xs[o*r*b:(o+1)*r*b], r, b, ds[o*b:(o+1)*b])
			}
		}
		return func() {
			s.load()
			parallelFor(a, r*b, body)
			s.store()
		}
	}
	nch := (g.r + chunkLen - 1) / chunkLen
	part := make([]float64, g.outs*nch)
	var aux []float64
	if op == kernels.LogSumExp {
		aux = make([]float64, g.outs*nch)
	}
	chunkBody := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			o, c := it/nch, it%nch
			a, b := reduceChunk(op, xs, &g, g.base(o), c*chunkLen, min((c+1)*chunkLen, g.r))
			part[it] = a
			if aux != nil {
				aux[it] = b
			}
		}
	}
	rf := float64(g.r)
	combine := func(lo, hi int) {
		for o := lo; o < hi; o++ {
			p := part[o*nch : (o+1)*nch]
			var v float64
			switch op {
			case kernels.Sum, kernels.Mean:
				for _, q := range p {
					v += q
				}
				if op == kernels.Mean {
					v /= rf
				}
			case kernels.Max:
				v = p[0]
				for _, q := range p[1:] {
					if q > v || q != q {
						v = q
					}
				}
			case kernels.Min:
				v = p[0]
				for _, q := range p[1:] {
					if q < v || q != q {
						v = q
					}
				}
			case kernels.LogSumExp:
				m := p[0]
				for _, q := range p[1:] {
					if q > m || q != q {
						m = q
					}
				}
				switch {
				case m != m || math.IsInf(m, 0):
					v = m
				default:
					var sum float64
					for k, q := range p {
						if !math.IsInf(q, -1) {
							sum += aux[o*nch+k] * math.Exp(q-m)
						}
					}
					v = m + math.Log(sum)
				}
			}
			ds[o] = F(v)
		}
	}
	items := g.outs * nch
	cost := min(g.r, chunkLen)
	if op == kernels.LogSumExp {
		cost *= 10
	}
	return func() {
		s.load()
		parallelFor(items, cost, chunkBody)
		parallelFor(g.outs, nch, combine)
		s.store()
	}
}

// ArgMax implements kernels.Backend. NaN counts as the maximum, as in
// PyTorch; ties keep the first index.
func (be *Backend) ArgMax(dst, x *T, axis int) {
	const name = "ArgMax"
	needCPU(name, dst, x)
	a := must1(kernels.CheckArgMax(name, dst, x, axis))
	needContig(name, "dst", dst)
	if be.eager() && argMaxEager(dst, x, a) {
		return
	}
	if wide(x) {
		be.launch(argMaxPrep[float64](dst, x, a))
	} else {
		be.launch(argMaxPrep[float32](dst, x, a))
	}
}

func argMaxPrep[F tensor.Float](dst, x *T, axis int) func() {
	var s stage
	xs := in[F](&s, x)
	d := tensor.Data[int64](dst)
	outer, A, inner := kernels.Split3(x.Shape(), axis)
	body := func(lo, hi int) {
		for it := lo; it < hi; it++ {
			o, i := it, 0
			if inner != 1 { // the last axis (the usual case) needs no division
				o, i = it/inner, it%inner
			}
			d[it] = int64(argMaxLine(xs, o*A*inner+i, A, inner))
		}
	}
	return func() {
		s.load()
		parallelFor(outer*inner, A, body)
	}
}

// argMaxLine returns the index of the first maximum of the n elements
// xs[base], xs[base+stride], ...; a NaN is the maximum.
func argMaxLine[F tensor.Float](xs []F, base, n, stride int) int {
	best, bi := xs[base], 0
	for k := 1; k < n; k++ {
		v := xs[base+k*stride]
		if best != best {
			break
		}
		if v > best || v != v {
			best, bi = v, k
		}
	}
	return bi
}

// CountCorrect implements kernels.Backend.
func (be *Backend) CountCorrect(acc, logits, target *T) {
	const name = "CountCorrect"
	needCPU(name, acc, logits, target)
	n, c, err := kernels.CheckCountCorrect(name, acc, logits, target)
	must(err)
	needContig(name, "acc", acc)
	t64, t32 := indexData(name, "target", target)
	if be.eager() && logits.DType() == tensor.F32 && logits.IsContiguous() {
		// The eager fast path (eager.go): no staging, no closure.
		countCorrectRows(acc.F32(), logits.F32(), n, c, t64, t32)
		return
	}
	if wide(logits) {
		be.launch(countCorrectPrep[float64](acc, logits, t64, t32))
	} else {
		be.launch(countCorrectPrep[float32](acc, logits, t64, t32))
	}
}

func countCorrectPrep[F tensor.Float](acc, logits *T, t64 []int64, t32 []int32) func() {
	var s stage
	xs := in[F](&s, logits)
	a := acc.F32()
	n, c := logits.Dim(0), logits.Dim(1)
	return func() {
		s.load()
		countCorrectRows(a, xs, n, c, t64, t32)
	}
}

// countCorrectRows adds 1 to a[i] for each of the n rows of c logits in
// xs whose argmax is the row's target.
func countCorrectRows[F tensor.Float](a []float32, xs []F, n, c int, t64 []int64, t32 []int32) {
	for i := 0; i < n; i++ {
		if argMaxLine(xs, i*c, c, 1) == idxAt(t64, t32, i) {
			a[i]++
		}
	}
}

// innerReduce reports whether a reduction of x over the axes red is an
// inner one: x contiguous and the reduced axes (at least one) a trailing
// run, so that each output folds r consecutive elements.
func innerReduce(x *T, red []bool) (r int, ok bool) {
	if !x.IsContiguous() {
		return 0, false
	}
	sh := x.Shape()
	r = 1
	i := len(sh) - 1
	for ; i >= 0 && red[i]; i-- {
		r *= sh[i]
	}
	if i == len(sh)-1 {
		return 0, false
	}
	for ; i >= 0; i-- {
		if red[i] && sh[i] != 1 {
			return 0, false
		}
	}
	return r, true
}

// middleReduce reports whether x is contiguous and red reduces one run
// of its axes with kept axes after it: x is then [a, r, b] (size-1 axes
// ignored) with the r axis reduced, b > 1.
func middleReduce(x *T, red []bool) (a, r, b int, ok bool) {
	if !x.IsContiguous() {
		return 0, 0, 0, false
	}
	a, r, b = 1, 1, 1
	phase := 0 // 0: leading kept axes, 1: reduced run, 2: trailing kept axes
	for d, s := range x.Shape() {
		if s == 1 {
			continue
		}
		switch {
		case phase == 0 && !red[d]:
			a *= s
		case phase <= 1 && red[d]:
			phase = 1
			r *= s
		case phase >= 1 && !red[d]:
			phase = 2
			b *= s
		default: // a second reduced run
			return 0, 0, 0, false
		}
	}
	return a, r, b, phase == 2 && b > 1
}

// middleFold folds the r rows of b values in x ([r, b]) into dst (b):
// each column in row order, in float64, from 0 (Sum, Mean: divided by r)
// or −Inf (Max; Min from +Inf), a NaN winning, then rounded once, as
// reduceChunk and its combine step compute one chunk of one output.
// Columns go 64 at a time through an accumulator on the stack.
func middleFold[F tensor.Float](op kernels.ReduceOp, x []F, r, b int, dst []F) {
	var acc [64]float64
	for j0 := 0; j0 < b; j0 += len(acc) {
		w := min(len(acc), b-j0)
		a := acc[:w]
		switch op {
		case kernels.Max:
			for j := range a {
				a[j] = math.Inf(-1)
			}
		case kernels.Min:
			for j := range a {
				a[j] = math.Inf(1)
			}
		default:
			clear(a)
		}
		for i := 0; i < r; i++ {
			row := x[i*b+j0 : i*b+j0+w]
			switch op {
			case kernels.Max:
				for j, v := range row {
					if f := float64(v); f > a[j] || f != f {
						if a[j] == a[j] {
							a[j] = f
						}
					}
				}
			case kernels.Min:
				for j, v := range row {
					if f := float64(v); f < a[j] || f != f {
						if a[j] == a[j] {
							a[j] = f
						}
					}
				}
			default:
				for j, v := range row {
					a[j] += float64(v)
				}
			}
		}
		for j, v := range a {
			if op == kernels.Mean {
				v /= float64(r)
			}
			dst[j0+j] = F(v)
		}
	}
}
