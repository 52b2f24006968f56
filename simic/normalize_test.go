package simic

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/esper-go/esper/tensor"
)

func TestRunningMeanStdWelfordThenEMA(t *testing.T) {
	r, err := NewRunningMeanStd(2, NormOptions{WelfordSamples: 4})
	if err != nil {
		t.Fatal(err)
	}
	if r.Count() != 0 {
		t.Fatalf("count starts at %d, want 0", r.Count())
	}
	// Before any sample: raw values, clipped.
	if out, _ := r.Normalize([]float64{3, 50}); out[0] != 3 || out[1] != 10 {
		t.Fatalf("normalise before data: %v", out)
	}
	// Two batches merged exactly equal the statistics of all four.
	r.Update([][]float64{{1, 10}, {2, 20}})
	r.Update([][]float64{{3, 30}, {4, 40}})
	if m, v := r.Mean(), r.Var(); !near(m[0], 2.5, 1e-12) || !near(v[0], 1.25, 1e-12) || !near(v[1], 125, 1e-9) {
		t.Fatalf("exact phase mean %v var %v, want 2.5/1.25 and 125", m, v)
	}
	// Past WelfordSamples: EMA with momentum 0.99.
	r.Update([][]float64{{102.5, 25}})
	if m := r.Mean(); !near(m[0], 0.99*2.5+0.01*102.5, 1e-12) {
		t.Fatalf("EMA mean %v, want %v", m[0], 0.99*2.5+0.01*102.5)
	}
	if r.Count() != 5 {
		t.Fatalf("count %d, want 5", r.Count())
	}
	out, _ := r.Normalize([]float64{1e6, -1e6})
	if out[0] != 10 || out[1] != -10 {
		t.Fatalf("output not clipped to ±10: %v", out)
	}
	if err := r.Update([][]float64{{1}}); err == nil {
		t.Fatal("wrong width accepted")
	}
	if err := r.Update([][]float64{{math.NaN(), 0}}); err == nil {
		t.Fatal("NaN accepted")
	}
}

func TestNormalizerStateRoundTrip(t *testing.T) {
	r, _ := NewRunningMeanStd(3, NormOptions{})
	r.Update([][]float64{{1, 2, 3}, {4, 5, 7}})
	blob, err := json.Marshal(r.State())
	if err != nil {
		t.Fatal(err)
	}
	var s NormState
	if err := json.Unmarshal(blob, &s); err != nil {
		t.Fatal(err)
	}
	r2, _ := NewRunningMeanStd(3, NormOptions{})
	if err := r2.LoadState(s); err != nil {
		t.Fatal(err)
	}
	a, _ := r.Normalize([]float64{0.5, 1, 9})
	b, _ := r2.Normalize([]float64{0.5, 1, 9})
	for i := range a {
		if a[i] != b[i] || r.Count() != r2.Count() {
			t.Fatalf("round trip differs: %v vs %v", a, b)
		}
	}
	if err := r2.LoadState(NormState{Count: 1, Mean: []float64{0}, Var: []float64{1}}); !errors.Is(err, ErrNormalizerState) {
		t.Fatalf("wrong-width state: %v", err)
	}

	rn, _ := NewRewardNormalizer(NormOptions{})
	for _, x := range []float64{1, 3, -2, 5} {
		rn.Observe(x)
	}
	rn2, _ := NewRewardNormalizer(NormOptions{})
	if err := rn2.LoadState(rn.State()); err != nil {
		t.Fatal(err)
	}
	if rn.Normalize(2) != rn2.Normalize(2) || rn2.Count() != 4 {
		t.Fatalf("reward normaliser round trip: %v vs %v", rn.Normalize(2), rn2.Normalize(2))
	}

	vn, _ := NewValueNormalizer(NormOptions{})
	vn.Update([]float64{1, 5, 9})
	vn2, _ := NewValueNormalizer(NormOptions{})
	if err := vn2.LoadState(vn.State()); err != nil {
		t.Fatal(err)
	}
	if vn.Std() != vn2.Std() {
		t.Fatalf("value normaliser round trip: %v vs %v", vn.Std(), vn2.Std())
	}
	if err := vn2.LoadState(NormState{Count: -1, Mean: []float64{0}, Var: []float64{1}}); err == nil {
		t.Fatal("negative count accepted")
	}
}

func TestRewardNormalizer(t *testing.T) {
	rn, err := NewRewardNormalizer(NormOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rn.Count() != 0 {
		t.Fatal("count does not start at 0")
	}
	// The first sample comes back raw, clipped to ±10.
	if got, _ := rn.Observe(25); got != 10 {
		t.Fatalf("first sample 25 → %v, want 10 (raw, clipped)", got)
	}
	rn2, _ := NewRewardNormalizer(NormOptions{})
	if got, _ := rn2.Observe(-3); got != -3 {
		t.Fatalf("first sample −3 → %v, want −3", got)
	}
	// Then reward/std without subtracting the mean: samples 2 and 4 have
	// sample std √2, so 4 → 4/√2.
	rn3, _ := NewRewardNormalizer(NormOptions{})
	rn3.Observe(2)
	got, _ := rn3.Observe(4)
	if !near(got, 4/(math.Sqrt2+1e-8), 1e-9) {
		t.Fatalf("second sample → %v, want %v", got, 4/math.Sqrt2)
	}
	if _, err := rn3.Observe(math.Inf(1)); err == nil || rn3.Count() != 2 {
		t.Fatal("Inf reward accepted or counted")
	}
}

func TestValueNormalizer(t *testing.T) {
	vn, _ := NewValueNormalizer(NormOptions{})
	if vn.Std() != 1 || vn.Count() != 0 {
		t.Fatalf("fresh value normaliser: std %v count %d", vn.Std(), vn.Count())
	}
	vn.Update([]float64{2, 4, 6, 8})
	std := math.Sqrt(5 + DefaultNormEpsilon) // population variance of 2,4,6,8
	if !near(vn.Std(), std, 1e-12) {
		t.Fatalf("std %v, want %v", vn.Std(), std)
	}
	// Scaling only: no centring.
	if !near(vn.Normalize(10), 10/std, 1e-12) || !near(vn.Denormalize(vn.Normalize(7)), 7, 1e-12) {
		t.Fatal("Normalize/Denormalize are not a pure scale")
	}
	// Exact for the first 32 samples, then EMA: a batch of wildly
	// different returns only nudges the scale.
	big := make([]float64, 40)
	for i := range big {
		big[i] = float64(i % 2 * 2) // var 1
	}
	vn2, _ := NewValueNormalizer(NormOptions{})
	vn2.Update(big)                    // 40 samples ≥ 32: exact (count was 0)
	vn2.Update([]float64{-1000, 1000}) // EMA now
	// EMA: 0.99·1 + 0.01·(batch var 1e6 + 0.99·(mean shift 1)²); an
	// exact merge would give a variance of about 47 600.
	want := math.Sqrt(0.99*1 + 0.01*(1e6+0.99*1) + DefaultNormEpsilon)
	if s := vn2.Std(); !near(s, want, 1e-9) {
		t.Fatalf("EMA phase std %v, want %v", s, want)
	}
}

func TestNormOptionsValidation(t *testing.T) {
	for _, o := range []NormOptions{{Momentum: 1}, {Momentum: -0.5}, {Clip: -1}, {Epsilon: -1}} {
		if _, err := NewRunningMeanStd(1, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := NewRunningMeanStd(0, NormOptions{}); err == nil {
		t.Error("dim 0 accepted")
	}
}

// TestRewardNormalizerStateIsExact: the reward normaliser's state restores
// its sum of squares bit for bit, through JSON, where the sample variance
// alone would not.
func TestRewardNormalizerStateIsExact(t *testing.T) {
	rn, _ := NewRewardNormalizer(NormOptions{})
	rng := tensor.NewRNG(1)
	lossy := 0
	for i := 1; i <= 200; i++ {
		if _, err := rn.Observe(3 * rng.NormFloat64()); err != nil {
			t.Fatal(err)
		}
		blob, err := json.Marshal(rn.State())
		if err != nil {
			t.Fatal(err)
		}
		var s NormState
		if err := json.Unmarshal(blob, &s); err != nil {
			t.Fatal(err)
		}
		rn2, _ := NewRewardNormalizer(NormOptions{})
		if err := rn2.LoadState(s); err != nil {
			t.Fatal(err)
		}
		if rn2.m2 != rn.m2 || rn2.mean != rn.mean || rn2.count != rn.count {
			t.Fatalf("after %d rewards: m2 %v, want %v", i, rn2.m2, rn.m2)
		}
		if s.Count >= 2 && s.Var[0]*float64(s.Count-1) != rn.m2 {
			lossy++
		}
	}
	if lossy == 0 {
		t.Fatal("no case where the variance alone loses bits: the test proves nothing")
	}
	rn2, _ := NewRewardNormalizer(NormOptions{})
	if err := rn2.LoadState(NormState{Count: 3, Mean: []float64{0}, Var: []float64{1}, M2: []float64{-1}}); !errors.Is(err, ErrNormalizerState) {
		t.Fatalf("negative M2: %v", err)
	}
}
