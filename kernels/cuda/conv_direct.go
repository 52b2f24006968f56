package cuda

// Direct convolutions (conv_direct_*_f32 in src/conv.cu) for small fp32
// layers: a thread sums an output element (a tile of DC_TILE output or
// input channels) from the input and the weights, which sit in shared
// memory, with no columns buffer and no cuBLAS. For W4's CNN layers
// (K = 9 to 144, up to 32 output channels) the im2col path wrote 9·Cin
// columns per pixel and ran per-sample GEMMs far too small for cuBLAS,
// with two or three launches per call where these take one (the weight
// gradient two: its per-sample sums, then sum_batches over the samples
// as before). Larger layers keep im2col and cuBLAS. The direct kernels
// compute in fp32 whatever the matmul precision (TF32 only ever allows
// less). conv.go (the cuda build) picks the path; the launch geometry is
// here, untagged, so that conv_direct_test.go can run the kernels' index
// arithmetic, transcribed to Go, without a GPU.

// Limits of the direct path: the weights within directWeights floats
// (32 KiB of shared memory, forward and input gradient); the weight
// gradient's sample (dy and x) within directSample floats (48 KiB, the
// limit of a block's shared memory without opting in, less 64 bytes for
// the kernel's own: its tail's flag); every element count below 2^30
// (the kernels' 32-bit index arithmetic, whose grid-stride steps must
// not wrap).
const (
	directWeights = 8192
	directSample  = 12288 - 16
	directTile    = 8 // DC_TILE
	directThreads = 256
)

// sumRows is sum_batches' rows of threads per block (SUM_ROWS in
// src/conv.cu), whose order conv_direct_dw_f32's tail keeps.
const sumRows = 8

// directLanes is how many lanes of a warp sum one output of
// conv_direct_dw_f32 over pixels output pixels: a power of two up to 32,
// about eight pixels a lane.
func directLanes(pixels int) int {
	lanes := 1
	for lanes < 32 && lanes*8 < pixels {
		lanes *= 2
	}
	return lanes
}

// directDWChunks is grid.y of conv_direct_dw_f32 (grid.x is the n
// samples): about four blocks per SM in all, each chunk a share of the m
// outputs, directThreads/lanes of them at a time; 0 when there is no
// work.
func directDWChunks(n, m, sms, lanes int) int {
	if n <= 0 || m <= 0 {
		return 0
	}
	perBlock := directThreads / lanes
	return min(max((4*sms+n-1)/n, 1), (m+perBlock-1)/perBlock)
}
