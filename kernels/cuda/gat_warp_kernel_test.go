package cuda

import (
	"math"
	"math/rand"
	"testing"

	"github.com/esper-go/esper/kernels"
)

// gat_mean_join_warp_f32 (src/graph.cu: gat_relation_warp, last_warp and
// gat_tail_sum) transcribed to Go, lane by lane, reading its launch from
// the words gatJoinPack writes: the routing of blocks to means,
// relations and nodes (a warp per node, gwWarps to a block, strided by
// the grid row), the edges 32 at a time with order and src in the lanes
// and shuffled out edge by edge, the next edge's row loaded ahead, the
// heads' interleaved butterflies and the per-warp counting tail. Its
// outputs must equal, bit for bit, those of gat_relation transcribed as
// the block kernel computes them (one value a thread, lane 0's softmax
// shared) with gat_tail's sums, over nodes without edges, nodes of more
// than 32 edges (one of exactly 64), a relation without edges or source
// rows, heads and widths short of the registers' (3 heads, 40 and 5
// channels), edge attributes of 0 to 4, row-strided projections,
// a source row whose logits overflow, blocks run in launch order and in
// a shuffled one, and a grid row short of the nodes (each warp striding
// over several, loading the next one's edges as the kernel does); and
// be within float32 rounding of the float64 definition where nothing
// overflows. A transcription is not the kernel: the GPU run's
// conformance suite (TestGATWarpsOnCUDA) checks the kernel itself.

// gwRel is one relation's operands in the emulated device memory, with
// its host values for the references.
type gwRel struct {
	ns, e, lds, ldd, f                     int
	hs, hd, attr, we, attSrc, attDst, attE []float32
	bias                                   []float32
	src, dst, rowPtr, order                []int64
	rel                                    gatRel
}

// gwMean is one GATMean of the join: its relations, nd, heads, c, the
// activation (-1: none) and residual (nil: none).
type gwMean struct {
	nd, heads, c int
	act          int64
	res          []float32
	rels         []*gwRel
	out          uint64
}

// gwBlockRelation is gat_relation's result for relation q (alpha·r per
// node and column), transcribed as the block kernel computes it: v and
// the logits' sums by a warp (lanes over c, then the butterfly), the
// online softmax by lane 0, each accumulator by its thread.
func gwBlockRelation(q *gwRel, nd, H, C int, slope, alpha float32) []float32 {
	F := q.f
	HC := H * C
	lanes := func(n int, at func(c int) (float32, float32)) float32 {
		part := make([]float32, 32)
		for l := range part {
			for c := l; c < n; c += 32 {
				a, b := at(c)
				part[l] = fma32(a, b, part[l])
			}
		}
		return warpSum(part)[0]
	}
	v := make([]float32, H*F)
	for t := range v {
		h, f := t/F, t%F
		v[t] = lanes(C, func(c int) (float32, float32) { return q.attE[h*C+c], q.we[(h*C+c)*F+f] })
	}
	out := make([]float32, nd*C)
	inv := 1 / float32(H)
	for i := 0; i < nd; i++ {
		a, b := q.rowPtr[i], q.rowPtr[i+1]
		dterm := make([]float32, H)
		m, s := make([]float32, H), make([]float32, H)
		for h := range dterm {
			dterm[h] = lanes(C, func(c int) (float32, float32) { return q.hd[i*q.ldd+h*C+c], q.attDst[h*C+c] })
			m[h] = float32(math.Inf(-1))
		}
		acc := make([]float32, HC)
		for p := a; p < b; p++ {
			k := q.order[p]
			j := int(q.src[k])
			sc, wt := make([]float32, H), make([]float32, H)
			for h := 0; h < H; h++ {
				z := lanes(C, func(c int) (float32, float32) { return q.hs[j*q.lds+h*C+c], q.attSrc[h*C+c] }) + dterm[h]
				for f := 0; f < F; f++ {
					z = fma32(q.attr[int(k)*F+f], v[h*F+f], z)
				}
				l := fmaxf(z, slope*z)
				mo := m[h]
				mn := mo
				if l > mo || l != l {
					mn = l
				}
				sc[h] = 1
				if mo != mn {
					sc[h] = expf(mo - mn)
				}
				if !math.IsInf(float64(l), -1) {
					wt[h] = expf(l - mn)
				}
				s[h] = fma32(s[h], sc[h], wt[h])
				m[h] = mn
			}
			for x := 0; x < HC; x++ {
				h := x / C
				acc[x] = fma32(acc[x], sc[h], wt[h]*q.hs[j*q.lds+x])
			}
		}
		for c := 0; c < C; c++ {
			r := q.bias[c]
			if b > a {
				var t float32
				for h := 0; h < H; h++ {
					t += acc[h*C+c] / s[h]
				}
				r = fma32(t, inv, r)
			}
			out[i*C+c] = alpha * r
		}
	}
	return out
}

// gwWarpRun runs gat_mean_join_warp_f32 over the words w (gatJoinPack's)
// on a grid (gx, gy) of gwThreads-thread blocks in the given block order
// (nil: launch order), reading and writing mem.
func gwWarpRun(t *testing.T, mem *devMem, w *[gatJoinWords]uint64, gx, gy int, order []int) {
	for _, blk := range blockOrder(order, gx*gy) {
		bx, y := blk%gx, blk/gx
		_, r, mw := gatJoinRoute(w, y)
		nrel, nd := int(mw[1]), int64(mw[2])
		if r >= nrel || int64(bx)*gwWarps >= nd {
			continue
		}
		H, C := int(mw[3]), int(mw[4])
		slope := float32(math.Float64frombits(mw[5]))
		alpha := float32(math.Float64frombits(mw[6]))
		relBase := int64(mw[7])
		scratch := mw[0]
		tailOut, tailRes, counters, act := mw[8], mw[9], mw[10], int64(mw[11])
		o := 12 + gatRelWords*r
		p := mw[o : o+11]
		hs, hd, attr, we, attSrc, attDst, attEdge, bias := p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]
		src, rowPtr, ord := mem.i64[p[8]], mem.i64[p[9]], mem.i64[p[10]] // ord nil: a null order
		lds, ldd, F := int64(mw[o+11]), int64(mw[o+12]), int(mw[o+13])
		out := scratch + 4*uint64((relBase+int64(r))*nd*int64(C))
		if H > gwHeads || C > 32*gwChunks {
			t.Fatalf("a relation of %d heads and %d channels in the warp kernel", H, C)
		}

		type rows = [32][gwHeads][gwChunks]float32
		gwRow := func(r *rows, base int64) {
			for l := range r {
				for h := 0; h < gwHeads; h++ {
					for j := 0; j < gwChunks; j++ {
						c := l + 32*j
						r[l][h][j] = 0
						if h < H && c < C {
							r[l][h][j] = mem.ld(hs, base+int64(h*C+c))
						}
					}
				}
			}
		}
		sums := func(x *[32][gwHeads]float32) {
			for h := 0; h < gwHeads; h++ {
				col := make([]float32, 32)
				for l := range col {
					col[l] = x[l][h]
				}
				col = warpSum(col)
				for l := range col {
					x[l][h] = col[l]
				}
			}
		}
		// Each warp's registers: a node's begin() loads, as the kernel
		// names them.
		type warpRegs struct {
			a, b   int64
			dterm  [32][gwHeads]float32
			kl, jl [32]int64
			at     [32][gwAttr]float32
			cur    rows
		}
		// gwEdges is gw_edges: lane e < n holds edge p0 + e.
		gwEdges := func(w *warpRegs, p0 int64, n int) {
			w.kl, w.jl, w.at = [32]int64{}, [32]int64{}, [32][gwAttr]float32{}
			for l := 0; l < n; l++ {
				w.kl[l] = edgeAt(ord, p0+int64(l))
				w.jl[l] = src[w.kl[l]]
				for f := 0; f < gwAttr && f < F; f++ {
					w.at[l][f] = mem.ld(attr, w.kl[l]*int64(F)+int64(f))
				}
			}
		}
		begin := func(w *warpRegs, i int64) {
			w.a, w.b = rowPtr[i], rowPtr[i+1]
			for l := 0; l < 32; l++ {
				for h := 0; h < gwHeads; h++ {
					var part float32
					for j := 0; j < gwChunks; j++ {
						c := l + 32*j
						if h < H && c < C {
							part = fma32(mem.ld(hd, i*ldd+int64(h*C+c)), mem.ld(attDst, int64(h*C+c)), part)
						}
					}
					w.dterm[l][h] = part
				}
			}
			gwEdges(w, w.a, int(min(32, w.b-w.a)))
			if w.b > w.a {
				gwRow(&w.cur, w.jl[0]*lds)
			}
		}
		var regs [gwWarps]warpRegs
		for warp := range regs {
			if i := int64(bx)*gwWarps + int64(warp); i < nd {
				begin(&regs[warp], i)
			}
		}
		// v, once per block, after every warp's first begin: warp w takes
		// t = w, w + warps, …
		v := make([]float32, H*F)
		for tk := range v {
			h, f := tk/F, tk%F
			part := make([]float32, 32)
			for l := range part {
				for c := l; c < C; c += 32 {
					part[l] = fma32(mem.ld(attEdge, int64(h*C+c)), mem.ld(we, int64((h*C+c)*F+f)), part[l])
				}
			}
			v[tk] = warpSum(part)[0]
		}
		for warp := 0; warp < gwWarps; warp++ {
			w := &regs[warp]
			for i := int64(bx)*gwWarps + int64(warp); i < nd; i += int64(gx) * gwWarps {
				a, b := w.a, w.b
				var m, s [32][gwHeads]float32
				var acc [32][gwHeads][gwChunks]float32
				for l := range m {
					for h := range m[l] {
						m[l][h] = float32(math.Inf(-1))
					}
				}
				dterm := w.dterm
				sums(&dterm)
				for p0 := a; p0 < b; p0 += 32 {
					nE := int(min(32, b-p0))
					if p0 != a {
						gwEdges(w, p0, nE)
						gwRow(&w.cur, w.jl[0]*lds)
					}
					for e := 0; e < nE; e++ {
						jn := w.jl[min(e+1, nE-1)]
						ae := w.at[e]
						var part [32][gwHeads]float32
						for l := 0; l < 32; l++ {
							for h := 0; h < gwHeads; h++ {
								for j := 0; j < gwChunks; j++ {
									c := l + 32*j
									if h < H && c < C {
										part[l][h] = fma32(w.cur[l][h][j], mem.ld(attSrc, int64(h*C+c)), part[l][h])
									}
								}
							}
						}
						sums(&part)
						for l := 0; l < 32; l++ {
							for h := 0; h < H; h++ {
								z := part[l][h] + dterm[l][h]
								for f := 0; f < gwAttr; f++ {
									if f < F {
										z = fma32(ae[f], v[h*F+f], z)
									}
								}
								lg := fmaxf(z, slope*z)
								mo := m[l][h]
								mn := mo
								if lg > mo || lg != lg {
									mn = lg
								}
								sc := float32(1)
								if mo != mn {
									sc = expf(mo - mn)
								}
								var wt float32
								if !math.IsInf(float64(lg), -1) {
									wt = expf(lg - mn)
								}
								s[l][h] = fma32(s[l][h], sc, wt)
								m[l][h] = mn
								for j := 0; j < gwChunks; j++ {
									acc[l][h][j] = fma32(acc[l][h][j], sc, wt*w.cur[l][h][j])
								}
							}
						}
						if e+1 < nE {
							gwRow(&w.cur, jn*lds)
						}
					}
				}
				next := i + int64(gx)*gwWarps
				if next < nd { // the next node's loads, before this one's output
					begin(w, next)
				}
				inv := 1 / float32(H)
				for l := 0; l < 32; l++ {
					for j := 0; j < gwChunks; j++ {
						c := l + 32*j
						if c >= C {
							break
						}
						rr := mem.ld(bias, int64(c))
						if b > a {
							var tt float32
							for h := 0; h < H; h++ {
								tt += acc[l][h][j] / s[l][h]
							}
							rr = fma32(tt, inv, rr)
						}
						mem.st(out, i*int64(C)+int64(c), alpha*rr) // no accumulate in a mean's launch
					}
				}
				if counters != 0 && lastBlockEmu(mem, counters, i, nrel) {
					gwTailSum(mem, scratch, tailOut, tailRes, act, nrel, nd, int64(C), i)
					mem.i32[counters][i] = 0
				}
			}
		}
	}
}

// gwTailSum is gat_tail_sum for node i: the relations' rows added in
// order, then the activation and the residual.
func gwTailSum(mem *devMem, scratch, out, res uint64, act int64, nrel int, nd, c, i int64) {
	n := nd * c
	for col := int64(0); col < c; col++ {
		q := i*c + col
		v := mem.ld(scratch, q)
		for r := int64(1); r < int64(nrel); r++ {
			v += mem.ld(scratch, r*n+q)
		}
		if act >= 0 {
			v = unaryF(int32(act), v)
			if res != 0 {
				v += mem.ld(res, q)
			}
		}
		mem.st(out, q, v)
	}
}

// gwRelFloat64 is relation q's result in float64 (the definition:
// alpha·(bias + the heads' mean of the softmax-weighted sources)).
func gwRelFloat64(q *gwRel, nd, H, C int, slope, alpha float64) []float64 {
	F := q.f
	want := make([]float64, nd*C)
	for i := 0; i < nd; i++ {
		for c := 0; c < C; c++ {
			want[i*C+c] = float64(q.bias[c])
		}
	}
	for h := 0; h < H; h++ {
		logit := make([]float64, q.e)
		m := make([]float64, nd)
		for i := range m {
			m[i] = math.Inf(-1)
		}
		for k := 0; k < q.e; k++ {
			j, i := int(q.src[k]), int(q.dst[k])
			var z float64
			for c := 0; c < C; c++ {
				o := h*C + c
				var he float64
				for f := 0; f < F; f++ {
					he += float64(q.attr[k*F+f]) * float64(q.we[o*F+f])
				}
				z += float64(q.hs[j*q.lds+o])*float64(q.attSrc[o]) + float64(q.hd[i*q.ldd+o])*float64(q.attDst[o]) + he*float64(q.attE[o])
			}
			logit[k] = math.Max(z, slope*z)
			m[i] = math.Max(m[i], logit[k])
		}
		sum := make([]float64, nd)
		for k := range logit {
			logit[k] = math.Exp(logit[k] - m[q.dst[k]])
			sum[q.dst[k]] += logit[k]
		}
		for k := range logit {
			j, i := int(q.src[k]), int(q.dst[k])
			for c := 0; c < C; c++ {
				want[i*C+c] += logit[k] / sum[i] * float64(q.hs[j*q.lds+h*C+c]) / float64(H)
			}
		}
	}
	for i := range want {
		want[i] *= alpha
	}
	return want
}

func TestGATWarpKernelInGo(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	normals := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		return v
	}
	mem := newDevMem()
	// newRel draws a relation into nd nodes: node 1 takes no edge, node 0
	// takes many (more than 32 where e allows), the rest at random; with
	// sorted its edges are sorted by destination and the kernel is given
	// no order (a null pointer: the identity).
	newRel := func(nd, H, C, f, ns, e int, strided, sorted bool) *gwRel {
		q := &gwRel{ns: ns, e: e, f: f, lds: H * C, ldd: H * C}
		if strided {
			q.lds, q.ldd = H*C+7, 2*H*C
		}
		q.hs, q.hd = normals(ns*q.lds, 1), normals(nd*q.ldd, 1)
		q.attr, q.we = normals(e*f, 1), normals(H*C*f, 0.3)
		q.attSrc, q.attDst, q.attE = normals(H*C, 0.3), normals(H*C, 0.3), normals(H*C, 0.3)
		q.bias = normals(C, 1)
		q.src, q.dst = make([]int64, e), make([]int64, e)
		for k := range q.src {
			q.src[k] = int64(rng.Intn(ns))
			switch {
			case k < e/2 && e > 40:
				q.dst[k] = 0
			default:
				q.dst[k] = int64(rng.Intn(nd))
				if q.dst[k] == 1 || (q.dst[k] == 0 && e > 40) {
					q.dst[k] = 2 % int64(nd) // node 0's edges: exactly e/2 where e > 40
				}
			}
		}
		q.rowPtr = make([]int64, nd+1)
		for d := int64(0); d < int64(nd); d++ {
			for k, v := range q.dst {
				if v == d {
					q.order = append(q.order, int64(k))
				}
			}
			q.rowPtr[d+1] = int64(len(q.order))
		}
		orderAt := uint64(0) // null: the identity
		if sorted {
			src, dst, attr := make([]int64, e), make([]int64, e), make([]float32, e*f)
			for p, k := range q.order {
				src[p], dst[p] = q.src[k], q.dst[k]
				copy(attr[p*f:(p+1)*f], q.attr[int(k)*f:int(k+1)*f])
				q.order[p] = int64(p)
			}
			q.src, q.dst, q.attr = src, dst, attr
		} else {
			orderAt = mem.putI64(q.order)
		}
		q.rel = gatRel{lds: int64(q.lds), ldd: int64(q.ldd), f: int64(f)}
		for i, addr := range []uint64{mem.put(q.hs, false), mem.put(q.hd, true), mem.put(q.attr, false), mem.put(q.we, false),
			mem.put(q.attSrc, false), mem.put(q.attDst, false), mem.put(q.attE, false), mem.put(q.bias, true),
			mem.putI64(q.src), mem.putI64(q.rowPtr), orderAt} {
			q.rel.ptrs[i] = addr
		}
		return q
	}
	const slope = 0.2
	means := []*gwMean{
		{nd: 70, heads: 4, c: 128, act: -1}, // the policy's widths, no activation
		{nd: 9, heads: 3, c: 40, act: int64(kernels.GeluErf)},
		{nd: 13, heads: 1, c: 5, act: int64(kernels.Tanh)},
	}
	rels := [][]struct {
		ns, e, f int
	}{
		{{64, 150, 3}, {70, 0, 3}, {20, 200, 3}, {70, 140, 3}},
		{{8, 25, 0}, {5, 60, 2}},
		{{3, 7, 3}, {0, 0, 3}, {4, 90, 1}, {5, 128, 4}},
	}
	for k, g := range means {
		for r, rl := range rels[k] {
			g.rels = append(g.rels, newRel(g.nd, g.heads, g.c, rl.f, rl.ns, rl.e, r%2 == 1, r%3 == 2))
		}
		if k != 0 {
			g.res = normals(g.nd*g.c, 1)
		}
	}
	// One source row of mean 2's first relation is infinite (±Inf or
	// NaN logits and weights; 10 of the mean's outputs non-finite): the
	// rules for them must agree too.
	big := means[2].rels[0]
	for x := 0; x < big.lds; x++ {
		big.hs[x] = float32(math.Inf(1))
		mem.heap[mem.at(big.rel.ptrs[0], int64(x))] = big.hs[x] // the device copy
	}
	for _, order := range []string{"launch", "shuffled", "strided"} {
		var ps []gatJoinPart
		for k, g := range means {
			nan := make([]float32, g.nd*g.c)
			for i := range nan {
				nan[i] = float32(math.NaN())
			}
			g.out = mem.put(nan, k == 1)
			var res uint64
			if g.res != nil {
				res = mem.put(g.res, false)
			}
			scratch := mem.put(make([]float32, len(g.rels)*g.nd*g.c), false)
			counters := mem.putI32(make([]int32, g.nd))
			call := gatCall{out: g.out, res: res, nd: int64(g.nd), heads: int64(g.heads), c: int64(g.c), slope: slope,
				alpha: 1 / float64(len(g.rels)), act: g.act, thread: gwThreads, warp: true}
			for _, q := range g.rels {
				call.rels = append(call.rels, q.rel)
			}
			if !gatWarpFits(g.heads, g.c, 3) {
				t.Fatalf("mean %d (%d heads, %d channels) does not fit the warp kernels", k, g.heads, g.c)
			}
			ps = append(ps, gatJoinPart{g: call, scratch: scratch, counters: counters})
		}
		mem.finish()
		var w [gatJoinWords]uint64
		gx, gy := gatJoinPack(&w, ps)
		if want := gatWarpBlocks(70); gx != want || gy != 4+2+4 {
			t.Fatalf("grid (%d, %d), want (%d, 10)", gx, gy, want)
		}
		var blocks []int
		switch order {
		case "shuffled":
			blocks = rng.Perm(gx * gy)
		case "strided": // a grid row of 3 blocks: every warp takes several nodes
			gx = 3
		}
		gwWarpRun(t, mem, &w, gx, gy, blocks)
		mem.checkGuards(t, order)
		for k, g := range means {
			n := g.nd * g.c
			got := mem.view(g.out, n)
			for q, c := range mem.writesAt(g.out, n) {
				if c != 1 {
					t.Fatalf("%s order: mean %d element %d written %d times", order, k, q, c)
				}
			}
			for i, cnt := range mem.i32[ps[k].counters] {
				if cnt != 0 {
					t.Fatalf("%s order: mean %d counter %d left at %d", order, k, i, cnt)
				}
			}
			alpha := float32(1 / float64(len(g.rels)))
			want := make([]float32, n)
			var want64 []float64
			for r, q := range g.rels {
				br := gwBlockRelation(q, g.nd, g.heads, g.c, slope, alpha)
				r64 := gwRelFloat64(q, g.nd, g.heads, g.c, slope, float64(alpha))
				if r == 0 {
					copy(want, br)
					want64 = r64
					continue
				}
				for x := range want {
					want[x] += br[x]
					want64[x] += r64[x]
				}
			}
			for x := range want {
				if g.act >= 0 {
					want[x] = unaryF(int32(g.act), want[x])
					if g.res != nil {
						want[x] += g.res[x]
					}
				}
				if math.Float32bits(got[x]) != math.Float32bits(want[x]) {
					t.Fatalf("%s order: mean %d element %d (node %d) = %v, the block kernel's %v", order, k, x, x/g.c, got[x], want[x])
				}
				if g.act < 0 && math.Abs(float64(got[x])-want64[x]) > 1e-4*(1+math.Abs(want64[x])) {
					t.Fatalf("%s order: mean %d element %d = %v, float64 %v", order, k, x, got[x], want64[x])
				}
			}
		}
	}
}
