package bench

// W4 as esper bench runs it: the vectorised Esper environments' bare
// loop and PPO loop beside the PyTorch peer, on the CPU or (BenchW4) on
// another device with its host syncs.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/esper-go/esper/tensor"
)

// w4TargetPeerRatio is PERF.md's W4 CPU target: ≥ 2× the env-epochs per
// second of the PyTorch peer.
const w4TargetPeerRatio = 2.0

// PERF.md's W4 GPU targets: ≥ 200 env-epochs per second, and at least
// the PyTorch peer's bare loop on the same GPU.
const (
	w4GPUTargetEPS       = 200.0
	w4GPUTargetPeerRatio = 1.0
)

// benchW4 runs W4 on the CPU, prints its table and verdicts and writes
// its report.
func benchW4(stdout, stderr io.Writer, c Config) error { return BenchW4(stdout, stderr, c, tensor.CPU) }

// BenchW4 is `esper bench --workload W4` on dev (whose kernels must be
// registered: kernels/device.OpenDevice): W4 with every environment and
// the policy there, its table, verdicts and report (the report's device
// is dev), with the host syncs per env-epoch and per PPO update when dev
// is not the CPU. On a CUDA device the verdicts are PERF.md's GPU ones,
// and the PyTorch peer (bench/pytorch/w4_env_loop.py --device cuda) is
// read from c.PeerResults (DIR/pytorch_w4.json) or, with c.Compare
// alone, run on the device after our measurements with this run's work
// trace (gpu/run.sh does this); a peer that cannot be had there is no
// error (the report's peer_error says why).
func BenchW4(stdout, stderr io.Writer, c Config, dev tensor.Device) error {
	cuda := dev.Kind == tensor.KindCUDA
	if cuda && c.Compare && c.PeerResults == "" {
		// Before the measurements, which a missing script would waste.
		if err := CheckPeerScripts(c.PeerDir, "W4"); err != nil {
			return err
		}
	}
	m := ThisMachine()
	header(stdout, fmt.Sprintf("W4 simic-ppo (vectorised Esper environments, %v)", dev), m)
	o := W4Options{
		Envs: c.Envs, BaseChannels: c.BaseChannels, Train: c.TrainSize, Val: c.ValSize, Batch: c.Batch,
		MaxEpochs: c.MaxEpochs, Steps: c.Steps, Warmup: c.Warmup, PPORounds: c.PPORounds,
		Capture: c.Capture, Device: dev, Progress: progressEvery(stdout),
	}
	mode := "eager"
	if c.Capture {
		mode = "captured"
	}
	fmt.Fprintf(stdout, "  %d envs, CNN host of 3 blocks (3 slots), base %d, synthetic 1×28×28: %d train / %d val samples, batch %d, %s host steps ...\n",
		c.Envs, c.BaseChannels, c.TrainSize, c.ValSize, c.Batch, mode)
	r, err := RunW4(o)
	if err != nil {
		return err
	}
	w := r.Work
	results := map[string]any{"bare": r.Bare, "work": w}
	if r.PPO != nil {
		results["ppo"] = r.PPO
	}
	rep := Report{
		Workload: "W4",
		Parameters: map[string]any{
			"envs": r.Envs, "slots": r.Slots, "blocks": r.Blocks, "base_channels": r.BaseChannels,
			"host":  "kasmina CNNHost: 3 × [Conv2d k3 pad 1 no bias → BatchNorm2d → ReLU → MaxPool2d 2], global average pool, Linear(→10), in a MorphogeneticModel with one pre-pool slot per block",
			"data":  "simic.NewSyntheticData (the synthetic task, 1×28×28, 10 classes), shared by every environment",
			"train": r.Train, "val": r.Val, "batch": r.Batch, "max_epochs": r.MaxEpochs,
			"steps": r.Steps, "warmup": r.Warmup, "ppo_rounds": r.PPORounds,
			"host_params": r.HostParams, "policy": r.PolicyNote, "policy_params": r.PolicyParams,
			"host_optimizer":        "SGD lr=0.01 momentum=0.9 weight decay 5e-4, gradients clipped to norm 1 (tolaria defaults)",
			"host_steps":            mode + " (--capture: tolaria captures each host's train step and validation batch and replays them, re-capturing when a seed's stage or alpha changes)",
			"bare":                  "per lock-step step: TamiyoPolicy.Act over every environment's observation (one batched forward, sampled), then VecEnv.Step: each simic.EsperEnv executes its decision, finishes the epoch and runs the next one to its decision point (training, validation, tolaria's counterfactual passes, the fused counterfactual validation, governor, observation encoding); episodes reset as they end",
			"ppo":                   "per round: simic.Trainer.Collect of max_epochs lock-step steps (the bare loop plus the rollout buffer and bootstrap values; episodic rollouts, every environment reset to an episode's start before the loop), then PPO.Update (as `esper ppo` configures it)",
			"host_syncs":            "device-to-host reads (tensor.HostSyncs) split into the environments' (per env-epoch: VecEnv's one read of every environment's epoch per lock-step step, resets and counterfactual reads), the policy's in the rollout (per lock-step step: the batched Act, and the bootstrap values once per ppo round) and the PPO updates' (per update); zero on the cpu",
			"env_epochs_per_second": "lock-step steps × envs over their wall time",
		},
		Machine: m, Device: r.Device, Results: results,
	}
	var peer map[string]any
	peerReplays := false // the peer ran this run's work trace
	if cuda && c.PeerResults != "" {
		if peer, err = w4DevicePeer(stdout, c.PeerResults, r); err != nil {
			peerFailed(stderr, &rep, "W4", err)
		}
		rep.Peer = peer
	} else if c.Compare {
		tmp, err := os.MkdirTemp("", "esper-w4-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		gf, sf := filepath.Join(tmp, "w4_graphs.json"), filepath.Join(tmp, "w4_seeds.json")
		if err := W4PeerGraphs(gf, r); err != nil {
			return err
		}
		if err := W4PeerSeeds(sf, r); err != nil {
			return err
		}
		args := W4PeerArgs(r, gf, sf)
		if peer, err = runWorkloadPeer(c, stdout, stderr, &rep, "W4", cuda, dev, "w4_env_loop.py", args...); err != nil {
			return err
		}
		if peer != nil {
			peerReplays = true
			if got := Figure(peer, "host_params"); got != float64(r.HostParams) {
				return fmt.Errorf("W4 peer host has %v parameters, ours %d: the architectures differ", got, r.HostParams)
			}
			if got := Figure(peer, "policy_params"); got != float64(r.PolicyParams) {
				return fmt.Errorf("W4 peer policy has %v parameters, ours %d: the architectures differ", got, r.PolicyParams)
			}
			seeds, params := r.Work.SeedTotals()
			if got, gotP := Figure(peer, "seeds_total"), Figure(peer, "seed_params_total"); got != float64(seeds) || gotP != float64(params) {
				return fmt.Errorf("W4 peer ran %v seed-epochs of %v parameters, ours %d of %d: the seed traces differ", got, gotP, seeds, params)
			}
		}
	}
	peerEPS := Figure(peer, "env_epochs_per_second")
	if cuda {
		rep.Ratios = map[string]any{}
	}
	if peer != nil {
		if rep.Ratios == nil {
			rep.Ratios = map[string]any{}
		}
		rep.Ratios["bare_vs_pytorch"] = r.Bare.EnvEpochsPerSec / peerEPS
		if r.PPO != nil {
			rep.Ratios["ppo_vs_pytorch_bare"] = r.PPO.EnvEpochsPerSec / peerEPS
		}
	}

	tw := NewTable(stdout, AlignRight)
	fmt.Fprintln(tw, "\tenv-epochs/s\tper env\tenv-epochs\tp50 s\tp95 s\tallocs/env-epoch\tvs pytorch bare\t")
	loopRow := func(name string, l W4LoopResult) {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%d\t%.2f\t%.2f\t%.0f\t%s\t\n", name, l.EnvEpochsPerSec, l.PerEnv, l.EnvEpochs,
			l.Latency.P50us/1e6, l.Latency.P95us/1e6, l.AllocsPerEnvEpoch, Ratio(l.EnvEpochsPerSec, peerEPS))
	}
	loopRow("esper bare (per step)", r.Bare)
	if r.PPO != nil {
		loopRow("esper ppo (per round)", *r.PPO)
	}
	if peer != nil {
		fmt.Fprintf(tw, "pytorch %v bare (per step)\t%.2f\t%.2f\t%.0f\t%.2f\t%.2f\t-\t\t\n", peer["torch_version"], peerEPS,
			Figure(peer, "env_epochs_per_second_per_env"), Figure(peer, "env_epochs"),
			Figure(peer, "latency", "p50_us")/1e6, Figure(peer, "latency", "p95_us")/1e6)
	}
	tw.Flush()
	total := func(v []int) int {
		s := 0
		for _, x := range v {
			s += x
		}
		return s
	}
	seeds, _ := w.SeedTotals()
	fmt.Fprintf(stdout, "bare loop work (%d env-epochs): %.2f live seeds per env-epoch (%.0f seed parameters; host %d, policy %d), %d seed-epochs run, %d germinations, %d fused counterfactual configurations, %d ablation passes, %d rollbacks, %d episodes ended\n",
		r.Bare.EnvEpochs, w.LiveSeeds, w.SeedParams, r.HostParams, r.PolicyParams, seeds, w.Germinations, total(w.Configs), total(w.Ablations), w.Rollbacks, w.Episodes)
	fmt.Fprintf(stdout, "bare loop time: %.2f s: %.2f s in the policy's batched Act, %.2f s in the environments' own calls, %.2f s in the batched reads (waiting for the device)\n",
		r.Bare.Seconds, r.Bare.PolicySeconds, r.Bare.EnvSeconds, r.Bare.ReadSeconds)
	if w := r.Work; w.Captures+w.EagerCalls+w.Replays > 0 {
		fmt.Fprintf(stdout, "bare loop captured regions (the environments' trainers): %d replays, %d captures taking %.3f s, %d eager calls (warm-ups and fallbacks); %d launches in a training step's graph, %d in a validation pass's\n",
			w.Replays, w.Captures, w.CaptureSeconds, w.EagerCalls, w.StepGraphNodes, w.ValidationGraphNodes)
	}
	if peer != nil {
		fmt.Fprintf(stdout, "pytorch bare loop time: %.2f s: policy %.2f s, training %.2f s, validation %.2f s, ablation passes %.2f s, fused counterfactual %.2f s\n",
			Figure(peer, "seconds"), Figure(peer, "phase_seconds", "policy"), Figure(peer, "phase_seconds", "train"), Figure(peer, "phase_seconds", "validation"),
			Figure(peer, "phase_seconds", "ablation"), Figure(peer, "phase_seconds", "fused"))
	}
	if r.PPO != nil {
		fmt.Fprintf(stdout, "ppo loop: %.2f s of %.2f s in PPO updates", r.PPO.UpdateSeconds, r.PPO.Seconds)
		if !dev.IsCPU() {
			fmt.Fprintf(stdout, ", %.3f s of those in host syncs (waiting for the device, reading)", r.PPO.UpdateSyncSeconds)
		}
		if r.PPO.OpsPerUpdate > 0 {
			fmt.Fprintf(stdout, "; %.0f ops per update", r.PPO.OpsPerUpdate)
		}
		fmt.Fprintln(stdout)
	}
	if tensor.CountsDriverAllocs(dev) { // CUDA's allocator counts them; sim has no driver
		fmt.Fprintf(stdout, "device memory from the driver (allocations the cache could not serve), bare loop: %d taking %.3f s",
			r.Bare.DriverAllocs, r.Bare.DriverAllocSeconds)
		if r.PPO != nil {
			fmt.Fprintf(stdout, "; ppo loop: %d taking %.3f s", r.PPO.DriverAllocs, r.PPO.DriverAllocSeconds)
		}
		fmt.Fprintln(stdout)
	}
	if !dev.IsCPU() {
		b := r.Bare.Syncs
		fmt.Fprintf(stdout, "host syncs, bare loop: %.2f per env-epoch (environments %.2f per env-epoch, policy %.2f per lock-step step)\n",
			b.PerEnvEpoch, b.EnvPerEnvEpoch, b.PolicyPerStep)
		if r.PPO != nil {
			p := r.PPO.Syncs
			fmt.Fprintf(stdout, "host syncs, ppo loop: %.2f per env-epoch (environments %.2f per env-epoch, policy %.2f per lock-step step), %.1f per PPO update of %d minibatches\n",
				p.PerEnvEpoch, p.EnvPerEnvEpoch, p.PolicyPerStep, p.PerUpdate, p.MinibatchesPerUpdate)
		}
	}
	if peerReplays {
		fmt.Fprintln(stdout, "the peer replays our seeds, fused configurations and ablation passes (bench/pytorch/w4_env_loop.py says what differs)")
	}
	if cuda {
		ppo := 0.0
		if r.PPO != nil {
			ppo = r.PPO.EnvEpochsPerSec
		}
		w4GPUVerdicts(stdout, r.Bare.EnvEpochsPerSec, ppo, peerEPS, rep.Ratios)
	} else if peer != nil {
		q := r.Bare.EnvEpochsPerSec / peerEPS
		fmt.Fprintf(stdout, "bare loop esper %.2f env-epochs/s vs pytorch %.2f: %.2f× %s the PERF.md target of ≥ %.0f×\n",
			r.Bare.EnvEpochsPerSec, peerEPS, q, Verdict(q >= w4TargetPeerRatio), w4TargetPeerRatio)
	}
	return SaveReport(stdout, c.JSONDir, rep)
}

// w4DevicePeer reads W4's peer from dir (--peer-results: the peer ran
// before esper, so not this run's work trace) and checks that it built
// our host and policy; the seed-epochs both sides ran are printed.
func w4DevicePeer(stdout io.Writer, dir string, r W4Result) (map[string]any, error) {
	peer, path, err := readDevicePeer(dir, "w4")
	if err != nil {
		return nil, err
	}
	if got := Figure(peer, "host_params"); got != float64(r.HostParams) {
		return nil, fmt.Errorf("%s: the peer's host has %v parameters, ours %d: the architectures differ", path, got, r.HostParams)
	}
	if got := Figure(peer, "policy_params"); got != float64(r.PolicyParams) {
		return nil, fmt.Errorf("%s: the peer's policy has %v parameters, ours %d: the architectures differ", path, got, r.PolicyParams)
	}
	if Figure(peer, "env_epochs_per_second") <= 0 {
		return nil, fmt.Errorf("%s: the peer's report has no env_epochs_per_second", path)
	}
	fmt.Fprintf(stdout, "  PyTorch peer figures from %s\n", path)
	seeds, params := r.Work.SeedTotals()
	fmt.Fprintf(stdout, "  the peer ran %v seed-epochs of %v parameters, %v fused configurations and %v ablation passes; our bare loop %d seed-epochs of %d parameters\n",
		Figure(peer, "seeds_total"), Figure(peer, "seed_params_total"), Figure(peer, "configs_total"), Figure(peer, "ablations_total"), seeds, params)
	return peer, nil
}

// w4GPUVerdicts prints W4's verdicts against PERF.md's GPU targets: the
// bare loop's env-epochs per second (and the PPO loop's, when ppo > 0)
// against ≥ 200, and the bare loop against the peer's (when peer > 0),
// recorded in ratios.
func w4GPUVerdicts(w io.Writer, bare, ppo, peer float64, ratios map[string]any) {
	loops := []struct {
		name string
		eps  float64
	}{{"bare", bare}, {"ppo", ppo}}
	for _, l := range loops {
		if l.eps <= 0 {
			continue
		}
		ratios[l.name+"_over_gpu_target"] = l.eps / w4GPUTargetEPS
		fmt.Fprintf(w, "%s loop %.2f env-epochs/s %s the PERF.md GPU target of ≥ %.0f\n", l.name, l.eps,
			Verdict(l.eps >= w4GPUTargetEPS), w4GPUTargetEPS)
	}
	if peer > 0 && bare > 0 {
		q := bare / peer
		ratios["bare_vs_pytorch"] = q
		fmt.Fprintf(w, "bare loop esper %.2f env-epochs/s vs pytorch %.2f on the GPU: %.2f× %s the PERF.md GPU target of ≥ %.0f×\n",
			bare, peer, q, Verdict(q >= w4GPUTargetPeerRatio), w4GPUTargetPeerRatio)
	}
}
