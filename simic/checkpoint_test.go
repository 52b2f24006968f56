package simic

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/esper-go/esper/internal/testdevice"
	"math"
	"testing"

	"github.com/esper-go/esper/nn"
	"github.com/esper-go/esper/tensor"
	"github.com/esper-go/esper/tensor/safetensors"
)

// scriptedTrainer is a trainer over two scriptedEnvs of 3-step episodes
// with 5-step rollouts (so a rollout ends inside an episode), reward
// normalisation and shuffled minibatches: every piece of state a
// checkpoint has to carry takes part.
func scriptedTrainer(t *testing.T, episodic bool) (*Trainer[[]float32], *MLPPolicy) {
	t.Helper()
	vec, err := NewVecEnv(2, func(int) (Env[[]float32], error) { return &scriptedEnv{length: 3}, nil })
	if err != nil {
		t.Fatal(err)
	}
	pol, err := NewMLPPolicy(MLPPolicyOptions{ObsDim: 1, Spec: vec.Spec(), Hidden: []int{8}, Seed: 3, Device: testdevice.Device(t)})
	if err != nil {
		t.Fatal(err)
	}
	ppo, err := NewPPO[[]float32](pol, vec.Spec(), PPOOptions{Seed: 4, Epochs: 2, MinibatchSize: 4, NoKLStop: true, LR: 1e-2})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(ppo, vec, TrainerOptions[[]float32]{Steps: 5, NormalizeRewards: true, EpisodicRollouts: episodic})
	if err != nil {
		t.Fatal(err)
	}
	return tr, pol
}

// checkpoint is what a run writes to disk between iterations: the
// policy's and the optimizer's tensors and the trainer's state as JSON.
type checkpoint struct{ policy, optimizer, state []byte }

func saveCheckpoint(t *testing.T, tr *Trainer[[]float32], pol *MLPPolicy) checkpoint {
	t.Helper()
	var c checkpoint
	var pb, ob bytes.Buffer
	psd, err := nn.HostStateDict(pol)
	if err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Encode(&pb, psd, nil); err != nil {
		t.Fatal(err)
	}
	osd, err := hostStateDict(tr.PPO().Optimizer().StateDict())
	if err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Encode(&ob, osd, nil); err != nil {
		t.Fatal(err)
	}
	st, err := tr.State()
	if err != nil {
		t.Fatal(err)
	}
	if c.state, err = json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	c.policy, c.optimizer = pb.Bytes(), ob.Bytes()
	return c
}

func loadCheckpoint(t *testing.T, c checkpoint, tr *Trainer[[]float32], pol *MLPPolicy) {
	t.Helper()
	pf, err := safetensors.Decode(bytes.NewReader(c.policy), int64(len(c.policy)), "policy")
	if err != nil {
		t.Fatal(err)
	}
	psd, err := stateDictTo(pf.Tensors, pol.Device())
	if err != nil {
		t.Fatal(err)
	}
	if err := nn.LoadStateDict(pol, psd, true); err != nil {
		t.Fatal(err)
	}
	of, err := safetensors.Decode(bytes.NewReader(c.optimizer), int64(len(c.optimizer)), "optimizer")
	if err != nil {
		t.Fatal(err)
	}
	osd, err := stateDictTo(of.Tensors, pol.Device())
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.PPO().Optimizer().LoadStateDict(osd); err != nil {
		t.Fatal(err)
	}
	var st TrainerState
	if err := json.Unmarshal(c.state, &st); err != nil {
		t.Fatal(err)
	}
	if err := tr.LoadState(st); err != nil {
		t.Fatal(err)
	}
}

// iterate runs n iterations and returns their episode returns and
// losses, to compare runs by.
func iterate(t *testing.T, tr *Trainer[[]float32], n int) []float64 {
	t.Helper()
	var out []float64
	for i := 0; i < n; i++ {
		it, err := tr.Iterate()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range it.Episodes {
			out = append(out, e.Return)
		}
		out = append(out, it.Update.PolicyLoss, it.Update.ValueLoss)
	}
	return out
}

func sameParams(t *testing.T, a, b *MLPPolicy) bool {
	pa, pb := a.Parameters(), b.Parameters()
	for i := range pa {
		va, vb := testdevice.F64(t, pa[i].Value), testdevice.F64(t, pb[i].Value)
		for j := range va {
			if math.Float64bits(va[j]) != math.Float64bits(vb[j]) {
				return false
			}
		}
	}
	return true
}

// TestTrainerResumeIsBitwise: with EpisodicRollouts, a trainer stopped
// after k iterations, checkpointed, and rebuilt from the checkpoint alone
// (new environments, policy, PPO and trainer) runs the remaining
// iterations exactly as the uninterrupted one: same returns and losses,
// bit-identical parameters.
func TestTrainerResumeIsBitwise(t *testing.T) {
	const total = 4
	ref, refPol := scriptedTrainer(t, true)
	want := iterate(t, ref, total)
	for k := 1; k < total; k++ {
		a, aPol := scriptedTrainer(t, true)
		got := iterate(t, a, k)
		c := saveCheckpoint(t, a, aPol)
		b, bPol := scriptedTrainer(t, true)
		loadCheckpoint(t, c, b, bPol)
		got = append(got, iterate(t, b, total-k)...)
		if len(got) != len(want) {
			t.Fatalf("stopped after %d: %d figures, want %d", k, len(got), len(want))
		}
		for i := range want {
			if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
				t.Fatalf("stopped after %d: figure %d is %v, want %v", k, i, got[i], want[i])
			}
		}
		if !sameParams(t, bPol, refPol) {
			t.Fatalf("stopped after %d: the resumed policy differs", k)
		}
		if b.EnvSteps() != ref.EnvSteps() || b.PPO().Updates() != ref.PPO().Updates() {
			t.Fatalf("stopped after %d: counters %d/%d, want %d/%d", k, b.EnvSteps(), b.PPO().Updates(), ref.EnvSteps(), ref.PPO().Updates())
		}
	}
}

// TestEpisodicRolloutsEndAtEpisodeBoundaries: a 5-step rollout of 3-step
// episodes reports the finished episode, drops the unfinished one and
// leaves every environment at the start of a new episode; without the
// option the unfinished episode goes on in the next rollout.
func TestEpisodicRolloutsEndAtEpisodeBoundaries(t *testing.T) {
	for _, episodic := range []bool{true, false} {
		tr, _ := scriptedTrainer(t, episodic)
		eps, err := tr.Collect()
		if err != nil {
			t.Fatal(err)
		}
		if len(eps) != 2 || eps[0].Length != 3 || eps[1].Length != 3 {
			t.Fatalf("episodic %v: episodes %+v, want one of 3 steps per env", episodic, eps)
		}
		wantObs := float32(2) // two steps into the second episode
		if episodic {
			wantObs = 0
		}
		for i, o := range tr.obs {
			if o[0] != wantObs {
				t.Fatalf("episodic %v: env %d observes %v after the rollout, want %v", episodic, i, o, wantObs)
			}
		}
		if _, err := tr.Collect(); err != nil {
			t.Fatal(err)
		}
		if got := tr.Buffer().At(0, 0).Obs[0]; got != wantObs {
			t.Fatalf("episodic %v: the next rollout starts from %v, want %v", episodic, got, wantObs)
		}
	}
}

// TestTrainerLoadStateChecksFirst: a state that does not fit the trainer
// is refused whole.
func TestTrainerLoadStateChecksFirst(t *testing.T) {
	tr, _ := scriptedTrainer(t, true)
	iterate(t, tr, 1)
	good, err := tr.State()
	if err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*TrainerState){
		"bad generator":        func(s *TrainerState) { s.Rand = []byte("pcg:short") },
		"no reward normaliser": func(s *TrainerState) { s.RewardNorm = nil },
		"negative updates":     func(s *TrainerState) { s.Updates = -1 },
		"bad value normaliser": func(s *TrainerState) { s.ValueNorm.Var = []float64{-1} },
	} {
		s := good
		rn := *good.RewardNorm
		s.RewardNorm = &rn
		mod(&s)
		fresh, _ := scriptedTrainer(t, true)
		before, _ := fresh.State()
		if err := fresh.LoadState(s); !errors.Is(err, ErrTrainerState) {
			t.Fatalf("%s: %v", name, err)
		}
		after, _ := fresh.State()
		if !bytes.Equal(mustJSON(t, before), mustJSON(t, after)) {
			t.Fatalf("%s: a refused state changed the trainer", name)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPPODrawsTensorRNGStream: the agent's generator is still the stream
// of tensor.NewRNG(seed), so runs without checkpoints are unchanged.
func TestPPODrawsTensorRNGStream(t *testing.T) {
	tr, _ := scriptedTrainer(t, true)
	want := tensor.NewRNG(tr.PPO().Options().Seed)
	for i := 0; i < 8; i++ {
		if a, b := tr.PPO().Rand().Uint64(), want.Uint64(); a != b {
			t.Fatalf("draw %d: %x, want %x", i, a, b)
		}
	}
}
