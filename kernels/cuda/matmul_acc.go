//go:build cuda

package cuda

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// kernels.GradAccumulator on the device: MatMulAdd is MatMul's cuBLAS
// call with β = 1, which adds the product to dst in the GEMM itself;
// SumRowsAdd is one launch of sum_rows_add (src/matmul.cu). Both take F32
// alone (the interface's dtypes are F32 and F64, and the device has no
// F64 kernels).

var _ kernels.GradAccumulator = (*Backend)(nil)

// MatMulAdd implements kernels.GradAccumulator (F32, in the precision
// set by SetMatmulPrecision).
func (b *Backend) MatMulAdd(dst, x, y *T, transA, transB bool) {
	must(b.d.MatMulAdd(dst, x, y, transA, transB, b.precision()))
}

// SumRowsAdd implements kernels.GradAccumulator (F32).
func (b *Backend) SumRowsAdd(dst, x *T) { must(b.d.SumRowsAdd(dst, x)) }

// MatMulAdd adds op(a)·op(b) to dst for 2-D F32 operands (contiguous, as
// stored before op) in one cuBLAS call with β = 1.
func (d *Device) MatMulAdd(dst, a, b *tensor.Tensor, transA, transB bool, prec Precision) error {
	const op = "MatMulAdd"
	dims, err := kernels.CheckMatMul(op, dst, a, b, nil, transA, transB)
	if err := checked(err); err != nil {
		return err
	}
	if dims.BatchedA || dims.BatchedB || len(dst.Shape()) != 2 {
		return fmt.Errorf("cuda: %s: a %v, b %v and dst %v: want 2-D operands", op, a.Shape(), b.Shape(), dst.Shape())
	}
	if err := onlyF32(op, dst, a, b); err != nil {
		return err
	}
	pd, err := d.ptrOf(op, "dst", dst, tensor.F32)
	if err != nil {
		return err
	}
	pa, err := d.ptrOf(op, "a", a, tensor.F32)
	if err != nil {
		return err
	}
	pb, err := d.ptrOf(op, "b", b, tensor.F32)
	if err != nil {
		return err
	}
	m, n, k := dims.M, dims.N, dims.K
	if m == 0 || n == 0 || k == 0 {
		return nil // dst += an empty sum
	}
	h, err := d.blasHandle()
	if err != nil {
		return err
	}
	as, bs := a.Shape(), b.Shape()
	release := d.enter()
	defer release()
	return h.gemmRowMajorBeta(transA, transB, m, n, k, pa, as[1], 0, pb, bs[1], 0, pd, n, 0, 1, dataF32, prec, 1)
}

// SumRowsAdd adds the column sums of x [M, N] to dst [N] (F32, both
// contiguous): each column summed in fp64, rounded once, then added in
// fp32, as Reduce (Sum over axis 0) and Binary Add give it.
func (d *Device) SumRowsAdd(dst, x *tensor.Tensor) error {
	const op = "SumRowsAdd"
	xs := x.Shape()
	if len(xs) != 2 {
		return fmt.Errorf("cuda: %s: x has shape %v, want [M, N]", op, xs)
	}
	if err := checked(kernels.CheckSameShape(op, "dst", dst, xs[1:])); err != nil {
		return err
	}
	if err := onlyF32(op, dst, x); err != nil {
		return err
	}
	pd, err := d.ptrOf(op, "dst", dst, tensor.F32)
	if err != nil {
		return err
	}
	px, err := d.ptrOf(op, "x", x, tensor.F32)
	if err != nil {
		return err
	}
	m, n := xs[0], xs[1]
	if m == 0 || n == 0 {
		return nil
	}
	fn, err := d.kernel("sum_rows_add_f32")
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	a.ptr(pd).ptr(px).i64(int64(m)).i64(int64(n))
	// 32 columns per block of 32×8 threads (sum_rows_add's layout).
	return launchRaw(fn, [3]int{(n + 31) / 32, 1, 1}, [3]int{32, 8, 1}, 0, d.stream, &a)
}

// onlyF32 is the dtype rule of GradAccumulator and ChannelAxpyer on
// the device: every operand F32.
func onlyF32(op string, ts ...*tensor.Tensor) error {
	for _, t := range ts {
		if t.DType() != tensor.F32 {
			return fmt.Errorf("cuda: %s: dtype %v (F32 runs here: the interface takes F32 and F64, the device has no F64 kernels)", op, t.DType())
		}
	}
	return nil
}
