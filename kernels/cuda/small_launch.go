package cuda

import (
	"fmt"
	"math"

	"github.com/esper-go/esper/kernels"
)

// The launch geometry and size limits of the one-launch small kernels
// (linear_ce_sgd_f32 and ce_small, linear_act_ln_f32,
// linear_bwd_small_f32, clip_small_f32) and of the grid-stride launches:
// pure Go, untagged, so that linear_ce_sgd_kernel_test.go and
// small_kernels_test.go can run those kernels, transcribed to Go, over
// the launches the cuda build makes, without a GPU.

// b2i is 1 for true, 0 for false (kernel flags).
func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// blockSize is the thread count of the elementwise launches.
const blockSize = 256

// grid1D is launch1D's grid over n elements (n > 0) on a device of sms
// multiprocessors: enough blocks of blockSize threads to fill every SM
// several times over, at most one thread per element.
func grid1D(n int64, sms int) int64 {
	blocks := (n + blockSize - 1) / blockSize
	if most := int64(sms) * 8; blocks > most {
		blocks = most
	}
	return blocks
}

// rowThreads is the block size of the row kernels (ROW_THREADS in
// src/softmax.cu and src/reduce.cu; the norms' per-row and per-channel
// launches take it too).
const rowThreads = 256

// Small products with an epilogue run as one gemm_small_f32 launch (a
// thread per element) instead of cuBLAS and the epilogue: F32, no batch,
// K at most gemmSmallK and M·N·K at most gemmSmallMACs (a trainer's tiny
// linear layers, as W1's 4×16 by 16×4), or K at most gemmSmallWarpK and
// M·N at most gemmSmallWide (an encoder of a few dozen features, as W2's
// policy's three: 500×256 outputs of K = 31, where cuBLAS and the
// epilogue were two graph nodes for as many MACs as a thread each).
const (
	gemmSmallK    = 256
	gemmSmallMACs = 1 << 16
	gemmSmallWide = 1 << 20
	// gemmSmallWarpK: past it each element gets a warp
	// (gemm_small_warp_f32), not a thread.
	gemmSmallWarpK = 32
)

// sgdOneBlock is the largest arena IncrementSGDStep updates in one launch
// (sgd_inc_f32, one block of blockSize threads).
const sgdOneBlock = 1 << 14

// clipSmall is the most elements a clip by norm takes in one launch of
// one block of clipSmallThreads threads (clip_small_f32: a small layer's
// arena, where the two-launch path's second launch cost more than the
// arithmetic).
const (
	clipSmall        = 1 << 15
	clipSmallThreads = 1024
)

// ceSmallRows is the most rows whose reduced cross-entropy runs in one
// launch (ce_small: one block, its warps taking the rows in turn); more
// rows take a block each and a reduction launch. A trainer's batch of
// 128 or 256 rows of a few classes is a few rows per warp of a block of
// 1024 threads, quicker than two launches.
const ceSmallRows = 256

// ceSmallElems is the most logits (N·C) one ce_small block takes: past
// it, however few the rows, a block per row and a reduction are quicker
// than one block walking every class.
const ceSmallElems = 1 << 16

// ceSmallFits reports whether a reduced cross-entropy over n rows of c
// classes runs as ce_small's one block.
func ceSmallFits(n, c int) bool { return n <= ceSmallRows && n*c <= ceSmallElems }

// ceSmallThreads is ce_small's block for n rows: a warp per row up to 32
// warps. The loss sums the warps' partials in warp order, so the block
// is a function of n alone (a replay and the eager call agree).
func ceSmallThreads(n int) int { return min(1024, 32*max(1, n)) }

// ceSmallBase is ce_small's entry point before the dtype's suffix:
// ce_small, ce_small_count with the running metrics (lsum non-zero),
// ce_small_count_grad with the logits' gradient too (dx non-zero).
func ceSmallBase(lsum, dx uint64) string {
	switch {
	case dx != 0:
		return "ce_small_count_grad"
	case lsum != 0:
		return "ce_small_count"
	}
	return "ce_small"
}

// ceSmallArgs is ce_small*'s argument block for n rows of c classes:
// loss, the logits x, the targets t (int64 when t64), the loss's
// parameters, then lsum and acc where lsum is non-zero, then dx where it
// is non-zero (one block of ceSmallThreads(n) runs it).
func ceSmallArgs(loss, x, t uint64, t64 bool, n, c int, p kernels.CrossEntropyParams, lsum, acc, dx uint64) *args {
	var a args
	a.addr(loss).addr(x).addr(t).i32(b2i(t64)).i64(int64(n)).i64(int64(c)).f32(float32(p.LabelSmoothing))
	a.i32(b2i(p.HasIgnore)).i64(p.IgnoreIndex).i32(b2i(p.Reduction == kernels.ReduceMean))
	if lsum != 0 {
		a.addr(lsum).addr(acc)
	}
	if dx != 0 {
		a.addr(dx)
	}
	return &a
}

// linearCEFlags packs linear_ce_small_block's flags: ce_small's t64
// (bit 0), has_ignore (bit 1) and mean (bit 2).
func linearCEFlags(t64 bool, p kernels.CrossEntropyParams) int32 {
	return int32(b2i(t64) | b2i(p.HasIgnore)<<1 | b2i(p.Reduction == kernels.ReduceMean)<<2)
}

// linearCESGDFits reports whether LinearCESGDStep runs as one
// linear_ce_sgd_f32 launch (one block of ceSmallThreads(m)) for x [m, k],
// w [n, k] and an arena of np elements: where LinearCrossEntropyCount
// and IncrementSGDStep would each be one launch.
func linearCESGDFits(m, k, n, np int) bool {
	return ceSmallFits(m, n) && k <= gemmSmallK && m*n*k <= gemmSmallMACs && np <= sgdOneBlock
}

// Limits of linear_act_ln_f32: a row's outputs in shared memory (16
// KiB), each summed by one thread over at most lnFusedK products.
const (
	lnFusedN = 4096
	lnFusedK = 64
)

// linearActLNFits reports whether LinearActLayerNorm of n outputs from k
// inputs a row runs as one linear_act_ln_f32 launch.
func linearActLNFits(n, k int) bool { return n <= lnFusedN && k <= lnFusedK }

// linearActLNGeom is linear_act_ln_f32's launch for m rows of n outputs:
// a block of rowThreads threads per row, the row's n outputs in dynamic
// shared memory (bytes).
func linearActLNGeom(m, n int) (grid, block, shmem int) { return m, rowThreads, 4 * n }

// linearBwdSmallFits reports whether LinearBackwardAdd of g [m, n], x
// [m, k] and w [n, k] runs as one linear_bwd_small_f32 launch.
func linearBwdSmallFits(m, n, k int) bool {
	return m <= gemmSmallK && m*n*k <= gemmSmallMACs && m*k <= gemmSmallMACs && n <= gemmSmallK
}

// linearBwdSmallTotal is linear_bwd_small_f32's element count (launch1D's
// n): the n·k weight gradients, the n bias gradients with a bias, and
// the m·k input gradients.
func linearBwdSmallTotal(m, n, k int, bias bool) int64 {
	total := int64(n*k + m*k)
	if bias {
		total += int64(n)
	}
	return total
}

// lnCall is a checked LinearActLayerNorm's launch words (struct LnArgs
// of src/norm.cu): y, x, w, b, g and s's addresses (0: none), the
// activation, n outputs and k inputs a row, eps, its m rows and in (0:
// x is the input, else the launch's gathered input in − 1; x then 0).
type lnCall struct {
	y, x, w, b, g, s uint64
	act, n, k        int64
	eps              float32
	m, in            int64
}

// lnJoin is LN_JOIN: the most LinearActLayerNorms one
// linear_act_ln_join_f32 launch runs, lnIn LN_IN: the most gathered
// inputs it reads; lnArgsWords and lnJoinWords are the sizes of struct
// LnArgs and struct LnJoin in 8-byte words.
const (
	lnJoin      = 4
	lnIn        = 2
	lnArgsWords = 12
	lnJoinWords = 1 + lnJoin*lnArgsWords + lnIn*gatherInWords
)

// lnJoinPack writes struct LnJoin into w for ls (1 to lnJoin calls) and
// ins (at most lnIn gathered inputs, each of 1 to gatherInPieces parts,
// every one in every launch) and returns the launch's rows (a block
// each) and the widest row's dynamic shared memory in floats: n, or n +
// k for a gathered input's call; unused slots are zeroed.
func lnJoinPack(w *[lnJoinWords]uint64, ls []lnCall, ins [][]gatherPart) (rows, widest int64) {
	if len(ls) > lnJoin || len(ins) > lnIn {
		panic(fmt.Sprintf("cuda: a linear_act_ln_join_f32 launch of %d calls and %d gathered inputs, at most %d and %d", len(ls), len(ins), lnJoin, lnIn))
	}
	*w = [lnJoinWords]uint64{}
	w[0] = uint64(len(ls))
	for i, l := range ls {
		o := 1 + i*lnArgsWords
		w[o], w[o+1], w[o+2], w[o+3], w[o+4], w[o+5] = l.y, l.x, l.w, l.b, l.g, l.s
		w[o+6], w[o+7], w[o+8], w[o+9], w[o+10], w[o+11] = uint64(l.act), uint64(l.n), uint64(l.k), uint64(math.Float32bits(l.eps)), uint64(l.m), uint64(l.in)
		rows += l.m
		width := l.n
		if l.in > 0 {
			width += l.k
		}
		widest = max(widest, width)
	}
	for i, parts := range ins {
		o := 1 + lnJoin*lnArgsWords + i*gatherInWords
		gatherInPack(w[o:o+gatherInWords], parts)
	}
	return rows, widest
}
