package kernels

import (
	"fmt"

	"github.com/esper-go/esper/tensor"
)

// NormFamily is the normalisation op family: layer, group and batch
// norm with their gradients.
type NormFamily interface {
	// LayerNorm normalises x viewed as [M, n] over its last n elements
	// (n = product of the normalised trailing axes), then applies w and
	// b ([n], optional). mean and rstd ([M], F32, or F64 for F64 input)
	// are saved for the backward pass.
	LayerNorm(y, mean, rstd, x, w, b *T, n int, eps float64)
	// LayerNormBackward fills the non-nil of dx, dw, db (all
	// overwritten).
	LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, n int)
	// GroupNorm normalises x [N,C,*] over groups of C/groups channels;
	// w, b are [C] (optional); mean, rstd are [N*groups].
	GroupNorm(y, mean, rstd, x, w, b *T, groups int, eps float64)
	// GroupNormBackward fills the non-nil of dx, dw, db.
	GroupNormBackward(dx, dw, db, dy, x, mean, rstd, w *T, groups int)
	// BatchNorm normalises x [N,C,*] per channel. In training it uses the
	// batch statistics and updates runMean/runVar (if non-nil) with
	// momentum (running = (1-m)·running + m·batch, unbiased variance);
	// in evaluation it uses the running statistics. saveMean/saveRstd
	// ([C]) receive the statistics used.
	BatchNorm(y, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64)
	// BatchNormBackward fills the non-nil of dx, dw, db. With training
	// false the statistics are constants.
	BatchNormBackward(dx, dw, db, dy, x, saveMean, saveRstd, w *T, training bool)
}

// BatchNormReluer is implemented by backends that fold a ReLU into batch
// norm: BatchNormRelu is BatchNorm with y = max(y, +0) (NaN kept) in the
// pass that writes y, and BatchNormReluBackward is BatchNormBackward with
// dy taken as +0 wherever the fused output was not > 0 — the ReLU's
// gradient folded into the batch norm's two passes. The backward
// recomputes that mask from x, the saved statistics, w and b (the
// forward's shift; nil for none), rounding as its own forward did, so it
// never reads the output. It is an optional capability (check with a
// type assertion); without it the same result takes a ReLU pass each
// way. autograd.BatchNormRelu uses it for the training-mode CNN block.
type BatchNormReluer interface {
	BatchNormRelu(y, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64)
	BatchNormReluBackward(dx, dw, db, dy, x, b, saveMean, saveRstd, w *T, training bool)
}

// GroupNormReluer is implemented by backends that fold a ReLU into group
// norm, as BatchNormReluer does for batch norm: GroupNormRelu is
// GroupNorm with y = max(y, +0) (NaN kept) in the pass that writes y, and
// GroupNormReluBackward is GroupNormBackward with dy taken as +0 wherever
// the fused output was not > 0, the mask rebuilt from x, the saved
// statistics, w and b (the forward's shift; nil for none) as the forward
// rounded it. It is an optional capability (check with a type
// assertion); autograd.GroupNormRelu uses it for the seeds' GroupNorm →
// ReLU.
type GroupNormReluer interface {
	GroupNormRelu(y, mean, rstd, x, w, b *T, groups int, eps float64)
	GroupNormReluBackward(dx, dw, db, dy, x, b, mean, rstd, w *T, groups int)
}

// BatchNormReluPooler is implemented by backends that fold a 2×2,
// stride-2 max pool into BatchNormRelu: pooled and argmax (int32, the
// flat index within the plane) are MaxPool2d of BatchNormRelu's output,
// which is never written. The backward is MaxPool2dBackward followed by
// BatchNormReluBackward (which does not need that output either), also
// fused. It is
// an optional capability (check with a type assertion);
// autograd.BatchNormReluMaxPool uses it for a CNN block whose pre-pool
// slot is empty.
type BatchNormReluPooler interface {
	BatchNormReluMaxPool2x2(pooled, argmax, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool, momentum, eps float64)
	// BatchNormReluMaxPool2x2Backward is MaxPool2dBackward of the pool's
	// gradient g followed by BatchNormReluBackward, without the
	// full-size gradient between them.
	BatchNormReluMaxPool2x2Backward(dx, dw, db, g, argmax, x, b, saveMean, saveRstd, w *T, training bool)
}

// BatchNormEvalAffiner is implemented by backends that compute batch
// norm's evaluation-mode affine map in one launch: per channel
// scale = w·rsqrt(runVar + ε) and shift = b − runMean·scale (w = 1 and
// b = 0 when nil), each step rounded to the operands' dtype as the
// unfused ops (BinaryScalar Add, Unary Rsqrt, Binary Mul, Unary Neg,
// Binary Add) round it, so that either way gives the same values on a
// backend. Every operand is [C], contiguous and of one float dtype (F32
// on every backend that has it; F64 where the backend computes F64). It
// is an optional capability (check with a type assertion);
// autograd.BatchNormEvalAffine uses it for nn.BatchNorm2d.EvalAffine,
// the scale and shift an inference-mode CNN block folds into its
// convolution's epilogue (six launches otherwise, per block and batch).
type BatchNormEvalAffiner interface {
	BatchNormEvalAffine(scale, shift, w, b, runMean, runVar *T, eps float64)
}

// CheckBatchNormEvalAffine checks a BatchNormEvalAffine: scale, shift,
// runMean and runVar (w and b when not nil) one-dimensional of one
// length C and one float dtype. It returns C.
func CheckBatchNormEvalAffine(name string, scale, shift, w, b, runMean, runVar *T) (int, error) {
	if scale == nil || shift == nil || runMean == nil || runVar == nil {
		return 0, fmt.Errorf("%s: scale, shift, runMean and runVar are required", name)
	}
	c := runVar.Numel()
	dt := runVar.DType()
	if !dt.IsFloat() {
		return 0, fmt.Errorf("%s: runVar is %v, want a float dtype", name, dt)
	}
	for _, o := range []struct {
		what string
		t    *T
	}{{"scale", scale}, {"shift", shift}, {"w", w}, {"b", b}, {"runMean", runMean}, {"runVar", runVar}} {
		if o.t == nil {
			continue
		}
		if o.t.Rank() != 1 || o.t.Numel() != c || o.t.DType() != dt {
			return 0, fmt.Errorf("%s: %s is %v %v, want [%d] %v (runVar's)", name, o.what, o.t.DType(), o.t.Shape(), c, dt)
		}
	}
	return c, nil
}

// Planes views x [N, C, *] as N·C planes of hw elements (hw the product
// of the trailing axes, 1 for a 2-D x).
func Planes(name string, x []int) (n, c, hw int, err error) {
	if len(x) < 2 {
		return 0, 0, 0, fmt.Errorf("%s: x has shape %v, want [N C ...]", name, x)
	}
	n, c, hw = x[0], x[1], 1
	for _, d := range x[2:] {
		hw *= d
	}
	return n, c, hw, nil
}

// LinearActLayerNormer is an optional Backend interface: a layer's
// product, bias and activation followed by a layer norm over each
// output row, in one launch where the backend can (CUDA: F32, a block
// per row for rows of at most 4096 outputs and products of K at most
// 64): an encoder's Linear → act → LayerNorm in inference.
type LinearActLayerNormer interface {
	// LinearActLayerNorm writes y [M, N] = LayerNorm(act(x·wᵀ + b)) of
	// x [M, K], w [N, K] and b [N] (nil: none), the layer norm over each
	// row of N with gain g and shift s ([N] each, nil: none) and eps, as
	// LinearActLayerNormOps computes it, which is what the CPU runs
	// (another backend's product and sums may round in another order).
	// It reports false, having written nothing, where the backend
	// cannot do it in one launch.
	LinearActLayerNorm(y, x, w, b *T, act UnaryOp, g, s *T, eps float64) bool
}

// LinearActLNCall is one call of a LinearActLayerNormsJoiner:
// LinearActLayerNorm's arguments. In, in place of X, gives x as a
// GatherConcat of its pieces (GatherInput: a node type's features beside
// an embedding row looked up by CSR), computed as it is read, never
// stored.
type LinearActLNCall struct {
	Y, X, W, B *T
	In         *GatherInput
	Act        UnaryOp
	G, S       *T
	Eps        float64
}

// LinearActLayerNormsJoiner is an optional Backend interface:
// LinearActLayerNorms that do not depend on one another — a
// heterogeneous graph's node encoders, one per node type — in as few
// launches as the backend can (CUDA: up to four in one). Each output
// holds exactly what its own LinearActLayerNorm writes. No call may
// write memory that another reads or writes (CheckLinearActLayerNorms).
type LinearActLayerNormsJoiner interface {
	// LinearActLayerNorms runs every call and reports true, or reports
	// false, having written nothing, where any of them would report
	// false on its own (the caller then takes another path for all).
	LinearActLayerNorms(calls []LinearActLNCall) bool
}

// LinearActLNDims are a checked LinearActLNCall's sizes: M rows, N
// outputs and K inputs a row, and, for a call with In, its pieces as
// CheckGatherInput finds them.
type LinearActLNDims struct {
	M, N, K int
	Pieces  []GatherBlock
}

// CheckLinearActLayerNorms checks a LinearActLayerNormsJoiner call: each
// as CheckLinearActLayerNorm checks it (a call with In instead of X: its
// pieces as CheckGatherInput checks them, M its rows and K their width,
// and y sharing no memory with them), and that no call's y shares memory
// with any tensor of another.
func CheckLinearActLayerNorms(name string, calls []LinearActLNCall) ([]LinearActLNDims, error) {
	dims := make([]LinearActLNDims, len(calls))
	outs, all := make([]*T, len(calls)), make([][]*T, len(calls))
	for i, c := range calls {
		what := fmt.Sprintf("%s: call %d", name, i)
		var d LinearActLNDims
		var err error
		ts := []*T{c.Y, c.X, c.W, c.B, c.G, c.S}
		switch {
		case c.In == nil:
			d.M, d.N, d.K, err = CheckLinearActLayerNorm(what, c.Y, c.X, c.W, c.B, c.Act, c.G, c.S)
		case c.X != nil:
			err = fmt.Errorf("%s: X and In both given", what)
		case c.W == nil:
			err = fmt.Errorf("%s: y, x and w are required", what)
		default:
			ts = append(ts, c.In.Tensors()...)
			if d.Pieces, d.K, err = CheckGatherInput(what+": In", c.In, c.W.DType()); err != nil {
				break
			}
			d.M = c.In.Rows
			if d.N, err = checkLinearActLN(what, c.Y, d.M, d.K, c.W, c.B, c.Act, c.G, c.S, c.W.DType()); err != nil {
				break
			}
			for _, x := range c.In.Tensors() {
				if spansOverlap(c.Y, x) {
					err = fmt.Errorf("%s: y shares memory with In", what)
					break
				}
			}
		}
		if err != nil {
			return nil, err
		}
		dims[i] = d
		outs[i], all[i] = c.Y, ts
	}
	return dims, callsApart(name, outs, all)
}

// LinearActLayerNormOps runs on be what a LinearActLayerNorm stands
// for: MatMulBiasAct into a new tensor, then LayerNorm into y (the
// statistics not kept).
func LinearActLayerNormOps(be Backend, y, x, w, b *T, act UnaryOp, g, s *T, eps float64) {
	h, err := tensor.EmptyOn(y.Device(), y.DType(), y.Shape()...)
	if err != nil {
		panic(fmt.Sprintf("kernels: LinearActLayerNorm: %v", err))
	}
	be.MatMulBiasAct(h, x, w, b, act, false, true)
	be.LayerNorm(y, nil, nil, h, g, s, y.Shape()[1], eps)
}

// CheckLinearActLayerNorm checks a LinearActLayerNorm and returns M, N
// and K: x [M, K], w [N, K], y [M, N], b, g and s nil or [N], every one
// contiguous and of x's float dtype, y sharing memory with none of the
// others (a row's outputs are written while other rows read them), and
// act an activation.
func CheckLinearActLayerNorm(name string, y, x, w, b *T, act UnaryOp, g, s *T) (m, n, k int, err error) {
	if y == nil || x == nil || w == nil {
		return 0, 0, 0, fmt.Errorf("%s: y, x and w are required", name)
	}
	dt := x.DType()
	if !dt.IsFloat() {
		return 0, 0, 0, floatError(name, "x", x)
	}
	if m, k, err = rows2(name, "x", x, dt, -1, -1); err != nil {
		return 0, 0, 0, err
	}
	if n, err = checkLinearActLN(name, y, m, k, w, b, act, g, s, dt); err != nil {
		return 0, 0, 0, err
	}
	if spansOverlap(y, x) {
		return 0, 0, 0, fmt.Errorf("%s: y shares memory with x", name)
	}
	return m, n, k, nil
}

// checkLinearActLN is CheckLinearActLayerNorm given x's m rows of k
// elements of dtype dt: it checks the rest and returns N.
func checkLinearActLN(name string, y *T, m, k int, w, b *T, act UnaryOp, g, s *T, dt tensor.DType) (n int, err error) {
	if y == nil || w == nil {
		return 0, fmt.Errorf("%s: y, x and w are required", name)
	}
	if !dt.IsFloat() {
		return 0, floatError(name, "w", w)
	}
	if n, _, err = rows2(name, "w", w, dt, -1, k); err != nil {
		return 0, err
	}
	if _, _, err = rows2(name, "y", y, dt, m, n); err != nil {
		return 0, err
	}
	for _, v := range []struct {
		what string
		t    *T
	}{{"b", b}, {"g", g}, {"s", s}} {
		if v.t != nil && (v.t.Rank() != 1 || v.t.Shape()[0] != n || v.t.DType() != dt || !v.t.IsContiguous()) {
			return 0, fmt.Errorf("%s: %s is %v %v (contiguous %v), want contiguous %v [%d]", name, v.what, v.t.DType(), v.t.Shape(), v.t.IsContiguous(), dt, n)
		}
	}
	if err := CheckActivation(name, act); err != nil {
		return 0, err
	}
	for _, t := range []*T{w, b, g, s} {
		if spansOverlap(y, t) {
			return 0, fmt.Errorf("%s: y shares memory with w, b, g or s", name)
		}
	}
	return n, nil
}

// CheckLayerNorm checks a LayerNorm and returns its rows m: x a whole
// number of rows of n, y of x's shape, mean and rstd nil or of m
// elements, w and b nil or of n.
func CheckLayerNorm(name string, y, mean, rstd, x, w, b *T, n int) (m int, err error) {
	if m, err = layerNormRows(name, x, n); err != nil {
		return 0, err
	}
	if !tensor.SameShape(y.Shape(), x.Shape()) {
		return 0, shapeError(name, "y", y, x.Shape())
	}
	for _, p := range [...]struct {
		what string
		t    *T
		n    int
	}{{"mean", mean, m}, {"rstd", rstd, m}, {"w", w, n}, {"b", b, n}} {
		if p.t != nil && p.t.Numel() != p.n {
			return 0, lenError(name, p.what, p.t, p.n)
		}
	}
	return m, nil
}

// CheckLayerNormBackward checks a LayerNormBackward and returns its rows
// m: dy (and dx, when given) of x's shape, the statistics nil or of m
// elements, w, dw and db nil or of n.
func CheckLayerNormBackward(name string, dx, dw, db, dy, x, mean, rstd, w *T, n int) (m int, err error) {
	if m, err = layerNormRows(name, x, n); err != nil {
		return 0, err
	}
	if !tensor.SameShape(dy.Shape(), x.Shape()) {
		return 0, shapeError(name, "dy", dy, x.Shape())
	}
	if dx != nil {
		if !tensor.SameShape(dx.Shape(), x.Shape()) {
			return 0, shapeError(name, "dx", dx, x.Shape())
		}
	}
	for _, p := range [...]struct {
		what string
		t    *T
		n    int
	}{{"mean", mean, m}, {"rstd", rstd, m}, {"w", w, n}, {"dw", dw, n}, {"db", db, n}} {
		if p.t != nil && p.t.Numel() != p.n {
			return 0, lenError(name, p.what, p.t, p.n)
		}
	}
	return m, nil
}

// layerNormRows is the number of rows of n elements x splits into.
func layerNormRows(name string, x *T, n int) (int, error) {
	if n <= 0 || x.Numel()%n != 0 {
		return 0, fmt.Errorf("%s: x shape %v is not a whole number of rows of %d", name, x.Shape(), n)
	}
	return x.Numel() / n, nil
}

// CheckGroupNorm checks a GroupNorm (or GroupNormRelu) and returns x's
// planes: x [N, C, *] with C a multiple of groups, y of x's shape, mean
// and rstd nil or of N·groups elements, w and b nil or of C.
func CheckGroupNorm(name string, y, mean, rstd, x, w, b *T, groups int) (n, c, hw int, err error) {
	if n, c, hw, err = groupPlanes(name, x, groups); err != nil {
		return 0, 0, 0, err
	}
	if !tensor.SameShape(y.Shape(), x.Shape()) {
		return 0, 0, 0, shapeError(name, "y", y, x.Shape())
	}
	for _, p := range [...]struct {
		what string
		t    *T
		n    int
	}{{"mean", mean, n * groups}, {"rstd", rstd, n * groups}, {"w", w, c}, {"b", b, c}} {
		if p.t != nil && p.t.Numel() != p.n {
			return 0, 0, 0, lenError(name, p.what, p.t, p.n)
		}
	}
	return n, c, hw, nil
}

// CheckGroupNormBackward checks a GroupNormBackward (b nil) or a
// GroupNormReluBackward and returns x's planes: dy (and dx, when given)
// of x's shape, the forward's mean and rstd given, of N·groups elements,
// w, dw, db and b nil or of C.
func CheckGroupNormBackward(name string, dx, dw, db, dy, x, b, mean, rstd, w *T, groups int) (n, c, hw int, err error) {
	if n, c, hw, err = groupPlanes(name, x, groups); err != nil {
		return 0, 0, 0, err
	}
	if !tensor.SameShape(dy.Shape(), x.Shape()) {
		return 0, 0, 0, shapeError(name, "dy", dy, x.Shape())
	}
	if dx != nil {
		if !tensor.SameShape(dx.Shape(), x.Shape()) {
			return 0, 0, 0, shapeError(name, "dx", dx, x.Shape())
		}
	}
	for _, p := range [...]struct {
		what string
		t    *T
		n    int
	}{{"mean", mean, n * groups}, {"rstd", rstd, n * groups}, {"w", w, c}, {"dw", dw, c}, {"db", db, c}, {"b", b, c}} {
		if p.t != nil && p.t.Numel() != p.n {
			return 0, 0, 0, lenError(name, p.what, p.t, p.n)
		}
	}
	if mean == nil || rstd == nil {
		return 0, 0, 0, fmt.Errorf("%s: needs the forward's mean and rstd (x shape %v)", name, x.Shape())
	}
	return n, c, hw, nil
}

// groupPlanes is Planes for a group norm: C must split into groups.
func groupPlanes(name string, x *T, groups int) (n, c, hw int, err error) {
	if n, c, hw, err = Planes(name, x.Shape()); err != nil {
		return 0, 0, 0, err
	}
	if groups <= 0 || c%groups != 0 {
		return 0, 0, 0, fmt.Errorf("%s: x shape %v: %d channels do not split into %d groups", name, x.Shape(), c, groups)
	}
	return n, c, hw, nil
}

// CheckBatchNorm checks a BatchNorm (or BatchNormRelu; y nil for the
// pooled form, whose output is checked by the caller) and returns x's
// planes: x [N, C, *], y of x's shape, every per-channel tensor nil or
// of C elements, and the running statistics given in evaluation.
func CheckBatchNorm(name string, y, saveMean, saveRstd, x, w, b, runMean, runVar *T, training bool) (n, c, hw int, err error) {
	if n, c, hw, err = Planes(name, x.Shape()); err != nil {
		return 0, 0, 0, err
	}
	if y != nil {
		if !tensor.SameShape(y.Shape(), x.Shape()) {
			return 0, 0, 0, shapeError(name, "y", y, x.Shape())
		}
	}
	// The message is built only for a failure: these checks run on every
	// eager batch norm.
	for i, t := range [...]*T{saveMean, saveRstd, w, b, runMean, runVar} {
		if t != nil && t.Numel() != c {
			what := [...]string{"saveMean", "saveRstd", "w", "b", "runMean", "runVar"}[i]
			return 0, 0, 0, fmt.Errorf("%s: %s (x shape %v) has shape %v, want %d elements", name, what, x.Shape(), t.Shape(), c)
		}
	}
	if !training && (runMean == nil || runVar == nil) {
		return 0, 0, 0, fmt.Errorf("%s: evaluation needs runMean and runVar (x shape %v)", name, x.Shape())
	}
	return n, c, hw, nil
}

// CheckBatchNormBackward checks a BatchNormBackward (b nil), a
// BatchNormReluBackward or, with dy nil, the pooled form (whose gradient
// is checked by the caller) and returns x's planes: dy and dx (when
// given) of x's shape, the saved statistics given, and every per-channel
// tensor nil or of C elements.
func CheckBatchNormBackward(name string, dx, dw, db, dy, x, b, saveMean, saveRstd, w *T) (n, c, hw int, err error) {
	if n, c, hw, err = Planes(name, x.Shape()); err != nil {
		return 0, 0, 0, err
	}
	if dy != nil {
		if !tensor.SameShape(dy.Shape(), x.Shape()) {
			return 0, 0, 0, shapeError(name, "dy", dy, x.Shape())
		}
	}
	if dx != nil {
		if !tensor.SameShape(dx.Shape(), x.Shape()) {
			return 0, 0, 0, shapeError(name, "dx", dx, x.Shape())
		}
	}
	if saveMean == nil || saveRstd == nil {
		return 0, 0, 0, fmt.Errorf("%s: saveMean and saveRstd are required (x shape %v)", name, x.Shape())
	}
	for i, t := range [...]*T{saveMean, saveRstd, w, dw, db, b} {
		if t != nil && t.Numel() != c {
			what := [...]string{"saveMean", "saveRstd", "w", "dw", "db", "b"}[i]
			return 0, 0, 0, fmt.Errorf("%s: %s has shape %v, want %d elements", name, what, t.Shape(), c)
		}
	}
	return n, c, hw, nil
}

// CheckBatchNormPool checks the 2×2, stride-2 pool of a fused batch norm
// over x [N, C, H, W]: pooled (or its gradient, named what) [N, C, H/2,
// W/2] and its I32 argmax of the same shape.
func CheckBatchNormPool(name string, x *T, what string, pooled, argmax *T) error {
	xs := x.Shape()
	if len(xs) != 4 {
		return fmt.Errorf("%s: x shape %v, want [N, C, H, W]", name, xs)
	}
	if ps := pooled.Shape(); len(ps) != 4 || ps[0] != xs[0] || ps[1] != xs[1] || ps[2] != xs[2]/2 || ps[3] != xs[3]/2 {
		return fmt.Errorf("%s: %s has shape %v, want [%d %d %d %d]", name, what, ps, xs[0], xs[1], xs[2]/2, xs[3]/2)
	}
	if !tensor.SameShape(argmax.Shape(), pooled.Shape()) {
		return shapeError(name, "argmax", argmax, pooled.Shape())
	}
	if argmax.DType() != tensor.I32 {
		return fmt.Errorf("%s: argmax (shape %v) has dtype %v, want i32", name, argmax.Shape(), argmax.DType())
	}
	return nil
}
