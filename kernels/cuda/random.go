//go:build cuda

package cuda

import (
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The random family (src/random.cu): dropout with the CPU backend's
// counter-based draw.

// Dropout implements kernels.Backend.
func (b *Backend) Dropout(dst, mask, x, state *T, p float64) {
	must(b.d.Dropout(dst, mask, x, state, p))
}

// Dropout zeroes each element of x with probability p and scales the
// rest by 1/(1−p) into dst; mask (optional) receives 0 or 1/(1−p). state
// is an I64 [2] device tensor {seed, counter}: the draw of element i is
// the CPU backend's u(seed, counter, i), so both backends drop the same
// elements, and counter is advanced on the device after the launch (a
// captured step draws a fresh mask on every replay).
func (d *Device) Dropout(dst, mask, x, state *tensor.Tensor, p float64) error {
	const op = "Dropout"
	if err := checked(kernels.CheckDropout(op, dst, mask, x, state, p)); err != nil {
		return err
	}
	dt := x.DType()
	name, err := floatKernel(op, "dropout", dt)
	if err != nil {
		return err
	}
	pd, err := d.ptrOf(op, "dst", dst, dt)
	if err != nil {
		return err
	}
	pm, err := d.optPtr(op, "mask", mask, dt)
	if err != nil {
		return err
	}
	px, err := d.ptrOf(op, "x", x, dt)
	if err != nil {
		return err
	}
	ps, err := d.ptrOf(op, "state", state, tensor.I64)
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	if err := d.launch1D(name, int64(x.Numel()), a.ptr(pd).ptr(pm).ptr(px).ptr(ps).f64(p).i64(int64(x.Numel()))); err != nil {
		return err
	}
	fn, err := d.kernel("dropout_advance")
	if err != nil {
		return err
	}
	var b args
	return launchRaw(fn, [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, d.stream, b.ptr(ps))
}
