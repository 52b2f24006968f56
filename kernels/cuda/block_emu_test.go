package cuda

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// What the transcribed kernels of linear_ce_sgd_kernel_test.go and
// small_kernels_test.go share: device memory in which views alias, the
// warp's xor butterflies, block_sum_t, and fp32 arithmetic as the
// kernels round it. A transcription runs a block phase by phase: every
// thread finishes a phase (the code between two __syncthreads()) before
// any starts the next, and a shuffle reads its partner's value from
// before the butterfly's step.

// Rounded fp32 operations: the kernels' __fadd_rn, __fsub_rn, __fmul_rn
// and __fdiv_rn, never contracted to an fma (the conversion forbids Go
// to fuse them, as _rn forbids nvcc).
func addRN(a, b float32) float32 { return float32(a + b) }
func subRN(a, b float32) float32 { return float32(a - b) }
func mulRN(a, b float32) float32 { return float32(a * b) }
func divRN(a, b float32) float32 { return float32(a / b) }

// fmaxf is CUDA's fmaxf: a NaN operand gives the other (math.Max gives
// NaN).
func fmaxf(a, b float32) float32 {
	switch {
	case a != a:
		return b
	case b != b:
		return a
	case a > b:
		return a
	}
	return b
}

// expf and logf are CUDA's (within their 2 and 1 ulp of these).
func expf(x float32) float32 { return float32(math.Exp(float64(x))) }
func logf(x float32) float32 { return float32(math.Log(float64(x))) }

// rsqrtf is CUDA's rsqrtf (rsqrt.approx, within 2 ulp of this).
func rsqrtf(x float32) float32 { return float32(1 / math.Sqrt(float64(x))) }

// warpSum is a warp's xor butterfly (for (o = 16; o > 0; o >>= 1) v +=
// __shfl_xor_sync(…, v, o)) over the block's lanes v, warp by warp: at
// every step lane l adds lane l^o's value from before the step.
func warpSum[T float32 | float64](v []T) []T {
	if len(v)%32 != 0 {
		panic(fmt.Sprintf("a block of %d threads: not whole warps", len(v)))
	}
	cur := append([]T(nil), v...)
	next := make([]T, len(v))
	for o := 16; o > 0; o >>= 1 {
		for l := range cur {
			next[l] = cur[l] + cur[l^o]
		}
		cur, next = next, cur
	}
	return cur
}

// warpMax is warpSum with fmaxf for the sum (ce_warp_max, block_max).
func warpMax(v []float32) []float32 {
	cur := append([]float32(nil), v...)
	next := make([]float32, len(v))
	for o := 16; o > 0; o >>= 1 {
		for l := range cur {
			next[l] = fmaxf(cur[l], cur[l^o])
		}
		cur, next = next, cur
	}
	return cur
}

// blockSumEmu is block_sum_t (common.cuh) over a block whose thread t
// holds v[t]: each warp's butterfly; a barrier; lane 0 of warp w writes
// part[w] (part is the block's static __shared__ T part[32], kept from
// call to call as on the device, NaN before its first write); a
// barrier; lane l reads part[l] below the warp count, else 0; the
// butterfly again. It returns every thread's result.
func blockSumEmu[T float32 | float64](v []T, part *[32]T) []T {
	v = warpSum(v)
	warps := len(v) >> 5
	if warps > 32 {
		panic("more than 32 warps")
	}
	for w := 0; w < warps; w++ {
		part[w] = v[w*32]
	}
	r := make([]T, len(v))
	for t := range r {
		if lane := t & 31; lane < warps {
			r[t] = part[lane]
		}
	}
	return warpSum(r)
}

// nanPart is a block's static shared part[32] before any write.
func nanPart[T float32 | float64]() *[32]T {
	var p [32]T
	for i := range p {
		p[i] = T(math.NaN())
	}
	return &p
}

// devMem is device memory for the transcriptions: fp32 buffers in one
// heap whose addresses are byte offsets from heapBase, so that a view
// (an arena's weight, its gradient) aliases its buffer as on the device;
// 16-byte aligned unless asked otherwise, with guard words (NaN) between
// them, so that a stray read gives NaN and a stray write is counted on a
// guard. writes counts every store to each word. fp64 buffers (hyper)
// and targets live at addresses of their own.
type devMem struct {
	heap   []float32
	writes []int
	guard  []bool
	f64    map[uint64][]float64
	i64    map[uint64][]int64
	i32    map[uint64][]int32
	other  uint64
}

const (
	heapBase   = 0x10000
	guardWords = 8
)

func newDevMem() *devMem {
	return &devMem{f64: map[uint64][]float64{}, i64: map[uint64][]int64{}, i32: map[uint64][]int32{}, other: 1 << 40}
}

// put allocates a buffer holding vals (16-byte aligned, or 4 bytes past
// an aligned address with misalign) and returns its address.
func (m *devMem) put(vals []float32, misalign bool) uint64 {
	pad := func() {
		m.heap = append(m.heap, float32(math.NaN()))
		m.writes = append(m.writes, 0)
		m.guard = append(m.guard, true)
	}
	for range guardWords {
		pad()
	}
	for len(m.heap)%4 != 0 {
		pad()
	}
	if misalign {
		pad()
	}
	p := heapBase + 4*uint64(len(m.heap))
	m.heap = append(m.heap, vals...)
	m.writes = append(m.writes, make([]int, len(vals))...)
	m.guard = append(m.guard, make([]bool, len(vals))...)
	return p
}

// finish adds the last guard words.
func (m *devMem) finish() { m.put(nil, false) }

func (m *devMem) putF64(v []float64) uint64 { m.other += 4096; m.f64[m.other] = v; return m.other }
func (m *devMem) putI64(v []int64) uint64   { m.other += 4096; m.i64[m.other] = v; return m.other }
func (m *devMem) putI32(v []int32) uint64   { m.other += 4096; m.i32[m.other] = v; return m.other }

// at is the heap index of element i of the fp32 buffer at p.
func (m *devMem) at(p uint64, i int64) int {
	if p < heapBase || (p-heapBase)%4 != 0 {
		panic(fmt.Sprintf("no fp32 buffer at %#x", p))
	}
	return int((p-heapBase)/4) + int(i)
}

// ld reads element i of the fp32 buffer at p; a read outside every
// buffer (a guard word) panics, as a transcribed kernel must not make it.
func (m *devMem) ld(p uint64, i int64) float32 {
	k := m.at(p, i)
	if m.guard[k] {
		panic(fmt.Sprintf("a load outside every buffer: element %d of the buffer at %#x (heap word %d)", i, p, k))
	}
	return m.heap[k]
}

func (m *devMem) st(p uint64, i int64, v float32) {
	k := m.at(p, i)
	m.heap[k] = v
	m.writes[k]++
}

// view is the n floats at p (a copy).
func (m *devMem) view(p uint64, n int) []float32 {
	k := m.at(p, 0)
	return append([]float32(nil), m.heap[k:k+n]...)
}

// writesAt is the write counts of the n floats at p.
func (m *devMem) writesAt(p uint64, n int) []int {
	k := m.at(p, 0)
	return m.writes[k : k+n]
}

// checkGuards fails if a store landed on a guard word.
func (m *devMem) checkGuards(t *testing.T, what string) {
	t.Helper()
	for k, g := range m.guard {
		if g && m.writes[k] != 0 {
			t.Fatalf("%s: a store landed outside every buffer (heap word %d)", what, k)
		}
	}
}

// unaryF is unary_f (common.cuh) in fp32, its library functions within
// an ulp or two of CUDA's.
func unaryF(op int32, x float32) float32 {
	f := func(g func(float64) float64) float32 { return float32(g(float64(x))) }
	switch op {
	case 0:
		return -x
	case 1:
		return float32(math.Abs(float64(x)))
	case 2:
		return expf(x)
	case 3:
		return logf(x)
	case 4:
		return f(math.Sqrt)
	case 5:
		return rsqrtf(x)
	case 6:
		return x * x
	case 7:
		return 1 / x
	case 8:
		if x > 0 {
			return 1
		}
		if x < 0 {
			return -1
		}
		return x
	case 9:
		if x > 0 || x != x {
			return x
		}
		return 0
	case 10:
		const k = float32(0.7978845608028654)
		return 0.5 * x * (1 + float32(math.Tanh(float64(k*(x+0.044715*x*x*x)))))
	case 11:
		return 0.5 * x * (1 + float32(math.Erf(float64(x*0.7071067811865476))))
	case 12:
		return x / (1 + expf(-x))
	case 13:
		return 1 / (1 + expf(-x))
	case 14:
		return f(math.Tanh)
	case 15:
		if x > 20 {
			return x
		}
		return float32(math.Log1p(math.Exp(float64(x))))
	}
	return x
}

// unary64 is the activation op in fp64: the references' definition.
func unary64(op int32, x float64) float64 {
	switch op {
	case 0:
		return -x
	case 1:
		return math.Abs(x)
	case 2:
		return math.Exp(x)
	case 6:
		return x * x
	case 8:
		if x > 0 {
			return 1
		}
		if x < 0 {
			return -1
		}
		return x
	case 9:
		return math.Max(x, 0)
	case 10:
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	case 11:
		return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
	case 12:
		return x / (1 + math.Exp(-x))
	case 13:
		return 1 / (1 + math.Exp(-x))
	case 14:
		return math.Tanh(x)
	case 15:
		if x > 20 {
			return x
		}
		return math.Log1p(math.Exp(x))
	}
	panic(fmt.Sprintf("unary64: op %d has no reference here", op))
}

// near reports whether got is want within rel of its scale (1 + |want|,
// or scale when larger: the sum of the terms' magnitudes), NaN only
// where want is NaN.
func near(got float32, want, scale, rel float64) bool {
	if math.IsNaN(want) {
		return got != got
	}
	if math.IsInf(want, 0) {
		return float64(got) == want
	}
	if scale != scale {
		scale = 0 // the terms held a NaN that want does not
	}
	return math.Abs(float64(got)-want) <= rel*math.Max(1+math.Abs(want), scale)
}

// sqrtRN is sqrtf as nvcc compiles it without fast math (sqrt.rn: the
// float64 root of a float32 rounds to the float32 one correctly).
func sqrtRN(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// shflDown is one step of __shfl_down_sync(0xffffffff, v, o) over a
// warp's 32 lanes: lane l reads lane l+o's value from before the step,
// or its own where l+o is past the warp.
func shflDown[T any](v *[32]T, o int) [32]T {
	var r [32]T
	for l := range r {
		if l+o < 32 {
			r[l] = v[l+o]
		} else {
			r[l] = v[l]
		}
	}
	return r
}

// lastBlockEmu is last_block (common.cuh) for a block run whole before
// the next one starts (the order the test picks): thread 0's atomicAdd
// on the int32 counters[g] and whether it returned total−1. In such a
// serial run the fences and barriers order nothing more: every block
// counted before has written its partial.
func lastBlockEmu(mem *devMem, counters uint64, g int64, total int) bool {
	cs := mem.i32[counters]
	old := cs[g]
	cs[g]++
	return old == int32(total-1)
}

// blockOrder is the order in which a transcribed launch runs its blocks
// (indices bx + gx·by): nil is launch order.
func blockOrder(order []int, blocks int) []int {
	if order == nil {
		order = make([]int, blocks)
		for i := range order {
			order[i] = i
		}
	}
	if len(order) != blocks {
		panic(fmt.Sprintf("an order of %d blocks for a grid of %d", len(order), blocks))
	}
	return order
}

// ptxParams returns kernel's parameters in ptx/file, each one's byte
// size as the PTX declares it (a struct passed by value: its .b8 array).
func ptxParams(t *testing.T, file, kernel string) []int {
	t.Helper()
	ptxParamsMu.Lock()
	defer ptxParamsMu.Unlock()
	key := file + ":" + kernel
	if p, ok := ptxParamsSeen[key]; ok {
		return p
	}
	m := regexp.MustCompile(`\.visible \.entry ` + kernel + `\(([^)]*)\)`).FindSubmatch(readPTX(t, file))
	if m == nil {
		t.Fatalf("%s: no entry in ptx/%s", kernel, file)
	}
	var sizes []int
	for _, p := range regexp.MustCompile(`\.param ([^\n,]*)`).FindAllSubmatch(m[1], -1) {
		decl := string(p[1])
		if s := regexp.MustCompile(`\.b8 \w+\[(\d+)\]`).FindStringSubmatch(decl); s != nil {
			n, _ := strconv.Atoi(s[1])
			sizes = append(sizes, n)
			continue
		}
		switch strings.Fields(decl)[0] {
		case ".u64", ".s64", ".b64", ".f64":
			sizes = append(sizes, 8)
		case ".u32", ".s32", ".b32", ".f32":
			sizes = append(sizes, 4)
		default:
			t.Fatalf("%s: parameter %q of no size known here", kernel, decl)
		}
	}
	ptxParamsSeen[key] = sizes
	return sizes
}

// ptxParamsSeen caches ptxParams (a PTX file is read and searched once
// per kernel).
var (
	ptxParamsMu   sync.Mutex
	ptxParamsSeen = map[string][]int{}
)

// argWords returns argument i's words of a launch's argument block.
func argWords(a *args, i int) []uint64 {
	if i >= a.n {
		panic(fmt.Sprintf("argument %d of %d", i, a.n))
	}
	end := a.w
	if i+1 < a.n {
		end = int(a.off[i+1])
	}
	return a.v[a.off[i]:end]
}

// checkArgsPTX fails unless the argument block a is kernel's parameter
// list one for one, as the driver reads it: as many arguments as
// parameters, a scalar one word (a 4-byte one with nothing in its high
// half), a struct as many words as its bytes fill.
func checkArgsPTX(t *testing.T, file, kernel string, a *args) {
	t.Helper()
	sizes := ptxParams(t, file, kernel)
	if a.n != len(sizes) {
		t.Fatalf("%s: %d arguments for %d parameters", kernel, a.n, len(sizes))
	}
	for i, sz := range sizes {
		w := argWords(a, i)
		switch {
		case sz <= 8 && len(w) != 1, sz > 8 && 8*len(w) != sz:
			t.Fatalf("%s: argument %d is %d words, its parameter %d bytes", kernel, i, len(w), sz)
		case sz == 4 && w[0]>>32 != 0:
			t.Fatalf("%s: argument %d (4 bytes) is %#x", kernel, i, w[0])
		}
	}
}

// Argument i of a read as the kernel's parameter type.
func argU64(a *args, i int) uint64  { return argWords(a, i)[0] }
func argI64(a *args, i int) int64   { return int64(argWords(a, i)[0]) }
func argI32(a *args, i int) int32   { return int32(uint32(argWords(a, i)[0])) }
func argF32(a *args, i int) float32 { return math.Float32frombits(uint32(argWords(a, i)[0])) }

// structU64 and structF32 read a by-value struct's field at byte offset
// off from its words (little-endian, as the device reads them).
func structU64(w []uint64, off int) uint64 {
	if off%8 != 0 {
		panic("an 8-byte field off its alignment")
	}
	return w[off/8]
}

func structF32(w []uint64, off int) float32 {
	return math.Float32frombits(uint32(w[off/8] >> (8 * (off % 8))))
}

// edgeAt is common.cuh's edge_at: the id of a CSR's p-th edge in
// destination order, order[p], or p itself for a null order (nil here).
func edgeAt(order []int64, p int64) int64 {
	if order == nil {
		return p
	}
	return order[p]
}
