package optim_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/esper-go/esper/autograd"
	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/optim"
	"github.com/esper-go/esper/tensor"
)

func TestAdamWMatchesReference(t *testing.T) {
	defer failOnPanic(t)
	cases := []struct {
		name string
		o    optim.AdamWOptions
	}{
		{"defaults", optim.AdamWOptions{}},
		{"tuned", optim.AdamWOptions{LR: 0.01, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.1}},
		{"no weight decay", optim.AdamWOptions{LR: 0.05, NoWeightDecay: true}},
	}
	for _, dt := range []tensor.DType{tensor.F64, tensor.F32} {
		for ci, c := range cases {
			t.Run(fmt.Sprintf("%v/%s", dt, c.name), func(t *testing.T) {
				defer failOnPanic(t)
				rng := tensor.NewRNG(uint64(200 + ci))
				ps := randParams(t, rng, dt, refShapes...)
				opt, err := optim.NewAdamW(ps, c.o)
				if err != nil {
					t.Fatal(err)
				}
				eff := opt.Options()
				ref := &refAdamW{lr: eff.LR, beta1: eff.Beta1, beta2: eff.Beta2, eps: eff.Eps, wd: eff.WeightDecay}
				if c.o.NoWeightDecay && ref.wd != 0 {
					t.Fatalf("NoWeightDecay left WeightDecay %v", ref.wd)
				}
				want := values(t, ps)
				for step := 1; step <= 5; step++ {
					if step == 3 {
						opt.SetLR(eff.LR * 0.3)
						ref.lr = eff.LR * 0.3
					}
					gs := randGrads(rng, ps)
					opt.ZeroGrad()
					setGrads(t, ps, gs)
					opt.Step()
					ref.update(want, gs)
					for i, p := range ps {
						if e := relErr(f64(t, p.Value), want[i]); e > refTol(dt) {
							t.Fatalf("step %d param %d %v: rel err %.3g > %.3g", step, i, p.Shape(), e, refTol(dt))
						}
					}
				}
				sd := opt.StateDict()
				for i, k := range []string{"exp_avg." + dt.String(), "exp_avg_sq." + dt.String()} {
					st := sd[k]
					if st == nil || st.DType() != dt || st.Numel() != opt.Arena().Len() {
						t.Fatalf("state %q: %v", k, st)
					}
					var flat []float64
					for j := range ps {
						if i == 0 {
							flat = append(flat, ref.m[j]...)
						} else {
							flat = append(flat, ref.v[j]...)
						}
					}
					// The moments see every rounding of the update, so a
					// factor rounded to float32 shows here first: 1−β2 must
					// be formed in float64 (float32(1−float32(0.999)) is off
					// by 1.3e-5), as PyTorch forms its Python-float scalars.
					if e := relErr(f64(t, st), flat); e > refTol(dt) {
						t.Errorf("state %q: rel err %.3g > %.3g (a float32-rounded 1−β gives 1.3e-5 for β2 = 0.999)", k, e, refTol(dt))
					}
				}
			})
		}
	}
}

func TestAdamWSkipIfAndStateDict(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(21)
	o := optim.AdamWOptions{LR: 0.01, WeightDecay: 0.05}
	ps := randParams(t, rng, tensor.F32, []int{33, 7}, []int{7})
	opt, err := optim.NewAdamW(ps, o)
	if err != nil {
		t.Fatal(err)
	}
	grads := [][][]float64{randGrads(rng, ps), randGrads(rng, ps), randGrads(rng, ps)}
	setGrads(t, ps, grads[0])
	opt.Step()

	// A skipped step changes nothing.
	before, sd := values(t, ps), opt.StateDict()
	setGrads(t, ps, grads[1])
	opt.StepSkipIf(testdevice.To(t, tensor.Full(tensor.F32, 1, 1)))
	if opt.StepCount() != 1 {
		t.Errorf("skipped step counted")
	}
	for i := range ps {
		if relErr(f64(t, ps[i].Value), before[i]) != 0 {
			t.Errorf("skipped step changed param %d", i)
		}
	}
	for _, k := range []string{"exp_avg.f32", "exp_avg_sq.f32"} {
		if relErr(f64(t, opt.StateDict()[k]), f64(t, sd[k])) != 0 {
			t.Errorf("skipped step changed %s", k)
		}
	}

	// Resume from the state dict in a second optimizer.
	for _, g := range grads[1:] {
		setGrads(t, ps, g)
		opt.Step()
	}
	qs := make([]*autograd.Var, len(ps))
	for i := range ps {
		qs[i] = autograd.Param(testdevice.To(t, tensor.FromFloat64s(tensor.F32, before[i], ps[i].Shape()...)))
	}
	opt2, err := optim.NewAdamW(qs, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := opt2.LoadStateDict(sd); err != nil {
		t.Fatal(err)
	}
	for _, g := range grads[1:] {
		setGrads(t, qs, g)
		opt2.Step()
	}
	for i := range qs {
		if e := relErr(f64(t, qs[i].Value), f64(t, ps[i].Value)); e != 0 {
			t.Errorf("resumed param %d differs: rel err %.3g", i, e)
		}
	}
	delete(sd, "exp_avg_sq.f32")
	if err := opt2.LoadStateDict(sd); err == nil {
		t.Error("LoadStateDict without exp_avg_sq succeeded")
	}

	opt2.ResetState()
	if opt2.StepCount() != 0 {
		t.Errorf("StepCount %d after ResetState", opt2.StepCount())
	}
	for _, v := range f64(t, opt2.StateDict()["exp_avg_sq.f32"]) {
		if v != 0 {
			t.Fatal("ResetState left a non-zero moment")
		}
	}
}

func TestAdamWCaptureReplay(t *testing.T) {
	defer failOnPanic(t)
	rng := tensor.NewRNG(22)
	ps := randParams(t, rng, tensor.F32, []int{100, 40}, []int{40})
	opt, err := optim.NewAdamW(ps, optim.AdamWOptions{LR: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	eff := opt.Options()
	ref := &refAdamW{lr: eff.LR, beta1: eff.Beta1, beta2: eff.Beta2, eps: eff.Eps, wd: eff.WeightDecay}
	want := values(t, ps)
	g := capture(t, opt.Step)
	if g.Len() != 2 {
		t.Errorf("captured AdamW step has %d launches, want 2", g.Len())
	}
	// The bias corrections must follow the replayed step counter.
	for r := 0; r < 4; r++ {
		if r == 3 {
			opt.SetLR(0.001)
			ref.lr = 0.001
		}
		gs := randGrads(rng, ps)
		setGrads(t, ps, gs)
		g.Replay()
		ref.update(want, gs)
		for i, p := range ps {
			if e := relErr(f64(t, p.Value), want[i]); e > 1e-5 {
				t.Fatalf("replay %d param %d: rel err %.3g", r, i, e)
			}
		}
	}
}

func TestAdamWOptions(t *testing.T) {
	ps := func() []*autograd.Var { return randParams(t, tensor.NewRNG(23), tensor.F32, []int{2}) }
	bad := []struct {
		name string
		o    optim.AdamWOptions
	}{
		{"negative lr", optim.AdamWOptions{LR: -1}},
		{"beta1 one", optim.AdamWOptions{Beta1: 1}},
		{"beta2 above one", optim.AdamWOptions{Beta2: 1.5}},
		{"negative beta", optim.AdamWOptions{Beta1: -0.1}},
		{"negative eps", optim.AdamWOptions{Eps: -1e-8}},
		{"NaN eps", optim.AdamWOptions{Eps: math.NaN()}},
		{"negative weight decay", optim.AdamWOptions{WeightDecay: -0.01}},
		{"NoWeightDecay with a weight decay", optim.AdamWOptions{WeightDecay: 0.1, NoWeightDecay: true}},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if _, err := optim.NewAdamW(ps(), c.o); !errors.Is(err, optim.ErrOptions) {
				t.Errorf("NewAdamW: %v, want ErrOptions", err)
			}
		})
	}
	opt, err := optim.NewAdamW(ps(), optim.AdamWOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := optim.AdamWOptions{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	if got := opt.Options(); got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	if _, err := optim.NewAdamWOnArena(nil, optim.AdamWOptions{}); err == nil {
		t.Error("NewAdamWOnArena(nil) succeeded")
	}
}
