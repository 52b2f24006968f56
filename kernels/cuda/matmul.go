//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// The fused forward of a linear layer: MatMul, then one epilogue kernel
// (bias_act in src/elementwise.cu) that adds the bias along the last axis
// and applies the activation in fp32 before storing dst once more. For
// BF16 dst the product is rounded to bf16 before the epilogue, where the
// CPU backend rounds once after it.

// MatMulBias is MatMul followed by dst[..., i, j] += bias[j] (bias [N],
// F32 or BF16, optional).
func (d *Device) MatMulBias(dst, a, b, bias *tensor.Tensor, transA, transB bool, prec Precision) error {
	return d.matmulEpilogue("MatMulBias", dst, a, b, bias, -1, transA, transB, prec)
}

// MatMulBiasAct is MatMulBias followed by dst = act(dst), any UnaryOp.
func (d *Device) MatMulBiasAct(dst, a, b, bias *tensor.Tensor, act kernels.UnaryOp, transA, transB bool, prec Precision) error {
	if act >= kernels.UnaryOp(len(kernels.UnaryOps())) {
		return fmt.Errorf("cuda: MatMulBiasAct: unknown activation %d", act)
	}
	return d.matmulEpilogue("MatMulBiasAct", dst, a, b, bias, int32(act), transA, transB, prec)
}

// matmulEpilogue checks the bias, runs the product and the epilogue (act
// < 0: none; nothing when there is neither bias nor act).
func (d *Device) matmulEpilogue(op string, dst, a, b, bias *tensor.Tensor, act int32, transA, transB bool, prec Precision) error {
	cols := 0
	if dst.Rank() > 0 {
		cols = dst.Dim(-1)
	}
	var biasBF16 bool
	var pbias cu.DevicePtr
	if bias != nil {
		if bias.Rank() != 1 || bias.Dim(0) != cols {
			return fmt.Errorf("cuda: %s: bias %v for dst %v, want [%d]", op, bias.Shape(), dst.Shape(), cols)
		}
		switch bias.DType() {
		case tensor.F32:
		case tensor.BF16:
			biasBF16 = true
		default:
			return fmt.Errorf("cuda: %s: bias dtype %v (F32 or BF16)", op, bias.DType())
		}
		var err error
		if pbias, err = d.ptrOf(op, "bias", bias, bias.DType()); err != nil {
			return err
		}
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
	return d.launch1D(name, n, ar.ptr(pd).ptr(pbias).i32(b2i(biasBF16)).i32(act).i64(int64(max(cols, 1))).i64(n))
}
