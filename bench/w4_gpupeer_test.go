package bench

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestW4DevicePeer: W4's peer from a GPU run's --peer-results directory
// must have built our host and policy and measured a rate; the work both
// sides ran is printed.
func TestW4DevicePeer(t *testing.T) {
	dir := t.TempDir()
	r := W4Result{HostParams: 7000, PolicyParams: 90000, Work: W4Work{Seeds: [][]W4Seed{{{Params: 40}}, {{Params: 40}, {Params: 2}}}}}
	var out bytes.Buffer
	_, err := w4DevicePeer(&out, dir, r)
	require.Error(t, err, "no pytorch_w4.json")
	writeFakePeer(t, dir, "w4", `{"workload": "W4", "host_params": 7001, "policy_params": 90000, "env_epochs_per_second": 50}`)
	_, err = w4DevicePeer(&out, dir, r)
	require.ErrorContains(t, err, "host has 7001 parameters, ours 7000")
	writeFakePeer(t, dir, "w4", `{"workload": "W4", "host_params": 7000, "policy_params": 9, "env_epochs_per_second": 50}`)
	_, err = w4DevicePeer(&out, dir, r)
	require.ErrorContains(t, err, "policy has 9 parameters, ours 90000")
	writeFakePeer(t, dir, "w4", `{"workload": "W4", "host_params": 7000, "policy_params": 90000}`)
	_, err = w4DevicePeer(&out, dir, r)
	require.ErrorContains(t, err, "no env_epochs_per_second")
	writeFakePeer(t, dir, "w4", `{"workload": "W4", "host_params": 7000, "policy_params": 90000, "env_epochs_per_second": 50,
		"seeds_total": 4, "seed_params_total": 160, "configs_total": 3, "ablations_total": 0}`)
	peer, err := w4DevicePeer(&out, dir, r)
	require.NoError(t, err)
	require.Equal(t, 50.0, Figure(peer, "env_epochs_per_second"))
	require.Contains(t, out.String(), "PyTorch peer figures from "+filepath.Join(dir, "pytorch_w4.json"))
	require.Contains(t, out.String(), "the peer ran 4 seed-epochs of 160 parameters, 3 fused configurations and 0 ablation passes; our bare loop 3 seed-epochs of 82 parameters")
}

// TestW4GPUVerdicts: each loop's env-epochs per second against 200, and
// the bare loop against the peer's bare loop (≥ 1×), in the ratios too.
func TestW4GPUVerdicts(t *testing.T) {
	var out bytes.Buffer
	ratios := map[string]any{}
	w4GPUVerdicts(&out, 250, 150, 300, ratios)
	s := out.String()
	require.Contains(t, s, "bare loop 250.00 env-epochs/s meets the PERF.md GPU target of ≥ 200\n")
	require.Contains(t, s, "ppo loop 150.00 env-epochs/s misses the PERF.md GPU target of ≥ 200\n")
	require.Contains(t, s, "bare loop esper 250.00 env-epochs/s vs pytorch 300.00 on the GPU: 0.83× misses the PERF.md GPU target of ≥ 1×")
	require.InDelta(t, 1.25, ratios["bare_over_gpu_target"], 1e-12)
	require.InDelta(t, 0.75, ratios["ppo_over_gpu_target"], 1e-12)
	require.InDelta(t, 250.0/300, ratios["bare_vs_pytorch"], 1e-12)

	out.Reset()
	ratios = map[string]any{}
	w4GPUVerdicts(&out, 70, 0, 35, ratios)
	s = out.String()
	require.Contains(t, s, "bare loop 70.00 env-epochs/s misses")
	require.NotContains(t, s, "ppo loop", "no PPO loop ran")
	require.Contains(t, s, "2.00× meets the PERF.md GPU target of ≥ 1×")
	require.NotContains(t, ratios, "ppo_over_gpu_target")

	out.Reset()
	ratios = map[string]any{}
	w4GPUVerdicts(&out, 70, 61, 0, ratios)
	require.NotContains(t, out.String(), "pytorch", "no peer")
	require.NotContains(t, ratios, "bare_vs_pytorch")
}
