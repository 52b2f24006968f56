//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/tensor"
)

// optPtr is ptrOf for an optional operand (0 when t is nil).
func (d *Device) optPtr(op, what string, t *tensor.Tensor, dt tensor.DType) (cu.DevicePtr, error) {
	if t == nil {
		return 0, nil
	}
	return d.ptrOf(op, what, t, dt)
}

// Dropout zeroes each element of x with probability p and scales the
// rest by 1/(1−p) into dst; mask (optional) receives 0 or 1/(1−p). state
// is an I64 [2] device tensor {seed, counter}: the draw of element i is
// the CPU backend's u(seed, counter, i), so both backends drop the same
// elements, and counter is advanced on the device after the launch (a
// captured step draws a fresh mask on every replay).
func (d *Device) Dropout(dst, mask, x, state *tensor.Tensor, p float64) error {
	const op = "Dropout"
	if !(p >= 0 && p <= 1) {
		return fmt.Errorf("cuda: %s: p = %v outside [0, 1]", op, p)
	}
	dt := x.DType()
	name, err := floatKernel(op, "dropout", dt)
	if err != nil {
		return err
	}
	if err := sameShape(op, dst, x); err != nil {
		return err
	}
	if mask != nil {
		if err := sameShape(op, mask, x); err != nil {
			return err
		}
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
	if state.Numel() != 2 {
		return fmt.Errorf("cuda: %s: state has %d elements, want 2 {seed, counter}", op, state.Numel())
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

// LayerNorm normalises x viewed as [M, n] over its last n elements,
// then applies w and b ([n], optional); mean and rstd (F32 [M]) are
// saved for the backward pass.
func (d *Device) LayerNorm(y, mean, rstd, x, w, b *tensor.Tensor, n int, eps float64) error {
	const op = "LayerNorm"
	dt := x.DType()
	name, err := floatKernel(op, "layernorm_fwd", dt)
	if err != nil {
		return err
	}
	rows, err := lnRows(op, x, n)
	if err != nil {
		return err
	}
	if err := sameShape(op, y, x); err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"y", "mean", "rstd", "x", "w", "b"}, []*tensor.Tensor{y, mean, rstd, x, w, b},
		[]tensor.DType{dt, tensor.F32, tensor.F32, dt, dt, dt}, []bool{false, false, false, false, true, true})
	if err != nil {
		return err
	}
	if mean.Numel() != rows || rstd.Numel() != rows || (w != nil && w.Numel() != n) || (b != nil && b.Numel() != n) {
		return fmt.Errorf("cuda: %s: x %v over %d: mean %v, rstd %v, w and b of %d", op, x.Shape(), n, mean.Shape(), rstd.Shape(), n)
	}
	release := d.enter()
	defer release()
	var a args
	for _, p := range ptrs {
		a.ptr(p)
	}
	return d.launchRows(name, rows, a.i64(int64(n)).f32(float32(eps)))
}

// LayerNormBackward fills the non-nil of dx, dw, db (overwritten) from
// dy and the forward's x, mean, rstd and w (optional).
func (d *Device) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w *tensor.Tensor, n int) error {
	const op = "LayerNormBackward"
	dt := x.DType()
	rows, err := lnRows(op, x, n)
	if err != nil {
		return err
	}
	ptrs, err := d.ptrList(op, []string{"dx", "dw", "db", "dy", "x", "mean", "rstd", "w"},
		[]*tensor.Tensor{dx, dw, db, dy, x, mean, rstd, w},
		[]tensor.DType{dt, dt, dt, dt, dt, tensor.F32, tensor.F32, dt}, []bool{true, true, true, false, false, false, false, true})
	if err != nil {
		return err
	}
	pdx, pdw, pdb, pdy, px, pmean, prstd, pw := ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], ptrs[6], ptrs[7]
	release := d.enter()
	defer release()
	if dx != nil {
		name, err := floatKernel(op, "layernorm_bwd_dx", dt)
		if err != nil {
			return err
		}
		var a args
		if err := d.launchRows(name, rows, a.ptr(pdx).ptr(pdy).ptr(px).ptr(pmean).ptr(prstd).ptr(pw).i64(int64(n))); err != nil {
			return err
		}
	}
	if dw != nil || db != nil {
		name, err := floatKernel(op, "layernorm_bwd_dwdb", dt)
		if err != nil {
			return err
		}
		var a args
		return d.launch1D(name, int64(n), a.ptr(pdw).ptr(pdb).ptr(pdy).ptr(px).ptr(pmean).ptr(prstd).i64(int64(rows)).i64(int64(n)))
	}
	return nil
}

// lnRows checks that x's trailing elements divide into rows of n.
func lnRows(op string, x *tensor.Tensor, n int) (int, error) {
	if n <= 0 || x.Numel()%n != 0 {
		return 0, fmt.Errorf("cuda: %s: x %v does not split into rows of %d", op, x.Shape(), n)
	}
	return x.Numel() / n, nil
}

// ptrList checks a list of operands (optional ones may be nil) and
// returns their addresses.
func (d *Device) ptrList(op string, names []string, ts []*tensor.Tensor, dts []tensor.DType, optional []bool) ([]cu.DevicePtr, error) {
	out := make([]cu.DevicePtr, len(ts))
	for i, t := range ts {
		if t == nil && optional[i] {
			continue
		}
		p, err := d.ptrOf(op, names[i], t, dts[i])
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}
