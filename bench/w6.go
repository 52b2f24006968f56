package bench

import (
	"fmt"
	"math"
	"sort"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"
)

// W6Options configures the CPU part of the W6 "gemm" workload (PERF.md):
// the fp32 product C = A·B of two contiguous Size×Size matrices, through
// the engine's CPU backend (kernels.Backend.MatMul) and through gonum's
// pure-Go BLAS (Implementation.Sgemm) on the same operands, in the same
// run. Zero values give the PERF.md definition.
//
// The engine is timed in Rounds blocks of Reps products, each after
// Warmup unmeasured ones, and AfterRound runs after each block: the
// harness runs its peer there, so that the engine and the peer alternate
// and a change in the machine's speed during the run (a shared virtual
// machine's cores) falls on both sides rather than on one. gonum, far
// slower, is timed once, after the last round.
type W6Options struct {
	Size   int // n of the n×n·n×n product (default 1024)
	Reps   int // measured products per block (default 20)
	Warmup int // unmeasured products before each block (default 3)
	Rounds int // blocks of engine products (default 1)
	Seed   uint64
	// Progress, when set, is called before each block is timed:
	// ("esper", round) for round = 1..Rounds, then ("gonum", 0).
	Progress func(impl string, round int)
	// AfterRound, when set, is called after engine block round
	// (1..Rounds); an error stops the run and is returned.
	AfterRound func(round int) error
}

// GEMMTiming is the timing of one GEMM implementation. The GFLOP/s
// figures count 2·n³ floating-point operations per product.
type GEMMTiming struct {
	Latency      Latency `json:"latency"`
	BestGFLOPS   float64 `json:"best_gflops"`
	MedianGFLOPS float64 `json:"median_gflops"`
	// MaxRelErr is the largest error of W6CheckEntries sampled entries of
	// C against a float64 reference, relative to Σ|a·b| of the entry.
	MaxRelErr float64 `json:"max_rel_err"`
}

// W6Result is what RunW6 measured. Esper pools the products of every
// round; EsperRounds has each round on its own.
type W6Result struct {
	Size         int          `json:"size"`
	Reps         int          `json:"reps"`
	Warmup       int          `json:"warmup"`
	Rounds       int          `json:"rounds"`
	FLOPPerGEMM  float64      `json:"flop_per_gemm"`
	Esper        GEMMTiming   `json:"esper"`
	EsperRounds  []GEMMTiming `json:"esper_rounds"`
	Gonum        GEMMTiming   `json:"gonum"`
	CheckedEntry int          `json:"checked_entries"`
}

// W6CheckEntries is the number of entries of C that RunW6 compares with
// a float64 reference after timing each implementation.
const W6CheckEntries = 64

// Resolve returns o with its zero fields set to their defaults, or an
// error for a negative one.
func (o W6Options) Resolve() (W6Options, error) {
	if o.Size < 0 || o.Reps < 0 || o.Warmup < 0 || o.Rounds < 0 {
		return o, fmt.Errorf("bench: W6 options must not be negative: %+v", o)
	}
	if o.Size == 0 {
		o.Size = 1024
	}
	if o.Reps == 0 {
		o.Reps = 20
	}
	if o.Warmup == 0 {
		o.Warmup = 3
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	return o, nil
}

// w6 holds the operands: A and B as engine tensors and C for each
// implementation; gonum reads the same float32 slices as the engine.
type w6 struct {
	n       int
	a, b, c *tensor.Tensor // engine operands, F32 [n, n]
	gc      []float32      // gonum's C
	be      kernels.Backend
}

func newW6(n int, seed uint64) *w6 {
	rng := tensor.NewRNG(seed)
	a := tensor.Uniform(rng, tensor.F32, -1, 1, n, n)
	b := tensor.Uniform(rng, tensor.F32, -1, 1, n, n)
	return &w6{n: n, a: a, b: b, c: tensor.Empty(tensor.F32, n, n), gc: make([]float32, n*n), be: kernels.For(a.Device())}
}

// esper computes c = a·b with the engine's backend.
func (w *w6) esper() { w.be.MatMul(w.c, w.a, w.b, false, false) }

// gonum computes gc = a·b with gonum's Sgemm.
func (w *w6) gonum() {
	n := w.n
	gonum.Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, n, n, n, 1, w.a.F32(), n, w.b.F32(), n, 0, w.gc, n)
}

// checkEntries compares count pseudo-randomly chosen entries of c (row
// major, n×n) with a float64 reference and returns the largest error
// relative to Σ_k |a_ik·b_kj| (+Inf for a NaN entry).
func (w *w6) checkEntries(c []float32, count int, seed uint64) float64 {
	rng := tensor.NewRNG(seed ^ 0x5eed)
	a, b, n := w.a.F32(), w.b.F32(), w.n
	worst := 0.0
	for e := 0; e < count; e++ {
		i, j := rng.IntN(n), rng.IntN(n)
		var ref, mag float64
		for k := 0; k < n; k++ {
			p := float64(a[i*n+k]) * float64(b[k*n+j])
			ref += p
			mag += math.Abs(p)
		}
		if mag == 0 {
			mag = 1
		}
		d := math.Abs(float64(c[i*n+j])-ref) / mag
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		worst = max(worst, d)
	}
	return worst
}

// timeReps runs f warmup times, then reps times, timing each call.
func timeReps(f func(), warmup, reps int) []time.Duration {
	for i := 0; i < warmup; i++ {
		f()
	}
	lat := make([]time.Duration, reps)
	for i := range lat {
		t0 := time.Now()
		f()
		lat[i] = time.Since(t0)
	}
	return lat
}

// gemmTiming summarises the latencies of products of flop operations.
func gemmTiming(lat []time.Duration, flop float64) GEMMTiming {
	sorted := append([]time.Duration(nil), lat...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	l := Summarise(lat)
	// Both rates by one formula from microseconds as Summarise computes
	// them, so that a best latency equal to the median gives the same
	// rate to the bit (Seconds() rounds differently).
	rate := func(us float64) float64 { return flop / (us * 1e-6) / 1e9 }
	return GEMMTiming{
		Latency:      l,
		BestGFLOPS:   rate(float64(sorted[0].Nanoseconds()) / 1e3),
		MedianGFLOPS: rate(l.P50us),
	}
}

// RunW6 times the engine's fp32 GEMM and gonum's on the same operands
// and checks W6CheckEntries entries of each product against a float64
// reference.
func RunW6(o W6Options) (W6Result, error) {
	o, err := o.Resolve()
	if err != nil {
		return W6Result{}, err
	}
	w := newW6(o.Size, o.Seed)
	n := float64(o.Size)
	flop := 2 * n * n * n
	res := W6Result{Size: o.Size, Reps: o.Reps, Warmup: o.Warmup, Rounds: o.Rounds, FLOPPerGEMM: flop, CheckedEntry: W6CheckEntries}
	var all []time.Duration
	for r := 1; r <= o.Rounds; r++ {
		if o.Progress != nil {
			o.Progress("esper", r)
		}
		lat := timeReps(w.esper, o.Warmup, o.Reps)
		all = append(all, lat...)
		t := gemmTiming(lat, flop)
		t.MaxRelErr = w.checkEntries(w.c.F32(), W6CheckEntries, o.Seed+uint64(r))
		res.Esper.MaxRelErr = max(res.Esper.MaxRelErr, t.MaxRelErr)
		res.EsperRounds = append(res.EsperRounds, t)
		if o.AfterRound != nil {
			if err := o.AfterRound(r); err != nil {
				return res, err
			}
		}
	}
	worst := res.Esper.MaxRelErr
	res.Esper = gemmTiming(all, flop)
	res.Esper.MaxRelErr = worst
	if o.Progress != nil {
		o.Progress("gonum", 0)
	}
	res.Gonum = gemmTiming(timeReps(w.gonum, o.Warmup, o.Reps), flop)
	res.Gonum.MaxRelErr = w.checkEntries(w.gc, W6CheckEntries, o.Seed)
	// fp32 accumulation over n terms: allow a generous n·ε bound before
	// calling a product wrong.
	tol := max(1e-5, float64(o.Size)*1.2e-7)
	if res.Esper.MaxRelErr > tol {
		return res, fmt.Errorf("bench: W6 engine GEMM is wrong: relative error %.3g > %.3g", res.Esper.MaxRelErr, tol)
	}
	if res.Gonum.MaxRelErr > tol {
		return res, fmt.Errorf("bench: W6 gonum GEMM is wrong: relative error %.3g > %.3g", res.Gonum.MaxRelErr, tol)
	}
	return res, nil
}
