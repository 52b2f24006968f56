package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"time"

	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
)

// W2 "tamiyo-gnn" (PERF.md): the hetero-GNN policy's inference forward
// (per-type encoders, GraphSAGE 256 ×2, GAT 128 × 4 heads ×2, the 8
// action heads and the value) on the graph of a 3-slot CNN host with 2
// live seeds, for a batch of 1 graph and of 64 graphs.

// W2DefaultBatches are PERF.md's batch sizes.
var W2DefaultBatches = []int{1, 64}

// W2Options configures RunW2. Zero values give the PERF.md definition.
type W2Options struct {
	// Batches are the graph batch sizes timed (default W2DefaultBatches).
	Batches []int
	// Reps are the measured forwards per batch size and mode (default
	// 200 for batches of up to 8 graphs, 50 above).
	Reps int
	// Warmup are the unmeasured forwards per batch size and mode on top
	// of the capture's own warm-up and capture calls (default 5).
	Warmup int
	// Policy are the network's options (zero: the PERF.md network, the
	// tamiyo defaults, F32). Dropout is off: inference runs in
	// evaluation mode.
	Policy tamiyo.PolicyOptions
	// Seed seeds the policy's weights.
	Seed uint64
	// Device is where the policy runs (zero: the CPU); each forward's
	// device-to-host reads are counted (W2ModeResult.HostSyncsPerForward).
	Device tensor.Device
	// Progress, when set, is called after each measured forward of a
	// phase ("batch 64 eager").
	Progress func(phase string, done, total int)
	// TF32 times a third mode per batch size, W2ModeCapturedTF32: the
	// captured forward with its F32 products on TF32 tensor cores
	// (tamiyo.InferenceOptions.TF32), which changes results only on a
	// GPU that has them.
	TF32 bool
}

// W2 modes: the eager and captured forwards in fp32 and, with
// W2Options.TF32, the captured forward with TF32 products.
const (
	W2ModeEager        = "eager"
	W2ModeCaptured     = "captured"
	W2ModeCapturedTF32 = "captured-tf32"
)

// W2ModeResult is the timing of one batch size in one mode.
type W2ModeResult struct {
	Batch int    `json:"batch"`
	Mode  string `json:"mode"` // W2ModeEager, W2ModeCaptured or W2ModeCapturedTF32
	// Latency is per forward: graph check, conversion to tensors, the
	// forward (replayed when captured) and the copy of the logits and
	// values to the host.
	Latency          Latency `json:"latency"`
	GraphsPerSec     float64 `json:"graphs_per_second"`
	GFLOPS           float64 `json:"gflops"`
	AllocsPerForward float64 `json:"allocs_per_forward"`
	// GCCycles are the Go collector's cycles that ended during the
	// measured forwards, and GCPauseUs their stop-the-world pauses in
	// all: whether the collector is in a tail's slowest forwards.
	GCCycles  uint32  `json:"gc_cycles"`
	GCPauseUs float64 `json:"gc_pause_us"`
	// MappedInputs and MappedOutputs are tamiyo.Inference.LastMapped's
	// after the mode's last forward: its features written into mapped
	// host memory, its logits read from it (false on the CPU and where
	// the device gives none, or is told not to).
	MappedInputs  bool `json:"mapped_inputs,omitempty"`
	MappedOutputs bool `json:"mapped_outputs,omitempty"`
	// HostSyncsPerForward are the device-to-host reads per forward on
	// W2Options.Device (0 on the CPU).
	HostSyncsPerForward float64 `json:"host_syncs_per_forward"`
	// Fallback is the capture failure, when the captured mode fell back
	// to eager forwards.
	Fallback string `json:"fallback,omitempty"`
	// GraphNodes is the captured forward's launch count (CUDA graph
	// nodes on CUDA; 0 in the eager mode).
	GraphNodes int `json:"graph_nodes,omitempty"`
	// DeviceUsPerForward is the device's time per captured forward
	// replayed back to back with nothing read (tamiyo's
	// Inference.ReplayLast, timed by the backend's events): the
	// forward's share of Latency that is the GPU's. 0 where the backend
	// has no event timers (the CPU, sim) and in the eager mode.
	DeviceUsPerForward float64 `json:"device_us_per_forward,omitempty"`
	// DeviceUsOneForward is the median device time of one replay of the
	// captured forward timed alone (w2LoneReplays of them, each waited
	// for before the next): what a forward's graph takes on a device
	// that was idle, as in a measured forward, where DeviceUsPerForward's
	// back-to-back replays hide each graph's start behind the one before.
	// 0 where DeviceUsPerForward is. DeviceUsOneForwardP95 is their
	// 95th percentile: beside Latency's spread, how much of a forward's
	// tail is the device's.
	DeviceUsOneForward    float64 `json:"device_us_one_forward,omitempty"`
	DeviceUsOneForwardP95 float64 `json:"device_us_one_forward_p95,omitempty"`
	// Phases are the medians of the forwards' host phases
	// (tamiyo.ForwardPhases: building and uploading the graph's tensors,
	// running or enqueuing the forward, reading the logits back), each
	// over the measured forwards: where Latency's time goes on the host.
	Phases *W2Phases `json:"host_phases_p50_us,omitempty"`
	// Slowest are the w2Slowest slowest forwards, slowest first: each
	// one's latency and host phases (µs), where the tail between p50 and
	// p95 comes from (the upload, the launch or the read's wait).
	Slowest []W2Forward `json:"slowest,omitempty"`
	// MaxAbsDiffVsEager is the largest difference of a logit or value
	// from the eager fp32 forward's (W2ModeCapturedTF32 only: the
	// captured fp32 forward must equal it, CapturedMatchesEager).
	MaxAbsDiffVsEager float64 `json:"max_abs_diff_vs_eager,omitempty"`
}

// W2Phases are the median microseconds of each tamiyo.ForwardPhases
// part over a mode's measured forwards.
type W2Phases struct {
	Upload float64 `json:"upload"`
	Run    float64 `json:"run"`
	Read   float64 `json:"read"`
}

// W2Forward is one measured forward: its latency and its host phases,
// in µs.
type W2Forward struct {
	Us float64 `json:"us"`
	W2Phases
}

// w2Slowest is how many of a mode's slowest forwards W2ModeResult keeps.
const w2Slowest = 3

// slowestForwards returns the n slowest of the forwards whose latencies
// and phases are lat, up, run and read, slowest first.
func slowestForwards(n int, lat, up, run, read []time.Duration) []W2Forward {
	idx := make([]int, len(lat))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return lat[idx[a]] > lat[idx[b]] })
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	out := make([]W2Forward, 0, n)
	for _, i := range idx[:min(n, len(idx))] {
		out = append(out, W2Forward{Us: us(lat[i]), W2Phases: W2Phases{Upload: us(up[i]), Run: us(run[i]), Read: us(read[i])}})
	}
	return out
}

// W2Result is what RunW2 measured.
type W2Result struct {
	Batches []int  `json:"batches"`
	Reps    []int  `json:"reps"`
	Warmup  int    `json:"warmup"`
	Params  int    `json:"params"`
	Options string `json:"options"`
	// Policy are the options the network was built with (defaults
	// filled in).
	Policy tamiyo.PolicyOptions `json:"-"`
	// FLOPPerGraph counts the multiply-adds (×2) of every matrix product
	// of one graph's forward.
	FLOPPerGraph float64 `json:"flop_per_graph"`
	// Nodes and Edges describe one graph.
	Nodes map[string]int `json:"nodes"`
	Edges int            `json:"edges"`
	// CapturedMatchesEager says the captured logits equal the eager ones
	// bitwise, per batch size.
	CapturedMatchesEager bool           `json:"captured_matches_eager"`
	Results              []W2ModeResult `json:"results"`
}

// Result returns the timing of one batch size and mode (nil if absent).
func (r *W2Result) Result(batch int, mode string) *W2ModeResult {
	for i := range r.Results {
		if r.Results[i].Batch == batch && r.Results[i].Mode == mode {
			return &r.Results[i]
		}
	}
	return nil
}

// W2Input is the environment W2 reads: a kasmina CNN host of 3 blocks
// (32/64/128 channels) with its 3 pre-pool slots r0c0..r0c2, a TRAINING
// conv_light seed in r0c0 and a BLENDING norm seed in r0c1 (alpha 0.5),
// r0c2 empty, weight and gradient norms measured, 8 epochs of history.
// v varies the values (not the shape) between the graphs of a batch.
func W2Input(v int) (tamiyo.GraphInput, error) {
	host, err := kasmina.NewCNNHost(kasmina.CNNHostOptions{InChannels: 1, Classes: 10, Blocks: 3, BaseChannels: 32, RNG: tensor.NewRNG(1)})
	if err != nil {
		return tamiyo.GraphInput{}, err
	}
	cfg := leyline.DefaultSlotConfig()
	f := float64(v%16) / 16
	cf, gn, gh, prev := 0.8+f, 0.5+f, 0.9, 0.85
	age := 1
	states := map[string]*leyline.ObsSlotState{
		"r0c0": {
			Stage: leyline.StageTraining, BlueprintID: "conv_light", Alpha: 0, AlphaTarget: 1,
			AlphaMode: leyline.AlphaHold, AlphaAlgorithm: leyline.BlendAdd, BlendTempoEpochs: 5,
			GradientNorm: &gn, GradientHealth: &gh, PrevGradientHealth: &prev,
			EpochsInStage: 3, EpochsTotal: 4 + v%3,
		},
		"r0c1": {
			Stage: leyline.StageBlending, BlueprintID: "norm", Alpha: 0.5, AlphaTarget: 1,
			AlphaMode: leyline.AlphaUp, AlphaAlgorithm: leyline.BlendAdd, BlendTempoEpochs: 5,
			AlphaStepsTotal: 5, AlphaStepsDone: 2, TimeToTarget: 3, AlphaVelocity: 0.1,
			CounterfactualContribution: &cf, ContributionVelocity: 0.05,
			GradientNorm: &gn, GradientHealth: &gh, PrevGradientHealth: &prev,
			EpochsInStage: 2, EpochsTotal: 9, EpochsSinceCounterfactual: &age,
		},
	}
	var losses, accs []float64
	for e := 0; e < 8; e++ {
		losses = append(losses, 2.3-0.15*float64(e)-0.01*f)
		accs = append(accs, 20+6*float64(e)+f)
	}
	var layers []tamiyo.LayerState
	for i, b := range host.Blocks() {
		var kept []string
		for _, id := range b.Slots {
			if cfg.Contains(id) {
				kept = append(kept, id)
			}
		}
		b.Slots = kept
		w, g := 4+float64(i), 0.2/float64(i+1)+0.01*f
		layers = append(layers, tamiyo.LayerState{Block: b, WeightNorm: &w, GradNorm: &g})
	}
	return tamiyo.GraphInput{
		Obs: leyline.ObsInput{
			Signals: leyline.TrainingSignals{
				Metrics: leyline.TrainingMetrics{
					Epoch: 8 + v%5, GlobalStep: 400, TrainLoss: 1.2, ValLoss: losses[7], ValAccuracy: accs[7],
					LossDelta: 0.15, AccuracyDelta: 6, PlateauEpochs: 0, HostStabilized: 1,
				},
				ActiveSeeds: []string{"s0", "s1"}, AvailableSlots: 1,
				LossHistory: losses, AccuracyHistory: accs,
			},
			MaxEpochs: leyline.DefaultEpisodeLength, LastActionSuccess: true, LastOp: leyline.OpAdvance,
			Slots: cfg, SlotStates: states,
		},
		Layers: layers,
	}, nil
}

// W2Graph builds the batch of n W2 graphs.
func W2Graph(n int) (*tamiyo.Graph, error) {
	ins := make([]tamiyo.GraphInput, n)
	for i := range ins {
		in, err := W2Input(i)
		if err != nil {
			return nil, err
		}
		ins[i] = in
	}
	return tamiyo.BuildGraphBatch(ins)
}

// W2FLOPs counts 2× the multiply-adds of every matrix product of the
// policy's forward over g (encoders, message passing, heads); element-wise
// work, normalisation and attention softmax are not counted.
func W2FLOPs(g *tamiyo.Graph, o tamiyo.PolicyOptions) float64 {
	var n [tamiyo.NumNodeTypes]float64
	for t := range n {
		n[t] = float64(g.Nodes[t].Count)
	}
	h, c, heads, hh := float64(o.Hidden), float64(o.GATHidden), float64(o.GATHeads), float64(o.HeadHidden)
	mm := func(rows, in, out float64) float64 { return 2 * rows * in * out }
	var f float64
	for t := range n {
		in := float64(tamiyo.NodeFeatureWidths[t])
		if tamiyo.NodeType(t) == tamiyo.NodeSlot {
			in += float64(o.BlueprintEmbedding)
		}
		f += mm(n[t], in, h)
	}
	for layer := 0; layer < 2; layer++ { // GraphSAGE: lin_r always, lin_l over neighbours
		for r := tamiyo.Relation(0); r < tamiyo.NumRelations; r++ {
			f += mm(n[r.Dst()], h, h)
			if g.Edges[r].Len() > 0 {
				f += mm(n[r.Dst()], h, h)
			}
		}
	}
	for _, in := range []float64{h, c} { // GAT: source, destination and edge projections
		for r := tamiyo.Relation(0); r < tamiyo.NumRelations; r++ {
			if e := float64(g.Edges[r].Len()); e > 0 {
				f += mm(n[r.Src()], in, heads*c) + mm(n[r.Dst()], in, heads*c) + mm(e, tamiyo.EdgeFeatures, heads*c)
			}
		}
	}
	b, s := float64(g.NumGraphs), n[tamiyo.NodeSlot]
	for hd, size := range leyline.HeadSizes(1) {
		if hd == leyline.HeadSlot {
			f += mm(s, 2*c, hh) + mm(s, hh, 1)
			continue
		}
		f += mm(b, 2*c, hh) + mm(b, hh, float64(size))
	}
	f += mm(b, c, hh) + mm(b, hh, 1)
	return f / b
}

// W2PeerGraphs writes what the PyTorch peer needs to build the same
// network and inputs: the options and, per batch size, the batched graph
// (tamiyo.Graph as JSON).
func W2PeerGraphs(path string, o tamiyo.PolicyOptions, graphs map[int]*tamiyo.Graph) error {
	data, err := w2PeerGraphsJSON(o, graphs)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// w2PeerGraphsJSON is W2PeerGraphs' file.
func w2PeerGraphsJSON(o tamiyo.PolicyOptions, graphs map[int]*tamiyo.Graph) ([]byte, error) {
	gs := map[string]*tamiyo.Graph{}
	for b, g := range graphs {
		gs[strconv.Itoa(b)] = g
	}
	return json.Marshal(map[string]any{
		"options": map[string]any{
			"hidden": o.Hidden, "gat_hidden": o.GATHidden, "gat_heads": o.GATHeads,
			"head_hidden": o.HeadHidden, "blueprint_embedding": o.BlueprintEmbedding,
			"num_blueprints": leyline.BlueprintNullIndex + 1, "head_sizes": leyline.HeadSizes(1),
			"node_widths": tamiyo.NodeFeatureWidths, "edge_features": tamiyo.EdgeFeatures,
		},
		"graphs": gs,
	})
}

// RunW2 times the policy's inference forward (tamiyo.Inference.Forward)
// per batch size, eager and captured, and checks that both give the same
// logits.
func RunW2(o W2Options) (W2Result, map[int]*tamiyo.Graph, error) {
	if len(o.Batches) == 0 {
		o.Batches = W2DefaultBatches
	}
	if o.Warmup == 0 {
		o.Warmup = 5
	}
	if o.Reps < 0 || o.Warmup < 0 {
		return W2Result{}, nil, fmt.Errorf("bench: W2 reps %d and warm-up %d must not be negative", o.Reps, o.Warmup)
	}
	for _, b := range o.Batches {
		if b <= 0 {
			return W2Result{}, nil, fmt.Errorf("bench: W2 batch %d must be > 0", b)
		}
	}
	po := o.Policy
	po.NoDropout, po.Seed, po.Device = true, o.Seed, o.Device
	p, err := tamiyo.NewPolicy(po)
	if err != nil {
		return W2Result{}, nil, err
	}
	po = p.Options()
	res := W2Result{Batches: o.Batches, Warmup: o.Warmup, CapturedMatchesEager: true, Policy: po,
		Options: fmt.Sprintf("hidden %d, GAT %d×%d heads, head hidden %d, blueprint embedding %d, %v",
			po.Hidden, po.GATHidden, po.GATHeads, po.HeadHidden, po.BlueprintEmbedding, po.DType)}
	for _, v := range p.Parameters() {
		res.Params += v.Value.Numel()
	}
	graphs := map[int]*tamiyo.Graph{}
	for _, b := range o.Batches {
		g, err := W2Graph(b)
		if err != nil {
			return W2Result{}, nil, err
		}
		graphs[b] = g
		if res.FLOPPerGraph == 0 {
			one, err := W2Graph(1)
			if err != nil {
				return W2Result{}, nil, err
			}
			res.FLOPPerGraph = W2FLOPs(one, po)
			res.Nodes = map[string]int{}
			for t := range one.Nodes {
				res.Nodes[tamiyo.NodeType(t).String()] = one.Nodes[t].Count
			}
			for _, e := range one.Edges {
				res.Edges += e.Len()
			}
		}
		reps := o.Reps
		if reps == 0 {
			reps = 200
			if b > 8 {
				reps = 50
			}
		}
		res.Reps = append(res.Reps, reps)
		var eagerOut *tamiyo.Logits
		modes := []string{W2ModeEager, W2ModeCaptured}
		if o.TF32 {
			modes = append(modes, W2ModeCapturedTF32)
		}
		for _, mode := range modes {
			var fallback error
			in, err := tamiyo.NewInference(p, tamiyo.InferenceOptions{NoCapture: mode == W2ModeEager, TF32: mode == W2ModeCapturedTF32,
				OnFallback: func(err error) { fallback = err }})
			if err != nil {
				return W2Result{}, nil, err
			}
			// The captured mode's first two calls are its eager warm-up
			// and its capture.
			warm := o.Warmup
			if mode != W2ModeEager {
				warm += 2
			}
			var out *tamiyo.Logits
			for i := 0; i < warm; i++ {
				if out, err = in.Forward(g); err != nil {
					return W2Result{}, nil, err
				}
			}
			phase := fmt.Sprintf("batch %d %s", b, mode)
			lat := make([]time.Duration, reps)
			var up, run, read []time.Duration
			if reps > 0 {
				up, run, read = make([]time.Duration, reps), make([]time.Duration, reps), make([]time.Duration, reps)
			}
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			syncs0 := tensor.HostSyncs(o.Device)
			// The measured forwards carry the profiler label w2=<phase>,
			// so that a CPU profile of the run (esper's ESPER_CPUPROFILE)
			// shows one mode's host work alone: go tool pprof
			// -tagfocus 'w2=batch 64 captured-tf32'.
			pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("w2", phase)))
			for i := range lat {
				t0 := time.Now()
				out, err = in.Forward(g)
				lat[i] = time.Since(t0)
				if err != nil {
					return W2Result{}, nil, err
				}
				ph := in.LastPhases()
				up[i], run[i], read[i] = ph.Upload, ph.Run, ph.Read
				if o.Progress != nil {
					o.Progress(phase, i+1, reps)
				}
			}
			pprof.SetGoroutineLabels(context.Background())
			runtime.ReadMemStats(&ms1)
			syncs := tensor.HostSyncs(o.Device) - syncs0
			l := Summarise(lat)
			r := W2ModeResult{Batch: b, Mode: mode, Latency: l}
			switch {
			case mode == W2ModeEager:
				eagerOut = out
			case out == nil:
			case mode == W2ModeCapturedTF32:
				r.MaxAbsDiffVsEager = logitsMaxDiff(eagerOut, out)
			case !reflect.DeepEqual(eagerOut, out):
				res.CapturedMatchesEager = false
			}
			if reps > 0 {
				r.Phases = &W2Phases{Upload: Summarise(up).P50us, Run: Summarise(run).P50us, Read: Summarise(read).P50us}
				r.Slowest = slowestForwards(w2Slowest, lat, up, run, read)
				r.AllocsPerForward = float64(ms1.Mallocs-ms0.Mallocs) / float64(reps)
				r.GCCycles, r.GCPauseUs = ms1.NumGC-ms0.NumGC, float64(ms1.PauseTotalNs-ms0.PauseTotalNs)/1e3
				r.HostSyncsPerForward = float64(syncs) / float64(reps)
				r.GraphsPerSec = float64(b) / (l.MeanUs / 1e6)
				r.GFLOPS = res.FLOPPerGraph * float64(b) / (l.MeanUs * 1e3)
			}
			if fallback != nil {
				r.Fallback = fallback.Error()
			}
			r.GraphNodes = in.GraphNodes()
			r.MappedInputs, r.MappedOutputs = in.LastMapped()
			if et, ok := kernels.For(o.Device).(kernels.EventTimers); ok && mode != W2ModeEager && in.Captures() && fallback == nil {
				if r.DeviceUsPerForward, err = deviceUsPerReplay(et, in, w2DeviceReplays); err != nil {
					return W2Result{}, nil, fmt.Errorf("bench: W2 batch %d %s, timing the device: %w", b, mode, err)
				}
				lone, err := deviceUsLoneReplay(et, in, w2LoneReplays)
				if err != nil {
					return W2Result{}, nil, fmt.Errorf("bench: W2 batch %d %s, timing the device: %w", b, mode, err)
				}
				r.DeviceUsOneForward, r.DeviceUsOneForwardP95 = lone.P50us, lone.P95us
			}
			res.Results = append(res.Results, r)
		}
	}
	return res, graphs, nil
}

// logitsMaxDiff returns the largest absolute difference between a's and
// b's logits and values (+Inf where their shapes differ or one is NaN
// where the other is not).
func logitsMaxDiff(a, b *tamiyo.Logits) float64 {
	if a == nil || b == nil {
		return math.Inf(1)
	}
	var d float64
	diff := func(x, y []float32) {
		if len(x) != len(y) {
			d = math.Inf(1)
			return
		}
		for i := range x {
			nx, ny := x[i] != x[i], y[i] != y[i]
			if nx || ny {
				if nx != ny {
					d = math.Inf(1)
				}
				continue
			}
			d = max(d, math.Abs(float64(x[i])-float64(y[i])))
		}
	}
	for h := range a.Heads {
		if len(a.Heads[h]) != len(b.Heads[h]) {
			return math.Inf(1)
		}
		for e := range a.Heads[h] {
			diff(a.Heads[h][e], b.Heads[h][e])
		}
	}
	diff(a.Values, b.Values)
	return d
}

// w2DeviceReplays is how many replays deviceUsPerReplay times together,
// w2LoneReplays how many deviceUsLoneReplay times one by one.
const (
	w2DeviceReplays = 50
	w2LoneReplays   = 21
)

// deviceUsLoneReplay times n replays of in's latest captured forward one
// at a time, each with the backend's event timer (which waits for it),
// and returns their distribution (device time of one replay).
func deviceUsLoneReplay(et kernels.EventTimers, in *tamiyo.Inference, n int) (Latency, error) {
	tm, err := et.NewEventTimer()
	if err != nil {
		return Latency{}, err
	}
	defer tm.Close()
	ds := make([]time.Duration, n)
	for i := range ds {
		if ds[i], err = tm.Time(in.ReplayLast); err != nil {
			return Latency{}, err
		}
	}
	return Summarise(ds), nil
}

// deviceUsPerReplay times n replays of in's latest captured forward,
// enqueued back to back, with one of the backend's event timers, and
// returns the device's microseconds per replay (after one replay that is
// not timed).
func deviceUsPerReplay(et kernels.EventTimers, in *tamiyo.Inference, n int) (float64, error) {
	tm, err := et.NewEventTimer()
	if err != nil {
		return 0, err
	}
	defer tm.Close()
	if err := in.ReplayLast(); err != nil {
		return 0, err
	}
	d, err := tm.Time(func() error {
		for range n {
			if err := in.ReplayLast(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return d.Seconds() * 1e6 / float64(n), nil
}
