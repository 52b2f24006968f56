//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"gorgonia.org/cu"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// kernels.GraphAggregator on the device (src/graph.cu), F32 only: one
// launch per relation over the host-built CSR (src, rowPtr and order,
// I64, read as given: a CSR that breaks kernels.GraphAggregator's rules
// gives undefined results here, as the interface says).
// gat_aggregate_f32 runs one block per destination node with an online
// softmax per head, reading hs and hd through their row strides (column
// blocks of a stacked projection need no copy) and writing or
// accumulating alpha times its result; gather_mean_f32 one thread per
// output element.

var _ kernels.GraphAggregator = (*Backend)(nil)

// GATAggregate implements kernels.GraphAggregator.
func (b *Backend) GATAggregate(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order *T, heads int, slope, alpha float64, accumulate bool) {
	must(b.d.GATAggregate(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope, alpha, accumulate))
}

// GatherMean implements kernels.GraphAggregator.
func (b *Backend) GatherMean(out, x, src, rowPtr, order *T) {
	must(b.d.GatherMean(out, x, src, rowPtr, order))
}

// gatGeom is struct GatGeom of src/graph.cu, word for word (nine 8-byte
// words: nd, heads, c, f, slope, lds, ldd, alpha, accumulate).
type gatGeom struct {
	nd, heads, c, f int64
	slope           float64
	lds, ldd        int64 // hs's and hd's row strides in elements
	alpha           float64
	accumulate      int64 // 1: out += alpha·r, 0: out = alpha·r
}

func (g *gatGeom) words() []uint64 {
	return []uint64{uint64(g.nd), uint64(g.heads), uint64(g.c), uint64(g.f), math.Float64bits(g.slope),
		uint64(g.lds), uint64(g.ldd), math.Float64bits(g.alpha), uint64(g.accumulate)}
}

// GATAggregate is one GAT relation as kernels.GraphAggregator defines
// it, F32: out [Nd, C] = alpha·r, or out += alpha·r with accumulate, r
// from hs [Ns, heads·C], hd [Nd, heads·C] (each contiguous or a
// row-strided view, kernels.RowStride), attr [E, F], we [heads·C, F],
// attSrc, attDst and attEdge (heads·C each), bias [C] and the CSR. A
// relation without edges still launches (every row alpha·bias, or
// alpha·bias added). heads·(C + F + 7) must stay within 12288 (the
// kernel's shared memory).
func (d *Device) GATAggregate(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order *tensor.Tensor, heads int, slope, alpha float64, accumulate bool) error {
	const op = "GATAggregate"
	g, err := kernels.CheckGATAggregate(op, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope, alpha)
	if err := checked(err); err != nil {
		return err
	}
	if dt := out.DType(); dt != tensor.F32 {
		return fmt.Errorf("cuda: %s: dtype %v (F32 runs here)", op, dt)
	}
	c, f := out.Dim(1), attr.Dim(1)
	shared := gatShared(heads, c, f)
	if shared > gatMaxShared {
		return fmt.Errorf("cuda: %s: heads %d, C %d and F %d need %d bytes of shared memory a block, more than %d (heads·(C + F + 7) ≤ %d)",
			op, heads, c, f, shared, gatMaxShared, gatMaxShared/4)
	}
	ptrs, lds, err := d.gatPtrs(op, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order)
	if err != nil {
		return err
	}
	if g.Dst == 0 || c == 0 {
		return nil // nothing to write
	}
	fn, err := d.kernel("gat_aggregate_f32")
	if err != nil {
		return err
	}
	geom := gatGeom{nd: int64(g.Dst), heads: int64(heads), c: int64(c), f: int64(f), slope: slope,
		lds: int64(lds[1]), ldd: int64(lds[2]), alpha: alpha}
	if accumulate {
		geom.accumulate = 1
	}
	release := d.enter()
	defer release()
	var a args
	for _, p := range ptrs {
		a.ptr(p)
	}
	a.push(geom.words()...)
	blocks := min(g.Dst, gatMaxBlocks)
	return launchRaw(fn, [3]int{blocks, 1, 1}, [3]int{gatThreads(heads, c), 1, 1}, shared, d.stream, &a)
}

// gatPtrs returns the addresses of a GATAggregate's operands (out, hs,
// hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order: 0
// for a nil order, the identity) and hs's and hd's row strides, at
// their indices 1 and 2.
func (d *Device) gatPtrs(op string, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order *tensor.Tensor) (ptrs [12]cu.DevicePtr, lds [3]int, err error) {
	for i, o := range []struct {
		what string
		t    *tensor.Tensor
		dt   tensor.DType
	}{
		{"out", out, tensor.F32}, {"hs", hs, tensor.F32}, {"hd", hd, tensor.F32}, {"attr", attr, tensor.F32},
		{"we", we, tensor.F32}, {"attSrc", attSrc, tensor.F32}, {"attDst", attDst, tensor.F32},
		{"attEdge", attEdge, tensor.F32}, {"bias", bias, tensor.F32},
		{"src", src, tensor.I64}, {"rowPtr", rowPtr, tensor.I64}, {"order", order, tensor.I64},
	} {
		if i == 1 || i == 2 {
			// hs and hd: rows of ld elements, contiguous within a row.
			ld, ok := kernels.RowStride(o.t)
			if !ok {
				return ptrs, lds, fmt.Errorf("cuda: %s: %s (shape %v, strides %v) is not row-strided", op, o.what, o.t.Shape(), o.t.Strides())
			}
			lds[i] = ld
			if ptrs[i], err = d.viewPtr(op, o.what, o.t, o.dt); err != nil {
				return ptrs, lds, err
			}
			continue
		}
		if i == 11 && o.t == nil {
			continue // order: the identity, a null pointer
		}
		if ptrs[i], err = d.ptrOf(op, o.what, o.t, o.dt); err != nil {
			return ptrs, lds, err
		}
	}
	return ptrs, lds, nil
}

// GatherMean writes out [Nd, F] = the mean of x [Ns, F]'s rows src[k]
// over each node's incoming edges k (0 for a node without any), F32.
func (d *Device) GatherMean(out, x, src, rowPtr, order *tensor.Tensor) error {
	const op = "GatherMean"
	g, fw, err := kernels.CheckGatherMean(op, out, x, src, rowPtr, order)
	if err := checked(err); err != nil {
		return err
	}
	if dt := x.DType(); dt != tensor.F32 {
		return fmt.Errorf("cuda: %s: dtype %v (F32 runs here)", op, dt)
	}
	ptrs, err := d.ptrList(op, []string{"out", "x", "src", "rowPtr", "order"}, []*tensor.Tensor{out, x, src, rowPtr, order},
		[]tensor.DType{tensor.F32, tensor.F32, tensor.I64, tensor.I64, tensor.I64}, []bool{false, false, false, false, true})
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var a args
	a.ptr(ptrs[0]).ptr(ptrs[1]).ptr(ptrs[2]).ptr(ptrs[3]).ptr(ptrs[4]).i64(int64(g.Dst)).i64(int64(fw))
	return d.launch1D("gather_mean_f32", int64(g.Dst)*int64(fw), &a)
}

// kernels.GraphMultiAggregator on the device, F32 only: gat_mean_f32 runs
// up to gatMaxRels relations of a GATMean side by side, a grid row of
// blocks each (the shared memory sized for the widest edge attributes),
// into a scratch; where one launch takes every relation and the nodes fit
// the device's counters (tailCounters), the block that finishes a node's
// last relation adds them in order and applies GATMeanAct's activation
// and residual (gat_tail: one launch), else gat_combine_f32 does, in a
// launch of its own; gather_concat_f32 writes up to
// gatherMax pieces of a GatherConcat. More relations or pieces launch
// again. Each relation and each gathered block is computed by the code
// gat_aggregate_f32 and gather_mean_f32 run (src/graph.cu's gat_relation
// and gather_mean_at) and the relations are added as the per-relation
// launches accumulate them, so the results equal those launches' bit for
// bit.

var _ kernels.GraphMultiAggregator = (*Backend)(nil)

// GATMean implements kernels.GraphMultiAggregator.
func (b *Backend) GATMean(out *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int, slope float64) {
	must(b.d.GATMean(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope, -1, nil))
}

// GATMeanAct implements kernels.GraphMultiAggregator.
func (b *Backend) GATMeanAct(out *T, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*T, heads int, slope float64, act kernels.UnaryOp, res *T) {
	must(b.d.GATMean(out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads, slope, int(act), res))
}

// GatherConcat implements kernels.GraphMultiAggregator.
func (b *Backend) GatherConcat(out *T, xs, src, rowPtr, order []*T, ones int) {
	must(b.d.GatherConcat(out, xs, src, rowPtr, order, ones))
}

// GATMean is kernels.GraphMultiAggregator's GATMean, F32: the mean of
// GATAggregate over the relations into one node type, each checked as
// GATAggregate checks it; with act ≥ 0 (GATMeanAct) then out =
// act(out) + res (res nil: no addition), in the adding launch.
func (d *Device) GATMean(out *tensor.Tensor, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order []*tensor.Tensor, heads int, slope float64, act int, res *tensor.Tensor) error {
	op := "GATMean"
	if act >= 0 {
		op = "GATMeanAct"
	}
	r, err := kernels.CheckGATMean(op, out, hs, hd, attr, we, attSrc, attDst, attEdge, bias, src, rowPtr, order, heads)
	if err := checked(err); err != nil {
		return err
	}
	g, err := d.gatPrepare(op, r, kernels.GATMeanCall{Out: out, Hs: hs, Hd: hd, Attr: attr, We: we, AttSrc: attSrc, AttDst: attDst,
		AttEdge: attEdge, Bias: bias, Src: src, RowPtr: rowPtr, Order: order, Heads: heads, Slope: slope, Res: res}, act)
	if err != nil || g.nd == 0 || g.c == 0 {
		return err // nothing to write without nodes or columns
	}
	return d.gatLaunch(op, g)
}

// gatPrepare checks what CheckGATMean leaves to the device for a mean of
// r relations (F32, each relation as GATAggregate checks it, the shared
// memory, the residual, the activation act, -1 for none; k.Act is not
// read) and gathers its addresses.
func (d *Device) gatPrepare(op string, r int, k kernels.GATMeanCall, act int) (gatCall, error) {
	out, res, heads := k.Out, k.Res, k.Heads
	if dt := out.DType(); dt != tensor.F32 {
		return gatCall{}, fmt.Errorf("cuda: %s: dtype %v (F32 runs here)", op, dt)
	}
	var resPtr cu.DevicePtr
	if res != nil {
		if !tensor.SameShape(res.Shape(), out.Shape()) {
			return gatCall{}, fmt.Errorf("cuda: %s: residual %v, want out's %v", op, res.Shape(), out.Shape())
		}
		var err error
		if resPtr, err = d.ptrOf(op, "res", res, tensor.F32); err != nil {
			return gatCall{}, err
		}
	}
	if act >= 0 {
		// unary_f's codes are kernels.UnaryOp's (as scale_act_add_f32's).
		if err := checked(kernels.CheckUnary(op, kernels.UnaryOp(act), out, out)); err != nil {
			return gatCall{}, err
		}
	}
	alpha := 1 / float64(r)
	c := out.Dim(1)
	rels := make([]gatRel, r)
	shared := 0
	var outPtr cu.DevicePtr
	for i := range rels {
		if _, err := kernels.CheckGATAggregate(op, out, k.Hs[i], k.Hd[i], k.Attr[i], k.We[i], k.AttSrc[i], k.AttDst[i], k.AttEdge[i], k.Bias[i], k.Src[i], k.RowPtr[i], k.Order[i], heads, k.Slope, alpha); err != nil {
			return gatCall{}, fmt.Errorf("cuda: relation %d: %w", i, err)
		}
		f := k.Attr[i].Dim(1)
		sh := gatShared(heads, c, f)
		if sh > gatMeanMaxShared {
			return gatCall{}, fmt.Errorf("cuda: %s: relation %d: heads %d, C %d and F %d need %d bytes of shared memory a block, more than %d (heads·(C + F + 7) ≤ %d)",
				op, i, heads, c, f, sh, gatMeanMaxShared, gatMeanMaxShared/4)
		}
		shared = max(shared, sh)
		ptrs, lds, err := d.gatPtrs(op, out, k.Hs[i], k.Hd[i], k.Attr[i], k.We[i], k.AttSrc[i], k.AttDst[i], k.AttEdge[i], k.Bias[i], k.Src[i], k.RowPtr[i], k.Order[i])
		if err != nil {
			return gatCall{}, err
		}
		outPtr = ptrs[0]
		rel := gatRel{lds: int64(lds[1]), ldd: int64(lds[2]), f: int64(f)}
		for j := range rel.ptrs {
			rel.ptrs[j] = uint64(ptrs[j+1])
		}
		rels[i] = rel
	}
	g := gatCall{out: uint64(outPtr), res: uint64(resPtr), nd: int64(out.Dim(0)), heads: int64(heads), c: int64(c),
		slope: k.Slope, alpha: alpha, act: int64(act), rels: rels, shared: shared, thread: gatThreads(heads, c)}
	if gatWarpsOn.Load() {
		fits, shared := true, 0
		for _, rel := range rels {
			fits = fits && gatWarpFits(heads, c, int(rel.f))
			shared = max(shared, gatWarpShared(heads, int(rel.f)))
		}
		if fits {
			g.warp, g.thread, g.shared = true, gwThreads, shared
		}
	}
	return g, nil
}

// gatLaunch runs g (nodes and columns to write) as gat_mean_f32
// launches of up to gatMaxRels relations over a scratch of its own: one
// launch that adds the relations itself when g is tailed, else
// gat_combine_f32 adds them after.
func (d *Device) gatLaunch(op string, g gatCall) error {
	name := "gat_mean_f32"
	if g.warp {
		name = "gat_mean_warp_f32"
	}
	fn, err := d.kernel(name)
	if err != nil {
		return err
	}
	r, nd, c := len(g.rels), int(g.nd), int(g.c)
	// The relations' results side by side, then added in order.
	scratch, err := d.scratchF32(r * nd * c)
	if err != nil {
		return err
	}
	defer scratch.Storage().Free() // after the launches that read it are enqueued
	ps, _ := d.ptrOf(op, "scratch", scratch, tensor.F32)
	release := d.enter()
	defer release()
	var w [gatMultiWords]uint64
	// Every relation in one launch, nodes within the counters: the
	// launch adds them itself (gat_tail), with no gat_combine_f32.
	var tail gatTail
	if g.tailed() {
		tail = gatTail{out: g.out, res: g.res, counters: uint64(d.counters), act: g.act}
	}
	for start := 0; start < r; start += gatMaxRels {
		end := min(r, start+gatMaxRels)
		gatMultiPack(&w, uint64(ps), g.nd, g.heads, g.c, g.slope, g.alpha, int64(start), tail, g.rels[start:end])
		grid := [3]int{g.blocks(), end - start, 1}
		if err := launchStructShared(fn, grid, [3]int{g.thread, 1, 1}, g.shared, d.stream, w[:]); err != nil {
			return err
		}
		if g.warp {
			d.gatWarps.Add(1)
		}
	}
	if tail.counters != 0 {
		return nil
	}
	var a args
	n := g.nd * g.c
	a.ptr(cu.DevicePtr(g.out)).ptr(ps).i64(int64(r)).i64(n).i32(int32(g.act)).ptr(cu.DevicePtr(g.res))
	return d.launch1D("gat_combine_f32", n, &a)
}

var _ kernels.GATMeansJoiner = (*Backend)(nil)

// GATMeansAct implements kernels.GATMeansJoiner (F32).
func (b *Backend) GATMeansAct(calls []kernels.GATMeanCall) { must(b.d.GATMeansAct(calls)) }

// GATMeansAct is kernels.GATMeansJoiner's GATMeansAct, F32: the means
// that gat_mean_f32 runs in one launch adding its own relations (tailed:
// up to gatMaxRels relations, a counter per node) go gatJoin at a time,
// with one block size, into one gat_mean_join_f32 launch — each over a
// scratch and counters of its own — which runs gat_mean_f32's code for
// every relation (the same bits); with ESPER_CUDA_GAT_WARPS=on the means
// that fit the warp kernels join apart from the others, into
// gat_mean_join_warp_f32 (the same bits again). Any other mean runs as
// GATMeanAct runs it. Everything is checked before anything launches.
func (d *Device) GATMeansAct(calls []kernels.GATMeanCall) error {
	const op = "GATMeansAct"
	rs, err := kernels.CheckGATMeans(op, calls)
	if err := checked(err); err != nil {
		return err
	}
	gs := make([]gatCall, 0, len(calls))
	for k, c := range calls {
		g, err := d.gatPrepare(fmt.Sprintf("%s: call %d", op, k), rs[k], c, int(c.Act))
		if err != nil {
			return err
		}
		if g.nd > 0 && g.c > 0 {
			gs = append(gs, g)
		}
	}
	var parts []gatCall
	flush := func() error {
		defer func() { parts = parts[:0] }()
		if len(parts) == 1 {
			return d.gatLaunch(op, parts[0])
		}
		if len(parts) > 1 {
			return d.gatJoinLaunch(op, parts)
		}
		return nil
	}
	counted := int64(0) // the counters the pending parts take
	for _, g := range gs {
		if !g.tailed() || joinsOff.Load() {
			if err := d.gatLaunch(op, g); err != nil {
				return err
			}
			continue
		}
		if len(parts) > 0 && (len(parts) == gatJoin || parts[0].thread != g.thread || parts[0].warp != g.warp || counted+g.nd > tailCounters) {
			if err := flush(); err != nil {
				return err
			}
			counted = 0
		}
		parts = append(parts, g)
		counted += g.nd
	}
	return flush()
}

// gatJoinLaunch runs the tailed means gs (2 to gatJoin, one block size,
// tailCounters nodes at most in all) as one gat_mean_join_f32 launch,
// each over its share of one scratch and of the device's counters.
func (d *Device) gatJoinLaunch(op string, gs []gatCall) error {
	name := "gat_mean_join_f32"
	if gs[0].warp {
		name = "gat_mean_join_warp_f32"
	}
	fn, err := d.kernel(name)
	if err != nil {
		return err
	}
	floats, shared := 0, 0
	for _, g := range gs {
		floats += len(g.rels) * int(g.nd*g.c)
		shared = max(shared, g.shared)
	}
	scratch, err := d.scratchF32(floats)
	if err != nil {
		return err
	}
	defer scratch.Storage().Free() // after the launch that reads it is enqueued
	base, _ := d.ptrOf(op, "scratch", scratch, tensor.F32)
	ps := make([]gatJoinPart, len(gs))
	at, counters := uint64(base), uint64(d.counters)
	for k, g := range gs {
		ps[k] = gatJoinPart{g: g, scratch: at, counters: counters}
		at += 4 * uint64(len(g.rels)) * uint64(g.nd*g.c)
		counters += 4 * uint64(g.nd)
	}
	release := d.enter()
	defer release()
	var w [gatJoinWords]uint64
	gx, gy := gatJoinPack(&w, ps)
	if err := launchStructShared(fn, [3]int{gx, gy, 1}, [3]int{gs[0].thread, 1, 1}, shared, d.stream, w[:]); err != nil {
		return err
	}
	d.joins.Add(1)
	if gs[0].warp {
		d.gatWarps.Add(1)
	}
	return nil
}

// GatherConcat is kernels.GraphMultiAggregator's GatherConcat, F32: out
// [Nd, W] from its pieces, one thread per element of a launch's columns.
func (d *Device) GatherConcat(out *tensor.Tensor, xs, src, rowPtr, order []*tensor.Tensor, ones int) error {
	const op = "GatherConcat"
	pieces, err := kernels.CheckGatherConcat(op, out, xs, src, rowPtr, order, ones)
	if err := checked(err); err != nil {
		return err
	}
	if dt := out.DType(); dt != tensor.F32 {
		return fmt.Errorf("cuda: %s: dtype %v (F32 runs here)", op, dt)
	}
	outPtr, err := d.ptrOf(op, "out", out, tensor.F32)
	if err != nil {
		return err
	}
	nd, width := out.Dim(0), out.Dim(1)
	// The addresses gatherPlan reads: xs of every non-empty piece, and
	// the CSR of the gathered ones.
	n := len(pieces)
	xa, sa, ra, oa := make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n)
	at := func(t *tensor.Tensor, dt tensor.DType, i int) (uint64, error) {
		p, err := d.ptrOf(op, fmt.Sprintf("piece %d", i), t, dt)
		return uint64(p), err
	}
	for i, p := range pieces {
		if p.Width == 0 {
			continue
		}
		if xa[i], err = at(xs[i], tensor.F32, i); err != nil {
			return err
		}
		if !p.Gathered {
			continue
		}
		for _, o := range [3]struct {
			t   *tensor.Tensor
			dst *uint64
		}{{src[i], &sa[i]}, {rowPtr[i], &ra[i]}, {order[i], &oa[i]}} {
			if o.t == nil {
				continue // order: the identity, a null pointer
			}
			if *o.dst, err = at(o.t, tensor.I64, i); err != nil {
				return err
			}
		}
	}
	parts := gatherPlan(pieces, xa, sa, ra, oa, ones, width)
	if nd == 0 || len(parts) == 0 {
		return nil
	}
	fn, err := d.kernel("gather_concat_f32")
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var w [gatherCatWords]uint64
	for start := 0; start < len(parts); start += gatherMax {
		local := gatherCatPack(&w, uint64(outPtr), int64(nd), int64(width), parts[start:min(len(parts), start+gatherMax)])
		n := int64(nd) * local
		blocks := min((n+blockSize-1)/blockSize, int64(d.sms)*8)
		if err := launchStruct(fn, [3]int{int(blocks), 1, 1}, [3]int{blockSize, 1, 1}, d.stream, w[:]); err != nil {
			return err
		}
	}
	return nil
}

var _ kernels.GatherSummer = (*Backend)(nil)

// GatherSum implements kernels.GatherSummer (F32).
func (b *Backend) GatherSum(out *T, xs, src, rowPtr, order, biases []*T, s float64, act kernels.UnaryOp, res *T) {
	must(b.d.GatherSum(out, xs, src, rowPtr, order, biases, s, act, res))
}

// GatherSum is kernels.GatherSummer's GatherSum, F32: gather_sum_f32
// adds the pieces, then the biases (terms with row stride 0), up to
// gsumMax terms a launch, each launch after the first from out's value;
// the last applies the scale, the activation and the residual.
func (d *Device) GatherSum(out *tensor.Tensor, xs, src, rowPtr, order, biases []*tensor.Tensor, s float64, act kernels.UnaryOp, res *tensor.Tensor) error {
	const op = "GatherSum"
	pieces, err := kernels.CheckGatherSum(op, out, xs, src, rowPtr, order, biases, res)
	if err := checked(err); err != nil {
		return err
	}
	g, err := d.gsumPrepare(op, kernels.GatherSumCall{Out: out, Xs: xs, Src: src, RowPtr: rowPtr, Order: order, Biases: biases, Scale: s, Act: act, Res: res}, pieces)
	if err != nil || g.nd == 0 || g.c == 0 {
		return err
	}
	fn, err := d.kernel("gather_sum_f32")
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	return d.gsumLaunch(fn, g)
}

// gsumPrepare checks what CheckGatherSum leaves to the device (F32, the
// activation, device memory) and gathers the call's addresses.
func (d *Device) gsumPrepare(op string, k kernels.GatherSumCall, pieces []kernels.GatherBlock) (gsumCall, error) {
	out, res := k.Out, k.Res
	if dt := out.DType(); dt != tensor.F32 {
		return gsumCall{}, fmt.Errorf("cuda: %s: dtype %v (F32 runs here)", op, dt)
	}
	// unary_f's codes are kernels.UnaryOp's (as scale_act_add_f32's).
	if err := checked(kernels.CheckUnary(op, k.Act, out, out)); err != nil {
		return gsumCall{}, err
	}
	outPtr, err := d.ptrOf(op, "out", out, tensor.F32)
	if err != nil {
		return gsumCall{}, err
	}
	resPtr, err := d.optPtr(op, "res", res, tensor.F32)
	if err != nil {
		return gsumCall{}, err
	}
	terms := make([]gsumTerm, 0, len(k.Xs)+len(k.Biases))
	for i, p := range pieces {
		what := fmt.Sprintf("xs[%d]", i)
		ld, _ := kernels.RowStride(k.Xs[i]) // CheckGatherSum: contiguous or row-strided
		x, err := d.viewPtr(op, what, k.Xs[i], tensor.F32)
		if err != nil {
			return gsumCall{}, err
		}
		t := gsumTerm{x: uint64(x), ld: int64(ld)}
		if p.Gathered {
			for _, o := range [3]struct {
				t   *tensor.Tensor
				dst *uint64
			}{{k.Src[i], &t.src}, {k.RowPtr[i], &t.rowPtr}, {k.Order[i], &t.order}} {
				if o.t == nil {
					continue // order: the identity, a null pointer
				}
				a, err := d.ptrOf(op, what+" CSR", o.t, tensor.I64)
				if err != nil {
					return gsumCall{}, err
				}
				*o.dst = uint64(a)
			}
		}
		terms = append(terms, t)
	}
	for j, bt := range k.Biases {
		a, err := d.ptrOf(op, fmt.Sprintf("biases[%d]", j), bt, tensor.F32)
		if err != nil {
			return gsumCall{}, err
		}
		terms = append(terms, gsumTerm{x: uint64(a)})
	}
	return gsumCall{out: uint64(outPtr), res: uint64(resPtr), nd: int64(out.Dim(0)), c: int64(out.Dim(1)),
		scale: k.Scale, act: int64(k.Act), terms: terms}, nil
}

// gsumLaunch launches gather_sum_f32 (fn) for g, once per gsumPlan
// launch; the caller has entered the device.
func (d *Device) gsumLaunch(fn cu.Function, g gsumCall) error {
	n := g.nd * g.c
	blocks := min((n+blockSize-1)/blockSize, int64(d.sms)*8)
	var w [gsumWords]uint64
	for _, l := range gsumPlan(g.terms, g.act) {
		gsumPack(&w, g.out, g.res, g.nd, g.c, g.scale, l)
		if err := launchStruct(fn, [3]int{int(blocks), 1, 1}, [3]int{blockSize, 1, 1}, d.stream, w[:]); err != nil {
			return err
		}
	}
	return nil
}

var _ kernels.GatherSumsJoiner = (*Backend)(nil)

// GatherSums implements kernels.GatherSumsJoiner (F32).
func (b *Backend) GatherSums(calls []kernels.GatherSumCall) { must(b.d.GatherSums(calls)) }

// GatherSums is kernels.GatherSumsJoiner's GatherSums, F32: the sums of
// one gather_sum_f32 launch each go gsumJoin at a time into one
// gather_sum_join_f32 launch, which computes every element with
// gather_sum_f32's code (the same bits); a sum of more terms than one
// launch takes runs as GatherSum runs it. Everything is checked before
// anything launches.
func (d *Device) GatherSums(calls []kernels.GatherSumCall) error {
	const op = "GatherSums"
	pieces, err := kernels.CheckGatherSums(op, calls)
	if err := checked(err); err != nil {
		return err
	}
	gs := make([]gsumCall, 0, len(calls))
	for k, c := range calls {
		g, err := d.gsumPrepare(fmt.Sprintf("%s: call %d", op, k), c, pieces[k])
		if err != nil {
			return err
		}
		if g.nd > 0 && g.c > 0 {
			gs = append(gs, g)
		}
	}
	if len(gs) == 0 {
		return nil
	}
	one, err := d.kernel("gather_sum_f32")
	if err != nil {
		return err
	}
	join, err := d.kernel("gather_sum_join_f32")
	if err != nil {
		return err
	}
	release := d.enter()
	defer release()
	var w [gsumJoinWords]uint64
	var parts []gsumCall
	flush := func() error {
		defer func() { parts = parts[:0] }()
		switch len(parts) {
		case 0:
			return nil
		case 1:
			return d.gsumLaunch(one, parts[0])
		}
		n := gsumJoinPack(&w, parts)
		blocks := min((n+blockSize-1)/blockSize, int64(d.sms)*8)
		d.joins.Add(1)
		return launchStruct(join, [3]int{int(blocks), 1, 1}, [3]int{blockSize, 1, 1}, d.stream, w[:])
	}
	for _, g := range gs {
		if len(g.terms) > gsumMax || joinsOff.Load() { // more than one launch, or joins off: on its own
			if err := d.gsumLaunch(one, g); err != nil {
				return err
			}
			continue
		}
		parts = append(parts, g)
		if len(parts) == gsumJoin {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

var _ kernels.ReluHeadser = (*Backend)(nil)

// ReluHeads implements kernels.ReluHeadser.
func (b *Backend) ReluHeads(calls []kernels.ReluHeadCall) bool {
	done, err := b.d.ReluHeads(calls)
	must(err)
	return done
}

// ReluHeads is kernels.ReluHeadser's ReluHeads, F32: every head in
// relu_heads_f32 launches of up to rhMax heads (a block of rhThreads
// threads per rhRows rows of a head); false, having written nothing,
// for another dtype, a head wider than rhMaxWidth (max(K, O) + Hd), more than
// rhIn distinct gathered inputs (calls sharing one *GatherInput read one)
// or an input of more than gatherInPieces pieces, and for a call with In
// or Join with ESPER_CUDA_GATHER_IN=off. Each launch carries every
// gathered input. Everything is checked before anything launches.
func (d *Device) ReluHeads(calls []kernels.ReluHeadCall) (bool, error) {
	const op = "ReluHeads"
	dims, err := kernels.CheckReluHeads(op, calls)
	if err := checked(err); err != nil {
		return false, err
	}
	if joinsOff.Load() {
		return false, nil
	}
	f32 := tensor.F32
	hs := make([]rhHead, 0, len(calls))
	var ins gatherIns
	for i, c := range calls {
		n, k, hd, o := dims[i].N, dims[i].K, dims[i].Hd, dims[i].O
		if c.Out.DType() != f32 || max(k, o)+hd > rhMaxWidth || ((c.In != nil || c.Join != nil) && gatherInOff.Load()) {
			return false, nil
		}
		what := fmt.Sprintf("%s: head %d", op, i)
		ptrs, err := d.ptrList(what, []string{"x", "w1", "b1", "w2", "b2", "out", "join"},
			[]*tensor.Tensor{c.X, c.W1, c.B1, c.W2, c.B2, c.Out, c.Join}, []tensor.DType{f32, f32, f32, f32, f32, f32, f32},
			[]bool{c.In != nil, false, true, false, true, false, true})
		if err != nil {
			return false, err
		}
		h := rhHead{x: uint64(ptrs[0]), w1: uint64(ptrs[1]), b1: uint64(ptrs[2]), w2: uint64(ptrs[3]), b2: uint64(ptrs[4]),
			out: uint64(ptrs[5]), n: int64(n), k: int64(k), hd: int64(hd), o: int64(o), join: uint64(ptrs[6])}
		if c.Join != nil {
			h.jld, h.jcol, h.jrows = int64(c.Join.Dim(1)), int64(c.JoinCol), int64(c.JoinRows)
		}
		if n == 0 || o == 0 {
			continue // launches nothing, reads no input
		}
		if c.In != nil {
			at, ok, err := ins.add(d, what, c.In, dims[i].Pieces, dims[i].K, rhIn)
			if err != nil || !ok {
				return false, err
			}
			h.in = at
		}
		hs = append(hs, h)
	}
	if len(hs) == 0 {
		return true, nil
	}
	fn, err := d.kernel("relu_heads_f32")
	if err != nil {
		return false, err
	}
	release := d.enter()
	defer release()
	var w [rhWords]uint64
	for start := 0; start < len(hs); start += rhMax {
		blocks, shared := rhPack(&w, hs[start:min(len(hs), start+rhMax)], ins.parts)
		d.joins.Add(1)
		if err := launchStructShared(fn, [3]int{int(blocks), 1, 1}, [3]int{rhThreads, 1, 1}, int(shared), d.stream, w[:]); err != nil {
			return false, err
		}
	}
	return true, nil
}

// gatherInput returns a gathered input's parts (gatherPlan's, no ones):
// its pieces' addresses, F32, as kernels.CheckGatherInput found them
// (pieces, of width columns in all).
func (d *Device) gatherInput(what string, in *kernels.GatherInput, pieces []kernels.GatherBlock, width int) ([]gatherPart, error) {
	n := len(in.Xs)
	xa, sa, ra, oa := make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n)
	for i, p := range pieces {
		if p.Width == 0 {
			continue
		}
		ptrs, err := d.ptrList(fmt.Sprintf("%s: In piece %d", what, i), []string{"x", "src", "rowPtr", "order"},
			[]*tensor.Tensor{in.Xs[i], in.Src[i], in.RowPtr[i], in.Order[i]}, []tensor.DType{tensor.F32, tensor.I64, tensor.I64, tensor.I64},
			[]bool{false, !p.Gathered, !p.Gathered, true})
		if err != nil {
			return nil, err
		}
		xa[i], sa[i], ra[i], oa[i] = uint64(ptrs[0]), uint64(ptrs[1]), uint64(ptrs[2]), uint64(ptrs[3])
	}
	return gatherPlan(pieces, xa, sa, ra, oa, 0, width), nil
}

// gatherIns are the distinct gathered inputs of a launch's calls, each
// planned once (calls sharing one *kernels.GatherInput read one).
type gatherIns struct {
	parts [][]gatherPart
	index map[*kernels.GatherInput]int64
}

// add returns in's place in the launch (1-based: a call's in word),
// planning it (gatherInput) the first time; ok false where it would be
// the (most+1)th input or has more than gatherInPieces parts, which the
// kernel cannot take.
func (g *gatherIns) add(d *Device, what string, in *kernels.GatherInput, pieces []kernels.GatherBlock, width, most int) (at int64, ok bool, err error) {
	if at, seen := g.index[in]; seen {
		return at, true, nil
	}
	parts, err := d.gatherInput(what, in, pieces, width)
	if err != nil || len(parts) > gatherInPieces || len(g.parts) == most {
		return 0, false, err
	}
	if g.index == nil {
		g.index = map[*kernels.GatherInput]int64{}
	}
	g.parts = append(g.parts, parts)
	at = int64(len(g.parts))
	g.index[in] = at
	return at, true, nil
}
