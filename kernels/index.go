package kernels

// IndexFamily is the indexing op family: selection and accumulation of
// slices along an axis by an index tensor, and torch's gather and
// scatter-add.
type IndexFamily interface {
	// IndexSelect picks slices of src along axis by index ([K], I64 or
	// I32); dst has src's shape with that axis of size K. Embedding
	// lookup is IndexSelect on axis 0.
	IndexSelect(dst, src *T, axis int, index *T)
	// IndexAdd accumulates: dst.select(axis, index[k]) += src.select(axis, k).
	IndexAdd(dst *T, axis int, index, src *T)
	// Gather follows torch.gather: dst[i][j] = src[i][index[i][j]] for
	// axis 1 (and likewise for any axis); index has dst's shape.
	Gather(dst, src *T, axis int, index *T)
	// ScatterAdd follows torch.scatter_add_: dst[index[i][j]][j] +=
	// src[i][j] for axis 0 (likewise for any axis). dst accumulates.
	ScatterAdd(dst *T, axis int, index, src *T)
}
