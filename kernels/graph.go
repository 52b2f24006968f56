package kernels

import (
	"fmt"
	"sync"

	"github.com/esper-go/esper/tensor"
)

// GraphAggregator is the fused message passing of a graph network's
// inference forward, an optional capability (check with a type
// assertion; F32 on every backend that has it, F64 where the backend
// computes F64). Each method reads one relation's edges grouped by
// destination node, in compressed-sparse-row form:
//
//   - src [E] I64: the source node of every edge;
//   - rowPtr [Nd+1] I64: destination node i's edges are
//     order[rowPtr[i]:rowPtr[i+1]], rowPtr[0] = 0 and rowPtr[Nd] = E;
//   - order [E] I64: the edge ids grouped by destination, in ascending
//     edge id within a destination (a stable sort by destination); or
//     nil where the edges are in that order already (sorted by
//     destination: order the identity), so that a device reads each
//     edge's source one load sooner (tamiyo's graphs are built so).
//
// The host builds the three once per graph (tamiyo's graph tensors do),
// so a device computes each relation's aggregation in one launch instead
// of the gather, segment and softmax launches the unfused ops take. The
// CPU checks the CSR's values; a device reads them as given (a CSR that
// breaks the rules above gives undefined results there, as an index out
// of range does in IndexSelect). Neither method records gradients:
// autograd uses them when nothing needs a gradient and composes the
// unfused ops otherwise.
type GraphAggregator interface {
	// GATAggregate is one relation of a GAT layer (separate source and
	// destination projections, edge attributes, heads averaged, no self
	// loops). With H = heads and C = out's width, hs [Ns, H·C] the
	// projected sources, hd [Nd, H·C] the projected destinations (each
	// contiguous or a row-strided view, strides [ld, 1] with ld ≥ H·C:
	// column blocks of one stacked projection), attr
	// [E, F] the edge attributes and we [H·C, F] the edge projection's
	// weight (an nn.Linear weight, [out, in]), the logit of edge k = j→i
	// and head h is
	//
	//	l[k,h] = max(z, slope·z),  z = Σ_c hs[j,h,c]·attSrc[h,c]
	//	         + Σ_c hd[i,h,c]·attDst[h,c] + Σ_f attr[k,f]·v[h,f]
	//
	// with v[h,f] = Σ_c attEdge[h,c]·we[h·C+c, f] (the edge projection
	// folded into its attention vector); α is the softmax of l over i's
	// incoming edges, per head, and
	//
	//	r[i,c] = bias[c] + (1/H)·Σ_h Σ_k α[k,h]·hs[j,h,c]
	//
	// (bias[c] alone for a node without incoming edges), written as
	// out = alpha·r, or added as out += alpha·r with accumulate (the mean
	// over the relations into one node type: alpha = 1/R, the first
	// relation writes and the others accumulate). attSrc, attDst and
	// attEdge hold H·C elements each ([1, H, C] parameters), bias C.
	GATAggregate(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order *T, heads int, slope, alpha float64, accumulate bool)
	// GatherMean writes out[i] = the mean of x[src[k]] over i's incoming
	// edges k, 0 for a node without any: x [Ns, F], out [Nd, F] (the
	// IndexSelect and SegmentReduce Mean of a GraphSAGE aggregation in
	// one launch).
	GatherMean(out, x, src, rowPtr, order *T)
}

// GraphCSR are the sizes CheckGATAggregate and CheckGatherMean find.
type GraphCSR struct {
	// Src, Dst: source and destination node counts; Edges: E.
	Src, Dst, Edges int
}

// checkCSR checks src [E], rowPtr [nd+1] and order [E] (nil: the
// identity, the edges sorted by destination already), all I64 and
// contiguous, and returns E.
func checkCSR(name string, src, rowPtr, order *T, nd int) (int, error) {
	if src == nil || rowPtr == nil {
		return 0, fmt.Errorf("%s: src and rowPtr are required", name)
	}
	for _, o := range []struct {
		what string
		t    *T
	}{{"src", src}, {"rowPtr", rowPtr}, {"order", order}} {
		if o.t == nil {
			continue // order: the identity
		}
		if o.t.DType() != tensor.I64 || o.t.Rank() != 1 || !o.t.IsContiguous() {
			return 0, fmt.Errorf("%s: %s is %v %v, want a contiguous one-dimensional i64 tensor", name, o.what, o.t.DType(), o.t.Shape())
		}
	}
	e := src.Numel()
	if order != nil && order.Numel() != e {
		return 0, lenError(name, "order", order, e)
	}
	if rowPtr.Numel() != nd+1 {
		return 0, lenError(name, "rowPtr", rowPtr, nd+1)
	}
	return e, nil
}

// rows2 checks that t (named what) is a contiguous [rows, cols] tensor of
// dtype dt; rows or cols < 0 take t's.
func rows2(name, what string, t *T, dt tensor.DType, rows, cols int) (int, int, error) {
	if t == nil {
		return 0, 0, fmt.Errorf("%s: %s is required", name, what)
	}
	s := t.Shape()
	if len(s) != 2 || (rows >= 0 && s[0] != rows) || (cols >= 0 && s[1] != cols) {
		want := fmt.Sprintf("[%s, %s]", dimOr(rows, "N"), dimOr(cols, "F"))
		return 0, 0, fmt.Errorf("%s: %s has shape %v, want %s", name, what, s, want)
	}
	if t.DType() != dt || !t.IsContiguous() {
		return 0, 0, fmt.Errorf("%s: %s is %v (contiguous %v), want contiguous %v", name, what, t.DType(), t.IsContiguous(), dt)
	}
	return s[0], s[1], nil
}

// strided2 is rows2 for an operand that may also be a row-strided view
// (RowStride).
func strided2(name, what string, t *T, dt tensor.DType, rows, cols int) (int, int, error) {
	if t != nil && !t.IsContiguous() {
		if _, ok := RowStride(t); ok && t.DType() == dt && (rows < 0 || t.Shape()[0] == rows) && (cols < 0 || t.Shape()[1] == cols) {
			return t.Shape()[0], t.Shape()[1], nil
		}
	}
	return rows2(name, what, t, dt, rows, cols)
}

// RowStride returns the row stride of a two-dimensional t whose rows are
// contiguous (strides [ld, 1], ld ≥ its width; ld = width when t is
// contiguous), and whether t is such a tensor.
func RowStride(t *T) (int, bool) {
	if t.Rank() != 2 {
		return 0, false
	}
	s, st := t.Shape(), t.Strides()
	if t.IsContiguous() {
		return s[1], true
	}
	if (st[1] != 1 && s[1] > 1) || st[0] < s[1] {
		return 0, false
	}
	return st[0], true
}

func dimOr(d int, name string) string {
	if d < 0 {
		return name
	}
	return fmt.Sprint(d)
}

// CheckGATAggregate checks a GATAggregate and returns its sizes: one
// float dtype (out's) for every float operand, all contiguous but hs and
// hd, which may be row-strided (RowStride); out [Nd, C], hs [Ns,
// heads·C], hd [Nd, heads·C], attr [E, F], we [heads·C, F], attSrc,
// attDst and attEdge heads·C elements, bias C; src, rowPtr and order as
// GraphAggregator says; heads ≥ 1; slope and alpha finite.
func CheckGATAggregate(name string, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order *T, heads int, slope, alpha float64) (GraphCSR, error) {
	var g GraphCSR
	if out == nil {
		return g, fmt.Errorf("%s: out is required", name)
	}
	dt := out.DType()
	if !dt.IsFloat() {
		return g, floatError(name, "out", out)
	}
	if heads < 1 {
		return g, fmt.Errorf("%s: heads %d, want ≥ 1", name, heads)
	}
	for _, v := range []struct {
		what string
		v    float64
	}{{"slope", slope}, {"alpha", alpha}} {
		if v.v != v.v || v.v > 1e300 || v.v < -1e300 {
			return g, fmt.Errorf("%s: %s %v is not finite", name, v.what, v.v)
		}
	}
	nd, c, err := rows2(name, "out", out, dt, -1, -1)
	if err != nil {
		return g, err
	}
	hc := heads * c
	ns, _, err := strided2(name, "hs", hs, dt, -1, hc)
	if err != nil {
		return g, err
	}
	if _, _, err := strided2(name, "hd", hd, dt, nd, hc); err != nil {
		return g, err
	}
	e, f, err := rows2(name, "attr", attr, dt, -1, -1)
	if err != nil {
		return g, err
	}
	if _, _, err := rows2(name, "we", we, dt, hc, f); err != nil {
		return g, err
	}
	for _, o := range []struct {
		what string
		t    *T
		n    int
	}{{"attSrc", attSrc, hc}, {"attDst", attDst, hc}, {"attEdge", attEdge, hc}, {"bias", bias, c}} {
		if o.t == nil {
			return g, fmt.Errorf("%s: %s is required", name, o.what)
		}
		if o.t.Numel() != o.n || o.t.DType() != dt || !o.t.IsContiguous() {
			return g, fmt.Errorf("%s: %s is %v %v, want %d contiguous %v elements", name, o.what, o.t.DType(), o.t.Shape(), o.n, dt)
		}
	}
	ne, err := checkCSR(name, src, rowPtr, order, nd)
	if err != nil {
		return g, err
	}
	if ne != e {
		return g, fmt.Errorf("%s: src has %d edges, attr %v", name, ne, attr.Shape())
	}
	return GraphCSR{Src: ns, Dst: nd, Edges: e}, nil
}

// CheckGatherMean checks a GatherMean and returns its sizes and the row
// width F: x [Ns, F] and out [Nd, F] of one float dtype, contiguous; src,
// rowPtr and order as GraphAggregator says.
func CheckGatherMean(name string, out, x, src, rowPtr, order *T) (GraphCSR, int, error) {
	var g GraphCSR
	if out == nil || x == nil {
		return g, 0, fmt.Errorf("%s: out and x are required", name)
	}
	dt := x.DType()
	if !dt.IsFloat() {
		return g, 0, floatError(name, "x", x)
	}
	ns, f, err := rows2(name, "x", x, dt, -1, -1)
	if err != nil {
		return g, 0, err
	}
	nd, _, err := rows2(name, "out", out, dt, -1, f)
	if err != nil {
		return g, 0, err
	}
	e, err := checkCSR(name, src, rowPtr, order, nd)
	if err != nil {
		return g, 0, err
	}
	return GraphCSR{Src: ns, Dst: nd, Edges: e}, f, nil
}

// CheckCSRValues checks the values of a host-readable CSR (the CPU's
// check; a device cannot read them without a sync): rowPtr starts at 0,
// never decreases and ends at E; order (IdentityOrder's for a nil one)
// is a permutation of the edges whose destinations follow rowPtr's rows
// in ascending edge id; every src below ns. seen is scratch of E
// elements (nil: allocated), so that a kernel checking at every launch
// allocates nothing.
func CheckCSRValues(name string, src, rowPtr, order []int64, ns int, seen []bool) error {
	e := len(src)
	nd := len(rowPtr) - 1
	if nd < 0 || len(order) != e || rowPtr[0] != 0 || rowPtr[nd] != int64(e) {
		return fmt.Errorf("%s: rowPtr must start at 0 and end at %d edges", name, e)
	}
	if len(seen) != e {
		seen = make([]bool, e)
	}
	clear(seen)
	for i := 0; i < nd; i++ {
		lo, hi := rowPtr[i], rowPtr[i+1]
		if hi < lo {
			return fmt.Errorf("%s: rowPtr decreases at node %d (%d → %d)", name, i, lo, hi)
		}
		for p := lo; p < hi; p++ {
			k := order[p]
			if k < 0 || k >= int64(e) || seen[k] {
				return fmt.Errorf("%s: order[%d] = %d is not a new edge id below %d", name, p, k, e)
			}
			if p > lo && order[p-1] > k {
				return fmt.Errorf("%s: order is not ascending within node %d's edges", name, i)
			}
			seen[k] = true
		}
	}
	for k, j := range src {
		if j < 0 || j >= int64(ns) {
			return fmt.Errorf("%s: src[%d] = %d outside [0, %d)", name, k, j, ns)
		}
	}
	return nil
}

// identity holds 0, 1, 2, …: IdentityOrder's values, grown as asked and
// never written once read (a longer one replaces it).
var (
	identityMu sync.Mutex
	identity   []int64
)

// IdentityOrder returns the order of e edges sorted by destination
// already — 0, 1, …, e − 1 — for a host kernel given a nil order (shared
// and read-only: the caller must not write it).
func IdentityOrder(e int) []int64 {
	identityMu.Lock()
	defer identityMu.Unlock()
	if len(identity) < e {
		n := max(e, 2*len(identity), 1024)
		id := make([]int64, n)
		for i := range id {
			id[i] = int64(i)
		}
		identity = id
	}
	return identity[:e:e]
}

// IsIdentity reports whether order is 0, 1, …, len(order) − 1: edges
// sorted by destination already, whose order a kernel can be given as
// nil.
func IsIdentity(order []int64) bool {
	for i, k := range order {
		if k != int64(i) {
			return false
		}
	}
	return true
}

// BuildCSR groups the edges of dst (each in [0, nd)) by destination: it
// returns rowPtr [nd+1] and order [E] as GraphAggregator reads them, or
// an error naming the first destination out of range.
func BuildCSR(dst []int64, nd int) (rowPtr, order []int64, err error) {
	rowPtr = make([]int64, nd+1)
	for k, i := range dst {
		if i < 0 || i >= int64(nd) {
			return nil, nil, fmt.Errorf("kernels: BuildCSR: dst[%d] = %d outside [0, %d)", k, i, nd)
		}
		rowPtr[i+1]++
	}
	for i := 0; i < nd; i++ {
		rowPtr[i+1] += rowPtr[i]
	}
	order = make([]int64, len(dst))
	next := append([]int64(nil), rowPtr[:nd]...)
	for k, i := range dst {
		order[next[i]] = int64(k)
		next[i]++
	}
	return rowPtr, order, nil
}

// GraphMultiAggregator is an optional Backend interface: the relations
// into one node type of a heterogeneous graph layer in one call, so that
// a device's launches depend on the node types, not on the relations
// (CUDA: one for a GATMean of up to 8 relations, which runs them side by
// side and adds them in the same launch, two past that; one for a
// GatherConcat). Each computes what GraphAggregator's
// calls compute, with the same rounding: a backend's GATMean equals its
// GATMeanOps bit for bit, its GATMeanAct its GATMeanActOps, and each
// gathered block of its GatherConcat its GatherMean.
type GraphMultiAggregator interface {
	// GATMean is the mean of GATAggregate over the R = len(hs) ≥ 1
	// relations into one node type: the operand slices hold relation
	// r's operands at index r (GraphAggregator documents each), all of
	// one out [Nd, C] and one heads. Relation 0 writes out = r₀/R and
	// each further relation adds its rᵢ/R, in order (GATMeanOps).
	GATMean(out *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int, slope float64)
	// GATMeanAct is GATMean followed by the layer's activation and
	// residual in place: out = act(out) + res (res nil: no addition), as
	// ScaleActAdd with s = 1 computes it (GATMeanActOps).
	GATMeanAct(out *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int, slope float64, act UnaryOp, res *T)
	// GatherConcat writes out [Nd, W] column block by column block:
	// piece i takes xs[i]'s width; with a CSR (src[i], rowPtr[i] and
	// order[i], nil for the identity) it is GatherMean of xs[i] [Ns, w]
	// over it, without one (all three nil) xs[i] [Nd, w] itself; the
	// last ones columns are 1.
	// W is the pieces' widths plus ones. This is the
	// input of a GraphSAGE layer's joined product: each relation's mean
	// and the destination's own features side by side, with a column of
	// ones per bias.
	GatherConcat(out *T, xs, src, rowPtr, order []*T, ones int)
}

// GatherSummer is an optional Backend interface: a GraphSAGE layer's
// relations into one node type summed after their products, in one call
// (CUDA: one launch, F32). Where GatherConcat gathers each relation's
// mean into the input of one product over the relations' weights side
// by side (aggregate, then transform), GatherSum takes the products of
// each node type's own features through the weights stacked row-wise
// (transform, then aggregate: the mean is linear, so the mean of the
// products is the product of the mean) and sums them per destination,
// with the layer's activation and residual.
type GatherSummer interface {
	// GatherSum writes out [Nd, C] = act(s·Σ) + res (res nil: no
	// addition), Σ = Σ_i piece_i + Σ_j biases[j]: piece i is, with a
	// CSR (src[i], rowPtr[i] and order[i], nil for the identity),
	// GatherMean of xs[i] [Ns, C]
	// over it (0 for a node without edges), and without one (all three
	// nil) xs[i] [Nd, C] itself; biases are [C] rows added to every
	// node. Each xs[i] may be a row-strided view (RowStride), such as a
	// column block of a stacked product. The scale, activation and
	// residual are as ScaleActAdder computes them; the sum is the
	// backend's own (the CPU sums in float64 and rounds once, CUDA in
	// fp32 in the order above), so backends agree to rounding only.
	GatherSum(out *T, xs, src, rowPtr, order, biases []*T, s float64, act UnaryOp, res *T)
}

// GATMeanCall is one mean of a GATMeansJoiner call: GATMeanAct's
// arguments, one entry of each operand list per relation.
type GATMeanCall struct {
	Out                                                                 *T
	Hs, Hd, Attr, We, AttSrc, AttDst, AttEdge, Bias, Src, RowPtr, Order []*T
	Heads                                                               int
	Slope                                                               float64
	Act                                                                 UnaryOp
	Res                                                                 *T
}

// GATMeansJoiner is an optional Backend interface: GATMeanActs that do
// not depend on one another — a heterogeneous GAT layer's means, one per
// node type — in as few launches as the backend can (CUDA: up to four
// means of one launch each in one, F32). Each output holds exactly what
// its own GATMeanAct writes. No call may write memory that another
// reads or writes (CheckGATMeans).
type GATMeansJoiner interface {
	GATMeansAct(calls []GATMeanCall)
}

// CheckGATMeans checks a GATMeansJoiner call: each mean's operand lists
// as CheckGATMean checks them (the relation counts returned in order;
// the backend checks each relation as its GATMeanAct does), and that no
// mean's out shares memory with any tensor of another mean.
func CheckGATMeans(name string, calls []GATMeanCall) ([]int, error) {
	rels := make([]int, len(calls))
	for k, c := range calls {
		r, err := CheckGATMean(fmt.Sprintf("%s: call %d", name, k), c.Out, c.Hs, c.Hd, c.Attr, c.We, c.AttSrc, c.AttDst, c.AttEdge, c.Bias, c.Src, c.RowPtr, c.Order, c.Heads)
		if err != nil {
			return nil, err
		}
		rels[k] = r
	}
	outs, all := make([]*T, len(calls)), make([][]*T, len(calls))
	for k, c := range calls {
		outs[k], all[k] = c.Out, []*T{c.Out, c.Res}
		for _, l := range [][]*T{c.Hs, c.Hd, c.Attr, c.We, c.AttSrc, c.AttDst, c.AttEdge, c.Bias, c.Src, c.RowPtr, c.Order} {
			all[k] = append(all[k], l...)
		}
	}
	return rels, callsApart(name, outs, all)
}

// GatherSumCall is one sum of a GatherSumsJoiner call: GatherSum's
// arguments.
type GatherSumCall struct {
	Out                            *T
	Xs, Src, RowPtr, Order, Biases []*T
	Scale                          float64
	Act                            UnaryOp
	Res                            *T
}

// GatherSumsJoiner is an optional Backend interface: GatherSums that do
// not depend on one another — a heterogeneous GraphSAGE layer's sums,
// one per node type — in as few launches as the backend can (CUDA: up to
// four sums of one launch each in one, F32). Each output holds exactly
// what its own GatherSum writes. No call may write memory that another
// reads or writes (CheckGatherSums).
type GatherSumsJoiner interface {
	GatherSums(calls []GatherSumCall)
}

// CheckGatherSums checks a GatherSumsJoiner call: each sum as
// CheckGatherSum checks it (its pieces returned in order), and that no
// sum's out shares memory with any tensor of another sum.
func CheckGatherSums(name string, calls []GatherSumCall) ([][]GatherBlock, error) {
	pieces := make([][]GatherBlock, len(calls))
	for k, c := range calls {
		p, err := CheckGatherSum(fmt.Sprintf("%s: call %d", name, k), c.Out, c.Xs, c.Src, c.RowPtr, c.Order, c.Biases, c.Res)
		if err != nil {
			return nil, err
		}
		pieces[k] = p
	}
	outs, all := make([]*T, len(calls)), make([][]*T, len(calls))
	for k, c := range calls {
		outs[k] = c.Out
		all[k] = append(append(append(append(append([]*T{c.Out, c.Res}, c.Xs...), c.Biases...), c.Src...), c.RowPtr...), c.Order...)
	}
	return pieces, callsApart(name, outs, all)
}

// gatherPiece checks piece i of a GatherConcat or GatherSum into nd
// destination nodes: xs[i] of dtype dt and cols columns (-1: any), read
// by shape (rows2, or strided2 where a row-strided view will do), with
// [Ns, cols] rows over a CSR (src[i] and rowPtr[i] given, order[i]
// given or nil: the identity) or [nd, cols] without one (all three nil).
// Col is left 0.
func gatherPiece(name string, i int, xs, src, rowPtr, order []*T, nd int, dt tensor.DType, cols int,
	shape func(name, what string, t *T, dt tensor.DType, rows, cols int) (int, int, error)) (GatherBlock, error) {
	csr := src[i] != nil || rowPtr[i] != nil
	if !csr && order[i] != nil {
		return GatherBlock{}, fmt.Errorf("%s: piece %d has an order but no src and rowPtr", name, i)
	}
	rows := nd
	if csr {
		rows = -1
	}
	ns, w, err := shape(name, fmt.Sprintf("xs[%d]", i), xs[i], dt, rows, cols)
	if err != nil {
		return GatherBlock{}, err
	}
	p := GatherBlock{Width: w, Gathered: csr, Src: ns}
	if csr {
		if p.Edges, err = checkCSR(fmt.Sprintf("%s: piece %d", name, i), src[i], rowPtr[i], order[i], nd); err != nil {
			return GatherBlock{}, err
		}
	}
	return p, nil
}

// CheckGatherSum checks a GatherSum and returns its pieces (Col 0,
// Width C, and Gathered, Src and Edges as CheckGatherConcat finds them):
// out a contiguous [Nd, C] float tensor; each xs[i] of out's dtype,
// contiguous or row-strided, [Ns, C] with a CSR (src, rowPtr and order
// as GraphAggregator says, order nil for the identity) or [Nd, C]
// without (all three nil); each bias contiguous [C] of out's dtype; res nil or a
// contiguous [Nd, C] of out's dtype; none of them sharing out's memory.
func CheckGatherSum(name string, out *T, xs, src, rowPtr, order, biases []*T, res *T) ([]GatherBlock, error) {
	if out == nil {
		return nil, fmt.Errorf("%s: out is required", name)
	}
	dt := out.DType()
	if !dt.IsFloat() {
		return nil, floatError(name, "out", out)
	}
	nd, c, err := rows2(name, "out", out, dt, -1, -1)
	if err != nil {
		return nil, err
	}
	if len(src) != len(xs) || len(rowPtr) != len(xs) || len(order) != len(xs) {
		return nil, fmt.Errorf("%s: %d inputs with %d src, %d rowPtr and %d order entries", name, len(xs), len(src), len(rowPtr), len(order))
	}
	pieces := make([]GatherBlock, len(xs))
	for i := range xs {
		p, err := gatherPiece(name, i, xs, src, rowPtr, order, nd, dt, c, strided2)
		if err != nil {
			return nil, err
		}
		pieces[i] = p
	}
	for j, b := range biases {
		if b == nil {
			return nil, fmt.Errorf("%s: biases[%d] is nil", name, j)
		}
		if b.Rank() != 1 || b.Shape()[0] != c || b.DType() != dt || !b.IsContiguous() {
			return nil, fmt.Errorf("%s: biases[%d] is %v %v (contiguous %v), want contiguous %v [%d]", name, j, b.DType(), b.Shape(), b.IsContiguous(), dt, c)
		}
	}
	if res != nil {
		if _, _, err := rows2(name, "res", res, dt, nd, c); err != nil {
			return nil, err
		}
	}
	// out is written while the terms are read (and, past one CUDA
	// launch's terms, read back as the running sum): no input may share
	// its memory, or backends would disagree on the result.
	for i, x := range xs {
		if spansOverlap(out, x) {
			return nil, fmt.Errorf("%s: xs[%d] shares memory with out", name, i)
		}
	}
	for j, b := range biases {
		if spansOverlap(out, b) {
			return nil, fmt.Errorf("%s: biases[%d] shares memory with out", name, j)
		}
	}
	if spansOverlap(out, res) {
		return nil, fmt.Errorf("%s: res shares memory with out", name)
	}
	return pieces, nil
}

// GATMeanOps is GraphMultiAggregator.GATMean through GATAggregate: one
// call per relation with alpha = 1/R, the first writing, the others
// accumulating.
func GATMeanOps(ga GraphAggregator, out *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int, slope float64) {
	r := len(hs)
	alpha := 1 / float64(r)
	for i := 0; i < r; i++ {
		ga.GATAggregate(out, hs[i], hd[i], attr[i], we[i], attSrc[i], attDst[i], attEdge[i], bias[i], src[i], rowPtr[i], order[i], heads, slope, alpha, i > 0)
	}
}

// GATMeanActOps is GraphMultiAggregator.GATMeanAct through
// GATAggregate and be's ScaleActAdd ops (ScaleActAddOps).
func GATMeanActOps(be Backend, ga GraphAggregator, out *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int, slope float64, act UnaryOp, res *T) {
	GATMeanOps(ga, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope)
	ScaleActAddOps(be, out, out, 1, act, res)
}

// CheckGATMean checks the slices of a GATMean (each operand slice of one
// length R ≥ 1, no nil entry but in order: nil for the identity) and
// returns R; each relation's operands are CheckGATAggregate's to check.
func CheckGATMean(name string, out *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int) (int, error) {
	r := len(hs)
	if r == 0 {
		return 0, fmt.Errorf("%s: no relations", name)
	}
	if out == nil {
		return 0, fmt.Errorf("%s: out is required", name)
	}
	for i, l := range [][]*T{hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order} {
		if len(l) != r {
			return 0, fmt.Errorf("%s: operand list %d has %d relations, hs %d", name, i, len(l), r)
		}
		for j, t := range l {
			if t == nil && i != 10 { // order (10) may be nil
				return 0, fmt.Errorf("%s: operand list %d, relation %d: nil", name, i, j)
			}
		}
	}
	return r, nil
}

// GatherBlock is one column block of a GatherConcat, as CheckGatherConcat
// finds it: Col is its first column in out, Width its width; Gathered
// pieces are a mean over a CSR (Edges its edge count, Src its source
// rows), the others a copy of x.
type GatherBlock struct {
	Col, Width int
	Gathered   bool
	Src, Edges int
}

// CheckGatherConcat checks a GatherConcat and returns its pieces: out a
// contiguous [Nd, W] float tensor, every x contiguous of out's dtype,
// [Ns, w] with a CSR (src, rowPtr and order as GraphAggregator says,
// order nil for the identity) or [Nd, w] without (all three nil), ones
// ≥ 0, and W the
// widths plus ones.
func CheckGatherConcat(name string, out *T, xs, src, rowPtr, order []*T, ones int) ([]GatherBlock, error) {
	if out == nil {
		return nil, fmt.Errorf("%s: out is required", name)
	}
	dt := out.DType()
	if !dt.IsFloat() {
		return nil, floatError(name, "out", out)
	}
	nd, w, err := rows2(name, "out", out, dt, -1, -1)
	if err != nil {
		return nil, err
	}
	if len(src) != len(xs) || len(rowPtr) != len(xs) || len(order) != len(xs) {
		return nil, fmt.Errorf("%s: %d inputs with %d src, %d rowPtr and %d order entries", name, len(xs), len(src), len(rowPtr), len(order))
	}
	if ones < 0 {
		return nil, fmt.Errorf("%s: %d ones columns, want ≥ 0", name, ones)
	}
	pieces := make([]GatherBlock, len(xs))
	col := 0
	for i := range xs {
		p, err := gatherPiece(name, i, xs, src, rowPtr, order, nd, dt, -1, rows2)
		if err != nil {
			return nil, err
		}
		p.Col = col
		pieces[i] = p
		col += p.Width
	}
	if col+ones != w {
		return nil, fmt.Errorf("%s: out has %d columns, the pieces %d and ones %d", name, w, col, ones)
	}
	return pieces, nil
}

// GatherInput is an input matrix given as GatherConcat's operands
// (GraphMultiAggregator documents Xs, Src, RowPtr and Order; no ones
// columns) for Rows rows: row i is every piece's row i side by side, a
// piece's row being its X's row i or the mean of its X's rows over node
// i's incoming edges. A backend reading it (ReluHeadCall.In,
// LinearActLNCall.In) computes the rows as it reads them (CUDA: inside
// the consumer's launch), so that the matrix is never stored.
type GatherInput struct {
	Rows                   int
	Xs, Src, RowPtr, Order []*T
}

// CheckGatherInput checks in as CheckGatherConcat checks its pieces (In
// Rows rows, every X contiguous of dtype dt, a gathered piece's CSR
// given whole, no ones columns) and returns the pieces, Col their first
// columns, and their width.
func CheckGatherInput(name string, in *GatherInput, dt tensor.DType) ([]GatherBlock, int, error) {
	if in == nil || len(in.Xs) == 0 {
		return nil, 0, fmt.Errorf("%s: no pieces", name)
	}
	if in.Rows < 0 {
		return nil, 0, fmt.Errorf("%s: %d rows", name, in.Rows)
	}
	if len(in.Src) != len(in.Xs) || len(in.RowPtr) != len(in.Xs) || len(in.Order) != len(in.Xs) {
		return nil, 0, fmt.Errorf("%s: %d pieces with %d src, %d rowPtr and %d order entries", name, len(in.Xs), len(in.Src), len(in.RowPtr), len(in.Order))
	}
	if !dt.IsFloat() {
		return nil, 0, fmt.Errorf("%s: dtype %v, want a float dtype", name, dt)
	}
	pieces := make([]GatherBlock, len(in.Xs))
	k := 0
	for p := range in.Xs {
		b, err := gatherPiece(name, p, in.Xs, in.Src, in.RowPtr, in.Order, in.Rows, dt, -1, rows2)
		if err != nil {
			return nil, 0, err
		}
		b.Col = k
		pieces[p], k = b, k+b.Width
	}
	return pieces, k, nil
}

// Tensors returns every tensor of in: its Xs, then Src, RowPtr and
// Order (nil where a piece has no CSR, Order nil too where its edges
// are sorted by destination already).
func (in *GatherInput) Tensors() []*T {
	var ts []*T
	for _, l := range [][]*T{in.Xs, in.Src, in.RowPtr, in.Order} {
		ts = append(ts, l...)
	}
	return ts
}

// GatherInputOps computes in on be, a GraphMultiAggregator, into a new
// [Rows, width] tensor (GatherConcat of its pieces): what a backend
// reading In as it goes stands for.
func GatherInputOps(be Backend, in *GatherInput) *T {
	gm, ok := be.(GraphMultiAggregator)
	if !ok {
		panic("kernels: a gathered input needs a GraphMultiAggregator backend")
	}
	k := 0
	for _, p := range in.Xs {
		k += p.Dim(1)
	}
	x, err := tensor.EmptyOn(in.Xs[0].Device(), in.Xs[0].DType(), in.Rows, k)
	if err != nil {
		panic(fmt.Sprintf("kernels: gathering an input: %v", err))
	}
	gm.GatherConcat(x, in.Xs, in.Src, in.RowPtr, in.Order, 0)
	return x
}
