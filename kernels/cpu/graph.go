package cpu

import (
	"math"

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
// products and sums in float64, rounded once into out.
func (be *Backend) GATAggregate(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order *T, heads int, slope float64) {
	const name = "GATAggregate"
	needCPU(name, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order)
	g, err := kernels.CheckGATAggregate(name, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope)
	must(err)
	a := gatArgs{g: g, heads: heads, c: out.Shape()[1], f: attr.Shape()[1], slope: slope,
		src: tensor.Data[int64](src), rowPtr: tensor.Data[int64](rowPtr), order: tensor.Data[int64](order)}
	if graphDType(name, out) == tensor.F64 {
		be.launch(gatAggregatePrep[float64](a, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias))
	} else {
		be.launch(gatAggregatePrep[float32](a, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias))
	}
}

// gatArgs are a GATAggregate's sizes and index data.
type gatArgs struct {
	g                  kernels.GraphCSR
	heads, c, f        int
	slope              float64
	src, rowPtr, order []int64
}

// gatScratch is the per-node stack space for the attention weights; a
// node with more heads × incoming edges allocates.
const gatScratch = 64

func gatAggregatePrep[F tensor.Float](a gatArgs, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias *T) func() {
	var s stage
	o := tensor.Data[F](out)
	xs, xd, ea, w := in[F](&s, hs), in[F](&s, hd), in[F](&s, attr), in[F](&s, we)
	as, ad, ae, bv := in[F](&s, attSrc), in[F](&s, attDst), in[F](&s, attEdge), in[F](&s, bias)
	H, C, nf := a.heads, a.c, a.f
	hc := H * C
	v := make([]float64, H*nf) // the edge projection folded into attEdge
	seen := make([]bool, a.g.Edges)
	// dot is Σ_c x[c]·y[c] over one head's C elements, in float64.
	dot := func(x, y []F) float64 {
		var t float64
		for c := range x {
			t += float64(x[c]) * float64(y[c])
		}
		return t
	}
	logit := func(k int64, j int64, h int, dterm float64) float64 {
		z := dot(xs[int(j)*hc+h*C:int(j)*hc+(h+1)*C], as[h*C:(h+1)*C]) + dterm
		for f := 0; f < nf; f++ {
			z += float64(ea[int(k)*nf+f]) * v[h*nf+f]
		}
		return max(z, a.slope*z)
	}
	body := func(lo, hi int) {
		var buf [gatScratch]float64
		for i := lo; i < hi; i++ {
			row := o[i*C : (i+1)*C]
			p0, p1 := a.rowPtr[i], a.rowPtr[i+1]
			deg := int(p1 - p0)
			if deg == 0 {
				for c := range row {
					row[c] = bv[c]
				}
				continue
			}
			wts := buf[:]
			if H*deg > len(wts) {
				wts = make([]float64, H*deg)
			}
			// wts[h·deg + q]: the softmax weight of the q-th incoming edge
			// for head h, divided by H (the heads' mean).
			for h := 0; h < H; h++ {
				dterm := dot(xd[i*hc+h*C:i*hc+(h+1)*C], ad[h*C:(h+1)*C])
				m := math.Inf(-1)
				for q := 0; q < deg; q++ {
					k := a.order[int(p0)+q]
					l := logit(k, a.src[k], h, dterm)
					wts[h*deg+q] = l
					m = max(m, l)
				}
				var sum float64
				for q := 0; q < deg; q++ {
					e := math.Exp(wts[h*deg+q] - m)
					wts[h*deg+q] = e
					sum += e
				}
				for q := 0; q < deg; q++ {
					wts[h*deg+q] /= sum * float64(H)
				}
			}
			for c := range row {
				t := float64(bv[c])
				for h := 0; h < H; h++ {
					var acc float64
					for q := 0; q < deg; q++ {
						j := int(a.src[a.order[int(p0)+q]])
						acc += wts[h*deg+q] * float64(xs[j*hc+h*C+c])
					}
					t += acc
				}
				row[c] = F(t)
			}
		}
	}
	return func() {
		s.load()
		must(kernels.CheckCSRValues("GATAggregate", a.src, a.rowPtr, a.order, a.g.Src, seen))
		for h := 0; h < H; h++ {
			for f := 0; f < nf; f++ {
				var t float64
				for c := 0; c < C; c++ {
					t += float64(ae[h*C+c]) * float64(w[(h*C+c)*nf+f])
				}
				v[h*nf+f] = t
			}
		}
		parallelFor(a.g.Dst, max(1, (a.g.Edges/max(1, a.g.Dst)+1)*hc*3), body)
	}
}

// GatherMean implements kernels.GraphAggregator (F32, F64): sums in
// float64, divided and rounded once into out.
func (be *Backend) GatherMean(out, x, src, rowPtr, order *T) {
	const name = "GatherMean"
	needCPU(name, out, x, src, rowPtr, order)
	g, f, err := kernels.CheckGatherMean(name, out, x, src, rowPtr, order)
	must(err)
	sv, rp, ov := tensor.Data[int64](src), tensor.Data[int64](rowPtr), tensor.Data[int64](order)
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
			n := float64(p1 - p0)
			for f := range row {
				var t float64
				for p := p0; p < p1; p++ {
					t += float64(xs[int(src[order[p]])*nf+f])
				}
				row[f] = F(t / n)
			}
		}
	}
	return func() {
		s.load()
		must(kernels.CheckCSRValues("GatherMean", src, rowPtr, order, g.Src, seen))
		parallelFor(g.Dst, max(1, (g.Edges/max(1, g.Dst)+1)*nf), body)
	}
}
