package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

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

// CheckIndexSelect checks an IndexSelect and returns the axis resolved:
// index [K] of I64 or I32, dst of src's shape with that axis of size K
// and of src's dtype.
func CheckIndexSelect(name string, dst, src *T, axis int, index *T) (int, error) {
	a, err := NormAxis(name, axis, src.Shape())
	if err != nil {
		return 0, err
	}
	if !isIndex(index) {
		return 0, indexError(name, "index", index)
	}
	if err := sliceShape(name, "src", src, "dst", dst, a, axis, index); err != nil {
		return 0, err
	}
	if dst.DType() != src.DType() {
		return 0, fmt.Errorf("%s: dst (shape %v) is %v, src (shape %v) is %v", name, dst.Shape(), dst.DType(), src.Shape(), src.DType())
	}
	return a, nil
}

// CheckIndexAdd checks an IndexAdd and returns the axis resolved: index
// [K] of I64 or I32, src of dst's shape with that axis of size K, a
// float dst.
func CheckIndexAdd(name string, dst *T, axis int, index, src *T) (int, error) {
	a, err := NormAxis(name, axis, dst.Shape())
	if err != nil {
		return 0, err
	}
	if !isIndex(index) {
		return 0, indexError(name, "index", index)
	}
	if err := sliceShape(name, "dst", dst, "src", src, a, axis, index); err != nil {
		return 0, err
	}
	if !dst.DType().IsFloat() {
		return a, floatError(name, "dst", dst)
	}
	return a, nil
}

// sliceShape checks that index is [K] and that sel (named selName) has
// full's shape with axis a (given as axis) of size K.
func sliceShape(name, fullName string, full *T, selName string, sel *T, a, axis int, index *T) error {
	if index.Rank() != 1 {
		return fmt.Errorf("%s: index has shape %v, want [K]", name, index.Shape())
	}
	fs, ss := full.Shape(), sel.Shape()
	ok := len(fs) == len(ss)
	for i := 0; ok && i < len(fs); i++ {
		if i == a {
			ok = ss[i] == index.Numel()
		} else {
			ok = ss[i] == fs[i]
		}
	}
	if !ok {
		want := append([]int(nil), fs...)
		want[a] = index.Numel()
		return fmt.Errorf("%s: %s %v with index %v along axis %d gives %s %v, %s has shape %v", name, fullName, fs, index.Shape(), axis, selName, want, selName, ss)
	}
	return nil
}

// CheckGather checks a Gather and returns the axis resolved: index of
// I64 or I32 and dst of index's shape, index of src's rank and fitting
// inside src off the axis (and inside dst), dst of src's dtype.
func CheckGather(name string, dst, src *T, axis int, index *T) (int, error) {
	a, err := NormAxis(name, axis, src.Shape())
	if err != nil {
		return 0, err
	}
	if !isIndex(index) {
		return 0, indexError(name, "index", index)
	}
	if !tensor.SameShape(dst.Shape(), index.Shape()) {
		return 0, shapeError(name, "dst (index shape)", dst, index.Shape())
	}
	if err := gatherShapes(name, src, index, a, "src", dst, "dst"); err != nil {
		return 0, err
	}
	if dst.DType() != src.DType() {
		return 0, fmt.Errorf("%s: dst (shape %v) is %v, src (shape %v) is %v", name, dst.Shape(), dst.DType(), src.Shape(), src.DType())
	}
	return a, nil
}

// CheckScatterAdd checks a ScatterAdd and returns the axis resolved:
// index of I64 or I32, of dst's rank, fitting inside dst off the axis
// and inside src, a float dst.
func CheckScatterAdd(name string, dst *T, axis int, index, src *T) (int, error) {
	a, err := NormAxis(name, axis, dst.Shape())
	if err != nil {
		return 0, err
	}
	if !isIndex(index) {
		return 0, indexError(name, "index", index)
	}
	if err := gatherShapes(name, dst, index, a, "dst", src, "src"); err != nil {
		return 0, err
	}
	if !dst.DType().IsFloat() {
		return a, floatError(name, "dst", dst)
	}
	return a, nil
}

// gatherShapes checks torch.gather/scatter_add shapes: index has the rank
// of both tensors and fits inside them (inside big off the axis).
func gatherShapes(name string, big, index *T, axis int, bigName string, other *T, otherName string) error {
	if index.Rank() != big.Rank() || other.Rank() != big.Rank() {
		return fmt.Errorf("%s: ranks differ: %s %v, index %v, %s %v", name, bigName, big.Shape(), index.Shape(), otherName, other.Shape())
	}
	for d, s := range index.Shape() {
		if (d != axis && s > big.Shape()[d]) || s > other.Shape()[d] {
			return fmt.Errorf("%s: index %v does not fit %s %v and %s %v along axis %d", name, index.Shape(), bigName, big.Shape(), otherName, other.Shape(), d)
		}
	}
	return nil
}
