package cpu

import (
	"math"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

var _ kernels.GATMeanGradder = (*Backend)(nil)

// GATMeanGradFits implements kernels.GATMeanGradder: the CPU runs any
// width.
func (be *Backend) GATMeanGradFits(heads, c, f int) bool { return true }

// GATMeanGrad implements kernels.GATMeanGradder (F32, F64): every sum in
// float64, each gradient rounded once into its tensor; the relations one
// after another, each relation's nodes and edges in order, so the result
// does not depend on the threads.
func (be *Backend) GATMeanGrad(dHs, dHd, dWe, dAttSrc, dAttDst, dAttEdge, dBias []*T, g *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int, slope float64) {
	const name = "GATMeanGrad"
	sizes, err := kernels.CheckGATMeanGrad(name, dHs, dHd, dWe, dAttSrc, dAttDst, dAttEdge, dBias, g, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope)
	must(err)
	all := []*T{g}
	for _, l := range [][]*T{hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, dHs, dHd, dWe, dAttSrc, dAttDst, dAttEdge, dBias} {
		all = append(all, l...)
	}
	needCPU(name, all...)
	var runs []func()
	for k := range hs {
		lds, _ := kernels.RowStride(hs[k])
		ldd, _ := kernels.RowStride(hd[k])
		a := gatArgs{g: sizes[k], heads: heads, c: g.Shape()[1], f: attr[k].Shape()[1], slope: slope, alpha: 1 / float64(len(hs)),
			lds: lds, ldd: ldd,
			src: tensor.Data[int64](src[k]), rowPtr: tensor.Data[int64](rowPtr[k]), order: orderData(order[k], src[k])}
		gr := gatGradOut{dHs[k], dHd[k], dWe[k], dAttSrc[k], dAttDst[k], dAttEdge[k], dBias[k]}
		if graphDType(name, g) == tensor.F64 {
			runs = append(runs, gatGradPrep[float64](a, gr, g, hs[k], hd[k], attr[k], we[k], attSrc[k], attDst[k], attEdge[k]))
		} else {
			runs = append(runs, gatGradPrep[float32](a, gr, g, hs[k], hd[k], attr[k], we[k], attSrc[k], attDst[k], attEdge[k]))
		}
	}
	be.launch(func() {
		for _, run := range runs {
			run()
		}
	})
}

// gatGradOut are one relation's gradient tensors (nil: not wanted).
type gatGradOut struct{ hs, hd, we, attSrc, attDst, attEdge, bias *T }

// leakyGrad is the derivative of max(z, slope·z) at z: 1 where z wins,
// slope where slope·z does, (1 + slope)/2 at a tie (autograd's Maximum
// splits a tie evenly).
func leakyGrad(z, slope float64) float64 {
	switch s := slope * z; {
	case z > s:
		return 1
	case z < s:
		return slope
	}
	return (1 + slope) / 2
}

// gatGradPrep returns the run of one relation's GATMeanGrad: the softmax
// weights of each node's incoming edges computed again, in float64
// throughout (GATAggregate's F32 dot products run in float32 lanes, so
// these weights may differ from the forward's in their last bits), then
// the gradients accumulated in float64 and rounded once into the wanted
// tensors.
func gatGradPrep[F tensor.Float](a gatArgs, gr gatGradOut, g, hs, hd, attr, we, attSrc, attDst, attEdge *T) func() {
	var s stage
	gv := in[F](&s, g)
	xs, xd := rowsView[F](hs, a.lds), rowsView[F](hd, a.ldd)
	ea, w := in[F](&s, attr), in[F](&s, we)
	as, ad, ae := in[F](&s, attSrc), in[F](&s, attDst), in[F](&s, attEdge)
	H, C, nf := a.heads, a.c, a.f
	HC := H * C
	seen := make([]bool, a.g.Edges)
	return func() {
		s.load()
		must(kernels.CheckCSRValues("GATMeanGrad", a.src, a.rowPtr, a.order, a.g.Src, seen))
		v := make([]float64, H*nf) // the edge projection folded into attEdge
		gatEdgeVec(v, ae, w, H, C, nf)
		dhs := make([]float64, a.g.Src*HC)
		dhd := make([]float64, a.g.Dst*HC)
		das, dad := make([]float64, HC), make([]float64, HC)
		dv := make([]float64, H*nf)
		db := make([]float64, C)
		ga := make([]float64, C) // alpha·g[i, :]
		var z, wt, dal []float64
		for i := 0; i < a.g.Dst; i++ {
			for c := 0; c < C; c++ {
				ga[c] = a.alpha * float64(gv[i*C+c])
				db[c] += ga[c]
			}
			p0, p1 := int(a.rowPtr[i]), int(a.rowPtr[i+1])
			deg := p1 - p0
			if deg == 0 {
				continue
			}
			z, wt, dal = grow(z, deg), grow(wt, deg), grow(dal, deg)
			for h := 0; h < H; h++ {
				dterm := gdot64(xd[i*a.ldd+h*C:i*a.ldd+(h+1)*C], ad[h*C:(h+1)*C])
				m := math.Inf(-1)
				for q := 0; q < deg; q++ {
					k := int(a.order[p0+q])
					j := int(a.src[k])
					zk := gdot64(xs[j*a.lds+h*C:j*a.lds+(h+1)*C], as[h*C:(h+1)*C]) + dterm
					for f := 0; f < nf; f++ {
						zk += float64(ea[k*nf+f]) * v[h*nf+f]
					}
					z[q] = zk
					l := max(zk, a.slope*zk)
					wt[q] = l
					m = max(m, l)
				}
				var sum float64
				for q := 0; q < deg; q++ {
					wt[q] = math.Exp(wt[q] - m)
					sum += wt[q]
				}
				// α, dα = (1/H)·Σ_c ga[c]·hs[j,h,c], and the message's
				// gradient into hs.
				var t float64
				for q := 0; q < deg; q++ {
					wt[q] /= sum
					j := int(a.src[a.order[p0+q]])
					row := xs[j*a.lds+h*C : j*a.lds+(h+1)*C]
					var dot float64
					for c := 0; c < C; c++ {
						dot += ga[c] * float64(row[c])
					}
					dal[q] = dot / float64(H)
					t += wt[q] * dal[q]
					dst := dhs[j*HC+h*C : j*HC+(h+1)*C]
					for c := 0; c < C; c++ {
						dst[c] += wt[q] * ga[c] / float64(H)
					}
				}
				// Softmax and leaky max backward: dz per edge, then the
				// logit's operands.
				for q := 0; q < deg; q++ {
					k := int(a.order[p0+q])
					j := int(a.src[k])
					dz := wt[q] * (dal[q] - t) * leakyGrad(z[q], a.slope)
					if dz == 0 {
						continue
					}
					srow := xs[j*a.lds+h*C : j*a.lds+(h+1)*C]
					drow := xd[i*a.ldd+h*C : i*a.ldd+(h+1)*C]
					for c := 0; c < C; c++ {
						dhs[j*HC+h*C+c] += dz * float64(as[h*C+c])
						das[h*C+c] += dz * float64(srow[c])
						dhd[i*HC+h*C+c] += dz * float64(ad[h*C+c])
						dad[h*C+c] += dz * float64(drow[c])
					}
					for f := 0; f < nf; f++ {
						dv[h*nf+f] += dz * float64(ea[k*nf+f])
					}
				}
			}
		}
		put := func(t *T, v []float64) {
			if t != nil {
				o := tensor.Data[F](t)
				for i := range o {
					o[i] = F(v[i])
				}
			}
		}
		put(gr.hs, dhs)
		put(gr.hd, dhd)
		put(gr.attSrc, das)
		put(gr.attDst, dad)
		put(gr.bias, db)
		if gr.attEdge != nil || gr.we != nil {
			dae := make([]float64, HC)
			dwe := make([]float64, HC*nf)
			for h := 0; h < H; h++ {
				for c := 0; c < C; c++ {
					var t float64
					for f := 0; f < nf; f++ {
						t += dv[h*nf+f] * float64(w[(h*C+c)*nf+f])
						dwe[(h*C+c)*nf+f] = float64(ae[h*C+c]) * dv[h*nf+f]
					}
					dae[h*C+c] = t
				}
			}
			put(gr.attEdge, dae)
			put(gr.we, dwe)
		}
	}
}

// gdot64 returns Σ x[c]·y[c] in float64.
func gdot64[F tensor.Float](x, y []F) float64 {
	var t float64
	for c := range x {
		t += float64(x[c]) * float64(y[c])
	}
	return t
}

// grow returns s with at least n elements.
func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

var _ kernels.GatherMeanGradder = (*Backend)(nil)

// GatherMeanGrad implements kernels.GatherMeanGradder (F32, F64): each
// source row's sum in float64 over the destinations in node order, then
// rounded once into dx.
func (be *Backend) GatherMeanGrad(dx, g, src, rowPtr, order *T) {
	be.gatherMeanGrad("GatherMeanGrad", false, dx, g, src, rowPtr, order)
}

// GatherMeanGradAdd implements kernels.GatherMeanGradder: GatherMeanGrad's
// sums, each rounded to dx's dtype, added to dx.
func (be *Backend) GatherMeanGradAdd(dx, g, src, rowPtr, order *T) {
	be.gatherMeanGrad("GatherMeanGradAdd", true, dx, g, src, rowPtr, order)
}

// gatherMeanGrad is GatherMeanGrad, adding into dx when add is set.
func (be *Backend) gatherMeanGrad(name string, add bool, dx, g, src, rowPtr, order *T) {
	needCPU(name, dx, g, src, rowPtr, order)
	sizes, f, err := kernels.CheckGatherMeanGrad(name, dx, g, src, rowPtr, order)
	must(err)
	sv, rp, ov := tensor.Data[int64](src), tensor.Data[int64](rowPtr), orderData(order, src)
	if graphDType(name, g) == tensor.F64 {
		be.launch(gatherMeanGradPrep[float64](name, add, sizes, f, dx, g, sv, rp, ov))
	} else {
		be.launch(gatherMeanGradPrep[float32](name, add, sizes, f, dx, g, sv, rp, ov))
	}
}

func gatherMeanGradPrep[F tensor.Float](name string, add bool, sizes kernels.GraphCSR, nf int, dx, g *T, src, rowPtr, order []int64) func() {
	var s stage
	gv := in[F](&s, g)
	seen := make([]bool, sizes.Edges)
	return func() {
		s.load()
		must(kernels.CheckCSRValues(name, src, rowPtr, order, sizes.Src, seen))
		acc := make([]float64, sizes.Src*nf)
		for i := 0; i < sizes.Dst; i++ {
			p0, p1 := rowPtr[i], rowPtr[i+1]
			if p1 == p0 {
				continue
			}
			inv := 1 / float64(p1-p0)
			for p := p0; p < p1; p++ {
				j := int(src[order[p]])
				for f := 0; f < nf; f++ {
					acc[j*nf+f] += float64(gv[i*nf+f]) * inv
				}
			}
		}
		o := tensor.Data[F](dx)
		if add {
			for q := range o {
				o[q] += F(acc[q])
			}
			return
		}
		for q := range o {
			o[q] = F(acc[q])
		}
	}
}
