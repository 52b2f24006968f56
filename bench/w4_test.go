package bench

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/tamiyo"
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
		// Full factorial over at most 3 seeds: 0 or 2^n configurations.
		require.Contains(t, []int{0, 2, 4, 8}, k, "env-epoch %d", i)
	}
	require.NotNil(t, r.Graph)
	require.Equal(t, 2, r.Graph.NumGraphs)

	args := W4PeerArgs(r, "g.json")
	require.Contains(t, args, "--configs")
	require.Equal(t, len(args)%2, 0)
}

func TestW4RejectsBadOptions(t *testing.T) {
	_, err := RunW4(W4Options{Envs: -1})
	require.Error(t, err)
	_, err = RunW4(W4Options{Train: 64, Batch: 128})
	require.ErrorContains(t, err, "smaller than a batch")
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
	// A trace with counterfactual work, whatever the tiny run's seeds
	// did: the peer must replay it.
	r.Work.Configs = []int{4, 0, 2, 0, 0, 8, 0, 0}
	r.Work.Ablations = []int{1, 0, 0, 0, 2, 0, 0, 0}
	gf := filepath.Join(t.TempDir(), "graphs.json")
	require.NoError(t, W4PeerGraphs(gf, r))
	peer, err := RunPeer("pytorch", "w4_env_loop.py", 1, W4PeerArgs(r, gf)...)
	require.NoError(t, err)
	require.Equal(t, float64(r.HostParams), peer["host_params"])
	require.Equal(t, float64(r.PolicyParams), peer["policy_params"])
	require.Equal(t, float64(r.Bare.EnvEpochs), peer["env_epochs"])
	require.Equal(t, 14.0, peer["configs_total"], "the peer replays the fused configurations of our measured env-epochs")
	require.Equal(t, 3.0, peer["ablations_total"])
	require.Greater(t, peer["env_epochs_per_second"], 0.0)
}
