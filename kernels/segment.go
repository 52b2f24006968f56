package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// SegmentFamily is the segment op family, the message passing of graph
// networks: rows grouped by a segment id are reduced or normalised
// within their segment.
type SegmentFamily interface {
	// SegmentReduce reduces rows of src [E, F...] into dst [S, F...]
	// by segment id (segIDs [E], values in [0,S)) with Sum, Mean or Max.
	// Empty segments give 0. For Max, argmax (I64, dst's shape) receives
	// the winning row, or -1 for an empty segment; it is nil otherwise.
	SegmentReduce(op ReduceOp, dst, argmax, src, segIDs *T)
	// SegmentMaxBackward overwrites dsrc with dy routed to argmax.
	SegmentMaxBackward(dsrc, dy, argmax *T)
	// SegmentSoftmax normalises src [E, F...] with a softmax within each
	// segment, per feature (numSegments = S).
	SegmentSoftmax(dst, src, segIDs *T, numSegments int)
	// SegmentSoftmaxBackward computes dx = y*(dy - Σ_segment y·dy).
	SegmentSoftmaxBackward(dx, y, dy, segIDs *T, numSegments int)
}

// SegmentRows views a tensor t (named what) of shape [E, F...] as E rows
// of f elements (the product of the trailing axes).
func SegmentRows(name, what string, t *T) (e, f int, err error) {
	s := t.Shape()
	if len(s) < 1 {
		return 0, 0, fmt.Errorf("%s: %s has shape %v, want [E, ...]", name, what, s)
	}
	f = 1
	for _, d := range s[1:] {
		f *= d
	}
	return s[0], f, nil
}

// CheckSegmentIDs checks segment ids for e rows: e I64 or I32 values.
func CheckSegmentIDs(name string, segIDs *T, e int) error {
	if !isIndex(segIDs) {
		return indexError(name, "segIDs", segIDs)
	}
	if segIDs.Numel() != e {
		return fmt.Errorf("%s: segIDs has shape %v, want [%d]", name, segIDs.Shape(), e)
	}
	return nil
}

// CheckSegmentReduce checks a SegmentReduce and returns its rows e, row
// width f and segments s: op Sum, Mean or Max, float src [E, F...], dst
// [S, F...], argmax (Max only, optional) I64 of dst's shape, segment ids
// for the E rows.
func CheckSegmentReduce(name string, op ReduceOp, dst, argmax, src, segIDs *T) (e, f, s int, err error) {
	if op != Sum && op != Mean && op != Max {
		return 0, 0, 0, fmt.Errorf("%s: op must be sum, mean or max (src %v, dst %v)", name, src.Shape(), dst.Shape())
	}
	if e, f, err = SegmentRows(name, "src", src); err != nil {
		return 0, 0, 0, err
	}
	if dst.Rank() != src.Rank() || !tensor.SameShape(dst.Shape()[1:], src.Shape()[1:]) {
		return 0, 0, 0, fmt.Errorf("%s: src %v and dst %v differ past the first axis", name, src.Shape(), dst.Shape())
	}
	if op == Max && argmax != nil {
		if !tensor.SameShape(argmax.Shape(), dst.Shape()) {
			return 0, 0, 0, shapeError(name, "argmax", argmax, dst.Shape())
		}
		if argmax.DType() != tensor.I64 {
			return 0, 0, 0, fmt.Errorf("%s: argmax (shape %v) has dtype %v, want i64", name, argmax.Shape(), argmax.DType())
		}
	}
	if !src.DType().IsFloat() {
		return 0, 0, 0, floatError(name, "src", src)
	}
	if err := CheckSegmentIDs(name, segIDs, e); err != nil {
		return 0, 0, 0, err
	}
	return e, f, dst.Shape()[0], nil
}

// CheckSegmentMaxBackward checks a SegmentMaxBackward: argmax I64 of dy's
// shape, dsrc and dy alike past the first axis.
func CheckSegmentMaxBackward(name string, dsrc, dy, argmax *T) error {
	if !tensor.SameShape(argmax.Shape(), dy.Shape()) {
		return shapeError(name, "argmax", argmax, dy.Shape())
	}
	if dsrc.Rank() != dy.Rank() || dsrc.Rank() < 1 || !tensor.SameShape(dsrc.Shape()[1:], dy.Shape()[1:]) {
		return fmt.Errorf("%s: dsrc %v and dy %v differ past the first axis", name, dsrc.Shape(), dy.Shape())
	}
	if argmax.DType() != tensor.I64 {
		return fmt.Errorf("%s: argmax (shape %v) has dtype %v, want i64", name, argmax.Shape(), argmax.DType())
	}
	return nil
}

// CheckSegmentSoftmax checks a SegmentSoftmax (dy nil; x is src) or a
// SegmentSoftmaxBackward (x is y) and returns the rows e and row width f:
// dst and dy of x's shape [E, F...], a float x, numSegments ≥ 0 and
// segment ids for the E rows.
func CheckSegmentSoftmax(name string, dst, x, dy, segIDs *T, numSegments int) (e, f int, err error) {
	if !tensor.SameShape(dst.Shape(), x.Shape()) {
		return 0, 0, shapeError(name, "dst", dst, x.Shape())
	}
	if dy != nil {
		if !tensor.SameShape(dy.Shape(), x.Shape()) {
			return 0, 0, shapeError(name, "dy", dy, x.Shape())
		}
	}
	if e, f, err = SegmentRows(name, "x", x); err != nil {
		return 0, 0, err
	}
	if !x.DType().IsFloat() {
		return 0, 0, floatError(name, "x", x)
	}
	if numSegments < 0 {
		return 0, 0, fmt.Errorf("%s: negative numSegments %d (x %v)", name, numSegments, x.Shape())
	}
	if err := CheckSegmentIDs(name, segIDs, e); err != nil {
		return 0, 0, err
	}
	return e, f, nil
}
