package cuda

// The layout of a gemm_join_f32 or gemm_join_tf32 launch
// (src/matmul.cu), pure Go so that it is tested without a GPU
// (matmul_join_test.go runs a packed launch the way the kernels do).

// gemmJoin is GEMM_JOIN: the most products one gemm_join_f32 launch
// computes; gemmJoinTile is GJ_T, a block's square output tile (and its
// K step); gjCallWords and gemmJoinWords are the sizes of struct GjCall
// and struct GemmJoin in 8-byte words.
const (
	gemmJoin      = 8
	gemmJoinTile  = 32
	gjCallWords   = 7
	gemmJoinWords = 1 + gemmJoin*gjCallWords
)

// gemmJoinMaxMACs bounds a product gemm_join_f32 takes (m·n·k): its
// plain fp32 tiles serve a graph policy's layers at small batches (W2's
// at batch 1, 3 rows by 4096 stacked weight rows by 256, is 3.1 M); far
// larger products are cuBLAS's, whose kernels outrun it once there is
// work for the whole device (W2's at batch 64, 192 by 4096 by 256, is
// 201 M: its layers' products run on cuBLAS).
const gemmJoinMaxMACs = 1 << 25

// gjCall is one product of a gemm_join_f32 launch: d = a·bᵀ at those
// addresses, a [m, k], b [n, k], d [m, n], contiguous F32.
type gjCall struct {
	d, a, b uint64
	m, n, k int64
}

// gemmJoinSkinny is GJ_SKINNY, the most rows a product has for
// gemm_join_f32 to take it a column per warp, and gemmJoinCols GJ_COLS,
// the columns of such a product a block takes.
const (
	gemmJoinSkinny = 8
	gemmJoinCols   = 8
)

// gjTiles is the blocks of a product of m×n outputs: one per
// gemmJoinCols columns of a skinny one (m ≤ gemmJoinSkinny), else one
// per output tile.
func gjTiles(m, n int64) int64 {
	if m <= gemmJoinSkinny {
		return (n + gemmJoinCols - 1) / gemmJoinCols
	}
	return ((m + gemmJoinTile - 1) / gemmJoinTile) * ((n + gemmJoinTile - 1) / gemmJoinTile)
}

// gemmJoinTileTC is GJ_TC, gemm_join_tf32's square output tile (a block
// of 128 threads each), and gemmJoinMaxMACsTC the largest product
// (m·n·k) it takes: W2's batch-64 layers' (192 by 4096 by 256, 201 M)
// and below. cuBLAS runs each of those as a launch of its own of about
// 6 µs on an H200; the join, meant to run a layer's three side by side,
// took 84 to 106 µs for them (ESPER_CUDA_JOINS_TF32, off by default).
const (
	gemmJoinTileTC    = 64
	gemmJoinMaxMACsTC = 1 << 28
)

// gjTilesTC is gemm_join_tf32's blocks for a product of m×n outputs.
func gjTilesTC(m, n int64) int64 {
	return ((m + gemmJoinTileTC - 1) / gemmJoinTileTC) * ((n + gemmJoinTileTC - 1) / gemmJoinTileTC)
}

// gemmJoinPack writes struct GemmJoin into w for cs (1 to gemmJoin
// products, none without outputs) and returns the launch's blocks (every
// product's blocks, gjTiles, in order); unused slots are zeroed.
func gemmJoinPack(w *[gemmJoinWords]uint64, cs []gjCall) (tiles int64) {
	return gemmJoinPackBy(w, cs, gjTiles)
}

// gemmJoinPackBy is gemmJoinPack with each product's blocks counted by
// blocks (gjTiles for gemm_join_f32, gjTilesTC for gemm_join_tf32).
func gemmJoinPackBy(w *[gemmJoinWords]uint64, cs []gjCall, blocks func(m, n int64) int64) (tiles int64) {
	*w = [gemmJoinWords]uint64{}
	w[0] = uint64(len(cs))
	for i, c := range cs {
		o := 1 + i*gjCallWords
		w[o], w[o+1], w[o+2] = c.d, c.a, c.b
		w[o+3], w[o+4], w[o+5], w[o+6] = uint64(c.m), uint64(c.n), uint64(c.k), uint64(tiles)
		tiles += blocks(c.m, c.n)
	}
	return tiles
}
