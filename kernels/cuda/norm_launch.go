package cuda

// Batch norm's launches (src/norm.cu) as the cuda build makes them: the
// chunking of a channel, the partial launches' grid, tails and argument
// blocks, and the argument blocks of the passes they feed. Pure Go,
// untagged, so that norm_kernel_test.go can run the kernels, transcribed
// to Go, over exactly these launches without a GPU.

// Batch norm's per-channel reductions spread a channel's N·HW elements
// over blocks of about bnChunk elements each, at most bnMaxBlocks blocks
// over all channels, and finish with one warp per channel. One block per
// channel, as before, left a GPU all but idle on a small CNN's few
// channels of 10^5 elements (150 to 220 µs per pass on an H200, most of
// W4's step).
const (
	bnChunk     = 1024
	bnMaxBlocks = 4096
	// bnMaxChannels is the grid's y limit (a channel per row of blocks).
	bnMaxChannels = 65535
)

// bnChunks splits a channel's cnt elements into s chunks of chunk
// elements, the last possibly shorter, none empty.
func bnChunks(cnt, c int) (s, chunk int) {
	if cnt <= 0 || c <= 0 {
		return 1, 1
	}
	s = min((cnt+bnChunk-1)/bnChunk, max(1, bnMaxBlocks/c))
	chunk = (cnt + s - 1) / s
	return (cnt + chunk - 1) / chunk, chunk
}

// bnPartialGeom is a partial launch's grid and block: block (s, ch) of
// (S, C) reduces chunk s of channel ch, rowThreads threads a block.
func bnPartialGeom(s, c int) (grid, block [3]int) {
	return [3]int{s, c, 1}, [3]int{rowThreads, 1, 1}
}

// bnTailCounters is the counters word of a partial launch over c
// channels: the device's counters where the channels fit tailCounters
// (the launch finishes them itself), else 0 (a finishing launch does).
func bnTailCounters(c int, counters uint64) uint64 {
	if c <= tailCounters {
		return counters
	}
	return 0
}

// bnStatsTrainTail is bn_stats_<dt>'s tail in training: the statistics'
// and the running statistics' addresses (rm, rv 0: none), the channel's
// element count, momentum and eps, and the counters bnTailCounters gives.
func bnStatsTrainTail(mean, rstd, rm, rv uint64, cnt, c int, momentum, eps float64, counters uint64) bnStatsTail {
	return bnStatsTail{mean: mean, rstd: rstd, rm: rm, rv: rv, cnt: int64(cnt),
		momentum: float32(momentum), eps: float32(eps), counters: bnTailCounters(c, counters)}
}

// bnBwdSumsTail is bn_bwd_sums*'s tail: the sums' address, dw and db (0:
// none), the channel count, acc, and the counters bnTailCounters gives.
func bnBwdSumsTail(sums, dw, db uint64, c int, acc bool, counters uint64) bnBwdTail {
	return bnBwdTail{sums: sums, dw: dw, db: db, c: int64(c), acc: acc, counters: bnTailCounters(c, counters)}
}

// bnPartialArgs is a partial launch's argument block: the scratch part,
// then fill's arguments, then the tail's words (one struct argument).
func bnPartialArgs(part uint64, fill func(a *args), tail []uint64) *args {
	var a args
	a.addr(part)
	fill(&a)
	a.push(tail...)
	return &a
}

// bnStatsFill adds bn_stats_<dt>'s arguments after the scratch: x, n,
// c, hw and the chunk length.
func bnStatsFill(x uint64, n, c, hw, chunk int) func(a *args) {
	return func(a *args) {
		a.addr(x).i64(int64(n)).i64(int64(c)).i64(int64(hw)).i64(int64(chunk))
	}
}

// bnBwdSumsFill adds the backward partial's arguments after the
// scratch, given the chunk length: bn_bwd_sums_<dt>'s (relu nil: dy, x,
// mean, rstd, n, c, hw, chunk), or bn_bwd_sums_relu_<dt>'s, which add w
// and relu (struct NormRelu's words), or with pool
// bn_bwd_sums_relupool_<dt>'s, which take no dy.
func bnBwdSumsFill(pool bool, dy, x, mean, rstd, w uint64, n, c, hw int, relu []uint64) func(a *args, chunk int) {
	return func(a *args, chunk int) {
		if !pool {
			a.addr(dy)
		}
		a.addr(x).addr(mean).addr(rstd).i64(int64(n)).i64(int64(c)).i64(int64(hw)).i64(int64(chunk))
		if relu != nil {
			a.addr(w).push(relu...)
		}
	}
}

// bnBwdDxArgs is the input gradient's argument block over total
// elements (n samples): bn_bwd_dx_<dt>'s (relu nil), or
// bn_bwd_dx_relu_<dt>'s with relu (struct NormRelu's words) last, or
// with pool bn_bwd_dx_relupool_<dt>'s, which take no dy.
func bnBwdDxArgs(pool bool, dx, dy, x, mean, rstd, w, sums uint64, training bool, c, hw, n int, total int64, relu []uint64) *args {
	var e args
	e.addr(dx)
	if !pool {
		e.addr(dy)
	}
	e.addr(x).addr(mean).addr(rstd).addr(w).addr(sums).i32(b2i(training))
	e.i64(int64(c)).i64(int64(hw)).i64(int64(n * hw)).i64(total)
	if relu != nil {
		e.push(relu...)
	}
	return &e
}

// normReluWords is struct NormRelu of src/norm.cu, word for word, for
// the fused ReLU's backward: the forward's shift b (0: none), no pool.
func normReluWords(b uint64) []uint64 { return []uint64{b, 0, 0, 0, 0, 0} }

// normReluPoolWords is struct NormRelu for the pooled backward: b, the
// pool's gradient g and argmax, and the pool's geometry (x's plane
// width wd, the pooled plane h/2 × wd/2).
func normReluPoolWords(b, g, argmax uint64, h, wd int) []uint64 {
	return []uint64{b, g, argmax, uint64(wd), uint64(h / 2), uint64(wd / 2)}
}

// bnReluPoolArgs is bn_relu_pool_<dt>'s argument block over the total
// pooled outputs of x's planes of h × wd.
func bnReluPoolArgs(pooled, argmax, x, mean, rstd, w, b uint64, c, h, wd int, total int64) *args {
	var e args
	e.addr(pooled).addr(argmax).addr(x).addr(mean).addr(rstd).addr(w).addr(b)
	e.i64(int64(c)).i64(int64(h)).i64(int64(wd)).i64(int64(h / 2)).i64(int64(wd / 2)).i64(total)
	return &e
}
