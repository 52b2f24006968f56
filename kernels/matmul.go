package kernels

// MatMulFamily is the matrix-product op family: batched products with
// the fused bias and activation epilogues of a linear layer, and the
// internal precision of F32 products.
type MatMulFamily interface {
	// MatMul computes dst = op(a)·op(b) where op transposes the last two
	// axes when the flag is set. a is [M,K] or [B,M,K] (as stored, before
	// op), b likewise; a rank-2 operand broadcasts over the batch. dst
	// is [M,N] or [B,M,N]. Accumulation is fp32 (fp64 for F64); BF16/F16
	// operands are supported (autocast) and dst may be F32 or the half
	// type.
	MatMul(dst, a, b *T, transA, transB bool)
	// MatMulBias is MatMul followed by dst[..., i, j] += bias[j] (bias
	// [N], any float dtype) in the product's epilogue, before dst is
	// stored: the fused forward of a linear layer. A nil bias is MatMul.
	MatMulBias(dst, a, b, bias *T, transA, transB bool)
	// MatMulBiasAct is MatMulBias followed by dst = act(dst) in the same
	// epilogue, before dst is stored: the fused forward of a linear layer
	// and its activation (act any UnaryOp; autograd.LinearRelu uses
	// Relu).
	MatMulBiasAct(dst, a, b, bias *T, act UnaryOp, transA, transB bool)
	// SetMatmulPrecision selects the internal precision of F32 matmuls
	// and convolutions (CPU: always Highest).
	SetMatmulPrecision(p Precision)
}

// Precision is the internal precision of F32 matmuls (PyTorch's
// set_float32_matmul_precision).
type Precision uint8

// Matmul precisions.
const (
	Highest Precision = iota // fp32
	High                     // TF32 on sm80+
	Medium                   // bf16
)

// GradAccumulator is implemented by backends that add a product or a
// column sum into an existing tensor in the launch that computes it.
// autograd accumulates the weight and bias gradients of a linear layer
// straight into the parameters' Grad with it, instead of computing them
// into new tensors and adding those. It is an optional capability (check
// with a type assertion). dst must be contiguous, in the dtype of the
// other operands, F32 or F64.
type GradAccumulator interface {
	// MatMulAdd is MatMul adding op(a)·op(b) to dst (2-D operands)
	// instead of overwriting it.
	MatMulAdd(dst, a, b *T, transA, transB bool)
	// SumRowsAdd adds the column sums of x [M, N] (contiguous) to dst
	// [N]: dst[j] += Σ_i x[i, j], the sum rounded once, as Reduce (Sum
	// over axis 0) followed by Binary Add would give.
	SumRowsAdd(dst, x *T)
}
