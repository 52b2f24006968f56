package optim_test

import (
	"errors"
	"math"
	"testing"

	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

func TestSchedules(t *testing.T) {
	cos := func(base, min float64, tmax, e int) float64 {
		return min + (base-min)*(1+math.Cos(math.Pi*float64(e)/float64(tmax)))/2
	}
	cases := []struct {
		name string
		s    optim.Schedule
		want func(e int) float64
	}{
		{"constant", optim.Constant{Base: 0.3}, func(int) float64 { return 0.3 }},
		{"step", optim.StepLR{Base: 1, StepSize: 3, Gamma: 0.5}, func(e int) float64 { return math.Pow(0.5, float64(e/3)) }},
		{"step default gamma", optim.StepLR{Base: 2, StepSize: 10}, func(e int) float64 { return 2 * math.Pow(0.1, float64(e/10)) }},
		{"cosine", optim.Cosine{Base: 0.1, Min: 0.001, TMax: 20}, func(e int) float64 { return cos(0.1, 0.001, 20, e) }},
		{"warmup cosine", optim.Warmup{Inner: optim.Cosine{Base: 0.1, TMax: 30}, Steps: 4, StartFactor: 0.1}, func(e int) float64 {
			f := 1.0
			if e < 4 {
				f = 0.1 + 0.9*float64(e)/4
			}
			return cos(0.1, 0, 30, e) * f
		}},
		{"warmup defaults", optim.Warmup{Inner: optim.Constant{Base: 0.9}}, func(e int) float64 {
			return 0.9 * math.Min(1, 1.0/3+(2.0/3)*float64(e)/5)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := optim.ValidateSchedule(c.s); err != nil {
				t.Fatal(err)
			}
			for e := 0; e <= 45; e++ {
				if got, want := c.s.LR(e), c.want(e); math.Abs(got-want) > 1e-15*math.Max(1, want) {
					t.Fatalf("epoch %d: %v, want %v", e, got, want)
				}
			}
		})
	}
	// Known PyTorch values: CosineAnnealingLR(lr=0.1, T_max=10) at 5 is
	// 0.05 and at 10 is eta_min; StepLR(lr=0.1, 30, 0.1) at 30 is 0.01.
	if got := (optim.Cosine{Base: 0.1, TMax: 10}).LR(5); math.Abs(got-0.05) > 1e-15 {
		t.Errorf("cosine at half period %v", got)
	}
	if got := (optim.Cosine{Base: 0.1, Min: 0.002, TMax: 10}).LR(10); math.Abs(got-0.002) > 1e-15 {
		t.Errorf("cosine at TMax %v", got)
	}
	if got := (optim.StepLR{Base: 0.1, StepSize: 30}).LR(30); math.Abs(got-0.01) > 1e-15 {
		t.Errorf("step at 30 %v", got)
	}
	if got := (optim.Warmup{Inner: optim.Constant{Base: 1}, Steps: 10, StartFactor: 0.5}).LR(-3); got != 0.5 {
		t.Errorf("negative epoch %v", got)
	}
}

func TestScheduleValidation(t *testing.T) {
	for name, s := range map[string]optim.Schedule{
		"negative constant":  optim.Constant{Base: -1},
		"step size zero":     optim.StepLR{Base: 0.1},
		"gamma above one":    optim.StepLR{Base: 0.1, StepSize: 2, Gamma: 1.5},
		"cosine no period":   optim.Cosine{Base: 0.1},
		"cosine NaN min":     optim.Cosine{Base: 0.1, Min: math.NaN(), TMax: 3},
		"warmup nil inner":   optim.Warmup{},
		"warmup negative":    optim.Warmup{Inner: optim.Constant{Base: 1}, Steps: -1},
		"warmup factor":      optim.Warmup{Inner: optim.Constant{Base: 1}, StartFactor: 2},
		"warmup inner error": optim.Warmup{Inner: optim.Cosine{Base: 1}},
	} {
		if err := optim.ValidateSchedule(s); !errors.Is(err, optim.ErrOptions) {
			t.Errorf("%s: %v, want ErrOptions", name, err)
		}
	}
}

func TestApplySchedule(t *testing.T) {
	defer failOnPanic(t)
	ps := randParams(t, tensor.NewRNG(51), tensor.F32, []int{4})
	opt, err := optim.NewAdamW(ps, optim.AdamWOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := optim.StepLR{Base: 0.2, StepSize: 2, Gamma: 0.5}
	for e, want := range []float64{0.2, 0.2, 0.1, 0.1, 0.05} {
		optim.Apply(opt, s, e)
		if opt.LR() != want || item(t, opt.StateDict()["lr"]) != want {
			t.Errorf("epoch %d: LR %v, want %v", e, opt.LR(), want)
		}
	}
}
