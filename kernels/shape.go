package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// ShapeFamily is the shape op family: joining tensors along an axis and
// padding them.
type ShapeFamily interface {
	// Concat joins srcs (any strides) along axis into dst.
	Concat(dst *T, srcs []*T, axis int)
	// Pad writes x into dst with pads[2i], pads[2i+1] elements of value
	// before and after axis i (len(pads) = 2·rank).
	Pad(dst, x *T, pads []int, value float64)
}

// CheckConcat checks a Concat and returns the axis resolved: every
// source of dst's rank and of dst's shape off the axis, their sizes
// along it adding up to dst's.
func CheckConcat(name string, dst *T, srcs []*T, axis int) (int, error) {
	ds := dst.Shape()
	a, err := NormAxis(name, axis, ds)
	if err != nil {
		return 0, err
	}
	bad := func() (int, error) {
		shapes := make([][]int, len(srcs))
		for i, t := range srcs {
			if t != nil {
				shapes[i] = t.Shape()
			}
		}
		return 0, fmt.Errorf("%s: sources %v do not concatenate into %v along axis %d", name, shapes, ds, axis)
	}
	total := 0
	for _, t := range srcs {
		if t == nil || t.Rank() != len(ds) {
			return bad()
		}
		for d, s := range t.Shape() {
			if d != a && s != ds[d] {
				return bad()
			}
		}
		total += t.Shape()[a]
	}
	if total != ds[a] {
		return bad()
	}
	return a, nil
}

// ConcatManyer is implemented by a backend that joins several
// concatenations in one launch (CUDA: copy_blocks copies blocks bound
// for several destinations). It is an optional capability (check with a
// type assertion).
type ConcatManyer interface {
	// ConcatMany is Concat(dsts[i], the next counts[i] sources of srcs,
	// axis) for every i: the same bytes, in one launch where the sources
	// are laid out as rows (on CUDA up to 32 sources a launch). No
	// destination may share memory with a source or another destination.
	ConcatMany(dsts []*T, srcs []*T, counts []int, axis int)
}

// CheckConcatMany checks a ConcatMany: one positive count per
// destination, adding up to the sources, and each group a Concat
// (CheckConcat); it returns the axis each group resolves it to.
func CheckConcatMany(name string, dsts, srcs []*T, counts []int, axis int) ([]int, error) {
	if len(counts) != len(dsts) {
		return nil, fmt.Errorf("%s: %d counts for %d destinations", name, len(counts), len(dsts))
	}
	axes := make([]int, len(dsts))
	off := 0
	for i, n := range counts {
		if n <= 0 || off+n > len(srcs) {
			return nil, fmt.Errorf("%s: counts %v for %d sources", name, append([]int(nil), counts...), len(srcs))
		}
		if dsts[i] == nil {
			return nil, fmt.Errorf("%s: destination %d is nil", name, i)
		}
		a, err := CheckConcat(name, dsts[i], srcs[off:off+n], axis)
		if err != nil {
			return nil, fmt.Errorf("%w (destination %d)", err, i)
		}
		axes[i] = a
		off += n
	}
	if off != len(srcs) {
		return nil, fmt.Errorf("%s: counts %v for %d sources", name, append([]int(nil), counts...), len(srcs))
	}
	// The groups run in no set order on CUDA (one launch copies blocks
	// bound for every destination): no destination may share memory with
	// a source or with another destination.
	if err := checkWritesApart(name, dsts, srcs); err != nil {
		return nil, err
	}
	return axes, nil
}

// ZeroManyer is implemented by a backend that zeroes several tensors in
// one launch (CUDA: copy_blocks copies from a block of zeros into each).
// It is an optional capability (check with a type assertion).
type ZeroManyer interface {
	// ZeroMany is Fill(dst, 0) for every dst (contiguous, any dtype):
	// the same bytes, in one launch on CUDA (up to 16 tensors a launch).
	ZeroMany(dsts []*T)
}

// CheckZeroMany checks a ZeroMany: every destination a contiguous tensor
// of a valid dtype.
func CheckZeroMany(name string, dsts []*T) error {
	for i, d := range dsts {
		if d == nil {
			return fmt.Errorf("%s: destination %d is nil", name, i)
		}
		if d.DType() == tensor.Invalid || !d.IsContiguous() {
			return fmt.Errorf("%s: destination %d (%v, %v) must be a contiguous tensor of a valid dtype", name, i, d.DType(), d.Shape())
		}
	}
	return nil
}

// CheckPad checks a Pad: two non-negative pads per axis of x and dst of
// x's rank with each axis padded.
func CheckPad(name string, dst, x *T, pads []int) error {
	xs, ds := x.Shape(), dst.Shape()
	ok := len(pads) == 2*len(xs) && len(ds) == len(xs)
	for d := 0; ok && d < len(xs); d++ {
		ok = pads[2*d] >= 0 && pads[2*d+1] >= 0 && ds[d] == xs[d]+pads[2*d]+pads[2*d+1]
	}
	if !ok {
		return fmt.Errorf("%s: x %v with pads %v does not give dst %v", name, xs, append([]int(nil), pads...), ds)
	}
	return nil
}
