package cuda

// The launch geometry of the GAT kernels (gat_aggregate_f32,
// gat_mean_f32): pure Go, untagged, so that a test can hold it to the
// launch bounds the PTX declares without a GPU.

// gatShared is the dynamic shared memory of a gat_aggregate_f32 block in
// bytes: heads·f + 7·heads + heads·c floats (src/graph.cu).
func gatShared(heads, c, f int) int {
	return 4 * (heads*f + 7*heads + heads*c)
}

// Launch bounds of gat_aggregate_f32 and gat_mean_f32: their shared
// memory must fit the 48 KiB a block gets without opting in (heads·(c +
// f + 7) ≤ 12288 floats), and they run gatMaxThreads threads a block at
// most, one warp at least. gat_mean_f32 is compiled for blocks of
// gatMaxThreads, gatMinBlocks to a multiprocessor (__launch_bounds__ in
// src/graph.cu: 64 registers a thread, 100 without), so that W2's
// batch-64 launch (768 blocks) runs in one wave on an H100 or H200, not
// three. The thread count changes no bit: every accumulator, logit and
// output is one thread's or one warp's, whatever the block.
const (
	gatMaxShared  = 48 << 10
	gatMaxThreads = 128
	gatMinBlocks  = 8
	gatMaxBlocks  = 1 << 20
)

// gatMeanMaxShared is gat_mean_f32's bound on the same dynamic shared
// memory: 64 bytes less, since its tail's flag (last_block, common.cuh)
// is static shared memory of the same block, and static and dynamic
// together must fit the 48 KiB.
const gatMeanMaxShared = gatMaxShared - 64

// gatThreads is a gat_aggregate_f32 block's thread count: a warp per head
// for the logits or a thread per (head, channel) accumulator, whichever
// is more, rounded up to whole warps, within [32, gatMaxThreads].
func gatThreads(heads, c int) int {
	n := max(heads*c, 32*heads)
	n = (n + 31) &^ 31
	return min(max(n, 32), gatMaxThreads)
}

// The warp-per-node GAT kernels (gat_mean_warp_f32 and
// gat_mean_join_warp_f32, ESPER_CUDA_GAT_WARPS=on): a relation of at
// most gwHeads heads, 32·gwChunks channels a head and gwAttr edge
// attributes (GW_HEADS, GW_CW, GW_F) runs a warp per destination node,
// gwWarps nodes to a block of gwThreads (GW_WARPS), compiled for
// gwMinBlocks blocks a multiprocessor (__launch_bounds__(128, 4): 128
// registers a thread, the node's accumulator and its edge's source row
// in registers; 16 warps a multiprocessor, so that W2's 1 664 batch-64
// (node, relation) warps fit one wave of 132 multiprocessors with a
// quarter to spare). Their dynamic shared memory is the edge-attribute
// term v alone, heads·f floats.
const (
	gwHeads     = 4
	gwChunks    = 4
	gwAttr      = 4
	gwWarps     = 4
	gwThreads   = 32 * gwWarps
	gwMinBlocks = 4
)

// gatWarpFits reports whether a relation of heads heads, c channels a
// head and f edge attributes fits the warp kernels' registers.
func gatWarpFits(heads, c, f int) bool {
	return heads >= 1 && heads <= gwHeads && c >= 1 && c <= 32*gwChunks && f >= 0 && f <= gwAttr
}

// gatWarpShared is a warp kernel block's dynamic shared memory in bytes
// for edge attributes of width f: v, heads·f floats.
func gatWarpShared(heads, f int) int { return 4 * heads * f }

// gatWarpBlocks is a warp kernel's grid row for nd nodes: a block per
// gwWarps nodes, at most gatMaxBlocks (the rest strided).
func gatWarpBlocks(nd int64) int { return int(min((nd+gwWarps-1)/gwWarps, gatMaxBlocks)) }
