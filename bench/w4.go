package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/esper-go/esper/autograd"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/simic"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// W4 "simic-ppo" (PERF.md): the vectorised Esper environments of `esper
// ppo` (simic.EsperEnv in a simic.VecEnv) on a CNN host of base width 8
// with 3 slots, 1×28×28 synthetic images, 8 training batches of 128 and a
// validation set of 512 samples with the counterfactual configurations
// evaluated in one fused pass per env-epoch. The metric is env-epochs per
// second, for the bare loop (the policy acts, the environments step, no
// update) and for the loop with the PPO update.

// W4 defaults (PERF.md's W4 row; the policy widths are `esper ppo`'s).
const (
	W4DefaultEnvs         = 4
	W4DefaultBlocks       = 3 // one pre-pool slot per block: 3 slots
	W4DefaultBaseChannels = 8
	W4DefaultTrain        = 1024 // 8 training batches of 128
	W4DefaultVal          = 512
	W4DefaultBatch        = 128
	W4DefaultMaxEpochs    = simic.DefaultEsperMaxEpochs
	W4DefaultSteps        = 12
	W4DefaultWarmup       = 2
	W4DefaultPPORounds    = 2
)

// W4DefaultPolicy are the policy widths `esper ppo` trains by default.
var W4DefaultPolicy = tamiyo.PolicyOptions{Hidden: 64, GATHidden: 32, GATHeads: 2, HeadHidden: 64}

// W4Options configures RunW4. Zero values give the defaults above.
type W4Options struct {
	// Envs is the number of lock-step environments (default 4).
	Envs int
	// Blocks and BaseChannels shape each environment's CNN host (default
	// 3 blocks, so 3 slots, of base width 8).
	Blocks, BaseChannels int
	// Train, Val and Batch size the shared synthetic data stream
	// (defaults 1024, 512, 128).
	Train, Val, Batch int
	// MaxEpochs is the episode length in epochs (default
	// simic.DefaultEsperMaxEpochs); it is also the PPO rollout length,
	// as in `esper ppo`.
	MaxEpochs int
	// Steps are the measured lock-step steps of the bare loop (default
	// 12); each is one env-epoch per environment.
	Steps int
	// Warmup are the unmeasured lock-step steps of the bare loop before
	// them (default 2).
	Warmup int
	// PPORounds are the measured rounds of the loop with the update
	// (default 2): each collects MaxEpochs lock-step steps, then runs one
	// PPO update. Negative skips the PPO loop.
	PPORounds int
	// Policy are the policy's widths (zero: W4DefaultPolicy). Dropout is
	// off, as in `esper ppo`.
	Policy tamiyo.PolicyOptions
	// Capture captures and replays the hosts' training steps.
	Capture bool
	// Device is where every environment's host and the policy compute
	// (the CPU by default); its kernels must be registered
	// (kernels/device.OpenDevice). On a device other than the CPU the
	// results count its host syncs (tensor.HostSyncs).
	Device tensor.Device
	// Seed seeds the data, the hosts, the policy and its sampling.
	Seed uint64
	// Progress, when set, is called after each measured lock-step step
	// ("bare loop") or PPO round ("ppo loop").
	Progress func(phase string, done, total int)
}

// W4LoopResult is the timing of one loop.
type W4LoopResult struct {
	Mode string `json:"mode"` // "bare" or "ppo"
	// EnvEpochs are the env-epochs measured (lock-step steps × envs) and
	// Seconds their wall time.
	EnvEpochs int     `json:"env_epochs"`
	Seconds   float64 `json:"seconds"`
	// EnvEpochsPerSec is EnvEpochs over Seconds, PerEnv that over the
	// number of environments.
	EnvEpochsPerSec float64 `json:"env_epochs_per_second"`
	PerEnv          float64 `json:"env_epochs_per_second_per_env"`
	// Latency is per lock-step step (bare: policy act + every
	// environment's step) or per round (ppo: rollout + update).
	Latency           Latency `json:"latency"`
	AllocsPerEnvEpoch float64 `json:"allocs_per_env_epoch"`
	// PolicySeconds is the time spent in the policy's batched Act (bare
	// only); UpdateSeconds the time spent in PPO updates (ppo only).
	PolicySeconds float64 `json:"policy_seconds,omitempty"`
	UpdateSeconds float64 `json:"update_seconds,omitempty"`
	// UpdateSyncSeconds is the part of UpdateSeconds the host spent in
	// its host syncs, waiting for the device and reading
	// (tensor.HostSyncTime; ppo only, 0 on the CPU): the rest is the
	// host's own work, enqueuing the update's launches included. A large
	// share says the update waits for the device, a small one that the
	// host is its bound.
	UpdateSyncSeconds float64 `json:"update_sync_seconds,omitempty"`
	// OpsPerUpdate is the ops one PPO update asks its device for, on a
	// backend that counts them (sim's Calls; ppo only): what a GPU
	// launches eagerly for the same update, so that UpdateSeconds on a
	// GPU over it prices one op.
	OpsPerUpdate float64 `json:"ops_per_update,omitempty"`
	// EnvSeconds is the time spent inside the environments' own calls
	// (their steps' and resets' halves: host work, launches and any wait
	// of their own), ReadSeconds the rest of VecEnv.Step: its batched
	// reads, where the host waits for the device to finish every
	// environment's queued work (bare only). On a GPU a large ReadSeconds
	// says the loop waits for the device; a large EnvSeconds that the host
	// is the bound.
	EnvSeconds  float64 `json:"env_seconds,omitempty"`
	ReadSeconds float64 `json:"read_seconds,omitempty"`
	// Syncs are the loop's host syncs of the device (zero on the CPU).
	Syncs W4Syncs `json:"host_syncs"`
	// DriverAllocs are the loop's device allocations that its backend's
	// cache could not serve (tensor.DriverAllocs: CUDA's cuMemAlloc
	// calls; zero on the CPU and sim), DriverAllocSeconds the time they
	// took: what the loop's captures and warm-ups spent growing device
	// memory.
	DriverAllocs       uint64  `json:"driver_allocs"`
	DriverAllocSeconds float64 `json:"driver_alloc_seconds"`
}

// driverAllocsSince returns a function that sets l's driver allocation
// figures to dev's since the call.
func driverAllocsSince(dev tensor.Device) func(l *W4LoopResult) {
	n0, t0 := tensor.DriverAllocs(dev)
	return func(l *W4LoopResult) {
		n, t := tensor.DriverAllocs(dev)
		l.DriverAllocs, l.DriverAllocSeconds = n-n0, (t - t0).Seconds()
	}
}

// W4Syncs are a loop's host syncs of the device (tensor.HostSyncs: the
// device-to-host reads it waited for), split by who read.
type W4Syncs struct {
	// Total is every host sync of the loop; PerEnvEpoch that over its
	// env-epochs.
	Total       uint64  `json:"total"`
	PerEnvEpoch float64 `json:"per_env_epoch"`
	// Envs are the environments' (their hosts' epochs, resets included:
	// tolaria's one read of each epoch's training and validation passes,
	// which brings the gradient telemetry's norms with it and which
	// VecEnv makes for every environment of a lock-step step together,
	// and the fused counterfactual validation's one read) and
	// EnvPerEnvEpoch that over the env-epochs: with the epochs' reads
	// batched, one per lock-step step, it falls as the environments grow
	// (1/Envs where nothing else reads).
	Envs           uint64  `json:"envs"`
	EnvPerEnvEpoch float64 `json:"env_per_env_epoch"`
	// Policy are the rollout's policy reads outside the environments
	// (the batched Act's one read per lock-step step for every
	// environment together; in the ppo loop also the bootstrap values'
	// read per round) and PolicyPerStep that per lock-step step.
	Policy        uint64  `json:"policy"`
	PolicyPerStep float64 `json:"policy_per_step"`
	// Updates are the PPO updates' reads (ppo loop only), PerUpdate their
	// mean per update and MinibatchesPerUpdate the update's minibatches:
	// PPO.Update's one read of its statistics, plus what the policy's
	// Evaluate reads per minibatch (Tamiyo's probability floors: one per
	// minibatch, the reference pass's included).
	Updates              uint64  `json:"updates,omitempty"`
	PerUpdate            float64 `json:"per_update,omitempty"`
	MinibatchesPerUpdate int     `json:"minibatches_per_update,omitempty"`
}

// W4Work counts what the measured bare loop did beyond training and
// validating the hosts: the work the PyTorch peer replays.
type W4Work struct {
	// Configs[i] is the number of alpha configurations the fused
	// counterfactual validation evaluated in measured env-epoch i (0
	// without live seeds; the all-on configuration is the validation
	// pass, not evaluated again), Ablations[i] the number of tolaria's
	// own per-seed alpha-0 validation passes (none when the fused
	// validation provides them: simic.EsperEpochWork).
	Configs   []int `json:"configs"`
	Ablations []int `json:"ablations"`
	// Seeds[i] are the seeds measured env-epoch i ran (forward, and
	// their own optimizer step when trainable), in slot order: the peer
	// builds the same modules and replays them.
	Seeds [][]W4Seed `json:"seeds"`
	// LiveSeeds is the mean number of live seeds per measured env-epoch
	// (GERMINATED ones, which do not run yet, included) and SeedParams
	// the mean of their parameter count.
	LiveSeeds  float64 `json:"mean_live_seeds"`
	SeedParams float64 `json:"mean_seed_params"`
	// Germinations counts the germinations applied, Rollbacks the
	// governor rollbacks and Episodes the episodes that ended, during
	// the measured bare loop.
	Germinations int `json:"germinations"`
	Rollbacks    int `json:"rollbacks"`
	Episodes     int `json:"episodes"`
	// Syncs[i] are the host syncs of the device measured env-epoch i
	// waited for on its own (its environment's step, and the reset when
	// its episode ended there; not the lock-step step's batched read,
	// ReadSyncs, which reads the resets' first epochs too): 0 on the CPU.
	Syncs []int `json:"host_syncs"`
	// ReadSyncs are the host syncs of the measured lock-step steps'
	// batched reads (simic.VecEnv.ReadSyncs): every environment's epoch
	// accumulators read together, the first epochs of the episodes the
	// step started included, one per step on a device.
	ReadSyncs int `json:"batched_read_syncs"`
	// Captures, EagerCalls and Replays are the environments' trainers'
	// captured-region figures over the measured bare loop (training
	// steps, validation batches and passes, whole epochs; zero without
	// W4Options.Capture): a new shape or guard — a germination, a stage
	// change, an episode's new host — costs an eager warm-up call and a
	// capture. CaptureSeconds is the wall time the captures took.
	Captures       int     `json:"captures"`
	EagerCalls     int     `json:"eager_calls"`
	Replays        int     `json:"replays"`
	CaptureSeconds float64 `json:"capture_seconds"`
	// StepGraphNodes and ValidationGraphNodes are the launches (CUDA
	// graph nodes on CUDA) of the most recently replayed training step
	// and validation region of the environments' trainers, the largest
	// over the environments at the end of the measured bare loop (0
	// without capture): what a replay costs in launches.
	StepGraphNodes       int `json:"step_graph_nodes"`
	ValidationGraphNodes int `json:"validation_graph_nodes"`
}

// SeedTotals are the seed-epochs of the measured env-epochs (one per seed
// an env-epoch ran) and the sum of their parameter counts: the peer
// reports the same totals when it replayed the trace.
func (w W4Work) SeedTotals() (seeds, params int) {
	for _, ss := range w.Seeds {
		seeds += len(ss)
		for _, s := range ss {
			params += s.Params
		}
	}
	return seeds, params
}

// W4Seed is one seed an env-epoch ran, as the peer replays it: a
// kasmina blueprint in the pre-pool slot of host block Slot, blended into
// the host's activation by the slot's rules (kasmina.Slot.Forward).
type W4Seed struct {
	ID string `json:"id"`
	// Slot is the host block whose pre-pool activation (after its ReLU,
	// before its max-pool) the seed reads and blends into.
	Slot      int    `json:"slot"`
	Blueprint string `json:"blueprint"`
	Channels  int    `json:"channels"`
	// Training is the TRAINING stage: at Alpha 0 the blend is the
	// straight-through h + (s − detach(s)).
	Training bool    `json:"training"`
	Alpha    float64 `json:"alpha"`
	// Blend is the alpha algorithm: "add", "multiply" or "gate" (with
	// kasmina's GatedBlend, whose parameters Params counts).
	Blend string `json:"blend"`
	// Isolate detaches the seed's input from the host's graph.
	Isolate bool `json:"isolate"`
	// Trainable: the seed's parameters take gradients and its own SGD
	// steps them (not frozen).
	Trainable bool `json:"trainable"`
	Params    int  `json:"params"`
}

// W4Result is what RunW4 measured.
type W4Result struct {
	Envs         int `json:"envs"`
	Slots        int `json:"slots"`
	Blocks       int `json:"blocks"`
	BaseChannels int `json:"base_channels"`
	Train        int `json:"train"`
	Val          int `json:"val"`
	Batch        int `json:"batch"`
	MaxEpochs    int `json:"max_epochs"`
	Steps        int `json:"steps"`
	Warmup       int `json:"warmup"`
	PPORounds    int `json:"ppo_rounds"`
	// HostParams is one host's parameter count (no seeds), PolicyParams
	// the policy's.
	HostParams   int    `json:"host_params"`
	PolicyParams int    `json:"policy_params"`
	PolicyNote   string `json:"policy"`
	// Policy are the policy's options with defaults filled in.
	Policy tamiyo.PolicyOptions `json:"-"`
	// Graph is the batched observation graph of the environments at the
	// end of the bare loop (what the policy ran on), for the peer.
	Graph *tamiyo.Graph `json:"-"`
	Bare  W4LoopResult  `json:"bare"`
	// PPO is nil when PPORounds is negative.
	PPO  *W4LoopResult `json:"ppo,omitempty"`
	Work W4Work        `json:"work"`
	// Device is where the environments and the policy ran.
	Device string `json:"device"`
}

func (o W4Options) withDefaults() (W4Options, error) {
	if o.Envs < 0 || o.Blocks < 0 || o.BaseChannels < 0 || o.Train < 0 || o.Val < 0 || o.Batch < 0 || o.MaxEpochs < 0 || o.Steps < 0 || o.Warmup < 0 {
		return o, fmt.Errorf("bench: W4 options must not be negative: %+v", o)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Envs, W4DefaultEnvs)
	def(&o.Blocks, W4DefaultBlocks)
	def(&o.BaseChannels, W4DefaultBaseChannels)
	def(&o.Train, W4DefaultTrain)
	def(&o.Val, W4DefaultVal)
	def(&o.Batch, W4DefaultBatch)
	def(&o.MaxEpochs, W4DefaultMaxEpochs)
	def(&o.Steps, W4DefaultSteps)
	def(&o.Warmup, W4DefaultWarmup)
	def(&o.PPORounds, W4DefaultPPORounds)
	if o.Train < o.Batch {
		return o, fmt.Errorf("bench: W4 training set of %d samples is smaller than a batch of %d", o.Train, o.Batch)
	}
	if o.Policy == (tamiyo.PolicyOptions{}) {
		o.Policy = W4DefaultPolicy
	}
	o.Policy.NoDropout, o.Policy.Seed, o.Policy.Device = true, o.Seed, o.Device
	if _, err := kernels.Lookup(o.Device); err != nil {
		return o, fmt.Errorf("bench: W4 on %v: %w", o.Device, err)
	}
	return o, nil
}

// w4Env is an environment of the rig: it counts the host syncs of the
// device its steps and resets wait for (environments step one after
// another, so the device's counter before and after is theirs alone).
type w4Env struct {
	*simic.EsperEnv
	dev tensor.Device
	// syncs are the environment's since the census took them last.
	syncs uint64
	// captures are its trainers' capture figures over the calls since
	// the census took them last.
	captures autograd.CaptureStats
	// busy is the time spent inside its calls.
	busy time.Duration
}

func (e *w4Env) Reset() (simic.TamiyoObs, error) {
	defer e.count()()
	return e.EsperEnv.Reset()
}

func (e *w4Env) Step(a []int) (simic.StepResult[simic.TamiyoObs], error) {
	defer e.count()()
	return e.EsperEnv.Step(a)
}

// StepStart and StepFinish are the halves of Step VecEnv calls
// (simic.SplitStepper), counted as Step is; the read between them, made
// for every environment at once, is VecEnv's (ReadSyncs). Every method
// of simic.EsperEnv that runs the environment is wrapped here: one left
// promoted would go uncounted.
func (e *w4Env) StepStart(a []int) ([]*tensor.Tensor, error) {
	defer e.count()()
	return e.EsperEnv.StepStart(a)
}

func (e *w4Env) StepFinish(hosts []*tensor.Tensor, readErr error) (simic.StepResult[simic.TamiyoObs], error) {
	defer e.count()()
	return e.EsperEnv.StepFinish(hosts, readErr)
}

// ResetStart and ResetFinish are the halves of Reset VecEnv calls
// (simic.SplitResetter), counted as Reset is.
func (e *w4Env) ResetStart() ([]*tensor.Tensor, error) {
	defer e.count()()
	return e.EsperEnv.ResetStart()
}

func (e *w4Env) ResetFinish(hosts []*tensor.Tensor, readErr error) (simic.TamiyoObs, error) {
	defer e.count()()
	return e.EsperEnv.ResetFinish(hosts, readErr)
}

// count notes the device's host syncs, the trainer's capture figures and
// the time before a call and returns the function that adds the call's
// to the environment's.
func (e *w4Env) count() func() {
	t0, s0 := time.Now(), tensor.HostSyncs(e.dev)
	captures := e.countCaptures()
	return func() {
		captures()
		e.syncs += tensor.HostSyncs(e.dev) - s0
		e.busy += time.Since(t0)
	}
}

// countCaptures notes the trainer's capture figures and returns the
// function that adds what a call did to e.captures: the growth of the
// trainer's, and all of a new trainer's when the call replaced it (an
// episode's reset).
func (e *w4Env) countCaptures() func() {
	tr := e.Trainer()
	var s0 autograd.CaptureStats
	if tr != nil {
		s0 = tr.CaptureStats()
	}
	return func() {
		if tr != nil {
			addCaptures(&e.captures, tr.CaptureStats(), s0)
		}
		if now := e.Trainer(); now != nil && now != tr {
			addCaptures(&e.captures, now.CaptureStats(), autograd.CaptureStats{})
		}
	}
}

// addCaptures adds the figures of b less those of a to s.
func addCaptures(s *autograd.CaptureStats, b, a autograd.CaptureStats) {
	s.Captures += b.Captures - a.Captures
	s.Replays += b.Replays - a.Replays
	s.EagerCalls += b.EagerCalls - a.EagerCalls
	s.CaptureTime += b.CaptureTime - a.CaptureTime
}

// take returns the syncs counted since the last take.
func (e *w4Env) take() uint64 {
	n := e.syncs
	e.syncs = 0
	return n
}

// w4Rig is the W4 set-up: the shared data stream, the environments in a
// VecEnv and the policy, with the bare loop's lock-step step.
type w4Rig struct {
	o    W4Options
	d    *simic.EsperData
	envs []*simic.EsperEnv
	wrap []*w4Env
	vec  *simic.VecEnv[simic.TamiyoObs]
	net  *tamiyo.Policy
	pol  *simic.TamiyoPolicy
	rng  *rand.Rand
	// actTime is the time spent in the policy's Act by measured steps,
	// actSyncs its host syncs; envTime the time inside the environments'
	// calls during their VecEnv.Steps, readTime the rest of those Steps
	// (the batched reads).
	actTime           time.Duration
	actSyncs          uint64
	envTime, readTime time.Duration
}

// newW4Rig builds o's data, environments (reset, each parked at its
// first decision point) and policy; o has its defaults filled in.
func newW4Rig(o W4Options) (_ *w4Rig, err error) {
	r := &w4Rig{o: o, rng: tensor.NewRNG(o.Seed + 2)}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	// On a device the dataset is resident there (no batch copied from
	// the host), as esper ppo keeps it.
	if r.d, err = simic.NewSyntheticData(simic.SyntheticDataOptions{Train: o.Train, Val: o.Val, Batch: o.Batch, Seed: o.Seed, Device: o.Device}); err != nil {
		return nil, err
	}
	r.envs = make([]*simic.EsperEnv, o.Envs)
	r.wrap = make([]*w4Env, o.Envs)
	r.vec, err = simic.NewVecEnv(o.Envs, func(i int) (simic.Env[simic.TamiyoObs], error) {
		e, err := simic.NewEsperEnv(simic.EsperEnvOptions{Data: r.d, Index: i, Seed: o.Seed, MaxEpochs: o.MaxEpochs,
			Blocks: o.Blocks, BaseChannels: o.BaseChannels, Capture: o.Capture, Device: o.Device})
		r.envs[i] = e
		if err != nil {
			return nil, err
		}
		r.wrap[i] = &w4Env{EsperEnv: e, dev: o.Device}
		return r.wrap[i], nil
	})
	if err != nil {
		return nil, err
	}
	if r.net, err = tamiyo.NewPolicy(o.Policy); err != nil {
		return nil, err
	}
	if r.pol, err = simic.NewTamiyoPolicy(r.net, simic.TamiyoPolicyOptions{Capture: true}); err != nil {
		return nil, err
	}
	return r, nil
}

// close stops the environments' epoch goroutines and the data loaders.
func (r *w4Rig) close() {
	for _, e := range r.envs {
		if e != nil {
			e.Close()
		}
	}
	r.d.Close()
}

// step is one lock-step step of the bare loop, the same as
// simic.Trainer.Collect's without the buffer: the policy acts on every
// environment's observation, then VecEnv.Step. A measured step (work
// not nil) adds its policy time to actTime and its work to work.
func (r *w4Rig) step(work *W4Work) error {
	t0 := time.Now()
	s0 := tensor.HostSyncs(r.o.Device)
	act, err := r.pol.Act(r.vec.Obs(), nil, r.rng, false)
	if err != nil {
		return err
	}
	if work != nil {
		r.actTime += time.Since(t0)
		r.actSyncs += tensor.HostSyncs(r.o.Device) - s0
	}
	reads0 := r.vec.ReadSyncs()
	var busy0 time.Duration
	for _, w := range r.wrap {
		busy0 += w.busy
	}
	t1 := time.Now()
	vs, err := r.vec.Step(act.Actions)
	if err != nil {
		return err
	}
	if work == nil {
		return nil
	}
	took := time.Since(t1)
	var busy time.Duration
	for _, w := range r.wrap {
		busy += w.busy
	}
	r.envTime += busy - busy0
	r.readTime += took - (busy - busy0)
	work.ReadSyncs += int(r.vec.ReadSyncs() - reads0)
	work.Episodes += len(vs.Episodes)
	for i, e := range r.envs {
		if vs.Rollback[i] {
			work.Rollbacks++
		}
		if ls := e.LastStep(); ls.Decision.Op == leyline.OpGerminate && ls.Applied == tolaria.ApplyApplied {
			work.Germinations++
		}
		w4Census(e, work)
		work.Syncs = append(work.Syncs, int(r.wrap[i].take()))
		c := r.wrap[i].captures
		work.Captures += c.Captures
		work.EagerCalls += c.EagerCalls
		work.Replays += c.Replays
		work.CaptureSeconds += c.CaptureTime.Seconds()
		r.wrap[i].captures = autograd.CaptureStats{}
		if tr := e.Trainer(); tr != nil {
			step, val := tr.GraphNodes()
			work.StepGraphNodes, work.ValidationGraphNodes = max(work.StepGraphNodes, step), max(work.ValidationGraphNodes, val)
		}
	}
	return nil
}

// takeSyncs returns the environments' host syncs since the last take
// (and drops their capture figures, which the census did not take).
func (r *w4Rig) takeSyncs() uint64 {
	var n uint64
	for _, w := range r.wrap {
		n += w.take()
		w.captures = autograd.CaptureStats{}
	}
	return n
}

// RunW4 builds o.Envs Esper environments on one synthetic data stream and
// a policy, then times the bare loop (Warmup unmeasured and Steps
// measured lock-step steps: one policy.Act over all environments, then
// VecEnv.Step) and, on the same environments and policy, PPORounds rounds
// of simic.Trainer.Iterate (rollout of MaxEpochs steps, then the PPO
// update configured as `esper ppo` does).
func RunW4(o W4Options) (W4Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return W4Result{}, err
	}
	rig, err := newW4Rig(o)
	if err != nil {
		return W4Result{}, err
	}
	defer rig.close()
	envs, vec, net, pol := rig.envs, rig.vec, rig.net, rig.pol
	po := net.Options()
	res := W4Result{
		Envs: o.Envs, Slots: len(envs[0].Model().SlotIDs()), Blocks: o.Blocks, BaseChannels: o.BaseChannels,
		Train: o.Train, Val: o.Val, Batch: o.Batch, MaxEpochs: o.MaxEpochs, Steps: o.Steps, Warmup: o.Warmup,
		PPORounds: max(o.PPORounds, 0), Policy: po, Device: o.Device.String(),
		PolicyNote: fmt.Sprintf("tamiyo.Policy hidden %d, GAT %d×%d heads, head hidden %d, %v", po.Hidden, po.GATHidden, po.GATHeads, po.HeadHidden, po.DType),
	}
	for _, p := range envs[0].Model().HostParameters() {
		res.HostParams += p.Value.Numel()
	}
	for _, p := range net.Parameters() {
		res.PolicyParams += p.Value.Numel()
	}

	// The bare loop.
	dev := o.Device
	for i := 0; i < o.Warmup; i++ {
		if err := rig.step(nil); err != nil {
			return res, fmt.Errorf("bench: W4 warm-up: %w", err)
		}
	}
	rig.takeSyncs()
	syncs0 := tensor.HostSyncs(dev)
	runtime.GC()
	lat := make([]time.Duration, o.Steps)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	allocs := driverAllocsSince(dev)
	for i := range lat {
		t0 := time.Now()
		err := rig.step(&res.Work)
		lat[i] = time.Since(t0)
		if err != nil {
			return res, fmt.Errorf("bench: W4 bare loop: %w", err)
		}
		if o.Progress != nil {
			o.Progress("bare loop", i+1, o.Steps)
		}
	}
	runtime.ReadMemStats(&ms1)
	res.Bare = w4Loop("bare", lat, o.Steps*o.Envs, o.Envs, ms1.Mallocs-ms0.Mallocs)
	allocs(&res.Bare)
	res.Bare.PolicySeconds = rig.actTime.Seconds()
	res.Bare.EnvSeconds, res.Bare.ReadSeconds = rig.envTime.Seconds(), rig.readTime.Seconds()
	envSyncs := uint64(res.Work.ReadSyncs)
	for _, n := range res.Work.Syncs {
		envSyncs += uint64(n)
	}
	res.Bare.Syncs = w4Syncs(tensor.HostSyncs(dev)-syncs0, envSyncs, rig.actSyncs, o.Steps, o.Envs)
	n := float64(len(res.Work.Configs))
	res.Work.LiveSeeds /= n
	res.Work.SeedParams /= n
	var gs []*tamiyo.Graph
	for _, ob := range vec.Obs() {
		gs = append(gs, ob.Graph)
	}
	if res.Graph, err = tamiyo.BatchGraphs(gs...); err != nil {
		return res, err
	}
	if o.PPORounds < 0 {
		return res, nil
	}

	// The loop with the update, configured as `esper ppo` configures it.
	mb := max(1, o.Envs*o.MaxEpochs/4)
	ppo, err := simic.NewPPO[simic.TamiyoObs](pol, vec.Spec(), simic.PPOOptions{Relevance: simic.TamiyoRelevance, Seed: o.Seed,
		TotalUpdates: o.PPORounds, MinibatchSize: mb})
	if err != nil {
		return res, err
	}
	// Episodic rollouts, as esper ppo's: every environment starts the
	// loop, and each round, at an episode's start (the resets here are
	// not measured).
	if _, err := vec.ResetUnfinished(); err != nil {
		return res, fmt.Errorf("bench: W4 ppo reset: %w", err)
	}
	tr, err := simic.NewTrainer(ppo, vec, simic.TrainerOptions[simic.TamiyoObs]{Steps: o.MaxEpochs, NormalizeRewards: true, EpisodicRollouts: true})
	if err != nil {
		return res, err
	}
	runtime.GC()
	lat = make([]time.Duration, o.PPORounds)
	var upd, updWait time.Duration
	var rollout, updates uint64
	var ops int64
	counter, counted := kernels.For(dev).(interface{ Calls() int64 })
	rig.takeSyncs()
	reads0 := vec.ReadSyncs()
	runtime.ReadMemStats(&ms0)
	allocs = driverAllocsSince(dev)
	for i := range lat {
		t0 := time.Now()
		s0 := tensor.HostSyncs(dev)
		if _, err := tr.Collect(); err != nil {
			return res, fmt.Errorf("bench: W4 ppo rollout: %w", err)
		}
		t1 := time.Now()
		s1, w1 := tensor.HostSyncs(dev), tensor.HostSyncTime(dev)
		var c1 int64
		if counted {
			c1 = counter.Calls()
		}
		if _, err := ppo.Update(tr.Buffer()); err != nil {
			return res, fmt.Errorf("bench: W4 ppo update: %w", err)
		}
		if counted {
			ops += counter.Calls() - c1
		}
		upd += time.Since(t1)
		updWait += tensor.HostSyncTime(dev) - w1
		rollout += s1 - s0
		updates += tensor.HostSyncs(dev) - s1
		lat[i] = time.Since(t0)
		if o.Progress != nil {
			o.Progress("ppo loop", i+1, o.PPORounds)
		}
	}
	runtime.ReadMemStats(&ms1)
	p := w4Loop("ppo", lat, o.PPORounds*o.MaxEpochs*o.Envs, o.Envs, ms1.Mallocs-ms0.Mallocs)
	allocs(&p)
	p.UpdateSeconds, p.UpdateSyncSeconds = upd.Seconds(), updWait.Seconds()
	if counted {
		p.OpsPerUpdate = float64(ops) / float64(max(o.PPORounds, 1))
	}
	envSyncs = rig.takeSyncs() + vec.ReadSyncs() - reads0
	p.Syncs = w4Syncs(rollout+updates, envSyncs, rollout-envSyncs, o.PPORounds*o.MaxEpochs, o.Envs)
	p.Syncs.Updates = updates
	p.Syncs.PerUpdate = float64(updates) / float64(max(o.PPORounds, 1))
	p.Syncs.MinibatchesPerUpdate = (o.Envs*o.MaxEpochs + mb - 1) / mb
	res.PPO = &p
	return res, nil
}

// w4Census records the work of the epoch env has just run to its
// decision point: the fused validation's configurations, tolaria's
// ablation passes and the seeds. The seeds are as the epoch ran them:
// nothing changes a stage or an alpha between the epoch's training and
// its decision point.
func w4Census(e *simic.EsperEnv, w *W4Work) {
	pw := e.PendingWork()
	live, params := 0, 0
	var seeds []W4Seed
	if m := e.Model(); m != nil {
		ids := m.SlotIDs()
		leyline.SortSlotIDs(ids)
		for i, id := range ids {
			s, err := m.Slot(id)
			if err != nil || s.State() == nil || leyline.IsFailureStage(s.Stage()) {
				continue
			}
			n, trainable := 0, false
			for _, p := range s.Parameters() {
				n += p.Value.Numel()
				trainable = trainable || p.RequiresGrad()
			}
			live++
			params += n
			if !s.IsActive() {
				continue
			}
			st := s.State()
			seeds = append(seeds, W4Seed{
				ID: st.SeedID, Slot: i, Blueprint: st.BlueprintID, Channels: s.Channels(),
				Training: st.Stage == leyline.StageTraining, Alpha: s.Alpha(),
				Blend: strings.ToLower(st.AlphaAlgorithm.String()), Isolate: s.IsolateGradients(),
				Trainable: trainable, Params: n,
			})
		}
	}
	w.Configs = append(w.Configs, pw.FusedConfigs)
	w.Ablations = append(w.Ablations, pw.AblationPasses)
	w.Seeds = append(w.Seeds, seeds)
	w.LiveSeeds += float64(live)
	w.SeedParams += float64(params)
}

// w4Syncs splits a loop's total host syncs over steps lock-step steps of
// envs environments.
func w4Syncs(total, envs, policy uint64, steps, n int) W4Syncs {
	s := W4Syncs{Total: total, Envs: envs, Policy: policy}
	if steps > 0 {
		s.PerEnvEpoch = float64(total) / float64(steps*n)
		s.EnvPerEnvEpoch = float64(envs) / float64(steps*n)
		s.PolicyPerStep = float64(policy) / float64(steps)
	}
	return s
}

func w4Loop(mode string, lat []time.Duration, envEpochs, envs int, mallocs uint64) W4LoopResult {
	var total time.Duration
	for _, d := range lat {
		total += d
	}
	r := W4LoopResult{Mode: mode, EnvEpochs: envEpochs, Seconds: total.Seconds(), Latency: Summarise(lat)}
	if total > 0 {
		r.EnvEpochsPerSec = float64(envEpochs) / total.Seconds()
		r.PerEnv = r.EnvEpochsPerSec / float64(envs)
	}
	if envEpochs > 0 {
		r.AllocsPerEnvEpoch = float64(mallocs) / float64(envEpochs)
	}
	return r
}

// W4PeerGraphs writes what the PyTorch peer needs to build the policy
// network and its input: r's policy options and the batched observation
// graph of r.Envs environments (the format of W2PeerGraphs).
func W4PeerGraphs(path string, r W4Result) error {
	if r.Graph == nil {
		return errors.New("bench: W4PeerGraphs: the result has no observation graph")
	}
	return W2PeerGraphs(path, r.Policy, map[int]*tamiyo.Graph{r.Envs: r.Graph})
}

// W4PeerSeeds writes r's per-env-epoch seed trace (W4Work.Seeds) as the
// peer's --seeds-file: {"seeds": [[seed, ...], ...]}.
func W4PeerSeeds(path string, r W4Result) error {
	seeds := r.Work.Seeds
	if seeds == nil {
		seeds = [][]W4Seed{}
	}
	for i, s := range seeds {
		if s == nil {
			seeds[i] = []W4Seed{}
		}
	}
	b, err := json.Marshal(map[string]any{"seeds": seeds})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// W4PeerArgs are the peer script's arguments that make it run r's loop:
// the sizes, the steps and the per-env-epoch work trace (the seeds in
// seedsFile, written by W4PeerSeeds).
func W4PeerArgs(r W4Result, graphsFile, seedsFile string) []string {
	return []string{
		"--envs", fmt.Sprint(r.Envs), "--blocks", fmt.Sprint(r.Blocks), "--base-channels", fmt.Sprint(r.BaseChannels),
		"--train", fmt.Sprint(r.Train), "--val", fmt.Sprint(r.Val), "--batch", fmt.Sprint(r.Batch),
		"--max-epochs", fmt.Sprint(r.MaxEpochs), "--steps", fmt.Sprint(r.Steps), "--warmup", fmt.Sprint(r.Warmup),
		"--graphs-file", graphsFile, "--seeds-file", seedsFile,
		"--configs", intList(r.Work.Configs), "--ablations", intList(r.Work.Ablations),
	}
}

func intList(v []int) string {
	if len(v) == 0 {
		return "0"
	}
	b := make([]byte, 0, 3*len(v))
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Append(b, x)
	}
	return string(b)
}
