package cpu

import (
	"sync/atomic"
	"unsafe"

	"github.com/esper-go/esper/tensor"
)

// The GEMM used by MatMul and the convolutions: Goto-style blocking with
// packed panels and a register-blocked mr×nr micro-kernel (microKernel,
// the piece a Go-assembly version replaces). Every element of C is
// accumulated in a fixed order — k blocks of gemmKC in order, each summed
// in registers from p = 0 up — so the result does not depend on how the
// caller splits rows among workers.

const (
	gemmMR = 4 // rows of the pure-Go micro-tile
	gemmNR = 4 // columns of the pure-Go micro-tile

	// gemmKC and gemmNC were tuned on W6 (1024³ on a 2-core AVX-512
	// Xeon, bench/baselines): k blocks of 1024 beat 512 once the kernel
	// prefetched the next B panel (the product's whole depth in one block:
	// C is written once, not read back and written again); 512 had beaten
	// 256 by about 15%. The kernel streams its B panel (128 KiB) from L2.
	gemmKC = 1024 // depth of a packed block
	gemmMC = 96   // rows of a packed A block (a multiple of every MR in use)
	// sharedMC is gemmShared's A block (also a multiple of every MR):
	// 48 rows ran 1.5–3% faster than 96 at 1024³, with one worker or two
	// (36 and 60 within 1% of 48), each B panel serving four row tiles
	// per pass rather than eight.
	sharedMC = 48
	gemmNC   = 1024 // columns of a packed B block
)

// microKernelFunc adds the product of an MR×kb packed A panel and a kb×NR
// packed B panel to the mr×nr tile of C at ci (mr ≤ MR, nr ≤ NR), or
// stores it there when add is false (the first k block of a product that
// overwrites C, which then need not be cleared first). Each element is
// summed in registers from p = 0 up and then added to C once. pf is
// packed B the caller multiplies next, or nil: a kernel may prefetch the
// first half of it (macroKernel passes each half to one tile).
type microKernelFunc[F tensor.Float] func(kb int, pa, pb, pf []F, c []F, ci, ldc, mr, nr int, add bool)

// gemmKernel is a micro-kernel with its tile shape; packing follows it.
// fn nil means the pure-Go microKernel (called directly: a generic function
// value would allocate on every GEMM).
type gemmKernel[F tensor.Float] struct {
	mr, nr int
	fn     microKernelFunc[F]
}

// gemmPureGo, when set, makes every GEMM use the pure-Go micro-kernel even
// where an assembly one is available (tests run both paths).
var gemmPureGo atomic.Bool

// gemmSmall is the product size m·n·k under which gemm runs gemmDirect's
// unpacked loops: for the tiny products of small models (W1's 4×16 by
// 16×4) packing, and an assembly kernel's edge path with its zeroed
// scratch tile, cost more than the arithmetic. Tests set it to 0 so that
// the micro-kernels also run on small shapes, and to MaxInt so that
// gemmDirect runs on large ones.
var gemmSmall = 4096

// kernelFor picks the micro-kernel for F: the fastest assembly kernel the
// CPU supports for float32 (see gemm_amd64.go), otherwise microKernel.
func kernelFor[F tensor.Float]() gemmKernel[F] {
	var z F
	if _, ok := any(z).(float32); ok && sgemmAsm.fn != nil && !gemmPureGo.Load() {
		if fn, ok := any(sgemmAsm.fn).(func(int, []F, []F, []F, []F, int, int, int, int, bool)); ok {
			return gemmKernel[F]{mr: sgemmAsm.mr, nr: sgemmAsm.nr, fn: fn}
		}
	}
	return gemmKernel[F]{mr: gemmMR, nr: gemmNR}
}

// sgemmKernel describes a float32 assembly micro-kernel (fn nil if none).
type sgemmKernel struct {
	name   string
	mr, nr int
	fn     func(kb int, pa, pb, pf []float32, c []float32, ci, ldc, mr, nr int, add bool)
}

// maxMR and maxNR bound the tile shapes of every kernel, for sizing scratch.
const (
	minMR = 4
	maxMR = 16
	maxNR = 32
)

// gemmScratch is the packing space one serial GEMM needs.
type gemmScratch[F tensor.Float] struct{ a, b []F }

// newGemmScratch sizes packing space for problems up to m×n×k, for any
// micro-kernel shape.
func newGemmScratch[F tensor.Float](m, n, k int) gemmScratch[F] {
	kc := min(gemmKC, k)
	mc := min(gemmMC, m) + maxMR - 1 // ≥ roundUp(min(gemmMC, m), mr)
	nc := min(gemmNC, n) + maxNR - 1
	return gemmScratch[F]{a: getBuf[F](mc * kc), b: getBuf[F](kc * nc)}
}

// free returns the packing space to the pools.
func (sc gemmScratch[F]) free() {
	putBuf(sc.a)
	putBuf(sc.b)
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// gemm computes C = op(A)·op(B) (or C += when accumulate) for row-major
// A, B, C with leading dimensions lda, ldb, ldc. op(A) is m×k: A[i*lda+p],
// or A[p*lda+i] when transA. op(B) is k×n: B[p*ldb+j], or B[j*ldb+p] when
// transB. It runs on the calling goroutine with the given scratch.
func gemm[F tensor.Float](m, n, k int, a []F, lda int, transA bool, b []F, ldb int, transB bool, c []F, ldc int, accumulate bool, sc gemmScratch[F]) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || m*n*k < gemmSmall || directRows(m, transA, transB, a) {
		if !accumulate {
			for i := 0; i < m; i++ {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		if k > 0 {
			gemmDirect(m, n, k, a, lda, transA, b, ldb, transB, c, ldc)
		}
		return
	}
	kern := kernelFor[F]()
	mr, nr := kern.mr, kern.nr
	for jc := 0; jc < n; jc += gemmNC {
		nb := min(gemmNC, n-jc)
		for pc := 0; pc < k; pc += gemmKC {
			kb := min(gemmKC, k-pc)
			add := accumulate || pc > 0
			packB(sc.b, b, ldb, transB, pc, jc, kb, nb, nr)
			for ic := 0; ic < m; ic += gemmMC {
				mb := min(gemmMC, m-ic)
				packA(sc.a, a, lda, transA, ic, pc, mb, kb, mr)
				macroKernel(kern, kb, sc.a, sc.b, kb*nr, c, ic*ldc+jc, ldc, mb, nb, add)
			}
		}
	}
}

// gemmShared is one large product split over workers with B shared:
// each (jc, pc) block of op(B) is packed once (its panels split among the
// workers), then the mr-row panels of A are dealt out to workers in equal
// runs, each worker packing up to sharedMC rows of its run at a time into a
// buffer of its own. (gemm, run per row block, would pack all of B once
// per row block; dealing whole gemmMC blocks would leave one worker idle
// for the last block: 11 blocks of 1024 rows on 2 workers.) Every element
// of C accumulates its k blocks in order with the same micro-kernel, so
// the result is bitwise gemm's.
type gemmShared[F tensor.Float] struct {
	m, n, k int
	a, b, c []F
	lda     int
	ldb     int
	ldc     int
	ta, tb  bool
	acc     bool // add the product to C (MatMulAdd) instead of storing it
	kern    gemmKernel[F]
	pb      []F              // the packed (jc, pc) block of B
	pas     scratchSet[[]F]  // packed A blocks, one per worker
	jc, pc  int              // the block being multiplied
	nb, kb  int              // its width and depth
	body    func(lo, hi int) // panels, bound once (launches allocate nothing)
	packB   func(lo, hi int) // B panels, bound once
}

// newGemmShared prepares a product of op(A) (m×k) and op(B) (k×n) into C
// (row stride ldc), with its packing space from the pools.
func newGemmShared[F tensor.Float](m, n, k int, a []F, lda int, ta bool, b []F, ldb int, tb bool, c []F, ldc int) *gemmShared[F] {
	g := &gemmShared[F]{m: m, n: n, k: k, a: a, b: b, c: c, lda: lda, ldb: ldb, ldc: ldc, ta: ta, tb: tb}
	kc := min(gemmKC, k)
	g.pb = getBuf[F](kc * (min(gemmNC, n) + maxNR - 1))
	g.pas = newScratchSet(max(1, (m+minMR-1)/minMR), func() []F { return getBuf[F]((min(sharedMC, m) + maxMR - 1) * kc) })
	g.body = g.panels
	g.packB = g.packBPanels
	return g
}

// free returns the packing space to the pools.
func (g *gemmShared[F]) free() {
	putBuf(g.pb)
	g.pas.release(putBuf[F])
}

// run computes C = op(A)·op(B).
func (g *gemmShared[F]) run() {
	if g.k == 0 && !g.acc {
		for i := 0; i < g.m; i++ {
			clear(g.c[i*g.ldc : i*g.ldc+g.n])
		}
		return
	}
	g.kern = kernelFor[F]()
	mr, nr := g.kern.mr, g.kern.nr
	panels := (g.m + mr - 1) / mr
	for g.jc = 0; g.jc < g.n; g.jc += gemmNC {
		g.nb = min(gemmNC, g.n-g.jc)
		for g.pc = 0; g.pc < g.k; g.pc += gemmKC {
			g.kb = min(gemmKC, g.k-g.pc)
			parallelFor((g.nb+nr-1)/nr, nr*g.kb, g.packB)
			parallelFor(panels, 2*mr*g.nb*g.kb, g.body)
		}
	}
}

// packBPanels packs panels lo..hi−1 of the current block of B.
func (g *gemmShared[F]) packBPanels(lo, hi int) {
	nr := g.kern.nr
	packB(g.pb[lo*nr*g.kb:], g.b, g.ldb, g.tb, g.pc, g.jc+lo*nr, g.kb, min(g.nb, hi*nr)-lo*nr, nr)
}

// panels multiplies the A panels lo..hi−1 (rows lo·mr to hi·mr, or m) by
// the packed block of B, sharedMC rows at a time.
func (g *gemmShared[F]) panels(lo, hi int) {
	pa := <-g.pas
	mr, kb, nb := g.kern.mr, g.kb, g.nb
	add := g.acc || g.pc > 0
	end := min(hi*mr, g.m)
	for ic := lo * mr; ic < end; ic += sharedMC {
		mb := min(sharedMC, end-ic)
		packA(pa, g.a, g.lda, g.ta, ic, g.pc, mb, kb, mr)
		macroKernel(g.kern, kb, pa, g.pb, kb*g.kern.nr, g.c, ic*g.ldc+g.jc, g.ldc, mb, nb, add)
	}
	g.pas <- pa
}

// gemmSmallRows is the row count under which a float32 product with the
// vector kernels skips packing whatever its size: packing B costs about
// as much as multiplying a few rows by it (a policy network's batch of
// one to three graph nodes against a 256×256 weight). Tests set it to 0,
// with gemmSmall, so that the micro-kernels also run on few rows.
var gemmSmallRows = 8

// directRows reports whether a product of m rows goes to gemmDirect for
// its row count alone (float32 with the vector kernels, not both
// operands transposed, the assembly kernels not switched off).
func directRows[F tensor.Float](m int, transA, transB bool, a []F) bool {
	var z F
	return vdotAsm && m < gemmSmallRows && unsafe.Sizeof(z) == 4 && !(transA && transB) && !gemmPureGo.Load()
}

// gemmDirect adds op(A)·op(B) to C with plain loops, without packing:
// for products under gemmSmall multiply-adds (W1's 4×16 by 16×4 is
// 256), packing the operands costs more than the arithmetic. Each case
// orders its loops so that the innermost one runs along contiguous
// memory.
func gemmDirect[F tensor.Float](m, n, k int, a []F, lda int, transA bool, b []F, ldb int, transB bool, c []F, ldc int) {
	if vdotAsm && !(transA && transB) {
		if a32, b32, c32 := asF32(a), asF32(b), asF32(c); a32 != nil && b32 != nil && c32 != nil {
			gemmDirectF32(m, n, k, a32, lda, transA, b32, ldb, transB, c32, ldc)
			return
		}
	}
	switch {
	case !transA && !transB: // c[i,:] += a[i,p]·b[p,:]
		for i := 0; i < m; i++ {
			ci := c[i*ldc : i*ldc+n]
			for p, av := range a[i*lda : i*lda+k] {
				bp := b[p*ldb : p*ldb+n]
				for j := range ci {
					ci[j] += av * bp[j]
				}
			}
		}
	case !transA && transB: // c[i,j] += a[i,:]·b[j,:]
		for i := 0; i < m; i++ {
			ai := a[i*lda : i*lda+k]
			ci := c[i*ldc : i*ldc+n]
			for j := range ci {
				bj := b[j*ldb : j*ldb+k]
				var acc F
				for p, av := range ai {
					acc += av * bj[p]
				}
				ci[j] += acc
			}
		}
	case transA && !transB: // c[i,:] += a[p,i]·b[p,:]
		for p := 0; p < k; p++ {
			ap := a[p*lda : p*lda+m]
			bp := b[p*ldb : p*ldb+n]
			for i, av := range ap {
				ci := c[i*ldc : i*ldc+n]
				for j := range ci {
					ci[j] += av * bp[j]
				}
			}
		}
	default: // c[i,j] += a[p,i]·b[j,p]
		for i := 0; i < m; i++ {
			ci := c[i*ldc : i*ldc+n]
			for j := range ci {
				var acc F
				for p := 0; p < k; p++ {
					acc += a[p*lda+i] * b[j*ldb+p]
				}
				ci[j] += acc
			}
		}
	}
}

// gemmDirectF32 is gemmDirect for float32 with the vector kernels: rows
// of C gather axpys of rows of B, or dot products with rows of B when B
// is transposed (op(A) = Aᵀ with B transposed stays in gemmDirect).
func gemmDirectF32(m, n, k int, a []float32, lda int, transA bool, b []float32, ldb int, transB bool, c []float32, ldc int) {
	switch {
	case !transA && !transB: // c[i,:] += a[i,p]·b[p,:]
		for i := 0; i < m; i++ {
			ci := c[i*ldc : i*ldc+n]
			for p, av := range a[i*lda : i*lda+k] {
				axpyF32(av, b[p*ldb:p*ldb+n], ci)
			}
		}
	case !transA && transB: // c[i,j] += a[i,:]·b[j,:], four or two i and four j at a time
		var d4 [4]float32
		var d8 [8]float32
		i := 0
		if tinyAsm && n >= 4 && k >= 16 {
			// AVX-512: four rows per pass over b's rows, half the passes
			// of the two-row loop below. A few rows against a large
			// weight matrix (a policy network's batch of one) are bound by
			// reading the weights, once per pass.
			for ; i+4 <= m; i += 4 {
				dot4Rows(4, n, k, a[i*lda:], lda, b, ldb, c[i*ldc:], ldc)
			}
			if m-i == 3 {
				// Three rows are four with a zero row: one pass, not two.
				pad := getBuf[float32](4 * k)
				for r := 0; r < 3; r++ {
					copy(pad[r*k:(r+1)*k], a[(i+r)*lda:(i+r)*lda+k])
				}
				clear(pad[3*k:])
				dot4Rows(3, n, k, pad, k, b, ldb, c[i*ldc:], ldc)
				putBuf(pad)
				i = m
			}
		}
		for ; i+2 <= m && n >= 4; i += 2 {
			c0, c1 := c[i*ldc:i*ldc+n], c[(i+1)*ldc:(i+1)*ldc+n]
			j := 0
			for ; j+4 <= n; j += 4 {
				prefetchNextRows(b, j, ldb, k, n)
				dot2x4F32(a[i*lda:], lda, k, b[j*ldb:], ldb, &d8)
				for r := 0; r < 4; r++ {
					c0[j+r] += d8[r]
					c1[j+r] += d8[4+r]
				}
			}
			for ; j < n; j++ {
				bj := b[j*ldb : j*ldb+k]
				c0[j] += dotF32(a[i*lda:i*lda+k], bj)
				c1[j] += dotF32(a[(i+1)*lda:(i+1)*lda+k], bj)
			}
		}
		for ; i < m; i++ {
			ai := a[i*lda : i*lda+k]
			ci := c[i*ldc : i*ldc+n]
			j := 0
			for ; j+4 <= n; j += 4 {
				prefetchNextRows(b, j, ldb, k, n)
				dot4F32(ai, b[j*ldb:], ldb, &d4)
				ci[j] += d4[0]
				ci[j+1] += d4[1]
				ci[j+2] += d4[2]
				ci[j+3] += d4[3]
			}
			for ; j < n; j++ {
				ci[j] += dotF32(ai, b[j*ldb:j*ldb+k])
			}
		}
	default: // c[i,:] += a[p,i]·b[p,:]
		for p := 0; p < k; p++ {
			bp := b[p*ldb : p*ldb+n]
			for i, av := range a[p*lda : p*lda+m] {
				axpyF32(av, bp, c[i*ldc:i*ldc+n])
			}
		}
	}
}

// dot4Rows adds to c the products of a's first rows rows (at most 4) by
// the n rows of b, 4×4 at a time with sdot4x4. The kernel reads four rows
// of a: those past rows must be readable, and their products are dropped.
func dot4Rows(rows, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	var t [16]float32
	j := 0
	for ; j+4 <= n; j += 4 {
		prefetchNextRows(b, j, ldb, k, n)
		sdot4x4(a, lda, b[j*ldb:], ldb, k, nil, t[:], 4)
		for r := 0; r < rows; r++ {
			cr := c[r*ldc+j:][:4]
			cr[0] += t[4*r]
			cr[1] += t[4*r+1]
			cr[2] += t[4*r+2]
			cr[3] += t[4*r+3]
		}
	}
	for ; j < n; j++ {
		bj := b[j*ldb : j*ldb+k]
		for r := 0; r < rows; r++ {
			c[r*ldc+j] += dotF32(a[r*lda:r*lda+k], bj)
		}
	}
}

// prefetchNextRows fetches rows j+4..j+7 of b (k values each, ldb
// apart; those of n rows that exist) into cache while the caller
// multiplies rows j..j+3: a few rows against a weight matrix stream it
// from memory in rows too short for the hardware prefetchers to follow
// (W2 batch 1 about 12% faster).
func prefetchNextRows(b []float32, j, ldb, k, n int) {
	lines := (k*4 + 63) / 64
	for r := j + 4; r < min(j+8, n); r++ {
		prefetchLines(unsafe.Pointer(&b[r*ldb]), lines)
	}
}

// asF32 views s as []float32 when F is float32 (nil otherwise or when
// empty), without allocating.
func asF32[F tensor.Float](s []F) []float32 {
	var z F
	if unsafe.Sizeof(z) != 4 || len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&s[0])), len(s))
}

// packA copies the mb×kb block of op(A) at (ic, pc) into panels of mr
// rows: panel r holds, for each p, the mr values of rows r·mr.. (zero
// beyond mb).
func packA[F tensor.Float](dst, a []F, lda int, trans bool, ic, pc, mb, kb, mr int) {
	ir0 := 0
	if !trans {
		ir0 = packAFast(dst, a, lda, ic, pc, mb, kb, mr)
	}
	for ir := ir0; ir < mb; ir += mr {
		pan := dst[ir*kb : (ir+mr)*kb]
		rows := min(mr, mb-ir)
		if trans {
			for p := 0; p < kb; p++ {
				q := pan[p*mr : p*mr+mr]
				n := copy(q[:rows], a[(pc+p)*lda+ic+ir:])
				clear(q[n:])
			}
			continue
		}
		interleave(pan, a, (ic+ir)*lda+pc, lda, rows, kb, mr)
	}
}

// packB copies the kb×nb block of op(B) at (pc, jc) into panels of nr
// columns (zero beyond nb).
func packB[F tensor.Float](dst, b []F, ldb int, trans bool, pc, jc, kb, nb, nr int) {
	jr0 := packBFast(dst, b, ldb, trans, pc, jc, kb, nb, nr)
	for jr := jr0; jr < nb; jr += nr {
		pan := dst[jr*kb : (jr+nr)*kb]
		cols := min(nr, nb-jr)
		if !trans {
			for p := 0; p < kb; p++ {
				q := pan[p*nr : p*nr+nr]
				n := copy(q[:cols], b[(pc+p)*ldb+jc+jr:])
				clear(q[n:])
			}
			continue
		}
		interleave(pan, b, (jc+jr)*ldb+pc, ldb, cols, kb, nr)
	}
}

// microKernel is the pure-Go 4×4 micro-kernel (a microKernelFunc with
// MR = gemmMR, NR = gemmNR, without the prefetch): the fallback on every
// platform and the test oracle for the assembly kernels.
func microKernel[F tensor.Float](kb int, pa, pb []F, c []F, ci, ldc, mr, nr int, add bool) {
	var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33 F
	pa = pa[:kb*gemmMR]
	pb = pb[:kb*gemmNR]
	for p := 0; p < len(pa); p += 4 {
		a := pa[p : p+4 : p+4]
		b := pb[p : p+4 : p+4]
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	t := [16]F{c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33}
	storeTile(t[:], 4, c, ci, ldc, mr, nr, add)
}

// storeTile adds the mr×nr corner of tile t (row stride w) to C at ci, or
// stores it there when add is false.
func storeTile[F tensor.Float](t []F, w int, c []F, ci, ldc, mr, nr int, add bool) {
	for i := 0; i < mr; i++ {
		row := c[ci+i*ldc : ci+i*ldc+nr]
		src := t[i*w : i*w+nr]
		if !add {
			copy(row, src)
			continue
		}
		for j, v := range src {
			row[j] += v
		}
	}
}

// ForcePureGoGEMM makes every GEMM (MatMul, the convolutions) use the
// pure-Go micro-kernel instead of an assembly one when on is true, and
// returns the previous setting. It is for tests and benchmarks that compare
// the two paths in one run; the default, false, picks the fastest kernel
// the CPU supports.
func ForcePureGoGEMM(on bool) (prev bool) { return gemmPureGo.Swap(on) }

// GEMMKernel names the float32 GEMM micro-kernel in use ("purego" when no
// assembly kernel is available or ForcePureGoGEMM is set).
func GEMMKernel() string {
	if sgemmAsm.fn == nil || gemmPureGo.Load() {
		return "purego"
	}
	return sgemmAsm.name
}

// interleave is the transposing half of packA and packB: line l < lines
// of src (src[base+l·ld:][:kb]) goes to pan[p·w+l] for every p < kb, and
// lines from lines to w are zeros. Four lines at a time, so that each p
// writes four neighbouring values rather than one per w elements.
func interleave[F tensor.Float](pan, src []F, base, ld, lines, kb, w int) {
	l := 0
	for ; l+4 <= lines; l += 4 {
		b := base + l*ld
		s0 := src[b : b+kb]
		s1 := src[b+ld : b+ld+kb]
		s2 := src[b+2*ld : b+2*ld+kb]
		s3 := src[b+3*ld : b+3*ld+kb]
		for p := range s0 {
			q := pan[p*w+l : p*w+l+4]
			q[0], q[1], q[2], q[3] = s0[p], s1[p], s2[p], s3[p]
		}
	}
	for ; l < w; l++ {
		if l >= lines {
			for p := 0; p < kb; p++ {
				pan[p*w+l] = 0
			}
			continue
		}
		for p, v := range src[base+l*ld : base+l*ld+kb] {
			pan[p*w+l] = v
		}
	}
}

// macroKernel multiplies a packed mb×kb block of A (panels of kern.mr
// rows) by a packed kb×nb block of B (panels of kern.nr columns, ps
// elements apart) into the mb×nb block of C at ci: each tile with the
// micro-kernel, adding to C or storing (add). Row tiles run innermost, so
// each B panel is read from L2 by every A panel in turn; the last two
// row tiles of a column hand the kernel the two halves of the next B
// panel to prefetch.
func macroKernel[F tensor.Float](kern gemmKernel[F], kb int, pa, pb []F, ps int, c []F, ci, ldc, mb, nb int, add bool) {
	mr, nr := kern.mr, kern.nr
	tiles := (mb + mr - 1) / mr
	for jr := 0; jr < nb; jr += nr {
		b := pb[jr/nr*ps:][:nr*kb]
		var next []F
		if jr+nr < nb {
			next = pb[(jr/nr+1)*ps:][:nr*kb]
		}
		for t, ir := 0, 0; ir < mb; t, ir = t+1, ir+mr {
			a := pa[ir*kb : (ir+mr)*kb]
			rows, cols := min(mr, mb-ir), min(nr, nb-jr)
			if kern.fn == nil {
				microKernel(kb, a, b, c, ci+ir*ldc+jr, ldc, rows, cols, add)
				continue
			}
			var pf []F
			switch {
			case next == nil:
			case t == tiles-1 && tiles > 1:
				pf = next[len(next)/2:]
			case t == tiles-2 || tiles == 1:
				pf = next
			}
			kern.fn(kb, a, b, pf, c, ci+ir*ldc+jr, ldc, rows, cols, add)
		}
	}
}
