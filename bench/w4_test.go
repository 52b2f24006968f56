package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	_ "github.com/esper-go/esper/internal/testdevice" // registers the sim backend
	"github.com/esper-go/esper/kasmina"
	"github.com/esper-go/esper/kasmina/blueprint"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/simic"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tolaria"
)

// w4Tiny is a W4 that runs in a few seconds: 2 environments, a narrow
// host and policy, a small data stream, short episodes.
var w4Tiny = W4Options{
	Envs: 2, BaseChannels: 2, Train: 64, Val: 32, Batch: 32, MaxEpochs: 3, Steps: 4, Warmup: 1, PPORounds: 1,
	Policy: tamiyo.PolicyOptions{Hidden: 16, GATHidden: 8, GATHeads: 2, HeadHidden: 16}, Seed: 7,
}

// TestW4SmallRun: a tiny W4 measures both loops, counts its env-epochs
// as lock-step steps × environments, and records one work entry per
// measured env-epoch.
func TestW4SmallRun(t *testing.T) {
	o := w4Tiny
	done := map[string]int{}
	o.Progress = func(phase string, d, total int) {
		require.Equal(t, done[phase]+1, d, phase)
		done[phase] = d
	}
	r, err := RunW4(o)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"bare loop": 4, "ppo loop": 1}, done)
	require.Equal(t, 3, r.Slots, "3 blocks, one pre-pool slot each")
	// Conv 9·(1·2 + 2·4 + 4·8), BatchNorm 2·(2+4+8), Linear 8·10+10.
	require.Equal(t, 9*(2+2*4+4*8)+2*(2+4+8)+8*10+10, r.HostParams)
	require.Greater(t, r.PolicyParams, 0)

	require.Equal(t, "bare", r.Bare.Mode)
	require.Equal(t, 8, r.Bare.EnvEpochs)
	require.Equal(t, 4, r.Bare.Latency.N)
	require.Greater(t, r.Bare.EnvEpochsPerSec, 0.0)
	require.InDelta(t, 8/r.Bare.Seconds, r.Bare.EnvEpochsPerSec, 1e-9*r.Bare.EnvEpochsPerSec)
	require.InDelta(t, r.Bare.EnvEpochsPerSec/2, r.Bare.PerEnv, 1e-12)
	// The loop's time splits into the policy's Act, the environments' own
	// calls and the batched reads, within the measured steps' wall time.
	require.Positive(t, r.Bare.EnvSeconds, "the environments' calls")
	require.GreaterOrEqual(t, r.Bare.ReadSeconds, 0.0)
	require.LessOrEqual(t, r.Bare.PolicySeconds+r.Bare.EnvSeconds+r.Bare.ReadSeconds, r.Bare.Seconds)

	require.NotNil(t, r.PPO)
	require.Equal(t, "ppo", r.PPO.Mode)
	require.Equal(t, 1*3*2, r.PPO.EnvEpochs, "one round of MaxEpochs steps per env")
	require.Greater(t, r.PPO.UpdateSeconds, 0.0)
	require.Less(t, r.PPO.UpdateSeconds, r.PPO.Seconds)

	require.Len(t, r.Work.Configs, 8)
	require.Len(t, r.Work.Ablations, 8)
	// 4 steps of 2 envs with 3-epoch episodes: every env finished an
	// episode (steps 3 of warm-up + measured).
	require.GreaterOrEqual(t, r.Work.Episodes, 2)
	for i, k := range r.Work.Configs {
		// Full factorial over at most 3 seeds: 0 or 2^n configurations,
		// less the all-on one (the validation pass).
		require.Contains(t, []int{0, 1, 3, 7}, k, "env-epoch %d", i)
	}
	require.NotNil(t, r.Graph)
	require.Equal(t, 2, r.Graph.NumGraphs)

	require.Len(t, r.Work.Seeds, 8)
	args := W4PeerArgs(r, "g.json", "s.json")
	require.Contains(t, args, "--configs")
	require.Equal(t, len(args)%2, 0)
}

// TestW4HostSyncsOnSim: W4 on the strict simulated device counts its
// host syncs, and none of them is per environment where it should be
// batched: with 1 and with 3 environments, the batched Act reads once per
// lock-step step for all of them, the PPO rollout adds one read per round
// (the bootstrap values) and an update reads the same, however many
// environments — PPO.Update's one read plus the policy's Evaluate's per
// minibatch (Tamiyo's probability floors, the reference pass included).
// The environments' epochs read their training and validation sums
// together too: VecEnv reads every environment's in one host sync per
// lock-step step (ReadSyncs), a step where the episodes ended included:
// then it reads the next episodes' first epochs together. What an
// env-epoch still reads on its own is what the fused counterfactual
// validation justifies (one read for the fused configurations when there
// are seeds to attribute, one per ablation pass; no gradient telemetry
// at these sizes: an episode has fewer steps than its stride).
func TestW4HostSyncsOnSim(t *testing.T) {
	var updates []uint64
	var reads []int
	for _, envs := range []int{1, 3} {
		o := w4Tiny
		o.Envs, o.Train, o.Steps, o.Warmup, o.MaxEpochs, o.PPORounds = envs, 32, 12, 2, 4, 2
		o.Device = tensor.Sim(0)
		r, err := RunW4(o)
		require.NoError(t, err)
		require.Equal(t, "sim:0", r.Device)
		b, p := r.Bare.Syncs, r.PPO.Syncs
		require.Equal(t, uint64(o.Steps), b.Policy, "%d envs: one policy read per lock-step step", envs)
		require.Equal(t, 1.0, b.PolicyPerStep)
		require.Equal(t, b.Total, b.Envs+b.Policy, "every bare-loop read is an environment's or the policy's")
		require.Len(t, r.Work.Syncs, o.Steps*envs)
		for i, n := range r.Work.Syncs {
			own := r.Work.Ablations[i]
			if r.Work.Configs[i] > 0 {
				own++
			}
			require.Equal(t, own, n, "%d envs: env-epoch %d reads on its own only for its counterfactuals (configs %d, ablations %d)", envs, i, r.Work.Configs[i], r.Work.Ablations[i])
		}
		require.NotZero(t, r.Work.Episodes, "%d envs: episodes ended and reset", envs)
		require.Zero(t, r.Work.Episodes%envs, "lock-step episodes end together")
		require.Equal(t, o.Steps, r.Work.ReadSyncs, "%d envs: one batched read per lock-step step, resets included", envs)
		reads = append(reads, r.Work.ReadSyncs)
		require.Equal(t, uint64(o.PPORounds*(o.MaxEpochs+1)), p.Policy, "%d envs: per round one Act read per step and one bootstrap read", envs)
		if envs == 1 {
			require.Equal(t, 1.0, p.EnvPerEnvEpoch, "1 env: seedless episodic rollouts read the host once per epoch")
		} else {
			require.Less(t, p.EnvPerEnvEpoch, 1.0, "%d envs: the epochs' reads are shared", envs)
			require.Less(t, b.EnvPerEnvEpoch, 1.0, "%d envs: the epochs' reads are shared", envs)
		}
		require.Equal(t, 4, p.MinibatchesPerUpdate)
		require.LessOrEqual(t, p.PerUpdate, float64(1+2*p.MinibatchesPerUpdate))
		require.Equal(t, p.Total, p.Envs+p.Policy+p.Updates)
		updates = append(updates, p.Updates)
	}
	require.Equal(t, updates[0], updates[1], "an update's reads do not depend on the number of environments")
	require.Equal(t, reads[0], reads[1], "the epochs' batched reads do not depend on the number of environments")
}

// TestBenchW4OnSim: esper bench's W4 on sim prints its host syncs per
// env-epoch and per PPO update, and its report names the device and
// carries the counts.
func TestBenchW4OnSim(t *testing.T) {
	c := DefaultConfig()
	c.Envs, c.BaseChannels, c.TrainSize, c.ValSize = 2, 2, 32, 16
	c.Batch, c.MaxEpochs, c.Steps, c.Warmup, c.PPORounds = 16, 2, 2, 1, 1
	c.JSONDir = t.TempDir()
	var out, errb bytes.Buffer
	require.NoError(t, BenchW4(&out, &errb, c, tensor.Sim(0)), errb.String())
	require.Contains(t, out.String(), "W4 simic-ppo (vectorised Esper environments, sim:0)")
	require.Contains(t, out.String(), "host syncs, bare loop: ")
	require.Contains(t, out.String(), "per PPO update of 4 minibatches")
	rep := readReport(t, c.JSONDir, "W4")
	require.Equal(t, "sim:0", rep["device"])
	syncs := rep["results"].(map[string]any)["ppo"].(map[string]any)["host_syncs"].(map[string]any)
	require.Greater(t, syncs["per_update"], 0.0)
	// Two environments share each epoch's read, their resets' too.
	require.Greater(t, syncs["env_per_env_epoch"], 0.0)
	require.Less(t, syncs["env_per_env_epoch"], 1.0)
}

func TestW4RejectsBadOptions(t *testing.T) {
	_, err := RunW4(W4Options{Envs: -1})
	require.Error(t, err)
	_, err = RunW4(W4Options{Train: 64, Batch: 128})
	require.ErrorContains(t, err, "smaller than a batch")
	if _, err := kernels.Lookup(tensor.CUDA(0)); err != nil {
		_, err = RunW4(W4Options{Device: tensor.CUDA(0)})
		require.ErrorContains(t, err, "W4 on cuda:0")
	}
	require.Error(t, W4PeerGraphs(filepath.Join(t.TempDir(), "g.json"), W4Result{}))
}

// TestW4PeerSameModels runs the PyTorch peer on the tiny W4 (when
// PyTorch is installed) and checks that it built a host and a policy
// with our parameter counts and replayed our work trace.
func TestW4PeerSameModels(t *testing.T) {
	if err := PeerAvailable(); errors.Is(err, ErrNoPeer) {
		t.Skip(err)
	}
	o := w4Tiny
	o.PPORounds = -1
	r, err := RunW4(o)
	require.NoError(t, err)
	require.Nil(t, r.PPO)
	// A trace with counterfactual work and every cnn seed in every blend,
	// whatever the tiny run's seeds did: the peer must replay it, with
	// our parameter counts.
	r.Work.Configs = []int{3, 0, 1, 0, 0, 7, 0, 0}
	r.Work.Ablations = []int{1, 0, 0, 0, 2, 0, 0, 0}
	r.Work.Seeds = w4EverySeed(t, len(r.Work.Configs))
	dir := t.TempDir()
	gf, sf := filepath.Join(dir, "graphs.json"), filepath.Join(dir, "seeds.json")
	require.NoError(t, W4PeerGraphs(gf, r))
	require.NoError(t, W4PeerSeeds(sf, r))
	peer, err := RunPeer("pytorch", "w4_env_loop.py", 1, W4PeerArgs(r, gf, sf)...)
	require.NoError(t, err)
	require.Equal(t, float64(r.HostParams), peer["host_params"])
	require.Equal(t, float64(r.PolicyParams), peer["policy_params"])
	require.Equal(t, float64(r.Bare.EnvEpochs), peer["env_epochs"])
	require.Equal(t, 11.0, peer["configs_total"], "the peer replays the fused configurations of our measured env-epochs")
	require.Equal(t, 3.0, peer["ablations_total"])
	seeds, params := r.Work.SeedTotals()
	require.Equal(t, float64(seeds), peer["seeds_total"])
	require.Equal(t, float64(params), peer["seed_params_total"])
	require.Greater(t, peer["env_epochs_per_second"], 0.0)
}

// w4EverySeed is a seed trace of n env-epochs that runs every cnn
// blueprint with every blend (for n ≥ 8), in the three pre-pool slots of
// a base-2 host (w4Tiny's), with kasmina's parameter counts: in TRAINING
// at alpha 0 (straight-through) with ADD, at alpha ½ with MULTIPLY, at
// alpha 1 with GATE.
func w4EverySeed(t *testing.T, n int) [][]W4Seed {
	t.Helper()
	specs, err := blueprint.List(kasmina.TopologyCNN)
	require.NoError(t, err)
	blends := []leyline.AlphaAlgorithm{leyline.BlendAdd, leyline.BlendMultiply, leyline.BlendGate}
	var all []W4Seed
	for i, sp := range specs {
		for j, alg := range blends {
			host, err := kasmina.NewCNNHost(kasmina.CNNHostOptions{InChannels: 1, Classes: 10, Blocks: 3, BaseChannels: w4Tiny.BaseChannels, RNG: tensor.NewRNG(1)})
			require.NoError(t, err)
			m, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: []string{"r0c0", "r0c1", "r0c2"}})
			require.NoError(t, err)
			slot := (i + j) % 3
			id := fmt.Sprintf("r0c%d", slot)
			o := kasmina.GerminateOptions{Blueprint: sp.Name, AlphaAlgorithm: alg}
			if alg == leyline.BlendGate {
				o.BlendAlgorithmID = kasmina.BlendGated
			}
			require.NoError(t, m.GerminateSeed(id, o), "%s %v", sp.Name, alg)
			s, err := m.Slot(id)
			require.NoError(t, err)
			p := 0
			for _, v := range s.Parameters() {
				p += v.Value.Numel()
			}
			all = append(all, W4Seed{ID: fmt.Sprintf("%s-%v", sp.Name, alg), Slot: slot, Blueprint: sp.Name, Channels: s.Channels(),
				Training: j == 0, Alpha: float64(j) / 2, Blend: strings.ToLower(alg.String()), Isolate: j < 2, Trainable: true, Params: p})
		}
	}
	var bySlot [3][]W4Seed
	for _, c := range all {
		bySlot[c.Slot] = append(bySlot[c.Slot], c)
	}
	// One seed per slot in each env-epoch, every seed at least once when
	// n ≥ len(all)/3.
	trace := make([][]W4Seed, n)
	for i := range trace {
		for k := range bySlot {
			trace[i] = append(trace[i], bySlot[k][i%len(bySlot[k])])
		}
	}
	return trace
}

// BenchmarkW4Step times one lock-step step of W4's bare loop at PERF.md's
// sizes (4 environments, 3 slots, base 8, 8 training batches of 128, 512
// validation samples): one env-epoch per environment, eager and with the
// hosts' steps captured. It reports env-epochs/s; profile with
//
//	go test ./bench -run XXX -bench W4Step/eager -benchtime 6x -cpuprofile /tmp/w4.prof
func BenchmarkW4Step(b *testing.B) {
	for _, capture := range []bool{false, true} {
		name := "eager"
		if capture {
			name = "captured"
		}
		b.Run(name, func(b *testing.B) {
			o, err := W4Options{PPORounds: -1, Capture: capture}.withDefaults()
			require.NoError(b, err)
			rig, err := newW4Rig(o)
			require.NoError(b, err)
			defer rig.close()
			for range o.Warmup {
				require.NoError(b, rig.step(nil))
			}
			var w W4Work
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				require.NoError(b, rig.step(&w))
			}
			b.ReportMetric(float64(b.N*o.Envs)/b.Elapsed().Seconds(), "env-epochs/s")
		})
	}
}

// BenchmarkW4HostEpoch times what one W4 env-epoch spends on its host:
// tolaria's epoch (8 training steps of 128 samples, the validation of 512,
// the governor) of a seedless base-8 CNN host with 3 empty slots, without
// the controller, the policy or the environment. The kernels' share of
// W4 at its own shapes; profile with
//
//	go test ./bench -run XXX -bench W4HostEpoch/captured -benchtime 20x -cpuprofile /tmp/w4host.prof
func BenchmarkW4HostEpoch(b *testing.B) {
	for _, capture := range []bool{false, true} {
		name := "eager"
		if capture {
			name = "captured"
		}
		b.Run(name, func(b *testing.B) {
			d, err := simic.NewSyntheticData(simic.SyntheticDataOptions{Train: W4DefaultTrain, Val: W4DefaultVal, Batch: W4DefaultBatch})
			require.NoError(b, err)
			defer d.Close()
			host, err := kasmina.NewCNNHost(kasmina.CNNHostOptions{InChannels: d.InChannels, Classes: d.Classes,
				Blocks: W4DefaultBlocks, BaseChannels: W4DefaultBaseChannels, RNG: tensor.NewRNG(1)})
			require.NoError(b, err)
			var slots []string
			for _, s := range host.InjectionSpecs() {
				if s.Surface == leyline.SurfacePrePool {
					slots = append(slots, s.SlotID)
				}
			}
			m, err := kasmina.NewMorphogeneticModel(host, kasmina.ModelOptions{Slots: slots})
			require.NoError(b, err)
			tr, err := tolaria.NewTrainer(tolaria.TrainerOptions{Model: m, Train: d.Train, Val: d.Val, Epochs: 1 << 30,
				Capture: capture, History: 4, Governor: &tolaria.GovernorOptions{Classes: d.Classes}})
			require.NoError(b, err)
			ctx := context.Background()
			e := 0
			for ; e < 2; e++ {
				_, err := tr.RunEpoch(ctx, e)
				require.NoError(b, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_, err := tr.RunEpoch(ctx, e)
				require.NoError(b, err)
				e++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "epochs/s")
		})
	}
}

// TestW4CountsCaptures: with captured host steps the measured bare loop
// reports its trainers' replays and their graphs' launches, every
// env-epoch's calls counted (and no capture figures without them).
func TestW4CountsCaptures(t *testing.T) {
	for _, capture := range []bool{false, true} {
		o := w4Tiny
		o.Envs, o.Train, o.Steps, o.Warmup, o.MaxEpochs, o.PPORounds = 2, 32, 4, 1, 4, -1
		o.Device, o.Capture = tensor.Sim(0), capture
		r, err := RunW4(o)
		require.NoError(t, err)
		w := r.Work
		if !capture {
			require.Zero(t, w.Captures+w.Replays+w.EagerCalls, "no captured regions")
			require.Zero(t, w.StepGraphNodes+w.ValidationGraphNodes, "no graphs")
			continue
		}
		require.Positive(t, w.Replays, "captured steps replay")
		// Every env-epoch runs its training steps and one validation pass
		// as captured regions, and all are counted: the first epochs of
		// the episodes the measured steps reset too.
		require.Positive(t, w.Episodes, "the measured steps end episodes")
		require.Equal(t, r.Bare.EnvEpochs*(o.Train/o.Batch+1), w.Replays+w.EagerCalls, "calls of the captured regions")
		require.GreaterOrEqual(t, w.CaptureSeconds, 0.0)
		require.Positive(t, w.StepGraphNodes, "a training step's graph")
		require.Positive(t, w.ValidationGraphNodes, "a validation graph")
	}
}

// TestDriverAllocsSince: a loop's driver allocation figures are the
// device's counted after the mark, not before it.
func TestDriverAllocsSince(t *testing.T) {
	dev := tensor.Sim(11)
	tensor.CountDriverAlloc(dev, time.Second) // before: not the loop's
	since := driverAllocsSince(dev)
	tensor.CountDriverAlloc(dev, 20*time.Millisecond)
	tensor.CountDriverAlloc(dev, 30*time.Millisecond)
	var l W4LoopResult
	since(&l)
	require.Equal(t, uint64(2), l.DriverAllocs)
	require.InDelta(t, 0.05, l.DriverAllocSeconds, 1e-9)
}
