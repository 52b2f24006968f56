// Package evaluate compares Tamiyo controllers where it counts: it trains
// one run of a task per controller per seed — the heuristic, a learned
// policy, the host alone — and reports, per controller, the final
// validation accuracy and loss, the parameters the seeds added and the
// lifecycle counts, and per pair of controllers the mean paired
// difference in accuracy with a paired bootstrap 95 % interval and the
// win/tie/loss count. `esper eval` is its command line.
//
//	rep, err := evaluate.Run(ctx, evaluate.Options{
//		Controllers: []evaluate.Controller{{Name: "heuristic", Kind: "heuristic"}, {Name: "none", Kind: "none"}},
//		Seeds:       []uint64{101, 102, 103},
//		Run:         evaluate.DefaultRun(),
//	})
//
// Every run of a seed sees the same data, data order and host
// initialisation, whatever the controller, so the differences pair.
package evaluate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/recipe"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// RunConfig is the task and host every run trains.
type RunConfig struct {
	// Task is "synthetic" (the embedded task, one instance per seed) or
	// "fashion-mnist" (from DataDir; the seed then sets the data order
	// and the initialisation).
	Task    string
	DataDir string
	// TrainSize and TestSize size the synthetic task (0: its defaults).
	TrainSize, TestSize int
	// Epochs, Batch: the training length and batch size.
	Epochs, Batch int
	// Blocks, BaseChannels, Kernel: the CNN host.
	Blocks, BaseChannels, Kernel int
	// LR is the host learning rate (SGD, momentum 0.9); Cosine anneals
	// it to 0 over the epochs.
	LR     float64
	Cosine bool
	// Governor rolls back a diverging run (as esper train does).
	Governor bool
	// Capture captures and replays the train step.
	Capture bool
	// Device is where the runs train (the zero value is the CPU).
	Device tensor.Device `json:"-"`
}

// DefaultRun is the run of `make demo`: the embedded synthetic task on
// an impaired 2-block host (1×1 convolutions, 4 base channels) for 45
// epochs at a cosine-annealed 0.05, where growth pays (the heuristic
// adds about 14 points over the host alone).
func DefaultRun() RunConfig {
	return RunConfig{
		Task: "synthetic", TrainSize: 3000, Epochs: 45, Batch: 128,
		Blocks: 2, BaseChannels: 4, Kernel: 1, LR: leyline.DefaultHostLR, Cosine: true,
		Governor: true, Capture: true,
	}
}

// Options configure Run.
type Options struct {
	Controllers []Controller
	Seeds       []uint64
	Run         RunConfig
	// BootstrapSamples and BootstrapSeed set the intervals' resampling
	// (0: DefaultBootstrapSamples, and seed 1).
	BootstrapSamples int
	BootstrapSeed    uint64
	// Progress, when set, is called after every run with the runs done
	// and the total.
	Progress func(done, total int, r Result)
}

// Result is one run's outcome.
type Result struct {
	Controller string  `json:"controller"`
	Seed       uint64  `json:"seed"`
	Accuracy   float64 `json:"val_accuracy"` // final validation accuracy, %
	Loss       float64 `json:"val_loss"`     // final validation loss
	// Params is the model's parameter count at the end, HostParams the
	// host's alone; Added = Params − HostParams is what the seeds added.
	Params     int `json:"params"`
	HostParams int `json:"host_params"`
	Added      int `json:"added_params"`
	Germinated int `json:"germinated"`
	Fossilized int `json:"fossilized"`
	Pruned     int `json:"pruned"`
	// Diverged is set when the governor ended the run (its figures are
	// those of the last epoch).
	Diverged bool    `json:"diverged,omitempty"`
	Seconds  float64 `json:"seconds"`
}

// Report is the outcome of Run.
type Report struct {
	Options Options  `json:"-"`
	Results []Result `json:"results"`
	// Summaries are per controller, in Options.Controllers' order.
	Summaries []Summary `json:"controllers"`
	// Pairs compare every pair of controllers (A before B in the
	// controllers' order), on final validation accuracy in points.
	Pairs []PairStats `json:"pairs"`
}

// Summary is one controller's means over the seeds.
type Summary struct {
	Controller string  `json:"controller"`
	Accuracy   float64 `json:"mean_val_accuracy"`
	Loss       float64 `json:"mean_val_loss"`
	Added      float64 `json:"mean_added_params"`
	Germinated float64 `json:"mean_germinated"`
	Fossilized float64 `json:"mean_fossilized"`
	Pruned     float64 `json:"mean_pruned"`
	// GainPerKParam is the mean accuracy gain over the host alone per
	// thousand added parameters (points/kparam); set when "none" is
	// among the controllers and the controller added parameters.
	GainPerKParam *float64 `json:"gain_per_kparam,omitempty"`
}

// Check validates o before any training: the controllers, the seeds,
// the run configuration, and every policy file against the slots of the
// host the runs build (a policy trained for another slot count or
// architecture is refused here, naming the file).
func (o Options) Check() error {
	if len(o.Controllers) == 0 {
		return errors.New("evaluate: no controller")
	}
	if len(o.Seeds) == 0 {
		return errors.New("evaluate: no seed")
	}
	if err := o.Run.check(); err != nil {
		return err
	}
	for _, c := range o.Controllers {
		if c.Kind != "gnn" {
			continue
		}
		model, err := o.Run.model(nil, 1)
		if err != nil {
			return err
		}
		if _, err := recipe.PolicyService(model, recipe.ControllerOptions{Policy: c.Policy, Epochs: o.Run.Epochs}); err != nil {
			return fmt.Errorf("controller %s: %w", c.Name, err)
		}
	}
	return nil
}

func (r RunConfig) check() error {
	switch {
	case r.Task != "synthetic" && r.Task != "fashion-mnist":
		return fmt.Errorf("evaluate: unknown task %q (synthetic or fashion-mnist)", r.Task)
	case r.Epochs < 1 || r.Epochs > 100000:
		return fmt.Errorf("evaluate: epochs %d (want 1 to 100000)", r.Epochs)
	case r.Batch < 1:
		return fmt.Errorf("evaluate: batch %d (want ≥ 1)", r.Batch)
	case !(r.LR > 0) || r.LR > 1e3:
		return fmt.Errorf("evaluate: learning rate %v (want > 0)", r.LR)
	}
	return nil
}

// Run trains every controller on every seed, one run after another,
// and returns the report. It checks o first (Check); a run that fails
// stops the evaluation with an error naming its controller and seed.
// Cancelling ctx stops it.
//
// The runs go in sequence, each using every core through the kernels:
// autograd's gradient and inference modes are process-wide, so two
// trainers must not train at once in one process (one's validation
// would switch the other's gradient recording off). Parallel runs need
// separate processes.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	results := make([]Result, 0, len(o.Controllers)*len(o.Seeds))
	for _, seed := range o.Seeds {
		for _, c := range o.Controllers {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r, err := RunOne(ctx, o.Run, c, seed)
			if err != nil {
				return nil, fmt.Errorf("evaluate: controller %s, seed %d: %w", c.Name, seed, err)
			}
			results = append(results, r)
			if o.Progress != nil {
				o.Progress(len(results), cap(results), r)
			}
		}
	}
	return newReport(o, results), nil
}

// newReport summarises results (seed-major, controllers in order).
func newReport(o Options, results []Result) *Report {
	rep := &Report{Options: o, Results: results}
	nc := len(o.Controllers)
	col := func(c int, f func(Result) float64) []float64 {
		out := make([]float64, 0, len(o.Seeds))
		for s := range o.Seeds {
			out = append(out, f(results[s*nc+c]))
		}
		return out
	}
	none := -1
	for c, ctl := range o.Controllers {
		if ctl.Kind == "none" {
			none = c
		}
	}
	acc := func(r Result) float64 { return r.Accuracy }
	for c, ctl := range o.Controllers {
		sm := Summary{
			Controller: ctl.Name,
			Accuracy:   mean(col(c, acc)),
			Loss:       mean(col(c, func(r Result) float64 { return r.Loss })),
			Added:      mean(col(c, func(r Result) float64 { return float64(r.Added) })),
			Germinated: mean(col(c, func(r Result) float64 { return float64(r.Germinated) })),
			Fossilized: mean(col(c, func(r Result) float64 { return float64(r.Fossilized) })),
			Pruned:     mean(col(c, func(r Result) float64 { return float64(r.Pruned) })),
		}
		if none >= 0 && c != none && sm.Added > 0 {
			g := (sm.Accuracy - mean(col(none, acc))) / (sm.Added / 1000)
			sm.GainPerKParam = &g
		}
		rep.Summaries = append(rep.Summaries, sm)
	}
	seed := o.BootstrapSeed
	if seed == 0 {
		seed = 1
	}
	for a := range nc {
		for b := a + 1; b < nc; b++ {
			st := Paired(col(a, acc), col(b, acc), o.BootstrapSamples, seed)
			st.A, st.B = o.Controllers[a].Name, o.Controllers[b].Name
			rep.Pairs = append(rep.Pairs, st)
		}
	}
	return rep
}

// RunOne trains one run of cfg under controller c with seed (the data
// instance, its order and the host's initialisation).
func RunOne(ctx context.Context, cfg RunConfig, c Controller, seed uint64) (Result, error) {
	if err := cfg.check(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	train, test, err := recipe.LoadTask(cfg.Task, cfg.DataDir, cfg.TrainSize, cfg.TestSize, seed)
	if err != nil {
		return Result{}, err
	}
	trainLoader, err := data.NewLoader(train, data.LoaderOptions{BatchSize: cfg.Batch, Shuffle: true, Seed: seed, DropLast: true})
	if err != nil {
		return Result{}, err
	}
	defer trainLoader.Close()
	testLoader, err := data.NewLoader(test, data.LoaderOptions{BatchSize: 500})
	if err != nil {
		return Result{}, err
	}
	defer testLoader.Close()
	model, err := cfg.model(train, seed)
	if err != nil {
		return Result{}, err
	}
	hostParams := countParams(model.Host().Parameters())
	o := tolaria.TrainerOptions{
		Model: model, Train: trainLoader, Val: testLoader, Epochs: cfg.Epochs,
		HostLR: cfg.LR, Capture: cfg.Capture,
	}
	if cfg.Governor {
		o.Governor = &tolaria.GovernorOptions{Classes: train.Classes()}
	}
	if cfg.Cosine {
		o.HostSchedule = optim.Cosine{Base: cfg.LR, TMax: cfg.Epochs}
	}
	if o.Controller, err = recipe.NewController(model, recipe.ControllerOptions{
		Kind: c.Kind, Policy: c.Policy, Sample: c.Sample, Seed: seed, Epochs: cfg.Epochs,
	}); err != nil {
		return Result{}, fmt.Errorf("controller %s: %w", c.Name, err)
	}
	tr, err := tolaria.NewTrainer(o)
	if err != nil {
		return Result{}, err
	}
	diverged := false
	for e := 0; e < cfg.Epochs; e++ {
		if _, err := tr.RunEpoch(ctx, e); err != nil {
			if errors.Is(err, tolaria.ErrDiverged) {
				diverged = true
				break
			}
			return Result{}, err
		}
	}
	sum := tr.Summary()
	fin := sum.Final()
	params := countParams(model.Parameters())
	return Result{
		Controller: c.Name, Seed: seed, Accuracy: fin.ValAccuracy, Loss: fin.ValLoss,
		Params: params, HostParams: hostParams, Added: params - hostParams,
		Germinated: sum.Germinated, Fossilized: sum.Fossilized, Pruned: sum.Pruned,
		Diverged: diverged, Seconds: time.Since(start).Seconds(),
	}, nil
}

// model builds cfg's host for seed (recipe.NewModel; nil train: the
// synthetic task's shape, for Check).
func (cfg RunConfig) model(train data.Dataset, seed uint64) (*kasmina.MorphogeneticModel, error) {
	return recipe.NewModel(train, recipe.ModelOptions{
		Blocks: cfg.Blocks, BaseChannels: cfg.BaseChannels, Kernel: cfg.Kernel, Seed: seed, Device: cfg.Device,
	})
}

func countParams(ps []*autograd.Var) int {
	n := 0
	for _, p := range ps {
		n += p.Value.Numel()
	}
	return n
}
