//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The matmul family: MatMul is cuBLAS (cublas.go) in the precision set
// by SetMatmulPrecision; the fused forward of a linear layer is MatMul,
// then one epilogue kernel (bias_act in src/matmul.cu) that adds the bias
// along the last axis and applies the activation in fp32 before storing
// dst once more. For BF16 and F16 dst the product is rounded to the half
// type before the epilogue, where the CPU backend rounds once after it.

// MatMul implements kernels.Backend (F32 in the set precision, BF16 and
// F16 with fp32 accumulation; a, b and dst of one dtype).
func (b *Backend) MatMul(dst, x, y *T, transA, transB bool) {
	must(b.d.MatMul(dst, x, y, transA, transB, b.precision()))
}

// MatMulBias implements kernels.Backend.
func (b *Backend) MatMulBias(dst, x, y, bias *T, transA, transB bool) {
	must(b.d.MatMulBias(dst, x, y, bias, transA, transB, b.precision()))
}

// MatMulBiasAct implements kernels.Backend.
func (b *Backend) MatMulBiasAct(dst, x, y, bias *T, act kernels.UnaryOp, transA, transB bool) {
	must(b.d.MatMulBiasAct(dst, x, y, bias, act, transA, transB, b.precision()))
}

// SetMatmulPrecision implements kernels.Backend: the cuBLAS arithmetic
// of F32 MatMul and Conv2d (Highest fp32, High TF32, Medium bf16).
func (b *Backend) SetMatmulPrecision(p kernels.Precision) {
	switch p {
	case kernels.Highest:
		b.prec.Store(int32(Highest))
	case kernels.High:
		b.prec.Store(int32(High))
	case kernels.Medium:
		b.prec.Store(int32(Medium))
	default:
		panic(fmt.Sprintf("cuda: SetMatmulPrecision: unknown precision %d", p))
	}
}

// MatMulBias is MatMul followed by dst[..., i, j] += bias[j] (bias [N],
// F32, BF16 or F16 whatever dst's dtype, optional).
func (d *Device) MatMulBias(dst, a, b, bias *tensor.Tensor, transA, transB bool, prec Precision) error {
	return d.matmulEpilogue("MatMulBias", dst, a, b, bias, -1, transA, transB, prec)
}

// MatMulBiasAct is MatMulBias followed by dst = act(dst), any UnaryOp.
func (d *Device) MatMulBiasAct(dst, a, b, bias *tensor.Tensor, act kernels.UnaryOp, transA, transB bool, prec Precision) error {
	if err := checked(kernels.CheckActivation("MatMulBiasAct", act)); err != nil {
		return err
	}
	return d.matmulEpilogue("MatMulBiasAct", dst, a, b, bias, int32(act), transA, transB, prec)
}

// matmulEpilogue checks the bias, runs the product and the epilogue (act
// < 0: none; nothing when there is neither bias nor act).
func (d *Device) matmulEpilogue(op string, dst, a, b, bias *tensor.Tensor, act int32, transA, transB bool, prec Precision) error {
	dims, err := kernels.CheckMatMul(op, dst, a, b, bias, transA, transB)
	if err := checked(err); err != nil {
		return err
	}
	cols := dims.N
	var biasCode int32
	var pbias cu.DevicePtr
	if bias != nil {
		var free func()
		var err error
		if pbias, biasCode, free, err = d.sideOperand(op, "bias", bias, dst.DType()); err != nil {
			return err
		}
		defer free()
	}
	if small, err := d.gemmSmall(op, dims, dst, a, b, pbias, biasCode, act, transA, transB); small || err != nil {
		return err
	}
	if err := d.MatMul(dst, a, b, transA, transB, prec); err != nil {
		return fmt.Errorf("%w (in %s)", err, op)
	}
	if bias == nil && act < 0 {
		return nil
	}
	name, err := floatKernel(op, "bias_act", dst.DType())
	if err != nil {
		return err
	}
	pd, err := d.ptrOf(op, "dst", dst, dst.DType())
	if err != nil {
		return err
	}
	n := int64(dst.Numel())
	release := d.enter()
	defer release()
	var ar args
	return d.launch1D(name, n, ar.ptr(pd).ptr(pbias).i32(biasCode).i32(act).i64(int64(max(cols, 1))).i64(n))
}

// gemmSmall runs matmulEpilogue's product and epilogue in one launch when
// they are small (see gemmSmallK) and reports whether it did.
func (d *Device) gemmSmall(op string, dims kernels.MatMulDims, dst, a, b *tensor.Tensor, pbias cu.DevicePtr, biasCode, act int32, transA, transB bool) (bool, error) {
	small := dims.K <= gemmSmallK && dims.M*dims.N*dims.K <= gemmSmallMACs
	wide := dims.K <= gemmSmallWarpK && dims.M*dims.N <= gemmSmallWide
	if dims.Batch != 1 || dims.BatchedA || dims.BatchedB || !(small || wide) {
		return false, nil
	}
	for _, t := range []*tensor.Tensor{dst, a, b} {
		if t.DType() != tensor.F32 || !t.IsContiguous() {
			return false, nil
		}
	}
	var ptrs [3]cu.DevicePtr
	for i, o := range []struct {
		what string
		t    *tensor.Tensor
	}{{"dst", dst}, {"a", a}, {"b", b}} {
		p, err := d.ptrOf(op, o.what, o.t, tensor.F32)
		if err != nil {
			return true, err
		}
		ptrs[i] = p
	}
	release := d.enter()
	defer release()
	var ar args
	ar.ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).ptr(pbias).i32(biasCode).i32(act)
	ar.i64(int64(dims.M)).i64(int64(dims.N)).i64(int64(dims.K)).i32(b2i(transA)).i32(b2i(transB))
	if dims.K > gemmSmallWarpK {
		// A warp per element (the grid-stride loop covers any count).
		return true, d.launch1D("gemm_small_warp_f32", 32*int64(dims.M*dims.N), &ar)
	}
	return true, d.launch1D("gemm_small_f32", int64(dims.M*dims.N), &ar)
}

// MatMul sets dst = op(a)·op(b) for rank-2 or rank-3 (batched) F32,
// BF16 or F16 operands of one dtype through cuBLAS, in the given
// precision for F32 (BF16 and F16 always accumulate in fp32: GemmEx with
// CUDA_R_16BF or CUDA_R_16F and CUBLAS_COMPUTE_32F). A rank-2 operand
// broadcasts over the other's batch (a batch stride of 0); dst is rank 3
// when either is.
func (d *Device) MatMul(dst, a, b *tensor.Tensor, transA, transB bool, prec Precision) error {
	const op = "MatMul"
	dt := dst.DType()
	var blasType int
	switch dt {
	case tensor.F32:
		blasType = dataF32
	case tensor.BF16:
		blasType = dataBF16
	case tensor.F16:
		blasType = dataF16
	default:
		return fmt.Errorf("cuda: %s: dtype %v (F32, BF16 and F16 run here)", op, dt)
	}
	dims, err := kernels.CheckMatMul(op, dst, a, b, nil, transA, transB)
	if err := checked(err); err != nil {
		return err
	}
	as, bs := a.Shape(), b.Shape()
	m, n, k, batch := dims.M, dims.N, dims.K, dims.Batch
	var sa, sb int64
	if dims.BatchedA {
		sa = int64(m * k)
	}
	if dims.BatchedB {
		sb = int64(k * n)
	}
	pd, err := d.ptrOf(op, "dst", dst, dt)
	if err != nil {
		return err
	}
	pa, err := d.ptrOf(op, "a", a, dt)
	if err != nil {
		return err
	}
	pb, err := d.ptrOf(op, "b", b, dt)
	if err != nil {
		return err
	}
	if k == 0 || batch == 0 {
		return d.Fill(dst, 0)
	}
	h, err := d.blasHandle()
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	return h.gemmRowMajor(transA, transB, m, n, k, pa, as[len(as)-1], sa, pb, bs[len(bs)-1], sb, pd, n, int64(m*n), batch, blasType, prec)
}

// blasHandle returns the device's cuBLAS handle, creating it once.
func (d *Device) blasHandle() (*blasHandle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.blas != nil {
		return d.blas, nil
	}
	h, err := newBlasHandle(d)
	if err != nil {
		return nil, err
	}
	d.blas = h
	return h, nil
}
