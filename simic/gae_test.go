package simic

import (
	"math"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// Golden values from an independent Python transcription of
// esper-reference.md §5.3 (γ 0.9, λ 0.8; a terminal at t=2, a truncation
// with bootstrap 0.7 at t=4, and the end of the data at t=5).
func TestGAEGolden(t *testing.T) {
	steps := []GAEStep{
		{Reward: 1.0, Value: 0.2},
		{Reward: 0.5, Value: 0.4},
		{Reward: -1.0, Value: 0.1, Done: true},
		{Reward: 2.0, Value: -0.3},
		{Reward: 0.0, Value: 0.5, Truncated: true, Bootstrap: 0.7},
		{Reward: 1.5, Value: 0.6},
	}
	wantA := []float64{0.72656, -0.602, -1.1, 2.8436, 0.13, 0.9}
	wantR := []float64{0.92656, -0.202, -1.0, 2.5436, 0.63, 1.5}
	wantTD := []float64{1.16, 0.19, -1.1, 2.75, 0.13, 0.9}
	ret := make([]float64, len(steps))
	td := make([]float64, len(steps))
	adv, err := GAE(steps, 0.9, 0.8, nil, ret, td)
	if err != nil {
		t.Fatal(err)
	}
	for i := range steps {
		if !near(adv[i], wantA[i], 1e-12) || !near(ret[i], wantR[i], 1e-12) || !near(td[i], wantTD[i], 1e-12) {
			t.Errorf("t=%d: A %v R %v δ %v, want %v %v %v", i, adv[i], ret[i], td[i], wantA[i], wantR[i], wantTD[i])
		}
	}
}

func TestGAETerminalResetVersusTruncationBootstrap(t *testing.T) {
	base := []GAEStep{{Reward: 1, Value: 0.5}, {Reward: 1, Value: 0.5}}
	term := append([]GAEStep(nil), base...)
	term[1].Done = true
	trunc := append([]GAEStep(nil), base...)
	trunc[1].Truncated, trunc[1].Bootstrap = true, 2
	a1, _ := GAE(term, 0.99, 0.95, nil, nil, nil)
	a2, _ := GAE(trunc, 0.99, 0.95, nil, nil, nil)
	if !near(a1[1], 0.5, 1e-12) { // r − V, nothing after a terminal
		t.Errorf("terminal advantage %v, want 0.5", a1[1])
	}
	if !near(a2[1], 1+0.99*2-0.5, 1e-12) { // r + γ·bootstrap − V
		t.Errorf("truncated advantage %v, want %v", a2[1], 1+0.99*2-0.5)
	}
	// A truncation in the middle does not leak the next episode's
	// advantage into the previous one.
	mid := []GAEStep{{Reward: 0, Value: 0, Truncated: true, Bootstrap: 1}, {Reward: 100, Value: 0}}
	a3, _ := GAE(mid, 1, 1, nil, nil, nil)
	if a3[0] != 1 {
		t.Errorf("advantage before a mid-row truncation %v, want 1", a3[0])
	}
}

func TestGAEParameterValidation(t *testing.T) {
	s := []GAEStep{{Reward: 1}}
	for _, c := range []struct{ g, l float64 }{{0, 0.9}, {1.01, 0.9}, {-1, 0.9}, {0.9, -0.1}, {0.9, 1.1}, {math.NaN(), 0.5}} {
		if _, err := GAE(s, c.g, c.l, nil, nil, nil); err == nil {
			t.Errorf("γ %v λ %v accepted", c.g, c.l)
		}
	}
	if _, err := GAE(s, 1, 0.98, nil, nil, nil); err != nil {
		t.Errorf("γ = 1 must be valid: %v", err)
	}
	if _, err := GAE([]GAEStep{{Reward: math.NaN()}}, 0.9, 0.9, nil, nil, nil); err == nil {
		t.Error("NaN reward accepted")
	}
	if _, err := GAE(s, 0.9, 0.9, make([]float64, 2), nil, nil); err == nil {
		t.Error("wrong output length accepted")
	}
}

func TestBufferComputeGAEDenormalisesValues(t *testing.T) {
	b, _ := NewBuffer[int](1, 3)
	for i, tr := range []Transition[int]{
		{Reward: 1, Value: 0.5}, {Reward: 2, Value: 0.25}, {Reward: 0, Value: 1, Truncated: true, Bootstrap: 0.75},
	} {
		tr.Obs = i
		if err := b.Add(0, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.ComputeGAE(0.9, 0.8, 4); err != nil {
		t.Fatal(err)
	}
	want, _ := GAE([]GAEStep{{Reward: 1, Value: 2}, {Reward: 2, Value: 1}, {Reward: 0, Value: 4, Truncated: true, Bootstrap: 3}}, 0.9, 0.8, nil, nil, nil)
	for i := range want {
		if !near(b.Advantage(0, i), want[i], 1e-12) {
			t.Errorf("t=%d advantage %v, want %v (values × 4)", i, b.Advantage(0, i), want[i])
		}
	}
	if err := b.ComputeGAE(0.9, 0.8, 0); err == nil {
		t.Error("zero value scale accepted")
	}
}
