package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/simic"
)

// tinyPPO are the flags of a few-second esper ppo run.
func tinyPPO(dir string, extra ...string) []string {
	return append([]string{"ppo", "--envs", "2", "--max-epochs", "3", "--blocks", "3", "--train-size", "128", "--val-size", "64", "--batch", "32",
		"--base-channels", "2", "--hidden", "16", "--gat-hidden", "8", "--gat-heads", "2", "--head-hidden", "16", "--run-dir", dir}, extra...)
}

// TestPPOWritesLoadablePolicy: a 2-round esper ppo run prints a line per
// round, writes its plots, and its policy file drives esper train
// --controller gnn.
func TestPPOWritesLoadablePolicy(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "trained.safetensors")
	var out, errb bytes.Buffer
	code := run(tinyPPO(dir, "--rounds", "2", "--out", policy), &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	require.Contains(t, out.String(), "round   1/2")
	require.Contains(t, out.String(), "round   2/2")
	require.Contains(t, out.String(), "entropy [slot")
	plots, err := filepath.Glob(filepath.Join(dir, "telemetry_*", "ppo.png"))
	require.NoError(t, err)
	require.Len(t, plots, 1)
	events, err := filepath.Glob(filepath.Join(dir, "telemetry_*", "events.jsonl"))
	require.NoError(t, err)
	require.Len(t, events, 1)
	ev, err := os.ReadFile(events[0])
	require.NoError(t, err)
	require.Contains(t, string(ev), "simic.ppo.approx_kl")

	out.Reset()
	errb.Reset()
	code = run([]string{"train", "--controller", "gnn", "--policy", policy, "--blocks", "3",
		"--train-size", "128", "--test-size", "64", "--epochs", "2", "--batch", "64",
		"--base-channels", "2", "--baseline=false", "--run-dir", dir}, &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	require.Contains(t, out.String(), "epoch   2/2")
}

// TestPPOResume: a run checkpointed after round 1 continues at round 2
// with the optimizer, normalisers and history of the checkpoint.
func TestPPOResume(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	var out, errb bytes.Buffer
	code := run(tinyPPO(dir, "--rounds", "1", "--checkpoint", ck), &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	for _, f := range []string{simic.PPOPolicyFile, simic.PPOOptimizerFile, simic.PPOStateFile} {
		require.FileExists(t, filepath.Join(ck, f))
	}

	out.Reset()
	errb.Reset()
	code = run(tinyPPO(dir, "--rounds", "2", "--checkpoint", ck, "--resume"), &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	require.Contains(t, out.String(), "resumed from "+ck+" after round 1")
	require.NotContains(t, out.String(), "round   1/2")
	require.Contains(t, out.String(), "round   2/2")
	js, err := os.ReadFile(filepath.Join(ck, simic.PPOStateFile))
	require.NoError(t, err)
	var st simic.PPOCheckpoint
	require.NoError(t, json.Unmarshal(js, &st))
	require.Equal(t, 2, st.Round)
	require.Len(t, st.History, 2)
	require.Equal(t, 2, st.Updates)
	require.Equal(t, 2*2*3, st.EnvSteps)
	require.Greater(t, st.ValueNorm.Count, int64(0))

	// A resume with other policy widths (a policy trained for another
	// architecture) is refused in one line naming both, not silently
	// reset.
	out.Reset()
	errb.Reset()
	code = run(append(tinyPPO(dir, "--rounds", "3", "--checkpoint", ck, "--resume"), "--hidden", "32"), &out, &errb)
	require.Equal(t, 1, code)
	require.Contains(t, errb.String(), "--resume")
	require.Contains(t, errb.String(), "hidden 16")
	require.Contains(t, errb.String(), "hidden 32")
	require.Equal(t, 1, strings.Count(errb.String(), "\n"), errb.String())
}

// TestPPODeviceAcceptance: esper ppo --device sim --rounds 3 --seed 1
// (at tinyPPO's sizes) writes a policy file bitwise-equal to --device
// cpu's; --devices sim:0,sim:1 runs, reports how many environments each
// device holds, and writes the same policy too.
func TestPPODeviceAcceptance(t *testing.T) {
	dir := t.TempDir()
	policies := map[string][]byte{}
	outs := map[string]string{}
	for _, dev := range [][]string{{"--device", "cpu"}, {"--device", "sim"}, {"--devices", "sim:0,sim:1"}} {
		path := filepath.Join(dir, strings.ReplaceAll(dev[1], ":", "_")+".safetensors")
		var out, errb bytes.Buffer
		code := run(append(tinyPPO(dir, "--rounds", "3", "--seed", "1", "--out", path), dev...), &out, &errb)
		require.Equal(t, 0, code, "%v\n%s\n%s", dev, out.String(), errb.String())
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		policies[dev[1]], outs[dev[1]] = b, out.String()
	}
	require.Contains(t, outs["cpu"], "devices: cpu (policy, 2 envs)\n")
	require.Contains(t, outs["sim"], "devices: sim:0 (policy, 2 envs)\n")
	require.Contains(t, outs["sim:0,sim:1"], "devices: sim:0 (policy, 1 env), sim:1 (1 env)\n")
	require.True(t, bytes.Equal(policies["cpu"], policies["sim"]), "--device sim's policy differs from --device cpu's")
	require.True(t, bytes.Equal(policies["cpu"], policies["sim:0,sim:1"]), "--devices sim:0,sim:1's policy differs from --device cpu's")
}

// TestPPORefusesBadDevices: a malformed or unknown device, a device given
// twice, both flags, or CUDA in a build without it: one line on stderr,
// exit 1, before any work (no run directory).
func TestPPORefusesBadDevices(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--devices", "sim:0,sim"}, "sim:0 is given twice"},
		{[]string{"--devices", "sim:1,sim:0,sim:1"}, "sim:1 is given twice"},
		{[]string{"--devices", "sim:0,gpu:1"}, `device "gpu:1": malformed device name`},
		{[]string{"--devices", "sim:0,,sim:1"}, `device "": malformed device name`},
		{[]string{"--device", "cuda0"}, `device "cuda0": malformed device name`},
		{[]string{"--device", "sim", "--devices", "sim:0,sim:1"}, "give --device or --devices, not both"},
	} {
		dir := t.TempDir()
		var out, errb bytes.Buffer
		code := run(append(tinyPPO(dir, "--rounds", "1"), tc.args...), &out, &errb)
		require.Equal(t, 1, code, "%v: %s", tc.args, errb.String())
		require.Contains(t, errb.String(), tc.msg, tc.args)
		require.Equal(t, 1, strings.Count(errb.String(), "\n"), errb.String())
		require.Empty(t, out.String(), tc.args)
		runs, err := filepath.Glob(filepath.Join(dir, "telemetry_*"))
		require.NoError(t, err)
		require.Empty(t, runs, "%v: a run directory was created", tc.args)
	}
}

// TestPPODiagnoseAndAccuracyReward: --reward accuracy with --diagnose
// prints, after each round's line, the episodes' outcome, each op's
// figures, the reward terms and the update's; the policy's load hint
// names the host and schedule it was trained on.
func TestPPODiagnoseAndAccuracyReward(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run(tinyPPO(dir, "--rounds", "1", "--reward", "accuracy", "--diagnose", "--update-epochs", "2", "--op-floor", "0.02",
		"--entropy-anneal", "1", "--param-cost", "0", "--prune-prior", "-2", "--germinate-prior", "1", "--kernel", "3", "--host-lr", "0.02", "--schedule", "constant"), &out, &errb)
	require.Equal(t, 0, code, "%s\n%s", out.String(), errb.String())
	s := out.String()
	require.Contains(t, s, "reward ACCURACY")
	require.Contains(t, s, "    eps 2  final acc ")
	require.Contains(t, s, "    op share/applied/reward/adv/return: WAIT ")
	require.Contains(t, s, "    terms/episode:")
	require.Contains(t, s, "    update: clip ")
	require.Contains(t, s, "--epochs 3 --blocks 3 --base-channels 2 --kernel 3 --lr 0.02 --schedule constant --train-size 128 --batch 32")
	events, err := filepath.Glob(filepath.Join(dir, "telemetry_*", "events.jsonl"))
	require.NoError(t, err)
	require.Len(t, events, 1)
	ev, err := os.ReadFile(events[0])
	require.NoError(t, err)
	require.Contains(t, string(ev), "simic.esper.final_accuracy")
	require.Contains(t, string(ev), "simic.esper.op_share.wait")
}

// TestPPORefusesBadLearningFlags: each bad value of the task and update
// flags is one line before any work.
func TestPPORefusesBadLearningFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--kernel", "2"}, "--kernel 2"},
		{[]string{"--host-lr", "0"}, "--host-lr"},
		{[]string{"--schedule", "step"}, "--schedule"},
		{[]string{"--update-epochs", "0"}, "--update-epochs"},
		{[]string{"--entropy-coef", "-1"}, "--entropy-coef"},
		{[]string{"--op-floor", "1"}, "--op-floor"},
		{[]string{"--param-cost", "-0.5"}, "--param-cost"},
		{[]string{"--prune-prior", "NaN"}, "--prune-prior"},
		{[]string{"--germinate-prior", "Inf"}, "--germinate-prior"},
		{[]string{"--reward", "escrow"}, "--reward"},
	} {
		dir := t.TempDir()
		var out, errb bytes.Buffer
		code := run(append(tinyPPO(dir, "--rounds", "1"), tc.args...), &out, &errb)
		require.Equal(t, 1, code, "%v: %s", tc.args, errb.String())
		require.Contains(t, errb.String(), tc.msg, tc.args)
		require.Equal(t, 1, strings.Count(errb.String(), "\n"), errb.String())
		require.Empty(t, out.String(), tc.args)
	}
}
