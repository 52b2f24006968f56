package cuda

import (
	"fmt"
	"math"

	"github.com/esper-go/esper/kernels"
)

// The parameter blocks of gat_mean_f32 and gather_concat_f32
// (src/graph.cu), passed by value: pure Go, with no cgo, so that their
// sizes are held to the PTX's without a GPU (graph_layout_test.go).

// gatMaxRels is GAT_MAX_RELS: the most relations one gat_mean_f32 launch
// takes; a GATMean over more launches again, accumulating.
const gatMaxRels = 8

// gatRelWords and gatMultiWords are the sizes of struct GatRel and
// struct GatMulti in 8-byte words.
const (
	gatRelWords   = 14
	gatMultiWords = 12 + gatRelWords*gatMaxRels
)

// tailCounters is how many counters a device keeps for the launches
// that finish their own reductions (Device.counters): gat_mean_f32's
// tail, one per node, and batch norm's partial launches, one per
// channel. Kernels on the device's stream run one after another and
// each leaves its counters at zero, so they share them. A GATMean into
// more nodes, or a batch norm of more channels, finishes in a launch of
// its own instead. Sharing them rests on that one stream: a second
// stream running kernels (the Stager's only copies) would need counters
// of its own, or two tails could count into the same words at once.
const tailCounters = 1 << 16

// bnStatsTail and bnBwdTail are struct BnStatsTail and struct BnBwdTail
// of src/norm.cu: the last argument of batch norm's partial launches,
// whose counters (0: none) let the launch finish each channel itself.
type bnStatsTail struct {
	mean, rstd, rm, rv uint64
	cnt                int64
	momentum, eps      float32
	counters           uint64
}

type bnBwdTail struct {
	sums, dw, db uint64
	c            int64
	acc          bool
	counters     uint64
}

// words are the struct's 8-byte words as the kernel reads them.
func (t bnStatsTail) words() []uint64 {
	return []uint64{t.mean, t.rstd, t.rm, t.rv, uint64(t.cnt),
		uint64(math.Float32bits(t.momentum)) | uint64(math.Float32bits(t.eps))<<32, t.counters}
}

func (t bnBwdTail) words() []uint64 {
	acc := uint64(0)
	if t.acc {
		acc = 1
	}
	return []uint64{t.sums, t.dw, t.db, uint64(t.c), acc, t.counters}
}

// gatTail is the combining tail of a gat_mean_f32 launch that takes
// every relation of a GATMean (gat_tail in src/graph.cu): out's and
// res's addresses (res 0: none), the per-node counters' (0: no tail,
// gat_combine_f32 adds the relations) and the activation (-1: none).
type gatTail struct {
	out, res, counters uint64
	act                int64
}

// gatRel is one relation of a gat_mean_f32 launch: hs, hd, attr, we,
// attSrc, attDst, attEdge, bias, src, rowPtr and order's addresses, then
// hs's and hd's row strides and attr's width.
type gatRel struct {
	ptrs        [11]uint64
	lds, ldd, f int64
}

// gatMultiPack writes struct GatMulti into w: the scratch's address (the
// relations' results, [relations, nd, c] floats), the launch's relation
// count (1 to gatMaxRels), nd, heads, c, slope, alpha and relBase (the
// launch's first relation among all of the mean's), the tail, then
// rels; the relations past len(rels) are zeroed.
func gatMultiPack(w *[gatMultiWords]uint64, scratch uint64, nd, heads, c int64, slope, alpha float64, relBase int64, tail gatTail, rels []gatRel) {
	*w = [gatMultiWords]uint64{}
	w[0], w[1], w[2], w[3], w[4] = scratch, uint64(len(rels)), uint64(nd), uint64(heads), uint64(c)
	w[5], w[6], w[7] = math.Float64bits(slope), math.Float64bits(alpha), uint64(relBase)
	w[8], w[9], w[10], w[11] = tail.out, tail.res, tail.counters, uint64(tail.act)
	for r, rel := range rels {
		o := 12 + gatRelWords*r
		copy(w[o:o+11], rel.ptrs[:])
		w[o+11], w[o+12], w[o+13] = uint64(rel.lds), uint64(rel.ldd), uint64(rel.f)
	}
}

// gatCall is a checked GATMean's launch words: out [nd, c] and its
// residual (0: none), heads, the slope, each relation's 1/R share
// (alpha), the activation (-1: none), the relations, and a block's
// dynamic shared memory and threads.
type gatCall struct {
	out, res       uint64
	nd, heads, c   int64
	slope, alpha   float64
	act            int64
	rels           []gatRel
	shared, thread int
	warp           bool // the warp kernels run it (gat_mean_warp_f32)
}

// blocks is g's grid row: a block per node, or per gwWarps nodes for
// the warp kernels, at most gatMaxBlocks.
func (g gatCall) blocks() int {
	if g.warp {
		return gatWarpBlocks(g.nd)
	}
	return int(min(g.nd, gatMaxBlocks))
}

// tailed reports whether g is one gat_mean_f32 launch that adds its
// relations itself (gat_tail): every relation in it, a counter per node.
func (g gatCall) tailed() bool { return len(g.rels) <= gatMaxRels && g.nd <= tailCounters }

// gatJoin is GAT_JOIN: the most GATMeans one gat_mean_join_f32 launch
// runs; gatJoinWords is the size of struct GatJoin in 8-byte words (the
// count, the ends, then the means' GatMulti).
const (
	gatJoin      = 4
	gatJoinWords = 1 + gatJoin + gatJoin*gatMultiWords
)

// gatJoinPart is one mean of a gat_mean_join_f32 launch: its call (one
// tailed launch), its scratch ([relations, nd, c] floats) and its
// counters (nd of them, apart from every other mean's).
type gatJoinPart struct {
	g                 gatCall
	scratch, counters uint64
}

// gatJoinPack writes struct GatJoin into w for the means ps (2 to
// gatJoin, each tailed) and returns the launch's grid: x the most nodes
// (within gatMaxBlocks), y every mean's relations in turn; unused slots
// are zeroed.
func gatJoinPack(w *[gatJoinWords]uint64, ps []gatJoinPart) (gx, gy int) {
	*w = [gatJoinWords]uint64{}
	w[0] = uint64(len(ps))
	var m [gatMultiWords]uint64
	for k, p := range ps {
		g := p.g
		gy += len(g.rels)
		w[1+k] = uint64(gy)
		gx = max(gx, g.blocks())
		gatMultiPack(&m, p.scratch, g.nd, g.heads, g.c, g.slope, g.alpha, 0,
			gatTail{out: g.out, res: g.res, counters: p.counters, act: g.act}, g.rels)
		copy(w[1+gatJoin+k*gatMultiWords:], m[:])
	}
	return gx, gy
}

// gatherMax is GATHER_MAX: the most pieces one gather_concat_f32 launch
// takes; a GatherConcat of more launches again for the rest.
const gatherMax = 16

// gatherPartWords and gatherCatWords are the sizes of struct GatherPart
// and struct GatherCat in 8-byte words.
const (
	gatherPartWords = 8
	gatherCatWords  = 5 + gatherPartWords*gatherMax
)

// Kinds of a gatherPart (GatherPart.kind).
const (
	gatherMean = 0 // the mean over the CSR
	gatherCopy = 1 // x's rows
	gatherOnes = 2 // ones
)

// gatherPart is one piece of a gather_concat_f32 launch: x, src, rowPtr
// and order's addresses (0 where the kind reads none), its width w, its
// first column col in out and its kind.
type gatherPart struct {
	x, src, rowPtr, order uint64
	w, col, kind          int64
}

// gatherCatPack writes struct GatherCat into w for parts (1 to gatherMax
// of them, none empty) of an out of nd rows ldo elements apart, giving
// each its first local column (the widths before it), and returns the
// launch's local width (the widths' sum); the parts past len(parts) are
// zeroed.
func gatherCatPack(w *[gatherCatWords]uint64, out uint64, nd, ldo int64, parts []gatherPart) int64 {
	*w = [gatherCatWords]uint64{}
	loc := partsPack(w[5:], parts)
	w[0], w[1], w[2], w[3], w[4] = out, uint64(nd), uint64(ldo), uint64(loc), uint64(len(parts))
	return loc
}

// gatherPlan returns a GatherConcat's parts: pieces as
// kernels.CheckGatherConcat found them, at the addresses xs[i] (and,
// for a gathered piece, src[i], rowPtr[i] and order[i]), then ones
// columns of ones ending out's width columns. Pieces of no columns are
// left out.
func gatherPlan(pieces []kernels.GatherBlock, xs, src, rowPtr, order []uint64, ones, width int) []gatherPart {
	parts := make([]gatherPart, 0, len(pieces)+1)
	for i, p := range pieces {
		if p.Width == 0 {
			continue
		}
		part := gatherPart{x: xs[i], w: int64(p.Width), col: int64(p.Col), kind: gatherCopy}
		if p.Gathered {
			part.src, part.rowPtr, part.order, part.kind = src[i], rowPtr[i], order[i], gatherMean
		}
		parts = append(parts, part)
	}
	if ones > 0 {
		parts = append(parts, gatherPart{w: int64(ones), col: int64(width - ones), kind: gatherOnes})
	}
	return parts
}

// gsumMax is GSUM_MAX: the most terms one gather_sum_f32 launch adds; a
// GatherSum of more launches again, accumulating.
const gsumMax = 16

// gsumTermWords and gsumWords are the sizes of struct GsumTerm and
// struct GatherSumArgs in 8-byte words.
const (
	gsumTermWords = 5
	gsumWords     = 8 + gsumTermWords*gsumMax
)

// gsumTerm is one term of a gather_sum_f32 launch: x's address, the
// CSR's (src 0: x's own rows, or a bias with ld 0) and x's row stride.
type gsumTerm struct {
	x, src, rowPtr, order uint64
	ld                    int64
}

// gsumLaunch is one gather_sum_f32 launch of a GatherSum: its terms,
// whether it starts from out (every launch but the first) and its
// activation (-1 on every launch but the last, which applies the scale,
// the activation and the residual).
type gsumLaunch struct {
	terms      []gsumTerm
	accumulate bool
	act        int64
}

// gsumPlan splits a GatherSum's terms (its pieces, then its biases) into
// launches of at most gsumMax; none for no term is wrong, so a sum of no
// terms is one launch of none (out = act(0) + res).
func gsumPlan(terms []gsumTerm, act int64) []gsumLaunch {
	var ls []gsumLaunch
	for start := 0; start == 0 || start < len(terms); start += gsumMax {
		end := min(len(terms), start+gsumMax)
		ls = append(ls, gsumLaunch{terms: terms[start:end], accumulate: start > 0, act: -1})
	}
	ls[len(ls)-1].act = act
	return ls
}

// gsumPack writes struct GatherSumArgs into w for one launch over out
// [nd, c] with residual res (0: none) and scale; the terms past the
// launch's are zeroed.
func gsumPack(w *[gsumWords]uint64, out, res uint64, nd, c int64, scale float64, l gsumLaunch) {
	*w = [gsumWords]uint64{}
	w[0], w[1], w[2], w[3], w[4] = out, res, uint64(nd), uint64(c), uint64(len(l.terms))
	w[5], w[6] = math.Float64bits(scale), uint64(l.act)
	if l.accumulate {
		w[7] = 1
	}
	for k, t := range l.terms {
		o := 8 + gsumTermWords*k
		w[o], w[o+1], w[o+2], w[o+3], w[o+4] = t.x, t.src, t.rowPtr, t.order, uint64(t.ld)
	}
}

// gsumCall is a checked GatherSum's launch words: out [nd, c], the
// residual, the scale and its terms (its pieces, then its biases).
type gsumCall struct {
	out, res uint64
	nd, c    int64
	scale    float64
	act      int64
	terms    []gsumTerm
}

// gsumJoin is GSUM_JOIN: the most GatherSums one gather_sum_join_f32
// launch runs; gsumJoinWords is the size of struct GatherSumJoin in
// 8-byte words (the count, the ends, then the sums' GatherSumArgs).
const (
	gsumJoin      = 4
	gsumJoinWords = 1 + gsumJoin + gsumJoin*gsumWords
)

// gsumJoinPack writes struct GatherSumJoin into w for the sums gs (2 to
// gsumJoin, each of at most gsumMax terms: one launch of its own) and
// returns the joined range's length, Σ nd·c; unused slots are zeroed.
func gsumJoinPack(w *[gsumJoinWords]uint64, gs []gsumCall) int64 {
	*w = [gsumJoinWords]uint64{}
	w[0] = uint64(len(gs))
	var end int64
	var a [gsumWords]uint64
	for k, g := range gs {
		end += g.nd * g.c
		w[1+k] = uint64(end)
		gsumPack(&a, g.out, g.res, g.nd, g.c, g.scale, gsumLaunch{terms: g.terms, act: g.act})
		copy(w[1+gsumJoin+k*gsumWords:], a[:])
	}
	return end
}

// rhMax is RH_MAX, the most heads one relu_heads_f32 launch runs,
// rhRows RH_ROWS, the rows a block takes, and rhIn RH_IN, the most
// gathered inputs a launch reads; rhHeadWords and rhWords are the sizes
// of struct RhHead and struct RhArgs in 8-byte words; rhThreads is a
// block's threads (the kernel's launch bound: 32 warps, so that W2's 128
// hidden units are 4 a warp; at 8 warps, 16 a warp, its heads' launch
// took about 35 µs at batch 1 on an H200), and rhMaxWidth the most
// max(K, O) + Hd a head may have: its rows' inputs (later its outputs)
// and its hidden units in 48 KiB of shared memory.
const (
	rhMax       = 16
	rhRows      = 8
	rhIn        = 4
	rhHeadWords = 15
	rhWords     = 1 + rhMax + rhIn*gatherInWords + rhMax*rhHeadWords
	rhThreads   = 1024
	rhMaxWidth  = (48 << 10) / (4 * rhRows)
)

// gatherInPieces is GATHER_IN_PIECES (src/common.cuh), the most pieces
// of a gathered input, and gatherInWords the size of struct GatherIn in
// 8-byte words.
const (
	gatherInPieces = 4
	gatherInWords  = 1 + gatherInPieces*gatherPartWords
)

// gatherInPack writes struct GatherIn into w (gatherInWords words) for
// parts (1 to gatherInPieces, none empty: gatherPlan's without ones),
// each at its first column (loc, the widths before it).
func gatherInPack(w []uint64, parts []gatherPart) {
	if len(parts) > gatherInPieces {
		panic(fmt.Sprintf("cuda: a gathered input of %d parts, at most %d", len(parts), gatherInPieces))
	}
	w[0] = uint64(len(parts))
	partsPack(w[1:], parts)
}

// partsPack writes parts as struct GatherParts, one after another from
// w[0], each at its first local column (loc: the widths before it), and
// returns their width.
func partsPack(w []uint64, parts []gatherPart) (loc int64) {
	for j, p := range parts {
		q := j * gatherPartWords
		w[q], w[q+1], w[q+2], w[q+3] = p.x, p.src, p.rowPtr, p.order
		w[q+4], w[q+5], w[q+6], w[q+7] = uint64(p.w), uint64(p.col), uint64(loc), uint64(p.kind)
		loc += p.w
	}
	return loc
}

// rhHead is one head of a relu_heads_f32 launch: x, w1, b1, w2, b2 and
// out's addresses (b1, b2 0: none), n rows, k inputs, hd hidden units
// and o outputs; in, 0 where x is the input, else the gathered input
// in − 1 of the launch (x then 0); join, 0 or the address of the joined
// output its outputs also go to, with jld that output's row stride, jcol
// the head's first column and jrows its rows per joined row.
type rhHead struct {
	x, w1, b1, w2, b2, out uint64
	n, k, hd, o, in        int64
	join                   uint64
	jld, jcol, jrows       int64
}

// rhPack writes struct RhArgs into w for hs (1 to rhMax heads, each of
// at least one row) and ins (at most rhIn gathered inputs, each of 1 to
// gatherInPieces parts, none empty: gatherPlan's), and returns the launch's
// blocks (every head's row tiles) and a block's dynamic shared memory in
// bytes (the widest head's rhRows·(max(k, o) + hd) floats: its rows'
// inputs, then its outputs in their place, and its hidden units); unused
// slots are zeroed.
func rhPack(w *[rhWords]uint64, hs []rhHead, ins [][]gatherPart) (blocks, shared int64) {
	if len(hs) > rhMax || len(ins) > rhIn {
		panic(fmt.Sprintf("cuda: a relu_heads_f32 launch of %d heads and %d gathered inputs, at most %d and %d", len(hs), len(ins), rhMax, rhIn))
	}
	*w = [rhWords]uint64{}
	w[0] = uint64(len(hs))
	for i, parts := range ins {
		o := 1 + rhMax + i*gatherInWords
		gatherInPack(w[o:o+gatherInWords], parts)
	}
	for i, h := range hs {
		blocks += (h.n + rhRows - 1) / rhRows
		w[1+i] = uint64(blocks)
		o := 1 + rhMax + rhIn*gatherInWords + i*rhHeadWords
		w[o], w[o+1], w[o+2], w[o+3], w[o+4], w[o+5] = h.x, h.w1, h.b1, h.w2, h.b2, h.out
		w[o+6], w[o+7], w[o+8], w[o+9], w[o+10] = uint64(h.n), uint64(h.k), uint64(h.hd), uint64(h.o), uint64(h.in)
		w[o+11], w[o+12], w[o+13], w[o+14] = h.join, uint64(h.jld), uint64(h.jcol), uint64(h.jrows)
		shared = max(shared, 4*rhRows*(max(h.k, h.o)+h.hd))
	}
	return blocks, shared
}
