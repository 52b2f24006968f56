package bench

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// W7Options configures the W7 "foreach-optim" workload (PERF.md): one
// optimizer step of SGD (lr 0.01, momentum 0.9) and of AdamW (PyTorch's
// defaults: lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01) over
// Tensors fp32 parameter tensors totalling Params elements (W7Shapes),
// with fixed random gradients, next to the machine's copy bandwidth.
// Zero values give the PERF.md definition.
type W7Options struct {
	Params  int // total fp32 parameters (default 10,000,000)
	Tensors int // parameter tensors (default 200)
	Steps   int // measured steps per optimizer (default 50)
	Warmup  int // unmeasured steps per optimizer (default 5)
	// CopyBytes is the size of the buffer copied with Go's copy to
	// measure the copy bandwidth (default 40,000,000: 10M float32).
	CopyBytes int
	Seed      uint64
	// Progress, when set, is called before each measured phase ("copy",
	// "SGD-momentum", "AdamW").
	Progress func(phase string)
}

// Bytes an optimizer step moves per fp32 parameter: SGD with momentum
// reads p, g, m and writes p, m; AdamW reads p, g, m, v and writes p, m,
// v.
const (
	W7SGDBytesPerParam   = 5 * 4
	W7AdamWBytesPerParam = 7 * 4
)

// W7OptimResult is the timing of one optimizer's step.
type W7OptimResult struct {
	Optimizer     string  `json:"optimizer"`
	Latency       Latency `json:"step_latency"`
	BytesPerParam int     `json:"bytes_per_param"`
	BytesPerStep  int64   `json:"bytes_per_step"`
	// GBps is BytesPerStep over the median step time, in 1e9 bytes/s.
	GBps float64 `json:"gbps"`
	// FractionOfCopy is GBps over W7Result.CopyGBps (Go's copy);
	// FractionOfParallelCopy over W7Result.ParallelCopyGBps.
	FractionOfCopy         float64 `json:"fraction_of_copy"`
	FractionOfParallelCopy float64 `json:"fraction_of_parallel_copy"`
	AllocsPerStep          float64 `json:"allocs_per_step"`
	// ChangedFraction is the fraction of parameters whose value differs
	// after the warm-up and measured steps from before the first step,
	// and MeanAbsChange the mean |Δp|: evidence that the step ran.
	ChangedFraction float64 `json:"changed_fraction"`
	MeanAbsChange   float64 `json:"mean_abs_change"`
}

// W7Result is what RunW7 measured.
type W7Result struct {
	Params  int     `json:"params"`
	Tensors int     `json:"tensors"`
	Shapes  [][]int `json:"shapes"`
	Steps   int     `json:"steps"`
	Warmup  int     `json:"warmup"`
	// CopyBytes is the copied buffer's size; CopyLatency times one
	// copy. CopyGBps counts read plus written bytes (2·CopyBytes) over
	// the median copy time, for Go's copy on one goroutine;
	// ParallelCopyGBps the same with the buffer split over GOMAXPROCS
	// goroutines.
	CopyBytes        int           `json:"copy_bytes"`
	CopyLatency      Latency       `json:"copy_latency"`
	CopyGBps         float64       `json:"copy_gbps"`
	ParallelCopyGBps float64       `json:"parallel_copy_gbps"`
	SGD              W7OptimResult `json:"sgd_momentum"`
	AdamW            W7OptimResult `json:"adamw"`
}

func (o W7Options) withDefaults() (W7Options, error) {
	if o.Params < 0 || o.Tensors < 0 || o.Steps < 0 || o.Warmup < 0 || o.CopyBytes < 0 {
		return o, fmt.Errorf("bench: W7 options must not be negative: %+v", o)
	}
	if o.Params == 0 {
		o.Params = 10_000_000
	}
	if o.Tensors == 0 {
		o.Tensors = 200
	}
	if o.Steps == 0 {
		o.Steps = 50
	}
	if o.Warmup == 0 {
		o.Warmup = 5
	}
	if o.CopyBytes == 0 {
		o.CopyBytes = 40_000_000
	}
	if o.CopyBytes < 4 {
		return o, fmt.Errorf("bench: W7 copy buffer of %d bytes is too small", o.CopyBytes)
	}
	return o, nil
}

// w7Cols is the cycle of matrix widths W7Shapes draws from.
var w7Cols = [...]int{256, 512, 384, 768, 128, 640}

// W7Shapes returns W7's parameter shapes: tensors−1 layer tensors, a
// matrix [rows, cols] followed by its bias [rows], layer after layer,
// whose sizes vary (layer j gets a share of 99% of params proportional
// to 5 + 7j mod 11, and cols cycles through 256, 512, 384, 768, 128,
// 640), then one vector holding the rest, so that the sizes sum to
// exactly params. It needs tensors ≥ 2 and params ≥ 16·tensors.
func W7Shapes(params, tensors int) ([][]int, error) {
	if tensors < 2 || params < 16*tensors {
		return nil, fmt.Errorf("bench: W7 needs at least 2 tensors and 16 parameters per tensor (got %d parameters in %d tensors)", params, tensors)
	}
	regular := tensors - 1
	layers := (regular + 1) / 2
	budget := params * 99 / 100
	factor := func(j int) int { return 5 + (7*j)%11 }
	sumF := 0
	for j := 0; j < layers; j++ {
		sumF += factor(j)
	}
	shapes := make([][]int, 0, tensors)
	used := 0
	for j := 0; j < layers; j++ {
		b := budget * factor(j) / sumF
		cols := min(w7Cols[j%len(w7Cols)], max(1, b/4))
		bias := 2*j+1 < regular
		per := cols
		if bias {
			per++
		}
		rows := b / per
		if rows < 1 {
			return nil, fmt.Errorf("bench: W7 layer %d gets %d parameters, too few", j, b)
		}
		shapes = append(shapes, []int{rows, cols})
		used += rows * cols
		if bias {
			shapes = append(shapes, []int{rows})
			used += rows
		}
	}
	rest := params - used
	if rest < 1 {
		return nil, fmt.Errorf("bench: W7 shapes overflow %d parameters", params)
	}
	return append(shapes, []int{rest}), nil
}

// W7ShapesArg formats shapes for the peer script's --shapes: "RxC,R,…".
func W7ShapesArg(shapes [][]int) string {
	parts := make([]string, len(shapes))
	for i, s := range shapes {
		dims := make([]string, len(s))
		for k, d := range s {
			dims[k] = strconv.Itoa(d)
		}
		parts[i] = strings.Join(dims, "x")
	}
	return strings.Join(parts, ",")
}

// w7Opt is one optimizer over a fresh parameter set with fixed random
// gradients, and the parameters as they were before its first step.
type w7Opt struct {
	name   string
	bpp    int
	opt    optim.Optimizer
	before []float32
}

// newW7Opt builds params of the given shapes (values N(0, 0.02²)) with
// gradients N(0, 0.01²), in the optimizer's arena.
func newW7Opt(name string, shapes [][]int, seed uint64) (*w7Opt, error) {
	params := make([]*autograd.Var, len(shapes))
	for i, s := range shapes {
		params[i] = autograd.Param(tensor.Empty(tensor.F32, s...))
		params[i].Name = fmt.Sprintf("p%d", i)
	}
	w := &w7Opt{name: name}
	var err error
	switch name {
	case "SGD-momentum":
		w.bpp = W7SGDBytesPerParam
		w.opt, err = optim.NewSGD(params, optim.SGDOptions{LR: 0.01, Momentum: 0.9})
	case "AdamW":
		w.bpp = W7AdamWBytesPerParam
		w.opt, err = optim.NewAdamW(params, optim.AdamWOptions{})
	default:
		err = fmt.Errorf("bench: W7 has no optimizer %q", name)
	}
	if err != nil {
		return nil, err
	}
	rng := tensor.NewRNG(seed)
	p, g := w.opt.Arena().Flat().F32(), w.opt.Arena().FlatGrad().F32()
	for i := range p {
		p[i] = float32(0.02 * rng.NormFloat64())
		g[i] = float32(0.01 * rng.NormFloat64())
	}
	w.before = append([]float32(nil), p...)
	return w, nil
}

// run takes warmup then steps optimizer steps, timing the measured ones.
func (w *w7Opt) run(warmup, steps int) W7OptimResult {
	for i := 0; i < warmup; i++ {
		w.opt.Step()
	}
	lat := make([]time.Duration, steps)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for i := range lat {
		t0 := time.Now()
		w.opt.Step()
		lat[i] = time.Since(t0)
	}
	runtime.ReadMemStats(&ms1)
	n := len(w.before)
	r := W7OptimResult{
		Optimizer:     w.name,
		Latency:       Summarise(lat),
		BytesPerParam: w.bpp,
		BytesPerStep:  int64(w.bpp) * int64(n),
		AllocsPerStep: float64(ms1.Mallocs-ms0.Mallocs) / float64(steps),
	}
	r.GBps = float64(r.BytesPerStep) / (r.Latency.P50us * 1e-6) / 1e9
	changed, sum := 0, 0.0
	for i, v := range w.opt.Arena().Flat().F32() {
		d := float64(v) - float64(w.before[i])
		if d != 0 {
			changed++
		}
		sum += math.Abs(d)
	}
	r.ChangedFraction = float64(changed) / float64(n)
	r.MeanAbsChange = sum / float64(n)
	return r
}

// measureCopy times reps copies of a bytes-sized float32 buffer, with
// Go's copy on one goroutine and split over GOMAXPROCS goroutines, and
// returns the single-goroutine latencies and both bandwidths (read plus
// write bytes over the median time).
func measureCopy(bytes, reps int) (Latency, float64, float64) {
	n := bytes / 4
	src, dst := make([]float32, n), make([]float32, n)
	for i := range src {
		src[i] = float32(i)
	}
	timeIt := func(f func()) Latency {
		f()
		f()
		lat := make([]time.Duration, reps)
		for i := range lat {
			t0 := time.Now()
			f()
			lat[i] = time.Since(t0)
		}
		return Summarise(lat)
	}
	single := timeIt(func() { copy(dst, src) })
	workers := runtime.GOMAXPROCS(0)
	parallel := timeIt(func() {
		var wg sync.WaitGroup
		chunk := (n + workers - 1) / workers
		for lo := 0; lo < n; lo += chunk {
			hi := min(n, lo+chunk)
			wg.Add(1)
			go func() {
				defer wg.Done()
				copy(dst[lo:hi], src[lo:hi])
			}()
		}
		wg.Wait()
	})
	moved := 2 * float64(4*n)
	return single, moved / (single.P50us * 1e-6) / 1e9, moved / (parallel.P50us * 1e-6) / 1e9
}

// RunW7 measures the copy bandwidth, then SGD-momentum and AdamW steps
// over the W7 parameter set (a fresh one per optimizer).
func RunW7(o W7Options) (W7Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return W7Result{}, err
	}
	shapes, err := W7Shapes(o.Params, o.Tensors)
	if err != nil {
		return W7Result{}, err
	}
	res := W7Result{Params: o.Params, Tensors: o.Tensors, Shapes: shapes, Steps: o.Steps, Warmup: o.Warmup, CopyBytes: o.CopyBytes / 4 * 4}
	if o.Progress != nil {
		o.Progress("copy")
	}
	res.CopyLatency, res.CopyGBps, res.ParallelCopyGBps = measureCopy(o.CopyBytes, max(o.Steps, 5))
	for i, name := range []string{"SGD-momentum", "AdamW"} {
		runtime.GC()
		w, err := newW7Opt(name, shapes, o.Seed+uint64(i))
		if err != nil {
			return W7Result{}, err
		}
		if o.Progress != nil {
			o.Progress(name)
		}
		r := w.run(o.Warmup, o.Steps)
		r.FractionOfCopy = r.GBps / res.CopyGBps
		r.FractionOfParallelCopy = r.GBps / res.ParallelCopyGBps
		if r.ChangedFraction == 0 {
			return W7Result{}, fmt.Errorf("bench: W7 %s changed no parameter", name)
		}
		if i == 0 {
			res.SGD = r
		} else {
			res.AdamW = r
		}
	}
	return res, nil
}
