package kernels

// ShapeFamily is the shape op family: joining tensors along an axis and
// padding them.
type ShapeFamily interface {
	// Concat joins srcs (any strides) along axis into dst.
	Concat(dst *T, srcs []*T, axis int)
	// Pad writes x into dst with pads[2i], pads[2i+1] elements of value
	// before and after axis i (len(pads) = 2·rank).
	Pad(dst, x *T, pads []int, value float64)
}
