package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// ReluHeadCall is one head of a ReluHeadser call: Out [N, O] =
// relu(X·W1ᵀ + B1)·W2ᵀ + B2 for X [N, K], W1 [Hd, K], B1 [Hd], W2
// [O, Hd] and B2 [O] (B1, B2 nil: none) — a policy's action or value
// head, Linear → ReLU → Linear.
//
// In, in place of X, gives the input as a GatherConcat of its pieces
// (no ones columns): row i is every piece's row i side by side, a
// piece's row being its X's row i or the mean of its X's rows over node
// i's incoming edges. The backend computes those rows as it reads them,
// so that the input is never stored (CUDA: inside the heads' launch).
//
// Join, when set, also receives Out, side by side with other heads':
// JoinRows (≥ 1) consecutive rows of Out make one row of Join, so that
// Out's element (r, u) is also written to Join[r / JoinRows, JoinCol +
// (r mod JoinRows)·O + u] — a pointer head of one score per slot
// becomes its graph's row of slot logits. Join is a contiguous [N /
// JoinRows, W] matrix of the heads' dtype, JoinCol + JoinRows·O ≤ W;
// the heads of a call may share one Join, in column ranges that do not
// overlap.
type ReluHeadCall struct {
	Out, X, W1, B1, W2, B2 *T
	In                     *GatherInput
	Join                   *T
	JoinCol, JoinRows      int
}

// ReluHeadser is an optional Backend interface: small two-layer heads,
// each on an input of its own or sharing one, all in one launch where
// the backend can (CUDA: F32, up to 16 heads a launch, max(K, O) + Hd ≤ 1536).
// A head's sums are the backend's own (CUDA sums each product in fp32
// in a fixed order of its own), so backends agree to rounding only.
type ReluHeadser interface {
	// ReluHeads writes every call's Out and reports true, or reports
	// false, having written nothing, where the backend cannot run them
	// (the caller then takes the products, ReluHeadsOps). No call's Out
	// may share memory with any operand of any call (CheckReluHeads).
	ReluHeads(calls []ReluHeadCall) bool
}

// ReluHeadDims are a checked ReluHeadCall's sizes: N rows, K inputs, Hd
// hidden units and O outputs, and, for a call with In, its pieces as
// CheckGatherInput finds them.
type ReluHeadDims struct {
	N, K, Hd, O int
	Pieces      []GatherBlock
}

// CheckReluHeads checks a ReluHeadser call and returns each head's
// sizes: every operand contiguous, of one float dtype, with the shapes
// ReluHeadCall gives; exactly one of X and In, In's pieces as
// CheckGatherConcat checks them (no ones); Join as ReluHeadCall says, no
// two heads' column ranges of one Join overlapping; no Out sharing memory
// with an operand of any call (its own included), and no Join with an
// operand or an Out.
func CheckReluHeads(name string, calls []ReluHeadCall) ([]ReluHeadDims, error) {
	dims := make([]ReluHeadDims, len(calls))
	outs, all := make([]*T, len(calls)), make([][]*T, len(calls))
	var dt tensor.DType
	type span struct {
		join      *T
		col, cols int
	}
	var joins []span
	for i, c := range calls {
		what := fmt.Sprintf("%s: head %d", name, i)
		if c.Out == nil || c.W1 == nil || c.W2 == nil {
			return nil, fmt.Errorf("%s: Out, W1 and W2 are required", what)
		}
		if (c.X == nil) == (c.In == nil) {
			return nil, fmt.Errorf("%s: exactly one of X and In is required", what)
		}
		first := c.X
		if c.In != nil {
			if len(c.In.Xs) == 0 || c.In.Xs[0] == nil {
				return nil, fmt.Errorf("%s: In has no pieces", what)
			}
			first = c.In.Xs[0]
		}
		if i == 0 {
			dt = first.DType()
		}
		if !dt.IsFloat() {
			return nil, floatError(what, "X", first)
		}
		for _, o := range []struct {
			n string
			t *T
		}{{"Out", c.Out}, {"X", c.X}, {"W1", c.W1}, {"B1", c.B1}, {"W2", c.W2}, {"B2", c.B2}, {"Join", c.Join}} {
			if o.t != nil && (o.t.DType() != dt || !o.t.IsContiguous()) {
				return nil, fmt.Errorf("%s: %s is %v (contiguous %v), want contiguous %v", what, o.n, o.t.DType(), o.t.IsContiguous(), dt)
			}
		}
		if c.W1.Rank() != 2 || c.W2.Rank() != 2 || c.Out.Rank() != 2 || (c.X != nil && c.X.Rank() != 2) {
			return nil, fmt.Errorf("%s: X, W1 %v, W2 %v and Out %v must be matrices", what, c.W1.Shape(), c.W2.Shape(), c.Out.Shape())
		}
		var d ReluHeadDims
		ops := []*T{c.X, c.W1, c.B1, c.W2, c.B2}
		input := "X"
		if c.X != nil {
			d.N, d.K = c.X.Dim(0), c.X.Dim(1)
		} else {
			input = "In"
			var err error
			if d.Pieces, d.K, err = CheckGatherInput(what+": In", c.In, dt); err != nil {
				return nil, err
			}
			d.N = c.In.Rows
			ops = append(ops, c.In.Tensors()...)
		}
		d.Hd, d.O = c.W1.Dim(0), c.W2.Dim(0)
		n, k, hd, o := d.N, d.K, d.Hd, d.O
		switch {
		case c.W1.Dim(1) != k:
			return nil, fmt.Errorf("%s: W1 %v, want [Hd, %d] for %s of %d columns", what, c.W1.Shape(), k, input, k)
		case c.W2.Dim(1) != hd:
			return nil, fmt.Errorf("%s: W2 %v, want [O, %d] for W1 %v", what, c.W2.Shape(), hd, c.W1.Shape())
		case c.B1 != nil && (c.B1.Rank() != 1 || c.B1.Dim(0) != hd):
			return nil, fmt.Errorf("%s: B1 %v, want [%d]", what, c.B1.Shape(), hd)
		case c.B2 != nil && (c.B2.Rank() != 1 || c.B2.Dim(0) != o):
			return nil, fmt.Errorf("%s: B2 %v, want [%d]", what, c.B2.Shape(), o)
		case c.Out.Dim(0) != n || c.Out.Dim(1) != o:
			return nil, fmt.Errorf("%s: Out %v, want [%d, %d]", what, c.Out.Shape(), n, o)
		}
		if c.Join != nil {
			g := c.JoinRows
			switch {
			case g < 1 || n%g != 0:
				return nil, fmt.Errorf("%s: JoinRows %d, want ≥ 1 dividing the %d rows", what, g, n)
			case c.Join.Rank() != 2 || c.Join.Dim(0) != n/g:
				return nil, fmt.Errorf("%s: Join %v, want [%d, W]", what, c.Join.Shape(), n/g)
			case c.JoinCol < 0 || c.JoinCol+g*o > c.Join.Dim(1):
				return nil, fmt.Errorf("%s: Join columns [%d, %d) outside Join %v", what, c.JoinCol, c.JoinCol+g*o, c.Join.Shape())
			}
			for _, s := range joins {
				if !spansOverlap(s.join, c.Join) {
					continue
				}
				if s.join != c.Join {
					return nil, fmt.Errorf("%s: Join shares memory with another head's Join", what)
				}
				if c.JoinCol < s.col+s.cols && s.col < c.JoinCol+g*o {
					return nil, fmt.Errorf("%s: Join columns [%d, %d) overlap another head's", what, c.JoinCol, c.JoinCol+g*o)
				}
			}
			joins = append(joins, span{c.Join, c.JoinCol, g * o})
		}
		for _, x := range ops {
			if spansOverlap(c.Out, x) {
				return nil, fmt.Errorf("%s: Out shares memory with an operand", what)
			}
		}
		dims[i] = d
		outs[i], all[i] = c.Out, append([]*T{c.Out}, ops...)
	}
	for _, s := range joins {
		for k, ts := range all {
			for _, x := range ts {
				if spansOverlap(s.join, x) {
					return nil, fmt.Errorf("%s: a Join shares memory with an operand or the Out of head %d", name, k)
				}
			}
		}
	}
	return dims, callsApart(name, outs, all)
}

// ReluHeadsOps runs on be what ReluHeads stands for, head by head: an
// In's rows by GatherInputOps (be a GraphMultiAggregator), MatMulBiasAct
// with ReLU into a new tensor, then MatMulBias into Out, and Out copied
// into its columns of Join.
func ReluHeadsOps(be Backend, calls []ReluHeadCall) {
	for _, c := range calls {
		x := c.X
		if c.In != nil {
			x = GatherInputOps(be, c.In)
		}
		h, err := tensor.EmptyOn(x.Device(), x.DType(), x.Dim(0), c.W1.Dim(0))
		if err != nil {
			panic(fmt.Sprintf("kernels: ReluHeads: %v", err))
		}
		be.MatMulBiasAct(h, x, c.W1, c.B1, Relu, false, true)
		be.MatMulBias(c.Out, h, c.W2, c.B2, false, true)
		if c.Join != nil {
			n, o, g := c.Out.Dim(0), c.Out.Dim(1), c.JoinRows
			if n > 0 && o > 0 {
				be.Copy(c.Join.Narrow(1, c.JoinCol, g*o), c.Out.Reshape(n/g, g*o))
			}
		}
	}
}
