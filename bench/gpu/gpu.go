package gpu

// The GPU workloads W1, W6, W7 and W8 (W5 in w5.go) and what they share:
// the peers, event timing, the reports, and the backend's optional
// interfaces each workload needs.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/bench"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/kernels/device"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

// gpuWorkloads is what --workload all runs on a GPU, in order.
var gpuWorkloads = []string{"W1", "W2", "W4", "W5", "W6", "W7", "W8"}

// PERF.md's GPU targets.
const (
	w1GPUTargetP95us       = 50   // W1 trainer-captured epoch p95 ≤ 50 µs
	w1GPUTargetVsEager     = 5    // … and ≥ 5× faster than PyTorch eager
	w1GPUTargetVsBest      = 2    // … and ≥ 2× faster than PyTorch's best mode
	w6GPUTargetRatio       = 0.95 // GEMM ≥ 0.95× PyTorch
	w7GPUTargetFraction    = 0.80 // ≥ 80% of device copy bandwidth
	w7GPUTargetLaunches    = 3    // ≤ 3 launches per step
	w8GPUTargetPinnedRatio = 2    // pinned ≥ 2× pageable
)

// Run runs the GPU workloads named by workload (W1, W2, W4, W5, W6, W7,
// W8, or all for each in turn; any case) on dev, a CUDA device, as esper bench
// --device cuda does. Once workload, dev and the peers' scripts are
// checked, kernels/device.OpenDevice opens dev (and registers its
// backend for the device's tensors; in a build without the cuda tag it
// says how to get one), and the backend must have the optional
// interfaces of kernels the workloads use (needs). A workload that
// fails, panics included, is an error naming it; with all the others
// still run.
func Run(dev tensor.Device, workload string, c bench.Config, stdout, stderr io.Writer) error {
	workload = strings.ToUpper(workload)
	if dev.Kind != tensor.KindCUDA {
		return fmt.Errorf("device %v is not a CUDA device", dev)
	}
	ids := []string{workload}
	if workload == "ALL" {
		ids = gpuWorkloads
	}
	for _, id := range ids {
		if !slices.Contains(gpuWorkloads, id) {
			return fmt.Errorf("unknown workload %q on %v (available there: W1, W2, W4, W5, W6, W7, W8, all)", id, dev)
		}
	}
	if c.Compare && c.PeerResults == "" {
		if err := bench.CheckPeerScripts(c.PeerDir, "GPU"); err != nil {
			return err
		}
	}
	opened := time.Now()
	be, err := device.OpenDevice(dev)
	if err != nil {
		return err
	}
	// Where the device has no cubins of its architecture, the driver
	// compiles the kernels' PTX on a machine's first start (later
	// processes read its cache): the line says which it was.
	fmt.Fprintln(stderr, device.Opened(dev, be, time.Since(opened)))
	g := &gpuBench{dev: dev, be: be, c: c, set: c.Set, stdout: stdout, stderr: stderr}
	if err := g.interfaces(ids); err != nil {
		return err
	}
	g.machine = bench.ThisGPUMachine(g.desc.DeviceName())
	var errs []error
	for i, id := range ids {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := g.run(id); err != nil {
			if len(ids) == 1 {
				return err
			}
			fmt.Fprintf(stderr, "%s failed: %v\n", id, err)
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// gpuBench is one `esper bench --device cuda` run.
type gpuBench struct {
	dev tensor.Device
	be  kernels.Backend
	// The backend's optional interfaces (nil when a workload that needs
	// one does not run, see needs).
	desc    kernels.DeviceDescriber
	timers  kernels.EventTimers
	stagers kernels.Stagers
	copier  kernels.ByteCopier
	foreach kernels.ForeachStepper

	c              bench.Config
	set            map[string]bool // flags given on the command line
	stdout, stderr io.Writer
	machine        bench.Machine
}

// run runs one workload, turning a panic of the engine into its error.
func (g *gpuBench) run(id string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s on %v: %v", id, g.dev, r)
		}
	}()
	switch id {
	case "W1":
		return g.w1()
	case "W2":
		// The policy's forwards, eager and captured, and W4's
		// environments and PPO: the CPU's workloads on the device,
		// timed and with their host syncs (no PyTorch peer on the GPU).
		return bench.BenchW2(g.stdout, g.stderr, g.c, g.dev)
	case "W4":
		return bench.BenchW4(g.stdout, g.stderr, g.c, g.dev)
	case "W5":
		return g.w5()
	case "W6":
		return g.w6()
	case "W7":
		return g.w7()
	case "W8":
		return g.w8()
	}
	return fmt.Errorf("unknown workload %q", id)
}

// needs are the optional interfaces of kernels each workload uses beside
// kernels.Backend (every one names the device: DeviceDescriber).
var needs = map[string][]reflect.Type{
	"W1": nil,
	"W2": nil,
	"W4": nil,
	"W5": {reflect.TypeFor[kernels.EventTimers](), reflect.TypeFor[kernels.Stagers]()},
	"W6": {reflect.TypeFor[kernels.EventTimers]()},
	"W7": {reflect.TypeFor[kernels.EventTimers](), reflect.TypeFor[kernels.ByteCopier](), reflect.TypeFor[kernels.ForeachStepper]()},
	"W8": {reflect.TypeFor[kernels.EventTimers](), reflect.TypeFor[kernels.Stagers](), reflect.TypeFor[kernels.ByteCopier]()},
}

// interfaces sets g's optional interfaces from its backend, or says which
// one the backend lacks for the workloads ids (before any runs).
func (g *gpuBench) interfaces(ids []string) error {
	want := []reflect.Type{reflect.TypeFor[kernels.DeviceDescriber]()}
	for _, id := range ids {
		want = append(want, needs[id]...)
	}
	bt := reflect.TypeOf(g.be)
	for _, it := range want {
		if !bt.Implements(it) {
			return fmt.Errorf("the %s backend of %v has no kernels.%s, which %s needs", g.be.Name(), g.dev, it.Name(), strings.Join(ids, ", "))
		}
	}
	g.desc = g.be.(kernels.DeviceDescriber)
	g.timers, _ = g.be.(kernels.EventTimers)
	g.stagers, _ = g.be.(kernels.Stagers)
	g.copier, _ = g.be.(kernels.ByteCopier)
	g.foreach, _ = g.be.(kernels.ForeachStepper)
	return nil
}

// capture records step as a graph of the backend (BeginCapture, step,
// EndCapture): an error from step, or from the backend, ends the capture
// and is returned, the graph closed.
func (g *gpuBench) capture(step func() error) (kernels.Graph, error) {
	if err := g.be.BeginCapture(); err != nil {
		return nil, err
	}
	stepErr := step()
	gr, err := g.be.EndCapture()
	if stepErr != nil {
		if gr != nil {
			closeGraph(gr)
		}
		return nil, fmt.Errorf("capture: %w", stepErr)
	}
	return gr, err
}

// closeGraph frees a graph at once when it can (kernels.GraphCloser);
// otherwise it goes when collected.
func closeGraph(gr kernels.Graph) error {
	if c, ok := gr.(kernels.GraphCloser); ok {
		return c.Close()
	}
	return nil
}

// orDefault is v, or def when v is 0 (the flags' "workload default").
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// header prints a GPU workload's first line.
func (g *gpuBench) header(title string) {
	m := g.machine
	fmt.Fprintf(g.stdout, "%s on %s (%v; host %s, %s, commit %s)\n", title, m.GPU, g.dev, m.CPU, m.GoVersion, m.Commit)
}

// report is a bench.Report of this device and machine.
func (g *gpuBench) report(workload string, params map[string]any) bench.Report {
	params["gpu"] = g.machine.GPU
	return bench.Report{Workload: workload, Parameters: params, Machine: g.machine, Device: g.dev.String(),
		Results: map[string]any{}, Ratios: map[string]any{}}
}

// peer returns the "results" object of the PyTorch GPU peer of workload w
// ("w1", …) when --compare pytorch or --peer-results was given, and
// records the peer's whole report in rep.Peer: read from --peer-results
// DIR/pytorch_<w>.json when that flag is set (gpu/run.sh runs the peers
// first), otherwise by running gpu_peers.py from --peer-dir with args. A
// peer that cannot run is no error: rep.PeerError says why, and nil is
// returned.
func (g *gpuBench) peer(rep *bench.Report, w string, args ...string) map[string]any {
	if !g.c.Compare && g.c.PeerResults == "" {
		return nil
	}
	var data []byte
	var err error
	if g.c.PeerResults != "" {
		path := filepath.Join(g.c.PeerResults, "pytorch_"+w+".json")
		data, err = os.ReadFile(path)
		if err == nil {
			fmt.Fprintf(g.stdout, "  PyTorch peer figures from %s\n", path)
		}
	} else {
		data, err = g.runGPUPeer(w, args...)
	}
	var res map[string]any
	if err == nil {
		res, err = bench.ParsePeerReport(data, w)
	}
	if err != nil {
		rep.PeerError = err.Error()
		fmt.Fprintf(g.stderr, "PyTorch peer for %s unavailable: %v\n(running our side only)\n", strings.ToUpper(w), err)
		return nil
	}
	rep.Peer = res
	out, _ := res["results"].(map[string]any)
	return out
}

// runGPUPeer runs gpu_peers.py w with the python3 on PATH (ESPER_PYTHON
// overrides it: the GPU machine's PyTorch need not be the system one) and
// returns the JSON it wrote.
func (g *gpuBench) runGPUPeer(w string, args ...string) ([]byte, error) {
	py := os.Getenv("ESPER_PYTHON")
	if py == "" {
		var err error
		if py, err = exec.LookPath("python3"); err != nil {
			return nil, fmt.Errorf("no python3 on PATH (set ESPER_PYTHON): %w", err)
		}
	}
	tmp, err := os.CreateTemp("", "esper-gpu-peer-*.json")
	if err != nil {
		return nil, err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	script := filepath.Join(g.c.PeerDir, "gpu_peers.py")
	fmt.Fprintf(g.stdout, "  running the PyTorch peer (%s %s) ...\n", script, w)
	cmd := exec.Command(py, append([]string{script, w, "--json", tmp.Name()}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		// A peer whose every mode but some ran writes their figures and
		// exits non-zero (gpu_peers.py records each failed mode's error):
		// keep what it measured.
		if data, rerr := os.ReadFile(tmp.Name()); rerr == nil && len(data) > 0 {
			fmt.Fprintf(g.stderr, "  the PyTorch peer %s exited with %v; using the modes it measured\n", w, err)
			return data, nil
		}
		tail := out.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return nil, fmt.Errorf("%s %s failed: %v\n%s", script, w, err, tail)
	}
	return os.ReadFile(tmp.Name())
}

// firstLine returns s up to its first newline.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// timeReps runs f warmup times, then times reps runs with t and returns
// their summary and the fastest.
func timeReps(t kernels.EventTimer, warmup, reps int, f func() error) (bench.Latency, time.Duration, error) {
	for i := 0; i < warmup; i++ {
		if err := f(); err != nil {
			return bench.Latency{}, 0, err
		}
	}
	lat := make([]time.Duration, reps)
	for i := range lat {
		d, err := t.Time(f)
		if err != nil {
			return bench.Latency{}, 0, err
		}
		lat[i] = d
	}
	return bench.Summarise(lat), slices.Min(lat), nil
}

// catch runs f, turning a panic (the engine's misuse report) into an
// error, so that a step can be passed where an error is returned.
func catch(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	f()
	return nil
}

// toDev copies a host tensor to the benchmark's device.
func (g *gpuBench) toDev(t *tensor.Tensor) *tensor.Tensor {
	d, err := t.ToDevice(g.dev)
	if err != nil {
		panic(err)
	}
	return d
}

// toHost copies a device tensor back (waiting for the device).
func toHost(t *tensor.Tensor) *tensor.Tensor {
	h, err := t.ToDevice(tensor.CPU)
	if err != nil {
		panic(err)
	}
	return h
}

// ---- W1 -------------------------------------------------------------

// w1Mode is one way W1 runs: the bare engine loop or tolaria.Trainer,
// each eager or captured.
type w1Mode struct{ trainer, captured, perBatch bool }

// w1Modes are W1's five modes in the order they run and print: the bare
// loop eager and captured, the trainer eager, captured batch by batch
// (bench.W1Options.PerBatch) and captured whole (its epoch graph).
var w1Modes = []w1Mode{{false, false, false}, {false, true, false}, {true, false, false}, {true, true, true}, {true, true, false}}

// w1PeerModes are the PyTorch GPU peer's W1 modes.
var w1PeerModes = []string{"eager", "reduce-overhead", "cuda-graph"}

// w1Set is what runW1Modes measured: each mode's result by its name
// (bench.W1Result.Mode), in run order, and the check of their final
// metrics against the CPU backend's.
type w1Set struct {
	order  []string
	byMode map[string]bench.W1Result
	// refBare and refTrainer are the final metrics of the same epochs on
	// the CPU backend: the bare loop's and the trainer's (whose model is
	// initialised differently, so each is compared with its own).
	refBare, refTrainer bench.EpochMetrics
	// mismatch says which modes ended away from their CPU reference.
	mismatch []string
}

// runW1Modes runs W1's five modes on dev for warmup+epochs epochs each —
// the bare loop eager and captured (fed through the graph's static
// inputs), and tolaria.Trainer eager, captured per batch and captured
// whole (its data resident on dev from the start, so no epoch copies a
// batch) — then the same epochs
// eagerly on the CPU backend, and compares each mode's final metrics
// with the CPU's. progress gets a line per mode.
func runW1Modes(dev tensor.Device, epochs, warmup int, progress io.Writer) (w1Set, error) {
	s := w1Set{byMode: map[string]bench.W1Result{}}
	for _, m := range w1Modes {
		o := bench.W1Options{Epochs: epochs, Warmup: warmup, Captured: m.captured, PerBatch: m.perBatch, Device: dev}
		run := bench.RunW1
		if m.trainer {
			run = bench.RunW1Trainer
		} else {
			o.StaticInputs = m.captured
		}
		r, err := run(o)
		if err != nil {
			return s, err
		}
		fmt.Fprintf(progress, "  ran %s: %d warm-up + %d epochs", r.Mode, warmup, epochs)
		if r.Launches > 0 {
			fmt.Fprintf(progress, " (%d graph nodes per epoch)", r.Launches)
		}
		fmt.Fprintln(progress)
		s.order = append(s.order, r.Mode)
		s.byMode[r.Mode] = r
	}
	// Correctness next to the figures: the same epochs on the CPU backend
	// end at the same metrics.
	ref, err := bench.RunW1(bench.W1Options{Epochs: epochs, Warmup: warmup})
	if err != nil {
		return s, err
	}
	refTr, err := bench.RunW1Trainer(bench.W1Options{Epochs: epochs, Warmup: warmup})
	if err != nil {
		return s, err
	}
	s.refBare, s.refTrainer = ref.Final, refTr.Final
	for _, mode := range s.order {
		want := s.refBare
		if strings.HasPrefix(mode, "trainer-") {
			want = s.refTrainer
		}
		if f := s.byMode[mode].Final; !w1Close(f, want) {
			s.mismatch = append(s.mismatch, fmt.Sprintf("%s ended at %+v, the CPU at %+v", mode, f, want))
		}
	}
	return s, nil
}

// w1BestPeer returns the peer's fastest W1 mode by p95 among those that
// ran (a p95 figure and no error), or "" and 0 when none did.
func w1BestPeer(peer map[string]any) (string, float64) {
	best, bestP95 := "", 0.0
	for _, m := range w1PeerModes {
		if r, _ := peer[m].(map[string]any); r != nil {
			if e, _ := r["error"].(string); e != "" {
				continue
			}
		}
		if p95 := bench.Figure(peer, m, "p95_us"); p95 > 0 && (bestP95 == 0 || p95 < bestP95) {
			best, bestP95 = m, p95
		}
	}
	return best, bestP95
}

func (g *gpuBench) w1() error {
	c := g.c
	warmup := orDefault(c.Warmup, 50)
	g.header("W1 tolaria-ref (CUDA)")
	rep := g.report("W1", map[string]any{
		"model": "Linear(16->4)+bias", "loss": "cross-entropy", "batch": 4, "samples_per_epoch": 16,
		"optimizer": "SGD lr=0.01 momentum=0.9", "validation": "inference mode, 4 batches of 4 (correct counts with CountCorrect)",
		"modes": "eager: the bare engine loop launching every kernel; captured: the bare epoch captured once as a CUDA graph (autograd.Capture) and replayed, fed through the graph's own static input buffers (Captured.Inputs, holding x and y from the capture on), so a replay copies no input; " +
			"trainer-eager / trainer-captured-per-batch / trainer-captured: the same epoch run by tolaria.Trainer.RunEpoch (bench.RunW1Trainer: the epoch's telemetry into a nissa hub, the data resident on the device as tolaria.Fixed batches so no batch is copied; per-batch: the train step and the validation batch captured and replayed once per batch, the source hiding FixedBatches; trainer-captured: the whole epoch captured as one graph and replayed)",
		"graph_nodes": "launches_per_epoch: the bare captured epoch's one graph; the trainer's epoch graph (tolaria.Trainer.EpochGraphNodes), replayed once; per batch its step graph × 4 training batches + its validation graph × 4 validation batches (tolaria.Trainer.GraphNodes), replayed as 8 graphs (graph_replays_per_epoch)",
		"targets":     "PERF.md W1 GPU, for the trainer-captured epoch: p95 ≤ 50 µs, ≥ 5× PyTorch eager, ≥ 2× PyTorch's best mode (the lowest p95 of eager, reduce-overhead and cuda-graph that ran)",
		"timing":      "wall clock per epoch, up to the epoch's metrics read back to the host (which waits for the device), as the peer times fn() + met.tolist()",
		"epochs":      c.Epochs, "warmup": warmup,
	})
	s, err := runW1Modes(g.dev, c.Epochs, warmup, g.stdout)
	if err != nil {
		return err
	}
	var rows []gpuRow
	for _, mode := range s.order {
		r := s.byMode[mode]
		rep.Results[mode] = r
		nodes := "-"
		if r.Launches > 0 {
			nodes = fmt.Sprint(r.Launches)
		}
		rows = append(rows, gpuRow{"esper " + mode, r.Latency.P50us, r.Latency.P95us, r.Latency.P99us, nodes})
	}
	rep.Results["cpu_reference_final"] = s.refBare
	rep.Results["cpu_reference_trainer_final"] = s.refTrainer
	rep.Results["final_matches_cpu"] = len(s.mismatch) == 0
	peer := g.peer(&rep, "w1", "--reps", fmt.Sprint(c.Epochs), "--warmup", fmt.Sprint(warmup))
	capP95 := s.byMode["captured"].Latency.P95us
	trP95 := s.byMode["trainer-captured"].Latency.P95us
	for _, m := range w1PeerModes {
		if r, _ := peer[m].(map[string]any); r != nil {
			if e, _ := r["error"].(string); e != "" {
				fmt.Fprintf(g.stdout, "  PyTorch %s failed: %s\n", m, firstLine(e))
			}
		}
		p95 := bench.Figure(peer, m, "p95_us")
		if p95 == 0 {
			continue
		}
		rows = append(rows, gpuRow{"pytorch " + m, bench.Figure(peer, m, "p50_us"), p95, 0, "-"})
		for _, mode := range s.order {
			rep.Ratios[mode+"_speedup_p95_vs_pytorch_"+m] = p95 / s.byMode[mode].Latency.P95us
		}
	}
	printGPURows(g.stdout, "µs", rows)
	fmt.Fprintf(g.stdout, "trainer-captured p95 %.1f µs (bare captured %.1f µs) %s the PERF.md target of ≤ %d µs\n",
		trP95, capP95, bench.Verdict(trP95 <= w1GPUTargetP95us), w1GPUTargetP95us)
	if e := bench.Figure(peer, "eager", "p95_us"); e > 0 {
		fmt.Fprintf(g.stdout, "trainer-captured vs PyTorch eager %.1f× (bare captured %.1f×) %s the target of ≥ %d×\n",
			e/trP95, e/capP95, bench.Verdict(e/trP95 >= w1GPUTargetVsEager), w1GPUTargetVsEager)
	}
	if best, p95 := w1BestPeer(peer); best != "" {
		q := p95 / trP95
		rep.Ratios["trainer-captured_speedup_p95_vs_pytorch_best"] = q
		rep.Ratios["captured_speedup_p95_vs_pytorch_best"] = p95 / capP95
		rep.Results["pytorch_best_mode"] = best
		fmt.Fprintf(g.stdout, "trainer-captured vs PyTorch's best mode (%s, p95 %.1f µs) %.1f× (bare captured %.1f×) %s the target of ≥ %d×\n",
			best, p95, q, p95/capP95, bench.Verdict(q >= w1GPUTargetVsBest), w1GPUTargetVsBest)
	}
	if err := bench.SaveReport(g.stdout, c.JSONDir, rep); err != nil {
		return err
	}
	if len(s.mismatch) > 0 {
		return fmt.Errorf("W1 on %v does not match the CPU backend: %s", g.dev, strings.Join(s.mismatch, "; "))
	}
	return nil
}

// w1Close reports whether two final epoch metrics agree within fp32
// drift: losses to 1e-3 relative, accuracy to one sample in 16.
func w1Close(a, b bench.EpochMetrics) bool {
	rel := func(x, y float64) bool { return math.Abs(x-y) <= 1e-3*math.Max(1, math.Abs(y)) }
	return a.Epoch == b.Epoch && rel(a.TrainLoss, b.TrainLoss) && rel(a.ValLoss, b.ValLoss) && math.Abs(a.ValAccuracy-b.ValAccuracy) <= 1.0/16+1e-9
}

// gpuRow is a line of a latency table: nodes is its graph node count
// ("-" when none was counted), "" for a table without that column.
type gpuRow struct {
	name          string
	p50, p95, p99 float64
	nodes         string
}

// printGPURows prints latencies in the given unit (0 prints as "-"), and
// a graph-nodes column when a row has one.
func printGPURows(w io.Writer, unit string, rows []gpuRow) {
	withNodes := slices.ContainsFunc(rows, func(r gpuRow) bool { return r.nodes != "" })
	tw := bench.NewTable(w, bench.AlignRight)
	fmt.Fprintf(tw, "\tp50 %s\tp95 %s\tp99 %s\t", unit, unit, unit)
	if withNodes {
		fmt.Fprint(tw, "graph nodes\t")
	}
	fmt.Fprintln(tw)
	cell := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v)
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t", r.name, cell(r.p50), cell(r.p95), cell(r.p99))
		if withNodes {
			fmt.Fprintf(tw, "%s\t", r.nodes)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// ---- W6 -------------------------------------------------------------

// gemmResult is one precision's W6 figures.
type gemmResult struct {
	Precision    string        `json:"precision"`
	Latency      bench.Latency `json:"latency"`
	MedianTFLOPS float64       `json:"median_tflops"`
	BestTFLOPS   float64       `json:"best_tflops"`
	// SampledRelError is the relative norm error of CheckedEntries
	// random entries of C against a float64 product of the same
	// (precision-rounded) inputs; MaxRelError is its check's bound.
	// NonFinite is set (and SampledRelError is -1, JSON having no NaN)
	// when an entry was NaN or infinite.
	SampledRelError float64 `json:"sampled_rel_error"`
	MaxRelError     float64 `json:"max_rel_error"`
	CheckedEntries  int     `json:"checked_entries"`
	NonFinite       bool    `json:"non_finite,omitempty"`
	best            time.Duration
}

// w6Checked is how many entries of C are checked against float64.
const w6Checked = 64

func (g *gpuBench) w6() error {
	c := g.c
	n := 8192
	if g.set["size"] {
		n = c.Size
	}
	reps, warmup := orDefault(c.Reps, 50), orDefault(c.Warmup, 10)
	g.header("W6 gemm (TF32 and BF16 through cuBLAS)")
	flop := 2 * float64(n) * float64(n) * float64(n)
	rep := g.report("W6", map[string]any{
		"op": "C = A·B, n×n row-major, A and B uniform in [-1, 1]", "size": n, "reps": reps, "warmup": warmup,
		"flop_per_gemm": flop, "tf32": "F32 operands, cuBLAS COMPUTE_32F_FAST_TF32 (Backend.MatMul, matmul precision High)",
		"bf16": "BF16 operands and result, fp32 accumulation (Backend.MatMul)", "timing": "CUDA events around each GEMM, median",
		"check": fmt.Sprintf("%d random entries against a float64 product of the rounded inputs", w6Checked),
	})
	fmt.Fprintf(g.stdout, "  drawing two %d×%d matrices ...\n", n, n)
	rng := tensor.NewRNG(6)
	ah := tensor.Uniform(rng, tensor.F32, -1, 1, n, n)
	bh := tensor.Uniform(rng, tensor.F32, -1, 1, n, n)
	tm, err := g.timers.NewEventTimer()
	if err != nil {
		return err
	}
	defer tm.Close()
	var failed []string
	for _, p := range []struct {
		name string
		dt   tensor.DType
		prec kernels.Precision
		tol  float64
	}{{"tf32", tensor.F32, kernels.High, 1e-2}, {"bf16", tensor.BF16, kernels.Highest, 3e-2}} {
		fmt.Fprintf(g.stdout, "  %s: %d³ GEMMs ...\n", p.name, n)
		r, err := g.gemm(tm, ah, bh, p.dt, p.prec, warmup, reps, rng)
		if err != nil {
			return err
		}
		r.Precision, r.MaxRelError = p.name, p.tol
		r.MedianTFLOPS = flop / (r.Latency.P50us * 1e-6) / 1e12
		r.BestTFLOPS = flop / r.best.Seconds() / 1e12
		rep.Results[p.name] = r
		switch {
		case r.NonFinite:
			failed = append(failed, p.name+" gave NaN or infinite entries")
		case !(r.SampledRelError <= p.tol):
			failed = append(failed, fmt.Sprintf("%s relative error %.3g > %.3g", p.name, r.SampledRelError, p.tol))
		}
	}
	peer := g.peer(&rep, "w6", "--size", fmt.Sprint(n), "--reps", fmt.Sprint(reps), "--warmup", fmt.Sprint(warmup))
	tw := bench.NewTable(g.stdout, bench.AlignRight)
	fmt.Fprintln(tw, "\tmedian TFLOP/s\tbest TFLOP/s\tp50 ms\trel. error\tpytorch TFLOP/s\tesper ÷ pytorch\t")
	for _, name := range []string{"tf32", "bf16"} {
		r := rep.Results[name].(gemmResult)
		pt := bench.Figure(peer, name, "tflops")
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.3f\t%.2g\t%s\t%s\t\n", name, r.MedianTFLOPS, r.BestTFLOPS, r.Latency.P50us/1e3,
			r.SampledRelError, numOrDash(pt), bench.Ratio(r.MedianTFLOPS, pt))
		if pt > 0 {
			rep.Ratios[name+"_vs_pytorch_median"] = r.MedianTFLOPS / pt
		}
	}
	tw.Flush()
	for _, name := range []string{"tf32", "bf16"} {
		if q, ok := rep.Ratios[name+"_vs_pytorch_median"].(float64); ok {
			fmt.Fprintf(g.stdout, "%s at %.2f× PyTorch %s the PERF.md target of ≥ %.2f×\n", name, q, bench.Verdict(q >= w6GPUTargetRatio), w6GPUTargetRatio)
		}
	}
	if err := bench.SaveReport(g.stdout, c.JSONDir, rep); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("W6 results are wrong: %s", strings.Join(failed, "; "))
	}
	return nil
}

// numOrDash formats a positive figure, or "-".
func numOrDash(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

// gemm uploads ah and bh in dtype dt, checks one product against float64
// (C poisoned with NaN first), then times reps products after warmup.
func (g *gpuBench) gemm(tm kernels.EventTimer, ah, bh *tensor.Tensor, dt tensor.DType, prec kernels.Precision, warmup, reps int, rng interface{ IntN(int) int }) (gemmResult, error) {
	n := ah.Dim(0)
	// The products in prec; the backend's default after.
	g.be.SetMatmulPrecision(prec)
	defer g.be.SetMatmulPrecision(kernels.Highest)
	ac, bc := ah, bh
	if dt != tensor.F32 {
		ac, bc = ah.Cast(dt), bh.Cast(dt)
	}
	a, b := g.toDev(ac), g.toDev(bc)
	defer a.Storage().Free()
	defer b.Storage().Free()
	cd, err := tensor.EmptyOn(g.dev, dt, n, n)
	if err != nil {
		return gemmResult{}, err
	}
	defer cd.Storage().Free()
	if err := catch(func() { g.be.Fill(cd, math.NaN()) }); err != nil {
		return gemmResult{}, err
	}
	mm := func() error { return catch(func() { g.be.MatMul(cd, a, b, false, false) }) }
	if err := mm(); err != nil {
		return gemmResult{}, err
	}
	// The reference uses the inputs as the device saw them (bf16-rounded
	// for BF16); TF32's own rounding is part of the error.
	av, bv := elems(ac), elems(bc)
	var num2, den2 float64
	for s := 0; s < w6Checked; s++ {
		i, j := rng.IntN(n), rng.IntN(n)
		want := 0.0
		for k := 0; k < n; k++ {
			want += av(i*n+k) * bv(k*n+j)
		}
		got := toHost(cd.Narrow(0, i, 1)).Float64s()[j]
		num2 += (got - want) * (got - want)
		den2 += want * want
	}
	res := gemmResult{SampledRelError: math.Sqrt(num2 / den2), CheckedEntries: w6Checked}
	if math.IsNaN(res.SampledRelError) || math.IsInf(res.SampledRelError, 0) {
		res.SampledRelError, res.NonFinite = -1, true
	}
	lat, best, err := timeReps(tm, warmup, reps, mm)
	if err != nil {
		return gemmResult{}, err
	}
	res.Latency, res.best = lat, best
	return res, nil
}

// elems reads the elements of a contiguous F32 or BF16 host tensor as
// float64, without converting the whole tensor.
func elems(t *tensor.Tensor) func(i int) float64 {
	if t.DType() == tensor.BF16 {
		u := t.U16()
		return func(i int) float64 { return float64(tensor.BF16ToF32(u[i])) }
	}
	f := t.F32()
	return func(i int) float64 { return float64(f[i]) }
}

// ---- W7 -------------------------------------------------------------

// stepResult is one optimizer layout's W7 figures.
type stepResult struct {
	Optimizer string        `json:"optimizer"`
	Layout    string        `json:"layout"` // "arena" or "foreach"
	Latency   bench.Latency `json:"step_latency"`
	// Launches is the node count of one captured step: the kernels the
	// step launches.
	Launches       int     `json:"launches_per_step"`
	BytesPerStep   int64   `json:"bytes_per_step"`
	GBps           float64 `json:"gbps"`
	FractionOfCopy float64 `json:"fraction_of_copy"`
	// ChangedFraction is the fraction of parameters changed by the
	// steps, and MeanAbsChange the mean |Δp|: evidence that they ran.
	ChangedFraction float64 `json:"changed_fraction"`
	MeanAbsChange   float64 `json:"mean_abs_change"`
}

func (g *gpuBench) w7() error {
	c := g.c
	steps, warmup := orDefault(c.Steps, 50), orDefault(c.Warmup, 5)
	shapes, err := bench.W7Shapes(c.Params, c.Tensors)
	if err != nil {
		return err
	}
	g.header("W7 foreach-optim (fp32, CUDA)")
	rep := g.report("W7", map[string]any{
		"params": c.Params, "tensors": c.Tensors, "shapes": shapes, "steps": steps, "warmup": warmup,
		"sgd":             "SGD lr=0.01 momentum=0.9",
		"adamw":           "AdamW lr=1e-3 betas=(0.9,0.999) eps=1e-8 weight_decay=0.01",
		"layouts":         "arena: optim.SGD/optim.AdamW over a flat parameter arena (step = counter increment + one fused kernel); foreach: the same update over 200 separately allocated tensors with one multi-tensor launch (kernels.ForeachStepper's ForeachSGDStep/ForeachAdamWStep), PyTorch's foreach layout",
		"bytes_per_param": map[string]any{"sgd_momentum": bench.W7SGDBytesPerParam, "adamw": bench.W7AdamWBytesPerParam},
		"copy":            "cuMemcpyDtoDAsync of params fp32 values, read+write bytes over the median time",
		"launches":        "nodes of one step captured as a CUDA graph",
		"timing":          "CUDA events around each step, median",
	})
	tm, err := g.timers.NewEventTimer()
	if err != nil {
		return err
	}
	defer tm.Close()
	fmt.Fprintf(g.stdout, "  device copy bandwidth (%d MB buffer) ...\n", 4*c.Params/1_000_000)
	copyLat, copyGBps, err := g.copyBandwidth(tm, c.Params, max(steps, 20))
	if err != nil {
		return err
	}
	rep.Results["copy_latency"], rep.Results["copy_gbps"] = copyLat, copyGBps
	var all []stepResult
	for i, name := range []string{"SGD-momentum", "AdamW"} {
		for _, layout := range []string{"arena", "foreach"} {
			fmt.Fprintf(g.stdout, "  %s steps (%s) over %d parameters in %d tensors ...\n", name, layout, c.Params, c.Tensors)
			r, err := g.optimSteps(tm, name, layout, shapes, uint64(70+i), warmup, steps)
			if err != nil {
				return fmt.Errorf("%s (%s): %w", name, layout, err)
			}
			r.FractionOfCopy = r.GBps / copyGBps
			if r.ChangedFraction == 0 {
				return fmt.Errorf("W7 %s (%s) changed no parameter", name, layout)
			}
			key := map[string]string{"SGD-momentum": "sgd_momentum", "AdamW": "adamw"}[name]
			if layout == "foreach" {
				key += "_foreach"
			}
			rep.Results[key] = r
			rep.Ratios[key+"_fraction_of_copy"] = r.FractionOfCopy
			all = append(all, r)
		}
	}
	peer := g.peer(&rep, "w7", "--reps", fmt.Sprint(steps), "--warmup", fmt.Sprint(warmup))
	tw := bench.NewTable(g.stdout, bench.AlignRight)
	fmt.Fprintln(tw, "\tp50 ms\tp95 ms\tlaunches\tGB/s\t% of copy\t")
	for _, r := range all {
		fmt.Fprintf(tw, "esper %s (%s)\t%.3f\t%.3f\t%d\t%.0f\t%.0f%%\t\n", r.Optimizer, r.Layout, r.Latency.P50us/1e3, r.Latency.P95us/1e3,
			r.Launches, r.GBps, 100*r.FractionOfCopy)
	}
	for _, k := range []string{"sgd_momentum", "adamw"} {
		ms := bench.Figure(peer, k, "median_ms")
		if ms == 0 {
			continue
		}
		launches := "-"
		if l := bench.Figure(peer, k, "launches"); l > 0 {
			launches = fmt.Sprint(l)
		}
		pcopy := bench.Figure(peer, "copy", "gbps")
		frac := "-"
		if pcopy > 0 {
			frac = fmt.Sprintf("%.0f%%", 100*bench.Figure(peer, k, "gbps")/pcopy)
		}
		fmt.Fprintf(tw, "pytorch %s (foreach)\t%.3f\t-\t%s\t%.0f\t%s\t\n", k, ms, launches, bench.Figure(peer, k, "gbps"), frac)
		for _, layout := range []string{"", "_foreach"} {
			if r, ok := rep.Results[k+layout].(stepResult); ok {
				rep.Ratios[k+layout+"_speedup_vs_pytorch_median"] = ms * 1e3 / r.Latency.P50us
			}
		}
	}
	tw.Flush()
	fmt.Fprintf(g.stdout, "device copy (read+write, %d MB): %.0f GB/s", 4*c.Params/1_000_000, copyGBps)
	if p := bench.Figure(peer, "copy", "gbps"); p > 0 {
		fmt.Fprintf(g.stdout, ", torch copy_ %.0f GB/s", p)
	}
	fmt.Fprintln(g.stdout)
	for _, r := range all {
		fmt.Fprintf(g.stdout, "%s (%s): %d launches per step, %.0f%% of copy bandwidth: %s the PERF.md targets (≤ %d launches, ≥ %.0f%%)\n",
			r.Optimizer, r.Layout, r.Launches, 100*r.FractionOfCopy,
			bench.Verdict(r.Launches <= w7GPUTargetLaunches && r.FractionOfCopy >= w7GPUTargetFraction), w7GPUTargetLaunches, 100*w7GPUTargetFraction)
	}
	return bench.SaveReport(g.stdout, c.JSONDir, rep)
}

// copyBandwidth times device-to-device copies of n fp32 values and
// returns the latencies and the read+write bandwidth at the median.
func (g *gpuBench) copyBandwidth(tm kernels.EventTimer, n, reps int) (bench.Latency, float64, error) {
	src := g.toDev(tensor.Normal(tensor.NewRNG(7), tensor.F32, 0, 1, n))
	defer src.Storage().Free()
	dst, err := tensor.EmptyOn(g.dev, tensor.F32, n)
	if err != nil {
		return bench.Latency{}, 0, err
	}
	defer dst.Storage().Free()
	lat, _, err := timeReps(tm, 3, reps, func() error { return g.copier.CopyDeviceToDevice(dst, src) })
	if err != nil {
		return bench.Latency{}, 0, err
	}
	return lat, 2 * 4 * float64(n) / (lat.P50us * 1e-6) / 1e9, nil
}

// optimSteps builds one optimizer over fresh parameters (N(0, 0.02²))
// with fixed gradients (N(0, 0.01²)) in the given layout, counts the
// launches of a captured step, and times warmup+steps eager steps.
func (g *gpuBench) optimSteps(tm kernels.EventTimer, name, layout string, shapes [][]int, seed uint64, warmup, steps int) (stepResult, error) {
	rng := tensor.NewRNG(seed)
	hostParams := make([]*tensor.Tensor, len(shapes))
	total := 0
	for i, s := range shapes {
		hostParams[i] = tensor.Normal(rng, tensor.F32, 0, 0.02, s...)
		total += hostParams[i].Numel()
	}
	r := stepResult{Optimizer: name, Layout: layout, BytesPerStep: int64(bench.W7SGDBytesPerParam) * int64(total)}
	if name == "AdamW" {
		r.BytesPerStep = int64(bench.W7AdamWBytesPerParam) * int64(total)
	}
	var step func() error
	var params []*tensor.Tensor // the parameters as the step sees them
	switch layout {
	case "arena":
		vars := make([]*autograd.Var, len(shapes))
		for i, h := range hostParams {
			vars[i] = autograd.Param(g.toDev(h))
		}
		var opt optim.Optimizer
		var err error
		if name == "AdamW" {
			opt, err = optim.NewAdamW(vars, optim.AdamWOptions{})
		} else {
			opt, err = optim.NewSGD(vars, optim.SGDOptions{LR: 0.01, Momentum: 0.9})
		}
		if err != nil {
			return r, err
		}
		grad := g.toDev(tensor.Normal(rng, tensor.F32, 0, 0.01, total))
		g.be.Copy(opt.Arena().FlatGrad(), grad)
		grad.Storage().Free()
		params = []*tensor.Tensor{opt.Arena().Flat()}
		step = func() error { return catch(opt.Step) }
	case "foreach":
		var grads, ms, vs []*tensor.Tensor
		for i, h := range hostParams {
			params = append(params, g.toDev(h))
			grads = append(grads, g.toDev(tensor.Normal(rng, tensor.F32, 0, 0.01, shapes[i]...)))
			ms = append(ms, g.zeros(shapes[i]))
			if name == "AdamW" {
				vs = append(vs, g.zeros(shapes[i]))
			}
		}
		lr := 0.01
		if name == "AdamW" {
			lr = 1e-3
		}
		hyper := g.toDev(tensor.FromSlice([]float64{lr, 0}, 2))
		counter := hyper.Narrow(0, 1, 1)
		sgd := kernels.SGDOptions{Momentum: 0.9}
		adamw := kernels.AdamWOptions{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
		step = func() error {
			return catch(func() {
				g.be.Increment(counter, nil)
				if name == "AdamW" {
					g.foreach.ForeachAdamWStep(params, grads, ms, vs, hyper, nil, adamw)
					return
				}
				g.foreach.ForeachSGDStep(params, grads, ms, hyper, nil, sgd)
			})
		}
	default:
		return r, fmt.Errorf("unknown layout %q", layout)
	}
	before := make([]*tensor.Tensor, len(params))
	for i, p := range params {
		before[i] = toHost(p)
	}
	if err := step(); err != nil { // eager first: caches a foreach table
		return r, err
	}
	gr, err := g.capture(step)
	if err != nil {
		return r, fmt.Errorf("capturing a step to count its launches: %w", err)
	}
	r.Launches = gr.Len()
	if err := closeGraph(gr); err != nil {
		return r, err
	}
	lat, _, err := timeReps(tm, warmup, steps, step)
	if err != nil {
		return r, err
	}
	r.Latency = lat
	r.GBps = float64(r.BytesPerStep) / (lat.P50us * 1e-6) / 1e9
	changed, sum, n := 0, 0.0, 0
	for i, p := range params {
		after, was := toHost(p).Float64s(), before[i].Float64s()
		for k := range after {
			d := after[k] - was[k]
			if d != 0 {
				changed++
			}
			sum += math.Abs(d)
		}
		n += len(after)
	}
	r.ChangedFraction, r.MeanAbsChange = float64(changed)/float64(n), sum/float64(n)
	return r, nil
}

// zeros is a zero-filled F32 device tensor.
func (g *gpuBench) zeros(shape []int) *tensor.Tensor {
	t, err := tensor.EmptyOn(g.dev, tensor.F32, shape...)
	if err != nil {
		panic(err)
	}
	g.be.Fill(t, 0)
	return t
}

// ---- W8 -------------------------------------------------------------

// copyResult is one W8 host→device path.
type copyResult struct {
	Path     string        `json:"path"`
	Latency  bench.Latency `json:"latency"`
	GBps     float64       `json:"gbps"` // batch bytes over the median copy
	Verified bool          `json:"verified"`
}

func (g *gpuBench) w8() error {
	c := g.c
	reps, warmup := orDefault(c.Reps, 200), orDefault(c.Warmup, 20)
	g.header("W8 h2d-staging (CUDA)")
	shape := []int{128, 1, 28, 28}
	host := tensor.Normal(tensor.NewRNG(8), tensor.F32, 0, 1, shape...)
	src := host.Storage().Bytes()
	rep := g.report("W8", map[string]any{
		"batch": "128×1×28×28 fp32", "bytes": len(src), "reps": reps, "warmup": warmup,
		"pageable":              "kernels.ByteCopier's CopyHostToDevice from Go memory (the driver stages it; the copy is waited for)",
		"pinned":                "Stager.StageFunc of a batch already in its pinned buffer (as a loader writing into pinned memory, or PyTorch's pin_memory'd tensor): the DMA alone",
		"pinned_with_host_copy": "Stager.Stage: the host copy into the pinned buffer, then the DMA",
		"timing":                "CUDA events on the compute stream around each copy (the Stager's copy runs on its own stream, which the compute stream waits for), median",
	})
	dst, err := tensor.EmptyOn(g.dev, tensor.F32, shape...)
	if err != nil {
		return err
	}
	defer dst.Storage().Free()
	tm, err := g.timers.NewEventTimer()
	if err != nil {
		return err
	}
	defer tm.Close()
	const slots = 2
	st, err := g.stagers.NewStager(slots, len(src))
	if err != nil {
		return err
	}
	defer st.Close()
	filled := 0
	paths := []struct {
		name string
		f    func() error
	}{
		{"pageable", func() error { return g.copier.CopyHostToDevice(dst, src) }},
		{"pinned", func() error {
			return st.StageFunc(dst, func(pinned []byte) {
				if filled < slots { // each pinned buffer gets the batch once
					copy(pinned, src)
					filled++
				}
			})
		}},
		{"pinned_with_host_copy", func() error { return st.Stage(dst, src) }},
	}
	var rs []copyResult
	for _, p := range paths {
		fmt.Fprintf(g.stdout, "  %s copies ...\n", p.name)
		if err := catch(func() { g.be.Fill(dst, math.NaN()) }); err != nil {
			return err
		}
		lat, _, err := timeReps(tm, warmup, reps, p.f)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		r := copyResult{Path: p.name, Latency: lat, GBps: float64(len(src)) / (lat.P50us * 1e-6) / 1e9}
		r.Verified = bytes.Equal(toHost(dst).Storage().Bytes(), src)
		if !r.Verified {
			return fmt.Errorf("W8 %s: the batch on the device differs from the host's", p.name)
		}
		rep.Results[p.name] = r
		rs = append(rs, r)
	}
	q := rs[1].GBps / rs[0].GBps
	rep.Ratios["pinned_vs_pageable"] = q
	rep.Ratios["pinned_with_host_copy_vs_pageable"] = rs[2].GBps / rs[0].GBps
	peer := g.peer(&rep, "w8", "--reps", fmt.Sprint(reps), "--warmup", fmt.Sprint(warmup))
	tw := bench.NewTable(g.stdout, bench.AlignRight)
	fmt.Fprintln(tw, "\tp50 µs\tp95 µs\tGB/s\tpytorch GB/s\t")
	for _, r := range rs {
		key := r.Path
		if key == "pinned_with_host_copy" {
			key = "-"
		}
		pt := bench.Figure(peer, key, "gbps")
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%s\t\n", r.Path, r.Latency.P50us, r.Latency.P95us, r.GBps, numOrDash(pt))
		if pt > 0 {
			rep.Ratios[r.Path+"_vs_pytorch"] = r.GBps / pt
		}
	}
	tw.Flush()
	fmt.Fprintf(g.stdout, "pinned at %.1f× pageable %s the PERF.md target of ≥ %d×\n", q, bench.Verdict(q >= w8GPUTargetPinnedRatio), w8GPUTargetPinnedRatio)
	return bench.SaveReport(g.stdout, c.JSONDir, rep)
}
