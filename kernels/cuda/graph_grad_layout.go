package cuda

import "math"

// The parameter block of gat_mean_grad_f32 (src/graph_grad.cu), passed
// by value: pure Go, with no cgo, so that its size is held to the PTX's
// without a GPU (graph_layout_test.go).

// ggMaxRels is GG_MAX_RELS: the most relations one gat_mean_grad_f32
// launch takes; more go in further launches.
const ggMaxRels = 8

// ggRelWords and ggWords are the sizes of struct GgRel and struct GgArgs
// in 8-byte words.
const (
	ggRelWords = 19
	ggWords    = 7 + ggRelWords*ggMaxRels
)

// ggRel is one relation of a gat_mean_grad_f32 launch, struct GgRel's
// words in order: hs, hd, attr, we, attSrc, attDst, attEdge, src,
// rowPtr, order, then the gradients dHs, dHd, dAttSrc, dAttDst, dBias (0:
// not wanted) and dv (the relation's [H·F] scratch), then hs's and hd's
// row strides and attr's width.
type ggRel struct {
	ptrs          [16]uint64
	lds, ldd, f   int64
	dAttEdge, dWe uint64 // gat_grad_edge_f32's outputs (not in the block)
}

// ggPack writes a GgArgs block: g, the relations' count, nd, heads, c,
// slope and alpha, then rels.
func ggPack(w *[ggWords]uint64, g uint64, nd, heads, c int64, slope, alpha float64, rels []ggRel) {
	*w = [ggWords]uint64{}
	w[0], w[1], w[2], w[3], w[4] = g, uint64(len(rels)), uint64(nd), uint64(heads), uint64(c)
	w[5], w[6] = math.Float64bits(slope), math.Float64bits(alpha)
	for r, rel := range rels {
		o := 7 + ggRelWords*r
		copy(w[o:], rel.ptrs[:])
		w[o+16], w[o+17], w[o+18] = uint64(rel.lds), uint64(rel.ldd), uint64(rel.f)
	}
}

// ggShared is gat_mean_grad_f32's dynamic shared memory in bytes for
// heads H, width C and edge attribute width F: 2·H·F + C + 3·H·C floats.
func ggShared(heads, c, f int) int { return 4 * (2*heads*f + c + 3*heads*c) }
