package cuda

import (
	"math"
	"math/rand"
	"testing"

	"github.com/esper-go/esper/kernels"
)

// TestGraphParamBlocksMatchThePTX: the Go parameter blocks of
// gat_mean_f32, gather_concat_f32 and gather_sum_f32 have the byte sizes the compiled
// kernels declare for their one parameter, so that a launch hands every
// word where the kernel reads it (checked without a GPU, on the PTX).
func TestGraphParamBlocksMatchThePTX(t *testing.T) {
	b := readPTX(t, "graph.ptx")
	for _, k := range []struct {
		name  string
		words int
		ptx   string
	}{{"gat_mean_f32", gatMultiWords, "graph.ptx"}, {"gather_concat_f32", gatherCatWords, "graph.ptx"}, {"gather_sum_f32", gsumWords, "graph.ptx"},
		{"gather_sum_join_f32", gsumJoinWords, "graph.ptx"}, {"gat_mean_join_f32", gatJoinWords, "graph.ptx"}, {"gat_mean_grad_f32", ggWords, "graph_grad.ptx"}} {
		b := b
		if k.ptx != "graph.ptx" {
			b = readPTX(t, k.ptx)
		}
		n, ok := ptxStructParam(b, k.name)
		if !ok {
			t.Errorf("%s: no entry with one by-value parameter in ptx/graph.ptx", k.name)
			continue
		}
		if n != 8*k.words {
			t.Errorf("%s: the PTX's parameter is %d bytes, the Go block %d", k.name, n, 8*k.words)
		}
		if n > 4096 {
			t.Errorf("%s: %d bytes of parameters, past the driver's 4 KiB", k.name, n)
		}
	}
}

// TestGraphPacks: the words land where struct GatMulti and struct
// GatherCat (src/graph.cu) read them.
func TestGraphPacks(t *testing.T) {
	var g [gatMultiWords]uint64
	rels := []gatRel{{lds: 3, ldd: 4, f: 5}, {lds: 6, ldd: 7, f: 8}}
	for i := range rels[1].ptrs {
		rels[1].ptrs[i] = uint64(100 + i)
	}
	gatMultiPack(&g, 42, 9, 4, 128, 0.2, 0.5, 8, gatTail{out: 51, res: 52, counters: 53, act: -1}, rels)
	want := map[int]uint64{0: 42, 1: 2, 2: 9, 3: 4, 4: 128, 5: math.Float64bits(0.2), 6: math.Float64bits(0.5), 7: 8,
		8: 51, 9: 52, 10: 53, 11: math.MaxUint64,
		12 + 11: 3, 12 + 12: 4, 12 + 13: 5, 26: 100, 26 + 10: 110, 26 + 11: 6, 26 + 12: 7, 26 + 13: 8, 40: 0}
	for i, v := range want {
		if g[i] != v {
			t.Errorf("GatMulti word %d = %d, want %d", i, g[i], v)
		}
	}
	var c [gatherCatWords]uint64
	width := gatherCatPack(&c, 7, 11, 40, []gatherPart{{x: 1, src: 2, rowPtr: 3, order: 4, w: 16, col: 0, kind: gatherMean},
		{x: 5, w: 20, col: 16, kind: gatherCopy}, {w: 2, col: 38, kind: gatherOnes}})
	if width != 38 {
		t.Errorf("local width %d, want 38", width)
	}
	want = map[int]uint64{0: 7, 1: 11, 2: 40, 3: 38, 4: 3, 5: 1, 6: 2, 7: 3, 8: 4, 9: 16, 10: 0, 11: 0, 12: gatherMean,
		13: 5, 17: 20, 18: 16, 19: 16, 20: gatherCopy, 25: 2, 26: 38, 27: 36, 28: gatherOnes, 29: 0}
	for i, v := range want {
		if c[i] != v {
			t.Errorf("GatherCat word %d = %d, want %d", i, c[i], v)
		}
	}
}

// gatherMem is device memory for gatherRun: float and index buffers at
// fake addresses.
type gatherMem struct {
	f map[uint64][]float32
	i map[uint64][]int64
}

// gatherAlloc hands out a gatherMem's fake addresses, 4 KiB apart.
type gatherAlloc struct {
	gatherMem
	next uint64
}

func newGatherAlloc() *gatherAlloc {
	return &gatherAlloc{gatherMem: gatherMem{f: map[uint64][]float32{}, i: map[uint64][]int64{}}, next: 0x1000}
}

func (a *gatherAlloc) putF(f []float32) uint64 { a.next += 0x1000; a.f[a.next] = f; return a.next }
func (a *gatherAlloc) putI(i []int64) uint64   { a.next += 0x1000; a.i[a.next] = i; return a.next }

// normals32 returns n draws of N(0, s²) from rng.
func normals32(rng *rand.Rand, n int, s float64) []float32 {
	f := make([]float32, n)
	for e := range f {
		f[e] = float32(s * rng.NormFloat64())
	}
	return f
}

// csrWithoutNode1 draws up to e edges from ns sources into every one of
// nd nodes but node 1 (left without edges) and returns their sources and
// CSR (kernels.BuildCSR's row pointers and order).
func csrWithoutNode1(t *testing.T, rng *rand.Rand, ns, nd, e int) (src, rowPtr, order []int64) {
	t.Helper()
	var dst []int64
	for k := 0; k < e; k++ {
		d := int64(rng.Intn(nd))
		if d == 1 {
			continue
		}
		src, dst = append(src, int64(rng.Intn(ns))), append(dst, d)
	}
	rowPtr, order, err := kernels.BuildCSR(dst, nd)
	if err != nil {
		t.Fatal(err)
	}
	return src, rowPtr, order
}

// gatherRun is gather_concat_f32 of src/graph.cu in Go: it decodes the
// words of struct GatherCat as the kernel does and writes every element
// of its launch into out (the buffer at the out address).
func gatherRun(w *[gatherCatWords]uint64, m gatherMem) {
	out := m.f[w[0]]
	nd, ldo, width := int64(w[1]), int64(w[2]), int64(w[3])
	x := func(p uint64, e int64) float32 { return m.f[p][e] }
	ints := func(p uint64) []int64 { return m.i[p] }
	for q := int64(0); q < nd*width; q++ {
		i, j := q/width, q%width
		g := gatherPartOf(w[4:], j) // w[4] is the part count, the parts follow
		col, f := int64(g[5]), j-int64(g[6])
		out[i*ldo+col+f] = gatherPartAt(g, x, ints, i, f)
	}
}

// TestGatherConcatPlanDrivesTheKernel: a GatherConcat of more pieces
// than a launch takes (means over CSRs with empty rows, copies, a piece
// of no columns, ones), planned by gatherPlan and packed by
// gatherCatPack in launches of at most gatherMax parts, then run as the
// kernel runs them, writes every element of out as the definition says.
// It runs without a GPU.
func TestGatherConcatPlanDrivesTheKernel(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	const nd, ones = 5, 2
	m := gatherMem{f: map[uint64][]float32{}, i: map[uint64][]int64{}}
	next := uint64(0x1000)
	put := func(f []float32, i []int64) uint64 {
		next += 0x1000
		if f != nil {
			m.f[next] = f
		} else {
			m.i[next] = i
		}
		return next
	}
	var pieces []kernels.GatherBlock
	var xs, src, rowPtr, order []uint64
	var want [][]float32 // per piece, [nd][w] row-major
	col := 0
	for k := 0; k < 2*gatherMax+3; k++ {
		w := 1 + rng.Intn(4)
		if k == 5 {
			w = 0 // a piece of no columns
		}
		p := kernels.GatherBlock{Col: col, Width: w, Gathered: k%2 == 0}
		block := make([]float32, nd*w)
		if p.Gathered {
			ns := 1 + rng.Intn(6)
			x := make([]float32, ns*w)
			for e := range x {
				x[e] = float32(rng.NormFloat64())
			}
			s, rp, ord := csrWithoutNode1(t, rng, ns, nd, 3*nd)
			for i := 0; i < nd; i++ {
				a, b := rp[i], rp[i+1]
				for f := 0; f < w && b > a; f++ {
					acc := x[s[ord[a]]*int64(w)+int64(f)]
					for e := a + 1; e < b; e++ {
						acc += x[s[ord[e]]*int64(w)+int64(f)]
					}
					block[i*w+f] = acc * (1 / float32(b-a))
				}
			}
			xs, src, rowPtr, order = append(xs, put(x, nil)), append(src, put(nil, s)), append(rowPtr, put(nil, rp)), append(order, put(nil, ord))
		} else {
			for e := range block {
				block[e] = float32(rng.NormFloat64())
			}
			xs, src, rowPtr, order = append(xs, put(block, nil)), append(src, 0), append(rowPtr, 0), append(order, 0)
		}
		pieces, want = append(pieces, p), append(want, block)
		col += w
	}
	width := col + ones
	out := make([]float32, nd*width)
	for e := range out {
		out[e] = float32(math.NaN()) // every element must be written
	}
	outAddr := put(out, nil)
	parts := gatherPlan(pieces, xs, src, rowPtr, order, ones, width)
	if len(parts) != len(pieces) { // one piece empty, the ones added
		t.Fatalf("%d parts for %d pieces", len(parts), len(pieces))
	}
	var w [gatherCatWords]uint64
	launches := 0
	for start := 0; start < len(parts); start += gatherMax {
		gatherCatPack(&w, outAddr, nd, int64(width), parts[start:min(len(parts), start+gatherMax)])
		gatherRun(&w, m)
		launches++
	}
	if launches < 3 {
		t.Fatalf("%d launches: the case should take three", launches)
	}
	for i := 0; i < nd; i++ {
		for k, p := range pieces {
			for f := 0; f < p.Width; f++ {
				if got, w := out[i*width+p.Col+f], want[k][i*p.Width+f]; got != w {
					t.Fatalf("node %d piece %d column %d: %v, want %v", i, k, f, got, w)
				}
			}
		}
		for j := width - ones; j < width; j++ {
			if out[i*width+j] != 1 {
				t.Fatalf("node %d ones column %d: %v", i, j, out[i*width+j])
			}
		}
	}
}

// TestGatMeanScratchCovers: Device.GATMean's launches of at most
// gatMaxRels relations, packed by gatMultiPack, have gat_mean_f32 write
// every relation's results once, at scratch + relation·nd·c (block row
// y of a launch is relation relBase + y), which gat_combine_f32 then
// reads in relation order. It runs without a GPU.
func TestGatMeanScratchCovers(t *testing.T) {
	const nd, c, r = 3, 4, 2*gatMaxRels + 3
	writes := make([]int, r*nd*c)
	rels := make([]gatRel, r)
	for k := range rels {
		rels[k].f = int64(k) // tells the relations apart
	}
	var w [gatMultiWords]uint64
	launches := 0
	for start := 0; start < r; start += gatMaxRels {
		end := min(r, start+gatMaxRels)
		gatMultiPack(&w, 0, nd, 2, c, 0.2, 1/float64(r), int64(start), gatTail{}, rels[start:end])
		launches++
		nrel, relBase := int64(w[1]), int64(w[7])
		for y := int64(0); y < nrel; y++ {
			if f := int64(w[12+gatRelWords*y+13]); f != relBase+y {
				t.Fatalf("launch %d row %d carries relation %d, want %d", launches, y, f, relBase+y)
			}
			for q := int64(0); q < nd*c; q++ {
				writes[(relBase+y)*nd*c+q]++
			}
		}
	}
	if launches != 3 {
		t.Fatalf("%d launches for %d relations", launches, r)
	}
	for q, n := range writes {
		if n != 1 {
			t.Fatalf("scratch element %d written %d times", q, n)
		}
	}
}

// gatJoinRoute is gat_mean_join_f32's (and gat_mean_join_warp_f32's)
// routing of grid row y over the words w: the mean k, its relation r
// and the mean's GatMulti words.
func gatJoinRoute(w *[gatJoinWords]uint64, y int) (k, r int, m []uint64) {
	n := int(w[0])
	for k+1 < n && y >= int(w[1+k]) {
		k++
	}
	r = y
	if k > 0 {
		r = y - int(w[k])
	}
	return k, r, w[1+gatJoin+k*gatMultiWords : 1+gatJoin+(k+1)*gatMultiWords]
}

// TestGatJoinPackAndRouting: gatJoinPack writes each mean's GatMulti as
// gatMultiPack does for its own tailed launch (relBase 0, its scratch
// and counters), the running ends of their relations, and a grid whose
// blocks, routed as gat_mean_join_f32 routes them (mean k and relation r
// from y, nothing to do past the mean's relations or nodes, nodes
// strided by gridDim.x), run every (mean, relation, node) exactly once,
// also for a mean of more nodes than a grid row takes. It runs without a
// GPU.
func TestGatJoinPackAndRouting(t *testing.T) {
	rel := func(n int) []gatRel {
		rs := make([]gatRel, n)
		for r := range rs {
			rs[r] = gatRel{lds: int64(10 + r), ldd: int64(20 + r), f: 3}
			for k := range rs[r].ptrs {
				rs[r].ptrs[k] = uint64(1000*n + 10*r + k)
			}
		}
		return rs
	}
	calls := []gatCall{
		{out: 1, res: 2, nd: 64, heads: 4, c: 128, slope: 0.2, alpha: 0.5, act: int64(kernels.GeluErf), rels: rel(2)},
		{out: 3, nd: 192, heads: 4, c: 128, slope: 0.2, alpha: 0.25, act: int64(kernels.GeluErf), rels: rel(4)},
		{out: 5, res: 6, nd: gatMaxBlocks + 5, heads: 4, c: 128, slope: 0.2, alpha: 1.0 / 3, act: int64(kernels.GeluErf), rels: rel(3)},
	}
	ps := make([]gatJoinPart, len(calls))
	for k, g := range calls {
		ps[k] = gatJoinPart{g: g, scratch: uint64(0x10000 * (k + 1)), counters: uint64(0x100 * (k + 1))}
	}
	var w [gatJoinWords]uint64
	gx, gy := gatJoinPack(&w, ps)
	if gx != gatMaxBlocks || gy != 2+4+3 {
		t.Fatalf("grid (%d, %d), want (%d, 9)", gx, gy, gatMaxBlocks)
	}
	if w[0] != 3 || w[1] != 2 || w[2] != 6 || w[3] != 9 || w[4] != 0 {
		t.Fatalf("count and ends %v, want 3 and 2, 6, 9, 0", w[:5])
	}
	for k, p := range ps {
		var m [gatMultiWords]uint64
		gatMultiPack(&m, p.scratch, p.g.nd, p.g.heads, p.g.c, p.g.slope, p.g.alpha, 0,
			gatTail{out: p.g.out, res: p.g.res, counters: p.counters, act: p.g.act}, p.g.rels)
		got := w[1+gatJoin+k*gatMultiWords : 1+gatJoin+(k+1)*gatMultiWords]
		for i := range m {
			if got[i] != m[i] {
				t.Fatalf("mean %d word %d = %d, want %d", k, i, got[i], m[i])
			}
		}
	}
	for i := 1 + gatJoin + len(ps)*gatMultiWords; i < gatJoinWords; i++ {
		if w[i] != 0 {
			t.Fatalf("unused word %d = %d", i, w[i])
		}
	}
	// The routing, as the kernel runs it, over a smaller grid row so
	// that the loop ends: the third mean's nodes, more than gx, take
	// the stride.
	const small = 50
	visits := map[[3]int64]int{}
	for x := int64(0); x < small; x++ {
		for y := int64(0); y < int64(gy); y++ {
			k, r, m := gatJoinRoute(&w, int(y))
			nrel, nd := int64(m[1]), int64(m[2])
			if int64(r) >= nrel || x >= nd {
				continue
			}
			for i := x; i < min(nd, 3*small); i += small { // gat_relation's node loop, cut short
				visits[[3]int64{int64(k), int64(r), i}]++
			}
		}
	}
	for k, g := range calls {
		for r := range g.rels {
			for i := int64(0); i < min(g.nd, 3*small); i++ {
				if v := visits[[3]int64{int64(k), int64(r), i}]; v != 1 {
					t.Fatalf("mean %d relation %d node %d run %d times", k, r, i, v)
				}
			}
		}
	}
	if want := 2*64 + 4*3*small + 3*3*small; len(visits) != want {
		t.Fatalf("%d (mean, relation, node) runs, want %d", len(visits), want)
	}
}

// gsumRun is gather_sum_f32 of src/graph.cu in Go: it decodes the words
// of struct GatherSumArgs as the kernel does and writes every element of
// out (the buffer at the out address); act applies unary_f's code.
func gsumRun(w *[gsumWords]uint64, m gatherMem, act func(code int64, v float32) float32) {
	for q := int64(0); q < int64(w[2])*int64(w[3]); q++ {
		gsumAt(w[:], m, act, q)
	}
}

// gsumAt is gather_sum_at: element q of the sum whose struct
// GatherSumArgs is w.
func gsumAt(w []uint64, m gatherMem, act func(code int64, v float32) float32, q int64) {
	out, res := m.f[w[0]], m.f[w[1]]
	c, nt := int64(w[3]), int64(w[4])
	scale, code, accumulate := math.Float64frombits(w[5]), int64(w[6]), w[7] != 0
	i, f := q/c, q%c
	var v float32
	if accumulate {
		v = out[q]
	}
	for k := int64(0); k < nt; k++ {
		o := 8 + gsumTermWords*k
		x, ld := m.f[w[o]], int64(w[o+4])
		var t float32
		if w[o+1] != 0 {
			t = gatherMeanAtEmu(gsumTermEmu{x: x, src: m.i[w[o+1]], rowPtr: m.i[w[o+2]], order: m.i[w[o+3]], ld: ld}, i, f)
		} else {
			t = x[i*ld+f]
		}
		v += t
	}
	if code >= 0 {
		if scale != 1 {
			v *= float32(scale)
		}
		v = act(code, v)
		if res != nil {
			v += res[q]
		}
	}
	out[q] = v
}

// gsumJoinRun is gather_sum_join_f32 in Go: one pass over the joined
// range, element q routed to its sum as the kernel routes it.
func gsumJoinRun(w *[gsumJoinWords]uint64, m gatherMem, act func(code int64, v float32) float32) {
	n := int(w[0])
	end := func(k int) int64 { return int64(w[1+k]) }
	for q := int64(0); q < end(n-1); q++ {
		k := 0
		for k+1 < n && q >= end(k) {
			k++
		}
		local := q
		if k > 0 {
			local = q - end(k-1)
		}
		gsumAt(w[1+gsumJoin+k*gsumWords:1+gsumJoin+(k+1)*gsumWords], m, act, local)
	}
}

// TestGatherSumJoinEqualsItsSums: sums of different shapes (gathered
// pieces, own rows, biases, a residual or none, one of no terms), joined
// by gsumJoinPack and run as gather_sum_join_f32 runs them, write every
// output bit for bit as each sum's own gather_sum_f32 launch does, and
// nothing else. It runs without a GPU.
func TestGatherSumJoinEqualsItsSums(t *testing.T) {
	rng := rand.New(rand.NewSource(17))
	a := newGatherAlloc()
	m, putF, putI := a.gatherMem, a.putF, a.putI
	randF := func(n int) []float32 { return normals32(rng, n, 1) }
	gelu := func(code int64, v float32) float32 { return v * float32(0.5*(1+math.Erf(float64(v)/math.Sqrt2))) }
	shapes := []struct{ nd, c, gathered, own, biases int }{{4, 3, 2, 1, 1}, {7, 5, 3, 2, 2}, {1, 8, 1, 0, 0}, {3, 2, 0, 0, 0}}
	var gs []gsumCall
	for k, sh := range shapes {
		g := gsumCall{nd: int64(sh.nd), c: int64(sh.c), scale: 1 / float64(k+1), act: int64(kernels.GeluErf)}
		for range sh.gathered {
			ns := 1 + rng.Intn(4)
			s, rp, ord := csrWithoutNode1(t, rng, ns, sh.nd, 2*sh.nd)
			g.terms = append(g.terms, gsumTerm{x: putF(randF(ns * sh.c)), src: putI(s), rowPtr: putI(rp), order: putI(ord), ld: int64(sh.c)})
		}
		for range sh.own {
			ld := 2*sh.c + 1
			g.terms = append(g.terms, gsumTerm{x: putF(randF(sh.nd * ld)), ld: int64(ld)})
		}
		for range sh.biases {
			g.terms = append(g.terms, gsumTerm{x: putF(randF(sh.c))})
		}
		if k%2 == 0 {
			g.res = putF(randF(sh.nd * sh.c))
		}
		gs = append(gs, g)
	}
	// Each sum on its own, into outputs A; then joined, into outputs B
	// (NaN first: every element must be written).
	outs := make([][2]uint64, len(gs))
	for k, g := range gs {
		a, b := make([]float32, g.nd*g.c), make([]float32, g.nd*g.c)
		for e := range b {
			b[e] = float32(math.NaN())
		}
		outs[k] = [2]uint64{putF(a), putF(b)}
		g.out = outs[k][0]
		var w [gsumWords]uint64
		ls := gsumPlan(g.terms, g.act)
		if len(ls) != 1 {
			t.Fatalf("sum %d: %d launches, want 1", k, len(ls))
		}
		gsumPack(&w, g.out, g.res, g.nd, g.c, g.scale, ls[0])
		gsumRun(&w, m, gelu)
		gs[k].out = outs[k][1]
	}
	var w [gsumJoinWords]uint64
	n := gsumJoinPack(&w, gs)
	if want := int64(4*3 + 7*5 + 1*8 + 3*2); n != want {
		t.Fatalf("joined range %d, want %d", n, want)
	}
	gsumJoinRun(&w, m, gelu)
	for k := range gs {
		a, b := m.f[outs[k][0]], m.f[outs[k][1]]
		for e := range a {
			if math.Float32bits(a[e]) != math.Float32bits(b[e]) {
				t.Fatalf("sum %d element %d: joined %v, alone %v", k, e, b[e], a[e])
			}
		}
	}
}

// TestGatherSumPlanDrivesTheKernel: a GatherSum of more terms than a
// launch takes (gathered pieces over CSRs with an empty row, some of
// them column blocks of a wider product, pieces of the node's own rows,
// biases), split by gsumPlan and packed by gsumPack, then run as the
// kernel runs them, writes every element of out as the definition says
// within fp32 rounding, and a sum of no terms is one launch. It runs
// without a GPU.
func TestGatherSumPlanDrivesTheKernel(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	const nd, c = 6, 5
	a := newGatherAlloc()
	m, putF, putI := a.gatherMem, a.putF, a.putI
	randF := func(n int) []float32 { return normals32(rng, n, 1) }
	want := make([]float64, nd*c)
	var terms []gsumTerm
	for k := 0; k < gsumMax+5; k++ {
		if k%3 == 2 { // the node's own rows, a column block of rows 2c+1 wide
			ld := 2*c + 1
			x := randF(nd * ld)
			terms = append(terms, gsumTerm{x: putF(x[3:]), ld: int64(ld)})
			for i := 0; i < nd; i++ {
				for f := 0; f < c; f++ {
					want[i*c+f] += float64(x[3+i*ld+f])
				}
			}
			continue
		}
		ns, ld := 1+rng.Intn(5), c
		if k%2 == 1 {
			ld = 3 * c
		}
		x := randF(ns * ld)
		s, rp, ord := csrWithoutNode1(t, rng, ns, nd, 2*nd)
		for i := 0; i < nd; i++ {
			a, b := rp[i], rp[i+1]
			for f := 0; f < c && b > a; f++ {
				var acc float64
				for e := a; e < b; e++ {
					acc += float64(x[s[ord[e]]*int64(ld)+int64(f)])
				}
				want[i*c+f] += acc / float64(b-a)
			}
		}
		terms = append(terms, gsumTerm{x: putF(x), src: putI(s), rowPtr: putI(rp), order: putI(ord), ld: int64(ld)})
	}
	for range 2 { // biases: row stride 0
		b := randF(c)
		terms = append(terms, gsumTerm{x: putF(b)})
		for i := 0; i < nd; i++ {
			for f := 0; f < c; f++ {
				want[i*c+f] += float64(b[f])
			}
		}
	}
	res := randF(nd * c)
	const scale = 0.25
	relu := func(code int64, v float32) float32 {
		if code != int64(kernels.Relu) {
			t.Fatalf("activation code %d, want Relu's %d", code, kernels.Relu)
		}
		return max(v, 0)
	}
	for q := range want {
		want[q] = math.Max(scale*want[q], 0) + float64(res[q])
	}
	out := make([]float32, nd*c)
	for e := range out {
		out[e] = float32(math.NaN()) // the first launch must not read it
	}
	outAddr, resAddr := putF(out), putF(res)
	launches := gsumPlan(terms, int64(kernels.Relu))
	if len(launches) != 2 {
		t.Fatalf("%d launches for %d terms, want 2", len(launches), len(terms))
	}
	var w [gsumWords]uint64
	for _, l := range launches {
		gsumPack(&w, outAddr, resAddr, nd, c, scale, l)
		gsumRun(&w, m, relu)
	}
	for q := range want {
		if d := math.Abs(float64(out[q]) - want[q]); !(d <= 1e-5*(1+math.Abs(want[q]))) {
			t.Fatalf("element %d: %v, want %v", q, out[q], want[q])
		}
	}
	if l := gsumPlan(nil, 3); len(l) != 1 || len(l[0].terms) != 0 || l[0].act != 3 || l[0].accumulate {
		t.Fatalf("no terms: %+v, want one launch of none with the activation", l)
	}
}

// TestGatTailCombinesInRelationOrder runs gat_tail's protocol in Go: the
// blocks of a one-launch GATMean (a block per relation and node) finish
// in random orders, each writing its relation's row of the scratch and
// counting it done; the one that counts a node's last relation adds the
// rows in relation order, with the activation and residual, and sets
// the counter back to 0. Whatever the order, out is gat_combine_f32's
// result bit for bit (the fp32 sum in relation order) and every counter
// ends at 0. It runs without a GPU.
func TestGatTailCombinesInRelationOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	const nd, c, r = 5, 3, 4
	rows := make([][]float32, r*nd) // relation k's row i at k·nd + i
	for k := range rows {
		rows[k] = make([]float32, c)
		for f := range rows[k] {
			rows[k][f] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.Intn(8)-4)))
		}
	}
	res := make([]float32, nd*c)
	for q := range res {
		res[q] = float32(rng.NormFloat64())
	}
	act := func(v float32) float32 { return max(v, 0) }
	want := make([]float32, nd*c)
	for i := 0; i < nd; i++ {
		for f := 0; f < c; f++ {
			v := rows[i][f] // gat_combine_f32: scratch[0], then + scratch[r] in order
			for k := 1; k < r; k++ {
				v += rows[k*nd+i][f]
			}
			want[i*c+f] = act(v) + res[i*c+f]
		}
	}
	var w [gatMultiWords]uint64
	gatMultiPack(&w, 1, nd, 2, c, 0.2, 1/float64(r), 0, gatTail{out: 2, res: 3, counters: 4, act: int64(kernels.Relu)}, make([]gatRel, r))
	if w[10] == 0 || int64(w[1]) != r || w[7] != 0 {
		t.Fatalf("the launch carries counters %d, %d relations from %d; want a tail over all %d", w[10], w[1], w[7], r)
	}
	for trial := 0; trial < 20; trial++ {
		scratch := make([]float32, r*nd*c)
		out := make([]float32, nd*c)
		for q := range out {
			out[q] = float32(math.NaN())
		}
		counters := make([]int, nd)
		lasts := 0
		for _, b := range rng.Perm(r * nd) { // the blocks' finishing order
			k, i := b/nd, b%nd
			copy(scratch[(k*nd+i)*c:], rows[k*nd+i]) // the block's relation row
			counters[i]++
			if counters[i] != int(w[1]) {
				continue
			}
			lasts++
			n := nd * c
			for f := 0; f < c; f++ {
				q := i*c + f
				v := scratch[q]
				for k := 1; k < r; k++ {
					v += scratch[k*n+q]
				}
				out[q] = act(v) + res[q]
			}
			counters[i] = 0
		}
		if lasts != nd {
			t.Fatalf("trial %d: %d nodes combined, want %d", trial, lasts, nd)
		}
		for q := range want {
			if math.Float32bits(out[q]) != math.Float32bits(want[q]) {
				t.Fatalf("trial %d element %d: %v, want %v", trial, q, out[q], want[q])
			}
		}
		for i, n := range counters {
			if n != 0 {
				t.Fatalf("trial %d: counter %d left at %d", trial, i, n)
			}
		}
	}
}
