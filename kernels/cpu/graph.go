package cpu

import (
	"math"
	"unsafe"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

var _ kernels.GraphAggregator = (*Backend)(nil)

// graphDType returns the compute dtype of a GraphAggregator launch (F32
// or F64; the checks made every float operand out's or x's dtype).
func graphDType(name string, t *T) tensor.DType {
	d := t.DType()
	if d != tensor.F32 && d != tensor.F64 {
		fail(name, "dtype %v (F32 and F64 run here)", d)
	}
	return d
}

// GATAggregate implements kernels.GraphAggregator (F32, F64): dot
// products and sums in float64, alpha·r rounded once (added to out's
// value with accumulate, in float64, then rounded).
func (be *Backend) GATAggregate(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order *T, heads int, slope, alpha float64, accumulate bool) {
	be.launch(gatPrep("GATAggregate", out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope, alpha, accumulate))
}

// gatPrep checks a GATAggregate and returns its launch.
func gatPrep(name string, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order *T, heads int, slope, alpha float64, accumulate bool) func() {
	needCPU(name, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order)
	g, err := kernels.CheckGATAggregate(name, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope, alpha)
	must(err)
	lds, _ := kernels.RowStride(hs)
	ldd, _ := kernels.RowStride(hd)
	a := gatArgs{g: g, heads: heads, c: out.Shape()[1], f: attr.Shape()[1], slope: slope, alpha: alpha, acc: accumulate,
		lds: lds, ldd: ldd,
		src: tensor.Data[int64](src), rowPtr: tensor.Data[int64](rowPtr), order: orderData(order, src)}
	if graphDType(name, out) == tensor.F64 {
		return gatAggregatePrep[float64](a, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias)
	}
	return gatAggregatePrep[float32](a, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias)
}

// gatArgs are a GATAggregate's sizes and index data.
type gatArgs struct {
	g                  kernels.GraphCSR
	heads, c, f        int
	lds, ldd           int // hs's and hd's row strides
	slope, alpha       float64
	acc                bool
	src, rowPtr, order []int64
}

// rowsView returns the elements of a row-strided t (kernels.RowStride)
// from its first to its last, read in place: row i starts at i·ld.
func rowsView[F tensor.Float](t *T, ld int) []F {
	n := t.Shape()[0]
	if n == 0 {
		return nil
	}
	b := t.Storage().Bytes()
	var z F
	all := unsafe.Slice((*F)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
	return all[t.Offset() : t.Offset()+(n-1)*ld+t.Shape()[1]]
}

// put returns what GATAggregate stores for a result r over out's value
// old: alpha·r, or old + alpha·r with accumulate.
func gatPut[F tensor.Float](a *gatArgs, old F, r float64) F {
	if a.acc {
		return F(float64(old) + a.alpha*r)
	}
	return F(a.alpha * r)
}

// gatScratch is the per-node stack space for the attention weights; a
// node with more heads × incoming edges allocates. gatRow is the stack
// space of an accumulated row (wider rows allocate).
const (
	gatScratch = 64
	gatRow     = 256
)

// gdot returns Σ x[c]·y[c] (float32 lanes for F32, float64 for F64).
func gdot[F tensor.Float](x, y []F) float64 {
	if a, ok := any(x).([]float32); ok {
		return float64(dotF32(a, any(y).([]float32)))
	}
	var t float64
	for c := range x {
		t += float64(x[c]) * float64(y[c])
	}
	return t
}

// gaxpy adds a·x[c] to y[c].
func gaxpy[F tensor.Float](a float64, x, y []F) {
	if xs, ok := any(x).([]float32); ok {
		axpyF32(float32(a), xs, any(y).([]float32))
		return
	}
	for c := range x {
		y[c] += F(a) * x[c]
	}
}

func gatAggregatePrep[F tensor.Float](a gatArgs, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias *T) func() {
	var s stage
	o := tensor.Data[F](out)
	xs, xd := rowsView[F](hs, a.lds), rowsView[F](hd, a.ldd)
	ea, w := in[F](&s, attr), in[F](&s, we)
	as, ad, ae, bv := in[F](&s, attSrc), in[F](&s, attDst), in[F](&s, attEdge), in[F](&s, bias)
	H, C, nf := a.heads, a.c, a.f
	v := make([]float64, H*nf)            // the edge projection folded into attEdge
	srcTerm := make([]float64, a.g.Src*H) // Σ_c hs[j,h,c]·attSrc[h,c]
	seen := make([]bool, a.g.Edges)
	// Source terms, once per source node and head.
	sources := func(lo, hi int) {
		for j := lo; j < hi; j++ {
			for h := 0; h < H; h++ {
				srcTerm[j*H+h] = gdot(xs[j*a.lds+h*C:j*a.lds+(h+1)*C], as[h*C:(h+1)*C])
			}
		}
	}
	body := func(lo, hi int) {
		if C == 0 {
			return
		}
		var buf [gatScratch]float64
		var rowBuf [gatRow]F
		for i := lo; i < hi; i++ {
			row := o[i*C : (i+1)*C]
			p0, p1 := a.rowPtr[i], a.rowPtr[i+1]
			deg := int(p1 - p0)
			// r accumulates bias + the heads' mean in F: out's row itself
			// when it is overwritten and alpha is 1, else scratch.
			r := row
			if a.acc || a.alpha != 1 {
				r = rowBuf[:]
				if C > len(r) {
					r = make([]F, C)
				}
				r = r[:C]
			}
			copy(r, bv[:C])
			if deg > 0 {
				wts := buf[:]
				if H*deg > len(wts) {
					wts = make([]float64, H*deg)
				}
				for h := 0; h < H; h++ {
					dterm := gdot(xd[i*a.ldd+h*C:i*a.ldd+(h+1)*C], ad[h*C:(h+1)*C])
					m := math.Inf(-1)
					for q := 0; q < deg; q++ {
						k := a.order[int(p0)+q]
						z := srcTerm[int(a.src[k])*H+h] + dterm
						for f := 0; f < nf; f++ {
							z += float64(ea[int(k)*nf+f]) * v[h*nf+f]
						}
						l := max(z, a.slope*z)
						wts[h*deg+q] = l
						m = max(m, l)
					}
					var sum float64
					for q := 0; q < deg; q++ {
						e := math.Exp(wts[h*deg+q] - m)
						wts[h*deg+q] = e
						sum += e
					}
					// Each weight divided by H: the heads' mean.
					for q := 0; q < deg; q++ {
						j := int(a.src[a.order[int(p0)+q]])
						gaxpy(wts[h*deg+q]/(sum*float64(H)), xs[j*a.lds+h*C:j*a.lds+(h+1)*C], r)
					}
				}
			}
			if &r[0] != &row[0] {
				for c := range row {
					row[c] = gatPut(&a, row[c], float64(r[c]))
				}
			}
		}
	}
	return func() {
		s.load()
		must(kernels.CheckCSRValues("GATAggregate", a.src, a.rowPtr, a.order, a.g.Src, seen))
		gatEdgeVec(v, ae, w, H, C, nf)
		parallelFor(a.g.Src, H*C, sources)
		parallelFor(a.g.Dst, max(1, (a.g.Edges/max(1, a.g.Dst)+1)*H*C), body)
	}
}

// gatEdgeVec writes v[h,f] = Σ_c attEdge[h,c]·we[h·C+c, f] in float64:
// the edge projection folded into its attention vector.
func gatEdgeVec[F tensor.Float](v []float64, ae, w []F, H, C, nf int) {
	for h := 0; h < H; h++ {
		for f := 0; f < nf; f++ {
			var t float64
			for c := 0; c < C; c++ {
				t += float64(ae[h*C+c]) * float64(w[(h*C+c)*nf+f])
			}
			v[h*nf+f] = t
		}
	}
}

// GatherMean implements kernels.GraphAggregator (F32, F64): sums in
// float64, divided and rounded once into out.
func (be *Backend) GatherMean(out, x, src, rowPtr, order *T) {
	const name = "GatherMean"
	needCPU(name, out, x, src, rowPtr, order)
	g, f, err := kernels.CheckGatherMean(name, out, x, src, rowPtr, order)
	must(err)
	sv, rp, ov := tensor.Data[int64](src), tensor.Data[int64](rowPtr), orderData(order, src)
	if graphDType(name, x) == tensor.F64 {
		be.launch(gatherMeanPrep[float64](g, f, out, x, sv, rp, ov))
	} else {
		be.launch(gatherMeanPrep[float32](g, f, out, x, sv, rp, ov))
	}
}

func gatherMeanPrep[F tensor.Float](g kernels.GraphCSR, nf int, out, x *T, src, rowPtr, order []int64) func() {
	var s stage
	o := tensor.Data[F](out)
	xs := in[F](&s, x)
	seen := make([]bool, g.Edges)
	body := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			p0, p1 := rowPtr[i], rowPtr[i+1]
			row := o[i*nf : (i+1)*nf]
			if p1 == p0 {
				clear(row)
				continue
			}
			meanRow(row, xs, nf, src, order, p0, p1)
		}
	}
	return func() {
		s.load()
		must(kernels.CheckCSRValues("GatherMean", src, rowPtr, order, g.Src, seen))
		parallelFor(g.Dst, max(1, (g.Edges/max(1, g.Dst)+1)*nf), body)
	}
}

var (
	_ kernels.GraphMultiAggregator = (*Backend)(nil)
	_ kernels.GatherSummer         = (*Backend)(nil)
)

// GATMean implements kernels.GraphMultiAggregator in one launch: what
// kernels.GATMeanOps's GATAggregate calls compute, one relation after
// the other.
func (be *Backend) GATMean(out *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int, slope float64) {
	const name = "GATMean"
	r, err := kernels.CheckGATMean(name, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads)
	must(err)
	alpha := 1 / float64(r)
	preps := make([]func(), r)
	for i := range preps {
		preps[i] = gatPrep(name, out, hs[i], hd[i], attr[i], we[i], attSrc[i], attDst[i], attEdge[i], bias[i], src[i], rowPtr[i], order[i], heads, slope, alpha, i > 0)
	}
	be.launch(func() {
		for _, f := range preps {
			f()
		}
	})
}

// GATMeanAct implements kernels.GraphMultiAggregator: GATMean's launch,
// then kernels.ScaleActAddOps.
func (be *Backend) GATMeanAct(out *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int, slope float64, act kernels.UnaryOp, res *T) {
	if res != nil {
		needCPU("GATMeanAct", res)
		if !tensor.SameShape(res.Shape(), out.Shape()) || res.DType() != out.DType() {
			fail("GATMeanAct", "residual %v %v, want out's %v %v", res.DType(), res.Shape(), out.DType(), out.Shape())
		}
	}
	be.GATMean(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope)
	kernels.ScaleActAddOps(be, out, out, 1, act, res)
}

// GatherConcat implements kernels.GraphMultiAggregator (F32, F64) in one
// launch: each gathered block is summed in float64 and divided and
// rounded once, as GatherMean does.
func (be *Backend) GatherConcat(out *T, xs, src, rowPtr, order []*T, ones int) {
	const name = "GatherConcat"
	needCPU(name, out)
	for i := range xs {
		needCPU(name, xs[i], src[i], rowPtr[i], order[i])
	}
	pieces, err := kernels.CheckGatherConcat(name, out, xs, src, rowPtr, order, ones)
	must(err)
	if graphDType(name, out) == tensor.F64 {
		be.launch(gatherConcatPrep[float64](pieces, out, xs, src, rowPtr, order, ones))
	} else {
		be.launch(gatherConcatPrep[float32](pieces, out, xs, src, rowPtr, order, ones))
	}
}

func gatherConcatPrep[F tensor.Float](pieces []kernels.GatherBlock, out *T, xs, src, rowPtr, order []*T, ones int) func() {
	var s stage
	o := tensor.Data[F](out)
	nd, w := out.Shape()[0], out.Shape()[1]
	ps := make([]gatherPart[F], len(pieces))
	cost := ones
	for i, p := range pieces {
		ps[i] = gatherPart[F]{GatherBlock: p, x: in[F](&s, xs[i])}
		if p.Gathered {
			ps[i].src, ps[i].rowPtr, ps[i].order = tensor.Data[int64](src[i]), tensor.Data[int64](rowPtr[i]), orderData(order[i], src[i])
			ps[i].seen = make([]bool, p.Edges)
			cost += (p.Edges/max(1, nd) + 1) * p.Width
		} else {
			cost += p.Width
		}
	}
	body := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := o[i*w : (i+1)*w]
			for _, p := range ps {
				dst := row[p.Col : p.Col+p.Width]
				if !p.Gathered {
					copy(dst, p.x[i*p.Width:(i+1)*p.Width])
					continue
				}
				p0, p1 := p.rowPtr[i], p.rowPtr[i+1]
				if p1 == p0 {
					clear(dst)
					continue
				}
				meanRow(dst, p.x, p.Width, p.src, p.order, p0, p1)
			}
			for j := w - ones; j < w; j++ {
				row[j] = 1
			}
		}
	}
	return gatherLaunch("GatherConcat", &s, ps, nd, cost, body)
}

// gatherPart is a piece of a GatherConcat or GatherSum as its launch
// reads it: x's elements (rows ld apart, GatherSum's), and for a
// gathered piece its CSR and the edges seen by CheckCSRValues.
type gatherPart[F tensor.Float] struct {
	kernels.GatherBlock
	x                  []F
	ld                 int
	src, rowPtr, order []int64
	seen               []bool
}

// gatherLaunch is the launch of a GatherConcat or GatherSum over nd
// nodes: the staged inputs loaded, every gathered piece's CSR values
// checked, then body over the nodes.
func gatherLaunch[F tensor.Float](name string, s *stage, ps []gatherPart[F], nd, cost int, body func(lo, hi int)) func() {
	return func() {
		s.load()
		for _, p := range ps {
			if p.Gathered {
				must(kernels.CheckCSRValues(name, p.src, p.rowPtr, p.order, p.Src, p.seen))
			}
		}
		parallelFor(nd, max(1, cost), body)
	}
}

// meanRow sets dst[f] to the mean of x's rows src[order[p]] (rows of
// width elements) over p in [p0, p1), p1 > p0: summed in float64 in p
// order, divided and rounded once.
func meanRow[F tensor.Float](dst, x []F, width int, src, order []int64, p0, p1 int64) {
	n := float64(p1 - p0)
	for f := range dst {
		var t float64
		for p := p0; p < p1; p++ {
			t += float64(x[int(src[order[p]])*width+f])
		}
		dst[f] = F(t / n)
	}
}

// GatherSum implements kernels.GatherSummer (F32, F64): the sum in one
// launch, each node's in float64 (a gathered piece's mean as its float64
// sum over the edges divided by their count, unrounded) and rounded once
// into out; then the scale, activation and residual as ScaleActAddOps
// runs them on this backend.
func (be *Backend) GatherSum(out *T, xs, src, rowPtr, order, biases []*T, s float64, act kernels.UnaryOp, res *T) {
	const name = "GatherSum"
	needCPU(name, out, res)
	needCPU(name, biases...)
	for i := range xs {
		needCPU(name, xs[i], src[i], rowPtr[i], order[i])
	}
	pieces, err := kernels.CheckGatherSum(name, out, xs, src, rowPtr, order, biases, res)
	must(err)
	if graphDType(name, out) == tensor.F64 {
		be.launch(gatherSumPrep[float64](pieces, out, xs, src, rowPtr, order, biases))
	} else {
		be.launch(gatherSumPrep[float32](pieces, out, xs, src, rowPtr, order, biases))
	}
	kernels.ScaleActAddOps(be, out, out, s, act, res)
}

func gatherSumPrep[F tensor.Float](pieces []kernels.GatherBlock, out *T, xs, src, rowPtr, order, biases []*T) func() {
	var s stage
	o := tensor.Data[F](out)
	nd, c := out.Shape()[0], out.Shape()[1]
	ps := make([]gatherPart[F], len(pieces))
	cost := len(biases) * c
	for i, p := range pieces {
		ld, _ := kernels.RowStride(xs[i])
		ps[i] = gatherPart[F]{GatherBlock: p, x: rowsView[F](xs[i], ld), ld: ld}
		if p.Gathered {
			ps[i].src, ps[i].rowPtr, ps[i].order = tensor.Data[int64](src[i]), tensor.Data[int64](rowPtr[i]), orderData(order[i], src[i])
			ps[i].seen = make([]bool, p.Edges)
			cost += (p.Edges/max(1, nd) + 1) * c
		} else {
			cost += c
		}
	}
	bs := make([][]F, len(biases))
	for j, b := range biases {
		bs[j] = in[F](&s, b)
	}
	body := func(lo, hi int) {
		acc := make([]float64, c)
		for i := lo; i < hi; i++ {
			clear(acc)
			for _, p := range ps {
				if !p.Gathered {
					row := p.x[i*p.ld : i*p.ld+c]
					for f, v := range row {
						acc[f] += float64(v)
					}
					continue
				}
				p0, p1 := p.rowPtr[i], p.rowPtr[i+1]
				if p1 == p0 {
					continue
				}
				n := float64(p1 - p0)
				for f := range acc {
					var t float64
					for q := p0; q < p1; q++ {
						t += float64(p.x[int(p.src[p.order[q]])*p.ld+f])
					}
					acc[f] += t / n
				}
			}
			for _, b := range bs {
				for f, v := range b {
					acc[f] += float64(v)
				}
			}
			row := o[i*c : (i+1)*c]
			for f, v := range acc {
				row[f] = F(v)
			}
		}
	}
	return gatherLaunch("GatherSum", &s, ps, nd, cost, body)
}

// orderData is a CSR's order as a host kernel reads it: order's values,
// or for a nil order (the edges sorted by destination already) the
// identity over src's edges (kernels.IdentityOrder: shared, read-only).
func orderData(order, src *T) []int64 {
	if order == nil {
		return kernels.IdentityOrder(src.Numel())
	}
	return tensor.Data[int64](order)
}
