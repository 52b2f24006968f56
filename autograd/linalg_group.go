package autograd

import (
	"fmt"
	"slices"
	"sync"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// Grouped linear maps. A graph network's layer applies many small
// products per node type (one per relation); on a GPU each is a launch
// whose cost exceeds its arithmetic. In inference LinearStack joins the
// products of one input into one product over concatenated weights on a
// launch-bound backend (a copy of the weights per call, or none where
// they already lie one after another in one storage: cheap on a GPU,
// not on the CPU, which keeps the separate products), and LinearSum adds
// products in place instead of launching an Add for each.

// stackable reports whether LinearStack joins its products: the backend
// is launch-bound (kernels.LaunchBounder), nothing records a gradient
// for vs, all F32.
func stackable(vs ...*Var) bool {
	lb, ok := backendOf(vs[0].Value).(kernels.LaunchBounder)
	if !stackAnywhere && (!ok || !lb.LaunchBound()) {
		return false
	}
	for _, v := range vs {
		if v.Value.DType() != tensor.F32 || (GradEnabled() && v.RequiresGrad()) {
			return false
		}
	}
	return true
}

// stackAnywhere makes LinearStack join products on any backend (tests).
var stackAnywhere bool

// LinearStack returns x·w_iᵀ for every weight of ws (x [N, in], each w_i
// [out_i, in]): the products of one input through several bias-free
// linear maps. On a kernels.LaunchBounder backend, with nothing
// recording a gradient, it is one product with the stacked weights, each
// result a column block of it (a row-strided view, which GATMean reads
// in place); otherwise one Linear per weight.
func LinearStack(x *Var, ws []*Var) []*Var {
	outs := make([]*Var, len(ws))
	if len(ws) > 1 && stackable(append([]*Var{x}, ws...)...) {
		w := adjacentStack(ws)
		if w == nil {
			w = Concat(ws, 0)
		}
		y := Linear(x, w, nil)
		off := 0
		for i, w := range ws {
			n := w.Shape()[0]
			outs[i] = Narrow(y, 1, off, n)
			off += n
		}
		return outs
	}
	for i, w := range ws {
		outs[i] = Linear(x, w, nil)
	}
	return outs
}

// LinearTerm is one term X·Wᵀ + B of LinearSum; B may be nil, and a term
// with X and W nil is the bias B alone (broadcast over the rows). With
// Edges the term's input is GatherMean(X, *Edges) (X the sources' rows,
// the result Edges.NumDst rows): a GraphSAGE relation's mean, which the
// joined product gathers straight into its input.
type LinearTerm struct {
	X, W, B *Var
	Edges   *GraphEdges
}

// rows returns the term's input row count.
func (t LinearTerm) rows() int {
	if t.Edges != nil {
		return t.Edges.NumDst
	}
	return t.X.Shape()[0]
}

// LinearSum returns Σ_i (X_i·W_iᵀ + B_i) over terms of one output width
// and one row count N. On a kernels.LaunchBounder backend with nothing
// recording a gradient it is one product: the inputs side by side with a
// column of ones per bias, times the weights side by side with the
// biases as columns (four launches whatever the number of terms).
// A term with Edges is gathered into that input directly on a
// kernels.GraphMultiAggregator backend (GatherConcat: one launch for the
// means, the other inputs and the ones), and is GatherMean(X, *Edges)
// otherwise, with the same values either way.
// Otherwise it sums in a fixed order: the first term as Linear(X, W, B),
// then for each further term its product added, then its bias added;
// when nothing records a gradient and the backend has
// kernels.GradAccumulator, each further product is added in place
// (MatMulAdd: one launch where a product and an Add take two), and so it
// is when recording gradients (linearAdd, with Linear's gradients): the
// sums of Linear and Add, which compute it otherwise, up to the order in
// which MatMulAdd rounds (on the CPU a product of few rows, or of an
// inner dimension past the GEMM's block, adds its partial sums into dst
// one at a time).
func LinearSum(terms []LinearTerm) *Var {
	n, out, vs := checkLinearSum(terms)
	if len(terms) > 1 && stackable(nonNil(vs)...) {
		return linearSumStacked(terms, n, out, nil)
	}
	return linearSumSeparate(terms, n, out, vs)
}

// LinearSums is LinearSum over several term lists, outs[i] =
// LinearSum(termss[i]). Where two or more lists take the joined product
// and the backend has kernels.ConcatManyer, their stacked weights are
// made in one launch instead of a Concat each.
func LinearSums(termss [][]LinearTerm) []*Var {
	outs := make([]*Var, len(termss))
	type plan struct {
		n, out int
		vs     []*Var
	}
	plans := make([]plan, len(termss))
	joined := make([]bool, len(termss))
	var wss [][]*Var
	for i, terms := range termss {
		n, out, vs := checkLinearSum(terms)
		plans[i] = plan{n, out, vs}
		if len(terms) > 1 && stackable(nonNil(vs)...) {
			joined[i] = true
			wss = append(wss, stackedWeights(terms, out))
		}
	}
	var stacks []*Var
	if len(wss) > 1 {
		stacks = concatMany(wss, 1)
	}
	k := 0
	for i, terms := range termss {
		p := plans[i]
		if !joined[i] {
			outs[i] = linearSumSeparate(terms, p.n, p.out, p.vs)
			continue
		}
		var w *Var
		if stacks != nil {
			w = stacks[k]
		}
		k++
		outs[i] = linearSumStacked(terms, p.n, p.out, w)
	}
	return outs
}

// concatMany returns Concat(g, axis) for every group g in one
// kernels.ConcatManyer call, as constants (the caller records no
// gradient), or nil when the backend has no ConcatManyer.
func concatMany(groups [][]*Var, axis int) []*Var {
	like := groups[0][0].Value
	cm, ok := backendOf(like).(kernels.ConcatManyer)
	if !ok {
		return nil
	}
	dsts := make([]*tensor.Tensor, len(groups))
	counts := make([]int, len(groups))
	var srcs []*tensor.Tensor
	for i, g := range groups {
		shape := append([]int(nil), g[0].Shape()...)
		shape[axis] = 0
		for _, v := range g {
			shape[axis] += v.Shape()[axis]
			srcs = append(srcs, v.Value)
		}
		dsts[i], counts[i] = alloc(like, like.DType(), shape...), len(g)
	}
	cm.ConcatMany(dsts, srcs, counts, axis)
	out := make([]*Var, len(groups))
	for i, d := range dsts {
		out[i] = Const(d)
	}
	return out
}

// checkLinearSum checks LinearSum's terms and returns the row count, the
// output width and every term's X, W and B in order.
func checkLinearSum(terms []LinearTerm) (n, out int, vs []*Var) {
	if len(terms) == 0 {
		panic("autograd: linear_sum: no terms")
	}
	n, out = -1, -1
	for _, t := range terms {
		if (t.X == nil) != (t.W == nil) || (t.X == nil && t.B == nil) {
			panic("autograd: linear_sum: a term needs X and W together, or a bias alone")
		}
		var w int
		if t.W != nil {
			w = t.W.Shape()[0]
			if t.X.Value.Rank() != 2 || (n >= 0 && t.rows() != n) {
				panic(fmt.Sprintf("autograd: linear_sum: input %v, want [N, in] with N = %d", t.X.Shape(), n))
			}
			if t.W.Value.Rank() != 2 || t.W.Shape()[1] != t.X.Shape()[1] {
				panic(fmt.Sprintf("autograd: linear_sum: input %v against weight %v", t.X.Shape(), t.W.Shape()))
			}
			n = t.rows()
		} else {
			w = t.B.Shape()[0]
		}
		if out >= 0 && w != out {
			panic(fmt.Sprintf("autograd: linear_sum: terms of widths %d and %d", out, w))
		}
		out = w
		vs = append(vs, t.X, t.W, t.B)
	}
	if n < 0 {
		panic("autograd: linear_sum: no term has an input (the row count)")
	}
	return n, out, vs
}

// linearSumSeparate is LinearSum's form with separate products.
func linearSumSeparate(terms []LinearTerm, n, out int, vs []*Var) *Var {
	terms = gathered(terms)
	first := terms[0]
	// acc, the running sum, is always a fresh tensor of LinearSum's own,
	// which it may write in place: a Linear's output, or the bias copied
	// to every row (Expand copies), and after that the sums below make.
	// None of the ops that make it reads its own output in its backward.
	var acc *Var
	if first.X != nil {
		acc = Linear(first.X, first.W, first.B)
	} else {
		acc = Expand(Reshape(first.B, 1, out), n, out)
	}
	ga, fused := backendOf(acc.Value).(kernels.GradAccumulator)
	fused = fused && accumulable(vs...)
	for _, t := range terms[1:] {
		if t.X != nil && needsGrad(acc, t.X, t.W, t.B) {
			if la := linearAddTakes(acc, t.X, t.W, t.B); la != nil {
				// Recording gradients: the product and the bias added
				// into the running sum in place, with Linear's
				// gradients.
				acc = linearAdd(acc, t.X, t.W, t.B, la)
				continue
			}
		}
		if t.X != nil {
			if fused && t.X.Value.IsContiguous() && t.W.Value.IsContiguous() {
				ga.MatMulAdd(acc.Value, t.X.Value, t.W.Value, false, true)
			} else {
				acc = Add(acc, Linear(t.X, t.W, nil))
			}
		}
		if t.B != nil {
			acc = Add(acc, t.B)
		}
	}
	return acc
}

// accumulable reports whether LinearSum may add products in place: no
// gradient recorded for vs and all F32.
func accumulable(vs ...*Var) bool {
	for _, v := range vs {
		if v != nil && (v.Value.DType() != tensor.F32 || (GradEnabled() && v.RequiresGrad())) {
			return false
		}
	}
	return true
}

// nonNil returns the non-nil Vars of vs.
func nonNil(vs []*Var) []*Var {
	out := vs[:0:0]
	for _, v := range vs {
		if v != nil {
			out = append(out, v)
		}
	}
	return out
}

// gathered returns terms with every gathered input computed
// (GatherMean) and Edges cleared; terms itself when none has Edges.
func gathered(terms []LinearTerm) []LinearTerm {
	var out []LinearTerm
	for i, t := range terms {
		if t.Edges == nil {
			if out != nil {
				out = append(out, t)
			}
			continue
		}
		if out == nil {
			out = append(make([]LinearTerm, 0, len(terms)), terms[:i]...)
		}
		out = append(out, LinearTerm{X: GatherMean(t.X, *t.Edges), W: t.W, B: t.B})
	}
	if out == nil {
		return terms
	}
	return out
}

// stackedWeights are the joined product's weights side by side: each
// term's W, then each bias as a column, in term order.
func stackedWeights(terms []LinearTerm, out int) []*Var {
	var ws []*Var
	for _, t := range terms {
		if t.X != nil {
			ws = append(ws, t.W)
		}
	}
	for _, t := range terms {
		if t.B != nil {
			ws = append(ws, Reshape(t.B, out, 1))
		}
	}
	return ws
}

// linearSumStacked is LinearSum's joined form: one product of K = Σ in_i
// + (number of biases), with the weights w side by side (stackedWeights;
// nil: concatenated here).
func linearSumStacked(terms []LinearTerm, n, out int, w *Var) *Var {
	if w == nil {
		w = Concat(stackedWeights(terms, out), 1)
	}
	if x, ok := gatherConcat(terms, n); ok {
		return Linear(x, w, nil)
	}
	terms = gathered(terms)
	var xs []*Var
	var like *Var
	nb := 0
	for _, t := range terms {
		if t.X != nil {
			xs = append(xs, t.X)
			like = t.X
		}
		if t.B != nil {
			nb++
		}
	}
	if nb > 0 {
		xs = append(xs, Const(onesBlock(like.Value, n, nb)))
	}
	return Linear(Concat(xs, 1), w, nil)
}

// gatherConcat returns the joined product's input of terms (n rows) in
// one kernels.GraphMultiAggregator GatherConcat — each input, gathered
// over its Edges where it has them, then a column of ones per bias — and
// whether it did: it does when some term has Edges (else Concat joins
// the inputs as well) and fusedGatherConcat does. The caller checked
// that nothing records a gradient and that all is F32 (stackable).
func gatherConcat(terms []LinearTerm, n int) (*Var, bool) {
	var pieces []GatherPiece
	edges, nb := false, 0
	for _, t := range terms {
		if t.B != nil {
			nb++
		}
		if t.X != nil {
			pieces = append(pieces, GatherPiece{X: t.X, Edges: t.Edges})
			edges = edges || t.Edges != nil
		}
	}
	if !edges {
		return nil, false
	}
	return fusedGatherConcat(pieces, n, nb)
}

// fusedGatherConcat is GatherConcat's one launch (with ones columns of
// ones after the pieces) when it applies: fusedGraph's conditions over
// the pieces (every X F32, contiguous and recording no gradient, every
// gathered piece's CSR given) on a kernels.GraphMultiAggregator backend.
func fusedGatherConcat(pieces []GatherPiece, n, ones int) (*Var, bool) {
	if len(pieces) == 0 {
		return nil, false
	}
	var es []GraphEdges
	vs := make([]*Var, len(pieces))
	for i, p := range pieces {
		vs[i] = p.X
		if p.Edges != nil {
			es = append(es, *p.Edges)
		}
	}
	g, ok := fusedGraph(es, vs, nil)
	gm, multi := g.(kernels.GraphMultiAggregator)
	if !ok || !multi {
		return nil, false
	}
	xs := make([]*tensor.Tensor, len(pieces))
	src, rowPtr, order := make([]*tensor.Tensor, len(pieces)), make([]*tensor.Tensor, len(pieces)), make([]*tensor.Tensor, len(pieces))
	width := ones
	for i, p := range pieces {
		xs[i] = p.X.Value
		width += p.X.Shape()[1]
		if p.Edges != nil {
			src[i], rowPtr[i], order[i] = p.Edges.Src, p.Edges.RowPtr, p.Edges.Order
		}
	}
	like := xs[0]
	x := alloc(like, like.DType(), n, width)
	gm.GatherConcat(x, xs, src, rowPtr, order, ones)
	return Const(x), true
}

// GatherPiece is one column block of GatherConcat: X [N, w] itself, or
// with Edges the mean of X's rows over each destination node's incoming
// edges (GatherMean; N = Edges.NumDst). Unfused, when set, computes the
// piece where GatherConcat does not fuse, with the caller's own ops and
// their gradients (an Embedding or an IndexSelect for a CSR of one edge
// per node, a SegmentMean); it must give the piece's values.
type GatherPiece struct {
	X       *Var
	Edges   *GraphEdges
	Unfused func() *Var
}

// rows returns the piece's row count.
func (p GatherPiece) rows() int {
	if p.Edges != nil {
		return p.Edges.NumDst
	}
	return p.X.Shape()[0]
}

// GatherConcat returns its pieces side by side ([N, Σ widths]). Where
// nothing records a gradient and the device has
// kernels.GraphMultiAggregator (F32, contiguous, every gathered piece's
// CSR given) it is one launch; otherwise each piece is computed —
// Unfused() when set, else X or GatherMean(X, *Edges) — and Concat joins
// them, with gradients.
func GatherConcat(pieces []GatherPiece) *Var {
	if len(pieces) == 0 {
		panic("autograd: gather_concat: no pieces")
	}
	n := -1
	for _, p := range pieces {
		if p.X == nil || p.X.Value.Rank() != 2 {
			panic("autograd: gather_concat: every piece needs an [N, w] input")
		}
		if n < 0 {
			n = p.rows()
		}
		if p.rows() != n {
			panic(fmt.Sprintf("autograd: gather_concat: pieces of %d rows, want [%d, w] results of [N, w] inputs", p.rows(), n))
		}
	}
	if x, ok := fusedGatherConcat(pieces, n, 0); ok {
		return x
	}
	vs := make([]*Var, len(pieces))
	for i, p := range pieces {
		switch {
		case p.Unfused != nil:
			vs[i] = p.Unfused()
		case p.Edges != nil:
			vs[i] = GatherMean(p.X, *p.Edges)
		default:
			vs[i] = p.X
		}
	}
	return Concat(vs, 1)
}

// onesBlock returns an [n, nb] tensor of ones on like's device and of its
// dtype, shared by the calls that ask for that size (never written:
// Concat only reads it), so that a joined LinearSum launches no Fill
// once it exists. A block is made outside a capture when it can be (a
// Fill recorded in a graph would run at every replay); the most recent
// maxOnesBlocks are kept.
func onesBlock(like *tensor.Tensor, n, nb int) *tensor.Tensor { return constBlock(like, 1, n, nb) }

// constBlock is onesBlock for any value v: a shared [n, nb] block of v.
func constBlock(like *tensor.Tensor, v float64, n, nb int) *tensor.Tensor {
	key := onesKey{like.Device(), like.DType(), v, n, nb}
	onesMu.Lock()
	defer onesMu.Unlock()
	for i, b := range onesBlocks {
		if b.key == key {
			copy(onesBlocks[1:i+1], onesBlocks[:i])
			onesBlocks[0] = b
			return b.t
		}
	}
	t := full(like, like.DType(), v, n, nb)
	if backendOf(like).Capturing() {
		return t // this graph's own: a later call outside a capture shares one
	}
	onesBlocks = append([]onesEntry{{key, t}}, onesBlocks...)
	if len(onesBlocks) > maxOnesBlocks {
		onesBlocks = onesBlocks[:maxOnesBlocks]
	}
	return t
}

// maxOnesBlocks bounds the shared blocks of ones (a few node counts per
// graph size, a graph size per batch shape).
const maxOnesBlocks = 32

type onesKey struct {
	dev   tensor.Device
	dt    tensor.DType
	v     float64
	n, nb int
}

type onesEntry struct {
	key onesKey
	t   *tensor.Tensor
}

var (
	onesMu     sync.Mutex
	onesBlocks []onesEntry
)

// ReluHead is one head of ReluHeads: relu(x·W1ᵀ + B1)·W2ᵀ + B2, with W1
// [hidden, in], B1 [hidden], W2 [out, hidden] and B2 [out].
type ReluHead struct {
	W1, B1, W2, B2 *Var
}

// ReluHeads returns each head's output on one input x [N, in]:
// LinearRelu(x, W1, B1), then Linear with W2 and B2 ([N, out]).
//
// The heads run together where LinearStack joins products (a
// kernels.LaunchBounder backend, nothing recording a gradient, all F32)
// and every head has both biases and one W1 shape. Then each layer is one
// product broadcast over the heads' stacked weights, with the first
// layer's bias and ReLU and the second layer's bias added after it. The
// second layer's weights are padded with zero rows to the widest head.
// Each output is then a view [N, out] of the joined [heads, N, widest]
// result, its rows strided by the widest width. The values are the
// separate heads' up to the products' summation order.
//
// A head's outputs then depend on the other heads' hidden values only
// through zeros: a NaN or infinity in one head's hidden layer (a
// non-finite weight) makes every head's output NaN, where separate
// heads would keep it to that head.
func ReluHeads(x *Var, hs []ReluHead) []*Var {
	outs := make([]*Var, len(hs))
	if !joinableHeads(x, hs) {
		for i, h := range hs {
			outs[i] = Linear(LinearRelu(x, h.W1, h.B1), h.W2, h.B2)
		}
		return outs
	}
	H, hid, in, n := len(hs), hs[0].W1.Shape()[0], hs[0].W1.Shape()[1], x.Shape()[0]
	widest := 0
	for _, h := range hs {
		widest = max(widest, h.W2.Shape()[0])
	}
	w1s, b1s := make([]*Var, H), make([]*Var, H)
	var w2s, b2s []*Var
	for i, h := range hs {
		w1s[i], b1s[i] = h.W1, h.B1
		w2s, b2s = append(w2s, h.W2), append(b2s, h.B2)
		if pad := widest - h.W2.Shape()[0]; pad > 0 {
			w2s = append(w2s, Const(constBlock(x.Value, 0, pad, hid)))
			b2s = append(b2s, Reshape(Const(constBlock(x.Value, 0, pad, 1)), pad))
		}
	}
	st := StackRows([][]*Var{w1s, b1s, w2s, b2s}) // one launch for the four stacks
	w1, b1 := Reshape(st[0], H, hid, in), Reshape(st[1], H, 1, hid)
	hidden := Relu(Add(MatMulT(x, w1, false, true), b1)) // [H, N, hid]
	w2, b2 := Reshape(st[2], H, widest, hid), Reshape(st[3], H, 1, widest)
	y := Add(MatMulT(hidden, w2, false, true), b2) // [H, N, widest]
	for i, h := range hs {
		outs[i] = Narrow(Reshape(Narrow(y, 0, i, 1), n, widest), 1, 0, h.W2.Shape()[0])
	}
	return outs
}

// ReluHeadGroup is heads on one input: X, or where X is nil the pieces'
// GatherConcat (a policy's context: its global embedding beside the mean
// of its slots' embeddings).
type ReluHeadGroup struct {
	X      *Var
	Pieces []GatherPiece
	Heads  []ReluHead
}

// rows returns the group's input rows.
func (g ReluHeadGroup) rows() int {
	if g.X != nil {
		return g.X.Shape()[0]
	}
	return g.Pieces[0].rows()
}

// HeadColumn places one head's output in ReluHeadGroupsJoined's joined
// output: head Head of group Group, Rows (≥ 1) consecutive rows of its
// output side by side in one joined row (a pointer head of one score
// per slot: Rows the slots per graph).
type HeadColumn struct {
	Group, Head, Rows int
}

// ReluHeadGroups returns ReluHeads(g.X, g.Heads) for each group g (g's
// input GatherConcat(g.Pieces) where g.X is nil): a policy's action
// heads on one input, its pointer head on another, its value head on a
// third. In inference (nothing recording a gradient), with every input
// a 2-D F32 matrix — or contiguous F32 pieces with their CSRs — on one
// device that is a kernels.ReluHeadser taking them all, every head of
// every group is one call (CUDA: one launch for up to 16 heads, a
// gathered input read inside it, never stored), each output a [N, out]
// tensor of its own; otherwise it is ReluHeads per group. The values
// agree to the products' summation order.
func ReluHeadGroups(groups []ReluHeadGroup) [][]*Var {
	outs, _ := ReluHeadGroupsJoined(groups, nil)
	return outs
}

// ReluHeadGroupsJoined is ReluHeadGroups that also returns, where the
// heads ran as one call that took the joined output and cols is not
// empty, the heads' outputs side by side in cols' order, written by that
// call (a backend that declines a call with gathered inputs or a joined
// output is asked again with the inputs gathered first and no joined
// output): head c's output [N, o] takes c.Rows·o columns, its rows
// r·c.Rows … (r+1)·c.Rows − 1 making joined row r, so that every named
// head's N / c.Rows must be the same.
// Otherwise the joined output is nil (the caller joins the outputs
// itself). It panics on a group with both or neither of X and Pieces, a
// column naming no head, a head named twice, or row counts that do not
// agree.
func ReluHeadGroupsJoined(groups []ReluHeadGroup, cols []HeadColumn) ([][]*Var, *Var) {
	return ReluHeadGroupsJoinedInto(groups, cols, nil)
}

// ReluHeadGroupsJoinedInto is ReluHeadGroupsJoined writing the joined
// output into into, a contiguous F32 tensor of the joined output's shape
// on the inputs' device, where the heads run as one call (the joined
// output it returns is then into's), instead of a tensor of its own:
// memory the caller keeps, such as a mapped tensor the host reads
// without a device-to-host copy (tensor.EmptyMapped; tamiyo's Inference).
// A nil into is ReluHeadGroupsJoined. It panics, beside
// ReluHeadGroupsJoined's cases, on an into of another dtype, shape or
// device, or not contiguous.
func ReluHeadGroupsJoinedInto(groups []ReluHeadGroup, cols []HeadColumn, into *tensor.Tensor) ([][]*Var, *Var) {
	for i, g := range groups {
		if (g.X == nil) == (len(g.Pieces) == 0) {
			panic(fmt.Sprintf("autograd: relu_head_groups: group %d needs X or Pieces, one of them", i))
		}
		checkPieces("relu_head_groups", g.Pieces)
	}
	rows, width := checkHeadColumns(groups, cols)
	if into != nil {
		like := inputLike(groups[0].X, groups[0].Pieces)
		if into.DType() != tensor.F32 || !slices.Equal(into.Shape(), []int{rows, width}) || into.Device() != like.Device() || !into.IsContiguous() {
			panic(fmt.Sprintf("autograd: relu_head_groups: into is %v %v on %v (contiguous %v), want F32 [%d %d] on %v, contiguous",
				into.DType(), into.Shape(), into.Device(), into.IsContiguous(), rows, width, like.Device()))
		}
	}
	outs := make([][]*Var, len(groups))
	input := inputsOnce(len(groups), func(i int) (*Var, []GatherPiece) { return groups[i].X, groups[i].Pieces })
	if rh, ok := joinableHeadGroups(groups); ok {
		var calls []kernels.ReluHeadCall
		val := func(v *Var) *tensor.Tensor {
			if v == nil {
				return nil
			}
			return contig(v.Value)
		}
		like := inputLike(groups[0].X, groups[0].Pieces)
		start := make([]int, len(groups)) // each group's first call
		for i, g := range groups {
			start[i] = len(calls)
			var x *tensor.Tensor
			var in *kernels.GatherInput
			if g.X != nil {
				x = contig(g.X.Value)
			} else {
				in = gatherInput(g.Pieces)
			}
			for _, h := range g.Heads {
				calls = append(calls, kernels.ReluHeadCall{Out: alloc(like, tensor.F32, g.rows(), h.W2.Shape()[0]), X: x, In: in,
					W1: val(h.W1), B1: val(h.B1), W2: val(h.W2), B2: val(h.B2)})
			}
		}
		var joined *tensor.Tensor
		if len(cols) > 0 {
			joined = into
			if joined == nil {
				joined = alloc(like, tensor.F32, rows, width)
			}
			col := 0
			for _, c := range cols {
				k := &calls[start[c.Group]+c.Head]
				k.Join, k.JoinCol, k.JoinRows = joined, col, c.Rows
				col += c.Rows * k.Out.Dim(1)
			}
		}
		took := func() [][]*Var {
			for i, g := range groups {
				outs[i] = make([]*Var, len(g.Heads))
				for j := range g.Heads {
					outs[i][j] = Const(calls[start[i]+j].Out)
				}
			}
			return outs
		}
		if rh.ReluHeads(calls) {
			if joined == nil {
				return took(), nil
			}
			return took(), Const(joined)
		}
		// Declined (CUDA with ESPER_CUDA_GATHER_IN=off, say): asked again
		// with the gathered inputs written out first (GatherConcat: a
		// launch of their own) and no joined output.
		again := joined != nil
		for i, g := range groups {
			if g.X != nil {
				continue
			}
			again = true
			x := contig(input(i).Value)
			for j := range g.Heads {
				calls[start[i]+j].X, calls[start[i]+j].In = x, nil
			}
		}
		for k := range calls {
			calls[k].Join = nil
		}
		if again && rh.ReluHeads(calls) {
			return took(), nil
		}
	}
	for i, g := range groups {
		outs[i] = ReluHeads(input(i), g.Heads)
	}
	return outs, nil
}

// checkHeadColumns checks ReluHeadGroupsJoined's columns and returns the
// joined output's rows and columns (0, 0 for none).
func checkHeadColumns(groups []ReluHeadGroup, cols []HeadColumn) (rows, width int) {
	seen := map[[2]int]bool{}
	for i, c := range cols {
		if c.Group < 0 || c.Group >= len(groups) || c.Head < 0 || c.Head >= len(groups[c.Group].Heads) {
			panic(fmt.Sprintf("autograd: relu_head_groups: column %d names head %d of group %d, which does not exist", i, c.Head, c.Group))
		}
		if seen[[2]int{c.Group, c.Head}] {
			panic(fmt.Sprintf("autograd: relu_head_groups: column %d names head %d of group %d again", i, c.Head, c.Group))
		}
		seen[[2]int{c.Group, c.Head}] = true
		n := groups[c.Group].rows()
		if c.Rows < 1 || n%c.Rows != 0 || (i > 0 && n/c.Rows != rows) {
			panic(fmt.Sprintf("autograd: relu_head_groups: column %d joins %d of its %d rows a joined row, want %d joined rows", i, c.Rows, n, rows))
		}
		rows = n / c.Rows
		width += c.Rows * groups[c.Group].Heads[c.Head].W2.Shape()[0]
	}
	return rows, width
}

// inputLike returns a tensor on the device of an input given as x or,
// where x is nil, as pieces: x's value, or the first piece's X's.
func inputLike(x *Var, pieces []GatherPiece) *tensor.Tensor {
	if x != nil {
		return x.Value
	}
	return pieces[0].X.Value
}

// gatherInput is pieces as a kernels.GatherInput: their X values and
// each gathered piece's CSR, for their rows.
func gatherInput(pieces []GatherPiece) *kernels.GatherInput {
	n := len(pieces)
	in := &kernels.GatherInput{Rows: pieces[0].rows(), Xs: make([]*tensor.Tensor, n), Src: make([]*tensor.Tensor, n),
		RowPtr: make([]*tensor.Tensor, n), Order: make([]*tensor.Tensor, n)}
	for i, p := range pieces {
		in.Xs[i] = p.X.Value
		if p.Edges != nil {
			in.Src[i], in.RowPtr[i], in.Order[i] = p.Edges.Src, p.Edges.RowPtr, p.Edges.Order
		}
	}
	return in
}

// inputsOnce returns input(i), the ith of n inputs each given as an X
// or, where X is nil, as pieces (of(i)): X, or GatherConcat of the
// pieces, gathered at most once whichever path asks.
func inputsOnce(n int, of func(i int) (*Var, []GatherPiece)) (input func(i int) *Var) {
	gathered := make([]*Var, n)
	return func(i int) *Var {
		x, pieces := of(i)
		if x != nil {
			return x
		}
		if gathered[i] == nil {
			gathered[i] = GatherConcat(pieces)
		}
		return gathered[i]
	}
}

// checkPieces panics, naming op, on a piece without an [N, w] input or
// pieces of different row counts (GatherConcat's rules), before any
// path looks at them.
func checkPieces(op string, pieces []GatherPiece) {
	for i, p := range pieces {
		if p.X == nil || p.X.Value.Rank() != 2 {
			panic(fmt.Sprintf("autograd: %s: piece %d needs an [N, w] input", op, i))
		}
		if p.rows() != pieces[0].rows() {
			panic(fmt.Sprintf("autograd: %s: pieces of %d and %d rows", op, pieces[0].rows(), p.rows()))
		}
	}
}

// gatherablePieces reports whether pieces may be read as a
// kernels.GatherInput on dev: every X 2-D, contiguous, F32 on dev and
// recording no gradient, every gathered piece's CSR given, contiguous
// I64 vectors on dev.
func gatherablePieces(pieces []GatherPiece, dev tensor.Device) bool {
	for _, p := range pieces {
		if p.X == nil || needsGrad(p.X) || p.X.Value.Rank() != 2 || !p.X.Value.IsContiguous() ||
			p.X.Value.DType() != tensor.F32 || p.X.Value.Device() != dev {
			return false
		}
		if e := p.Edges; e != nil {
			if !e.csr("gathered input") {
				return false
			}
			for i, t := range []*tensor.Tensor{e.Src, e.RowPtr, e.Order} {
				if t == nil && i == 2 {
					continue // Order: the identity
				}
				if t == nil || t.DType() != tensor.I64 || t.Device() != dev || t.Rank() != 1 || !t.IsContiguous() {
					return false
				}
			}
		}
	}
	return true
}

// joinableHeadGroups returns the ReluHeadser of ReluHeadGroups' heads
// when they may run as one call: no autocast, nothing recording a
// gradient, every input 2-D (a group of pieces: every piece's X 2-D and
// contiguous, every gathered piece's CSR given), every operand F32 on
// one device, every head with both weights, and the device's backend a
// ReluHeadser (which checks the shapes).
func joinableHeadGroups(groups []ReluHeadGroup) (kernels.ReluHeadser, bool) {
	if len(groups) == 0 || AutocastDType() != tensor.Invalid {
		return nil, false // under autocast the products' dtype is autocast's
	}
	first := inputLike(groups[0].X, groups[0].Pieces)
	rh, ok := backendOf(first).(kernels.ReluHeadser)
	if !ok {
		return nil, false
	}
	dev := first.Device()
	f32 := func(vs ...*Var) bool {
		for _, v := range vs {
			if v != nil && (v.Value.DType() != tensor.F32 || v.Value.Device() != dev) {
				return false
			}
		}
		return true
	}
	for _, g := range groups {
		if g.X != nil && (needsGrad(g.X) || g.X.Value.Rank() != 2 || !f32(g.X)) {
			return nil, false
		}
		if !gatherablePieces(g.Pieces, dev) {
			return nil, false
		}
		for _, h := range g.Heads {
			if h.W1 == nil || h.W2 == nil || h.W2.Value.Rank() != 2 || needsGrad(h.W1, h.B1, h.W2, h.B2) || !f32(h.W1, h.B1, h.W2, h.B2) {
				return nil, false
			}
		}
	}
	return rh, true
}

// joinableHeads reports whether ReluHeads runs hs together on x.
func joinableHeads(x *Var, hs []ReluHead) bool {
	if len(hs) < 2 || x.Value.Rank() != 2 {
		return false
	}
	vs := []*Var{x}
	for _, h := range hs {
		if h.W1 == nil || h.B1 == nil || h.W2 == nil || h.B2 == nil || !tensor.SameShape(h.W1.Shape(), hs[0].W1.Shape()) ||
			h.W2.Value.Rank() != 2 || h.W2.Shape()[1] != h.W1.Shape()[0] || h.W1.Shape()[1] != x.Shape()[1] {
			return false
		}
		vs = append(vs, h.W1, h.B1, h.W2, h.B2)
	}
	return stackable(vs...)
}

// StackRows returns, for each group of weights, the weights stacked along
// their first axis (Concat(group, 0); a group of one weight is that
// weight, an empty group nil). Where LinearStack joins products (a
// kernels.LaunchBounder backend, nothing recording a gradient, all F32)
// and the backend has kernels.ConcatManyer, every group's stack is made
// by one ConcatMany (on CUDA one launch per 32 weights) instead of a
// Concat per group. A group whose weights already lie one after another
// in one storage, in its order, is a view of them instead, with no copy
// (adjacentStack).
func StackRows(groups [][]*Var) []*Var {
	out := make([]*Var, len(groups))
	var all []*Var
	var multi [][]*Var
	for i, g := range groups {
		all = append(all, g...)
		switch {
		case len(g) == 1:
			out[i] = g[0]
		case len(g) > 1:
			if out[i] = adjacentStack(g); out[i] == nil {
				multi = append(multi, g)
			}
		}
	}
	var stacks []*Var
	if len(multi) > 1 && stackable(all...) {
		stacks = concatMany(multi, 0)
	}
	for i, g := range groups {
		if out[i] != nil || len(g) == 0 {
			continue
		}
		if stacks != nil {
			out[i], stacks = stacks[0], stacks[1:]
		} else {
			out[i] = Concat(g, 0)
		}
	}
	return out
}

// adjacentStack returns Concat(g, 0) as a view, without a copy, when
// g's weights already lie one after another in one storage, in g's
// order, each contiguous and of one dtype and one shape past the first
// axis (a layer that lays out its weights for stacking, as tamiyo's
// policy does on a GPU); else nil. Like concatMany's stacks it records
// no gradient; being a view of the weights, it reads their values at
// every replay of a captured forward.
func adjacentStack(g []*Var) *Var {
	if len(g) < 2 || (GradEnabled() && anyRequiresGrad(g)) {
		return nil
	}
	first := g[0].Value
	if first.Rank() == 0 || !first.IsContiguous() {
		return nil
	}
	rest := first.Shape()[1:]
	next, rows := first.Offset(), 0
	for _, v := range g {
		t := v.Value
		if t.Storage() != first.Storage() || t.Offset() != next || !t.IsContiguous() || t.DType() != first.DType() ||
			t.Rank() != first.Rank() || !tensor.SameShape(t.Shape()[1:], rest) {
			return nil
		}
		next += t.Numel()
		rows += t.Shape()[0]
	}
	flat := tensor.New(first.Storage(), []int{next - first.Offset()}, []int{1}, first.Offset())
	return Const(flat.Reshape(append([]int{rows}, rest...)...))
}

// anyRequiresGrad reports whether any of vs requires a gradient.
func anyRequiresGrad(vs []*Var) bool {
	for _, v := range vs {
		if v.RequiresGrad() {
			return true
		}
	}
	return false
}

// LinearStacks is LinearStack over several inputs, outs[i] =
// LinearStack(xs[i], wss[i]), with the stacked weights of all of them
// made in one launch where products are joined (StackRows).
func LinearStacks(xs []*Var, wss [][]*Var) [][]*Var {
	if len(xs) != len(wss) {
		panic(fmt.Sprintf("autograd: linear_stacks: %d inputs and %d weight lists", len(xs), len(wss)))
	}
	outs := make([][]*Var, len(xs))
	all := append([]*Var(nil), xs...)
	for _, ws := range wss {
		all = append(all, ws...)
	}
	if len(all) == len(xs) || !stackable(all...) {
		for i, x := range xs {
			outs[i] = LinearStack(x, wss[i])
		}
		return outs
	}
	stacks := StackRows(wss)
	ys := joinedProducts(xs, stacks)
	for i, x := range xs {
		ws := wss[i]
		outs[i] = make([]*Var, len(ws))
		if len(ws) == 1 {
			if ys != nil {
				outs[i][0] = ys[i]
			} else {
				outs[i][0] = Linear(x, ws[0], nil)
			}
			continue
		}
		if len(ws) == 0 {
			continue
		}
		var y *Var
		if ys != nil {
			y = ys[i]
		} else {
			y = Linear(x, stacks[i], nil)
		}
		off := 0
		for j, w := range ws {
			n := w.Shape()[0]
			outs[i][j] = Narrow(y, 1, off, n)
			off += n
		}
	}
	return outs
}

// joinedProducts returns x_i·w_iᵀ for every input with a weight (w_i
// nil: none, and a nil entry) in one kernels.MatMulsJoiner call (CUDA:
// one launch for up to eight) where the backend has it — two or more
// products, no autocast, F32 — as constants (LinearStacks' caller
// records no gradient); nil otherwise, the caller then taking a Linear
// each. Where the joiner declines the products (CUDA: past its size
// bound, or joins off), each runs as its own MatMul into the output
// already made for it: what Linear(x, w, nil) computes, bit for bit,
// with no tensor made twice. A join's sums are the joiner's own, which
// agree with Linear's to rounding.
func joinedProducts(xs, ws []*Var) []*Var {
	if AutocastDType() != tensor.Invalid {
		return nil
	}
	var at []int
	var mj kernels.MatMulsJoiner
	for i, w := range ws {
		if w == nil {
			continue
		}
		x := xs[i]
		if x.Value.Rank() != 2 || x.Value.DType() != tensor.F32 || w.Value.DType() != tensor.F32 {
			return nil
		}
		j, ok := backendOf(x.Value).(kernels.MatMulsJoiner)
		if !ok || (mj != nil && j != mj) {
			return nil
		}
		mj = j
		at = append(at, i)
	}
	if len(at) < 2 {
		return nil
	}
	calls := make([]kernels.MatMulTCall, len(at))
	for k, i := range at {
		a, b := contig(xs[i].Value), contig(ws[i].Value)
		calls[k] = kernels.MatMulTCall{Dst: alloc(a, tensor.F32, a.Dim(0), b.Dim(0)), A: a, B: b}
	}
	if !mj.MatMulsT(calls) {
		kernels.MatMulsTOps(backendOf(xs[at[0]].Value), calls)
	}
	ys := make([]*Var, len(xs))
	for k, i := range at {
		ys[i] = Const(calls[k].Dst)
	}
	return ys
}

// LinearSumsAct returns act(scales[i]·LinearSum(termss[i])) + res[i] for
// every term list (res[i] nil: no residual): a graph layer's sums over
// its relations with its activation and residual, what LinearSums then
// ScaleActAdd compute, and does compute where the path below does not
// apply (so bit for bit on the CPU).
//
// On a kernels.LaunchBounder backend with kernels.GatherSummer, with
// nothing recording a gradient and everything F32, it transforms before
// it aggregates: each distinct input X goes through every weight that
// reads it in one product (LinearStacks: the stacked weights of all
// inputs made in one launch), and each list is one GatherSum of those
// products' column blocks (a term with Edges takes the mean of its
// block over them: the mean of the products is the product of the
// mean), its biases, scale, activation and residual. That is a launch
// per input and per list plus one, where LinearSums and ScaleActAdd take
// a gather, a product and an activation per list, and the products are
// wide (K the input's width) instead of deep (K every relation's width
// side by side). Its values are the composition's up to rounding: the
// means are taken after the products, and GatherSum rounds as the
// backend does.
func LinearSumsAct(termss [][]LinearTerm, scales []float64, act kernels.UnaryOp, res []*Var) []*Var {
	if len(scales) != len(termss) || len(res) != len(termss) {
		panic(fmt.Sprintf("autograd: linear_sums_act: %d term lists, %d scales and %d residuals", len(termss), len(scales), len(res)))
	}
	if outs := linearSumsGathered(termss, scales, act, res); outs != nil {
		return outs
	}
	outs := LinearSums(termss)
	for i := range outs {
		outs[i] = ScaleActAdd(outs[i], scales[i], act, res[i])
	}
	return outs
}

// SumsStacks returns the weight groups that LinearSumsAct stacks where
// it transforms before it aggregates: for every distinct input X of the
// terms, in the order the terms first name it, the weights that read
// it, in the order the terms name them. A layer that lays each group's
// weights out one after another in one storage, in this order, has its
// stacks taken as views of them, without a copy (see StackRows). The
// terms are not checked.
func SumsStacks(termss [][]LinearTerm) [][]*Var {
	_, wss, _ := sumsStacks(termss)
	return wss
}

// stackRef locates a term's product among LinearStacks' outputs: input
// x, weight w of its group (x < 0: a bias alone).
type stackRef struct{ x, w int }

// sumsStacks is SumsStacks with the inputs and, per term, where its
// product lands.
func sumsStacks(termss [][]LinearTerm) (xs []*Var, wss [][]*Var, refs [][]stackRef) {
	at := map[*Var]int{}
	refs = make([][]stackRef, len(termss))
	for i, terms := range termss {
		refs[i] = make([]stackRef, len(terms))
		for k, t := range terms {
			refs[i][k] = stackRef{-1, -1}
			if t.W == nil {
				continue // a bias alone
			}
			j, ok := at[t.X]
			if !ok {
				j = len(xs)
				at[t.X] = j
				xs, wss = append(xs, t.X), append(wss, nil)
			}
			refs[i][k] = stackRef{j, len(wss[j])}
			wss[j] = append(wss[j], t.W)
		}
	}
	return xs, wss, refs
}

// linearSumsGathered is LinearSumsAct's transform-then-aggregate path,
// or nil where it does not apply.
func linearSumsGathered(termss [][]LinearTerm, scales []float64, act kernels.UnaryOp, res []*Var) []*Var {
	if len(termss) == 0 || len(termss[0]) == 0 {
		return nil // LinearSums says what is wrong
	}
	// Where the backend could not join (the CPU), nothing more: the
	// terms are checked once, by LinearSums.
	first := termss[0][0].X
	if first == nil {
		first = termss[0][0].B
	}
	if first == nil {
		return nil
	}
	if lb, ok := backendOf(first.Value).(kernels.LaunchBounder); !stackAnywhere && (!ok || !lb.LaunchBound()) {
		return nil
	}
	type shape struct{ n, out int }
	shapes := make([]shape, len(termss))
	var vs []*Var
	for i, terms := range termss {
		n, out, tvs := checkLinearSum(terms)
		shapes[i] = shape{n, out}
		vs = append(vs, nonNil(tvs)...)
		if r := res[i]; r != nil {
			if !tensor.SameShape(r.Shape(), []int{n, out}) {
				return nil // ScaleActAdd says what is wrong
			}
			vs = append(vs, r)
		}
	}
	if !stackable(vs...) {
		return nil
	}
	like := vs[0].Value
	gs, ok := backendOf(like).(kernels.GatherSummer)
	if !ok {
		return nil
	}
	// Every gathered term's CSR, checked before anything launches (a
	// relation given without one is summed by the unfused path).
	for _, terms := range termss {
		for _, t := range terms {
			if e := t.Edges; e != nil && e.Len() > 0 && !e.csr("linear_sums") {
				return nil
			}
		}
	}
	xs, wss, refs := sumsStacks(termss)
	prods := LinearStacks(xs, wss)
	outs := make([]*Var, len(termss))
	calls := make([]kernels.GatherSumCall, len(termss))
	for i, terms := range termss {
		var px, src, rowPtr, order, biases []*tensor.Tensor
		for k, t := range terms {
			if t.B != nil {
				biases = append(biases, contig(t.B.Value))
			}
			r := refs[i][k]
			if r.x < 0 {
				continue
			}
			if e := t.Edges; e != nil {
				if e.Len() == 0 {
					continue // the mean over no edges is 0
				}
				px, src, rowPtr, order = append(px, prods[r.x][r.w].Value), append(src, e.Src), append(rowPtr, e.RowPtr), append(order, e.Order)
				continue
			}
			px, src, rowPtr, order = append(px, prods[r.x][r.w].Value), append(src, nil), append(rowPtr, nil), append(order, nil)
		}
		var rv *tensor.Tensor
		if res[i] != nil {
			rv = contig(res[i].Value)
		}
		dst := alloc(like, tensor.F32, shapes[i].n, shapes[i].out)
		calls[i] = kernels.GatherSumCall{Out: dst, Xs: px, Src: src, RowPtr: rowPtr, Order: order, Biases: biases, Scale: scales[i], Act: act, Res: rv}
		outs[i] = Const(dst)
	}
	// The sums read the products and write outputs of their own: one
	// join where the backend has it (one launch on CUDA for a layer's
	// node types), else one call each.
	if gj, ok := gs.(kernels.GatherSumsJoiner); ok && len(calls) > 1 {
		gj.GatherSums(calls)
		return outs
	}
	for _, c := range calls {
		gs.GatherSum(c.Out, c.Xs, c.Src, c.RowPtr, c.Order, c.Biases, c.Scale, c.Act, c.Res)
	}
	return outs
}
