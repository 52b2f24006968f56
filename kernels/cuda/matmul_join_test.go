package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// gemmJoinEmu is gemm_join_f32 over the launch w of tiles blocks of 256
// threads, phase by phase (staging, then the step's products, per K
// step), with the shared tiles starting NaN so that a read of an element
// no thread staged shows.
func gemmJoinEmu(mem *devMem, w *[gemmJoinWords]uint64, tiles int64) {
	const T = gemmJoinTile
	n := int(w[0])
	call := func(q int) (d, a, b uint64, m, nn, k, tile0 int64) {
		o := 1 + q*gjCallWords
		return w[o], w[o+1], w[o+2], int64(w[o+3]), int64(w[o+4]), int64(w[o+5]), int64(w[o+6])
	}
	for x := int64(0); x < tiles; x++ {
		q := 0
		for q+1 < n {
			if _, _, _, _, _, _, t0 := call(q + 1); x < t0 {
				break
			}
			q++
		}
		d, a, b, m, nn, k, tile0 := call(q)
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

// TestGemmJoinKernelInGo: gemm_join_f32, transcribed, writes every
// element of every product once, d = a·bᵀ summed in k order in fp32 —
// bit for bit the fma chain — for a batch-64 policy layer's three
// projections, sizes no multiple of the tile (K past one step, one row,
// one column, K = 0), and more products than one launch takes (packed
// gemmJoin at a time, as Device.MatMulsT does). The PTX's parameter is
// the Go block's size.
func TestGemmJoinKernelInGo(t *testing.T) {
	rng := rand.New(rand.NewSource(29))
	vals := func(n int64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	for _, set := range [][][3]int64{
		{{64, 256, 64}, {192, 448, 64}, {192, 384, 64}},
		{{5, 7, 3}, {33, 40, 70}, {1, 65, 33}, {37, 1, 100}, {3, 4, 0}},
		{{2, 3, 4}, {3, 2, 5}, {4, 4, 4}, {1, 1, 1}, {9, 8, 7}, {8, 9, 6}, {31, 33, 32}, {32, 32, 32}, {2, 70, 2}, {65, 2, 3}},
	} {
		mem := newDevMem()
		type prod struct {
			d, a, b uint64
			av, bv  []float32
			m, n, k int64
		}
		var ps []prod
		for _, sh := range set {
			m, n, k := sh[0], sh[1], sh[2]
			av, bv := vals(m*k), vals(n*k)
			p := prod{a: mem.put(av, false), b: mem.put(bv, false), av: av, bv: bv, m: m, n: n, k: k}
			d := make([]float32, m*n)
			for i := range d {
				d[i] = float32(math.NaN())
			}
			p.d = mem.put(d, false)
			ps = append(ps, p)
		}
		mem.finish()
		var cs []gjCall
		for _, p := range ps {
			cs = append(cs, gjCall{d: p.d, a: p.a, b: p.b, m: p.m, n: p.n, k: p.k})
		}
		var w [gemmJoinWords]uint64
		for start := 0; start < len(cs); start += gemmJoin {
			tiles := gemmJoinPack(&w, cs[start:min(len(cs), start+gemmJoin)])
			gemmJoinEmu(mem, &w, tiles)
		}
		what := fmt.Sprintf("products %v", set)
		mem.checkGuards(t, what)
		for q, p := range ps {
			got := mem.view(p.d, int(p.m*p.n))
			for e, cnt := range mem.writesAt(p.d, int(p.m*p.n)) {
				if cnt != 1 {
					t.Fatalf("%s: product %d element %d written %d times", what, q, e, cnt)
				}
			}
			for i := int64(0); i < p.m; i++ {
				for j := int64(0); j < p.n; j++ {
					var want float32
					for kk := int64(0); kk < p.k; kk++ {
						want = fma32(p.av[i*p.k+kk], p.bv[j*p.k+kk], want)
					}
					if g := got[i*p.n+j]; g != want {
						t.Fatalf("%s: product %d d[%d, %d] = %v, want %v (the fma chain in k order)", what, q, i, j, g, want)
					}
				}
			}
		}
	}
	if n, ok := ptxStructParam(readPTX(t, "matmul.ptx"), "gemm_join_f32"); !ok || n != 8*gemmJoinWords {
		t.Fatalf("gemm_join_f32: the PTX's parameter is %d bytes (found %v), the Go block %d", n, ok, 8*gemmJoinWords)
	}
}
