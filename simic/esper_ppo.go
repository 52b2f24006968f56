package simic

import (
	"errors"
	"fmt"
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
	// Blocks and BaseChannels shape the CNN hosts (EsperEnvOptions).
	Blocks, BaseChannels int
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
	// Reward is the reward function (zero: RewardShaped).
	Reward RewardMode
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
	o     EsperPPOOptions
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
	rewarder, err := NewRewarder(RewardOptions{Mode: o.Reward})
	if err != nil {
		return nil, err
	}
	if r.Data, err = NewSyntheticData(SyntheticDataOptions{Train: o.Train, Val: o.Val, Batch: o.Batch, Seed: o.Seed}); err != nil {
		return nil, err
	}
	r.Envs = make([]*EsperEnv, o.Envs)
	r.Vec, err = NewVecEnv(o.Envs, func(i int) (Env[TamiyoObs], error) {
		eo := EsperEnvOptions{Data: r.Data, Index: i, Seed: o.Seed, MaxEpochs: o.MaxEpochs,
			Blocks: o.Blocks, BaseChannels: o.BaseChannels, Rewarder: rewarder, Capture: o.Capture, Device: o.Devices[i%len(o.Devices)]}
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
		r.Net, err = tamiyo.NewPolicy(po)
	}
	if err != nil {
		return nil, err
	}
	pol, err := NewTamiyoPolicy(r.Net, TamiyoPolicyOptions{})
	if err != nil {
		return nil, err
	}
	mb := o.MinibatchSize
	if mb == 0 {
		mb = max(1, o.Envs*o.MaxEpochs/4)
	}
	ppo, err := NewPPO[TamiyoObs](pol, r.Vec.Spec(), PPOOptions{LR: o.LR, Relevance: TamiyoRelevance, Seed: o.Seed, TotalUpdates: o.Rounds, MinibatchSize: mb})
	if err != nil {
		return nil, err
	}
	// Episodic rollouts: every round starts each environment at an
	// episode's start, which is what the checkpoint can rebuild.
	if r.Trainer, err = NewTrainer(ppo, r.Vec, TrainerOptions[TamiyoObs]{Steps: o.MaxEpochs, NormalizeRewards: true, EpisodicRollouts: true}); err != nil {
		return nil, err
	}
	if o.Resume != "" {
		if err := RestorePPOCheckpoint(o.Resume, r.State, r.Trainer); err != nil {
			return nil, err
		}
	}
	return r, nil
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
	start := time.Now()
	it, err := r.Trainer.Iterate()
	round := r.State.Round + 1
	if err != nil {
		return PPORound{}, fmt.Errorf("round %d: %w", round, err)
	}
	rr := NewPPORound(round, it, r.o.Envs*r.o.MaxEpochs, time.Since(start), r.Trainer.Buffer().RollbackCount())
	r.State.History = append(r.State.History, rr)
	r.State.Round = round
	return rr, nil
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
