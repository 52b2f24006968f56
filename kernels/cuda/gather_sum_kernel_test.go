package cuda

import (
	"math"
	"math/rand"
	"testing"
)

// gather_sum_f32 (src/graph.cu) transcribed to Go — its terms gathered
// GSUM_ILP at a time, edges j and j + 1 of every term of a group
// together (their order, src and x loads in rounds) before edges j + 2
// and j + 3 — against the loop it replaced, one term after another through
// gather_mean_at: every output must agree bit for bit, over terms
// without edges, biases (no CSR, row stride 0), groups cut short and a
// node's edges in CSR order. Thread order does not matter (one thread
// per output); the arithmetic is float32 with each operation rounded,
// as the kernel's (no multiply feeds an add).

// gsumTermEmu is a GsumTerm over Go slices: x's rows ld apart; src,
// rowPtr and order nil for a bias.
type gsumTermEmu struct {
	x                  []float32
	src, rowPtr, order []int64
	ld                 int64
}

// gatherMeanAtEmu is gather_mean_at.
func gatherMeanAtEmu(g gsumTermEmu, i, f int64) float32 {
	a, b := g.rowPtr[i], g.rowPtr[i+1]
	if b <= a {
		return 0
	}
	acc := g.x[g.src[edgeAt(g.order, a)]*g.ld+f]
	for p := a + 1; p < b; p++ {
		acc += g.x[g.src[edgeAt(g.order, p)]*g.ld+f]
	}
	return acc * (1 / float32(b-a))
}

// gatherSumOneByOne is the loop before GSUM_ILP: v from 0, each term's
// value added in order.
func gatherSumOneByOne(terms []gsumTermEmu, i, f int64) float32 {
	var v float32
	for _, g := range terms {
		var t float32
		if g.src != nil {
			t = gatherMeanAtEmu(g, i, f)
		} else {
			t = g.x[i*g.ld+f]
		}
		v += t
	}
	return v
}

// gatherSumILPEmu is gather_sum_f32's term loop as it stands (a source
// index of −1 marks an edge past a term's).
func gatherSumILPEmu(terms []gsumTermEmu, i, f int64) float32 {
	const ilp = 4 // GSUM_ILP
	var v float32
	nt := len(terms)
	for k0 := 0; k0 < nt; k0 += ilp {
		var t [ilp]float32
		var a, b [ilp]int64
		for u := 0; u < ilp; u++ {
			if k0+u < nt {
				g := terms[k0+u]
				if g.src != nil {
					a[u], b[u] = g.rowPtr[i], g.rowPtr[i+1]
				} else {
					t[u] = g.x[i*g.ld+f]
				}
			}
		}
		var most int64
		for u := 0; u < ilp; u++ {
			most = max(most, b[u]-a[u])
		}
		for j := int64(0); j < most; j += 2 { // edges j and j + 1 together
			var o [ilp][2]int64
			for u := 0; u < ilp; u++ {
				for e := int64(0); e < 2; e++ {
					o[u][e] = -1
					if a[u]+j+e < b[u] {
						o[u][e] = edgeAt(terms[k0+u].order, a[u]+j+e)
					}
				}
			}
			for u := 0; u < ilp; u++ {
				for e := 0; e < 2; e++ {
					if o[u][e] >= 0 {
						o[u][e] = terms[k0+u].src[o[u][e]]
					}
				}
			}
			var x [ilp][2]float32
			for u := 0; u < ilp; u++ {
				for e := 0; e < 2; e++ {
					if o[u][e] >= 0 {
						g := terms[k0+u]
						x[u][e] = g.x[o[u][e]*g.ld+f]
					}
				}
			}
			for u := 0; u < ilp; u++ {
				for e := int64(0); e < 2; e++ {
					if a[u]+j+e < b[u] {
						if j+e == 0 {
							t[u] = x[u][e]
						} else {
							t[u] += x[u][e]
						}
					}
				}
			}
		}
		for u := 0; u < ilp; u++ {
			if k0+u < nt {
				if b[u] > a[u] {
					t[u] *= 1 / float32(b[u]-a[u])
				}
				v += t[u]
			}
		}
	}
	return v
}

func TestGatherSumKernelInGo(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	const nd, c = 9, 5
	term := func(ns, e int, bias bool) gsumTermEmu {
		if bias {
			x := make([]float32, c)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			return gsumTermEmu{x: x}
		}
		ld := int64(c + rng.Intn(3)) // a column block of a wider row
		x := make([]float32, int64(ns)*ld)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.Intn(5)-2)))
		}
		src, dst := make([]int64, e), make([]int64, e)
		for k := range src {
			src[k], dst[k] = int64(rng.Intn(ns)), int64(rng.Intn(nd))
			if k%3 == 0 {
				dst[k] = 0 // one node takes many edges
			}
			if dst[k] == 1 {
				dst[k] = 2 // node 1 takes none
			}
		}
		rowPtr, order := make([]int64, nd+1), make([]int64, 0, e)
		for d := int64(0); d < nd; d++ {
			for k, v := range dst {
				if v == d {
					order = append(order, int64(k))
				}
			}
			rowPtr[d+1] = int64(len(order))
		}
		if e%2 == 1 {
			// Sorted by destination: no order (null, the identity).
			sorted := make([]int64, e)
			for p, k := range order {
				sorted[p] = src[k]
			}
			return gsumTermEmu{x: x, src: sorted, rowPtr: rowPtr, ld: ld}
		}
		return gsumTermEmu{x: x, src: src, rowPtr: rowPtr, order: order, ld: ld}
	}
	for _, shape := range [][]int{{3}, {1, 0}, {4, 5, 0, 2}, {6, 0, 1, 7, 2}, {3, 0, 0, 0, 0, 2, 9, 1, 4}, {0}} {
		var terms []gsumTermEmu
		for k, e := range shape {
			terms = append(terms, term(4+k, e, e == 0 && k%2 == 1))
		}
		for i := int64(0); i < nd; i++ {
			for f := int64(0); f < c; f++ {
				want, got := gatherSumOneByOne(terms, i, f), gatherSumILPEmu(terms, i, f)
				if math.Float32bits(want) != math.Float32bits(got) {
					t.Fatalf("terms %v, node %d, column %d: %v, one term at a time %v", shape, i, f, got, want)
				}
			}
		}
	}
}

// TestGatherSumLaunchWithinBounds: gather_sum_f32 and
// gather_sum_join_f32 are compiled for blocks of blockSize threads, 4 to
// a multiprocessor (64 registers: W2's batch-64 joined launch, 448
// blocks, in one wave of 132 multiprocessors, as it ran at 60 registers
// before the edges were paired).
func TestGatherSumLaunchWithinBounds(t *testing.T) {
	for _, k := range []string{"gather_sum_f32", "gather_sum_join_f32"} {
		if maxT, minB := ptxLaunchBounds(t, "graph.ptx", k); maxT != blockSize || minB != 4 {
			t.Errorf("%s is compiled for %d threads, %d blocks a multiprocessor; launched with %d, counted on 4", k, maxT, minB, blockSize)
		}
	}
}
