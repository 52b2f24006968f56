//go:build cuda

package cuda

import (
	"fmt"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// kernels.GradAccumulator on the device: MatMulAdd is MatMul's cuBLAS
// call with β = 1, which adds the product to dst in the GEMM itself;
// SumRowsAdd is one launch of sum_rows_add (src/matmul.cu);
// kernels.LinearGradAccumulator's LinearGradAdd is both in one launch of
// linear_grad_add for a small layer (fp32 whatever the matmul precision,
// as gemm_small), else those two. All take F32 alone (the interfaces'
// dtypes are F32 and F64, and the device has no F64 kernels).

var (
	_ kernels.GradAccumulator       = (*Backend)(nil)
	_ kernels.LinearGradAccumulator = (*Backend)(nil)
	_ kernels.LinearBackwardAdder   = (*Backend)(nil)
)

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

// LinearGradAdd implements kernels.LinearGradAccumulator (F32).
func (b *Backend) LinearGradAdd(dw, db, g, x *T) {
	must(b.d.LinearGradAdd(dw, db, g, x, b.precision()))
}

// LinearGradAdd adds gᵀ·x to dw [N, K] and the column sums of g to db
// [N] (nil: none) for g [M, N] and x [M, K], F32 and contiguous: one
// linear_grad_add_f32 launch when M is at most gemmSmallK and M·N·K at
// most gemmSmallMACs (a small layer's step, where each launch is a graph
// node of its own: a thread walking 256 rows takes a few microseconds,
// a cuBLAS product and a column sum two nodes), else MatMulAdd and
// SumRowsAdd.
func (d *Device) LinearGradAdd(dw, db, g, x *tensor.Tensor, prec Precision) error {
	const op = "LinearGradAdd"
	if dw == nil || g == nil || x == nil {
		return fmt.Errorf("cuda: %s: dw, g and x are required (db may be nil)", op)
	}
	m, n, k, err := linearGradShapes(op, dw, db, g, x, nil)
	if err != nil {
		return err
	}
	if m > gemmSmallK || m*n*k > gemmSmallMACs {
		if err := d.MatMulAdd(dw, g, x, true, false, prec); err != nil {
			return err
		}
		if db == nil {
			return nil
		}
		return d.SumRowsAdd(db, g)
	}
	f32 := tensor.F32
	ptrs, err := d.ptrList(op, []string{"dw", "db", "g", "x"}, []*tensor.Tensor{dw, db, g, x},
		[]tensor.DType{f32, f32, f32, f32}, []bool{false, true, false, false})
	if err != nil {
		return err
	}
	if m == 0 || n == 0 {
		return nil // dw and db += empty sums
	}
	release := d.enter()
	defer release()
	var ar args
	ar.ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).ptr(ptrs[3]).i64(int64(m)).i64(int64(n)).i64(int64(k))
	return d.launch1D("linear_grad_add_f32", int64(n*k+n), &ar)
}

// LinearBackwardAdd implements kernels.LinearBackwardAdder (F32).
func (b *Backend) LinearBackwardAdd(dx, dw, db, g, x, w *T) {
	must(b.d.LinearBackwardAdd(dx, dw, db, g, x, w, b.precision()))
}

// LinearBackwardAccumulate implements kernels.LinearBackwardAdder (F32).
func (b *Backend) LinearBackwardAccumulate(dx, dw, db, g, x, w *T) {
	must(b.d.LinearBackwardAccumulate(dx, dw, db, g, x, w, b.precision()))
}

// LinearBackwardAdd writes dx [M, K] = g·w and adds gᵀ·x to dw [N, K]
// and the column sums of g to db [N] (nil: none), F32 and contiguous:
// one linear_bwd_small_f32 launch in LinearGradAdd's one-launch range
// with M·K at most gemmSmallMACs, else MatMul and LinearGradAdd.
func (d *Device) LinearBackwardAdd(dx, dw, db, g, x, w *tensor.Tensor, prec Precision) error {
	return d.linearBackward("LinearBackwardAdd", false, dx, dw, db, g, x, w, prec)
}

// LinearBackwardAccumulate is LinearBackwardAdd adding into dx too
// (dx += g·w): the same one launch, else MatMulAdd and LinearGradAdd.
func (d *Device) LinearBackwardAccumulate(dx, dw, db, g, x, w *tensor.Tensor, prec Precision) error {
	return d.linearBackward("LinearBackwardAccumulate", true, dx, dw, db, g, x, w, prec)
}

// linearBackward is LinearBackwardAdd, adding into dx when acc is set.
func (d *Device) linearBackward(op string, acc bool, dx, dw, db, g, x, w *tensor.Tensor, prec Precision) error {
	if dx == nil || dw == nil || g == nil || x == nil || w == nil {
		return fmt.Errorf("cuda: %s: dx, dw, g, x and w are required (db may be nil)", op)
	}
	m, n, k, err := linearGradShapes(op, dw, db, g, x, func(m, n, k int) error {
		if err := checked(kernels.CheckSameShape(op, "dx", dx, []int{m, k})); err != nil {
			return err
		}
		if err := checked(kernels.CheckSameShape(op, "w", w, []int{n, k})); err != nil {
			return err
		}
		return onlyF32(op, dx, w)
	})
	if err != nil {
		return err
	}
	if !linearBwdSmallFits(m, n, k) {
		product := d.MatMul
		if acc {
			product = d.MatMulAdd
		}
		if err := product(dx, g, w, false, false, prec); err != nil {
			return err
		}
		return d.LinearGradAdd(dw, db, g, x, prec)
	}
	f32 := tensor.F32
	ptrs, err := d.ptrList(op, []string{"dx", "dw", "db", "g", "x", "w"}, []*tensor.Tensor{dx, dw, db, g, x, w},
		[]tensor.DType{f32, f32, f32, f32, f32, f32}, []bool{false, false, true, false, false, false})
	if err != nil {
		return err
	}
	total := linearBwdSmallTotal(m, n, k, db != nil)
	if total == 0 {
		return nil
	}
	release := d.enter()
	defer release()
	var ar args
	ar.ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).ptr(ptrs[3]).ptr(ptrs[4]).ptr(ptrs[5]).i64(int64(m)).i64(int64(n)).i64(int64(k)).i32(b2i(acc))
	return d.launch1D("linear_bwd_small_f32", total, &ar)
}

// linearGradShapes checks LinearGradAdd's operands (g [M, N] and x
// [M, K], dw [N, K], db [N] or nil, all F32), then more's (given M, N
// and K; nil for none), and returns M, N and K.
func linearGradShapes(op string, dw, db, g, x *tensor.Tensor, more func(m, n, k int) error) (m, n, k int, err error) {
	gs, xs := g.Shape(), x.Shape()
	if len(gs) != 2 || len(xs) != 2 || gs[0] != xs[0] {
		return 0, 0, 0, fmt.Errorf("cuda: %s: g %v and x %v: want [M, N] and [M, K]", op, gs, xs)
	}
	m, n, k = gs[0], gs[1], xs[1]
	if err := checked(kernels.CheckSameShape(op, "dw", dw, []int{n, k})); err != nil {
		return 0, 0, 0, err
	}
	ts := []*tensor.Tensor{dw, g, x}
	if db != nil {
		if err := checked(kernels.CheckSameShape(op, "db", db, []int{n})); err != nil {
			return 0, 0, 0, err
		}
		ts = append(ts, db)
	}
	if err := onlyF32(op, ts...); err != nil {
		return 0, 0, 0, err
	}
	if more != nil {
		if err := more(m, n, k); err != nil {
			return 0, 0, 0, err
		}
	}
	return m, n, k, nil
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
