package simic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/kernels"
	"github.com/esper-go/esper/leyline"
	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tamiyo"
	"github.com/esper-go/esper/tensor"
)

// tinyPPO are the options of a few-second EsperPPO run: 2 environments
// of 3-epoch episodes on a narrow host and policy.
func tinyPPO(t testing.TB, rounds int, seed uint64) EsperPPOOptions {
	return EsperPPOOptions{Rounds: rounds, Envs: 2, MaxEpochs: 3, Blocks: 3, BaseChannels: 2, Train: 128, Val: 64, Batch: 32,
		Policy: tamiyo.PolicyOptions{Hidden: 16, GATHidden: 8, GATHeads: 2, HeadHidden: 16}, Seed: seed,
		Devices: []tensor.Device{testdevice.Device(t)}}
}

// runTinyPPO runs o from its start (or o.Resume) to o.Rounds, writing a
// checkpoint into ck (when set) after every round, and returns the
// final policy file's bytes and the rounds' returns. Each call builds its
// run from o and the checkpoint on disk alone, as a new process would.
// stop > 0 ends the run after that round's checkpoint.
func runTinyPPO(t *testing.T, o EsperPPOOptions, ck string, stop int) ([]byte, []float64, error) {
	t.Helper()
	r, err := NewEsperPPO(o)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	var returns []float64
	for round := r.State.Round + 1; round <= o.Rounds; round++ {
		rr, err := r.Round()
		if err != nil {
			return nil, returns, err
		}
		require.Equal(t, round, rr.Round)
		returns = append(returns, rr.Return)
		if ck != "" {
			if err := r.SaveCheckpoint(ck); err != nil {
				return nil, returns, err
			}
		}
		if round == stop {
			return nil, returns, nil
		}
	}
	path := filepath.Join(t.TempDir(), "policy.safetensors")
	require.NoError(t, r.SavePolicy(path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b, returns, nil
}

// TestPPOCheckpointResumeIsBitwise: a 3-round run stopped after round 1
// and resumed from its checkpoint writes a policy byte-identical to the
// uninterrupted run's, with the same per-round returns, also when it
// resumes on another device.
func TestPPOCheckpointResumeIsBitwise(t *testing.T) {
	o := tinyPPO(t, 3, 9)
	want, wantReturns, err := runTinyPPO(t, o, "", 0)
	require.NoError(t, err)
	ck := filepath.Join(t.TempDir(), "ck")
	_, first, err := runTinyPPO(t, o, ck, 1)
	require.NoError(t, err)
	for _, f := range []string{PPOPolicyFile, PPOOptimizerFile, PPOStateFile} {
		require.FileExists(t, filepath.Join(ck, f))
	}
	o.Resume = ck
	got, rest, err := runTinyPPO(t, o, ck, 0)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(wantReturns), fmt.Sprint(append(first, rest...)), "per-round returns")
	require.True(t, bytes.Equal(want, got), "the resumed run's policy differs from the uninterrupted run's")
	// The checkpoint is the devices': resumed after round 1 on another
	// device (sim:1), the run still ends with the same policy.
	ck2 := filepath.Join(t.TempDir(), "ck")
	o.Resume = ""
	_, _, err = runTinyPPO(t, o, ck2, 1)
	require.NoError(t, err)
	o.Resume, o.Devices = ck2, []tensor.Device{tensor.Sim(1)}
	got, _, err = runTinyPPO(t, o, "", 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the run resumed on sim:1 differs from the uninterrupted run")

	st, err := LoadPPOCheckpoint(ck)
	require.NoError(t, err)
	require.Equal(t, 3, st.Round)
	require.Len(t, st.History, 3)
	require.Equal(t, 3, st.Updates)
	require.Equal(t, 3*2*3, st.EnvSteps)
	require.Greater(t, st.ValueNorm.Count, int64(0))
}

// TestPPOCheckpointSurvivesKillDuringSave: a run that dies at any step of
// its round-2 checkpoint's save resumes from a whole checkpoint (round 1's
// before the new state file is written, round 2's after it) and ends
// with the uninterrupted run's policy.
func TestPPOCheckpointSurvivesKillDuringSave(t *testing.T) {
	o := tinyPPO(t, 3, 5)
	want, _, err := runTinyPPO(t, o, "", 0)
	require.NoError(t, err)
	defer func() { ppoSaveHook = nil }()
	killed := errors.New("killed")
	for _, tc := range []struct {
		step    string
		resumed int // the round the resumed run continues after
	}{
		{"staged " + PPOPolicyFile, 1},
		{"staged " + PPOOptimizerFile, 1},
		{"staged " + PPOStateFile, 2},
		{"moved " + PPOPolicyFile, 2},
		{"moved " + PPOOptimizerFile, 2},
		{"moved " + PPOStateFile, 2},
	} {
		t.Run(tc.step, func(t *testing.T) {
			ck := filepath.Join(t.TempDir(), "ck")
			saves := 0
			ppoSaveHook = func(step string) error {
				if step == "staged "+PPOPolicyFile {
					saves++
				}
				if saves == 2 && step == tc.step {
					return killed
				}
				return nil
			}
			_, _, err := runTinyPPO(t, o, ck, 0)
			require.ErrorIs(t, err, killed)
			ppoSaveHook = nil
			st, err := LoadPPOCheckpoint(ck)
			require.NoError(t, err)
			require.Equal(t, tc.resumed, st.Round)
			require.NoDirExists(t, filepath.Join(ck, PPOStagingDir))
			ro := o
			ro.Resume = ck
			got, _, err := runTinyPPO(t, ro, "", 0)
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got), "the resumed run's policy differs from the uninterrupted run's")
		})
	}
}

// onePPOCheckpoint writes the checkpoint of a one-round tiny run into a
// new directory and returns it.
func onePPOCheckpoint(t testing.TB, seed uint64) string {
	t.Helper()
	ck := filepath.Join(t.TempDir(), "ck")
	r, err := NewEsperPPO(tinyPPO(t, 1, seed))
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Round()
	require.NoError(t, err)
	require.NoError(t, r.SaveCheckpoint(ck))
	return ck
}

// TestPPOCheckpointRefusesForgedState: a state file whose fields are out
// of range — round -1000000 (which once printed "after round -1000000"
// and ran a million rounds), negative counters, a history that does not
// match the rounds, a key given twice, no version (written before version
// 2) — is refused with the field named, before anything is built; so is a
// checkpoint of another number of environments, and a policy of other
// widths. Returns of ±1e308 in the history are figures it keeps.
func TestPPOCheckpointRefusesForgedState(t *testing.T) {
	ck := onePPOCheckpoint(t, 3)
	path := filepath.Join(ck, PPOStateFile)
	good, err := os.ReadFile(path)
	require.NoError(t, err)
	forge := func(edit func(st map[string]any)) []byte {
		var st map[string]any
		require.NoError(t, json.Unmarshal(good, &st))
		edit(st)
		js, err := json.Marshal(st)
		require.NoError(t, err)
		return js
	}
	history := func(st map[string]any) map[string]any { return st["history"].([]any)[0].(map[string]any) }
	o := tinyPPO(t, 2, 3)
	o.Resume = ck
	for _, tc := range []struct {
		name, msg string
		js        []byte
	}{
		{"negative round", "round -1000000", forge(func(st map[string]any) { st["round"] = -1000000 })},
		{"round beyond history", "history of 1 rounds for 5", forge(func(st map[string]any) { st["round"] = 5 })},
		{"negative updates", "negative counter", forge(func(st map[string]any) { st["updates"] = -3 })},
		{"negative env steps", "negative counter", forge(func(st map[string]any) { st["env_steps"] = -1 })},
		{"negative episodes", "negative episodes", forge(func(st map[string]any) { history(st)["episodes"] = -2 })},
		{"negative episode number", "at episode -4", forge(func(st map[string]any) { st["episodes"].([]any)[0] = -4 })},
		{"duplicate key", "duplicate JSON key", append([]byte(`{"round":1,`), good[1:]...)},
		{"no version", "cannot be continued exactly", forge(func(st map[string]any) { delete(st, "version") })},
		{"three environments", "it has 3 environments, the run 2", forge(func(st map[string]any) { st["episodes"] = []any{1, 1, 1} })},
	} {
		require.NoError(t, os.WriteFile(path, tc.js, 0o644))
		r, err := NewEsperPPO(o)
		if err == nil {
			r.Close()
		}
		require.ErrorContains(t, err, tc.msg, tc.name)
		require.NotContains(t, err.Error(), "\n", "%s: one line", tc.name)
	}
	require.NoError(t, os.WriteFile(path, forge(func(st map[string]any) { history(st)["return"] = -1e308 }), 0o644))
	st, err := LoadPPOCheckpoint(ck)
	require.NoError(t, err)
	require.Equal(t, -1e308, st.History[0].Return)

	// A policy of other widths: the mismatch named, in one line.
	require.NoError(t, os.WriteFile(path, good, 0o644))
	o.Policy.Hidden = 32
	_, err = NewEsperPPO(o)
	require.ErrorIs(t, err, tamiyo.ErrCheckpointMismatch)
	require.ErrorContains(t, err, "hidden 16")
	require.ErrorContains(t, err, "hidden 32")
	require.NotContains(t, err.Error(), "\n")
}

// TestPPORoundJSON: a round's figures round-trip through JSON, NaN as
// null.
func TestPPORoundJSON(t *testing.T) {
	r := PPORound{Round: 2, Return: 1.5, Episodes: 3, Entropy: []float64{0.5, math.NaN()}, KL: 1e-3, ExplainedVariance: math.NaN(),
		PolicyLoss: -0.25, ValueLoss: 2, EnvEpochsPerSec: 7, Rollbacks: 1}
	for _, syncs := range []float64{0, 0.75} {
		r.HostSyncsPerEnvEpoch = syncs
		js, err := json.Marshal(r)
		require.NoError(t, err)
		require.True(t, strings.Contains(string(js), `"explained_variance":null`), string(js))
		require.Equal(t, syncs > 0, strings.Contains(string(js), `"host_syncs_per_env_epoch":0.75`), string(js))
		var back PPORound
		require.NoError(t, json.Unmarshal(js, &back))
		require.Equal(t, fmt.Sprint(r), fmt.Sprint(back))
		require.Equal(t, syncs > 0, strings.HasSuffix(r.Line(3), "  0.75 host syncs/env-epoch"), r.Line(3))
	}
}

// TestEsperPPORoundCountsHostSyncs: a round on devices reports the host
// syncs of all of them (the rollout's and the update's) per env-epoch;
// on the CPU, none.
func TestEsperPPORoundCountsHostSyncs(t *testing.T) {
	for _, devs := range [][]tensor.Device{{tensor.CPU}, {tensor.Sim(0), tensor.Sim(1)}} {
		o := tinyPPO(t, 1, 1)
		o.Devices = devs
		r, err := NewEsperPPO(o)
		require.NoError(t, err)
		before := make([]uint64, len(devs))
		for i, d := range devs {
			before[i] = tensor.HostSyncs(d)
		}
		rr, err := r.Round()
		require.NoError(t, err)
		var all uint64
		for i, d := range devs {
			n := tensor.HostSyncs(d) - before[i]
			if !d.IsCPU() {
				require.Positive(t, n, "%v waited", d)
			}
			all += n
		}
		r.Close()
		if devs[0].IsCPU() {
			require.Zero(t, rr.HostSyncsPerEnvEpoch)
			continue
		}
		require.Equal(t, float64(all)/float64(o.Envs*o.MaxEpochs), rr.HostSyncsPerEnvEpoch)
		require.Contains(t, rr.Line(1), " host syncs/env-epoch")
	}
}

// TestEsperPPOOnDevicesIsTheCPUBitForBit is the device acceptance at the
// library's level: the same run with everything on the cpu, on sim, and
// with its environments spread over sim:0 and sim:1 (the policy on sim:0)
// writes the same policy file, byte for byte.
func TestEsperPPOOnDevicesIsTheCPUBitForBit(t *testing.T) {
	var want []byte
	for _, tc := range []struct {
		devs []tensor.Device
		envs []int
	}{
		{[]tensor.Device{tensor.CPU}, []int{2}},
		{[]tensor.Device{tensor.Sim(0)}, []int{2}},
		{[]tensor.Device{tensor.Sim(0), tensor.Sim(1)}, []int{1, 1}},
	} {
		o := tinyPPO(t, 2, 1)
		o.Devices = tc.devs
		r, err := NewEsperPPO(o)
		require.NoError(t, err)
		require.Equal(t, tc.envs, r.EnvsPerDevice())
		require.Equal(t, tc.devs[0], r.Net.Device())
		for i, e := range r.Envs {
			dev, err := nn.Device(e.Model())
			require.NoError(t, err)
			require.Equal(t, tc.devs[i%len(tc.devs)], dev, "env %d", i)
		}
		r.Close()
		got, _, err := runTinyPPO(t, o, "", 0)
		require.NoError(t, err)
		if want == nil {
			want = got
			continue
		}
		require.True(t, bytes.Equal(want, got), "the policy trained on %v differs from the cpu's", tc.devs)
	}
}

// TestEsperPPORefusesBadDevices: a device given twice, or one whose
// kernels are not registered (CUDA in a build without it), is refused
// before anything is built.
func TestEsperPPORefusesBadDevices(t *testing.T) {
	o := tinyPPO(t, 1, 1)
	o.Devices = []tensor.Device{tensor.Sim(0), tensor.Sim(1), tensor.Sim(0)}
	_, err := NewEsperPPO(o)
	require.ErrorContains(t, err, "device sim:0 is given twice")
	if _, err := kernels.Lookup(tensor.CUDA(0)); err != nil {
		o.Devices = []tensor.Device{tensor.CUDA(0)}
		_, err := NewEsperPPO(o)
		require.ErrorContains(t, err, "device cuda:0")
	}
}

// TestEsperPPOTaskPerEpisode: a run whose episodes each train on their
// own task instance, with the ACCURACY reward, two update passes and
// lower op floors, resumes bit for bit (an episode's data is a function
// of its number), reports its episodes and the update's figures per
// round, and its task seeds are distinct and far from the held-out ones.
func TestEsperPPOTaskPerEpisode(t *testing.T) {
	o := tinyPPO(t, 2, 4)
	o.TaskPerEpisode, o.Reward, o.Epochs, o.Kernel, o.Cosine, o.HostLR = true, RewardAccuracy, 2, 1, true, 0.05
	floors := tamiyo.ProbabilityFloorPerHead
	floors[leyline.HeadOp] = 0.01
	o.Floors = &floors
	want, wantReturns, err := runTinyPPO(t, o, "", 0)
	require.NoError(t, err)
	ck := filepath.Join(t.TempDir(), "ck")
	_, first, err := runTinyPPO(t, o, ck, 1)
	require.NoError(t, err)
	o.Resume = ck
	got, rest, err := runTinyPPO(t, o, "", 0)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(wantReturns), fmt.Sprint(append(first, rest...)), "per-round returns")
	require.True(t, bytes.Equal(want, got), "the resumed run's policy differs")

	o.Resume = ""
	r, err := NewEsperPPO(o)
	require.NoError(t, err)
	defer r.Close()
	require.Nil(t, r.Data, "a run of one task per episode shares no stream")
	_, err = r.Round()
	require.NoError(t, err)
	require.Equal(t, o.Envs, r.LastStats.Episodes)
	require.NotNil(t, r.LastUpdate)
	// Two passes over 2×3 transitions in minibatches of 1 (a quarter):
	// 12 steps unless the KL stopped the update.
	require.True(t, r.LastUpdate.Steps == 12 || r.LastUpdate.EarlyStopped, "steps %d", r.LastUpdate.Steps)
	// Each environment's episode ends in a terminal step: no bootstrap.
	buf := r.Trainer.Buffer()
	for env := 0; env < o.Envs; env++ {
		last := buf.At(env, buf.Len(env)-1)
		require.True(t, last.Done && !last.Truncated && last.Bootstrap == 0, "env %d's last step: done %v truncated %v bootstrap %v", env, last.Done, last.Truncated, last.Bootstrap)
	}
	share := 0.0
	for _, v := range r.LastStats.OpShare {
		share += v
	}
	require.InDelta(t, 1, share, 1e-12)

	seen := map[uint64]bool{}
	for _, seed := range []uint64{0, 4, 42} {
		for env := 0; env < 3; env++ {
			for ep := 1; ep <= 3; ep++ {
				s := TaskSeed(seed, env, ep)
				require.False(t, seen[s], "task seed %d repeats", s)
				require.Greater(t, s, uint64(1)<<32)
				seen[s] = true
			}
		}
	}
}

// TestEsperPPOPriors: Priors move a new policy's logits by the prior
// (PRUNE's down by 2 and conv_light's up by 1 here, every other option
// unchanged), the same on the test device as on the CPU; a non-finite
// prior, one of the wrong size and one on the slot head are refused.
func TestEsperPPOPriors(t *testing.T) {
	po := tamiyo.PolicyOptions{Hidden: 16, GATHidden: 8, GATHeads: 2, HeadHidden: 16, NoDropout: true, Seed: 3, Device: testdevice.Device(t)}
	plain, err := tamiyo.NewPolicy(po)
	require.NoError(t, err)
	var priors [leyline.NumActionHeads][]float64
	priors[leyline.HeadOp] = make([]float64, leyline.NumOps)
	priors[leyline.HeadOp][leyline.OpPrune] = -2
	priors[leyline.HeadBlueprint] = make([]float64, leyline.NumBlueprints)
	priors[leyline.HeadBlueprint][leyline.BlueprintConvLight] = 1
	biased, err := newPolicyWithPriors(po, priors)
	require.NoError(t, err)
	bias := func(p *tamiyo.Policy, h int) []float64 {
		for _, n := range p.NamedParameters() {
			if n.Name == HeadBias(h) {
				return testdevice.F64(t, n.Var.Value)
			}
		}
		t.Fatalf("no %s", HeadBias(h))
		return nil
	}
	for h := range priors {
		if h == leyline.HeadSlot {
			continue
		}
		b0, b1 := bias(plain, h), bias(biased, h)
		for i := range b0 {
			want := b0[i]
			if priors[h] != nil {
				want += priors[h][i]
			}
			require.InDelta(t, want, b1[i], 1e-7, "%s option %d", leyline.HeadNames[h], i)
		}
	}
	for _, n := range biased.NamedParameters() {
		require.Equal(t, testdevice.Device(t), n.Var.Value.Device(), n.Name)
	}
	bad := priors
	bad[leyline.HeadOp] = []float64{math.Inf(1), 0, 0, 0, 0, 0}
	_, err = newPolicyWithPriors(po, bad)
	require.Error(t, err)
	bad = priors
	bad[leyline.HeadOp] = []float64{1}
	_, err = newPolicyWithPriors(po, bad)
	require.Error(t, err)
	bad = priors
	bad[leyline.HeadSlot] = []float64{1, 0, 0}
	_, err = newPolicyWithPriors(po, bad)
	require.Error(t, err)
}
