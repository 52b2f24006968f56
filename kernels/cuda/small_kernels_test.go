package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/esper-go/esper/kernels"
)

// linear_act_ln_f32 (src/norm.cu), linear_bwd_small_f32 (src/matmul.cu)
// and clip_small_f32 (src/optim.cu) transcribed to Go statement by
// statement and run over the launches their Go callers make
// (linearActLNGeom; grid1D over linearBwdSmallTotal; one block of
// clipSmallThreads), against float64 references. They run without a
// GPU; the conformance suite checks the PTX itself on one.

// linearActLNEmu is linear_act_ln_f32 over grid blocks of block threads
// with shmem bytes of dynamic shared memory (b, g and s 0 for null).
func linearActLNEmu(mem *devMem, grid, block, shmem int, y, x, w, b uint64, act int32, g, s uint64, n, k int64, eps float32) {
	for bx := 0; bx < grid; bx++ {
		linearActLNRowEmu(mem, block, shmem, y, x, w, b, act, g, s, n, k, eps, int64(bx))
	}
}

// linearActLNRowEmu is linear_act_ln_row: row i in a block of block
// threads with shmem bytes of dynamic shared memory, its x row x's row i.
func linearActLNRowEmu(mem *devMem, block, shmem int, y, x, w, b uint64, act int32, g, s uint64, n, k int64, eps float32, i int64) {
	linearActLNRowAtEmu(mem, block, shmem, y, func(q int64) float32 { return mem.ld(x, i*k+q) }, w, b, act, g, s, n, k, eps, i)
}

// linearActLNRowAtEmu is linear_act_ln_row with its x row's element q
// xr(q) (a row in shared memory, for a gathered input).
func linearActLNRowAtEmu(mem *devMem, block, shmem int, y uint64, xr func(q int64) float32, w, b uint64, act int32, g, s uint64, n, k int64, eps float32, i int64) {
	B := int64(block)
	{
		v := make([]float32, shmem/4) // extern __shared__ float v[]: uninitialised
		for j := range v {
			v[j] = float32(math.NaN())
		}
		part := nanPart[float32]() // block_sum's static part
		for tid := int64(0); tid < B; tid++ {
			for j := tid; j < n; j += B {
				var a float32
				for q := int64(0); q < k; q++ {
					a = fma32(xr(q), mem.ld(w, j*k+q), a)
				}
				if b != 0 {
					a += mem.ld(b, j)
				}
				v[j] = unaryF(act, a)
			}
		}
		// __syncthreads()
		t := make([]float32, B)
		for tid := int64(0); tid < B; tid++ {
			for j := tid; j < n; j += B {
				t[tid] += v[j]
			}
		}
		mu := blockSumEmu(t, part)
		for tid := range mu {
			mu[tid] /= float32(n)
		}
		q := make([]float32, B)
		for tid := int64(0); tid < B; tid++ {
			for j := tid; j < n; j += B {
				d := v[j] - mu[tid]
				q[tid] = fma32(d, d, q[tid]) // q += d·d: an fma in the PTX
			}
		}
		r := blockSumEmu(q, part)
		for tid := range r {
			r[tid] = rsqrtf(r[tid]/float32(n) + eps)
		}
		for tid := int64(0); tid < B; tid++ {
			for j := tid; j < n; j += B {
				o := (v[j] - mu[tid]) * r[tid]
				if g != 0 {
					o *= mem.ld(g, j)
				}
				if s != 0 {
					o += mem.ld(s, j)
				}
				mem.st(y, i*n+j, o)
			}
		}
	}
}

// TestLinearActLayerNormKernelInGo: linear_act_ln_f32, transcribed and
// run over linearActLNGeom's launch, writes LayerNorm(act(x·wᵀ + b))
// with the gain and shift as the float64 definition says (biased
// variance), every output once: W2's encoder (GELU erf), lnFusedN
// outputs from lnFusedK inputs, outputs past the block (300) and fewer
// than a warp, one output, K = 0, one row, with and without the bias,
// the gain and the shift, and every activation whose domain is the
// reals.
func TestLinearActLayerNormKernelInGo(t *testing.T) {
	type lnCase struct {
		m, k, n         int
		bias, gain, sft bool
		act             kernels.UnaryOp
	}
	cases := []lnCase{
		{m: 6, k: 31, n: 256, bias: true, gain: true, sft: true, act: kernels.GeluErf}, // W2's encoder
		{m: 2, k: lnFusedK, n: lnFusedN, bias: true, gain: true, sft: true, act: kernels.GeluTanh},
		{m: 4, k: 7, n: 300, gain: true, act: kernels.Silu},
		{m: 5, k: 3, n: 5, sft: true, act: kernels.Tanh},
		{m: 3, k: 4, n: 1, bias: true, gain: true, sft: true, act: kernels.Relu},
		{m: 2, k: 0, n: 10, bias: true, gain: true, sft: true, act: kernels.Sigmoid},
		{m: 1, k: 64, n: 33, bias: true, act: kernels.Softplus},
	}
	for _, act := range []kernels.UnaryOp{kernels.Neg, kernels.Abs, kernels.Exp, kernels.Square, kernels.Sign, kernels.Relu,
		kernels.GeluTanh, kernels.GeluErf, kernels.Silu, kernels.Sigmoid, kernels.Tanh, kernels.Softplus} {
		cases = append(cases, lnCase{m: 2, k: 9, n: 40, bias: true, gain: true, sft: true, act: act})
	}
	rng := rand.New(rand.NewSource(17))
	normals := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(s * rng.NormFloat64())
		}
		return v
	}
	const eps = 1e-5
	for _, c := range cases {
		m, k, n := c.m, c.k, c.n
		what := fmt.Sprintf("x [%d %d] w [%d %d] %v bias %v gain %v shift %v", m, k, n, k, c.act, c.bias, c.gain, c.sft)
		if !linearActLNFits(n, k) {
			t.Fatalf("%s: beyond one linear_act_ln_f32 launch", what)
		}
		x, w := normals(m*k, 1), normals(n*k, 1/math.Sqrt(float64(max(k, 1))))
		bv, gv, sv := normals(n, 0.5), normals(n, 1), normals(n, 1)
		mem := newDevMem()
		px, pw, py := mem.put(x, false), mem.put(w, false), mem.put(make([]float32, m*n), false)
		var pb, pg, ps uint64
		if c.bias {
			pb = mem.put(bv, false)
		}
		if c.gain {
			pg = mem.put(gv, false)
		}
		if c.sft {
			ps = mem.put(sv, false)
		}
		mem.finish()
		grid, block, shmem := linearActLNGeom(m, n)
		if grid != m || block%32 != 0 || block > 1024 || shmem < 4*n {
			t.Fatalf("%s: a grid of %d blocks of %d threads with %d bytes of shared memory: want a block of whole warps per row and the row's %d floats", what, grid, block, shmem, n)
		}
		linearActLNEmu(mem, grid, block, shmem, py, px, pw, pb, int32(c.act), pg, ps, int64(n), int64(k), float32(eps))
		mem.checkGuards(t, what)
		y := mem.view(py, m*n)
		for i, cnt := range mem.writesAt(py, m*n) {
			if cnt != 1 {
				t.Fatalf("%s: output %d written %d times", what, i, cnt)
			}
		}
		for i := 0; i < m; i++ {
			a := make([]float64, n)
			var mean float64
			for j := range a {
				if c.bias {
					a[j] = float64(bv[j])
				}
				for q := 0; q < k; q++ {
					a[j] += float64(x[i*k+q]) * float64(w[j*k+q])
				}
				a[j] = unary64(int32(c.act), a[j])
				mean += a[j]
			}
			mean /= float64(n)
			var vr float64
			for _, v := range a {
				vr += (v - mean) * (v - mean)
			}
			r := 1 / math.Sqrt(vr/float64(n)+eps)
			for j := range a {
				want := (a[j] - mean) * r
				if c.gain {
					want *= float64(gv[j])
				}
				if c.sft {
					want += float64(sv[j])
				}
				if !near(y[i*n+j], want, 0, 1e-4) {
					t.Fatalf("%s: y[%d, %d] = %v, want %v", what, i, j, y[i*n+j], want)
				}
			}
		}
	}
	if linearActLNFits(lnFusedN+1, 1) || linearActLNFits(1, lnFusedK+1) || !linearActLNFits(lnFusedN, lnFusedK) {
		t.Errorf("linearActLNFits: want n ≤ %d and k ≤ %d", lnFusedN, lnFusedK)
	}
}

// linearBwdSmallEmu is linear_bwd_small_f32 over grid blocks of block
// threads (db 0 for null; acc its acc flag).
func linearBwdSmallEmu(mem *devMem, grid, block int64, dx, dw, db, g, x, w uint64, m, n, k int64, acc bool) {
	grads := n * k
	if db != 0 {
		grads += n
	}
	for bx := int64(0); bx < grid; bx++ {
		for tx := int64(0); tx < block; tx++ {
			for e := bx*block + tx; e < grads+m*k; e += block * grid { // GRID_STRIDE
				if e < grads {
					linearGradAtEmu(mem, dw, db, g, x, m, n, k, e)
					continue
				}
				q := e - grads
				i, p := q/k, q%k
				var v float32
				for j := int64(0); j < n; j++ {
					v = fma32(mem.ld(g, i*n+j), mem.ld(w, j*k+p), v)
				}
				if acc {
					v = mem.ld(dx, q) + v
				}
				mem.st(dx, q, v)
			}
		}
	}
}

// TestLinearBackwardSmallKernelInGo: linear_bwd_small_f32, transcribed
// and run over launch1D's grid (grid1D of linearBwdSmallTotal, on 132
// SMs and on 1 and 3, whose grids of at most 8 and 24 blocks make the
// threads stride), writes dx = g·w (or with acc, LinearBackwardAccumulate,
// adds it to dx) and adds gᵀ·x to dw and the column sums of g to db, each
// element once, as the float64 definition says:
// W1's layer, M = gemmSmallK, N = gemmSmallK with K = 256 (M·N·K =
// gemmSmallMACs), odd sizes, no rows, no outputs, no inputs, no bias.
func TestLinearBackwardSmallKernelInGo(t *testing.T) {
	cases := []struct {
		m, n, k int
		bias    bool
	}{
		{4, 4, 16, true}, // W1
		{gemmSmallK, 16, 16, true},
		{1, gemmSmallK, 256, false},
		{37, 33, 7, true},
		{0, 3, 4, true},
		{3, 0, 5, true},
		{3, 4, 0, true},
		{5, 6, 3, false},
	}
	rng := rand.New(rand.NewSource(23))
	normals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	for _, sms := range []int{132, 1, 3} {
		for ci, c := range cases {
			m, n, k := c.m, c.n, c.k
			acc := (ci+sms)%2 == 1 // each case both ways over the SM counts
			what := fmt.Sprintf("g [%d %d] x [%d %d] bias %v acc %v on %d SMs", m, n, m, k, c.bias, acc, sms)
			if !linearBwdSmallFits(m, n, k) {
				t.Fatalf("%s: beyond one linear_bwd_small_f32 launch", what)
			}
			total := linearBwdSmallTotal(m, n, k, c.bias)
			if total == 0 {
				continue // LinearBackwardAdd launches nothing
			}
			g, x, w, dw0, db0, dx0 := normals(m*n), normals(m*k), normals(n*k), normals(n*k), normals(n), normals(m*k)
			if !acc {
				clear(dx0) // written, not read
			}
			mem := newDevMem()
			pg, px, pw := mem.put(g, false), mem.put(x, false), mem.put(w, false)
			pdx, pdw := mem.put(dx0, false), mem.put(dw0, false)
			var pdb uint64
			if c.bias {
				pdb = mem.put(db0, false)
			}
			mem.finish()
			linearBwdSmallEmu(mem, grid1D(total, sms), blockSize, pdx, pdw, pdb, pg, px, pw, int64(m), int64(n), int64(k), acc)
			mem.checkGuards(t, what)
			check := func(s string, p uint64, want, scale []float64) {
				t.Helper()
				got := mem.view(p, len(want))
				for e := range want {
					if !near(got[e], want[e], scale[e], 1e-5) {
						t.Fatalf("%s: %s[%d] = %v, want %v", what, s, e, got[e], want[e])
					}
				}
				for e, cnt := range mem.writesAt(p, len(want)) {
					if cnt != 1 {
						t.Fatalf("%s: %s[%d] written %d times", what, s, e, cnt)
					}
				}
			}
			dx, dxs := make([]float64, m*k), make([]float64, m*k)
			for e, v := range dx0 {
				dx[e], dxs[e] = float64(v), math.Abs(float64(v))
			}
			for i := 0; i < m; i++ {
				for p := 0; p < k; p++ {
					for j := 0; j < n; j++ {
						dx[i*k+p] += float64(g[i*n+j]) * float64(w[j*k+p])
						dxs[i*k+p] += math.Abs(float64(g[i*n+j]) * float64(w[j*k+p]))
					}
				}
			}
			check("dx", pdx, dx, dxs)
			dw, dws := make([]float64, n*k), make([]float64, n*k)
			for e := range dw {
				dw[e], dws[e] = float64(dw0[e]), math.Abs(float64(dw0[e]))
				j, p := e/k, e%k
				for i := 0; i < m; i++ {
					dw[e] += float64(g[i*n+j]) * float64(x[i*k+p])
					dws[e] += math.Abs(float64(g[i*n+j]) * float64(x[i*k+p]))
				}
			}
			check("dw", pdw, dw, dws)
			if c.bias {
				db, dbs := make([]float64, n), make([]float64, n)
				for j := range db {
					db[j], dbs[j] = float64(db0[j]), math.Abs(float64(db0[j]))
					for i := 0; i < m; i++ {
						db[j] += float64(g[i*n+j])
						dbs[j] += math.Abs(float64(g[i*n+j]))
					}
				}
				check("db", pdb, db, dbs)
			}
		}
	}
	for _, s := range [][3]int{{gemmSmallK + 1, 1, 1}, {1, gemmSmallK + 1, 1}, {2, gemmSmallK, 129}, {gemmSmallK, 0, 257}} {
		if linearBwdSmallFits(s[0], s[1], s[2]) {
			t.Errorf("linearBwdSmallFits(m %d, n %d, k %d): want false", s[0], s[1], s[2])
		}
	}
	if !linearBwdSmallFits(gemmSmallK, 0, 256) {
		t.Errorf("linearBwdSmallFits(m %d, n 0, k 256): want true", gemmSmallK)
	}
}

// clipSmallEmu is clip_small_f32 run by one block of threads threads.
func clipSmallEmu(mem *devMem, threads int, norm, x uint64, n int64, maxNorm, eps float32) {
	coefSh := float32(math.NaN()) // __shared__ float coef_sh
	B := int64(threads)
	acc := make([]float64, B)
	for tid := int64(0); tid < B; tid++ {
		for i := tid; i < n; i += B {
			xi := float64(mem.ld(x, i))
			acc[tid] += xi * xi
		}
	}
	acc = blockSumEmu(acc, nanPart[float64]())
	{ // thread 0
		nv := float32(math.Sqrt(acc[0]))
		mem.st(norm, 0, nv)
		quo := maxNorm / (nv + eps)
		if quo != quo || quo < 1 {
			coefSh = quo
		} else {
			coefSh = 1
		}
	}
	// __syncthreads()
	for tid := int64(0); tid < B; tid++ {
		k := coefSh
		for i := tid; i < n; i += B {
			mem.st(x, i, mem.ld(x, i)*k)
		}
	}
}

// TestClipSmallKernelInGo: clip_small_f32, transcribed and run as
// ClipByNorm launches it (one block of clipSmallThreads for up to
// clipSmall elements), writes the L2 norm and scales x by min(1,
// max/(norm + eps)) as the float64 definition says, every element once
// and x untouched where the coefficient is 1: sizes from 1 to
// clipSmall about the block's multiples, clipped and not, squares past
// fp32's range (1e30) and below it (1e-30), all zeros (a NaN
// coefficient for a zero max norm and eps, as the kernel says), an
// infinity and a NaN.
func TestClipSmallKernelInGo(t *testing.T) {
	type clipCase struct {
		n             int
		scale         float64
		maxNorm, eps  float64
		zero, inf, na bool
	}
	var cases []clipCase
	for _, n := range []int{1, 31, clipSmallThreads - 1, clipSmallThreads, clipSmallThreads + 1, 5000, clipSmall} {
		cases = append(cases, clipCase{n: n, scale: 1, maxNorm: 0.5, eps: 1e-6}, clipCase{n: n, scale: 1, maxNorm: 1e6, eps: 1e-6})
	}
	cases = append(cases,
		clipCase{n: 3000, scale: 1e30, maxNorm: 1, eps: 1e-6},
		clipCase{n: 3000, scale: 1e-30, maxNorm: 1e-29, eps: 0},
		clipCase{n: 100, zero: true, maxNorm: 1, eps: 1e-6},
		clipCase{n: 100, zero: true, maxNorm: 0, eps: 0},
		clipCase{n: 2000, scale: 1, inf: true, maxNorm: 1, eps: 1e-6},
		clipCase{n: 2000, scale: 1, na: true, maxNorm: 1, eps: 1e-6},
	)
	rng := rand.New(rand.NewSource(29))
	for _, c := range cases {
		what := fmt.Sprintf("%d elements of scale %g, max norm %g, eps %g (zero %v inf %v NaN %v)", c.n, c.scale, c.maxNorm, c.eps, c.zero, c.inf, c.na)
		if c.n > clipSmall {
			t.Fatalf("%s: beyond one clip_small_f32 launch", what)
		}
		x := make([]float32, c.n)
		for i := range x {
			if !c.zero {
				x[i] = float32(c.scale * rng.NormFloat64())
			}
		}
		if c.inf {
			x[c.n/2] = float32(math.Inf(1))
		}
		if c.na {
			x[c.n/3] = float32(math.NaN())
		}
		mem := newDevMem()
		pn, px := mem.put([]float32{float32(math.NaN())}, false), mem.put(append([]float32(nil), x...), false)
		mem.finish()
		if clipSmallThreads%32 != 0 || clipSmallThreads > 1024 {
			t.Fatalf("a block of %d threads: block_sum_d wants whole warps, at most 32", clipSmallThreads)
		}
		clipSmallEmu(mem, clipSmallThreads, pn, px, int64(c.n), float32(c.maxNorm), float32(c.eps))
		mem.checkGuards(t, what)

		var sq float64
		for _, v := range x {
			sq += float64(v) * float64(v)
		}
		norm := math.Sqrt(sq)
		if got := mem.view(pn, 1)[0]; !relNear(got, norm, 1e-6) {
			t.Fatalf("%s: norm %v, want %v", what, got, norm)
		}
		// The coefficient as the kernel forms it in fp32 (from the
		// reference norm).
		quo := float32(c.maxNorm) / (float32(norm) + float32(c.eps))
		coef := float32(1)
		if quo != quo || quo < 1 {
			coef = quo
		}
		got := mem.view(px, c.n)
		for i, v := range x {
			want := float64(v) * float64(coef)
			if coef == 1 && math.Float32bits(got[i]) != math.Float32bits(v) {
				t.Fatalf("%s: x[%d] = %v, want it untouched (%v)", what, i, got[i], v)
			}
			if !relNear(got[i], want, 1e-6) {
				t.Fatalf("%s: x[%d] = %v, want %v", what, i, got[i], want)
			}
		}
		if n := mem.writesAt(pn, 1)[0]; n != 1 {
			t.Fatalf("%s: the norm written %d times", what, n)
		}
		for i, n := range mem.writesAt(px, c.n) {
			if n != 1 {
				t.Fatalf("%s: x[%d] written %d times", what, i, n)
			}
		}
	}
}

// relNear reports whether got is want within rel of |want| (for values
// of any magnitude), NaN only where want is NaN, an infinity only where
// want is that infinity.
func relNear(got float32, want, rel float64) bool {
	if math.IsNaN(want) || math.IsInf(want, 0) {
		return near(got, want, 0, 0)
	}
	return math.Abs(float64(got)-want) <= rel*math.Abs(want)
}

// linearActLNJoinEmu is linear_act_ln_join_f32 over the launch
// LinearActLayerNorms makes for w: a block per row of all the calls,
// routed to its call as the kernel routes it; a call with a gathered
// input gathers its row first (gather_in_at, into the shared memory past
// its n outputs, which must fit the launch's).
func linearActLNJoinEmu(mem *devMem, w *[lnJoinWords]uint64, rows, widest int64) {
	_, block, shmem := linearActLNGeom(int(rows), int(widest))
	n := int(w[0])
	for bx := int64(0); bx < rows; bx++ {
		i, k := bx, 0
		for k+1 < n && i >= int64(w[1+k*lnArgsWords+10]) {
			i -= int64(w[1+k*lnArgsWords+10])
			k++
		}
		a := w[1+k*lnArgsWords:]
		eps := math.Float32frombits(uint32(a[9]))
		if in := int64(a[11]); in > 0 {
			g := w[1+lnJoin*lnArgsWords+(in-1)*gatherInWords:]
			cols := int64(a[8])
			if 4*(int64(a[7])+cols) > int64(shmem) {
				panic(fmt.Sprintf("a gathered row of %d past %d outputs in %d bytes of shared memory", cols, a[7], shmem))
			}
			row := make([]float32, cols)
			for q := range row {
				row[q] = gatherInAtMem(g, mem, i, int64(q))
			}
			linearActLNRowAtEmu(mem, block, shmem, a[0], func(q int64) float32 { return row[q] }, a[2], a[3], int32(a[6]), a[4], a[5],
				int64(a[7]), cols, eps, i)
			continue
		}
		linearActLNRowEmu(mem, block, shmem, a[0], a[1], a[2], a[3], int32(a[6]), a[4], a[5], int64(a[7]), int64(a[8]), eps, i)
	}
}

// gatherInAtMem is gatherInAt over mem (x fp32, the CSR int64).
func gatherInAtMem(in []uint64, mem *devMem, i, j int64) float32 {
	return gatherInAt(in, mem.ld, func(p uint64) []int64 { return mem.i64[p] }, i, j)
}

// TestLinearActLayerNormJoinInGo: calls of different rows, widths and
// operands (W2's three encoders, one without bias, gain or shift), and
// one whose input is gathered (own features beside the mean of
// embedding rows over a CSR), packed by lnJoinPack and run as
// linear_act_ln_join_f32 runs them, write every output bit for bit as
// each call's own linear_act_ln_f32 launch does on the input written
// out, and nothing else; the parameter block has the size the PTX
// declares. It runs without a GPU.
func TestLinearActLayerNormJoinInGo(t *testing.T) {
	if n, ok := ptxStructParam(readPTX(t, "norm.ptx"), "linear_act_ln_join_f32"); !ok || n != 8*lnJoinWords {
		t.Fatalf("linear_act_ln_join_f32: the PTX's parameter is %d bytes (found %v), the Go block %d", n, ok, 8*lnJoinWords)
	}
	rng := rand.New(rand.NewSource(29))
	normals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	type lnShape struct {
		m, k, n int
		opt     bool
	}
	shapes := []lnShape{{4, 17, 256, true}, {12, 31, 256, true}, {12, 9, 256, true}, {3, 5, 300, false}}
	mem := newDevMem()
	var calls []lnCall
	var alone, joined []uint64
	for _, sh := range shapes {
		l := lnCall{x: mem.put(normals(sh.m*sh.k), false), w: mem.put(normals(sh.n*sh.k), false), act: int64(kernels.GeluErf),
			n: int64(sh.n), k: int64(sh.k), eps: 1e-5, m: int64(sh.m)}
		if sh.opt {
			l.b, l.g, l.s = mem.put(normals(sh.n), false), mem.put(normals(sh.n), false), mem.put(normals(sh.n), false)
		}
		alone = append(alone, mem.put(make([]float32, sh.m*sh.n), false))
		joined = append(joined, mem.put(make([]float32, sh.m*sh.n), false))
		calls = append(calls, l)
	}
	// A fifth call reads a gathered input, as W2's slot encoder does: 12
	// rows of [its own 9 features | the mean of embedding rows over its
	// edges] (row 1 without edges, row 4 of three), 256 outputs. alone
	// runs on the input gathered here, in the kernel's order.
	const gm, own, emb = 12, 9, 8
	feats, table := normals(gm*own), normals(5*emb)
	var src, dst []int64
	for i := int64(0); i < gm; i++ {
		switch i {
		case 1:
		case 4:
			src, dst = append(src, 3, 0, 4), append(dst, i, i, i)
		default:
			src, dst = append(src, i%5), append(dst, i)
		}
	}
	rowPtr, order, err := kernels.BuildCSR(dst, gm)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, gm*(own+emb))
	for i := 0; i < gm; i++ {
		copy(x[i*(own+emb):], feats[i*own:(i+1)*own])
		a, b := rowPtr[i], rowPtr[i+1]
		for f := 0; f < emb && b > a; f++ {
			acc := table[src[order[a]]*emb+int64(f)]
			for e := a + 1; e < b; e++ {
				acc += table[src[order[e]]*emb+int64(f)]
			}
			x[i*(own+emb)+own+f] = acc * (1 / float32(b-a))
		}
	}
	gl := lnCall{x: mem.put(x, false), w: mem.put(normals(256*(own+emb)), false), b: mem.put(normals(256), false), act: int64(kernels.GeluErf),
		n: 256, k: own + emb, eps: 1e-5, m: gm}
	featAt, tableAt := mem.put(feats, false), mem.put(table, false)
	ins := [][]gatherPart{gatherPlan([]kernels.GatherBlock{{Col: 0, Width: own}, {Col: own, Width: emb, Gathered: true, Src: 5, Edges: len(src)}},
		[]uint64{featAt, tableAt}, []uint64{0, mem.putI64(src)}, []uint64{0, mem.putI64(rowPtr)}, []uint64{0, mem.putI64(order)}, 0, own+emb)}
	alone = append(alone, mem.put(make([]float32, gm*256), false))
	joined = append(joined, mem.put(make([]float32, gm*256), false))
	calls = append(calls, gl)
	shapes = append(shapes, lnShape{gm, own + emb, 256, true})
	mem.finish()
	for i, l := range calls {
		grid, block, shmem := linearActLNGeom(int(l.m), int(l.n))
		linearActLNEmu(mem, grid, block, shmem, alone[i], l.x, l.w, l.b, int32(l.act), l.g, l.s, l.n, l.k, l.eps)
		calls[i].y = joined[i]
	}
	calls[4].x, calls[4].in = 0, 1 // the gathered call reads its pieces
	var w [lnJoinWords]uint64
	rows, widest := lnJoinPack(&w, calls[:4], nil)
	if rows != 4+12+12+3 || widest != 300 {
		t.Fatalf("rows %d, widest %d: want 31 and 300", rows, widest)
	}
	linearActLNJoinEmu(mem, &w, rows, widest)
	// The gathered call in a launch of its own with the first: its
	// shared memory holds its outputs and its row.
	rows, widest = lnJoinPack(&w, []lnCall{calls[0], calls[4]}, ins)
	if rows != 4+gm || widest != 256+own+emb {
		t.Fatalf("rows %d, widest %d: want %d and %d", rows, widest, 4+gm, 256+own+emb)
	}
	linearActLNJoinEmu(mem, &w, rows, widest)
	for i, sh := range shapes {
		for e := int64(0); e < int64(sh.m*sh.n); e++ {
			a, b := mem.ld(alone[i], e), mem.ld(joined[i], e)
			if math.Float32bits(a) != math.Float32bits(b) {
				t.Fatalf("call %d element %d: joined %v, alone %v", i, e, b, a)
			}
		}
	}
}
