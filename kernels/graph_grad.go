package kernels

import "fmt"

// GATMeanGradder is an optional Backend interface: the backward of a
// GATMean (GraphMultiAggregator), for training a heterogeneous GAT layer
// with its forward fused. Relation r adds r_r/R to out (R relations),
// r_r[i,c] = bias[c] + (1/H)·Σ_h Σ_k α[k,h]·hs[j,h,c] over node i's
// incoming edges k = j→i, α the softmax over them of l = max(z, slope·z),
// z = Σ_c hs[j,h,c]·attSrc[h,c] + Σ_c hd[i,h,c]·attDst[h,c] + Σ_f
// attr[k,f]·Σ_c attEdge[h,c]·we[h·C+c, f] (GraphAggregator). Given g
// [Nd, C], the gradient of out, GATMeanGrad writes each relation's
// gradients of Σ g·out with respect to hs, hd, we, attSrc, attDst,
// attEdge and bias (attr gets none: the graph's edge features are
// constants). Where z = slope·z (z = 0) the derivative of the leaky max
// is (1 + slope)/2, as autograd's Maximum splits a tie. α is computed
// again from the operands, which must hold what the forward read.
//
// The gradients come one entry per relation, nil where one is not
// wanted, each of its operand's shape (dHs [Ns, H·C], dHd [Nd, H·C], dWe
// [H·C, F], dAttSrc, dAttDst and dAttEdge as the attention vectors, dBias
// [C]), contiguous, of g's dtype. They are written, not accumulated;
// none may share memory with another or with an operand.
type GATMeanGradder interface {
	GATMeanGrad(dHs, dHd, dWe, dAttSrc, dAttDst, dAttEdge, dBias []*T, g *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int, slope float64)
	// GATMeanGradFits reports whether GATMeanGrad runs for heads, width
	// C and edge attribute width F (CUDA bounds a block's shared
	// memory); a caller takes other ops where it does not.
	GATMeanGradFits(heads, c, f int) bool
}

// CheckGATMeanGrad checks a GATMeanGradder call: the operands as
// CheckGATAggregate checks each relation (with g as every relation's
// out), every gradient list of one entry per relation, and each gradient
// given of its operand's shape, contiguous, of g's dtype, sharing memory
// with no operand or other gradient. It returns each relation's sizes.
func CheckGATMeanGrad(name string, dHs, dHd, dWe, dAttSrc, dAttDst, dAttEdge, dBias []*T, g *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int, slope float64) ([]GraphCSR, error) {
	r, err := CheckGATMean(name, g, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads)
	if err != nil {
		return nil, err
	}
	sizes := make([]GraphCSR, r)
	for k := 0; k < r; k++ {
		if sizes[k], err = CheckGATAggregate(fmt.Sprintf("%s: relation %d", name, k), g, hs[k], hd[k], attr[k], we[k], attSrc[k], attDst[k], attEdge[k], bias[k], src[k], rowPtr[k], order[k], heads, slope, 1); err != nil {
			return nil, err
		}
	}
	grads := []struct {
		what string
		l    []*T
		like []*T
	}{{"Hs", dHs, hs}, {"Hd", dHd, hd}, {"We", dWe, we}, {"AttSrc", dAttSrc, attSrc}, {"AttDst", dAttDst, attDst}, {"AttEdge", dAttEdge, attEdge}, {"Bias", dBias, bias}}
	var outs, ins []*T
	for _, gr := range grads {
		if len(gr.l) != r {
			return nil, fmt.Errorf("%s: %d %s gradients for %d relations", name, len(gr.l), gr.what, r)
		}
		for k, t := range gr.l {
			if t == nil {
				continue
			}
			want := gr.like[k].Shape()
			if !t.IsContiguous() || t.DType() != g.DType() || len(t.Shape()) != len(want) {
				return nil, fmt.Errorf("%s: relation %d: %s gradient is %v %v (contiguous %v), want contiguous %v %v", name, k, gr.what, t.DType(), t.Shape(), t.IsContiguous(), g.DType(), want)
			}
			for i := range want {
				if t.Shape()[i] != want[i] {
					return nil, fmt.Errorf("%s: relation %d: %s gradient has shape %v, want %v", name, k, gr.what, t.Shape(), want)
				}
			}
			outs = append(outs, t)
		}
	}
	ins = append(ins, g)
	for _, l := range [][]*T{hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order} {
		ins = append(ins, l...)
	}
	if err := checkWritesApart(name, outs, ins); err != nil {
		return nil, err
	}
	return sizes, nil
}

// GatherMeanGradder is an optional Backend interface: the backward of
// GraphAggregator.GatherMean, for training a GraphSAGE layer with its
// gather fused. Given g [Nd, F], the gradient of GatherMean's out, it
// writes dx [Ns, F]: dx[j, :] = Σ over the edges k = j→i of g[i, :]/n_i,
// n_i node i's incoming edges (0 for a source without outgoing edges).
// dx is written, not accumulated, and shares memory with no operand.
// GatherMeanGradAdd adds the same sums into dx instead (autograd's
// GatherMean adds its input's gradient into the sum that the input's
// other readers started); its values are those of GatherMeanGrad's dx
// added to dx's.
type GatherMeanGradder interface {
	GatherMeanGrad(dx, g, src, rowPtr, order *T)
	GatherMeanGradAdd(dx, g, src, rowPtr, order *T)
}

// CheckGatherMeanGrad checks a GatherMeanGradder call as CheckGatherMean
// checks the forward (dx as x, g as out), and that dx shares memory with
// no operand. It returns the sizes and F.
func CheckGatherMeanGrad(name string, dx, g, src, rowPtr, order *T) (GraphCSR, int, error) {
	sizes, f, err := CheckGatherMean(name, g, dx, src, rowPtr, order)
	if err != nil {
		return sizes, 0, fmt.Errorf("%w (here out is g, the gradient, and x is dx)", err)
	}
	if err := checkWritesApart(name, []*T{dx}, []*T{g, src, rowPtr, order}); err != nil {
		return sizes, 0, err
	}
	return sizes, f, nil
}
