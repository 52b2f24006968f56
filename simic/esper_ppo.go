package simic

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/tensor"

	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/tamiyo"
)

// EsperPPOOptions configure NewEsperPPO. Rounds is required; every other
// zero value is the documented default.
type EsperPPOOptions struct {
	// Rounds is the number of rounds the run plans (> 0): the entropy
	// floor schedule runs over them (PPOOptions.TotalUpdates).
	Rounds int
	// Envs is the number of lock-step environments (default 4).
	Envs int
	// MaxEpochs is the episode length in host epochs, which is also the
	// rollout length: every round runs one whole episode per environment
	// (default DefaultEsperMaxEpochs).
	MaxEpochs int
	// Blocks, BaseChannels and Kernel shape the CNN hosts
	// (EsperEnvOptions' Blocks, BaseChannels and KernelSize).
	Blocks, BaseChannels, Kernel int
	// HostLR and Cosine are the hosts' learning rate and its schedule
	// (EsperEnvOptions).
	HostLR float64
	Cosine bool
	// TaskPerEpisode gives every episode of every environment its own
	// instance of the synthetic task (its seed a function of Seed, the
	// environment and the episode: see TaskSeed), in place of one
	// instance, Seed's, shared by all: a policy then learns what growth
	// does to the task, not to one instance of it.
	TaskPerEpisode bool
	// Train, Val and Batch size the shared synthetic data
	// (SyntheticDataOptions).
	Train, Val, Batch int
	// Policy are the policy's widths and dtype (zero values:
	// tamiyo.NewPolicy's defaults); NewEsperPPO turns dropout off and sets
	// its Seed.
	Policy tamiyo.PolicyOptions
	// MinibatchSize is the PPO minibatch; 0 means a quarter of a round's
	// transitions (at least 1), so the update takes several steps and its
	// KL is measured after the first.
	MinibatchSize int
	// LR is the policy's Adam rate (0: DefaultLR).
	LR float64
	// Epochs is the number of passes over a round's transitions in its
	// update (PPOOptions.Epochs; 0: 1).
	Epochs int
	// EntropyCoef, EntropyCoefEnd and EntropyAnnealRounds are the entropy
	// bonus's weight, annealed linearly to EntropyCoefEnd over that many
	// rounds when EntropyAnnealRounds > 0 (PPOOptions' EntropyCoef,
	// EntropyCoefEnd and EntropyAnnealUpdates; zero values: the
	// defaults, no annealing).
	EntropyCoef, EntropyCoefEnd float64
	EntropyAnnealRounds         int
	// Priors, per head, are added to a new policy's output biases of
	// that head (its logits, about 0 at initialisation): exploration
	// priors that forbid nothing (PPO moves them like any weight). A nil
	// row leaves the head alone; a row must have the head's size, and the
	// slot head (a pointer, one score per slot node) takes none. A
	// resumed policy keeps its trained biases. See esper ppo
	// --prune-prior and --germinate-prior for why they help.
	Priors [leyline.NumActionHeads][]float64
	// Floors are the per-head probability floors the policy samples and
	// is evaluated with (TamiyoPolicyOptions.Floors; nil: G2's,
	// tamiyo.ProbabilityFloorPerHead).
	Floors *[leyline.NumActionHeads]float32
	// Reward is the reward function (zero: RewardShaped), RewardOptions
	// its other options (their Mode is Reward's).
	Reward        RewardMode
	RewardOptions RewardOptions
	// Seed seeds the policy, its sampling, the hosts and the data.
	Seed uint64
	// Capture captures the hosts' train steps (EsperEnvOptions.Capture).
	Capture bool
	// Devices are where the run computes (nil: the CPU alone): the
	// environments' hosts are spread over them round-robin (environment i
	// on Devices[i mod len]), the policy and its update run on the first.
	// They must be distinct, and their kernels registered
	// (kernels/device.OpenDevice). The environments' observations are
	// graphs built on the host from each environment's own per-epoch
	// reads, so the policy's batch gathers them on the host and copies it
	// to its device once per decision; a run is bitwise the same on any
	// devices whose kernels are the CPU's (sim).
	Devices []tensor.Device
	// Resume, when set, is a checkpoint directory (SavePPOCheckpoint) the
	// run continues from, bit for bit: its environments, policy widths and
	// slots must be this run's.
	Resume string
}

// EsperPPO is a PPO run of Tamiyo's graph policy over vectorised Esper
// environments sharing one synthetic data stream, as `esper ppo` trains
// it: episodic rollouts of one episode per environment and round, reward
// normalisation, Tamiyo's causal head relevance. Build it with
// NewEsperPPO, run it a Round at a time, checkpoint it with
// SaveCheckpoint, and Close it.
type EsperPPO struct {
	// Data is the shared data stream, Envs the environments (in Vec).
	Data *EsperData
	Envs []*EsperEnv
	Vec  *VecEnv[TamiyoObs]
	// Net is the policy being trained, Slots the hosts' slots it acts on.
	Net   *tamiyo.Policy
	Slots leyline.SlotConfig
	// Trainer runs the rounds.
	Trainer *Trainer[TamiyoObs]
	// State is the run's checkpoint state: the rounds completed and their
	// history (restored by a resume; Round appends to it).
	State PPOCheckpoint
	// LastStats are the last round's episode means and per-op figures,
	// LastUpdate its PPO update's full statistics (nil before a round).
	LastStats  EsperRoundStats
	LastUpdate *UpdateStats
	o          EsperPPOOptions
}

// NewEsperPPO builds the data, the environments (each reset to its first
// decision point), the policy and the trainer of o; with o.Resume it
// restores them from that checkpoint.
func NewEsperPPO(o EsperPPOOptions) (_ *EsperPPO, err error) {
	switch {
	case o.Rounds <= 0:
		return nil, fmt.Errorf("simic: NewEsperPPO: Rounds %d must be > 0", o.Rounds)
	case o.Envs < 0 || o.MaxEpochs < 0 || o.MinibatchSize < 0:
		return nil, fmt.Errorf("simic: NewEsperPPO: negative Envs %d, MaxEpochs %d or MinibatchSize %d", o.Envs, o.MaxEpochs, o.MinibatchSize)
	}
	if o.Envs == 0 {
		o.Envs = 4
	}
	if len(o.Devices) == 0 {
		o.Devices = []tensor.Device{tensor.CPU}
	}
	for i, d := range o.Devices {
		if slices.Contains(o.Devices[:i], d) {
			return nil, fmt.Errorf("simic: NewEsperPPO: device %v is given twice in %v", d, o.Devices)
		}
		if _, err := kernels.Lookup(d); err != nil {
			return nil, fmt.Errorf("simic: NewEsperPPO: device %v: %w", d, err)
		}
	}
	if o.MaxEpochs == 0 {
		o.MaxEpochs = DefaultEsperMaxEpochs
	}
	r := &EsperPPO{o: o}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if o.Resume != "" {
		if r.State, err = LoadPPOCheckpoint(o.Resume); err != nil {
			return nil, err
		}
		if len(r.State.Episodes) != o.Envs {
			return nil, fmt.Errorf("simic: checkpoint %s: %w: it has %d environments, the run %d", o.Resume, ErrPPOCheckpoint, len(r.State.Episodes), o.Envs)
		}
	}
	ro := o.RewardOptions
	ro.Mode = o.Reward
	rewarder, err := NewRewarder(ro)
	if err != nil {
		return nil, err
	}
	// One device: the data lives there (resident); environments spread
	// over several devices share a host stream.
	var dataDev tensor.Device
	if len(o.Devices) == 1 {
		dataDev = o.Devices[0]
	}
	if !o.TaskPerEpisode {
		if r.Data, err = NewSyntheticData(SyntheticDataOptions{Train: o.Train, Val: o.Val, Batch: o.Batch, Seed: o.Seed, Device: dataDev}); err != nil {
			return nil, err
		}
	}
	r.Envs = make([]*EsperEnv, o.Envs)
	r.Vec, err = NewVecEnv(o.Envs, func(i int) (Env[TamiyoObs], error) {
		eo := EsperEnvOptions{Data: r.Data, Index: i, Seed: o.Seed, MaxEpochs: o.MaxEpochs, Terminal: true,
			Blocks: o.Blocks, BaseChannels: o.BaseChannels, KernelSize: o.Kernel, HostLR: o.HostLR, Cosine: o.Cosine,
			Rewarder: rewarder, Capture: o.Capture, Device: o.Devices[i%len(o.Devices)]}
		if o.TaskPerEpisode {
			eo.NewData = func(episode int) (*EsperData, error) {
				return NewSyntheticData(SyntheticDataOptions{Train: o.Train, Val: o.Val, Batch: o.Batch, Seed: TaskSeed(o.Seed, i, episode), Device: eo.Device})
			}
		}
		if o.Resume != "" {
			eo.FirstEpisode = r.State.Episodes[i]
		}
		e, err := NewEsperEnv(eo)
		r.Envs[i] = e
		return e, err
	})
	if err != nil {
		return nil, err
	}
	ids := r.Envs[0].Model().SlotIDs()
	leyline.SortSlotIDs(ids)
	if r.Slots, err = leyline.NewSlotConfig(ids...); err != nil {
		return nil, err
	}
	po := o.Policy
	po.NoDropout, po.Seed, po.Device = true, o.Seed, o.Devices[0]
	if o.Resume != "" {
		r.Net, err = LoadPPOCheckpointPolicy(o.Resume, po, r.Slots)
	} else {
		r.Net, err = newPolicyWithPriors(po, o.Priors)
	}
	if err != nil {
		return nil, err
	}
	pol, err := NewTamiyoPolicy(r.Net, TamiyoPolicyOptions{Floors: o.Floors, Capture: true})
	if err != nil {
		return nil, err
	}
	mb := o.MinibatchSize
	if mb == 0 {
		mb = max(1, o.Envs*o.MaxEpochs/4)
	}
	ppo, err := NewPPO[TamiyoObs](pol, r.Vec.Spec(), PPOOptions{LR: o.LR, Relevance: TamiyoRelevance, Seed: o.Seed, TotalUpdates: o.Rounds, MinibatchSize: mb,
		Epochs: o.Epochs, EntropyCoef: o.EntropyCoef, EntropyCoefEnd: o.EntropyCoefEnd, EntropyAnnealUpdates: o.EntropyAnnealRounds})
	if err != nil {
		return nil, err
	}
	// Episodic rollouts: every round starts each environment at an
	// episode's start, which is what the checkpoint can rebuild.
	// ACCURACY's rewards have a fixed scale (0.1 per point) and are zero
	// for most steps: a running reward normaliser would rescale the few
	// that are not round after round as its statistics drift, and the
	// critic would chase moving targets. The value normaliser scales the
	// returns.
	norm := o.Reward != RewardAccuracy
	if r.Trainer, err = NewTrainer(ppo, r.Vec, TrainerOptions[TamiyoObs]{Steps: o.MaxEpochs, NormalizeRewards: norm, EpisodicRollouts: true}); err != nil {
		return nil, err
	}
	if o.Resume != "" {
		if err := RestorePPOCheckpoint(o.Resume, r.State, r.Trainer); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// TaskSeed is the synthetic task instance of episode number episode of
// environment env in a TaskPerEpisode run of seed seed: distinct for
// distinct (env < 2^12, episode < 2^20) and at least 2^32 (for seeds
// below 2^32 − 1), so never one of the small seeds an evaluation holds
// out (esper eval --seeds 101-120).
func TaskSeed(seed uint64, env, episode int) uint64 {
	return (seed+1)<<32 + uint64(env)<<20 + uint64(episode)
}

// Options returns the options in effect (defaults filled in).
func (r *EsperPPO) Options() EsperPPOOptions { return r.o }

// EnvsPerDevice returns how many environments each of Options().Devices
// holds, in that order.
func (r *EsperPPO) EnvsPerDevice() []int {
	n := make([]int, len(r.o.Devices))
	for i := range r.o.Envs {
		n[i%len(n)]++
	}
	return n
}

// Round runs the next round (a rollout of one episode per environment,
// then the PPO update) and records its figures in State.
func (r *EsperPPO) Round() (PPORound, error) {
	if r.Trainer == nil {
		return PPORound{}, errors.New("simic: EsperPPO.Round: the run is closed")
	}
	start, syncs := time.Now(), r.hostSyncs()
	it, err := r.Trainer.Iterate()
	round := r.State.Round + 1
	if err != nil {
		return PPORound{}, fmt.Errorf("round %d: %w", round, err)
	}
	steps := r.o.Envs * r.o.MaxEpochs
	rr := NewPPORound(round, it, steps, time.Since(start), r.Trainer.Buffer().RollbackCount())
	rr.HostSyncsPerEnvEpoch = float64(r.hostSyncs()-syncs) / float64(steps)
	var eps []EsperEpisode
	for _, e := range r.Envs {
		eps = append(eps, e.TakeEpisodes()...)
	}
	r.LastStats = NewEsperRoundStats(eps)
	r.LastStats.OpAdvantage, r.LastStats.OpReturn = opFigures(r.Trainer.Buffer())
	r.LastUpdate = it.Update
	r.State.History = append(r.State.History, rr)
	r.State.Round = round
	return rr, nil
}

// hostSyncs is the host syncs of the run's devices so far.
func (r *EsperPPO) hostSyncs() uint64 {
	var n uint64
	for _, d := range r.o.Devices {
		n += tensor.HostSyncs(d)
	}
	return n
}

// SaveCheckpoint writes the run's checkpoint into dir
// (SavePPOCheckpoint with State).
func (r *EsperPPO) SaveCheckpoint(dir string) error {
	return SavePPOCheckpoint(dir, r.Net, r.Slots, &r.State, r.Trainer, r.Envs)
}

// SavePolicy writes the policy alone (tamiyo.SavePolicy), for esper
// train --controller gnn --policy.
func (r *EsperPPO) SavePolicy(path string) error { return tamiyo.SavePolicy(path, r.Net, r.Slots) }

// Close stops the environments' epoch goroutines and the data's loaders.
func (r *EsperPPO) Close() {
	for _, e := range r.Envs {
		if e != nil {
			e.Close()
		}
	}
	r.Data.Close()
	r.Trainer = nil
}

// opFigures returns the mean advantage and return of the buffer's steps
// by the op they took (NaN for an op never taken).
func opFigures[O any](buf *Buffer[O]) (adv, ret [leyline.NumOps]float64) {
	var n [leyline.NumOps]int
	for env := 0; env < buf.NumEnvs(); env++ {
		for t := 0; t < buf.Len(env); t++ {
			a := buf.At(env, t).Actions
			if len(a) <= leyline.HeadOp || a[leyline.HeadOp] < 0 || a[leyline.HeadOp] >= leyline.NumOps {
				continue
			}
			op := a[leyline.HeadOp]
			n[op]++
			adv[op] += buf.Advantage(env, t)
			ret[op] += buf.Return(env, t)
		}
	}
	for op := range n {
		if n[op] == 0 {
			adv[op], ret[op] = math.NaN(), math.NaN()
			continue
		}
		adv[op] /= float64(n[op])
		ret[op] /= float64(n[op])
	}
	return adv, ret
}

// HeadBias returns the name of head h's output bias among a
// tamiyo.Policy's named parameters: that head's logit offsets.
func HeadBias(h int) string { return "head_" + leyline.HeadNames[h] + ".fc2.bias" }

// newPolicyWithPriors builds the policy of po and adds each head's prior
// (if any) to its output biases: built on the CPU, set there, then moved
// to po.Device, so a run is the same on any device.
func newPolicyWithPriors(po tamiyo.PolicyOptions, priors [leyline.NumActionHeads][]float64) (*tamiyo.Policy, error) {
	any := false
	for h, row := range priors {
		if row == nil {
			continue
		}
		any = true
		if h == leyline.HeadSlot {
			return nil, errors.New("simic: the slot head (a pointer over slot nodes) takes no prior")
		}
		for i, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("simic: prior of %s option %d = %v must be finite", leyline.HeadNames[h], i, v)
			}
		}
	}
	if !any {
		return tamiyo.NewPolicy(po)
	}
	dev := po.Device
	po.Device = tensor.CPU
	p, err := tamiyo.NewPolicy(po)
	if err != nil {
		return nil, err
	}
	params := map[string]*tensor.Tensor{}
	for _, n := range p.NamedParameters() {
		params[n.Name] = n.Var.Value
	}
	for h, row := range priors {
		if row == nil {
			continue
		}
		bias := params[HeadBias(h)]
		if bias == nil || bias.Numel() != len(row) {
			return nil, fmt.Errorf("simic: a prior of %d options for head %s, whose output bias %s has %v", len(row), leyline.HeadNames[h], HeadBias(h), bias)
		}
		for i, v := range row {
			bias.Set(bias.At(i)+v, i)
		}
	}
	if !dev.IsCPU() {
		if err := p.To(dev); err != nil {
			return nil, err
		}
	}
	return p, nil
}
