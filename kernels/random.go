package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// RandomFamily is the op family that draws random numbers: dropout, with
// a counter-based draw so that a captured step replays with fresh masks.
type RandomFamily interface {
	// Dropout zeroes elements with probability p and scales the rest by
	// 1/(1-p). mask (x's dtype) receives 0 or 1/(1-p). state is an I64
	// [2] tensor {seed, counter}: the mask is a pure function of
	// (seed, counter, element index), and the kernel advances counter,
	// so a captured step draws a fresh mask on every replay.
	Dropout(dst, mask, x, state *T, p float64)
}

// CheckDropout checks a Dropout: dst and mask (optional) of x's shape,
// state an I64 [2] {seed, counter} and p in [0, 1].
func CheckDropout(name string, dst, mask, x, state *T, p float64) error {
	if !tensor.SameShape(dst.Shape(), x.Shape()) {
		return shapeError(name, "dst", dst, x.Shape())
	}
	if mask != nil {
		if !tensor.SameShape(mask.Shape(), x.Shape()) {
			return shapeError(name, "mask", mask, x.Shape())
		}
	}
	if state.DType() != tensor.I64 || state.Numel() != 2 {
		return fmt.Errorf("%s: state (shape %v, %v) must be an i64 [2] tensor {seed, counter} (x %v)", name, state.Shape(), state.DType(), x.Shape())
	}
	if !(p >= 0 && p <= 1) {
		return fmt.Errorf("%s: p = %v outside [0, 1] (x %v)", name, p, x.Shape())
	}
	return nil
}
