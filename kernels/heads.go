package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// ReluHeadCall is one head of a ReluHeadser call: Out [N, O] =
// relu(X·W1ᵀ + B1)·W2ᵀ + B2 for X [N, K], W1 [Hd, K], B1 [Hd], W2
// [O, Hd] and B2 [O] (B1, B2 nil: none) — a policy's action or value
// head, Linear → ReLU → Linear.
type ReluHeadCall struct {
	Out, X, W1, B1, W2, B2 *T
}

// ReluHeadser is an optional Backend interface: small two-layer heads,
// each on an input of its own or sharing one, all in one launch where
// the backend can (CUDA: F32, up to 32 heads a launch, K + Hd ≤ 1536).
// A head's sums are the backend's own (CUDA sums each product in fp32
// in a fixed order of its own), so backends agree to rounding only.
type ReluHeadser interface {
	// ReluHeads writes every call's Out and reports true, or reports
	// false, having written nothing, where the backend cannot run them
	// (the caller then takes the products, ReluHeadsOps). No call's Out
	// may share memory with any operand of any call (CheckReluHeads).
	ReluHeads(calls []ReluHeadCall) bool
}

// CheckReluHeads checks a ReluHeadser call and returns each head's N,
// K, Hd and O: every operand contiguous, of one float dtype, with the
// shapes ReluHeadCall gives, and no Out sharing memory with an operand
// of any call (its own included).
func CheckReluHeads(name string, calls []ReluHeadCall) ([][4]int, error) {
	dims := make([][4]int, len(calls))
	outs, all := make([]*T, len(calls)), make([][]*T, len(calls))
	var dt tensor.DType
	for i, c := range calls {
		what := fmt.Sprintf("%s: head %d", name, i)
		if c.Out == nil || c.X == nil || c.W1 == nil || c.W2 == nil {
			return nil, fmt.Errorf("%s: Out, X, W1 and W2 are required", what)
		}
		if i == 0 {
			dt = c.X.DType()
		}
		if !dt.IsFloat() {
			return nil, floatError(what, "X", c.X)
		}
		for _, o := range []struct {
			n string
			t *T
		}{{"Out", c.Out}, {"X", c.X}, {"W1", c.W1}, {"B1", c.B1}, {"W2", c.W2}, {"B2", c.B2}} {
			if o.t != nil && (o.t.DType() != dt || !o.t.IsContiguous()) {
				return nil, fmt.Errorf("%s: %s is %v (contiguous %v), want contiguous %v", what, o.n, o.t.DType(), o.t.IsContiguous(), dt)
			}
		}
		if c.X.Rank() != 2 || c.W1.Rank() != 2 || c.W2.Rank() != 2 || c.Out.Rank() != 2 {
			return nil, fmt.Errorf("%s: X %v, W1 %v, W2 %v and Out %v must be matrices", what, c.X.Shape(), c.W1.Shape(), c.W2.Shape(), c.Out.Shape())
		}
		n, k, hd, o := c.X.Dim(0), c.X.Dim(1), c.W1.Dim(0), c.W2.Dim(0)
		switch {
		case c.W1.Dim(1) != k:
			return nil, fmt.Errorf("%s: W1 %v, want [Hd, %d] for X %v", what, c.W1.Shape(), k, c.X.Shape())
		case c.W2.Dim(1) != hd:
			return nil, fmt.Errorf("%s: W2 %v, want [O, %d] for W1 %v", what, c.W2.Shape(), hd, c.W1.Shape())
		case c.B1 != nil && (c.B1.Rank() != 1 || c.B1.Dim(0) != hd):
			return nil, fmt.Errorf("%s: B1 %v, want [%d]", what, c.B1.Shape(), hd)
		case c.B2 != nil && (c.B2.Rank() != 1 || c.B2.Dim(0) != o):
			return nil, fmt.Errorf("%s: B2 %v, want [%d]", what, c.B2.Shape(), o)
		case c.Out.Dim(0) != n || c.Out.Dim(1) != o:
			return nil, fmt.Errorf("%s: Out %v, want [%d, %d]", what, c.Out.Shape(), n, o)
		}
		for _, x := range []*T{c.X, c.W1, c.B1, c.W2, c.B2} {
			if spansOverlap(c.Out, x) {
				return nil, fmt.Errorf("%s: Out shares memory with an operand", what)
			}
		}
		dims[i] = [4]int{n, k, hd, o}
		outs[i], all[i] = c.Out, []*T{c.Out, c.X, c.W1, c.B1, c.W2, c.B2}
	}
	return dims, callsApart(name, outs, all)
}

// ReluHeadsOps runs on be what ReluHeads stands for, head by head:
// MatMulBiasAct with ReLU into a new tensor, then MatMulBias into Out.
func ReluHeadsOps(be Backend, calls []ReluHeadCall) {
	for _, c := range calls {
		h, err := tensor.EmptyOn(c.X.Device(), c.X.DType(), c.X.Dim(0), c.W1.Dim(0))
		if err != nil {
			panic(fmt.Sprintf("kernels: ReluHeads: %v", err))
		}
		be.MatMulBiasAct(h, c.X, c.W1, c.B1, Relu, false, true)
		be.MatMulBias(c.Out, h, c.W2, c.B2, false, true)
	}
}
