package simic

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// Esper environment defaults. They are small on purpose: an env-epoch of
// the default environment on the default synthetic data takes a fraction
// of a second on two CPU cores, so a PPO round of a few environments
// takes seconds, not minutes.
const (
	// DefaultEsperMaxEpochs is the episode length in host epochs (G2
	// max_epochs is 150; shortened so rounds stay short on a CPU).
	DefaultEsperMaxEpochs = 12
	// DefaultEsperBlocks is the CNN host's block count: one pre-pool slot
	// per block, so three slots.
	DefaultEsperBlocks = 3
	// DefaultEsperBaseChannels is the first block's channel count.
	DefaultEsperBaseChannels = 4
	// DefaultEsperTrain, DefaultEsperVal and DefaultEsperBatch size the
	// shared synthetic data stream.
	DefaultEsperTrain = 512
	DefaultEsperVal   = 256
	DefaultEsperBatch = 64
	// esperDeadline bounds the controller and apply calls inside the
	// environment's epochs: the decision waits for the whole lock-step
	// batch and the policy, so tolaria's 2 s default does not apply.
	esperDeadline = time.Hour
)

// EsperData is the data stream the environments of a vectorised run
// share: every environment trains on the same batches of an epoch and
// validates on the same validation set.
type EsperData struct {
	// Train and Val are the batches; Train should drop its last partial
	// batch (a captured step re-captures per shape).
	Train, Val tolaria.Batches
	// InChannels and Classes describe the images and labels.
	InChannels, Classes int
	close               func()
}

// Close releases the loaders NewSyntheticData opened.
func (d *EsperData) Close() {
	if d != nil && d.close != nil {
		d.close()
		d.close = nil
	}
}

// SyntheticDataOptions configure NewSyntheticData; zero values are the
// defaults.
type SyntheticDataOptions struct {
	// Train, Val and Batch size the stream (defaults DefaultEsperTrain,
	// DefaultEsperVal, DefaultEsperBatch).
	Train, Val, Batch int
	// Seed selects the task instance and the shuffle order.
	Seed uint64
	// Device, other than the CPU (the zero value), keeps the whole
	// dataset resident there (data.LoaderOptions.Resident: the batches
	// are gathered on the device, bitwise those of the host loader), so
	// that no batch is copied from the host: on CUDA a synchronous copy
	// per batch would wait for the previous step. The device must be
	// open (kernels/device.Open).
	Device tensor.Device
}

// NewSyntheticData returns the embedded synthetic task as a shared data
// stream. Close it when done.
func NewSyntheticData(o SyntheticDataOptions) (*EsperData, error) {
	if o.Train < 0 || o.Val < 0 || o.Batch < 0 {
		return nil, fmt.Errorf("simic: NewSyntheticData: negative size in %+v", o)
	}
	if o.Train == 0 {
		o.Train = DefaultEsperTrain
	}
	if o.Val == 0 {
		o.Val = DefaultEsperVal
	}
	if o.Batch == 0 {
		o.Batch = DefaultEsperBatch
	}
	train, val, err := data.Synthetic(data.SyntheticOptions{Train: o.Train, Test: o.Val, Seed: o.Seed})
	if err != nil {
		return nil, fmt.Errorf("simic: NewSyntheticData: %w", err)
	}
	resident := !o.Device.IsCPU()
	tl, err := data.NewLoader(train, data.LoaderOptions{BatchSize: o.Batch, Shuffle: true, Seed: o.Seed, DropLast: true, Device: o.Device, Resident: resident})
	if err != nil {
		return nil, fmt.Errorf("simic: NewSyntheticData: %w", err)
	}
	vl, err := data.NewLoader(val, data.LoaderOptions{BatchSize: o.Batch, Device: o.Device, Resident: resident})
	if err != nil {
		tl.Close()
		return nil, fmt.Errorf("simic: NewSyntheticData: %w", err)
	}
	return &EsperData{
		Train: tl, Val: vl,
		InChannels: train.Shape()[0], Classes: train.Classes(),
		close: func() { tl.Close(); vl.Close() },
	}, nil
}

// EsperEnvOptions configure NewEsperEnv. Data or NewData is required;
// every other zero value is the documented default.
type EsperEnvOptions struct {
	// Data is the shared data stream.
	Data *EsperData
	// NewData, in place of Data, gives every episode its own data stream:
	// Reset calls it with the episode's number and closes the previous
	// episode's stream (NewEsperEnv calls it once for the first episode's
	// number to read the image shape). It must depend on the episode
	// alone, so that a resumed run sees the same data (episode training
	// over a mix of task instances: a policy trained on one instance of
	// the synthetic task learns that instance's timing). The streams of
	// every episode must share the image shape and class count.
	NewData func(episode int) (*EsperData, error)
	// Index is the environment's index in its VecEnv (telemetry EnvID,
	// seed ids, initialisation).
	Index int
	// Seed seeds the hosts' initialisation (with Index and the episode).
	Seed uint64
	// FirstEpisode is the number the first Reset gives its episode (0
	// means 1). An episode's host and seed ids derive from Seed, Index
	// and its number alone, so an environment built with FirstEpisode set
	// to another one's Episode starts that episode exactly as the other
	// did: a resumed run passes the Episode its checkpoint saved.
	FirstEpisode int
	// MaxEpochs is the episode length (default DefaultEsperMaxEpochs).
	MaxEpochs int
	// Terminal ends the episode at its last epoch as a terminal state
	// (what EsperPPO uses: see EsperEnv); false stores it truncated, to be
	// bootstrapped, as G2 does.
	Terminal bool
	// Blocks, BaseChannels and KernelSize shape the CNN host (defaults
	// DefaultEsperBlocks, DefaultEsperBaseChannels, 3).
	Blocks, BaseChannels, KernelSize int
	// HostLR is the host's SGD rate (default leyline.DefaultHostLR, 0.01,
	// G2 task host_lr).
	HostLR float64
	// Cosine anneals the host's rate from HostLR to 0 over MaxEpochs
	// (optim.Cosine, as esper train --schedule cosine); false holds it.
	Cosine bool
	// Rewarder computes the rewards; nil means SHAPED with the reference
	// defaults.
	Rewarder *Rewarder
	// Counterfactual plans the fused validation's alpha configurations;
	// nil means the engine's defaults (full factorial up to 4 seeds).
	Counterfactual *CounterfactualEngine
	// Governor configures the environment's governor; nil means the G2
	// defaults. NoGovernor disables it (no rollbacks).
	Governor   *tolaria.GovernorOptions
	NoGovernor bool
	// MaxSeeds caps the live seeds (0 = unlimited).
	MaxSeeds int
	// Capture captures the training step (tolaria.TrainerOptions.Capture).
	Capture bool
	// Device is where every episode's host model trains (the CPU by
	// default): the host is built and initialised on the CPU, exactly as
	// for the CPU, then moved there (nn.To), and the tolaria.Trainer
	// trains it there, the fused counterfactual validation included. The
	// device's kernels must be registered (kernels/device.OpenDevice).
	// The environment reads the device back once per epoch (tolaria's
	// training and validation passes together, with the gradient
	// telemetry; in a VecEnv one read for every environment's epoch, see
	// StepStart) and once per epoch for the counterfactual
	// configurations; the observation, the reward and the masks are
	// built on the host from those reads.
	Device tensor.Device
	// Sink receives the trainer's telemetry; nil sends none.
	Sink tolaria.EventSink
}

// EsperStepInfo describes the last step of an EsperEnv.
type EsperStepInfo struct {
	// Epoch is the epoch the decision was taken at.
	Epoch int
	// Decision is what was executed (WAIT after a preflight veto) and
	// Applied what it did.
	Decision leyline.Decision
	Applied  tolaria.ApplyStatus
	// Vetoed reports a preflight veto, with its reason.
	Vetoed     bool
	VetoReason string
	// Reward is the reward with its terms (zero after a rollback, whose
	// reward is the governor's penalty).
	Reward Reward
	// ValAccuracy is the epoch's validation accuracy (percent).
	ValAccuracy float64
	// Rollbacks counts governor rollbacks during the step.
	Rollbacks int
	// Counterfactual is the epoch's attribution, nil without seeds to
	// attribute.
	Counterfactual *CounterfactualResult
}

// EsperEnv is one morphogenetic training run as an Env: a
// MorphogeneticModel with its optimizers, trained by a tolaria.Trainer
// (epoch runner, governor, deadlines) whose controller is the policy,
// through a tamiyo.Tracked signal tracker, exactly as `esper train
// --controller gnn` deploys it.
//
// A step is one training epoch's decision: the trainer's epoch runs in
// its own goroutine up to the point where it asks its controller (after
// training, validation, the counterfactual measurements and the
// governor), and stays parked there while the environment encodes the
// observation (tamiyo.EncodeState) and returns it. The counterfactual
// measurements are the environment's (tolaria.TrainerOptions.
// Counterfactuals): right after validation, the configurations of the
// CounterfactualEngine's plan are evaluated in one fused pass
// (FusedForward over K·B samples, correct counts accumulated on the
// device and read once; the all-on configuration is the validation pass
// itself), which also gives the trainer its BLENDING and HOLDING seeds'
// alpha-0 accuracies, so it runs no ablation pass of its own. Step hands
// the policy's decision back after the governor's Preflight (a veto
// executes WAIT); the trainer applies it through tolaria.ApplyDecision,
// ticks the slots and finishes the epoch; the reward comes from the
// Rewarder; then the next epoch runs to its decision point. An epoch the
// governor rolls back never asks its controller: the step reports
// Rollback with the governor's penalty and continues with the next
// epoch. The episode ends after MaxEpochs epochs; Reset builds a fresh
// host. Step and Reset also come in halves, split at the running epoch's
// read of its accumulators (StepStart/StepFinish, ResetStart/
// ResetFinish), so that a VecEnv reads every environment's epoch in one
// host sync.
//
// With Options().Terminal the last epoch is a terminal state: the
// training run is over and nothing more is earned after it (the
// observation carries the epoch's fraction of the run, so the critic
// sees the end coming). G2 stores it as truncated and bootstraps it with
// V of the state after it (Terminal false); but that state looks like
// the last decision's, so the bootstrap feeds the critic's own estimate
// back into its target every round, and the returns drift towards
// reward/(1 − γ), 200 times the last reward at γ = 0.995 (esper ppo's
// return means rose round after round while the episodes' returns
// stayed flat: bench/baselines/ppo/2026-11-26).
//
// Environments of a VecEnv step one after another, so they may share
// EsperData; an EsperEnv is not safe for concurrent use.
type EsperEnv struct {
	// diverged is set when the episode's host diverged past the
	// governor's rollbacks (tolaria.ErrDiverged): the episode ends there.
	diverged bool
	o        EsperEnvOptions
	spec     EnvSpec
	rewarder *Rewarder
	cf       *CounterfactualEngine
	episode  int
	fused    *fusedValidator
	// data is the running episode's stream: Options().Data, or the one
	// NewData made for the episode (owned, closed by the next Reset).
	data *EsperData

	// The running episode.
	model   *kasmina.MorphogeneticModel
	trainer *tolaria.Trainer
	bridge  *bridgeController
	cancel  context.CancelFunc
	runCtx  context.Context
	done    chan epochResult
	running bool
	epoch   int
	// reads carries the running epoch's read of its accumulators to the
	// environment when the epoch was started with batchRead (StepStart):
	// the epoch waits there for StepFinish, which hands it the host
	// copies a vectorised loop read for every environment at once. The
	// epoch goroutine clears batchRead as it takes it (the environment's
	// goroutine waits meanwhile: one of them runs at a time).
	reads     chan *epochRead
	batchRead bool
	// pending is the read StepStart or ResetStart left waiting, or the
	// epoch's event it received instead (its decision point or its end);
	// stepping holds the step's figures from StepStart for StepFinish.
	pending  epochEvent
	stepping *pendingStep
	// resetting is set from ResetStart to ResetFinish.
	resetting bool
	state     *leyline.EpochState // the parked epoch's state
	cfRes     *CounterfactualResult
	work      EsperEpochWork // the parked epoch's
	// cfNext and cfConfigs are what the trainer's Counterfactuals hook
	// measured in the running epoch (its goroutine writes them before it
	// asks for the decision); parked takes them.
	cfNext     *CounterfactualResult
	cfConfigs  int
	masks      leyline.ActionMasks
	lastOp     leyline.LifecycleOp
	accAtGerm  map[string]float64
	hostParams int
	layers     []tamiyo.LayerState
	info       EsperStepInfo
	slotIDs    []string
	// ep is the running episode's summary, finished the summaries of the
	// episodes that ended since the last TakeEpisodes.
	ep       EsperEpisode
	finished []EsperEpisode
	// blended holds the ids of the episode's seeds that reached BLENDING.
	blended map[string]bool
	// lastSeeds are the seeds of the last decision, by id (SHAPED's PBRS).
	lastSeeds map[string]leyline.SeedReport
}

// EsperEpochWork counts the validation work an epoch did beyond its
// validation pass, for benchmarks and their peers.
type EsperEpochWork struct {
	// FusedConfigs is the number of alpha configurations the fused
	// validation evaluated (each one forward of the validation set,
	// batched together): the plan's configurations less the all-on one,
	// which is the validation pass itself; 0 without seeds to attribute.
	FusedConfigs int
	// AblationPasses are the trainer's own per-seed validation passes
	// (those the fused validation did not provide; see
	// tolaria.Trainer.AblationPasses).
	AblationPasses int
}

type epochResult struct {
	r   tolaria.EpochReport
	err error
}

// bridgeController is the trainer's controller: it hands the epoch state
// to the environment and waits for the decision.
type bridgeController struct {
	states    chan leyline.EpochState
	decisions chan leyline.Decision
}

func (b *bridgeController) EvaluateEpoch(ctx context.Context, st leyline.EpochState) (leyline.Decision, error) {
	select {
	case b.states <- st:
	case <-ctx.Done():
		return leyline.Decision{}, ctx.Err()
	}
	select {
	case d := <-b.decisions:
		return d, nil
	case <-ctx.Done():
		return leyline.Decision{}, ctx.Err()
	}
}

// NewEsperEnv validates o; Reset starts the first episode.
func NewEsperEnv(o EsperEnvOptions) (*EsperEnv, error) {
	switch {
	case (o.Data == nil) == (o.NewData == nil):
		return nil, errors.New("simic: NewEsperEnv: one of Data and NewData is required")
	case o.Data != nil && (o.Data.Train == nil || o.Data.Val == nil):
		return nil, errors.New("simic: NewEsperEnv: Data with Train and Val batches is required")
	case o.MaxEpochs < 0 || o.Blocks < 0 || o.BaseChannels < 0 || o.KernelSize < 0 || o.HostLR < 0 || o.MaxSeeds < 0 || o.Index < 0 || o.FirstEpisode < 0:
		return nil, fmt.Errorf("simic: NewEsperEnv: negative option in %+v", o)
	}
	if o.MaxEpochs == 0 {
		o.MaxEpochs = DefaultEsperMaxEpochs
	}
	if o.Blocks == 0 {
		o.Blocks = DefaultEsperBlocks
	}
	if o.Blocks < 2 {
		return nil, fmt.Errorf("simic: NewEsperEnv: %d blocks (the CNN host needs ≥ 2)", o.Blocks)
	}
	if o.BaseChannels == 0 {
		o.BaseChannels = DefaultEsperBaseChannels
	}
	if o.KernelSize == 0 {
		o.KernelSize = 3
	}
	if o.HostLR == 0 {
		o.HostLR = leyline.DefaultHostLR
	}
	e := &EsperEnv{o: o, rewarder: o.Rewarder, cf: o.Counterfactual, episode: max(o.FirstEpisode, 1) - 1, data: o.Data}
	var err error
	if o.NewData != nil {
		// The first episode's stream gives the image shape; Reset builds
		// it again (the streams are cheap, and a function of the episode).
		if e.data, err = e.episodeData(e.episode + 1); err != nil {
			return nil, err
		}
		e.data.Close()
	}
	if e.rewarder == nil {
		if e.rewarder, err = NewRewarder(RewardOptions{}); err != nil {
			return nil, err
		}
	}
	if e.cf == nil {
		if e.cf, err = NewCounterfactualEngine(CounterfactualOptions{}); err != nil {
			return nil, err
		}
	}
	// The slot count fixes the action spec: build one host to read it.
	host, err := e.newHost()
	if err != nil {
		return nil, err
	}
	e.spec = TamiyoSpec(len(kasmina.PrePoolSlots(host)))
	e.fused = newFusedValidator()
	return e, nil
}

// Options returns the options with defaults filled in.
func (e *EsperEnv) Options() EsperEnvOptions { return e.o }

// Spec is leyline's factored action over the host's slots.
func (e *EsperEnv) Spec() EnvSpec { return e.spec }

// Model is the current episode's model (nil before Reset).
func (e *EsperEnv) Model() *kasmina.MorphogeneticModel { return e.model }

// Trainer is the current episode's epoch runner (nil before Reset).
func (e *EsperEnv) Trainer() *tolaria.Trainer { return e.trainer }

// Epoch is the number of epochs the current episode has run.
func (e *EsperEnv) Epoch() int { return e.epoch }

// Episode is the current episode's number: 1 for the first Reset (see
// EsperEnvOptions.FirstEpisode), 0 before it.
func (e *EsperEnv) Episode() int {
	if e.model == nil {
		return 0
	}
	return e.episode
}

// LastStep describes the last Step.
func (e *EsperEnv) LastStep() EsperStepInfo { return e.info }

// PendingCounterfactual is the attribution measured at the parked
// epoch's decision point, before its decision is executed (LastStep
// reports it after the Step): nil when no decision is pending or no seed
// was attributed.
func (e *EsperEnv) PendingCounterfactual() *CounterfactualResult {
	if e.state == nil {
		return nil
	}
	return e.cfRes
}

// PendingWork is the counterfactual work of the parked epoch (zero when
// no decision is pending).
func (e *EsperEnv) PendingWork() EsperEpochWork {
	if e.state == nil {
		return EsperEpochWork{}
	}
	return e.work
}

// ActionMasks returns the current masks as simic Masks (see
// TamiyoMasks); nil between episodes.
func (e *EsperEnv) ActionMasks() Masks {
	if e.state == nil {
		return nil
	}
	return TamiyoMasks(e.masks)
}

func (e *EsperEnv) newHost() (*kasmina.CNNHost, error) {
	seed := e.o.Seed*1_000_003 + uint64(e.o.Index)*7919 + uint64(e.episode)
	return kasmina.NewCNNHost(kasmina.CNNHostOptions{
		InChannels: e.data.InChannels, Classes: e.data.Classes, Blocks: e.o.Blocks,
		BaseChannels: e.o.BaseChannels, KernelSize: e.o.KernelSize, RNG: tensor.NewRNG(seed),
	})
}

// episodeData calls NewData for an episode and checks the stream.
func (e *EsperEnv) episodeData(episode int) (*EsperData, error) {
	d, err := e.o.NewData(episode)
	if err != nil {
		return nil, fmt.Errorf("simic: EsperEnv %d: episode %d's data: %w", e.o.Index, episode, err)
	}
	if d == nil || d.Train == nil || d.Val == nil {
		d.Close()
		return nil, fmt.Errorf("simic: EsperEnv %d: episode %d's data has no Train or Val batches", e.o.Index, episode)
	}
	if e.data != nil && (d.InChannels != e.data.InChannels || d.Classes != e.data.Classes) {
		d.Close()
		return nil, fmt.Errorf("simic: EsperEnv %d: episode %d's data has %d channels and %d classes, the first episode's %d and %d",
			e.o.Index, episode, d.InChannels, d.Classes, e.data.InChannels, e.data.Classes)
	}
	return d, nil
}

// Close stops the running episode's epoch goroutine, frees its trainer's
// captured graphs (and releases the episode's own data stream, with
// NewData).
func (e *EsperEnv) Close() {
	e.closeEpisode()
	// Close has no error to return: a graph that fails to free is left
	// to the collector, as it was before Close.
	_ = e.closeTrainer()
	if e.o.NewData != nil && e.data != nil {
		e.data.Close()
	}
}

// closeTrainer frees the captured graphs of the ended episode's trainer
// (tolaria.Trainer.Close; its epoch goroutine has stopped) rather than
// leaving them to the collector. The trainer itself stays, its figures
// readable (Trainer), until the next episode replaces it.
func (e *EsperEnv) closeTrainer() error {
	if e.trainer == nil {
		return nil
	}
	return e.trainer.Close()
}

// closeEpisode stops the running episode's epoch goroutine.
func (e *EsperEnv) closeEpisode() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	if e.running {
		<-e.done
		e.running = false
	}
	e.pending, e.stepping, e.batchRead, e.resetting = epochEvent{}, nil, false, false
	if e.trainer != nil {
		e.trainer.Deadlines().Drain()
	}
	e.cancel, e.state = nil, nil
}

// Reset ends the running episode and starts a new one on a fresh host,
// running its first epoch to the decision point. It is ResetStart, the
// read it leaves waiting (tensor.ToHostMany) and ResetFinish.
func (e *EsperEnv) Reset() (TamiyoObs, error) {
	reads, err := e.ResetStart()
	if err != nil {
		return TamiyoObs{}, err
	}
	var hosts []*tensor.Tensor
	if reads != nil {
		hosts, err = tensor.ToHostMany(reads)
	}
	return e.ResetFinish(hosts, err)
}

// ResetStart is the first half of Reset (the batched form simic.VecEnv
// uses to read several environments' epochs in one host sync): it ends
// the running episode, builds the next one's host and trainer and runs
// its first epoch up to its read of its accumulators. It returns the
// device tensors that read wants (nil when the epoch did not get there)
// and leaves the epoch waiting. ResetFinish must follow, with their host
// copies: until then the environment holds still.
func (e *EsperEnv) ResetStart() ([]*tensor.Tensor, error) {
	e.closeEpisode()
	if err := e.closeTrainer(); err != nil {
		return nil, fmt.Errorf("simic: EsperEnv.Reset: %w", err)
	}
	e.episode++
	e.diverged = false
	if e.o.NewData != nil {
		e.data.Close()
		d, err := e.episodeData(e.episode)
		if err != nil {
			return nil, fmt.Errorf("simic: EsperEnv.Reset: %w", err)
		}
		e.data = d
	}
	host, err := e.newHost()
	if err != nil {
		return nil, fmt.Errorf("simic: EsperEnv.Reset: %w", err)
	}
	slots := kasmina.PrePoolSlots(host)
	model, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: slots})
	if err != nil {
		return nil, fmt.Errorf("simic: EsperEnv.Reset: %w", err)
	}
	if !e.o.Device.IsCPU() {
		if err := nn.To(model, e.o.Device); err != nil {
			return nil, fmt.Errorf("simic: EsperEnv.Reset: %w", err)
		}
	}
	e.bridge = &bridgeController{states: make(chan leyline.EpochState), decisions: make(chan leyline.Decision)}
	e.reads, e.batchRead, e.pending, e.stepping = make(chan *epochRead), false, epochEvent{}, nil
	tracked, err := tamiyo.NewTracked(e.bridge, tamiyo.TrackerOptions{})
	if err != nil {
		return nil, err
	}
	to := tolaria.TrainerOptions{
		Model: model, Train: e.data.Train, Val: e.data.Val, Epochs: e.o.MaxEpochs,
		Controller: tracked, HostLR: e.o.HostLR, Capture: e.o.Capture, Sink: e.o.Sink, EnvID: e.o.Index,
		Deadlines: tolaria.DeadlineOptions{Controller: esperDeadline, Apply: esperDeadline}, History: 4,
		Seed: e.o.Seed + uint64(e.o.Index), Counterfactuals: e.counterfactuals, EpochRead: e.epochRead,
	}
	if e.o.Cosine {
		to.HostSchedule = optim.Cosine{Base: e.o.HostLR, TMax: e.o.MaxEpochs}
	}
	if !e.o.NoGovernor {
		g := tolaria.GovernorOptions{Classes: e.data.Classes}
		if e.o.Governor != nil {
			g = *e.o.Governor
		}
		to.Governor = &g
	}
	tr, err := tolaria.NewTrainer(to)
	if err != nil {
		return nil, fmt.Errorf("simic: EsperEnv.Reset: %w", err)
	}
	e.model, e.trainer = model, tr
	e.slotIDs = model.SlotIDs()
	leyline.SortSlotIDs(e.slotIDs)
	e.layers = tamiyo.BlockLayers(host.Blocks())()
	e.hostParams = 0
	for _, p := range model.HostParameters() {
		e.hostParams += p.Value.Numel()
	}
	e.epoch, e.lastOp = 0, leyline.OpWait
	e.accAtGerm = map[string]float64{}
	e.info = EsperStepInfo{}
	e.ep = EsperEpisode{Env: e.o.Index, Episode: e.episode}
	e.blended = map[string]bool{}
	e.lastSeeds = nil
	e.cfNext, e.cfConfigs = nil, 0
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.runCtx = cancel, ctx
	e.done = make(chan epochResult, 1)
	e.resetting = true
	return e.startBatchedEpoch(ctx), nil
}

// startBatchedEpoch starts epoch e.epoch for a split step or reset: it
// runs to its read of its accumulators, which it leaves waiting for the
// host copies, and returns the tensors that read wants. When the epoch
// parks or ends before reading, it returns nil; pending then holds that
// event for StepFinish or ResetFinish (and an epoch that ended is no
// longer running).
func (e *EsperEnv) startBatchedEpoch(ctx context.Context) []*tensor.Tensor {
	e.batchRead = true
	e.startEpoch(ctx)
	e.pending = e.next()
	if e.pending.done != nil {
		e.running = false // the epoch's goroutine has ended
	}
	if e.pending.read != nil {
		return e.pending.read.ts
	}
	return nil
}

// ResetFinish is the second half of Reset: it hands the first epoch
// ResetStart left waiting the host copies of its read (hosts, in order;
// or the read's error, which fails the epoch and the reset), runs to the
// episode's first decision point and returns its observation. Without a
// pending read hosts must be nil.
func (e *EsperEnv) ResetFinish(hosts []*tensor.Tensor, readErr error) (TamiyoObs, error) {
	if !e.resetting {
		return TamiyoObs{}, errors.New("simic: EsperEnv.ResetFinish without ResetStart")
	}
	e.resetting = false
	ev, err := e.handRead(hosts, readErr, "ResetFinish")
	if err != nil {
		return TamiyoObs{}, err
	}
	obs, _, end, err := e.await(e.runCtx, ev)
	if err != nil {
		return TamiyoObs{}, err
	}
	if end {
		return TamiyoObs{}, errors.New("simic: EsperEnv.Reset: the episode ended before its first decision (every epoch rolled back)")
	}
	return obs, nil
}

// handRead takes the event StepStart or ResetStart left pending: a
// waiting read gets hosts (or readErr) and the zero event is returned;
// another event (the epoch parked or ended first) is returned for
// await, and then hosts and readErr must be empty (op names the caller).
func (e *EsperEnv) handRead(hosts []*tensor.Tensor, readErr error, op string) (epochEvent, error) {
	ev := e.pending
	e.pending = epochEvent{}
	if ev.read != nil {
		if readErr == nil && len(hosts) != len(ev.read.ts) {
			readErr = fmt.Errorf("simic: EsperEnv %d: %d host copies for a read of %d tensors", e.o.Index, len(hosts), len(ev.read.ts))
		}
		ev.read.answer(hosts, readErr)
		return epochEvent{}, nil
	}
	if hosts != nil || readErr != nil {
		return ev, fmt.Errorf("simic: EsperEnv %d: %s given a read's results, but no read is waiting", e.o.Index, op)
	}
	return ev, nil
}

// startEpoch runs epoch e.epoch in a goroutine of its own: it reports on
// e.done when it ends, or parks at its decision point (e.bridge.states).
func (e *EsperEnv) startEpoch(ctx context.Context) {
	ep := e.epoch
	e.running = true
	go func() {
		r, err := e.trainer.RunEpoch(ctx, ep)
		e.done <- epochResult{r, err}
	}()
}

// epochEvent is what the running epoch did next: asked for its batched
// read, parked at its decision point, or ended (a zero event: none yet).
type epochEvent struct {
	read  *epochRead
	state *leyline.EpochState
	done  *epochResult
}

// next waits for the running epoch's next event.
func (e *EsperEnv) next() epochEvent {
	select {
	case rd := <-e.reads:
		return epochEvent{read: rd}
	case st := <-e.bridge.states:
		return epochEvent{state: &st}
	case res := <-e.done:
		return epochEvent{done: &res}
	}
}

// await is advance after its first epoch started: it takes ev, if any,
// then the running epoch's events, until an epoch parks at its decision
// point (its observation returned) or the episode ends. A batched read
// still asked for here is made at once.
func (e *EsperEnv) await(ctx context.Context, ev epochEvent) (obs TamiyoObs, rollbacks int, end bool, err error) {
	for {
		if ev == (epochEvent{}) {
			ev = e.next()
		}
		switch {
		case ev.read != nil:
			hosts, err := tensor.ToHostMany(ev.read.ts)
			ev.read.answer(hosts, err)
		case ev.state != nil:
			st := *ev.state
			if err := e.parked(st); err != nil {
				return TamiyoObs{}, rollbacks, false, err
			}
			g, m, err := tamiyo.EncodeState(st, e.encodeOptions())
			if err != nil {
				return TamiyoObs{}, rollbacks, false, err
			}
			e.masks = m
			return TamiyoObs{Graph: g, Masks: m}, rollbacks, false, nil
		default:
			res := *ev.done
			ep := e.epoch
			e.running, e.batchRead = false, false
			if res.err != nil {
				if errors.Is(res.err, tolaria.ErrDiverged) {
					// The host diverged past the governor's rollbacks (the
					// last one restored it): the episode ends here, a
					// terminal state with the rollback's penalty, and the
					// other environments train on.
					e.diverged = true
					return TamiyoObs{}, rollbacks + 1, true, nil
				}
				return TamiyoObs{}, rollbacks, false, fmt.Errorf("simic: EsperEnv %d: epoch %d: %w", e.o.Index, ep, res.err)
			}
			if res.r.RolledBack {
				rollbacks++
			}
			e.lastOp = leyline.OpWait
			e.epoch++
			if e.epoch >= e.o.MaxEpochs {
				return TamiyoObs{}, rollbacks, true, nil
			}
			e.startEpoch(ctx)
		}
		ev = epochEvent{}
	}
}

// epochRead is an epoch's read of its accumulators waiting for its host
// copies (the trainer's EpochRead, started with batchRead).
type epochRead struct {
	ts  []*tensor.Tensor
	out chan epochReadResult
}

type epochReadResult struct {
	hosts []*tensor.Tensor
	err   error
}

// answer hands the waiting epoch its host copies (or the read's error).
func (rd *epochRead) answer(hosts []*tensor.Tensor, err error) {
	rd.out <- epochReadResult{hosts, err}
}

// epochRead is the trainer's EpochRead. Started by StepStart
// (batchRead), the epoch's read goes to the environment, which hands it
// to the vectorised loop and later the host copies back (StepFinish);
// otherwise, or for a further read of the same epoch, it is
// tensor.ToHostMany. It runs on the epoch's goroutine.
func (e *EsperEnv) epochRead(ts []*tensor.Tensor) ([]*tensor.Tensor, error) {
	if !e.batchRead {
		return tensor.ToHostMany(ts)
	}
	e.batchRead = false
	rd := &epochRead{ts: ts, out: make(chan epochReadResult, 1)}
	ctx := e.runCtx
	select {
	case e.reads <- rd:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case res := <-rd.out:
		return res.hosts, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (e *EsperEnv) encodeOptions() tamiyo.EncodeOptions {
	// LastActionFailed stays false, as the inference service encodes it
	// (see Step).
	return tamiyo.EncodeOptions{Layers: e.layers, LastOp: e.lastOp, MaxEpochs: e.o.MaxEpochs, MaxSeeds: e.o.MaxSeeds}
}

// parked runs at a decision point: it records the state and takes the
// epoch's counterfactual attribution, measured by counterfactuals.
func (e *EsperEnv) parked(st leyline.EpochState) error {
	e.state = &st
	e.cfRes, e.cfNext = e.cfNext, nil
	e.work = EsperEpochWork{FusedConfigs: e.cfConfigs, AblationPasses: e.trainer.AblationPasses()}
	return nil
}

// counterfactuals is the trainer's Counterfactuals hook, run after every
// epoch's validation: it evaluates the counterfactual plan's alpha
// configurations over the live, unfossilized seeds with alpha > 0 in one
// fused pass (the all-on configuration is the validation itself, valAcc),
// keeps the attribution for the decision point, and hands the trainer the
// solo-off accuracies of the seeds it asks about, so that it runs no
// ablation pass of its own for them.
func (e *EsperEnv) counterfactuals(ep int, valAcc float64, want []*kasmina.Slot) (map[string]float64, error) {
	e.cfNext, e.cfConfigs = nil, 0
	var ids []string
	var slots []*kasmina.Slot
	for _, s := range e.model.Slots() {
		st := s.State()
		if st == nil || leyline.IsFailureStage(st.Stage) || st.Stage == leyline.StageFossilized || s.Alpha() <= 0 {
			continue
		}
		ids = append(ids, st.SeedID)
		slots = append(slots, s)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	plan, err := e.cf.Plan(ids)
	if err != nil {
		return nil, err
	}
	all := FullCoalition(len(ids))
	known := -1
	if i, ok := plan.Index(all); ok && !math.IsNaN(valAcc) {
		known = i
	}
	vals, k, err := e.fused.evaluate(e.model, e.data.Val, ep, slots, plan.Masks(), known, valAcc)
	if err != nil {
		return nil, fmt.Errorf("simic: EsperEnv %d: fused validation: %w", e.o.Index, err)
	}
	res, err := plan.Compute(vals)
	if err != nil {
		return nil, fmt.Errorf("simic: EsperEnv %d: counterfactual: %w", e.o.Index, err)
	}
	e.cfNext, e.cfConfigs = res, k
	if len(want) == 0 {
		return nil, nil
	}
	offs := make(map[string]float64, len(want))
	for i, s := range slots {
		if !slices.Contains(want, s) {
			continue
		}
		if c, ok := plan.Index(all.Without(i)); ok {
			offs[s.ID()] = vals[c]
		}
	}
	return offs, nil
}

// decision maps a factored action to the trainer's Decision.
func (e *EsperEnv) decision(action []int) (leyline.Decision, error) {
	if len(action) != leyline.NumActionHeads {
		return leyline.Decision{}, fmt.Errorf("simic: EsperEnv.Step: action has %d heads, want %d", len(action), leyline.NumActionHeads)
	}
	for h, a := range action {
		if a < 0 || a >= e.spec.HeadSizes[h] {
			return leyline.Decision{}, fmt.Errorf("simic: EsperEnv.Step: %s option %d outside [0, %d)", leyline.HeadNames[h], a, e.spec.HeadSizes[h])
		}
	}
	d := leyline.Decision{
		Op:          leyline.LifecycleOp(action[leyline.HeadOp]),
		Blueprint:   leyline.BlueprintAction(action[leyline.HeadBlueprint]),
		Style:       leyline.GerminationStyle(action[leyline.HeadStyle]),
		Tempo:       leyline.TempoAction(action[leyline.HeadTempo]),
		AlphaTarget: leyline.AlphaTargetAction(action[leyline.HeadAlphaTarget]),
		AlphaSpeed:  leyline.AlphaSpeedAction(action[leyline.HeadAlphaSpeed]),
		AlphaCurve:  leyline.AlphaCurveAction(action[leyline.HeadAlphaCurve]),
		Reason:      "simic policy", Confidence: 1,
	}
	if d.Op != leyline.OpWait {
		d.SlotID = e.slotIDs[action[leyline.HeadSlot]]
		for _, r := range e.state.Seeds {
			if r.SlotID == d.SlotID && !leyline.IsFailureStage(r.Stage) {
				d.SeedID = r.SeedID
			}
		}
		if d.Op == leyline.OpGerminate {
			d.SeedID = fmt.Sprintf("ep%d_env%d_seed_%d", e.episode, e.o.Index, e.epoch)
		}
	}
	return d, nil
}

// Step executes action at the parked epoch's decision point, finishes the
// epoch, computes the reward and runs to the next decision point. It is
// StepStart, the read it leaves waiting (tensor.ToHostMany) and
// StepFinish.
func (e *EsperEnv) Step(action []int) (StepResult[TamiyoObs], error) {
	reads, err := e.StepStart(action)
	if err != nil {
		return StepResult[TamiyoObs]{}, err
	}
	var hosts []*tensor.Tensor
	if reads != nil {
		hosts, err = tensor.ToHostMany(reads)
	}
	return e.StepFinish(hosts, err)
}

// pendingStep is a step between StepStart and StepFinish: its result and
// info so far, the decision point's state and the finished epoch's
// report, or, with whole, the result StepStart already completed (an
// episode that ended with the epoch the action finished).
type pendingStep struct {
	res   StepResult[TamiyoObs]
	info  EsperStepInfo
	st    leyline.EpochState
	r     tolaria.EpochReport
	whole bool
}

// StepStart is the first half of Step (the batched form simic.VecEnv
// uses to read several environments' epochs in one host sync): it
// executes action at the parked epoch's decision point, finishes the
// epoch, computes the reward and runs the next epoch up to its read of
// its accumulators. It returns the device tensors that read wants (nil
// when the next epoch did not get there: it parked or ended first, or
// the episode ended) and leaves the epoch waiting. StepFinish must
// follow, with their host copies: until then the environment's epoch
// holds still.
func (e *EsperEnv) StepStart(action []int) ([]*tensor.Tensor, error) {
	if e.stepping != nil {
		return nil, errors.New("simic: EsperEnv.StepStart: the previous step was not finished (StepFinish)")
	}
	var res StepResult[TamiyoObs]
	if e.state == nil || !e.running {
		return nil, errors.New("simic: EsperEnv.Step: no decision pending (call Reset)")
	}
	st := *e.state
	d, err := e.decision(action)
	if err != nil {
		return nil, err
	}
	m := st.Signals.Metrics
	info := EsperStepInfo{Epoch: e.epoch, ValAccuracy: m.ValAccuracy, Counterfactual: e.cfRes}
	if g := e.trainer.Governor(); g != nil {
		v := g.Preflight(d, tolaria.PreflightContext{ValLoss: m.ValLoss, ValAccuracy: m.ValAccuracy, MaxSeeds: e.o.MaxSeeds})
		if !v.Approved {
			info.Vetoed, info.VetoReason = true, v.Reason
			d = leyline.Wait("preflight veto: " + v.Reason)
		}
	}
	info.Decision = d
	e.bridge.decisions <- d
	out := <-e.done
	e.running, e.state = false, nil
	if out.err != nil {
		if errors.Is(out.err, tolaria.ErrDiverged) { // as in advance
			e.diverged = true
			e.info = info
			res.Rollback, res.Terminated = true, true
			res.Reward = e.trainer.Governor().PunishmentReward()
			e.record(info, res.Reward, true)
			res.Obs, err = e.finalObs(st, out.r)
			if err != nil {
				return nil, err
			}
			e.stepping = &pendingStep{res: res, whole: true}
			return nil, nil
		}
		return nil, fmt.Errorf("simic: EsperEnv %d: epoch %d: %w", e.o.Index, e.epoch, out.err)
	}
	r := out.r
	info.Applied = r.Applied
	for _, s := range r.Seeds {
		switch s.Stage {
		case leyline.StageBlending, leyline.StageHolding, leyline.StageFossilized:
			e.blended[s.SeedID] = true
		}
	}
	// The observation reports the last op as a success whatever became
	// of it, as the inference service must (a trainer does not tell its
	// controller): a policy trained on "the ADVANCE failed" would be
	// deployed on a feature that never says so.
	e.lastOp = d.Op
	if d.Op == leyline.OpGerminate && r.Applied == tolaria.ApplyApplied {
		e.accAtGerm[d.SeedID] = m.ValAccuracy
	}
	slotID := e.slotIDs[action[leyline.HeadSlot]]
	in, err := e.rewardInputs(st, r, d, slotID)
	if err != nil {
		return nil, err
	}
	rw, err := e.rewarder.Compute(in)
	if err != nil {
		return nil, fmt.Errorf("simic: EsperEnv %d: reward: %w", e.o.Index, err)
	}
	info.Reward = rw
	res.Reward = rw.Total
	e.lastSeeds = map[string]leyline.SeedReport{}
	for _, s := range st.Seeds {
		e.lastSeeds[s.SeedID] = s
	}
	e.epoch++
	e.stepping = &pendingStep{res: res, info: info, st: st, r: r}
	if e.epoch >= e.o.MaxEpochs {
		return nil, nil // the episode ends: StepFinish has no epoch to wait for
	}
	return e.startBatchedEpoch(e.runCtx), nil
}

// StepFinish is the second half of Step: it hands the epoch StepStart
// left waiting the host copies of its read (hosts, in order; or the
// read's error, which fails the epoch and the step), runs to the next
// decision point and returns the step's result. Without a pending read
// hosts must be nil.
func (e *EsperEnv) StepFinish(hosts []*tensor.Tensor, readErr error) (StepResult[TamiyoObs], error) {
	p := e.stepping
	if p == nil {
		return StepResult[TamiyoObs]{}, errors.New("simic: EsperEnv.StepFinish without StepStart")
	}
	e.stepping = nil
	ev, err := e.handRead(hosts, readErr, "StepFinish")
	if err != nil {
		return StepResult[TamiyoObs]{}, err
	}
	if p.whole {
		return p.res, nil
	}
	res, info := p.res, p.info
	var obs TamiyoObs
	var rollbacks int
	end := true
	if e.epoch < e.o.MaxEpochs {
		var err error
		if obs, rollbacks, end, err = e.await(e.runCtx, ev); err != nil {
			return res, err
		}
	}
	info.Rollbacks = rollbacks
	if rollbacks > 0 {
		res.Rollback = true
		res.Reward = e.trainer.Governor().PunishmentReward()
		info.Reward = Reward{}
	}
	e.info = info
	e.record(info, res.Reward, end)
	if end {
		// A diverged host ends the episode (terminal); the run's last
		// epoch too with Terminal, else it is truncated, bootstrapped
		// (see EsperEnv).
		res.Terminated = e.diverged || e.o.Terminal
		res.Truncated = !res.Terminated
		var err error
		res.Obs, err = e.finalObs(p.st, p.r)
		return res, err
	}
	res.Obs = obs
	return res, nil
}

// finalObs is the observation after the episode's last epoch: the last
// decision point's signals with the seeds as the epoch left them.
func (e *EsperEnv) finalObs(st leyline.EpochState, r tolaria.EpochReport) (TamiyoObs, error) {
	st.Seeds = r.Seeds
	st.Signals.ActiveSeeds = st.Signals.ActiveSeeds[:0:0]
	avail := len(e.slotIDs)
	for _, s := range r.Seeds {
		avail--
		if !leyline.IsFailureStage(s.Stage) {
			st.Signals.ActiveSeeds = append(st.Signals.ActiveSeeds, s.SeedID)
		}
	}
	st.Signals.AvailableSlots = max(0, avail)
	g, m, err := tamiyo.EncodeState(st, e.encodeOptions())
	if err != nil {
		return TamiyoObs{}, err
	}
	return TamiyoObs{Graph: g, Masks: m}, nil
}

// rewardInputs assembles the reward inputs of one step: the state at the
// decision (st), the epoch's report after the action and the tick (r).
func (e *EsperEnv) rewardInputs(st leyline.EpochState, r tolaria.EpochReport, d leyline.Decision, slotID string) (RewardInputs, error) {
	m := st.Signals.Metrics
	in := RewardInputs{Op: d.Op, ValAcc: m.ValAccuracy, Epoch: e.epoch + 1, MaxEpochs: e.o.MaxEpochs, HostParams: e.hostParams, CommittedValAcc: m.ValAccuracy}
	cfIndex := map[string]int{}
	if e.cfRes != nil {
		for i, id := range e.cfRes.SeedIDs {
			cfIndex[id] = i
		}
		in.CommittedValAcc = e.cfRes.BaselineAccuracy
	}
	for _, s := range st.Seeds {
		if s.SlotID != slotID || leyline.IsFailureStage(s.Stage) {
			continue
		}
		rs := &RewardSeed{Stage: s.Stage, EpochsInStage: s.EpochsInStage, PreviousStage: s.Stage, PreviousEpochsInStage: max(0, s.EpochsInStage-1),
			SeedAgeEpochs: s.EpochsTotal, ImprovementSinceStageStart: s.ImprovementSinceStageStart, PreviousIsLastStep: true}
		if p, ok := e.lastSeeds[s.SeedID]; ok {
			// The stage the seed was seen in at the last decision: PBRS
			// pays the transition between (SeedReport has no previous
			// stage, and at a decision a seed is already one epoch into
			// its new stage).
			rs.PreviousStage, rs.PreviousEpochsInStage = p.Stage, p.EpochsInStage
		} else {
			// Not seen before (germinated at the last step, whose
			// ActionPBRS paid the germination): the same-stage step.
			rs.PreviousIsLastStep = false
		}
		if i, ok := cfIndex[s.SeedID]; ok {
			rs.Contribution, rs.ContributionMeasured = e.cfRes.Removal[i], true
			rs.TotalImprovement, rs.TotalImprovementMeasured = e.cfRes.FullAccuracy-e.cfRes.BaselineAccuracy, true
			if e.cfRes.InteractionSum != nil {
				rs.InteractionSum = e.cfRes.InteractionSum[i]
			}
		}
		in.Seed = rs
		if acc, ok := e.accAtGerm[s.SeedID]; ok {
			in.AccAtGermination, in.AccAtGerminationKnown = acc, true
		}
	}
	prevAlpha := map[string]float64{}
	live := map[string]bool{}
	for _, s := range st.Seeds {
		prevAlpha[s.SlotID] = s.Alpha
		if !leyline.IsFailureStage(s.Stage) {
			live[s.SeedID] = true
		}
	}
	var slots []SlotParams
	for _, s := range r.Seeds {
		sl, err := e.model.Slot(s.SlotID)
		if err != nil {
			return in, err
		}
		n := 0
		for _, p := range sl.Parameters() {
			n += p.Value.Numel()
		}
		slots = append(slots, SlotParams{Stage: s.Stage, Alpha: s.Alpha, PrevAlpha: prevAlpha[s.SlotID], SeedParams: n})
		switch {
		case s.Stage == leyline.StageFossilized:
			in.NumFossilizedSeeds++
			in.FossilizedSeedParams += n
			if s.Counterfactual != nil && *s.Counterfactual >= leyline.MinFossilizeContribution {
				in.NumContributingFossilized++
			}
		case leyline.IsFailureStage(s.Stage):
			// Pruned by the slot itself rather than by this step's PRUNE.
			if live[s.SeedID] && !(d.Op == leyline.OpPrune && d.SlotID == s.SlotID) {
				in.PendingAutoPrunes++
			}
		default:
			in.NumActiveSeeds++
		}
	}
	in.EffectiveSeedParams = EffectiveSeedParams(e.hostParams, slots)
	before, after := map[string]leyline.SeedStage{}, map[string]leyline.SeedStage{}
	for _, s := range st.Seeds {
		before[s.SlotID] = s.Stage
	}
	for i, s := range r.Seeds {
		after[s.SlotID] = s.Stage
		if !leyline.IsFailureStage(s.Stage) {
			in.AddedParams += slots[i].SeedParams
		}
	}
	for _, id := range e.slotIDs {
		in.Transitions = append(in.Transitions, StageTransition{Before: before[id], After: after[id]})
	}
	in.AlphaDeltaSqSum = AlphaDeltaSqSum(e.hostParams, slots)
	return in, nil
}
