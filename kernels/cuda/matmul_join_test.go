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
// 128 threads: the staging (TF32-rounded, zero past the edges) into the
// kernel's shared array, each warp's 32×32 quarter summed in float64
// over the staged values (the tensor cores' order is the hardware's),
// the quarters stored at the kernel's offsets within the same array
// (which must hold them) and copied out inside the product. The array
// starts NaN so that a read of an element nothing wrote shows.
func gemmJoinTCEmu(mem *devMem, w *[gemmJoinWords]uint64, tiles int64) {
	const T, TK, LDS, LDC = gemmJoinTileTC, 32, 36, 68
	for x := int64(0); x < tiles; x++ {
		d, a, b, m, nn, k, tile0 := gjBlockCall(w, x)
		tilesN := (nn + T - 1) / T
		t := x - tile0
		i0, j0 := (t/tilesN)*T, (t%tilesN)*T
		sm := make([]float32, 2*T*LDS)
		for i := range sm {
			sm[i] = float32(math.NaN())
		}
		as, bs := sm[:T*LDS], sm[T*LDS:]
		var acc [4][32][32]float64
		for k0 := int64(0); k0 < k; k0 += TK {
			for e := 0; e < T*TK; e++ {
				r, kk := e/TK, e%TK
				ia, jb, kg := i0+int64(r), j0+int64(r), k0+int64(kk)
				as[r*LDS+kk], bs[r*LDS+kk] = 0, 0
				if ia < m && kg < k {
					as[r*LDS+kk] = tf32(mem.ld(a, ia*k+kg))
				}
				if jb < nn && kg < k {
					bs[r*LDS+kk] = tf32(mem.ld(b, jb*k+kg))
				}
			}
			for warp := 0; warp < 4; warp++ {
				wr, wc := (warp>>1)*32, (warp&1)*32
				for r := 0; r < 32; r++ {
					for c := 0; c < 32; c++ {
						for kk := 0; kk < TK; kk++ {
							acc[warp][r][c] += float64(as[(wr+r)*LDS+kk]) * float64(bs[(wc+c)*LDS+kk])
						}
					}
				}
			}
		}
		cs := sm
		for warp := 0; warp < 4; warp++ {
			wr, wc := (warp>>1)*32, (warp&1)*32
			for r := 0; r < 32; r++ {
				for c := 0; c < 32; c++ {
					cs[(wr+r)*LDC+wc+c] = float32(acc[warp][r][c])
				}
			}
		}
		for e := 0; e < T*T; e++ {
			r, cc := e/T, e%T
			i, jj := i0+int64(r), j0+int64(cc)
			if i < m && jj < nn {
				mem.st(d, i*nn+jj, cs[r*LDC+cc])
			}
		}
	}
}

// TestGemmJoinTF32KernelInGo: gemm_join_tf32, transcribed (its tensor
// cores' sums in float64), writes every element of every product once,
// within TF32's rounding of the exact product, for a batch-64 policy
// layer's three products (narrowed), sizes no multiple of the tile or
// the K step, K = 0 and more products than one launch takes; its staged
// output fits the staging buffers it reuses.
func TestGemmJoinTF32KernelInGo(t *testing.T) {
	if 64*68 > 2*64*36 {
		t.Fatal("the staged output tile does not fit the staging buffers")
	}
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
	if maxT, _ := ptxLaunchBounds(t, "matmul.ptx", "gemm_join_tf32"); maxT != 128 {
		t.Fatalf("gemm_join_tf32 is compiled for blocks of %d threads; MatMulsT launches 128", maxT)
	}
}
