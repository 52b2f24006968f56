package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// gjBlockCall is the product block x of the launch w computes (the last
// whose first block is at most x, as the join kernels find it): its
// addresses, sizes and first block.
func gjBlockCall(w *[gemmJoinWords]uint64, x int64) (d, a, b uint64, m, n, k, tile0 int64) {
	call := func(q int) (d, a, b uint64, m, n, k, tile0 int64) {
		o := 1 + q*gjCallWords
		return w[o], w[o+1], w[o+2], int64(w[o+3]), int64(w[o+4]), int64(w[o+5]), int64(w[o+6])
	}
	q := 0
	for q+1 < int(w[0]) {
		if _, _, _, _, _, _, t0 := call(q + 1); x < t0 {
			break
		}
		q++
	}
	return call(q)
}

// gemmJoinEmu is gemm_join_f32 over the launch w of tiles blocks of 256
// threads, phase by phase (staging, then the step's products, per K
// step), with the shared tiles starting NaN so that a read of an element
// no thread staged shows.
func gemmJoinEmu(mem *devMem, w *[gemmJoinWords]uint64, tiles int64) {
	const T = gemmJoinTile
	for x := int64(0); x < tiles; x++ {
		d, a, b, m, nn, k, tile0 := gjBlockCall(w, x)
		if m <= gemmJoinSkinny {
			gemmJoinSkinnyEmu(mem, d, a, b, m, nn, k, x-tile0)
			continue
		}
		tilesN := (nn + T - 1) / T
		t := x - tile0
		i0, j0 := (t/tilesN)*T, (t%tilesN)*T
		var as, bs [T][T + 1]float32
		var acc [256][4]float32
		for k0 := int64(0); k0 < k; k0 += T {
			for r := range as {
				for c := range as[r] {
					as[r][c], bs[r][c] = float32(math.NaN()), float32(math.NaN())
				}
			}
			for tid := 0; tid < 256; tid++ { // staging
				col, row := tid%T, tid/T
				for r := 0; r < 4; r++ {
					rr := row + 8*r
					kk := k0 + int64(col)
					ia, jb := i0+int64(rr), j0+int64(rr)
					as[rr][col], bs[rr][col] = 0, 0
					if ia < m && kk < k {
						as[rr][col] = mem.ld(a, ia*k+kk)
					}
					if jb < nn && kk < k {
						bs[rr][col] = mem.ld(b, jb*k+kk)
					}
				}
			}
			steps := int(min(k-k0, T))
			for tid := 0; tid < 256; tid++ { // the step's products
				col, row := tid%T, tid/T
				for p := 0; p < steps; p++ {
					bv := bs[col][p]
					for r := 0; r < 4; r++ {
						acc[tid][r] = fma32(as[row+8*r][p], bv, acc[tid][r])
					}
				}
			}
		}
		for tid := 0; tid < 256; tid++ {
			col, row := tid%T, tid/T
			for r := 0; r < 4; r++ {
				i, jj := i0+int64(row+8*r), j0+int64(col)
				if i < m && jj < nn {
					mem.st(d, i*nn+jj, acc[tid][r])
				}
			}
		}
	}
}

// gemmJoinSkinnyEmu is gemm_join_skinny's block t of the product d =
// a·bᵀ (m ≤ gemmJoinSkinny rows): warp w's lanes' partials in k order,
// then the xor butterfly, lane r storing row r.
func gemmJoinSkinnyEmu(mem *devMem, d, a, b uint64, m, n, k, t int64) {
	for w := int64(0); w < 8; w++ {
		j := t*gemmJoinCols + w
		if j >= n {
			continue
		}
		var acc [32][gemmJoinSkinny]float32
		for lane := int64(0); lane < 32; lane++ {
			for p := lane; p < k; p += 32 {
				bv := mem.ld(b, j*k+p)
				for r := int64(0); r < m; r++ {
					acc[lane][r] = fma32(mem.ld(a, r*k+p), bv, acc[lane][r])
				}
			}
		}
		for r := int64(0); r < m; r++ {
			var v [32]float32
			for lane := range v {
				v[lane] = acc[lane][r]
			}
			v = butterfly32(v)
			mem.st(d, r*n+j, v[r])
		}
	}
}

// butterfly32 is a warp's xor butterfly over v (offsets 16 down to 1,
// every lane adding its partner's value to its own, in fp32).
func butterfly32(v [32]float32) [32]float32 {
	for o := 16; o > 0; o >>= 1 {
		var nv [32]float32
		for l := range v {
			nv[l] = v[l] + v[l^o]
		}
		v = nv
	}
	return v
}

// gemmJoinWant is the element d[i, j] gemm_join_f32 computes: the fma
// chain in k order for a tiled product; for a skinny one (m ≤
// gemmJoinSkinny), 32 lane-strided chains summed by the butterfly.
func gemmJoinWant(av, bv []float32, m, k, i, j int64) float32 {
	if m > gemmJoinSkinny {
		var want float32
		for kk := int64(0); kk < k; kk++ {
			want = fma32(av[i*k+kk], bv[j*k+kk], want)
		}
		return want
	}
	var v [32]float32
	for lane := int64(0); lane < 32; lane++ {
		for p := lane; p < k; p += 32 {
			v[lane] = fma32(av[i*k+p], bv[j*k+p], v[lane])
		}
	}
	return butterfly32(v)[0]
}

// normalVals returns a source of standard normal float32 slices, seeded
// by seed.
func normalVals(seed int64) func(n int64) []float32 {
	rng := rand.New(rand.NewSource(seed))
	return func(n int64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
}

// gjProd is one product of an emulated join: its operands' values and
// the output the emulation wrote.
type gjProd struct {
	av, bv  []float32
	m, n, k int64
	got     []float32
}

// emulateJoin puts set's products (m, n, k each; operands from vals, the
// outputs NaN) in device memory, packs them gemmJoin a launch with each
// product's blocks counted by blocks, runs emu over every launch, checks
// the guards and that each output element was written once, and returns
// the products with their outputs.
func emulateJoin(t *testing.T, set [][3]int64, vals func(int64) []float32, blocks func(m, n int64) int64,
	emu func(*devMem, *[gemmJoinWords]uint64, int64)) []gjProd {
	t.Helper()
	mem := newDevMem()
	var ps []gjProd
	var cs []gjCall
	for _, sh := range set {
		m, n, k := sh[0], sh[1], sh[2]
		av, bv := vals(m*k), vals(n*k)
		d := make([]float32, m*n)
		for i := range d {
			d[i] = float32(math.NaN())
		}
		cs = append(cs, gjCall{a: mem.put(av, false), b: mem.put(bv, false), d: mem.put(d, false), m: m, n: n, k: k})
		ps = append(ps, gjProd{av: av, bv: bv, m: m, n: n, k: k})
	}
	mem.finish()
	var w [gemmJoinWords]uint64
	for start := 0; start < len(cs); start += gemmJoin {
		tiles := gemmJoinPackBy(&w, cs[start:min(len(cs), start+gemmJoin)], blocks)
		emu(mem, &w, tiles)
	}
	what := fmt.Sprintf("products %v", set)
	mem.checkGuards(t, what)
	for q, c := range cs {
		for e, cnt := range mem.writesAt(c.d, int(c.m*c.n)) {
			if cnt != 1 {
				t.Fatalf("%s: product %d element %d written %d times", what, q, e, cnt)
			}
		}
		ps[q].got = mem.view(c.d, int(c.m*c.n))
	}
	return ps
}

// TestGemmJoinKernelInGo: gemm_join_f32, transcribed, writes every
// element of every product once, d = a·bᵀ summed in k order in fp32 —
// bit for bit the fma chain; for a skinny product (at most
// gemmJoinSkinny rows) the 32 lanes' chains and the butterfly — for a
// batch-64 policy layer's three projections, sizes no multiple of the tile (K past one step, one row,
// one column, K = 0), and more products than one launch takes (packed
// gemmJoin at a time, as Device.MatMulsT does). The PTX's parameter is
// the Go block's size.
func TestGemmJoinKernelInGo(t *testing.T) {
	vals := normalVals(29)
	for _, set := range [][][3]int64{
		{{64, 256, 64}, {192, 448, 64}, {192, 384, 64}},
		{{5, 7, 3}, {33, 40, 70}, {1, 65, 33}, {37, 1, 100}, {3, 4, 0}},
		{{2, 3, 4}, {3, 2, 5}, {4, 4, 4}, {1, 1, 1}, {9, 8, 7}, {8, 9, 6}, {31, 33, 32}, {32, 32, 32}, {2, 70, 2}, {65, 2, 3}},
		// A batch-1 policy layer's (skinny: 3 rows), narrowed; the
		// boundary of the skinny path (8 rows, 9 rows), K past 32 and not
		// a multiple of it.
		{{3, 300, 256}, {1, 100, 128}, {3, 150, 70}, {8, 17, 33}, {9, 17, 33}, {8, 9, 65}},
	} {
		ps := emulateJoin(t, set, vals, gjTiles, gemmJoinEmu)
		what := fmt.Sprintf("products %v", set)
		for q, p := range ps {
			got := p.got
			for i := int64(0); i < p.m; i++ {
				for j := int64(0); j < p.n; j++ {
					want := gemmJoinWant(p.av, p.bv, p.m, p.k, i, j)
					if g := got[i*p.n+j]; g != want {
						t.Fatalf("%s: product %d d[%d, %d] = %v, want %v (the fma chain in k order, or a skinny product's lane chains and butterfly)", what, q, i, j, g, want)
					}
					var f64 float64 // and near the exact product
					for kk := int64(0); kk < p.k; kk++ {
						f64 += float64(p.av[i*p.k+kk]) * float64(p.bv[j*p.k+kk])
					}
					if d := math.Abs(float64(want) - f64); d > 1e-4*(1+math.Abs(f64)) {
						t.Fatalf("%s: product %d d[%d, %d] = %v, the exact sum %v", what, q, i, j, want, f64)
					}
				}
			}
		}
	}
	if n, ok := ptxStructParam(readPTX(t, "matmul.ptx"), "gemm_join_f32"); !ok || n != 8*gemmJoinWords {
		t.Fatalf("gemm_join_f32: the PTX's parameter is %d bytes (found %v), the Go block %d", n, ok, 8*gemmJoinWords)
	}
}

// tf32 is cvt.rna.tf32.f32 (wmma::__float_to_tf32): v rounded to 10
// mantissa bits, ties away from zero.
func tf32(v float32) float32 {
	b := math.Float32bits(v)
	if b&0x7f800000 == 0x7f800000 { // Inf, NaN
		return v
	}
	return math.Float32frombits((b + 0x1000) &^ 0x1fff)
}

// gemmJoinTCEmu is gemm_join_tf32 over the launch w of tiles blocks of
// 128 threads, lane by lane: each K step's staging (thread (warp, lane)
// stores column lane of rows warp + 4·s, TF32-rounded, zero past the
// edges; the arrays start NaN so that a read of an element nothing
// staged shows), then each warp's fragment loads exactly as the kernel
// indexes them, and each mma.sync.m16n8k8 computed from the 32 lanes'
// fragments through the PTX ISA's layout (A[g][t] = a0, A[g+8][t] =
// a1, A[g][t+4] = a2, A[g+8][t+4] = a3; B[t][g] = b0, B[t+4][g] = b1;
// d0..d3 = D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1], g = lane/4,
// t = lane%4), its sums in float64 (the hardware's order is its own);
// then each lane's accumulators stored where the kernel stores them.
func gemmJoinTCEmu(mem *devMem, w *[gemmJoinWords]uint64, tiles int64) {
	const T, TK, LDS, stage = gemmJoinTileTC, 32, 36, 64 * 32 / 128
	for x := int64(0); x < tiles; x++ {
		d, a, b, m, nn, k, tile0 := gjBlockCall(w, x)
		tilesN := (nn + T - 1) / T
		t := x - tile0
		i0, j0 := (t/tilesN)*T, (t%tilesN)*T
		var as, bs [T][LDS]float32
		var acc [4][32][2][4][4]float64 // warp, lane, a, b, e
		for k0 := int64(0); k0 < k; k0 += TK {
			for r := range as {
				for c := range as[r] {
					as[r][c], bs[r][c] = float32(math.NaN()), float32(math.NaN())
				}
			}
			for warp := 0; warp < 4; warp++ {
				for lane := 0; lane < 32; lane++ {
					kg := k0 + int64(lane)
					for s := 0; s < stage; s++ {
						ra, rb := i0+int64(warp+4*s), j0+int64(warp+4*s)
						as[warp+4*s][lane], bs[warp+4*s][lane] = 0, 0
						if kg < k && ra < m {
							as[warp+4*s][lane] = tf32(mem.ld(a, ra*k+kg))
						}
						if kg < k && rb < nn {
							bs[warp+4*s][lane] = tf32(mem.ld(b, rb*k+kg))
						}
					}
				}
			}
			for warp := 0; warp < 4; warp++ {
				wr, wc := (warp>>1)*32, (warp&1)*32
				for kk := 0; kk < TK; kk += 8 {
					var fa [32][2][4]float32
					var fb [32][4][2]float32
					for lane := 0; lane < 32; lane++ {
						g, tg := lane>>2, lane&3
						for ai := 0; ai < 2; ai++ {
							r := wr + 16*ai + g
							fa[lane][ai] = [4]float32{as[r][kk+tg], as[r+8][kk+tg], as[r][kk+tg+4], as[r+8][kk+tg+4]}
						}
						for bi := 0; bi < 4; bi++ {
							cn := wc + 8*bi + g
							fb[lane][bi] = [2]float32{bs[cn][kk+tg], bs[cn][kk+tg+4]}
						}
					}
					for ai := 0; ai < 2; ai++ {
						for bi := 0; bi < 4; bi++ {
							var A [16][8]float64
							var B [8][8]float64
							for lane := 0; lane < 32; lane++ {
								g, tg := lane>>2, lane&3
								f := fa[lane][ai]
								A[g][tg], A[g+8][tg], A[g][tg+4], A[g+8][tg+4] = float64(f[0]), float64(f[1]), float64(f[2]), float64(f[3])
								B[tg][g], B[tg+4][g] = float64(fb[lane][bi][0]), float64(fb[lane][bi][1])
							}
							for lane := 0; lane < 32; lane++ {
								g, tg := lane>>2, lane&3
								for e := 0; e < 4; e++ {
									row, col := g+8*(e>>1), 2*tg+(e&1)
									for p := 0; p < 8; p++ {
										acc[warp][lane][ai][bi][e] += A[row][p] * B[p][col]
									}
								}
							}
						}
					}
				}
			}
		}
		for warp := 0; warp < 4; warp++ {
			wr, wc := (warp>>1)*32, (warp&1)*32
			for lane := 0; lane < 32; lane++ {
				g, tg := lane>>2, lane&3
				for ai := 0; ai < 2; ai++ {
					for bi := 0; bi < 4; bi++ {
						for e := 0; e < 4; e++ {
							i := i0 + int64(wr+16*ai+g+8*(e>>1))
							jj := j0 + int64(wc+8*bi+2*tg+(e&1))
							if i < m && jj < nn {
								mem.st(d, i*nn+jj, float32(acc[warp][lane][ai][bi][e]))
							}
						}
					}
				}
			}
		}
	}
}

// TestGemmJoinTF32KernelInGo: gemm_join_tf32, transcribed (its tensor
// cores' sums in float64), writes every element of every product once,
// within TF32's rounding of the exact product, for a batch-64 policy
// layer's three products (narrowed), sizes no multiple of the tile or
// the K step, K = 0 and more products than one launch takes.
func TestGemmJoinTF32KernelInGo(t *testing.T) {
	vals := normalVals(31)
	for _, set := range [][][3]int64{
		{{192, 300, 256}, {192, 130, 128}, {64, 200, 256}},
		{{9, 7, 3}, {65, 64, 33}, {70, 129, 31}, {100, 1, 40}, {12, 4, 0}, {64, 64, 64}, {10, 10, 10}, {11, 11, 11}, {13, 13, 13}},
	} {
		ps := emulateJoin(t, set, vals, gjTilesTC, gemmJoinTCEmu)
		what := fmt.Sprintf("products %v", set)
		for q, p := range ps {
			got := p.got
			for i := int64(0); i < p.m; i++ {
				for j := int64(0); j < p.n; j++ {
					var exact, mag float64
					for kk := int64(0); kk < p.k; kk++ {
						v := float64(p.av[i*p.k+kk]) * float64(p.bv[j*p.k+kk])
						exact, mag = exact+v, mag+math.Abs(v)
					}
					// Each operand rounded to 10 mantissa bits: the
					// product's relative error within 2·2⁻¹¹.
					if g := float64(got[i*p.n+j]); math.Abs(g-exact) > 1.1e-3*mag+1e-6 {
						t.Fatalf("%s: product %d d[%d, %d] = %v, exact %v (magnitude %v)", what, q, i, j, g, exact, mag)
					}
				}
			}
		}
	}
	if n, ok := ptxStructParam(readPTX(t, "matmul.ptx"), "gemm_join_tf32"); !ok || n != 8*gemmJoinWords {
		t.Fatalf("gemm_join_tf32: the PTX's parameter is %d bytes (found %v), the Go block %d", n, ok, 8*gemmJoinWords)
	}
	if maxT, minB := ptxLaunchBounds(t, "matmul.ptx", "gemm_join_tf32"); maxT != 128 || minB != 5 {
		t.Fatalf("gemm_join_tf32 is compiled for blocks of %d threads, %d a multiprocessor; MatMulsT launches 128 and counts on 5", maxT, minB)
	}
}
