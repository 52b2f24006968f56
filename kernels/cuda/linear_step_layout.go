package cuda

import (
	"math"

	"github.com/esper-go/esper/kernels"
)

// linearCESGDWords is struct LinearCESGD of src/softmax.cu in 8-byte
// words: linear_ce_sgd_f32's one argument.
const linearCESGDWords = 24

// linearCESmallArgs are the fields of struct LinearCESmall (src/softmax.cu),
// linear_ce_small_f32's arguments in one struct, in its order.
type linearCESmallArgs struct {
	logits, loss, x, w, b, t uint64
	m, n, k                  int64
	eps                      float32
	flags                    int32
	ignore                   int64
	lsum, acc, dx            uint64
}

// words packs a as the struct's words (eps and flags share one, eps in
// the low half).
func (a linearCESmallArgs) words() []uint64 {
	return a.appendTo(make([]uint64, 0, linearCESmallWords))
}

// linearCESmallWords is struct LinearCESmall in 8-byte words.
const linearCESmallWords = 14

// appendTo appends a's words to dst.
func (a linearCESmallArgs) appendTo(dst []uint64) []uint64 {
	return append(dst, a.logits, a.loss, a.x, a.w, a.b, a.t,
		uint64(a.m), uint64(a.n), uint64(a.k),
		uint64(math.Float32bits(a.eps))|uint64(uint32(a.flags))<<32,
		uint64(a.ignore), a.lsum, a.acc, a.dx)
}

// linearCESGDArgs are the fields of struct LinearCESGD (src/softmax.cu),
// in its order: linear_ce_small_f32's arguments (its head, a
// LinearCESmall), the gradients gw and gb, and sgd_inc_f32's over the
// arena.
type linearCESGDArgs struct {
	linearCESmallArgs
	gw, gb                   uint64
	p, g, mom, hyper         uint64
	mu, damp, wd             float32
	nesterov, maximize, zero int32
	np                       int64
}

// words packs a into the struct's words: two 4-byte fields share a word,
// the first in its low half (little-endian, as the device reads it).
func (a linearCESGDArgs) words() []uint64 {
	pair := func(lo, hi uint32) uint64 { return uint64(lo) | uint64(hi)<<32 }
	return append(a.linearCESmallArgs.appendTo(make([]uint64, 0, linearCESGDWords)), a.gw, a.gb,
		a.p, a.g, a.mom, a.hyper,
		pair(math.Float32bits(a.mu), math.Float32bits(a.damp)),
		pair(math.Float32bits(a.wd), uint32(a.nesterov)),
		pair(uint32(a.maximize), uint32(a.zero)),
		uint64(a.np))
}

// linearCESGDScalars is LinearCESGDStep's argument block for x [m, k], w
// [n, k] and an arena of np elements with every address left 0 (the
// launcher sets them): the sizes, the loss's parameters (flags as
// linearCEFlags packs them; t64 when the targets are int64) and the
// step's options (damp = 1 − dampening, as sgd_f32 takes it).
func linearCESGDScalars(m, k, n int, t64 bool, p kernels.CrossEntropyParams, o kernels.SGDOptions, np int) linearCESGDArgs {
	return linearCESGDArgs{
		linearCESmallArgs: linearCESmallArgs{m: int64(m), n: int64(n), k: int64(k), eps: float32(p.LabelSmoothing),
			ignore: p.IgnoreIndex, flags: linearCEFlags(t64, p)},
		mu: float32(o.Momentum), damp: float32(1 - o.Dampening), wd: float32(o.WeightDecay),
		nesterov: b2i(o.Nesterov), maximize: b2i(o.Maximize), zero: b2i(o.ZeroGrad),
		np: int64(np),
	}
}
