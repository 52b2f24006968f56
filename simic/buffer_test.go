package simic

import (
	"errors"
	"math"
	"testing"
)

func addN(t *testing.T, b *Buffer[int], env, n int, reward float64) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := b.Add(env, Transition[int]{Obs: i, Actions: []int{0}, LogProbs: []float64{-0.7}, Reward: reward, Value: 0.1}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBufferOverflowAndEnvRange(t *testing.T) {
	b, err := NewBuffer[int](2, 3)
	if err != nil {
		t.Fatal(err)
	}
	addN(t, b, 1, 3, 1)
	if err := b.Add(1, Transition[int]{}); !errors.Is(err, ErrBufferFull) {
		t.Fatalf("add beyond MaxSteps: %v, want ErrBufferFull", err)
	}
	if err := b.Add(2, Transition[int]{}); err == nil {
		t.Fatal("env 2 of 2 accepted")
	}
	if err := b.ClearEnv(-1); err == nil {
		t.Fatal("ClearEnv(-1) accepted")
	}
	if err := b.ClearEnv(1); err != nil || b.Len(1) != 0 {
		t.Fatalf("ClearEnv: %v, len %d", err, b.Len(1))
	}
	if _, err := NewBuffer[int](0, 3); err == nil {
		t.Fatal("zero environments accepted")
	}
}

// The buffer keeps its own copies (the analogue of storing detached
// tensors): callers may reuse their slices.
func TestBufferCopiesTransitions(t *testing.T) {
	b, _ := NewBuffer[int](1, 2)
	acts, lps, rel := []int{1, 2}, []float64{-1, -2}, []bool{true, false}
	masks := Masks{{true, true}, {false, true, true}}
	if err := b.Add(0, Transition[int]{Actions: acts, LogProbs: lps, Relevant: rel, Masks: masks}); err != nil {
		t.Fatal(err)
	}
	acts[0], lps[0], rel[0], masks[1][0] = 9, 9, false, true
	tr := b.At(0, 0)
	if tr.Actions[0] != 1 || tr.LogProbs[0] != -1 || !tr.Relevant[0] || tr.Masks[1][0] {
		t.Fatalf("stored transition changed with the caller's slices: %+v", tr)
	}
}

func TestMarkTerminalWithPenalty(t *testing.T) {
	b, _ := NewBuffer[int](2, 5)
	if ok, err := b.MarkTerminalWithPenalty(0, -10); ok || err != nil {
		t.Fatalf("empty env: applied=%v err=%v, want false, nil", ok, err)
	}
	if _, err := b.MarkTerminalWithPenalty(5, -10); err == nil {
		t.Fatal("invalid env accepted")
	}
	addN(t, b, 0, 4, 0.5)
	b.At(0, 3).Truncated = true
	ok, err := b.MarkTerminalWithPenalty(0, -10)
	if !ok || err != nil {
		t.Fatalf("applied=%v err=%v", ok, err)
	}
	for i := 0; i < 3; i++ {
		if r := b.At(0, i).Reward; r != RollbackForfeitReward {
			t.Errorf("reward %d = %v, want forfeited %v", i, r, RollbackForfeitReward)
		}
	}
	last := b.At(0, 3)
	if last.Reward != -10 || !last.Done || last.Truncated {
		t.Fatalf("last step %+v, want reward −10, done, not truncated", last)
	}
	if b.RollbackCount() != 1 || b.RollbackStepsZeroed() != 3 {
		t.Fatalf("counters %d/%d, want 1/3 (L−1 steps zeroed)", b.RollbackCount(), b.RollbackStepsZeroed())
	}
	// A panic on the first step of a new episode zeroes nothing but
	// still counts.
	addN(t, b, 0, 1, 0.5)
	if ok, _ := b.MarkTerminalWithPenalty(0, -3); !ok {
		t.Fatal("second rollback not applied")
	}
	if b.RollbackCount() != 2 || b.RollbackStepsZeroed() != 3 {
		t.Fatalf("counters %d/%d after a step-1 rollback, want 2/3", b.RollbackCount(), b.RollbackStepsZeroed())
	}
	if b.At(0, 3).Reward != -10 {
		t.Fatal("the previous episode's penalty was overwritten")
	}
	b.Reset()
	if b.RollbackCount() != 0 || b.RollbackStepsZeroed() != 0 || b.Total() != 0 {
		t.Fatal("Reset kept counters or transitions")
	}
}

func TestNormalizeAdvantages(t *testing.T) {
	b, _ := NewBuffer[int](2, 2)
	addN(t, b, 0, 2, 0)
	addN(t, b, 1, 2, 0)
	b.adv[0][0], b.adv[0][1], b.adv[1][0], b.adv[1][1] = 1, 2, 3, 4
	st := b.NormalizeAdvantages()
	std := math.Sqrt(5.0 / 3) // unbiased std of 1..4
	if !near(st.Mean, 2.5, 1e-12) || !near(st.Std, std, 1e-12) {
		t.Fatalf("stats %+v, want mean 2.5 std %v", st, std)
	}
	if !near(b.Advantage(1, 1), 1.5/(std+1e-8), 1e-12) {
		t.Fatalf("normalised A = %v", b.Advantage(1, 1))
	}
	before := b.Advantage(0, 0)
	st2 := b.NormalizeAdvantages()
	if !math.IsNaN(st2.Mean) || !math.IsNaN(st2.Std) || b.Advantage(0, 0) != before {
		t.Fatalf("second call not idempotent: %+v, A %v→%v", st2, before, b.Advantage(0, 0))
	}
	// A single transition: std 0, floored at 0.1, no NaN.
	one, _ := NewBuffer[int](1, 1)
	addN(t, one, 0, 1, 0)
	one.adv[0][0] = 3
	st3 := one.NormalizeAdvantages()
	if st3.Std != 0 || one.Advantage(0, 0) != 0 || math.IsNaN(one.Advantage(0, 0)) {
		t.Fatalf("single transition: %+v A %v", st3, one.Advantage(0, 0))
	}
	// The floor: near-identical advantages are not blown up.
	fl, _ := NewBuffer[int](1, 2)
	addN(t, fl, 0, 2, 0)
	fl.adv[0][0], fl.adv[0][1] = 1, 1.001
	fl.NormalizeAdvantages()
	if math.Abs(fl.Advantage(0, 1)) > 0.01 {
		t.Fatalf("std floor 0.1 not applied: %v", fl.Advantage(0, 1))
	}
}
