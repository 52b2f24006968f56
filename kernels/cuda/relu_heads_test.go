package cuda

import (
	"math"
	"math/rand"
	"testing"

	"github.com/esper-go/esper/kernels"
)

// rhLayerEmu is rh_layer for one block: in [rhRows, width] rows, units
// outputs a row, stored for the rows < rows at dst[r·ld + u]; warp w
// takes units in pairs (w and w + warps, then w + 2·warps and w +
// 3·warps, …), each lane's sums in fma order, then each row's butterfly
// (rh_store).
func rhLayerEmu(in, w, b []float32, width, units int64, relu bool, rows int, dst []float32, ld int64) {
	const warps = rhThreads / 32
	store := func(acc *[rhRows][32]float32, u int64) { rhStoreEmu(acc, b, u, relu, rows, dst, ld) }
	for warp := int64(0); warp < warps; warp++ {
		for u := warp; u < units; u += 2 * warps {
			u2 := u + warps
			two := u2 < units
			wr2 := u
			if two {
				wr2 = u2
			}
			var acc, acc2 [rhRows][32]float32
			for lane := int64(0); lane < 32; lane++ {
				for p := lane; p < width; p += 32 {
					wv, wv2 := w[u*width+p], w[wr2*width+p]
					for r := 0; r < rhRows; r++ {
						x := in[int64(r)*width+p]
						acc[r][lane] = fma32(x, wv, acc[r][lane])
						acc2[r][lane] = fma32(x, wv2, acc2[r][lane])
					}
				}
			}
			store(&acc, u)
			if two {
				store(&acc2, u2)
			}
		}
	}
}

// rhRunEmu is relu_heads_f32 in Go over the launch rhPack describes:
// every block routed to its head and tile as the kernel routes it, its
// rows read from x or, for a gathered input, element by element as
// gather_in_at reads them, and a head's outputs, computed into a tile of
// their own, copied to out and to its joined output's columns.
func rhRunEmu(w *[rhWords]uint64, blocks int64, m gatherMem) {
	n := int(w[0])
	for b := int64(0); b < blocks; b++ {
		t, c := b, 0
		for c+1 < n && t >= int64(w[1+c]) {
			c++
		}
		if c > 0 {
			t -= int64(w[c])
		}
		q := w[1+rhMax+rhIn*gatherInWords+c*rhHeadWords:]
		w1, b1, w2, b2, out := m.f[q[1]], m.f[q[2]], m.f[q[3]], m.f[q[4]], m.f[q[5]]
		rn, k, hd, o, in := int64(q[6]), int64(q[7]), int64(q[8]), int64(q[9]), int64(q[10])
		r0 := t * rhRows
		rows := int(min(rhRows, rn-r0))
		xs := make([]float32, rhRows*k)
		for e := range xs {
			r, j := int64(e)/k, int64(e)%k
			switch {
			case r >= int64(rows):
			case in > 0:
				xs[e] = gatherInAtEmu(w[1+rhMax+(in-1)*gatherInWords:], m, r0+r, j)
			default:
				xs[e] = m.f[q[0]][(r0+r)*k+j]
			}
		}
		hs := make([]float32, rhRows*hd)
		for e := range hs {
			hs[e] = float32(math.NaN()) // rows past the head's are never stored
		}
		rhLayerEmu(xs, w1, b1, k, hd, true, rhRows, hs, hd)
		ys := make([]float32, rhRows*o) // the outputs, in xs's place
		rhLayerEmu(hs, w2, b2, hd, o, false, rows, ys, o)
		for e := int64(0); e < int64(rows)*o; e++ {
			out[r0*o+e] = ys[e]
			if q[11] != 0 {
				join, ld, col, g := m.f[q[11]], int64(q[12]), int64(q[13]), int64(q[14])
				R, u := r0+e/o, e%o
				join[(R/g)*ld+col+(R%g)*o+u] = ys[e]
			}
		}
	}
}

// gatherInAtEmu is gatherInAt over m.
func gatherInAtEmu(in []uint64, m gatherMem, i, j int64) float32 {
	return gatherInAt(in, func(p uint64, e int64) float32 { return m.f[p][e] }, func(p uint64) []int64 { return m.i[p] }, i, j)
}

// gatherInAt is gather_in_at (src/common.cuh) over the words of a struct
// GatherIn: x(p, e) reads element e of the fp32 buffer at p, ints(p) is
// the int64 buffer at p.
func gatherInAt(in []uint64, x func(p uint64, e int64) float32, ints func(p uint64) []int64, i, j int64) float32 {
	g := gatherPartOf(in, j)
	return gatherPartAt(g, x, ints, i, j-int64(g[6]))
}

// gatherPartOf is gather_part_of over a piece count in[0] and the words
// of the struct GatherParts after it: the words of the part holding
// column j.
func gatherPartOf(in []uint64, j int64) []uint64 {
	np, p := int64(in[0]), int64(0)
	for p+1 < np && j >= int64(in[1+(p+1)*gatherPartWords+6]) {
		p++
	}
	return in[1+p*gatherPartWords:]
}

// gatherPartAt is gather_part_at over a struct GatherPart's words g: a
// mean adds in CSR order from the first value, then scales by 1/count
// (gather_mean_at); a copy reads x's row i; ones are 1.
func gatherPartAt(g []uint64, x func(p uint64, e int64) float32, ints func(p uint64) []int64, i, f int64) float32 {
	pw := int64(g[4])
	switch g[7] {
	case gatherCopy:
		return x(g[0], i*pw+f)
	case gatherOnes:
		return 1
	}
	src, rowPtr, order := ints(g[1]), ints(g[2]), ints(g[3]) // order nil: a null order
	a, b := rowPtr[i], rowPtr[i+1]
	if b <= a {
		return 0
	}
	acc := x(g[0], src[edgeAt(order, a)]*pw+f)
	for e := a + 1; e < b; e++ {
		acc += x(g[0], src[edgeAt(order, e)]*pw+f)
	}
	return acc * (1 / float32(b-a))
}

// TestReluHeadsKernelInGo: relu_heads_f32, transcribed and run over
// rhPack's launch, writes every head's relu(x·w1ᵀ + b1)·w2ᵀ + b2 as the
// float64 definition says — the policy's seven context heads on one
// input, its slot head on another (192 rows, one output), its value
// head, and a head without biases whose rows do not fill a tile — each
// output once; the parameter block has the size the PTX declares. It
// runs without a GPU.
func TestReluHeadsKernelInGo(t *testing.T) {
	if n, ok := ptxStructParam(readPTX(t, "graph.ptx"), "relu_heads_f32"); !ok || n != 8*rhWords {
		t.Fatalf("relu_heads_f32: the PTX's parameter is %d bytes (found %v), the Go block %d", n, ok, 8*rhWords)
	}
	rng := rand.New(rand.NewSource(31))
	a := newGatherAlloc()
	m, put := a.gatherMem, a.putF
	randF := func(n int, s float64) []float32 { return normals32(rng, n, s) }
	type head struct {
		x              uint64
		n, k, hd, o    int
		bias           bool
		w1, b1, w2, b2 []float32
	}
	ctx, ptr, glob := randF(64*256, 1), randF(192*256, 1), randF(64*128, 1)
	var heads []head
	for _, o := range []int{6, 13, 5, 5, 5, 3, 3} {
		heads = append(heads, head{x: put(ctx), n: 64, k: 256, hd: 128, o: o, bias: true})
	}
	heads = append(heads, head{x: put(ptr), n: 192, k: 256, hd: 128, o: 1, bias: true}, head{x: put(glob), n: 64, k: 128, hd: 128, o: 1, bias: true},
		head{x: put(randF(13*40, 1)), n: 13, k: 40, hd: 70, o: 9})
	xs := map[uint64][]float32{}
	var hs []rhHead
	for i := range heads {
		h := &heads[i]
		xs[h.x] = m.f[h.x]
		h.w1, h.w2 = randF(h.hd*h.k, 1/math.Sqrt(float64(h.k))), randF(h.o*h.hd, 1/math.Sqrt(float64(h.hd)))
		r := rhHead{x: h.x, w1: put(h.w1), w2: put(h.w2), n: int64(h.n), k: int64(h.k), hd: int64(h.hd), o: int64(h.o)}
		if h.bias {
			h.b1, h.b2 = randF(h.hd, 0.5), randF(h.o, 0.5)
			r.b1, r.b2 = put(h.b1), put(h.b2)
		}
		out := make([]float32, h.n*h.o)
		for e := range out {
			out[e] = float32(math.NaN())
		}
		r.out = put(out)
		hs = append(hs, r)
	}
	var w [rhWords]uint64
	blocks, shared := rhPack(&w, hs, nil)
	if want := int64(7*8 + 24 + 8 + 2); blocks != want || shared != 4*rhRows*(256+128) {
		t.Fatalf("%d blocks with %d bytes of shared memory, want %d and %d", blocks, shared, want, 4*rhRows*(256+128))
	}
	rhRunEmu(&w, blocks, m)
	for i, h := range heads {
		x, out := xs[h.x], m.f[hs[i].out]
		for r := 0; r < h.n; r++ {
			hid := make([]float64, h.hd)
			for u := range hid {
				var v float64
				for p := 0; p < h.k; p++ {
					v += float64(x[r*h.k+p]) * float64(h.w1[u*h.k+p])
				}
				if h.bias {
					v += float64(h.b1[u])
				}
				hid[u] = math.Max(v, 0)
			}
			for o := 0; o < h.o; o++ {
				var v float64
				for u, hv := range hid {
					v += hv * float64(h.w2[o*h.hd+u])
				}
				if h.bias {
					v += float64(h.b2[o])
				}
				if got := float64(out[r*h.o+o]); !(math.Abs(got-v) <= 1e-4*(1+math.Abs(v))) {
					t.Fatalf("head %d row %d output %d: %v, want %v", i, r, o, got, v)
				}
			}
		}
	}
}

// TestReluHeadsLaunchWithinBounds: relu_heads_f32 is compiled for the
// blocks its launches use (a launch of more threads than .maxntid
// fails; fewer would leave the register budget it was compiled for
// unused).
func TestReluHeadsLaunchWithinBounds(t *testing.T) {
	if maxT, _ := ptxLaunchBounds(t, "graph.ptx", "relu_heads_f32"); maxT != rhThreads {
		t.Fatalf("relu_heads_f32 is compiled for blocks of %d threads; the Go side launches %d", maxT, rhThreads)
	}
}

// rhLayerOneByOne is rh_layer before units went in pairs: warp w takes
// units w, w + warps, … one at a time.
func rhLayerOneByOne(in, w, b []float32, width, units int64, relu bool, rows int, dst []float32, ld int64) {
	for u := int64(0); u < units; u++ {
		var acc [rhRows][32]float32
		for lane := int64(0); lane < 32; lane++ {
			for p := lane; p < width; p += 32 {
				for r := 0; r < rhRows; r++ {
					acc[r][lane] = fma32(in[int64(r)*width+p], w[u*width+p], acc[r][lane])
				}
			}
		}
		rhStoreEmu(&acc, b, u, relu, rows, dst, ld)
	}
}

// rhStoreEmu is rh_store: unit u's sums over the lanes (a butterfly) for
// the rows < rows, plus b[u] (b nil: none), through ReLU (NaN kept) when
// relu, at dst[r·ld + u].
func rhStoreEmu(acc *[rhRows][32]float32, b []float32, u int64, relu bool, rows int, dst []float32, ld int64) {
	for r := 0; r < rows; r++ {
		v := warpSum(acc[r][:])[0]
		if b != nil {
			v += b[u]
		}
		if relu && !(v > 0 || v != v) {
			v = 0
		}
		dst[int64(r)*ld+u] = v
	}
}

// TestReluHeadsPairsKeepTheBits: rh_layer with units in pairs (its
// transcription) writes what the one-unit loop it replaced wrote, bit for
// bit, and leaves unwritten what it left (the rows past a tile's), over
// widths and unit counts that leave the last pair short or the warps
// without a second unit, with and without bias and ReLU, for every row
// count of a tile.
func TestReluHeadsPairsKeepTheBits(t *testing.T) {
	rng := rand.New(rand.NewSource(43))
	for _, c := range []struct{ width, units int64 }{{256, 128}, {128, 13}, {40, 70}, {33, 65}, {1, 1}, {300, 95}} {
		in := normals32(rng, rhRows*int(c.width), 1)
		w := normals32(rng, int(c.units*c.width), 1/math.Sqrt(float64(c.width)))
		b := normals32(rng, int(c.units), 0.5)
		for rows := 1; rows <= rhRows; rows++ {
			for _, relu := range []bool{false, true} {
				bias := b
				if rows%2 == 0 {
					bias = nil
				}
				got, want := make([]float32, rhRows*int(c.units)), make([]float32, rhRows*int(c.units))
				for i := range got {
					got[i], want[i] = float32(math.NaN()), float32(math.NaN())
				}
				rhLayerEmu(in, w, bias, c.width, c.units, relu, rows, got, c.units)
				rhLayerOneByOne(in, w, bias, c.width, c.units, relu, rows, want, c.units)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("width %d, %d units, %d rows, relu %v: output %d = %v, one unit at a time %v", c.width, c.units, rows, relu, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestReluHeadsGatheredJoinedInGo: relu_heads_f32, transcribed and run
// over rhPack's launch, with a policy's gathered inputs and joined
// output as the tamiyo policy hands them at batch 64: the seven context
// heads on [global row | mean of the graph's slots] (a CSR whose edges
// come in shuffled order), the slot head on [slot row | its graph's
// global row] (a CSR of one edge a slot) writing three slots a joined
// row, the value head on the global rows themselves. Every head's output
// is the float64 definition's on the inputs the definition gathers, and
// the joined output holds every head's outputs, bit for bit, in its
// columns (every element written, none twice). It runs without a GPU.
func TestReluHeadsGatheredJoinedInGo(t *testing.T) {
	const B, slots, C, hidden = 64, 3, 128, 128
	rng := rand.New(rand.NewSource(37))
	a := newGatherAlloc()
	m := a.gatherMem
	randF := func(n int, s float64) []float32 { return normals32(rng, n, s) }
	glob, slot := randF(B*C, 1), randF(B*slots*C, 1)
	globAt, slotAt := a.putF(glob), a.putF(slot)
	// The slots' mean per graph: edges slot → graph in a shuffled order,
	// order listing them by destination.
	perm := rng.Perm(B * slots)
	src, dst := make([]int64, B*slots), make([]int64, B*slots)
	for k, s := range perm {
		src[k], dst[k] = int64(s), int64(s/slots)
	}
	meanPtr, meanOrder := make([]int64, B+1), make([]int64, 0, B*slots)
	for g := 0; g < B; g++ {
		for k := range src {
			if dst[k] == int64(g) {
				meanOrder = append(meanOrder, int64(k))
			}
		}
		meanPtr[g+1] = int64(len(meanOrder))
	}
	// Each slot's graph: one edge a slot, in order, so no order (a null
	// pointer: the identity, as tamiyo gives it).
	gsrc, gptr := make([]int64, B*slots), make([]int64, B*slots+1)
	for s := range gsrc {
		gsrc[s], gptr[s+1] = int64(s/slots), int64(s+1)
	}
	plan := func(blocks []kernels.GatherBlock, xs, srcs, ptrs, orders []uint64, k int) []gatherPart {
		return gatherPlan(blocks, xs, srcs, ptrs, orders, 0, k)
	}
	ctxIn := plan([]kernels.GatherBlock{{Col: 0, Width: C}, {Col: C, Width: C, Gathered: true}},
		[]uint64{globAt, slotAt}, []uint64{0, a.putI(src)}, []uint64{0, a.putI(meanPtr)}, []uint64{0, a.putI(meanOrder)}, 2*C)
	ptrIn := plan([]kernels.GatherBlock{{Col: 0, Width: C}, {Col: C, Width: C, Gathered: true}},
		[]uint64{slotAt, globAt}, []uint64{0, a.putI(gsrc)}, []uint64{0, a.putI(gptr)}, []uint64{0, 0}, 2*C)
	// The inputs as the definition gathers them, in float64.
	ctx, ptr := make([]float64, B*2*C), make([]float64, B*slots*2*C)
	for g := 0; g < B; g++ {
		for c := 0; c < C; c++ {
			ctx[g*2*C+c] = float64(glob[g*C+c])
			var sum float64
			for s := 0; s < slots; s++ {
				sum += float64(slot[(g*slots+s)*C+c])
			}
			ctx[g*2*C+C+c] = sum / slots
		}
	}
	for s := 0; s < B*slots; s++ {
		for c := 0; c < C; c++ {
			ptr[s*2*C+c] = float64(slot[s*C+c])
			ptr[s*2*C+C+c] = float64(glob[(s/slots)*C+c])
		}
	}
	globF := make([]float64, B*C)
	for e, v := range glob {
		globF[e] = float64(v)
	}
	type head struct {
		x              []float64
		n, k, o, g     int
		w1, b1, w2, b2 []float32
	}
	var heads []head
	for _, o := range []int{6, 13, 5, 5, 5, 3, 3} {
		heads = append(heads, head{x: ctx, n: B, k: 2 * C, o: o, g: 1})
	}
	heads = append(heads, head{x: ptr, n: B * slots, k: 2 * C, o: 1, g: slots}, head{x: globF, n: B, k: C, o: 1, g: 1})
	width := 0
	for _, h := range heads {
		width += h.g * h.o
	}
	joined := make([]float32, B*width)
	for e := range joined {
		joined[e] = float32(math.NaN()) // every element must be written
	}
	joinAt := a.putF(joined)
	var hs []rhHead
	col := 0
	for i := range heads {
		h := &heads[i]
		h.w1, h.w2 = randF(hidden*h.k, 1/math.Sqrt(float64(h.k))), randF(h.o*hidden, 1/math.Sqrt(hidden))
		h.b1, h.b2 = randF(hidden, 0.5), randF(h.o, 0.5)
		out := make([]float32, h.n*h.o)
		for e := range out {
			out[e] = float32(math.NaN())
		}
		r := rhHead{w1: a.putF(h.w1), b1: a.putF(h.b1), w2: a.putF(h.w2), b2: a.putF(h.b2), out: a.putF(out),
			n: int64(h.n), k: int64(h.k), hd: hidden, o: int64(h.o), join: joinAt, jld: int64(width), jcol: int64(col), jrows: int64(h.g)}
		switch {
		case i < 7:
			r.in = 1
		case i == 7:
			r.in = 2
		default:
			r.x = globAt
		}
		hs = append(hs, r)
		col += h.g * h.o
	}
	var w [rhWords]uint64
	blocks, _ := rhPack(&w, hs, [][]gatherPart{ctxIn, ptrIn})
	if want := int64(7*8 + 24 + 8); blocks != want {
		t.Fatalf("%d blocks, want %d", blocks, want)
	}
	rhRunEmu(&w, blocks, m)
	col = 0
	for i, h := range heads {
		out := m.f[hs[i].out]
		for r := 0; r < h.n; r++ {
			hid := make([]float64, hidden)
			for u := range hid {
				v := float64(h.b1[u])
				for p := 0; p < h.k; p++ {
					v += h.x[r*h.k+p] * float64(h.w1[u*h.k+p])
				}
				hid[u] = math.Max(v, 0)
			}
			for o := 0; o < h.o; o++ {
				v := float64(h.b2[o])
				for u, hv := range hid {
					v += hv * float64(h.w2[o*hidden+u])
				}
				got := out[r*h.o+o]
				if !(math.Abs(float64(got)-v) <= 1e-4*(1+math.Abs(v))) {
					t.Fatalf("head %d row %d output %d: %v, want %v", i, r, o, got, v)
				}
				j := joined[(r/h.g)*width+col+(r%h.g)*h.o+o]
				if math.Float32bits(j) != math.Float32bits(got) {
					t.Fatalf("head %d row %d output %d: joined %v, out %v", i, r, o, j, got)
				}
			}
		}
		col += h.g * h.o
	}
	for e, v := range joined {
		if v != v {
			t.Fatalf("joined element %d never written", e)
		}
	}
}
