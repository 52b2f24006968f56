package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/esper-go/esper/kernels"
)

// block_seq_f32 (src/softmax.cu) transcribed to Go — its loop over the
// steps of struct BlockSeq, each decoded at the byte offsets its C
// struct gives its fields and run as the code of its own launch — and
// run over the argument blocks the Go side packs (blockSeq, as
// Device.deferStep fills and launches it), against the same calls
// launched one by one (linear_ce_sgd_f32, linear_ce_small_f32 and
// ZeroMany's zeroing, each transcribed in its own test): every bit of
// device memory must agree. It runs without a GPU; the conformance suite
// (checkBlockSequence) checks the PTX itself on one.

// lcSmallDecode is struct LinearCESmall (src/softmax.cu) read from its
// words at the byte offsets of its C layout.
func lcSmallDecode(w []uint64) linearCESmallArgs {
	if len(w)*8 != 112 {
		panic(fmt.Sprintf("%d words: struct LinearCESmall is 112 bytes", len(w)))
	}
	u32 := func(off int) uint32 { return uint32(w[off/8] >> (8 * (off % 8))) }
	return linearCESmallArgs{
		logits: structU64(w, 0), loss: structU64(w, 8), x: structU64(w, 16), w: structU64(w, 24), b: structU64(w, 32),
		t: structU64(w, 40), m: int64(structU64(w, 48)), n: int64(structU64(w, 56)), k: int64(structU64(w, 64)),
		eps: structF32(w, 72), flags: int32(u32(76)), ignore: int64(structU64(w, 80)),
		lsum: structU64(w, 88), acc: structU64(w, 96), dx: structU64(w, 104),
	}
}

// blockSeqEmu is block_seq_f32 over its argument (struct BlockSeq's
// words), one block of threads threads.
func blockSeqEmu(mem *devMem, words []uint64, threads int) {
	if len(words)*8 != 4096 {
		panic(fmt.Sprintf("%d words: struct BlockSeq is 4096 bytes", len(words)))
	}
	n, list := int64(words[0]), words[1:]
	at := 0
	for i := int64(0); i < n; i++ {
		head := list[at]
		kind, nw := int(uint32(head)), int(head>>32)
		a := list[at+1 : at+1+nw]
		switch kind {
		case 1: // SEQ_LINEAR_CE_SGD
			linearCESGDEmu(mem, a, threads)
		case 2: // SEQ_LINEAR_CE_SMALL
			linearCESmallBlockEmu(mem, threads, lcSmallDecode(a))
		case 3: // SEQ_ZERO
			for r := uint64(0); r < a[0]; r++ {
				p, words := a[1+2*r], int64(a[2+2*r])
				for tid := int64(0); tid < int64(threads); tid++ {
					for e := tid; e < words; e += int64(threads) {
						mem.st(p, e, 0)
					}
				}
			}
		default:
			panic(fmt.Sprintf("step kind %d", kind))
		}
		// __syncthreads()
		at += 1 + nw
	}
}

// seqCall is one call a sequence may hold back: its step kind, its
// arguments as its own launch takes them and its block.
type seqCall struct {
	kind    int
	sgd     linearCESGDArgs
	small   linearCESmallArgs
	zero    []zeroRange
	threads int
}

// words is the call's step arguments.
func (c seqCall) words() []uint64 {
	switch c.kind {
	case seqLinearCESGD:
		return c.sgd.words()
	case seqLinearCESmall:
		return c.small.words()
	}
	return zeroStepArgs(c.zero)
}

// runAlone runs c as its own launch would.
func (c seqCall) runAlone(mem *devMem) {
	switch c.kind {
	case seqLinearCESGD:
		linearCESGDEmu(mem, c.sgd.words(), c.threads)
	case seqLinearCESmall:
		linearCESmallBlockEmu(mem, c.threads, c.small)
	default:
		for _, r := range c.zero {
			for e := int64(0); e < int64(r.n); e++ {
				mem.st(r.p, e, 0)
			}
		}
	}
}

// runSequenced runs calls as Device.deferStep holds them back and
// launches them: a launch whenever the next does not fit, and one at
// the end. It returns the launches.
func runSequenced(mem *devMem, calls []seqCall) int {
	var s blockSeq
	launches := 0
	launch := func() {
		if !s.empty() {
			blockSeqEmu(mem, s.words(), s.block())
			launches++
			s.reset()
		}
	}
	for _, c := range calls {
		w := c.words()
		if !s.fits(len(w), c.threads) {
			launch()
		}
		s.add(c.kind, w, c.threads)
	}
	launch()
	return launches
}

// seqEpoch builds a small linear model's epoch (a trainer's epoch graph:
// the metrics and gradients zeroed, SGD steps, validation batches read
// straight from the arena's weights) over mem, drawing from seed.
func seqEpoch(mem *devMem, seed int64, k, n int, train, val []int, p kernels.CrossEntropyParams) []seqCall {
	rng := rand.New(rand.NewSource(seed))
	normals := func(c int, s float64) []float32 {
		v := make([]float32, c)
		for i := range v {
			v[i] = float32(s * rng.NormFloat64())
		}
		return v
	}
	nans := func(c int) []float32 {
		v := make([]float32, c)
		for i := range v {
			v[i] = float32(math.NaN())
		}
		return v
	}
	np := n*k + n
	pp, pg, pm := mem.put(normals(np, 0.5), false), mem.put(normals(np, 1), false), mem.put(normals(np, 1), false)
	ph := mem.putF64([]float64{0.05, 0})
	sums := mem.put([]float32{3, 4, 5, 6}, false) // training and validation loss sums and counts
	var calls []seqCall
	calls = append(calls, seqCall{kind: seqZero, zero: []zeroRange{{sums, 4}, {pg, uint64(np)}}})
	accs := map[int]uint64{}
	for i, m := range append(append([]int{}, train...), val...) {
		isTrain := i < len(train)
		x := mem.put(normals(m*k, 1), false)
		tg := make([]int64, m)
		for r := range tg {
			tg[r] = int64(rng.Intn(n))
		}
		if p.HasIgnore && m > 0 {
			tg[0] = p.IgnoreIndex
		}
		pt := mem.putI64(tg)
		key := m
		if !isTrain {
			key = -m
		}
		if _, ok := accs[key]; !ok {
			accs[key] = mem.put(make([]float32, m), false)
		}
		logits, loss := mem.put(nans(m*n), false), mem.put(nans(1), false)
		if isTrain {
			o := kernels.SGDOptions{Momentum: 0.9, ZeroGrad: i < len(train)-1}
			a := linearCESGDScalars(m, k, n, true, p, o, np)
			a.logits, a.loss, a.x, a.w, a.b, a.t = logits, loss, x, pp, pp+4*uint64(n*k), pt
			a.lsum, a.acc, a.dx, a.gw, a.gb = sums, accs[key], mem.put(nans(m*n), false), pg, pg+4*uint64(n*k)
			a.p, a.g, a.mom, a.hyper = pp, pg, pm, ph
			calls = append(calls, seqCall{kind: seqLinearCESGD, sgd: a, threads: ceSmallThreads(m)})
			continue
		}
		calls = append(calls, seqCall{kind: seqLinearCESmall, threads: ceSmallThreads(m), small: linearCESmallArgs{
			logits: logits, loss: loss, x: x, w: pp, b: pp + 4*uint64(n*k), t: pt, m: int64(m), n: int64(n), k: int64(k),
			eps: float32(p.LabelSmoothing), flags: linearCEFlags(true, p), ignore: p.IgnoreIndex, lsum: sums + 8, acc: accs[key]}})
	}
	mem.finish()
	return calls
}

func TestBlockSeqKernelInGo(t *testing.T) {
	if got := ptxParams(t, "softmax.ptx", "block_seq_f32"); len(got) != 1 || got[0] != 8*len(new(blockSeq).words()) {
		t.Fatalf("block_seq_f32's parameters %v bytes; the Go side packs %d", got, 8*len(new(blockSeq).words()))
	}
	if got := ptxParams(t, "softmax.ptx", "block_seq_f32")[0]; got > 4096 {
		t.Fatalf("block_seq_f32 takes %d bytes of parameters, past the 4 KiB a launch takes", got)
	}
	smooth := kernels.CrossEntropyParams{Reduction: kernels.ReduceSum, LabelSmoothing: 0.1}
	ign := kernels.CrossEntropyParams{Reduction: kernels.ReduceMean, HasIgnore: true, IgnoreIndex: 2}
	four := func(n, v int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	cases := []struct {
		name       string
		k, n       int
		train, val []int
		p          kernels.CrossEntropyParams
		launches   int
	}{
		{"W1's epoch", 16, 4, four(4, 4), four(4, 4), kernels.CrossEntropyParams{Reduction: kernels.ReduceSum}, 1},
		{"batch sizes change", 8, 5, []int{4, 40, 40, 3}, []int{40, 4}, smooth, 5},
		{"30 steps", 6, 3, four(30, 6), four(2, 6), ign, 2},
	}
	for _, c := range cases {
		alone, seq := newDevMem(), newDevMem()
		ca := seqEpoch(alone, 7, c.k, c.n, c.train, c.val, c.p)
		cs := seqEpoch(seq, 7, c.k, c.n, c.train, c.val, c.p)
		for _, call := range ca {
			call.runAlone(alone)
		}
		launches := runSequenced(seq, cs)
		if launches != c.launches {
			t.Errorf("%s: %d launches, want %d", c.name, launches, c.launches)
		}
		seq.checkGuards(t, c.name)
		for i := range alone.heap {
			if math.Float32bits(alone.heap[i]) != math.Float32bits(seq.heap[i]) {
				t.Fatalf("%s: word %d is %v in a sequence, %v launched alone", c.name, i, seq.heap[i], alone.heap[i])
			}
		}
		for p, v := range alone.f64 {
			if fmt.Sprint(v) != fmt.Sprint(seq.f64[p]) {
				t.Fatalf("%s: hyper %v in a sequence, %v launched alone", c.name, seq.f64[p], v)
			}
		}
		// Something was computed: the steps counted and no logit left NaN.
		if h := seq.f64[ca[1].sgd.hyper]; h[1] != float64(len(c.train)) {
			t.Errorf("%s: step %v after %d steps", c.name, h[1], len(c.train))
		}
		last := ca[len(ca)-1].small
		for _, v := range seq.view(last.logits, int(last.m*last.n)) {
			if v != v {
				t.Fatalf("%s: a validation logit left unwritten", c.name)
			}
		}
	}
}

// TestBlockSeqPacking: what joins a sequence and what does not.
func TestBlockSeqPacking(t *testing.T) {
	var s blockSeq
	if !s.fits(24, 128) {
		t.Fatal("an empty sequence refuses a step")
	}
	s.add(seqZero, zeroStepArgs([]zeroRange{{0x100, 3}}), 0)
	if s.block() != blockSeqDefaultThreads || !s.fits(24, 1024) {
		t.Fatalf("a zeroing alone fixes the block (%d)", s.block())
	}
	s.add(seqLinearCESGD, make([]uint64, 24), 128)
	if s.block() != 128 || s.fits(14, 1024) || !s.fits(14, 128) || !s.fits(4, 0) {
		t.Fatal("a step of another block joins a sequence")
	}
	for s.fits(24, 128) {
		s.add(seqLinearCESGD, make([]uint64, 24), 128)
	}
	if s.used > blockSeqWords || s.used+25 <= blockSeqWords {
		t.Fatalf("%d words used of %d, and a step of 25 does not fit", s.used, blockSeqWords)
	}
	w := s.words()
	if w[0] != uint64(s.n) || w[1] != uint64(seqZero)|3<<32 {
		t.Fatalf("count %d and first header %#x", w[0], w[1])
	}
	s.reset()
	if !s.empty() || s.block() != blockSeqDefaultThreads || s.words()[1] != 0 {
		t.Fatal("reset left steps")
	}
	if _, ok := zeroRanges([]uint64{0x1002}, []uint64{8}); ok {
		t.Error("a zeroing off 4-byte alignment joins")
	}
	if _, ok := zeroRanges([]uint64{0x1000}, []uint64{6}); ok {
		t.Error("a zeroing of a partial word joins")
	}
	if _, ok := zeroRanges([]uint64{0x1000, 0x9000000}, []uint64{blockSeqZeroBytes, 4}); ok {
		t.Error("a zeroing past blockSeqZeroBytes joins")
	}
	if rs, ok := zeroRanges([]uint64{0x1000, 0x2000, 0x3000}, []uint64{8, 0, 12}); !ok || len(rs) != 2 || rs[1].n != 3 {
		t.Errorf("zeroRanges: %v %v", rs, ok)
	}
}
