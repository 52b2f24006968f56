package kernels

import "fmt"

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
