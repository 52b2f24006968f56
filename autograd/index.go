package autograd

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// Index tensors (I64 or I32) never get gradients. Out-of-range indices
// are reported by the kernels.

// Embedding looks up rows of weight [V,D] by idx (any shape) and returns
// idx.shape + [D]. The weight gradient accumulates repeated rows.
func Embedding(weight *Var, idx *tensor.Tensor) *Var {
	checkFloat("embedding", weight)
	checkIndex("embedding", idx)
	ws := weight.Shape()
	if len(ws) != 2 {
		panic(fmt.Sprintf("autograd: embedding: weight shape %v (want [V,D]) with index shape %v", ws, idx.Shape()))
	}
	k := idx.Numel()
	flat := reshapeT(idx, k)
	wv := contig(weight.Value)
	out := alloc(wv, wv.DType(), k, ws[1])
	backendOf(out).IndexSelect(out, wv, 0, flat)
	outShape := append(append([]int(nil), idx.Shape()...), ws[1])
	return result("embedding", out.Reshape(outShape...), []*Var{weight}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			dw := zerosLike(wv)
			backendOf(dw).IndexAdd(dw, 0, flat, reshapeT(g, k, ws[1]))
			return []*tensor.Tensor{dw}
		}
	})
}

// checkIndexVec panics unless idx is a rank-1 index tensor.
func checkIndexVec(op string, xs []int, idx *tensor.Tensor) {
	checkIndex(op, idx)
	if idx.Rank() != 1 {
		panic(fmt.Sprintf("autograd: %s: index shape %v must be rank 1 (input shape %v)", op, idx.Shape(), xs))
	}
}

// IndexSelect picks slices of x along axis by idx ([K]); the result has
// x's shape with that axis of size K.
func IndexSelect(x *Var, axis int, idx *tensor.Tensor) *Var {
	checkFloat("index_select", x)
	xs := x.Shape()
	checkIndexVec("index_select", xs, idx)
	a := normAxis("index_select", xs, axis)
	os := append([]int(nil), xs...)
	os[a] = idx.Numel()
	xv, iv := contig(x.Value), contig(idx)
	out := alloc(xv, xv.DType(), os...)
	backendOf(out).IndexSelect(out, xv, a, iv)
	return result("index_select", out, []*Var{x}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			dx := zerosLike(xv)
			backendOf(dx).IndexAdd(dx, a, iv, contig(g))
			return []*tensor.Tensor{dx}
		}
	})
}

// checkGatherShape validates an index of torch.gather/scatter_add form:
// same rank as x, and no larger than x off the axis.
func checkGatherShape(op string, xs, is []int, a int) {
	if len(is) != len(xs) {
		panic(fmt.Sprintf("autograd: %s: index shape %v and input shape %v differ in rank", op, is, xs))
	}
	for d := range xs {
		if d != a && is[d] > xs[d] {
			panic(fmt.Sprintf("autograd: %s: index shape %v exceeds input shape %v off axis %d", op, is, xs, a))
		}
	}
}

// Gather follows torch.gather: out[i][j] = x[i][idx[i][j]] for axis 1 (and
// likewise for any axis); the result has idx's shape.
func Gather(x *Var, axis int, idx *tensor.Tensor) *Var {
	checkFloat("gather", x)
	checkIndex("gather", idx)
	xs := x.Shape()
	a := normAxis("gather", xs, axis)
	checkGatherShape("gather", xs, idx.Shape(), a)
	xv, iv := contig(x.Value), contig(idx)
	out := alloc(xv, xv.DType(), iv.Shape()...)
	backendOf(out).Gather(out, xv, a, iv)
	return result("gather", out, []*Var{x}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			dx := zerosLike(xv)
			backendOf(dx).ScatterAdd(dx, a, iv, contig(g))
			return []*tensor.Tensor{dx}
		}
	})
}

// ScatterAdd returns a copy of dst with src added at idx along axis, as
// torch.scatter_add does in place: out[idx[i][j]][j] += src[i][j] for
// axis 0. idx and src have the same shape. dst is not modified.
func ScatterAdd(dst *Var, axis int, idx *tensor.Tensor, src *Var) *Var {
	checkFloat("scatter_add", dst, src)
	checkIndex("scatter_add", idx)
	ds := dst.Shape()
	a := normAxis("scatter_add", ds, axis)
	if !tensor.SameShape(idx.Shape(), src.Shape()) {
		panic(fmt.Sprintf("autograd: scatter_add: index shape %v and source shape %v differ (destination shape %v)", idx.Shape(), src.Shape(), ds))
	}
	checkGatherShape("scatter_add", ds, idx.Shape(), a)
	p := promote(dst, src)
	dst, src = p[0], p[1]
	iv := contig(idx)
	out := alloc(dst.Value, dst.DType(), ds...)
	be := backendOf(out)
	be.Copy(out, dst.Value)
	be.ScatterAdd(out, a, iv, contig(src.Value))
	return result("scatter_add", out, []*Var{dst, src}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			var dsrc *tensor.Tensor
			g = contig(g)
			if needs(src) {
				dsrc = alloc(g, g.DType(), iv.Shape()...)
				backendOf(dsrc).Gather(dsrc, g, a, iv)
			}
			return []*tensor.Tensor{g, dsrc}
		}
	})
}

// IndexAdd returns a copy of dst with src's slices added along axis at
// idx ([K]): out.select(axis, idx[k]) += src.select(axis, k). dst is not
// modified.
func IndexAdd(dst *Var, axis int, idx *tensor.Tensor, src *Var) *Var {
	checkFloat("index_add", dst, src)
	ds := dst.Shape()
	checkIndexVec("index_add", ds, idx)
	a := normAxis("index_add", ds, axis)
	want := append([]int(nil), ds...)
	want[a] = idx.Numel()
	if !tensor.SameShape(src.Shape(), want) {
		panic(fmt.Sprintf("autograd: index_add: source shape %v does not match destination shape %v with index shape %v (want %v)", src.Shape(), ds, idx.Shape(), want))
	}
	p := promote(dst, src)
	dst, src = p[0], p[1]
	iv := contig(idx)
	out := alloc(dst.Value, dst.DType(), ds...)
	be := backendOf(out)
	be.Copy(out, dst.Value)
	be.IndexAdd(out, a, iv, contig(src.Value))
	return result("index_add", out, []*Var{dst, src}, 1, func() backwardFunc {
		return func(g *tensor.Tensor) []*tensor.Tensor {
			var dsrc *tensor.Tensor
			g = contig(g)
			if needs(src) {
				dsrc = alloc(g, g.DType(), want...)
				backendOf(dsrc).IndexSelect(dsrc, g, a, iv)
			}
			return []*tensor.Tensor{g, dsrc}
		}
	})
}
