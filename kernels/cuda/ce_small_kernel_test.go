package cuda

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/esper-go/esper/kernels"
)

// ce_small_f32, ce_small_count_f32 and ce_small_count_grad_f32
// (src/softmax.cu), transcribed (ceSmallEmu, linear_ce_sgd_kernel_test.go)
// and run over the launches CrossEntropy, CrossEntropyCount and
// CrossEntropyCountGrad make through ceSmall: one block of
// ceSmallThreads(n) threads, the argument block ceSmallArgs builds, held
// to the PTX's parameter list and decoded from it. It runs without a
// GPU.

// ceSmallEmuArgs runs the kernel ceSmallBase names for lsum and dx from
// the argument block a, as one block of threads threads.
func ceSmallEmuArgs(mem *devMem, threads int, a *args, count, grad bool) {
	loss, x, tg := argU64(a, 0), argU64(a, 1), argU64(a, 2)
	t64, n, c, eps := argI32(a, 3) != 0, argI64(a, 4), argI64(a, 5), argF32(a, 6)
	hasIgnore, ignore, mean := argI32(a, 7) != 0, argI64(a, 8), argI32(a, 9) != 0
	var lsum, acc, dx uint64
	if count {
		lsum, acc = argU64(a, 10), argU64(a, 11)
	}
	if grad {
		dx = argU64(a, 12)
	}
	ceSmallEmu(mem, threads, loss, x, tg, t64, n, c, eps, hasIgnore, ignore, mean, lsum, acc, dx)
}

// ceRef is the reduced cross-entropy of x [n, c] in float64 (sum, or
// the mean over the kept rows), the sum of its terms' magnitudes, and
// the logits' gradient for a dloss of one.
func ceRef(x []float32, target []int64, n, c int, p kernels.CrossEntropyParams) (loss, scale float64, grad []float64) {
	eps := float64(float32(p.LabelSmoothing))
	grad = make([]float64, n*c)
	var kept float64
	for i := 0; i < n; i++ {
		row, tg := x[i*c:(i+1)*c], target[i]
		if p.HasIgnore && tg == p.IgnoreIndex {
			continue
		}
		kept++
		mx, sx, s := math.Inf(-1), 0.0, 0.0
		for _, v := range row {
			mx = math.Max(mx, float64(v))
			sx += float64(v)
		}
		for _, v := range row {
			s += math.Exp(float64(v) - mx)
		}
		lse := mx + math.Log(s)
		l := (1 - eps) * (lse - float64(row[tg]))
		if eps != 0 {
			l += eps * (lse - sx/float64(c))
		}
		loss += l
		scale += math.Abs(l) + math.Abs(lse)
		for j, v := range row {
			grad[i*c+j] = math.Exp(float64(v)-mx)/s - eps/float64(c)
			if int64(j) == tg {
				grad[i*c+j] -= 1 - eps
			}
		}
	}
	if p.Reduction == kernels.ReduceMean {
		loss, scale = loss/kept, scale/kept // NaN with every row ignored, as PyTorch's
		for e := range grad {
			if kept > 0 { // else every row's gradient is 0
				grad[e] /= kept
			}
		}
	}
	return loss, scale, grad
}

// TestCESmallKernelsInGo: ce_small_f32, ce_small_count_f32 and
// ce_small_count_grad_f32, transcribed and run as ceSmall launches them,
// on 1, 33, 128 and 256 rows of 10 classes (one warp, then 32 warps of
// one to eight rows each), the sum and the mean, an ignored index (a
// class, and -100), label smoothing, every row ignored, int64 and int32
// targets and tied maxima: the loss, the running loss sum and the
// per-row correct counts (first maximum, as CountCorrect) and the
// logits' gradient are float64's within fp32 rounding (the counts
// exact), the three kernels' losses the same bits, every output written
// once and nothing else.
func TestCESmallKernelsInGo(t *testing.T) {
	const c = 10
	mean := kernels.CrossEntropyParams{Reduction: kernels.ReduceMean}
	sum := kernels.CrossEntropyParams{Reduction: kernels.ReduceSum}
	ignClass := kernels.CrossEntropyParams{Reduction: kernels.ReduceMean, HasIgnore: true, IgnoreIndex: 3}
	ignSmooth := kernels.CrossEntropyParams{Reduction: kernels.ReduceMean, HasIgnore: true, IgnoreIndex: -100, LabelSmoothing: 0.1}
	sumSmooth := kernels.CrossEntropyParams{Reduction: kernels.ReduceSum, LabelSmoothing: 0.2}
	ignSum := kernels.CrossEntropyParams{Reduction: kernels.ReduceSum, HasIgnore: true, IgnoreIndex: -100}
	type ceCase struct {
		p       kernels.CrossEntropyParams
		t64     bool
		ignored int // every ignored-th row's target is the ignored index (0: none; 1: every row)
	}
	params := []ceCase{
		{p: mean, t64: true}, {p: sum}, {p: ignClass, t64: true}, {p: ignSmooth, t64: true, ignored: 5},
		{p: sumSmooth}, {p: ignSum, ignored: 3}, {p: ignSmooth, ignored: 1},
	}
	rng := rand.New(rand.NewSource(31))
	for _, n := range []int{1, 33, 128, 256} {
		if !ceSmallFits(n, c) {
			t.Fatalf("%d rows of %d classes: not one ce_small launch", n, c)
		}
		threads := ceSmallThreads(n)
		for _, pc := range params {
			name := fmt.Sprintf("%d rows, %+v, int64 targets %v, ignored rows 1 in %d (0: none)", n, pc.p, pc.t64, pc.ignored)
			x := make([]float32, n*c)
			for i := range x {
				x[i] = float32(3 * rng.NormFloat64())
			}
			target := make([]int64, n)
			for i := range target {
				target[i] = int64(rng.Intn(c))
				if i%7 == 2 { // a tie: the first maximum counts, the second never
					x[i*c+2], x[i*c+5] = 20, 20
					target[i] = []int64{2, 5}[i/7%2]
				}
				if pc.ignored > 0 && i%pc.ignored == 0 {
					target[i] = pc.p.IgnoreIndex
				}
			}
			acc0 := make([]float32, n)
			for i := range acc0 {
				acc0[i] = float32(rng.Intn(4))
			}
			const lsum0 = 1.5
			want, scale, wantGrad := ceRef(x, target, n, c, pc.p)

			var losses []float32
			for _, kind := range []struct{ count, grad bool }{{false, false}, {true, false}, {true, true}} {
				mem := newDevMem()
				px := mem.put(x, false)
				ploss := mem.put(nanSlice(1), false)
				var plsum, pacc, pdx uint64
				if kind.count {
					plsum, pacc = mem.put([]float32{lsum0}, false), mem.put(append([]float32(nil), acc0...), false)
				}
				if kind.grad {
					pdx = mem.put(nanSlice(n*c), false)
				}
				mem.finish()
				var pt uint64
				if pc.t64 {
					pt = mem.putI64(append([]int64(nil), target...))
				} else {
					t32 := make([]int32, n)
					for i, v := range target {
						t32[i] = int32(v)
					}
					pt = mem.putI32(t32)
				}
				a := ceSmallArgs(ploss, px, pt, pc.t64, n, c, pc.p, plsum, pacc, pdx)
				kernel := ceSmallBase(plsum, pdx) + "_f32"
				checkArgsPTX(t, "softmax.ptx", kernel, a)
				ceSmallEmuArgs(mem, threads, a, kind.count, kind.grad)
				what := fmt.Sprintf("%s, %s (%d threads)", name, kernel, threads)
				mem.checkGuards(t, what)

				got := mem.view(ploss, 1)[0]
				if !near(got, want, scale, 1e-5) {
					t.Fatalf("%s: loss %v, want %v", what, got, want)
				}
				losses = append(losses, got)
				if w := mem.writesAt(ploss, 1)[0]; w != 1 {
					t.Fatalf("%s: loss written %d times", what, w)
				}
				if mem.writesAt(px, n*c)[0] != 0 {
					t.Fatalf("%s: the logits written", what)
				}
				if kind.count {
					if ls := mem.view(plsum, 1)[0]; !near(ls, lsum0+want, scale, 1e-5) || mem.writesAt(plsum, 1)[0] != 1 {
						t.Fatalf("%s: running loss %v (written %d times), want %v", what, ls, mem.writesAt(plsum, 1)[0], lsum0+want)
					}
					accGot := mem.view(pacc, n)
					for i := 0; i < n; i++ {
						hit := int64(firstMaxRef(x[i*c:(i+1)*c])) == target[i]
						wantAcc := acc0[i]
						if hit {
							wantAcc++
						}
						if accGot[i] != wantAcc || mem.writesAt(pacc, n)[i] != map[bool]int{false: 0, true: 1}[hit] {
							t.Fatalf("%s: row %d counted %v (written %d times), want %v", what, i, accGot[i], mem.writesAt(pacc, n)[i], wantAcc)
						}
					}
				}
				if kind.grad {
					dx := mem.view(pdx, n*c)
					for e := range dx {
						if !near(dx[e], wantGrad[e], 0, 1e-5) || mem.writesAt(pdx, n*c)[e] != 1 {
							t.Fatalf("%s: dlogit %d is %v (written %d times), want %v", what, e, dx[e], mem.writesAt(pdx, n*c)[e], wantGrad[e])
						}
					}
				}
			}
			for _, l := range losses[1:] {
				if math.Float32bits(l) != math.Float32bits(losses[0]) {
					t.Fatalf("%s: the kernels' losses %v differ", name, losses)
				}
			}
		}
	}
}
