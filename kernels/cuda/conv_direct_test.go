package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// The direct convolution kernels of src/conv.cu (conv_direct_f32,
// conv_direct_dx_f32, conv_direct_dw_f32), transcribed to Go statement by
// statement and run over the launch geometry conv.go gives them
// (directLanes, directDWChunks), against float64 references: the tiles,
// the index arithmetic, the lane groups and their butterfly are checked
// without a GPU. The conformance suite checks the PTX itself on one.

// dcGeom is struct Conv of src/conv.cu with the kernels' int parameters.
type dcGeom struct {
	n, cin, h, w, kh, kw, ho, wo, sh, sw, ph, pw, dh, dw int
	groups, cout                                         int
}

func (g dcGeom) String() string {
	return fmt.Sprintf("x [%d %d %d %d] w [%d %d %d %d] stride %d×%d pad %d×%d dilation %d×%d groups %d",
		g.n, g.cin, g.h, g.w, g.cout, g.cin/g.groups, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups)
}

func fma32(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

// dcSum is dc_sum: the tile's convolution at output pixel (oh, ow), the
// input from xp and the weights from wp (flat offsets).
func dcSum(acc *[directTile]float32, x, ws []float32, g dcGeom, xp, wp, cg, kdim, nc, oh, ow int) {
	*acc = [directTile]float32{}
	for ci := 0; ci < cg; ci, xp = ci+1, xp+g.h*g.w {
		for i := 0; i < g.kh; i++ {
			ih := oh*g.sh - g.ph + i*g.dh
			rin := ih >= 0 && ih < g.h
			for j := 0; j < g.kw; j, wp = j+1, wp+1 {
				iw := ow*g.sw - g.pw + j*g.dw
				var v float32
				if rin && iw >= 0 && iw < g.w {
					v = x[xp+ih*g.w+iw]
				}
				for c := 0; c < directTile; c++ {
					if c < nc {
						acc[c] = fma32(ws[wp+c*kdim], v, acc[c])
					}
				}
			}
		}
	}
}

// dcEpilogue is epilogue_act for a ReLU: max(v·scale + shift, +0), NaN
// kept.
func dcEpilogue(v, scale, shift float32) float32 {
	v = v*scale + shift
	if v > 0 || v != v {
		return v
	}
	return 0
}

// dcTile is dc_tile: sample, group, first channel and channel count of
// a thread's tile from r = e / (pixels per plane).
func dcTile(r, n, tiles, og int) (sample, gr, co0, nc int) {
	tg := r / n
	sample, gr = r%n, tg/tiles
	co0 = gr*og + (tg%tiles)*directTile
	return sample, gr, co0, min(directTile, gr*og+og-co0)
}

// dcForward is conv_direct_f32's body for every e of its grid-stride
// loop; with scale the ReLU epilogue replaces the bias.
func dcForward(y, x, ws, bias, scale, shift []float32, g dcGeom) {
	cg, og := g.cin/g.groups, g.cout/g.groups
	kdim, P := cg*g.kh*g.kw, g.ho*g.wo
	tiles := (og + directTile - 1) / directTile
	total := tiles * g.groups * g.n * P
	for e := 0; e < total; e++ {
		p := e % P
		n, gr, co0, nc := dcTile(e/P, g.n, tiles, og)
		var acc [directTile]float32
		dcSum(&acc, x, ws, g, (n*g.cin+gr*cg)*g.h*g.w, co0*kdim, cg, kdim, nc, p/g.wo, p%g.wo)
		yp := (n*g.cout+co0)*P + p
		for c := 0; c < nc; c++ {
			v := acc[c]
			if bias != nil {
				v += bias[co0+c]
			}
			if scale != nil {
				v = dcEpilogue(v, scale[co0+c], shift[co0+c])
			}
			y[yp+c*P] = v
		}
	}
}

// dcPool is conv_direct_pool_f32's body for every e (the ReLU epilogue).
func dcPool(dst, x, ws, scale, shift []float32, g dcGeom) {
	cg, og := g.cin/g.groups, g.cout/g.groups
	kdim, pwo := cg*g.kh*g.kw, g.wo/2
	PP := (g.ho / 2) * pwo
	tiles := (og + directTile - 1) / directTile
	total := tiles * g.groups * g.n * PP
	for e := 0; e < total; e++ {
		q := e % PP
		n, gr, co0, nc := dcTile(e/PP, g.n, tiles, og)
		var best [directTile]float32
		var nan [directTile]bool
		for k := 0; k < 4; k++ {
			var acc [directTile]float32
			dcSum(&acc, x, ws, g, (n*g.cin+gr*cg)*g.h*g.w, co0*kdim, cg, kdim, nc, 2*(q/pwo)+k>>1, 2*(q%pwo)+k&1)
			for c := 0; c < nc; c++ {
				v := dcEpilogue(acc[c], scale[co0+c], shift[co0+c])
				if k == 0 || (!nan[c] && (v > best[c] || v != v)) {
					best[c], nan[c] = v, v != v
				}
			}
		}
		dp := (n*g.cout+co0)*PP + q
		for c := 0; c < nc; c++ {
			dst[dp+c*PP] = best[c]
		}
	}
}

// dcInputGrad is conv_direct_dx_f32's body for every e.
func dcInputGrad(dx, dy, ws []float32, g dcGeom) {
	cg, og := g.cin/g.groups, g.cout/g.groups
	kk, P := g.kh*g.kw, g.ho*g.wo
	tiles := (cg + directTile - 1) / directTile
	total := tiles * g.groups * g.n * g.h * g.w
	for e := 0; e < total; e++ {
		q, r := e%(g.h*g.w), e/(g.h*g.w)
		n, tg := r%g.n, r/g.n
		gr, cl0 := tg/tiles, (tg%tiles)*directTile
		nc := min(directTile, cg-cl0)
		ih, iw := q/g.w, q%g.w
		var acc [directTile]float32
		for co := gr * og; co < gr*og+og; co++ {
			dyp := (n*g.cout + co) * P
			wp := (co*cg + cl0) * kk
			for i := 0; i < g.kh; i++ {
				th := ih + g.ph - i*g.dh
				if th < 0 || th%g.sh != 0 || th/g.sh >= g.ho {
					continue
				}
				for j := 0; j < g.kw; j++ {
					tw := iw + g.pw - j*g.dw
					if tw < 0 || tw%g.sw != 0 || tw/g.sw >= g.wo {
						continue
					}
					gv := dy[dyp+(th/g.sh)*g.wo+tw/g.sw]
					for c := 0; c < directTile; c++ {
						if c < nc {
							acc[c] = fma32(ws[wp+c*kk+i*g.kw+j], gv, acc[c])
						}
					}
				}
			}
		}
		dp := ((n*g.cin+gr*cg+cl0)*g.h+ih)*g.w + iw
		for c := 0; c < nc; c++ {
			dx[dp+c*g.h*g.w] = acc[c]
		}
	}
}

// dcWeightGrad runs conv_direct_dw_f32 block by block over its grid (n,
// chunks) of directThreads threads: each round computes every thread's
// partial, then the xor butterfly within lane groups (a shuffle reads
// the partner's value from before the step), then lane 0 writes. writes
// counts the writes of each output.
func dcWeightGrad(per, x, dy []float32, g dcGeom, lanes, chunks int, writes []int) {
	cg, og := g.cin/g.groups, g.cout/g.groups
	kdim, P := cg*g.kh*g.kw, g.ho*g.wo
	M := g.cout * kdim
	G := directThreads / lanes
	a := make([]float32, directThreads)
	next := make([]float32, directThreads)
	for n := 0; n < g.n; n++ {
		sdy := dy[n*g.cout*P : (n+1)*g.cout*P]
		sx := x[n*g.cin*g.h*g.w : (n+1)*g.cin*g.h*g.w]
		for by := 0; by < chunks; by++ {
			for base := by * G; base < M; base += G * chunks {
				for t := 0; t < directThreads; t++ {
					gi, lane := t/lanes, t%lanes
					o := base + gi
					a[t] = 0
					if o >= M {
						continue
					}
					co, k := o/kdim, o%kdim
					ci, i, j := (co/og)*cg+k/(g.kh*g.kw), (k/g.kw)%g.kh, k%g.kw
					for p := lane; p < P; p += lanes {
						ih := (p/g.wo)*g.sh - g.ph + i*g.dh
						iw := (p%g.wo)*g.sw - g.pw + j*g.dw
						var v float32
						if ih >= 0 && ih < g.h && iw >= 0 && iw < g.w {
							v = sx[ci*g.h*g.w+ih*g.w+iw]
						}
						a[t] = fma32(sdy[co*P+p], v, a[t])
					}
				}
				for off := lanes >> 1; off > 0; off >>= 1 {
					for t := range a {
						if t/32 != (t^off)/32 {
							panic("a shuffle partner outside the warp")
						}
						next[t] = a[t] + a[t^off]
					}
					a, next = next, a
				}
				for t := 0; t < directThreads; t++ {
					if o := base + t/lanes; o < M && t%lanes == 0 {
						per[n*M+o] = a[t]
						writes[n*M+o]++
					}
				}
			}
		}
	}
}

// dcWeightGradTail runs conv_direct_dw_f32's tail for each chunk, as its
// last block does: thread q < G of a round sums output base + q over
// the n samples in sum_batches' order (sumRows partials of the rows
// r, r + sumRows, …, then the partials in order) into dw, or adds it
// with acc. writes counts the outputs' sums.
func dcWeightGradTail(dw, per []float32, n, M, lanes, chunks int, acc bool, writes []int) {
	G := directThreads / lanes
	for by := 0; by < chunks; by++ {
		for base := by * G; base < M; base += G * chunks {
			for q := 0; q < directThreads; q++ {
				o := base + q
				if q >= G || o >= M {
					continue
				}
				var t float32
				for r := 0; r < sumRows; r++ {
					var a float32
					for b := r; b < n; b += sumRows {
						a += per[b*M+o]
					}
					if r == 0 {
						t = a
					} else {
						t += a
					}
				}
				if acc {
					dw[o] += t
				} else {
					dw[o] = t
				}
				writes[o]++
			}
		}
	}
}

// sumBatchesGo is sum_batches in Go: column j's thread (x, y) sums rows
// y, y + sumRows, … in order, then the sumRows partials are added in y
// order; with acc the sum is added to d[j].
func sumBatchesGo(d, s []float32, nb, m int, acc bool) {
	for j := 0; j < m; j++ {
		var part [sumRows]float32
		for y := 0; y < sumRows; y++ {
			var a float32
			for b := y; b < nb; b += sumRows {
				a += s[b*m+j]
			}
			part[y] = a
		}
		t := part[0]
		for y := 1; y < sumRows; y++ {
			t += part[y]
		}
		if acc {
			d[j] += t
		} else {
			d[j] = t
		}
	}
}

// dcReference returns the forward (with bias), the input gradient and
// the per-sample weight gradients [n, cout, kdim] of g in float64.
func dcReference(g dcGeom, x, w, bias, dy []float32) (y, dx, per []float64) {
	cg, og := g.cin/g.groups, g.cout/g.groups
	kdim, P := cg*g.kh*g.kw, g.ho*g.wo
	y = make([]float64, g.n*g.cout*P)
	dx = make([]float64, len(x))
	per = make([]float64, g.n*g.cout*kdim)
	for n := 0; n < g.n; n++ {
		for co := 0; co < g.cout; co++ {
			gr := co / og
			for p := 0; p < P; p++ {
				yi := (n*g.cout+co)*P + p
				y[yi] = float64(bias[co])
				for ci := 0; ci < cg; ci++ {
					for i := 0; i < g.kh; i++ {
						for j := 0; j < g.kw; j++ {
							ih, iw := (p/g.wo)*g.sh-g.ph+i*g.dh, (p%g.wo)*g.sw-g.pw+j*g.dw
							if ih < 0 || ih >= g.h || iw < 0 || iw >= g.w {
								continue
							}
							xi := ((n*g.cin+gr*cg+ci)*g.h+ih)*g.w + iw
							k := (ci*g.kh+i)*g.kw + j
							y[yi] += float64(w[co*kdim+k]) * float64(x[xi])
							dx[xi] += float64(w[co*kdim+k]) * float64(dy[yi])
							per[(n*g.cout+co)*kdim+k] += float64(dy[yi]) * float64(x[xi])
						}
					}
				}
			}
		}
	}
	return y, dx, per
}

// TestDirectConvKernelsInGo: the three direct kernels, transcribed, give
// the reference convolution and both gradients (within fp32 rounding) on
// W4's layers and on strides, padding, dilation, groups, 1×1 and
// non-square kernels, tiles of channels that do not fill DC_TILE, and
// every lane count directLanes picks; the weight gradient's grid writes
// every output exactly once.
func TestDirectConvKernelsInGo(t *testing.T) {
	out := func(in, k, s, p, d int) int { return (in+2*p-d*(k-1)-1)/s + 1 }
	cases := []dcGeom{
		{n: 3, cin: 1, h: 28, w: 28, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, groups: 1, cout: 8},  // W4 block 1
		{n: 3, cin: 8, h: 14, w: 14, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, groups: 1, cout: 16}, // W4 block 2
		{n: 3, cin: 16, h: 7, w: 7, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, groups: 1, cout: 32},  // W4 block 3
		{n: 2, cin: 4, h: 7, w: 7, kh: 3, kw: 3, sh: 2, sw: 2, ph: 1, pw: 1, dh: 1, dw: 1, groups: 1, cout: 6},    // stride 2
		{n: 2, cin: 4, h: 6, w: 6, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, groups: 2, cout: 6},    // groups
		{n: 1, cin: 3, h: 9, w: 9, kh: 3, kw: 3, sh: 1, sw: 1, ph: 2, pw: 2, dh: 2, dw: 2, groups: 1, cout: 4},    // dilation
		{n: 3, cin: 5, h: 4, w: 4, kh: 1, kw: 1, sh: 1, sw: 1, dh: 1, dw: 1, groups: 1, cout: 8},                  // 1×1
		{n: 2, cin: 3, h: 9, w: 8, kh: 2, kw: 3, sh: 2, sw: 1, pw: 1, dh: 1, dw: 1, groups: 1, cout: 4},           // 2×3, stride 2×1
		{n: 2, cin: 11, h: 5, w: 5, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, groups: 1, cout: 13},  // partial tiles
		{n: 2, cin: 18, h: 6, w: 6, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, groups: 3, cout: 27},  // groups, partial tiles
		{n: 1, cin: 2, h: 16, w: 24, kh: 3, kw: 3, sh: 1, sw: 1, ph: 1, pw: 1, dh: 1, dw: 1, groups: 1, cout: 3},  // 384 pixels: 32 lanes
		{n: 4, cin: 2, h: 2, w: 3, kh: 2, kw: 2, sh: 1, sw: 1, dh: 1, dw: 1, groups: 1, cout: 3},                  // 2 pixels: 1 lane
		{n: 2, cin: 2, h: 5, w: 5, kh: 5, kw: 5, sh: 1, sw: 1, ph: 0, pw: 0, dh: 1, dw: 1, groups: 1, cout: 2},    // 1 output pixel
	}
	rng := rand.New(rand.NewSource(5))
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	seenLanes := map[int]bool{}
	for _, g := range cases {
		g.ho, g.wo = out(g.h, g.kh, g.sh, g.ph, g.dh), out(g.w, g.kw, g.sw, g.pw, g.dw)
		cg := g.cin / g.groups
		kdim, P := cg*g.kh*g.kw, g.ho*g.wo
		if g.cout*kdim > directWeights || g.cout*P+g.cin*g.h*g.w > directSample {
			t.Fatalf("%v: beyond the direct path's limits", g)
		}
		x, w, bias, dy := fill(g.n*g.cin*g.h*g.w), fill(g.cout*kdim), fill(g.cout), fill(g.n*g.cout*P)
		wantY, wantDx, wantPer := dcReference(g, x, w, bias, dy)

		y := make([]float32, len(wantY))
		dcForward(y, x, w, bias, nil, nil, g)
		closeTo(t, g.String()+" forward", y, wantY)

		// The epilogues: ReLU(v·scale + shift), then its 2×2 max pool,
		// against the reference without the bias.
		scale, shift := fill(g.cout), fill(g.cout)
		act := make([]float64, len(wantY))
		for i, v := range wantY {
			co := (i / P) % g.cout
			act[i] = math.Max((v-float64(bias[co]))*float64(scale[co])+float64(shift[co]), 0)
		}
		dcForward(y, x, w, nil, scale, shift, g)
		closeTo(t, g.String()+" forward with the affine ReLU epilogue", y, act)
		if g.ho >= 2 && g.wo >= 2 {
			pho, pwo := g.ho/2, g.wo/2
			want := make([]float64, g.n*g.cout*pho*pwo)
			for i := range want {
				pl, q := i/(pho*pwo), i%(pho*pwo)
				oh, ow := 2*(q/pwo), 2*(q%pwo)
				want[i] = math.Inf(-1)
				for k := 0; k < 4; k++ {
					want[i] = math.Max(want[i], act[pl*P+(oh+k/2)*g.wo+ow+k%2])
				}
			}
			pooled := make([]float32, len(want))
			dcPool(pooled, x, w, scale, shift, g)
			closeTo(t, g.String()+" pooled forward", pooled, want)
		}
		dx := make([]float32, len(x))
		dcInputGrad(dx, dy, w, g)
		closeTo(t, g.String()+" input gradient", dx, wantDx)

		lanes := directLanes(P)
		seenLanes[lanes] = true
		per := make([]float32, len(wantPer))
		writes := make([]int, len(wantPer))
		dcWeightGrad(per, x, dy, g, lanes, directDWChunks(g.n, g.cout*kdim, 132, lanes), writes)
		closeTo(t, fmt.Sprintf("%v weight gradient (%d lanes)", g, lanes), per, wantPer)
		for i, c := range writes {
			if c != 1 {
				t.Fatalf("%v: weight gradient output %d written %d times", g, i, c)
			}
		}
		// The launch's tail: every output summed over the samples once,
		// bit for bit as sum_batches sums it, written or added.
		M := g.cout * kdim
		chunks := directDWChunks(g.n, M, 132, lanes)
		for _, acc := range []bool{false, true} {
			dw, want := make([]float32, M), make([]float32, M)
			for o := range dw {
				dw[o] = float32(o%7) - 3
				want[o] = dw[o]
			}
			tailWrites := make([]int, M)
			dcWeightGradTail(dw, per, g.n, M, lanes, chunks, acc, tailWrites)
			sumBatchesGo(want, per, g.n, M, acc)
			for o := range dw {
				if tailWrites[o] != 1 {
					t.Fatalf("%v: the tail sums output %d %d times", g, o, tailWrites[o])
				}
				if math.Float32bits(dw[o]) != math.Float32bits(want[o]) {
					t.Fatalf("%v acc %v: the tail's output %d is %v, sum_batches' %v", g, acc, o, dw[o], want[o])
				}
			}
		}
	}
	for _, l := range []int{1, 8, 32} {
		if !seenLanes[l] {
			t.Errorf("no case ran %d lanes (ran %v)", l, seenLanes)
		}
	}
}

// closeTo fails unless got is want within fp32 rounding of sums of a few
// hundred products.
func closeTo(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > 1e-4*(1+math.Abs(want[i])) {
			t.Fatalf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestDirectLanesAndChunks: the lane counts are powers of two up to 32
// that leave a lane about eight pixels, and the chunks cover the outputs
// without a block of nothing but idle groups.
func TestDirectLanesAndChunks(t *testing.T) {
	for _, c := range []struct{ pixels, lanes int }{{1, 1}, {8, 1}, {9, 2}, {49, 8}, {196, 32}, {784, 32}, {100000, 32}} {
		if got := directLanes(c.pixels); got != c.lanes {
			t.Errorf("directLanes(%d) = %d, want %d", c.pixels, got, c.lanes)
		}
	}
	for _, c := range []struct{ n, m, sms, lanes, want int }{
		{128, 72, 132, 32, 5},  // W4 block 1: 8 outputs a round, 9 rounds, 5 chunks (4·132/128 rounded up)
		{128, 4608, 132, 8, 5}, // W4 block 3
		{1, 72, 132, 32, 9},    // one sample: as many chunks as rounds
		{1024, 72, 132, 32, 1}, // many samples: one chunk each
		{0, 72, 132, 32, 0},    // no samples
		{128, 0, 132, 32, 0},   // no outputs
	} {
		if got := directDWChunks(c.n, c.m, c.sms, c.lanes); got != c.want {
			t.Errorf("directDWChunks(%d, %d, %d, %d) = %d, want %d", c.n, c.m, c.sms, c.lanes, got, c.want)
		}
	}
}
