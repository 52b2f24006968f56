package kernels

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
