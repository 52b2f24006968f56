package kernels

import "fmt"

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

// LinearGradAccumulator is implemented by backends that add a linear
// layer's weight and bias gradients into existing tensors together, in
// one launch where the shapes are small (a GPU, where each launch costs
// microseconds): autograd's Linear accumulates both with it. It is an
// optional capability (check with a type assertion).
type LinearGradAccumulator interface {
	// LinearGradAdd adds gᵀ·x to dw [N, K] and the column sums of g to
	// db [N] (nil: no bias), for g [M, N] and x [M, K], all contiguous
	// in one dtype, F32 or F64: GradAccumulator's MatMulAdd(dw, g, x,
	// true, false) and SumRowsAdd(db, g), which is what the CPU runs;
	// another backend's single launch may sum the product in another
	// order, as its MatMulAdd may.
	LinearGradAdd(dw, db, g, x *T)
}

// LinearBackwardAdder is an optional Backend interface: a linear
// layer's whole backward in one launch where the shapes are small (CUDA,
// F32): the input gradient with the weight and bias gradients added.
// autograd's Linear uses it when the input, the weight and the bias (if
// any) all take gradients.
type LinearBackwardAdder interface {
	// LinearBackwardAdd writes dx [M, K] = g·w and adds gᵀ·x to dw
	// [N, K] and the column sums of g to db [N] (nil: no bias), for g
	// [M, N], x [M, K] and w [N, K], all contiguous in one dtype, F32 or
	// F64: MatMul(dx, g, w, false, false), then LinearGradAdd, which is
	// what the CPU runs; another backend's single launch may sum in
	// another order, as its MatMul and LinearGradAdd may.
	LinearBackwardAdd(dx, dw, db, g, x, w *T)
	// LinearBackwardAccumulate is LinearBackwardAdd adding the input
	// gradient too: dx += g·w. The CPU runs GradAccumulator's
	// MatMulAdd(dx, g, w, false, false), then LinearGradAdd. autograd's
	// Linear adds its input's gradient with it into the sum that the
	// input's other readers started (Backward's own buffer), saving the
	// tensor and the addition of a separate dx.
	LinearBackwardAccumulate(dx, dw, db, g, x, w *T)
}

// LaunchBounder is implemented by a backend whose launches cost more
// than copying a small layer's weights (a GPU, where each launch takes
// microseconds of host and device time): autograd.LinearStack joins the
// products of one input there into one product over stacked weights,
// paying a copy of the weights per call. The CPU backend does not
// implement it, nor does sim, which computes bit for bit what the CPU
// computes (a stacked product may sum in another order than separate
// ones where the CPU picks its kernel by size).
type LaunchBounder interface {
	// LaunchBound reports whether products should be joined.
	LaunchBound() bool
}

// MatMulDims are the sizes of a checked product: dst [Batch,] M×N from
// op(a) M×K and op(b) K×N.
type MatMulDims struct {
	M, N, K int
	// Batch is dst's batch size, 1 when dst is 2-D.
	Batch int
	// BatchedA and BatchedB report whether a and b have a batch axis; a
	// 2-D operand broadcasts over the batch.
	BatchedA, BatchedB bool
}

// CheckMatMul checks a MatMul (bias nil), MatMulBias or MatMulBiasAct
// and returns its sizes: a and b 2-D or 3-D (as stored, transposed by the
// flags), batch sizes that agree, dst [M, N] or, when either is 3-D,
// [Batch, M, N], every operand float and bias, when given, a float [N].
func CheckMatMul(name string, dst, a, b, bias *T, transA, transB bool) (MatMulDims, error) {
	// Written for speed, the messages left to matMulError: the tiny
	// products of W1 take about 50 ns each, this check included (and the
	// sizes are kept in locals: a MatMulDims filled field by field costs
	// twice the check).
	as, bs, ds := a.Shape(), b.Shape(), dst.Shape()
	ra, rb := len(as), len(bs)
	if ra >= 2 && ra <= 3 && rb >= 2 && rb <= 3 {
		m, k := as[ra-2], as[ra-1]
		if transA {
			m, k = k, m
		}
		k2, n := bs[rb-2], bs[rb-1]
		if transB {
			k2, n = n, k2
		}
		ok := k2 == k
		batch := 1
		if ra == 3 || rb == 3 {
			if ok = ok && len(ds) == 3; ok {
				batch = ds[0]
				ok = (ra != 3 || as[0] == batch) && (rb != 3 || bs[0] == batch) && ds[1] == m && ds[2] == n
			}
		} else {
			ok = ok && len(ds) == 2 && ds[0] == m && ds[1] == n
		}
		ok = ok && dst.DType().IsFloat() && a.DType().IsFloat() && b.DType().IsFloat()
		if bias != nil {
			s := bias.Shape()
			ok = ok && bias.DType().IsFloat() && len(s) == 1 && s[0] == n
		}
		if ok {
			return MatMulDims{M: m, N: n, K: k, Batch: batch, BatchedA: ra == 3, BatchedB: rb == 3}, nil
		}
	}
	return MatMulDims{}, matMulError(name, dst, a, b, bias, transA, transB)
}

// matMulError is the error of a CheckMatMul that failed.
func matMulError(name string, dst, a, b, bias *T, transA, transB bool) error {
	for _, t := range [...]*T{dst, a, b} {
		if !t.DType().IsFloat() {
			return floatError(name, "operand", t)
		}
	}
	if bias != nil {
		if !bias.DType().IsFloat() {
			return floatError(name, "bias", bias)
		}
		// The shapes may multiply: then the bias is what is wrong.
		as, bs := a.Shape(), b.Shape()
		if len(bs) >= 2 && len(as) >= 2 {
			n := bs[len(bs)-1]
			if transB {
				n = bs[len(bs)-2]
			}
			if s := bias.Shape(); len(s) != 1 || s[0] != n {
				return fmt.Errorf("%s: bias has shape %v, want [%d] (a %v, b %v, dst %v)", name, s, n, as, bs, dst.Shape())
			}
		}
	}
	return fmt.Errorf("%s: a %v (transA %v) and b %v (transB %v) do not multiply into dst %v", name, a.Shape(), transA, b.Shape(), transB, dst.Shape())
}

// CheckActivation checks the activation of a fused epilogue (any
// UnaryOp that exists).
func CheckActivation(name string, act UnaryOp) error {
	if act >= numUnary {
		return fmt.Errorf("%s: unknown activation %d", name, act)
	}
	return nil
}

// MatMulTCall is one product of MatMulsJoiner: Dst [M, N] = A [M, K]·Bᵀ
// for B [N, K] (a linear map's weight), each contiguous.
type MatMulTCall struct {
	Dst, A, B *T
}

// MatMulsJoiner is an optional Backend interface: products that do not
// depend on one another — a heterogeneous graph layer's projections, one
// per node type — in as few launches as the backend can (CUDA: F32, up
// to eight in one). Each Dst holds A·Bᵀ summed in the backend's own
// order (CUDA sums each element's K products in order in fp32, a
// product of few rows in 32 lane-strided chains joined by a butterfly,
// where MatMul's cuBLAS sums in its own), so backends agree to rounding
// only.
// No call may write memory that another reads or writes
// (CheckMatMulsT).
type MatMulsJoiner interface {
	// MatMulsT runs every call and reports true, or reports false,
	// having written nothing, where the backend cannot join them (the
	// caller then runs MatMul for each).
	MatMulsT(calls []MatMulTCall) bool
}

// CheckMatMulsT checks a MatMulsJoiner call: each product's operands of
// one float dtype, contiguous, A [M, K], B [N, K] and Dst [M, N], and no
// call's Dst sharing memory with another call's tensors or its own
// operands. It returns each call's M, N and K.
func CheckMatMulsT(name string, calls []MatMulTCall) ([][3]int, error) {
	dims := make([][3]int, len(calls))
	outs, all := make([]*T, len(calls)), make([][]*T, len(calls))
	for i, c := range calls {
		what := fmt.Sprintf("%s: call %d", name, i)
		if c.A == nil {
			return nil, fmt.Errorf("%s: a is required", what)
		}
		dt := c.A.DType()
		if !dt.IsFloat() {
			return nil, floatError(what, "a", c.A)
		}
		m, k, err := rows2(what, "a", c.A, dt, -1, -1)
		if err != nil {
			return nil, err
		}
		n, _, err := rows2(what, "b", c.B, dt, -1, k)
		if err != nil {
			return nil, err
		}
		if _, _, err := rows2(what, "dst", c.Dst, dt, m, n); err != nil {
			return nil, err
		}
		if spansOverlap(c.Dst, c.A) || spansOverlap(c.Dst, c.B) {
			return nil, fmt.Errorf("%s: dst shares memory with an operand", what)
		}
		dims[i] = [3]int{m, n, k}
		outs[i], all[i] = c.Dst, []*T{c.Dst, c.A, c.B}
	}
	return dims, callsApart(name, outs, all)
}

// MatMulsTOps runs calls on be one product at a time (MatMul with b
// transposed): what a MatMulsJoiner's join stands for.
func MatMulsTOps(be Backend, calls []MatMulTCall) {
	for _, c := range calls {
		be.MatMul(c.Dst, c.A, c.B, false, true)
	}
}
